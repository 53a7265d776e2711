"""The training plan: every choice of a run resolved and checked once, before any data is read.

:func:`make_plan` is the one place where the learner options of a run are checked and their
defaults resolved: the process count (an integer >= 1), the algorithm (its default from the
process count, a known learner, one that runs on that many processes), the loss (an option of
the DCD learners only), the start options (``resume``, ``init``, ``save_state``: the DCD
learners only, ``resume`` and ``init`` not together), the solver config's ranges
(:meth:`~.common.SolverConfig.validate`), the transport (``backend``, ``ray_address``) and
DEMI-DCD's ``learners``. It returns a frozen :class:`TrainingPlan`, which the estimators
build with :meth:`~demidcd.estimators.base.StructuredEstimator.plan`, the CLI prints
(:meth:`TrainingPlan.lines`), the model records (:meth:`TrainingPlan.hyper_parameters`) and
:func:`demidcd.solvers.run_plan` runs without checking anything again.

Each check raises :class:`~demidcd.errors.OptionError` worded with the CLI's flags
(``--threads must be >= 1, got 0``); ``str()`` of the error names the library's parameter
instead (``threads must be >= 1, got 0``), so the library and the CLI share each check.

``learners="auto"`` (DEMI-DCD on several processes) is the one choice that needs the data: the
plan keeps ``"auto"`` until :func:`decide_learners`, called once the task is built and before
training starts, measures it and returns the plan with the number of learners and the reason,
which the log shows (``2 learner processes: because ...``) and the model keeps.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import OptionError
from ..options import BOUNDS, BY_NAME, LBFGS_ONLY, default
from ..primitives.monitor import usable_cores
from . import speedup_model
from .common import SolverConfig

if TYPE_CHECKING:
    from ..tasks.base import Task
    from . import Learner

START_FLAGS = {"save_state": "--save-state", "resume": "--resume", "init": "--init"}
"""The start options (:mod:`.state`) and their flags, in the order the errors name them."""


def parse_learners(value: str | int | None) -> int | None:
    """``learners``: a positive integer, or ``auto`` / None (chosen by measurement)."""
    if value is None or value == "auto":
        return None
    try:
        k = int(value)
    except (TypeError, ValueError):
        raise OptionError(f"--learners must be a positive integer or auto, got {value!r}") \
            from None
    if k < 1:
        raise OptionError(f"--learners must be >= 1, got {k}")
    return k


def check_learners(value: str | int | None, threads: int) -> None:
    """Refuse a ``learners`` no schedule runs on ``threads`` processes."""
    k = parse_learners(value)
    if k is not None and k > threads:
        raise OptionError(f"--learners {k} is more than --threads {threads}")
    if k is not None and 1 < k < threads:
        raise OptionError(f"--learners {k} with --threads {threads}: only --learners 1 "
                          "(DEMI-DCD) or --learners equal to --threads (every process infers "
                          "and learns) is implemented")


def auto_fits_cores(threads: int) -> bool:
    """Whether ``learners="auto"`` may choose ``threads`` learners: only when each has a core
    of its own. With more processes than cores the learners would take turns on the cores, and
    every rebuild of w waits for the slowest to reach its next poll (64 learners on 2 cores:
    the first ran before the last was forked); one learner keeps a core to itself instead and
    the inference workers share the others at a lower priority (:mod:`demidcd.parallel.engine`)."""
    return threads <= usable_cores()


EXPECTED_ACTIVE = 10  # structures per active set assumed by the auto choice (EWT XPOS after a
# few epochs: median |A_i| ~ 8-12, largest 20; see activeset.DEFAULT_MAX_ACTIVE)


def choose_learners(task: Task, config: SolverConfig, threads: int,
                    log: Callable[[str], None] | None = None, sample: int = 64
                    ) -> tuple[int, dict]:
    """``--learners auto``: K = p or 1 (DEMI-DCD), whichever the speed-up model
    (:mod:`.speedup_model`: p × per-process throughput / work inflation against one learner
    whose update passes may set the pace) says reaches a gap sooner. Measured on a sample of
    examples at w = 0: t_inf, seconds per loss-augmented inference, and t_step, seconds per
    Eq. (7)–(8) step; a pass over the active sets costs about ``EXPECTED_ACTIVE`` steps per
    example. Returns (K, the figures), and logs the reason in one line."""
    from .activeset import ActiveSets

    n = task.n_examples
    rng = np.random.default_rng(config.seed)
    ex = np.sort(rng.choice(n, size=min(n, sample), replace=False)).astype(np.int64)
    w = np.zeros(task.dim)
    # untimed first: a fresh w's first touch of each page is a fault (with many features
    # nearly every row lies on a page of its own), which a worker pays once, not per sweep
    batch = task.loss_augmented(w, ex)
    t = time.perf_counter()
    batch = task.loss_augmented(w, ex)
    t_inf = (time.perf_counter() - t) / max(len(ex), 1)
    # the L2 step's cost for either loss (an L1 visit after the first takes no step to time;
    # its pair steps cost more, so the rule errs towards one learner), on the sample's own
    # entries of w renumbered 0..u−1 (in order: each φ stays sorted). On a fresh w of the
    # task's size every first touch of a page is a fault, and with many labels (w[f·K + k])
    # nearly every entry of φ lies on a page of its own, so timing steps on a fresh w would
    # measure page faults, not steps
    cols, idx = np.unique(batch.idx, return_inverse=True)
    batch = dataclasses.replace(batch, idx=idx.astype(batch.idx.dtype))
    act = ActiveSets(n, max(len(cols), 1), config.C, config.delta, config.max_active)
    act.insert(batch, 0.0)
    act.update(ex, shrink=False)  # untimed: numba's dispatch, the pools' first touch
    # the median over the passes of 20 ms: a pause of the process (a garbage collection, the
    # scheduler) lands in one pass, and one such pause would read as a step many times slower
    per_step, t = [], time.perf_counter()
    while time.perf_counter() - t < 0.02 and len(batch):
        t0 = time.perf_counter()
        steps = act.update(ex, shrink=False).updates
        per_step.append((time.perf_counter() - t0) / max(steps, 1))
    t_step = float(np.median(per_step)) if per_step else 0.0
    t_pass = EXPECTED_ACTIVE * t_step
    ratio = t_inf / max(threads - 1, 1) / max(t_pass, 1e-12)  # worker sweep / learner pass
    choice = speedup_model.choose(threads, n, t_inf, t_pass)
    k = choice.learners
    figures = {"infer_ms": t_inf * 1e3, "step_us": t_step * 1e6, "pass_ms": t_pass * 1e3,
               "sweep_over_pass": ratio, "learners": k, "speedup_one": choice.one,
               "speedup_many": choice.many, "inflation": choice.inflation,
               "throughput": choice.throughput,
               "reason": f"learners auto measured inference {t_inf * 1e3:.3f} ms/example and "
                         f"an update pass {t_pass * 1e3:.3f} ms/example; {choice.reason()}"}
    if log is not None:
        log(f"learners auto: {k} ({figures['reason']})")
    return k, figures


MAX_THREADS = 4096
"""The most processes (or threads) a run may ask for: every one holds a copy of w̄ and a
ring; a larger count (``--threads 10**400``) is a typo, refused in one line."""


def check_threads_value(threads: Any) -> int:
    """``threads`` as an int, refusing a non-integer or a value outside 1..:data:`MAX_THREADS`."""
    if isinstance(threads, bool) or not isinstance(threads, int | np.integer):
        raise OptionError(f"--threads must be an integer, got {threads!r}")
    threads = int(threads)
    if threads < 1:
        raise OptionError(f"--threads must be >= 1, got {threads}")
    if threads > MAX_THREADS:
        raise OptionError(f"--threads must be at most {MAX_THREADS}, got " + (
            f"{threads:,}" if threads < 10**12 else f"a number of {len(str(threads))} digits"))
    return threads


ALIASES: dict[str, tuple[str | None, dict[str, Any], str]] = {
    "lbfgs": ("crf", {"crf_method": "lbfgs"}, ""),
    "ap": ("perceptron", {}, ""),
    "pa": ("mira", {}, ""),
    "l2sgd": (None, {}, "CRFsuite's SGD on the L2-regularised log-likelihood: use --algorithm "
                        "crf (the same objective with --c1 0; L-BFGS started by --warm-epochs "
                        "epochs of SGD) or --algorithm crf --crf-method sdca (stochastic dual "
                        "coordinate ascent)"),
    "arow": (None, {}, "CRFsuite's AROW has no equivalent here: the closest online learner is "
                       "--algorithm mira (1-best MIRA, passive-aggressive steps), a "
                       "probabilistic model --algorithm crf"),
}
"""sklearn-crfsuite's (CRFsuite's) names of its training algorithms: (the learner that trains
the same model, the options that name implies, or, for a name without an equivalent, None and
the hint the refusal gives). ``lbfgs`` is ``crf`` with ``crf_method="lbfgs"``; ``ap`` the
averaged perceptron; ``pa`` (passive aggressive) 1-best MIRA, whose step is PA-I's with the
loss-augmented tagging; for ``ap`` and ``pa`` CRFsuite's ``max_iterations`` counts epochs, so it
is taken as ``max_epochs``."""
ALIAS_EPOCHS = ("ap", "pa")  # aliases whose max_iterations is this learner's max_epochs


def learner_name(algorithm: str) -> str:
    """The registered learner ``algorithm`` names: itself, or the learner of a
    sklearn-crfsuite name (:data:`ALIASES`); a name without an equivalent is refused with its
    hint (an unknown one by :func:`~demidcd.solvers.get_learner`)."""
    if algorithm in ALIASES:
        name, _, hint = ALIASES[algorithm]
        if name is None:
            raise OptionError(f"--algorithm {algorithm} (sklearn-crfsuite's name) is not "
                              f"implemented: {hint}")
        return name
    return algorithm


def _given(name: str, value: Any) -> bool:
    """Whether option ``name`` holds a value of its own: not None, not the table's default
    (the library cannot tell a default passed explicitly from one left alone)."""
    if value is None:
        return False
    try:
        return bool(value != default(name))
    except Exception:  # noqa: BLE001 - an array or an odd object: a value of its own
        return True


def check_value(name: str, value: Any) -> Any:
    """An engine option's value checked against its table row (type, choices) and
    :data:`~demidcd.options.BOUNDS`, as the schedule will take it; one OptionError line
    naming the flag otherwise (a huge integer, a string for a number, a NaN included)."""
    import math

    o = BY_NAME[name]
    if value is None or o.type not in (int, float, bool) and not o.choices:
        return value
    if o.choices:
        if not isinstance(value, str) or value.lower() not in o.choices:
            raise OptionError(f"{o.flag} must be one of {', '.join(o.choices)}, got {value!r}")
        return value.lower()
    if o.type is bool:
        if not isinstance(value, bool | np.bool_):
            raise OptionError(f"{o.flag} must be True or False, got {value!r}")
        return bool(value)
    low, strict = BOUNDS.get(name, (-math.inf, False))
    cmp = "> " if strict else ">= "
    if o.type is int:
        ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
        if not ok or not (low < value if strict else low <= value) or value >= 2**31:
            shown = repr(value) if not ok or abs(value) < 10**12 else \
                f"a number of {len(str(abs(int(value))))} digits"
            raise OptionError(f"{o.flag} must be an integer {cmp}{low:g} and < 2**31, "
                              f"got {shown}")
        return int(value)
    ok = isinstance(value, int | float | np.integer | np.floating) and \
        not isinstance(value, bool)
    try:
        v = float(value) if ok else math.nan
    except OverflowError:  # an int past float's range
        v = math.inf
    if not (math.isfinite(v) and (low < v if strict else low <= v)):
        raise OptionError(f"{o.flag} must be a finite number {cmp}{low:g}, got {value!r}"
                          if ok and not abs(v) >= 1e300 else
                          f"{o.flag} must be a finite number {cmp}{low:g}")
    return v


@dataclass(frozen=True)
class TrainingPlan:
    """What a run will do, every default resolved: ``algorithm`` (the learner's name),
    ``threads`` (the processes it runs on, after a sequential learner's collapse to one;
    ``asked_threads`` the count asked for and ``note`` why they differ), ``config`` (the
    :class:`~.common.SolverConfig`, validated), ``engine`` (the options of the learner that
    are set, the transport's included), ``backend`` and ``ray_address``, ``learners``
    (DEMI-DCD on several processes: an int, or ``"auto"`` until :func:`decide_learners`;
    None for the other learners) with ``learners_reason`` (why, when chosen), and ``start``
    (the start options given, as flags). Build it with :func:`make_plan`."""

    algorithm: str
    threads: int
    config: SolverConfig
    engine: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    backend: Any = "shm"
    ray_address: str | None = None
    learners: int | str | None = None
    learners_reason: str = ""
    asked_threads: int = 1
    note: str = ""
    start: tuple[str, ...] = ()

    @property
    def learner(self) -> Learner:
        """The registered :class:`~demidcd.solvers.Learner` of :attr:`algorithm`."""
        from . import get_learner

        return get_learner(self.algorithm)

    @property
    def several_learners(self) -> bool:
        """Whether the run has several DEMI-DCD learners on one shared w (:mod:`.multi_dcd`)."""
        return isinstance(self.learners, int) and self.learners > 1

    @property
    def sweep_epochs(self) -> bool:
        """Whether one epoch of the run (what ``config.max_epochs`` counts) infers every
        example once: the learner's own (:attr:`~demidcd.solvers.Learner.sweep_epochs`), or
        several DEMI-DCD learners (each an inference pass over its part and its updates)."""
        return self.several_learners or self.learner.sweep_epochs

    def schedule_options(self) -> dict[str, Any]:
        """The keyword options the schedule takes (its ``learners`` for several learners)."""
        opts = dict(self.engine)
        if self.several_learners:  # one shared w in this machine's memory: no transport
            opts = {k: v for k, v in opts.items() if k not in ("backend", "ray_address")}
            opts["learners"] = self.learners
        return opts

    def solver_options(self) -> dict[str, Any]:
        """The config's fields this learner reads (``loss`` only for the DCD learners)."""
        config = dataclasses.asdict(self.config)
        if "loss" not in self.learner.options:
            del config["loss"]  # not an option of this learner (check_loss)
        fields = self.learner.config_fields
        return config if fields is None else {k: v for k, v in config.items() if k in fields}

    def hyper_parameters(self) -> dict[str, Any]:
        """What a model file records: algorithm, threads, the config's fields the learner
        reads, its engine options that are set (the transport's left out: where training ran is
        not saved) and, for DEMI-DCD on several processes, ``learners`` (every key a
        constructor argument of the estimators, which load older models from them)."""
        engine = {k: v for k, v in self.engine.items()
                  if k not in ("backend", "ray_address", "debug") and v is not None}
        out = {"algorithm": self.algorithm, "threads": self.threads, **self.solver_options(),
               **engine}
        if self.learners is not None:
            out["learners"] = self.learners
        return out

    def lines(self) -> list[str]:
        """The lines that describe the plan (the CLI prints them before reading the data)."""
        processes = f"{self.threads} thread{'s' * (self.threads > 1)} in one process" \
            if self.learner.in_process_threads else \
            f"{self.threads} process{'es' * (self.threads > 1)}"
        head = [f"algorithm {self.algorithm}", processes]
        if self.learners is not None:
            head.append(f"learners {self.learners}")
        if self.threads > 1 and self.backend != "shm":
            head.append(f"backend {self.backend if isinstance(self.backend, str) else 'custom'}")
        opts = ", ".join(f"{k} {v}" for k, v in self.solver_options().items() if v is not None)
        out = [", ".join(head) + (f", {opts}" if opts else "")]
        engine = {k: v for k, v in self.engine.items()
                  if k not in ("backend", "ray_address", "debug") and v is not None}
        if engine:
            out.append("options: " + ", ".join(f"{k} {v}" for k, v in engine.items()))
        if self.note:
            out.append(self.note)
        return out


def make_plan(algorithm: str | None, config: SolverConfig | Mapping[str, Any],
              threads: Any = 1, *, loss: str | None = None, default_loss: str = "l2",
              start: tuple[str, ...] = (),
              learners: str | int | None = None, backend: Any = None,
              ray_address: str | None = None, default_C: float | None = None,
              capabilities: tuple[str, ...] | None = None, **engine: Any) -> TrainingPlan:
    """Check every learner option once and resolve its default: the :class:`TrainingPlan`.

    ``algorithm`` None: DEMI-DCD on several ``threads``, else 1-DCD; a sklearn-crfsuite name
    (:data:`ALIASES`: ``lbfgs``, ``ap``, ``pa``) is its learner with the options it implies.
    ``config``: a :class:`~.common.SolverConfig`, or the solver options as given (None: the
    default; the config is built here, with ``loss`` None meaning ``default_loss``, the task's,
    for a learner that takes a loss, and ``C`` None meaning ``default_C`` when given); an
    option given there that the learner does not read (``C`` for ``crf``, whose objective has
    ``c1`` and ``c2``) is refused, as an engine option is. ``loss``: the loss as given with a
    config (None: not given), refused for a learner that does not take it. ``start``: the start
    options given, by name (``resume``, ``init``, ``save_state``). ``learners``: DEMI-DCD's
    (None: 1, one learner; ``"auto"``: measured by :func:`decide_learners`); ``learners``,
    ``backend`` and ``ray_address`` set for a learner that has no workers to reach are
    refused. ``capabilities``: what the task's structures offer (``"marginals"``: the chain
    tasks); a learner that needs another (:attr:`~demidcd.solvers.Learner.needs`) is refused
    here, before any data is read (None: not known, e.g. a bare ``solvers.train``).
    ``engine``: the other options of the learners (``c1``, ``mixing``, …), each checked
    against its table row (:func:`check_value`); one set to a value of its own that the
    learner does not read is refused; a name that is no learner's option is a TypeError.
    ``debug`` (the command line's traceback switch) is passed to the learners that read it
    and dropped for the others."""
    from . import (
        LEARNERS,
        check_loss,
        check_resumable,
        check_threads,
        get_learner,
    )

    debug = engine.pop("debug", None)
    readable = {o for learner in LEARNERS.values() for o in learner.options}
    unknown = sorted(set(engine) - readable)
    if unknown:
        raise TypeError(f"unknown training option{'s' * (len(unknown) > 1)} "
                        f"{', '.join(map(repr, unknown))}")
    asked = check_threads_value(threads)
    given_name = str(algorithm or ("demi-dcd" if asked > 1 else "dcd"))
    algorithm = learner_name(given_name)
    learner = get_learner(algorithm)
    if given_name in ALIASES:
        for name, value in ALIASES[given_name][1].items():
            if _given(name, engine.get(name)) and engine[name] != value:
                raise OptionError(f"--algorithm {given_name} is {algorithm} with "
                                  f"{BY_NAME[name].flag} {value}, not {engine[name]}")
            engine[name] = value
        if given_name in ALIAS_EPOCHS and engine.get("max_iterations") is not None:
            if not isinstance(config, SolverConfig) and config.get("max_epochs") is None:
                config = {**config, "max_epochs": engine["max_iterations"]}
            engine["max_iterations"] = None  # CRFsuite's epochs: this learner's max_epochs
    missing = [c for c in learner.needs if capabilities is not None and c not in capabilities]
    if missing:
        raise OptionError(f"--algorithm {algorithm} needs {missing[0]}, which the structures "
                          "of this task do not have (it trains the chain tasks: sequence, "
                          "chunking, ner)")
    for name, value in engine.items():  # set to a value of its own: not dropped in silence
        if _given(name, value) and name not in learner.options:
            readers = ", ".join(n for n, x in LEARNERS.items() if name in x.options)
            hint = " (its limit is --max-epochs)" if name == "max_iterations" else ""
            raise OptionError(f"{BY_NAME[name].flag} is an option of {readers}; --algorithm "
                              f"{algorithm} does not read it{hint}")
    engine = {k: check_value(k, v) for k, v in engine.items()}
    method = engine.get("crf_method") or default("crf_method")
    if learner.name == "crf" and method != "lbfgs":
        for name in LBFGS_ONLY:
            if _given(name, engine.get(name)):
                raise OptionError(f"{BY_NAME[name].flag} is an option of --crf-method lbfgs; "
                                  f"--crf-method {method} does not read it")
    for name, value in (("learners", learners), ("backend", backend),
                        ("ray_address", ray_address)):
        if _given(name, value) and name not in learner.options and not (
                name == "backend" and callable(value)) and not (
                name == "learners" and str(value) == "1"):  # one learner: what every one is
            readers = ", ".join(n for n, x in LEARNERS.items() if name in x.options)
            raise OptionError(f"{BY_NAME[name].flag} is an option of {readers} (the learners "
                              f"with processes to reach); --algorithm {algorithm} does not "
                              "read it")
    check_threads(learner, asked)  # too few processes: an error, never another learner
    if not isinstance(config, SolverConfig):
        opts = dict(config)
        if learner.config_fields is not None:  # options of the config this learner ignores
            for name, value in opts.items():
                if name not in learner.config_fields and name != "loss" and \
                        _given(name, value):
                    readers = [n for n, x in LEARNERS.items()
                               if x.config_fields is None or name in x.config_fields]
                    others = [n for n in LEARNERS if n not in readers]
                    who = f"{', '.join(readers)} read" if len(others) > len(readers) else \
                        f"every learner but {', '.join(others)} reads"
                    hint = "; CRFsuite's delta is --stop-delta" if name == "delta" and \
                        "stop_delta" in learner.options else ""
                    raise OptionError(f"{BY_NAME[name].flag} is not an option of --algorithm "
                                      f"{algorithm} (its objective: {learner.objective}); "
                                      f"{who} it{hint}")
        if opts.get("C") is None and default_C is not None:
            opts["C"] = default_C
        loss = opts.get("loss")
        if loss is None and "loss" in learner.options:
            opts["loss"] = default_loss
        config = SolverConfig.from_options(**opts)
    check_loss(learner, loss)
    unknown_start = [k for k in start if k not in START_FLAGS]
    if unknown_start:
        raise TypeError(f"unknown start option {unknown_start[0]!r}")
    if "resume" in start and "init" in start:
        raise OptionError("--resume and --init: a resumed run keeps the prior of the run it "
                          "continues (its state file holds it); give one of them")
    check_resumable(learner, *(START_FLAGS[k] for k in START_FLAGS if k in start))
    config.validate()
    n = asked
    note = ""
    if learner.single_process and asked > 1:
        note, n = f"{learner.name} is sequential: it runs on one process (--threads {asked})", 1
    backend = backend or "shm"
    if not callable(backend) and backend not in ("shm", "ray"):
        raise OptionError(f"unknown backend {backend!r}; choose shm or ray")
    if ray_address and backend != "ray":
        raise OptionError("--ray-address needs --backend ray")
    k, reason = _learners(learner.name, learners, n, backend)
    if backend == "ray" and n > 1 and "backend" in learner.options:
        from ..parallel.ray import require_ray

        require_ray()
    opts = {k_: v for k_, v in {**engine, "backend": backend, "ray_address": ray_address,
                                "debug": debug}.items()
            if v is not None and k_ in learner.options}
    return TrainingPlan(algorithm=algorithm, threads=n, config=config,
                        engine=MappingProxyType(opts), backend=backend,
                        ray_address=ray_address, learners=k, learners_reason=reason,
                        asked_threads=asked, note=note,
                        start=tuple(s for s in START_FLAGS if s in start))


def _learners(algorithm: str, value: str | int | None, threads: int,
              backend: Any) -> tuple[int | str | None, str]:
    """DEMI-DCD's learners on ``threads`` processes: (K or ``"auto"``, the reason when it was
    chosen for the user); (None, "") for the other learners and one process."""
    if algorithm != "demi-dcd" or threads < 2:
        return None, ""
    k = parse_learners(1 if value is None else value)
    name = backend if isinstance(backend, str) else "custom"
    if name != "shm":
        if k is not None and k > 1:
            raise OptionError(f"--learners {k} needs --backend shm (the learner processes share "
                              "w in shared memory on one machine)")
        return 1, "" if k is not None else \
            f"several learner processes need --backend shm, not {name}"
    check_learners(k, threads)
    if k is not None:
        return k, ""
    if not auto_fits_cores(threads):
        return 1, (f"--threads {threads} is more than the {usable_cores()} cores: several "
                   "learner processes only when each has a core of its own; one learner "
                   f"process and {threads - 1} inference workers")
    return "auto", ""


def fit_to_examples(plan: TrainingPlan, n: int,
                    log: Callable[[str], None] | None = None) -> TrainingPlan:
    """The plan with no process left without examples, on a task of ``n`` examples: one
    learner process and at most ``n`` inference workers (``threads`` ≤ n + 1; each worker's
    shard, and each learner's part, has at least one example: the shards are filled heaviest
    example first, to the lightest, so the first ``n`` go to ``n`` different shards), and at
    most ``n`` learner processes (``learners`` K = ``threads`` ≤ n; one learner when n = 1).
    A process with an empty shard would idle, and the stop rule waited for its certificate
    for ever. Said in the log when it changes anything; any other plan is returned as it is
    (sequential learners, threads of one process)."""
    learner = plan.learner
    if plan.threads <= 1 or learner.single_process or learner.in_process_threads or n < 1:
        return plan
    threads, k = plan.threads, plan.learners
    if isinstance(k, int) and k > 1 and k > n:
        k = n if n >= 2 else 1
        threads = k if k > 1 else 2
    elif threads > n + 1:
        threads = max(n + 1, learner.min_threads)
    if (threads, k) == (plan.threads, plan.learners):
        return plan
    what = f"{threads} processes, not {plan.threads}" if threads != plan.threads else ""
    if k != plan.learners:
        what += f"{', ' if what else ''}{k} learner process{'es' * (k != 1)}, not {plan.learners}"
    note = (f"{n} training example{'s' * (n != 1)}: {what} (a process without examples "
            "would have nothing to do)")
    if log is not None:
        log(note)
    return dataclasses.replace(plan, threads=threads, learners=k)


def learners_line(plan: TrainingPlan) -> str:
    """``K learner processes: because ...``, the log line of a choice made for the user."""
    k = plan.learners
    return f"{k} learner process{'es' * (k != 1)}: because {plan.learners_reason}"


def decide_learners(plan: TrainingPlan, task: Task,
                    log: Callable[[str], None] | None = None) -> TrainingPlan:
    """The plan with ``learners="auto"`` decided on ``task`` (the measurement of
    :func:`~.multi_dcd.choose_learners`), before training starts; a choice made for the user
    (here, or in :func:`make_plan`) is logged as ``K learner processes: because ...``. Any
    other plan
    is returned as it is. First the processes are fitted to the task's examples
    (:func:`fit_to_examples`)."""
    plan = fit_to_examples(plan, task.n_examples, log)
    n = task.n_examples
    if plan.learners == "auto" and plan.threads > n:  # K = p learners: a part without examples
        plan = dataclasses.replace(plan, learners=1, learners_reason=(
            f"{n} training example{'s' * (n != 1)}: {plan.threads} learner processes would "
            "leave one without examples"))
    if plan.learners == "auto":
        from . import compile_notice, warm_up
        from .cccp import convex_view

        task = convex_view(task)  # partially labelled data: measured as a convex step

        # the kernels the measurement times, compiled untimed (and those either choice needs
        # but the workers' float32 inference); the notice stays open for the run's warm-up
        with compile_notice(log, plan.config.time_limit, hold=True):
            warm_up(task, plan.algorithm, plan.threads, plan.config.loss, several=None)
        k, fig = choose_learners(task, plan.config, plan.threads)
        plan = dataclasses.replace(plan, learners=k, learners_reason=fig["reason"])
    if plan.learners_reason and log is not None:
        log(learners_line(plan))
    return plan
