"""Chain labelling (POS tagging, chunking, named entities): first-order chain tasks as a package.

- :mod:`.kernels`: the maths (Φ, the layout of w) and the per-sentence numba kernels of
  Viterbi; :mod:`.records`: the batched kernels that build records, decode and list seen pairs;
  :mod:`.pruned_viterbi`: the pruned max-plus step for many labels.
- :mod:`.task`: :class:`~.task.SequenceTask`, the :class:`~demidcd.tasks.base.Task`.
- :mod:`.decoding` (k best, constrained decoding, label-scheme constraints), :mod:`.confidence`
  (max-marginals and margins), :mod:`.marginals` (forward-backward: marginals and the CRF
  gradient), :mod:`.chunks` (chunks and conlleval's scores).
- Featurizers: :mod:`.features` (the built-in templates; :mod:`.feature_counts`,
  :mod:`.feature_rows`, :mod:`.type_tables` its counting, rows and per-type tables) and the
  CRF++/Wapiti templates (:mod:`.template`, :mod:`.template_language`, :mod:`.template_regex`,
  :mod:`.template_kernels`).
- :mod:`.spec`: the registry entries ``sequence``, ``chunking`` and ``ner`` (the CLI adapter),
  and :mod:`.stream`, their streaming ``predict``.
"""
