"""The one option table: every option of ``demidcd train`` (and the data options of the other
commands) is declared here once, with its type, default, help, tier and owner.

Generated from it: the argparse options of the CLI (``--help`` shows the ``basic`` tier,
``--help-all`` every option, each with the default from here), the estimators' keyword
arguments and their defaults, the defaults of :class:`~demidcd.solvers.common.SolverConfig`,
and ``demidcd learners NAME`` (the options a learner owns). A new option is one row here plus
the code that reads it.

``owners``: who reads the option: ``()`` every learner (solver options) or every task (data
options), else learner names (``dcd``, ``demi-dcd``, …) or task names (``chunking``, …).
``default``: the value the CLI and the library both use. ``None`` with a ``rule``: the default
depends on something else (the learner, the task, the data), and ``rule`` says how.
``cli_default``: only where the CLI cannot use the library's default, with the reason in
``rule`` (``threads``: a script must not take every core unasked; a command-line run should).
This module imports nothing of the package: every layer may read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, make_dataclass
from types import MappingProxyType
from typing import Any

BASIC, ADVANCED = "basic", "advanced"


def nonnegative(text: str) -> float:
    """argparse type of a finite number ≥ 0 (e.g. ``--ilp-time-limit``)."""
    import argparse

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number ≥ 0, got {text!r}")
    return v
DATA, LEARNER, OUTPUT = "data", "learner", "output"
TRAIN = ("train",)
DATA_COMMANDS = ("train", "evaluate", "predict", "evaluate-snapshots")


@dataclass(frozen=True)
class Option:
    """One option: ``name`` (the keyword argument), ``flag`` (the CLI spelling), ``type``
    (int, float, str, bool: a switch), ``default`` (see the module docstring), ``help`` (one
    line, without the default), ``tier`` (``basic``: ``--help``; ``advanced``: ``--help-all``),
    ``group`` (data, learner, output), ``owners``, ``choices``, ``metavar``, ``commands``
    (the subcommands that take it), ``rule`` (the default's rule or the reason the CLI differs),
    ``param`` (False: a CLI-only option, not an estimator keyword), ``const`` (not None: the
    value may be left out, and then is ``const``)."""

    name: str
    flag: str
    type: Callable[[str], Any] | type
    default: Any
    help: str
    tier: str = ADVANCED
    group: str = LEARNER
    owners: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    commands: tuple[str, ...] = TRAIN
    rule: str = ""
    cli_default: Any = None
    param: bool = True
    const: Any = None  # the value of the flag given without one (argparse's nargs="?")

    def default_text(self, cli: bool = True) -> str:
        """The default as ``--help`` shows it."""
        value = self.cli_default if cli and self.cli_default is not None else self.default
        if value is None:
            return self.rule or "none"
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return f"{text}; {self.rule}" if self.rule and self.cli_default is None else text


C_DEFAULT = 0.1
"""What ``C=None`` means (:func:`default_C`), except for feature dicts."""
C_DICTS = 0.3
"""What ``C=None`` means for a sequence estimator fitted on feature dicts: such dicts hold few
features per token (the sklearn-crfsuite tutorial's ~16, the built-in templates ~30-60), so the
weights must be larger and less regularisation pays. Chosen on CoNLL-2000 and CoNLL-2002
Spanish with the tutorial's dicts (benchmarks/README.md, the feature-dict runs of "Own
features")."""


def default_C(feature_kind: str | None = None) -> float:
    """``C`` when it is None (the ``C`` row's rule): :data:`C_DICTS` for ``feature_kind``
    ``"dict"`` (a sequence estimator fitted on feature dicts), else :data:`C_DEFAULT`."""
    return C_DICTS if feature_kind == "dict" else C_DEFAULT


DCD = ("dcd", "dcd-light", "demi-dcd", "ms-dcd")
SP_IPM = ("sp-ipm",)
SEQUENCE_TASKS = ("sequence", "chunking", "ner")
CRF = ("crf",)


def _o(*a: Any, **k: Any) -> Option:
    return Option(*a, **k)


OPTIONS: tuple[Option, ...] = (
    # -- data ----------------------------------------------------------------------------
    _o("train", "--train", str, None, "training data", BASIC, DATA, metavar="FILE",
       rule="the synthetic corpus", param=False),
    _o("dev", "--dev", str, None, "data scored in the log and at the end", BASIC, DATA,
       metavar="FILE", param=False),
    _o("test", "--test", str, None, "data scored at the end", BASIC, DATA, metavar="FILE",
       param=False),
    _o("split_test", "--split-test", float, None, "hold out a seeded random FRACTION of "
       "--train as the test set", ADVANCED, DATA, metavar="FRACTION", param=False),
    _o("task", "--task", str, "sequence", "what to learn", BASIC, DATA,
       choices=("sequence", "chunking", "ner", "entity-relation", "dependency"),
       commands=DATA_COMMANDS, rule="evaluate / predict: the model's", param=False),
    _o("format", "--format", str, "auto", "input format", BASIC, DATA,
       choices=("conllu", "columns", "conllx", "auto"), commands=DATA_COMMANDS,
       rule="auto: .conllu files are conllu, others columns (dependency: conllx)",
       param=False),
    _o("column", "--column", str, None, "label column: upos|xpos for CoNLL-U, a 1-based number "
       "for columns files", BASIC, DATA, commands=DATA_COMMANDS,
       rule="upos for CoNLL-U, the last column of a columns file; evaluate / predict: the "
            "model's", param=False),
    _o("feature_columns", "--feature-columns", str, None, "other input columns (1-based, e.g. 2 "
       "= the POS of CoNLL-2000) that feed the features", BASIC, DATA, SEQUENCE_TASKS,
       metavar="N[,N...]", commands=DATA_COMMANDS, rule="none; evaluate / predict: the model's",
       param=False),
    _o("template", "--template", str, None, "a CRF++ / Wapiti feature template: a file, or a "
       "shipped one by name (chunking, pos, ner); %x[r,c] reads column c of the input with the "
       "label column removed (0 = the word)", BASIC, DATA, SEQUENCE_TASKS,
       metavar="FILE|NAME", commands=DATA_COMMANDS,
       rule="the built-in features; evaluate / predict: the model's"),
    _o("encoding", "--encoding", str, "utf-8", "text encoding of the input (predict writes in "
       "it)", BASIC, DATA, commands=DATA_COMMANDS, rule="evaluate / predict: the model's",
       param=False),
    _o("max_sentence_length", "--max-sentence-length", int, None, "longest sentence accepted",
       ADVANCED, DATA, metavar="N", commands=DATA_COMMANDS,
       rule="the task's (TaskSpec.max_sentence_length, with what a long sentence costs)",
       param=False),
    _o("label_scheme", "--label-scheme", str, "auto", "how labels mark chunks", ADVANCED, DATA,
       ("chunking", "ner"), choices=("auto", "iob1", "iob2", "bio", "bioes", "iobes",
                                     "conlleval"), commands=DATA_COMMANDS,
       rule="auto: BIOES when S- tags occur, else conlleval's IOB rules"),
    _o("unknown_label", "--unknown-label", str, "?", "a label cell that says the label is "
       "unknown (any label); a cell A|B|... is a set of possible labels (partially labelled "
       "data: the CRF maximises the likelihood of the taggings consistent with it); '' reads "
       "every cell as one label", ADVANCED, DATA, SEQUENCE_TASKS, metavar="TEXT",
       commands=("train", "evaluate"), param=False),
    _o("min_count", "--min-count", int, None, "feature dictionary cut-off: features seen on fewer "
       "training tokens are dropped", ADVANCED, DATA, SEQUENCE_TASKS + ("entity-relation",),
       rule="2 for sequence and chunking, 1 for ner and entity-relation; 1 for feature "
            "dicts and --template (CRFsuite and crf_learn keep every feature)"),
    _o("hashing", "--hashing", int, None, "hash features into DIM weights instead of a "
       "dictionary", ADVANCED, DATA, metavar="DIM",
       rule="a dictionary (dependency: 2^23 hashed arc features)"),
    _o("weights", "--weights", str, "auto", "which emission weights exist: all (every feature "
       "x label), seen (only the (feature, label) pairs seen in training, as CRFsuite: memory "
       "grows with what is learnt, not with features x labels) or auto (seen for crf, whose "
       "objective is then CRFsuite's, and where every pair would add much to the run's "
       "modelled peak memory, e.g. tens or hundreds of labels on a million tokens; else all)",
       ADVANCED, DATA, SEQUENCE_TASKS, choices=("auto", "all", "seen"),
       rule="evaluate / predict: the model's"),
    _o("decoder", "--decoder", str, "eisner", "dependency decoder: eisner (projective trees) or "
       "cle (Chu-Liu-Edmonds, any tree)", ADVANCED, DATA, ("dependency",),
       choices=("eisner", "cle"), commands=DATA_COMMANDS, rule="evaluate / predict: the "
       "model's"),
    _o("pos_column", "--pos-column", str, "upos", "dependency: the POS column (the other one, "
       "when filled, feeds a second set of POS features)", ADVANCED, DATA, ("dependency",),
       choices=("upos", "xpos"), commands=DATA_COMMANDS, rule="evaluate / predict: the "
       "model's"),
    _o("ilp_solver", "--ilp-solver", str, "exact", "entity-relation inference: exact "
       "branch-and-bound, CBC (bundled with PuLP) or HiGHS", ADVANCED, DATA,
       ("entity-relation",), choices=("exact", "cbc", "highs"), commands=DATA_COMMANDS),
    _o("ilp_time_limit", "--ilp-time-limit", nonnegative, 2.0, "cbc/highs: cap per ILP solve in "
       "seconds (0 = none); at the cap the best feasible structure is used, unproven",
       ADVANCED, DATA, ("entity-relation",), metavar="SECONDS", commands=DATA_COMMANDS),
    _o("relation_loss_weight", "--relation-loss-weight", float, 1.0, "entity-relation: weight "
       "of relation errors in the loss", ADVANCED, DATA, ("entity-relation",)),
    _o("constraints", "--constraints", bool, None, "decode only taggings that obey the label "
       "scheme of the training labels (IOB2: no I-X after O or another type, none first; "
       "BIOES likewise)", ADVANCED, DATA, ("chunking", "ner"),
       commands=("train", "evaluate", "predict"),
       rule="off (no F1 gain on CoNLL-2000 / CoNLL-2002); "
            "evaluate / predict: the model's"),
    _o("nbest", "--nbest", int, None, "the K best taggings of each sentence in CRF++'s n-best "
       "layout: '# RANK SCORE' before each labelled copy, SCORE = p(y | x) for a CRF model "
       "(crf_test -n), w·Φ(x, y) for the others", ADVANCED, OUTPUT,
       SEQUENCE_TASKS, metavar="K", commands=("predict",), rule="the best tagging only",
       param=False),
    _o("force", "--force", bool, False, "keep the labels of the input's label column that the "
       "model knows, decode the rest around them (Wapiti's --force); dependency: keep each "
       "HEAD (column 7) in 0..n, with its DEPREL when the model knows it, and decode the rest "
       "of the tree around them", ADVANCED, OUTPUT, SEQUENCE_TASKS + ("dependency",),
       commands=("predict",), param=False),
    _o("scores", "--scores", bool, False, "a '# SCORE MARGIN' line before each sentence and a "
       "token-margin column after the label (max-marginal minus the best other label's)",
       ADVANCED, OUTPUT, SEQUENCE_TASKS, commands=("predict",), param=False),
    _o("marginals", "--marginals", str, None, "CRF models, CRF++'s crf_test -v1 layout: each "
       "label as LABEL/p(label | x) (CoNLL-U: Prob= in MISC) and a '# P' line with the "
       "tagging's probability p(y | x) before each sentence; --marginals all: -v2, every "
       "label's LABEL/p after it too (CoNLL-U: Probs= in MISC)", ADVANCED, OUTPUT,
       SEQUENCE_TASKS, choices=("best", "all"), commands=("predict",), rule="off; "
       "--marginals alone: best", param=False, const="best"),
    # -- learner -------------------------------------------------------------------------
    _o("algorithm", "--algorithm", str, None, "the learner (demidcd learners: the list)",
       BASIC, metavar="NAME", rule="demi-dcd when --threads > 1, else dcd"),
    _o("threads", "--threads", int, 1, "cores to use: train runs that many processes "
       "(crf: threads in one process), predict that many threads tagging blocks of sentences "
       "(output in input order)", BASIC, cli_default="all cores",
       commands=("train", "predict"),
       rule="the library uses 1 so that a script never takes every core unasked; the command "
            "line uses all cores"),
    _o("C", "--C", float, None, "regularisation C of Eq. (1)", BASIC,
       rule=f"{C_DEFAULT:g}; {C_DICTS:g} for feature dicts (few features per token; the "
            "library's sequence estimators)"),
    _o("time_limit", "--time-limit", float, None, "wall-clock seconds of training, worker "
       "start-up included", BASIC, metavar="SECONDS", rule="none: until converged"),
    _o("loss", "--loss", str, None, "the SSVM's loss: l2 (squared hinge, Eq. 1) or l1 (hinge)",
       owners=DCD, choices=("l1", "l2"), rule="l1 for chunking and ner, l2 otherwise"),
    _o("tol", "--tol", float, 0.01, "stopping tolerance on violations and projected "
       "gradients"),
    _o("delta", "--delta", float, 0.01, "shrinking threshold δ of Eq. (9)", owners=DCD),
    _o("max_epochs", "--max-epochs", int, None, "outer iterations at most",
       rule="DCD learners: until converged; sp-ipm 100 rounds; perceptron, mira 30; pegasos, "
            "adagrad, sdm-* 100"),
    _o("seed", "--seed", int, 0, "shuffling, sharding and splits"),
    _o("inner_passes", "--inner-passes", int, 5, "r of DCD-SSVM: passes over the active sets "
       "per inference pass (MS-DCD: master passes; sdm-ramp: SDM epochs per CCCP step)",
       owners=DCD + ("sdm-ramp",)),
    _o("max_active", "--max-active-per-example", int, 50, "bound on an example's active set "
       "|A_i|", owners=DCD + ("sdm-hinge", "sdm-ramp")),
    _o("batch", "--batch", int, 16, "examples per inference call of 1-DCD and the SDMs (1 = "
       "strictly sequential)", owners=("dcd", "dcd-light", "sdm-hinge", "sdm-ramp")),
    _o("skip", "--skip", float, 0.75, "share of the examples with the smallest projected "
       "gradients that a pass over the active sets leaves out between full passes",
       owners=DCD, metavar="SHARE"),
    _o("sweeps", "--sweeps", int, 1, "sweeps over an example's active set per visit, at most "
       "(--loss l1: SWEEPS x |A_i| SMO pair steps)", owners=DCD),
    _o("learners", "--learners", str, "auto", "K learner processes (each infers and updates) "
       "sharing one w: K = --threads, 1 (one learner process and --threads - 1 inference "
       "workers) or auto (K = --threads when one learner process cannot keep up)",
       owners=("demi-dcd",), metavar="K|auto"),
    _o("backend", "--backend", str, "shm", "how the learner process reaches its inference "
       "workers: shm (processes "
       "on this machine) or ray (a Ray cluster; pip install 'demidcd[ray]')",
       owners=("demi-dcd", "ms-dcd", "sp-ipm", "pegasos", "adagrad"), choices=("shm", "ray")),
    _o("ray_address", "--ray-address", str, None, "--backend ray: the cluster to join "
       "(HEAD_IP:6379)", owners=("demi-dcd", "ms-dcd", "sp-ipm", "pegasos", "adagrad"),
       metavar="ADDR", rule="start a local Ray instance for this run"),
    _o("perceptron_epochs_per_round", "--perceptron-epochs", int, 10, "perceptron epochs per "
       "mixing round", owners=SP_IPM),
    _o("mixing", "--mixing", str, "uniform", "parameter mixing weights", owners=SP_IPM,
       choices=("uniform", "mistakes")),
    _o("averaged", "--averaged", bool, None, "output averaged weights",
       owners=SP_IPM + ("perceptron", "mira", "pegasos"),
       rule="on for perceptron, mira and pegasos, off for sp-ipm"),
    _o("batch_size", "--batch-size", int, 16, "examples per mini-batch step",
       owners=("pegasos", "adagrad"), metavar="K"),
    _o("lam", "--lambda", float, None, "regularisation λ", owners=("pegasos",),
       rule="1/(C n): the same objective as the L1-loss SSVM"),
    _o("projection", "--projection", bool, False, "project w onto the ball ||w|| <= "
       "1/sqrt(λ)", owners=("pegasos",)),
    _o("eta", "--eta", float, 0.1, "learning rate η", owners=("adagrad",)),
    _o("regularizer", "--regularizer", str, "l2", "regulariser", owners=("adagrad",),
       choices=("l1", "l2")),
    _o("c1", "--c1", float, 0.1, "crf: L1 coefficient of CRFsuite's objective -LL + c1 Σ|w| + "
       "c2 Σ w² (OWL-QN when > 0; the default is the sklearn-crfsuite tutorial's, CRFsuite's "
       "own is 0)", owners=CRF),
    _o("c2", "--c2", float, 0.1, "crf: L2 coefficient of the same objective (CRFsuite's c2: "
       "it multiplies Σ w², not ½ Σ w²; the default is the sklearn-crfsuite tutorial's, "
       "CRFsuite's own is 1)", owners=CRF),
    _o("crf_method", "--crf-method", str, "lbfgs", "crf: the optimiser: lbfgs (L-BFGS / "
       "OWL-QN, as CRFsuite's, over gradients from --threads threads) or sdca (stochastic dual "
       "coordinate ascent, p - 1 threads computing marginals for one learner thread, no "
       "barrier, a certified duality gap)", owners=CRF, choices=("lbfgs", "sdca")),
    _o("all_possible_transitions", "--all-possible-transitions", bool, None, "crf: a weight "
       "for every label transition (sklearn-crfsuite's all_possible_transitions); "
       "--no-all-possible-transitions: only for those the training tags take, as CRFsuite's "
       "default", owners=CRF, rule="true (every transition, as the SVM learners)"),
    _o("num_memories", "--num-memories", int, None, "crf lbfgs: the pairs (s, y) L-BFGS "
       "keeps (sklearn-crfsuite's num_memories)", owners=CRF,
       rule="as many as 64 MiB hold, between 6 (CRFsuite's) and 20"),
    _o("warm_epochs", "--warm-epochs", int, 5, "crf lbfgs: epochs of stochastic gradient "
       "descent (Hogwild on --threads threads, the step size calibrated on a sample) that "
       "give L-BFGS its start; 0: start from w = 0 as CRFsuite", owners=CRF),
    _o("max_iterations", "--max-iterations", int, None, "crf: L-BFGS iterations (sdca: "
       "epochs) at most", owners=CRF, rule="until converged (CRFsuite's default)"),
    _o("epsilon", "--epsilon", float, 1e-5, "crf: stop when |g| / max(1, |w|) <= EPSILON "
       "(CRFsuite's epsilon; sdca: the certified duality gap (P - D) / P <= EPSILON)",
       owners=CRF),
    _o("period", "--period", int, 10, "crf: the iterations the improvement test looks back "
       "(CRFsuite's period)", owners=CRF),
    _o("stop_delta", "--stop-delta", float, 1e-5, "crf: stop when the objective improved by "
       "less than this share over the last --period iterations (CRFsuite's delta)",
       owners=CRF),
    _o("stop_window", "--stop-window", int, None, "crf lbfgs: stop when, over the last this "
       "many iterations, the training token error moved by less than --stop-eps points "
       "(Wapiti's --stopwin; 0: off)", owners=CRF,
       rule="5 (Wapiti's); off under --time-limit, the budget then"),
    _o("stop_eps", "--stop-eps", float, 0.02, "crf lbfgs: the --stop-window test's width, in "
       "percentage points of training tokens (Wapiti's --stopeps)", owners=CRF),
    _o("resume", "--resume", str, None, "continue the run that wrote MODEL with --save-state "
       "(its dual state MODEL.state.npz; same data and options) to the optimum of one "
       "uninterrupted run", owners=DCD, metavar="MODEL", rule="none: a new run"),
    _o("init", "--init", str, None, "warm start from MODEL: min ½‖w − w0‖² + C Σ ξ² with its "
       "weights as the prior w0, its features and labels extended by the new data's",
       owners=DCD, metavar="MODEL", rule="none: w0 = 0"),
    # -- output --------------------------------------------------------------------------
    _o("model", "--model", str, None, "model file to write (.npz)", BASIC, OUTPUT,
       metavar="OUT", param=False),
    _o("log_json", "--log-json", str, None, "write the log records as JSON lines", group=OUTPUT,
       metavar="FILE", param=False),
    _o("summary_json", "--summary-json", str, None, "write the run summary as JSON (stop "
       "reason, time, counters, CPU, dev/test metrics)", group=OUTPUT, metavar="FILE",
       param=False),
    _o("cpu_log", "--cpu-log", str, None, "CPU-use timeline as CSV", group=OUTPUT,
       metavar="FILE"),
    _o("eval_every", "--eval-every", float, None, "log primal, dual and gap at most every "
       "SECONDS", group=OUTPUT, metavar="SECONDS", rule="never"),
    _o("snapshot_every", "--snapshot-every", float, None, "save w every SECONDS of training "
       "(see evaluate-snapshots)", group=OUTPUT, metavar="SECONDS", rule="never"),
    _o("snapshot_dir", "--snapshot-dir", str, None, "where snapshots go", group=OUTPUT,
       metavar="DIR", rule="MODEL without .npz + .snapshots"),
    _o("quiet", "--quiet", bool, False, "print only results and errors", BASIC, OUTPUT,
       commands=DATA_COMMANDS, param=False),
    _o("verbose", "--verbose", int, 0, "iteration lines: 0 none; 1 the first 5, then at powers "
       "of two, at most one more every 10 s, and the last; 2 every one (the library prints "
       "them, with its progress lines and how fit ended, on stdout, or to log when given)",
       group=OUTPUT, metavar="LEVEL", cli_default=1,
       rule="the library prints nothing: its lines go to the 'demidcd' logger, and a "
            "ConvergenceWarning says when fit stopped at max_epochs; the command line shows 1 "
            "(on a terminal: a progress bar)"),
    _o("debug", "--debug", bool, False, "show tracebacks", BASIC, OUTPUT,
       commands=DATA_COMMANDS),
    _o("save_state", "--save-state", bool, False, "keep the dual state beside --model "
       "(MODEL.state.npz, also at a time limit or Ctrl-C) for --resume", group=OUTPUT,
       owners=DCD),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}

BOUNDS: dict[str, tuple[float, bool]] = {
    "c1": (0, False), "c2": (0, False), "epsilon": (0, False), "stop_delta": (0, False),
    "stop_window": (0, False), "stop_eps": (0, False),
    "period": (1, False), "num_memories": (1, False), "warm_epochs": (0, False),
    "max_iterations": (1, False), "perceptron_epochs_per_round": (1, False),
    "batch_size": (1, False), "lam": (0, True), "eta": (0, True)}
"""The learners' own options' lower bounds, (bound, strict), checked with their types when the
plan is made (``solvers.plan.check_value``), before any data is read; every integer is also
below 2**31 and every number finite."""
LBFGS_ONLY = ("num_memories", "warm_epochs", "period", "stop_delta", "stop_window",
              "stop_eps")
"""crf options that only ``--crf-method lbfgs`` reads (``sdca`` refuses them when set)."""


def option(name: str) -> Option:
    """The option called ``name`` (its keyword-argument name)."""
    return BY_NAME[name]


def default(name: str) -> Any:
    """The library's default of option ``name``."""
    return BY_NAME[name].default


def options_for(owner: str | None = None, command: str = "train",
                tier: str | None = None) -> Iterator[Option]:
    """The options ``command`` takes, those of ``owner`` only (a learner or task name; None:
    all), and of ``tier`` only (None: both)."""
    for o in OPTIONS:
        if command not in o.commands or (tier is not None and o.tier != tier):
            continue
        if owner is not None and o.owners and owner not in o.owners:
            continue
        yield o


def learner_params() -> tuple[Option, ...]:
    """The estimator keyword arguments every estimator takes (the learners', the output's),
    in table order; the data options are the tasks' own."""
    return tuple(o for o in OPTIONS if o.param and o.group != DATA)


def estimator_params() -> tuple[Option, ...]:
    """The options that are estimator keyword arguments, in table order."""
    return tuple(o for o in OPTIONS if o.param)



# -- the option objects: what the CLI parses once, frozen --------------------------------------
def _options_class(name: str, group: str, extra: tuple[tuple[str, Any, Any], ...],
                   doc: str) -> type:
    """A frozen dataclass with one field per option of ``group`` (default: the table's library
    default) and the ``extra`` fields ``(name, type, default)`` that are not table rows (a
    callable default is a factory)."""
    rows = [(o.name, Any, field(default=o.default)) for o in OPTIONS if o.group == group]
    rows += [(n, t, field(default_factory=d) if callable(d) else field(default=d))
             for n, t, d in extra]

    def from_mapping(cls: type, values: Mapping[str, Any]) -> Any:
        """The options of ``values`` (e.g. ``vars()`` of the CLI's namespace) this class has;
        the others keep their defaults."""
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    return make_dataclass(name, rows, frozen=True, namespace={
        "__doc__": doc, "__module__": __name__, "from_mapping": classmethod(from_mapping)})


def _empty_mapping() -> Mapping[str, Any]:
    return MappingProxyType({})


DataOptions = _options_class(
    "DataOptions", DATA,
    (("data", str | None, None), ("derived", Mapping, _empty_mapping)),
    """The data options of a command, frozen: one field per ``data`` row of :data:`OPTIONS`
    (``train``, ``column``, ``template``, ``encoding``, …), ``data`` (the input of evaluate /
    predict) and ``derived``: what a task derived from a loaded model (set only by
    :meth:`~demidcd.tasks.TaskSpec.configure`, which returns a new object; e.g. the columns a
    template model reads). Tasks read it; nobody writes it.""")

OutputOptions = _options_class(
    "OutputOptions", OUTPUT, (("out", str | None, None),),
    """The output options of a command, frozen: one field per ``output`` row of :data:`OPTIONS`
    (``model``, ``nbest``, ``force``, ``scores``, ``marginals``, ``quiet``, …) and ``out`` (the
    file ``predict`` writes).""")

LearnerOptions = _options_class(
    "LearnerOptions", LEARNER, (),
    """The learning options of ``train``, frozen: one field per ``learner`` row of
    :data:`OPTIONS` (``algorithm``, ``threads``, ``C``, …); None: the row's rule decides.""")
