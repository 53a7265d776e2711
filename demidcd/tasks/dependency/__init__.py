"""First-order arc-factored labelled dependency parsing (``--task dependency``).

A sentence of n words is x = (x_0 = ROOT, x_1 … x_n); a structure is a head vector y with
y_d ∈ {0..n} \\ {d} for d = 1..n forming a tree rooted at 0 in which exactly one word has
head 0 (UD's rule: the CoNLL 2018 evaluator rejects a sentence with several), and a label
vector l with l_d ∈ {0..L−1} (DEPRELs; L = 0 for an unlabelled parser). The score factors
over labelled arcs (McDonald, Crammer & Pereira 2005; McDonald, Lerman & Pereira 2006):

    w·Φ(x, y, l) = Σ_{d=1..n} s(y_d, d, l_d),
    s(h, d, l) = Σ_{f ∈ F(x, h, d)} w[f] + Σ_{k ∈ G(x, h, d)} w[base(k) + l],

F the unlabelled arc features and G templates conjoined with the label (:mod:`.features`). A
label may sit on root arcs (h = 0), on the others, or both, as seen in training (UD: ``root``
only on the root arc and only there). Since labels do not interact across arcs,

    max_{y, l} w·Φ = max_y Σ_d s(y_d, d),   s(h, d) = max_{l allowed on h → d} s(h, d, l),

so the tree is decoded over s(h, d) (:mod:`.decoding`: Eisner or Chu-Liu-Edmonds, one root
child) and each arc keeps its argmax label.

The modules, bottom to top:

==============  ==============================================================================
``encoding``    sentences as flat arrays of hashed attributes (:class:`~.encoding.EncodedTrees`)
``decoding``    Eisner, Chu-Liu-Edmonds, decoding with given heads
``features``    the arc and label feature templates, the loss per word, the scoring of arcs
``kernels``     parse / records / score kernels over a batch (loss-augmented inference, φ)
``task``        :class:`~.task.DependencyTask`, the Task the learners train on
``spec``        the command line's adapter ``SPEC`` and the data helpers of the estimator
==============  ==============================================================================

The estimator is :class:`demidcd.estimators.dependency.DependencyParser`.
"""
