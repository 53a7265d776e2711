"""Learners. :func:`train` is the one entry point: it maps an algorithm name to a schedule.

Every learner takes a :class:`~demidcd.tasks.base.Task` and a
:class:`~demidcd.solvers.common.SolverConfig`, and returns a
:class:`~demidcd.solvers.common.TrainResult`; none of them knows which task it trains.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionError
from ..primitives.ring import RING_WORDS
from ..tasks.base import Task
from .common import Callback, SolverConfig, TrainResult
from .compiling import compile_jobs, compile_notice
from .plan import TrainingPlan, decide_learners, fit_to_examples, make_plan
from .state import Start, check_start, fingerprint


@dataclass(frozen=True)
class Learner:
    """A registered learner.

    ``schedule``: "module:function" under :mod:`demidcd.solvers`, called as
    ``f(task, config, threads, callback, cpu_log=…, log=…, **options)``. ``min_threads``: the
    fewest processes it runs on (:func:`train` refuses fewer); ``single_process``: it runs on
    one process whatever ``threads`` says (sequential algorithms; the log says so when more were
    asked for). ``in_process_threads``: its ``threads`` are threads of one process (the
    CRF's gradient threads), not processes. ``config_fields``: the
    :class:`~.common.SolverConfig` fields it reads (None: all but ``loss``, see ``options``;
    the plan shows and records only these). ``warm``: "module:function" compiling its own
    kernels, called by warm-up.
    ``options``: the engine options it reads (the CLI shows them; its plan leaves the others
    out, :func:`.plan.make_plan`, and its schedule refuses any other keyword), and
    ``"loss"`` when it solves either SSVM loss of ``SolverConfig.loss`` (the DCD family;
    :func:`check_loss` refuses ``--loss`` for the others).
    ``inference``: the inference calls warm-up compiles: ``"augmented"`` (Eq. 5),
    ``"argmax"`` (plain), ``"scaled"`` (loss-scaled, for w = s·v and the ramp loss),
    ``"workers"`` (the workers' w̄ dtype); empty: none (the CRF: marginals, no max; the
    loss-augmented inference is compiled for every other learner). ``active_sets``: compile
    the DCD kernels.
    ``resumable``: it takes a :class:`~.state.Start` (a prior w₀, a saved dual state to
    resume from, keeping the final state; the DCD family). ``partial``: how it trains on
    partially labelled data (a task whose ``partial`` is true): ``"cccp"``, the convex steps
    of :func:`.cccp.run_cccp`; ``"native"``, as it trains on any data; ``""``: refused.
    ``sweep_epochs``: one of its epochs (what ``max_epochs`` counts) infers every example once
    (False for DEMI-DCD's one learner, whose epochs are update passes beside its workers'
    sweeps; its several learners' epochs are sweeps: :attr:`.plan.TrainingPlan.sweep_epochs`).
    """

    name: str
    schedule: str
    summary: str
    min_threads: int = 1
    single_process: bool = False
    in_process_threads: bool = False
    config_fields: tuple[str, ...] | None = None
    options: tuple[str, ...] = ()
    inference: tuple[str, ...] = ("augmented",)
    active_sets: bool = False
    warm: str | None = None
    objective: str = "L2-loss SSVM"
    resumable: bool = False
    needs: tuple[str, ...] = ()
    partial: str = ""  # partially labelled data: "cccp" (the latent SSVM, .cccp), "native"
    # (the learner's own objective takes it), "" (refused)
    sweep_epochs: bool = True  # one of its epochs (``max_epochs``) infers every example once

    def function(self, what: str | None = None) -> Callable[..., Any]:
        """The function ``what`` ("module:function" of this package) names, imported: by
        default the schedule, the function that trains (:func:`run_plan` calls it)."""
        module, fn = (what or self.schedule).split(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), fn)

    def processes_text(self) -> str:
        """The processes it runs on, as ``demidcd learners`` prints them."""
        if self.in_process_threads:
            return "1, with --threads threads"
        return "1 (any --threads)" if self.single_process else f">= {self.min_threads}"


_ENGINE = ("debug", "backend", "ray_address")
LEARNERS: dict[str, Learner] = {}


def register(learner: Learner) -> Learner:
    """Add a learner to :data:`LEARNERS` (the CLI choices, the API and warm-up follow)."""
    LEARNERS[learner.name] = learner
    return learner


_DCD_OBJECTIVE = "L2-loss SSVM (--loss l1: L1-loss)"
register(Learner("dcd", "dcd:run_dcd", "1-DCD: DCD-SSVM (Chang & Yih 2013, Algorithm 3)",
                 single_process=True, options=("loss",), active_sets=True,
                 objective=_DCD_OBJECTIVE, resumable=True, partial="cccp"))
register(Learner("dcd-light", "dcd:run_dcd_light", "DCD-Light (Algorithm 2): one update "
                 "per inference", single_process=True, options=("loss",), active_sets=True,
                 objective=_DCD_OBJECTIVE, resumable=True, partial="cccp"))
register(Learner("demi-dcd", "demi_dcd:train_demi_dcd", "DEMI-DCD: one learner process, "
                 "p - 1 inference workers, no barrier (--learners K: K learner processes on "
                 "one shared w)",
                 min_threads=2,
                 options=("learners", "loss", *_ENGINE),
                 inference=("augmented", "workers"), active_sets=True,
                 objective=_DCD_OBJECTIVE, resumable=True, partial="cccp", sweep_epochs=False))
register(Learner("ms-dcd", "ms_dcd:train_ms_dcd", "MS-DCD: master-slave DCD with a barrier",
                 min_threads=2, options=("loss", *_ENGINE), inference=("augmented", "workers"),
                 active_sets=True, objective=_DCD_OBJECTIVE, resumable=True, partial="cccp"))
register(Learner("sp-ipm", "sp_ipm:train_sp_ipm", "structured perceptron with iterative "
                 "parameter mixing (McDonald et al. 2010)", min_threads=2,
                 options=("perceptron_epochs_per_round", "mixing", "averaged", "debug", "backend",
                          "ray_address"),
                 inference=("argmax",), objective="none (perceptron)"))
register(Learner("perceptron", "online:train_perceptron", "averaged structured perceptron "
                 "(Collins 2002)", single_process=True, options=("averaged",),
                 inference=("argmax",), warm="online:compile_kernels",
                 objective="none (perceptron)"))
register(Learner("mira", "online:train_mira", "1-best MIRA, loss-augmented, step cap C, "
                 "averaged (Crammer et al. 2005)", single_process=True,
                 options=("averaged",), warm="online:compile_kernels",
                 objective="none (online)"))
register(Learner("pegasos", "online:train_pegasos", "structured Pegasos, mini-batch k, step "
                 "1/(λt), averaged", options=("batch_size", "lam", "projection", "averaged",
                                               *_ENGINE),
                 inference=("scaled",), warm="online:compile_kernels",
                 objective="L1-loss SSVM (hinge)"))
register(Learner("adagrad", "online:train_adagrad", "online primal subgradient with AdaGrad, "
                 "sparse lazy updates, L1 or L2", options=("batch_size", "eta", "regularizer",
                                                           *_ENGINE),
                 warm="online:compile_kernels", objective="L1-loss SSVM (hinge)"))
register(Learner("sdm-hinge", "sdm:train_sdm_hinge", "sequential dual method, hinge loss "
                 "(SMO per example)", single_process=True, active_sets=True,
                 warm="sdm:compile_kernels", objective="L1-loss SSVM (hinge)"))
register(Learner("sdm-ramp", "sdm:train_sdm_ramp", "sequential dual method for the "
                 "structured ramp loss with CCCP", single_process=True, active_sets=True,
                 inference=("augmented", "scaled"), warm="sdm:compile_kernels",
                 objective="ramp loss (non-convex)"))
register(Learner("crf", "crf:train_crf", "linear-chain CRF (log loss) by SDCA (--threads - 1 "
                 "marginal threads, one learner thread, no barrier) or L-BFGS / OWL-QN "
                 "(--crf-method lbfgs; gradients on --threads threads) (chain tasks only)",
                 options=("crf_method", "c1", "c2", "all_possible_transitions",
                          "num_memories", "warm_epochs", "max_iterations", "epsilon",
                          "period", "stop_delta", "stop_window", "stop_eps"),
                 inference=(), warm="crf:compile_kernels", in_process_threads=True,
                 config_fields=("time_limit", "eval_every", "seed"), needs=("marginals",),
                 partial="native",
                 objective="CRFsuite's -log-likelihood + c1 |w|_1 + c2 |w|^2"))

ALGORITHMS = tuple(LEARNERS)


def get_learner(algorithm: str) -> Learner:
    """The registered learner ``algorithm``, or a one-line OptionError."""
    try:
        return LEARNERS[algorithm]
    except KeyError:
        raise OptionError(f"unknown --algorithm {algorithm!r}; choose one of "
                          f"{', '.join(LEARNERS)}") from None


def check_threads(learner: Learner, threads: int) -> None:
    """Refuse a process count (an int >= 1, :func:`.plan.check_threads_value`) the learner
    cannot run on (never run another learner)."""
    if threads < learner.min_threads:
        raise OptionError(f"--algorithm {learner.name} needs --threads >= {learner.min_threads} "
                          "(one learner process and at least one inference worker); use "
                          "--algorithm "
                          "dcd for one process")


def check_resumable(learner: Learner, *given: str) -> None:
    """Refuse the flags in ``given`` (``--save-state``, ``--resume``, ``--init``, those the
    user gave) for a learner without a dual state to save, resume or start from."""
    if given and not learner.resumable:
        takers = ", ".join(k for k, v in LEARNERS.items() if v.resumable)
        raise OptionError(f"{' / '.join(given)}: --algorithm {learner.name} has no dual state "
                          f"to save, resume or start from a model (only the DCD learners: "
                          f"{takers})")


def check_loss(learner: Learner, loss: str | None) -> None:
    """Refuse a ``--loss`` (None: not given) for a learner that does not take it: the DCD
    family solves either SSVM loss, every other learner has an objective of its own."""
    if loss is not None and "loss" not in learner.options:
        takers = ", ".join(k for k, v in LEARNERS.items() if "loss" in v.options)
        raise OptionError(f"--loss is an option of the DCD learners ({takers}); "
                          f"--algorithm {learner.name} has its own objective "
                          f"({learner.objective})")


def oversubscription(algorithm: str, threads: int, learners: str | int | None = None,
                     backend: str = "shm", ray_address: str | None = None) -> str | None:
    """The warning for a run on more processes than the cores this process may use (None
    when they fit, or when the workers run on a Ray cluster), describing the layout the run
    will have: the learner process keeps a core and the inference workers share the others at
    a lower priority (:mod:`demidcd.parallel.engine`), which is also what DEMI-DCD's
    ``learners="auto"`` chooses then (:func:`.plan.auto_fits_cores`); or, with as many
    learner processes as threads asked for, those sharing the cores (:mod:`.multi_dcd`)."""
    from ..primitives.monitor import usable_cores

    cores = usable_cores()
    if threads <= cores or get_learner(algorithm).single_process or \
            (backend == "ray" and ray_address):
        return None
    head = f"--threads {threads} is more than the {cores} core{'s' * (cores > 1)} this " \
           "process may use"
    if algorithm == "demi-dcd" and backend == "shm":
        from .plan import parse_learners

        if parse_learners(learners) == threads:
            return (f"{head}: the {threads} learner processes (--learners {threads}) share "
                    f"{'them' if cores > 1 else 'it'} at a lower priority than their "
                    f"coordinator, so the run is no faster than with --threads {cores} "
                    f"(--learners auto runs one learner process and {threads - 1} inference "
                    "workers here)")
    if cores == 1:
        return (f"{head}: the learner process and the {threads - 1} inference workers share "
                "it, the workers at a lower priority, so the run is no faster than with one "
                "process")
    return (f"{head}: the learner process keeps one core to itself and the {threads - 1} "
            f"inference workers share the other {cores - 1} at a lower priority, so the run "
            f"is no faster than with --threads {cores}")


def check_memory(task: Task, threads: int, ring_words: int) -> None:
    """Fail early when the weight vectors alone would not fit in the available memory: the
    learner's w, the shared [w, A] (two buffers) and the rings (threads > 1), and one w per
    SP-IPM mapper."""
    import psutil

    from ..errors import DemidcdError

    dim, n = task.dim, task.n_examples
    need = 8 * dim * 2
    if threads > 1:
        need += 16 * (dim + n) + 8 * ring_words * (threads - 1) + 8 * dim * (threads - 1)
    avail = psutil.virtual_memory().available
    if need > avail:
        raise DemidcdError(f"training needs at least {need / 2**30:.1f} GiB for {dim:,} weights "
                           f"on {threads} processes but only {avail / 2**30:.1f} GiB is "
                           "available; use --hashing, a larger --min-count or fewer --threads")


def warm_up(task: Task, algorithm: str, threads: int, loss: str = "l2",
            several: bool | None = False, state: bool = False, extra: Any = ()) -> None:
    """Compile (or load from numba's cache) every kernel the run will call, on example 0, before
    the solver's clock starts and before any worker forks (workers inherit the compiled code):
    the jobs of :func:`warm_up_jobs`, the cold ones compiled on up to ``threads`` processes at
    once (:func:`.compiling.compile_jobs`).

    On a cold cache (a fresh install) compilation takes seconds: without this it lands on the
    clock of whichever learner runs first, and a DEMI-DCD learner sits on empty active sets
    while its worker compiles the inference kernels.
    ``loss``: the DCD learners' loss, whose update kernels are compiled. ``several``: whether
    DEMI-DCD runs several learner processes (None: not decided yet, ``learners="auto"``);
    ``state``: also the kernels that save and load a dual state; ``extra``: more jobs (name,
    function, rough seconds), e.g. the decoding a callback's dev evaluation calls.
    """
    compile_jobs([*warm_up_jobs(task, algorithm, threads, loss, several, state,
                                decoding=bool(extra)), *extra],
                 processes=max(int(threads), 1))


def preload(task: Task, plan: Any) -> int:
    """Load from numba's cache (never compile) the kernels :func:`warm_up` will want for a run
    of ``plan`` on a task like ``task`` (kernels' argument types, hence what is loaded, depend
    on the task's dtypes only, not on its size): the command line runs it on a few made-up
    examples while another process sets up the data, so that the run's warm-up finds them in
    memory. Returns the jobs fully loaded."""
    from .compiling import load_jobs

    several = None if plan.learners == "auto" else plan.several_learners
    return load_jobs(warm_up_jobs(task, plan.algorithm, plan.threads, plan.config.loss,
                                  several))


def _one_record() -> Any:
    """A batch of one record with the dtypes every task's records have (a kernel's argument
    types, hence what numba compiles, depend on them only)."""
    from ..primitives.records import INDEX_DTYPE, VALUE_DTYPE, RecordBatch

    return RecordBatch(np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1), np.zeros(1),
                       np.array([0, 1], np.int64), np.zeros(1, INDEX_DTYPE),
                       np.ones(1, VALUE_DTYPE))


def warm_up_jobs(task: Task, algorithm: str, threads: int, loss: str = "l2",
                 several: bool | None = False, state: bool = False,
                 decoding: bool = False) -> list[tuple]:
    """The independent warm-up calls of a run, as (name, function, rough compile seconds on one
    core of a 2-core machine) jobs: only the kernels this learner calls on this task and
    layout. The workers' float32 inference and the transport (rings, seqlocks) only for
    DEMI-DCD with one learner process and its workers (``several`` False) or undecided (None:
    the transport, cheap, but not the second inference); the shared-w kernels only for
    several learner processes (or undecided). ``decoding``: a dev evaluation decodes (its
    Viterbi is compiled apart for a learner without inference, the CRF)."""
    learner = get_learner(algorithm)
    ex = np.zeros(1, np.int64)
    dim = task.dim
    jobs: list[tuple] = []
    parts = getattr(task, "inference_parts", None)  # its large callees, compiled apart
    if learner.inference:  # (every learner but the CRF, which never searches a max)
        if parts is None:
            jobs.append(("inference", lambda: task.loss_augmented(np.zeros(dim), ex), 35.0))
        else:  # the callees first (in parallel), then the kernel, which loads them
            jobs += [(f"{name} (float64)", fn, sec)
                     for name, fn, sec in parts(np.zeros(dim))]
            jobs.append(("inference", lambda: task.loss_augmented(np.zeros(dim), ex), 10.0, 1))
    if "argmax" in learner.inference:
        jobs.append(("argmax", lambda: task.argmax_records(np.zeros(dim), ex), 20.0))
    if "scaled" in learner.inference:
        def scaled() -> None:
            try:
                task.loss_scaled(np.zeros(dim), ex, -1.0)
            except NotImplementedError:  # Pegasos falls back, sdm-ramp refuses the task
                pass
        jobs.append(("scaled inference", scaled, 20.0))
    workers = threads > 1 and not several
    if ("workers" in learner.inference and workers and several is not None
            and task.inference_dtype != np.float64):
        w32 = np.zeros(dim, task.inference_dtype)  # the workers' w̄
        if parts is None:
            jobs.append(("workers' inference", lambda: task.loss_augmented(w32, ex), 25.0))
        else:
            jobs += [(f"{name} (workers')", fn, sec) for name, fn, sec in parts(w32)]
            jobs.append(("workers' inference", lambda: task.loss_augmented(w32, ex), 8.0, 1))
    if learner.active_sets:
        from .activeset import ActiveSets

        jobs.append(("active sets", lambda: ActiveSets(
            1, dim, 1.0, track_changes=threads > 1, w=np.zeros(dim),
            loss=loss).compile_kernels(_one_record()), 15.0))
    if learner.warm:
        module = learner.warm.split(":")[0]
        split = getattr(importlib.import_module(f"{__name__}.{module}"), "warm_up_jobs", None)
        fn = learner.function(learner.warm)
        if split is not None:  # its kernels as independent jobs, then the whole warm-up
            jobs += split(task)  # (loading them; compiling any the jobs leave out)
            jobs.append((f"{learner.name} kernels", lambda: fn(task), 2.0, 1))
        else:
            jobs.append((f"{learner.name} kernels", lambda: fn(task), 25.0))
    if learner.name == "demi-dcd" and threads > 1 and several is not False:
        from .multi_dcd import warm_up_shared

        jobs.append(("shared w", lambda: warm_up_shared(dim, loss, _one_record()), 5.0))
    if threads > 1 and (workers or learner.name != "demi-dcd"):
        jobs.append(("transport", lambda: _warm_transport(task), 8.0))
    if state:
        jobs.append(("dual state", lambda: _warm_state_kernels(dim), 2.0))
    if decoding and parts is not None and not learner.inference:  # (decoding's Viterbi)
        jobs += [(name, fn, sec) for name, fn, sec in parts(np.zeros(dim)) if name == "viterbi"]
    return jobs


def _warm_transport(task: Task) -> None:
    """The kernels of the workers' transport: rings, seqlocks and the rounding of w̄."""
    from ..parallel.worker import rounding_slack
    from ..primitives.ring import warmup as ring_warmup
    from ..primitives.seqlock import warmup as seqlock_warmup

    ring_warmup()
    seqlock_warmup()
    for dt in {np.float64, task.inference_dtype}:
        wa = np.zeros(task.dim + 1, dt)
        rounding_slack(wa, task.dim, np.zeros(1, np.int64), np.zeros(2, np.int64),
                       np.zeros(0, np.int32), np.zeros(0), 1.0)


def train(task: Task, plan: TrainingPlan | str, config: SolverConfig | None = None,
          threads: Any = 1, callback: Callback | None = None, cpu_log: str | None = None,
          log: Any = None, tick: Any = None, start: Start | None = None,
          warm: Callable[[], Any] | None = None, since: float | None = None,
          **engine: Any) -> TrainResult:
    """Train ``task`` as ``plan`` says (:class:`~.plan.TrainingPlan`, which the estimators
    build once with every option checked), or with the registered learner named ``plan``,
    ``config`` and ``threads`` processes, whose plan is made here (:func:`~.plan.make_plan`:
    the ``engine`` options of the learners, ``learners``, ``backend``, ``ray_address``, …; an
    option no learner reads is a TypeError).

    ``warm()``: a call to compile with the learner's kernels, before the clock (the decoding
    of a dev evaluation in ``callback``).
    ``start`` (the DCD learners, :mod:`.state`): a prior w₀ (warm start), a saved
    :class:`~.state.DualState` to resume from (refused with :class:`~.state.StateMismatch`
    when it is of another problem: data, C, loss, feature space), and whether to return the
    final state in ``result.state`` (with this problem's fingerprint and the solver time of
    every run so far). ``tick(seconds, w)`` is called by the learner between blocks of work
    (snapshots). ``learners="auto"`` is decided on ``task`` before training starts
    (:func:`~.plan.decide_learners`). ``since``: the ``time.perf_counter()`` of the user's
    call (a fit's start): the set-up before the clock, from then, is logged when it is a good
    part of ``time_limit`` and kept in ``result.extra["setup_seconds"]``."""
    if not isinstance(plan, TrainingPlan):
        if config is None:
            raise TypeError("train() needs a SolverConfig with an algorithm name")
        given = () if not start else tuple(
            name for name, on in (("save_state", start.keep_state),
                                  ("resume", start.state is not None),
                                  ("init", start.state is None and start.w0 is not None)) if on)
        plan = make_plan(plan, config, threads, loss=None if config.loss == "l2" else
                         config.loss, start=given, **engine)
        plan = decide_learners(plan, task, log)
    elif config is not None or engine or threads != 1:
        raise TypeError("train() takes a TrainingPlan alone: its config, threads and options "
                        "are the plan's")
    return run_plan(task, plan, callback, cpu_log=cpu_log, log=log, tick=tick, start=start,
                    warm=warm, since=since)


def run_plan(task: Task, plan: TrainingPlan, callback: Callback | None = None,
             cpu_log: str | None = None, log: Any = None, tick: Any = None,
             start: Start | None = None, warm: Callable[[], Any] | None = None,
             since: float | None = None) -> TrainResult:
    """Run a checked :class:`~.plan.TrainingPlan` on ``task`` (see :func:`train`). Nothing of
    the plan is checked again; only what depends on the data is: the memory the weights
    need, a start point's dimension and problem, the processes (no more than the examples
    fill, :func:`~.plan.fit_to_examples`) and ``learners="auto"``, measured on ``task``
    when the plan still says so. Partially labelled data (``task.partial``) is trained by
    CCCP (:func:`.cccp.run_cccp`) over convex steps run as complete data is, for a learner
    that takes it (:attr:`Learner.partial`)."""
    if getattr(task, "partial", False) and plan.learner.partial != "native":
        if plan.learner.partial != "cccp":
            takers = ", ".join(k for k, v in LEARNERS.items() if v.partial)
            raise OptionError(f"--algorithm {plan.algorithm} cannot train on partially "
                              f"labelled data (unknown or set labels); use one of {takers}")
        from .cccp import run_cccp

        return run_cccp(task, plan, _run_convex, callback=callback, cpu_log=cpu_log, log=log,
                        tick=tick, start=start, warm=warm, since=since)
    return _run_convex(task, plan, callback, cpu_log=cpu_log, log=log, tick=tick, start=start,
                       warm=warm, since=since)


def _run_convex(task: Task, plan: TrainingPlan, callback: Callback | None = None,
                cpu_log: str | None = None, log: Any = None, tick: Any = None,
                start: Start | None = None, warm: Callable[[], Any] | None = None,
                since: float | None = None) -> TrainResult:
    """:func:`run_plan` on complete data (or one convex step of CCCP)."""
    plan = fit_to_examples(plan, task.n_examples, log)
    learner, threads, config = plan.learner, plan.threads, plan.config
    if plan.note and log is not None:
        log(plan.note)
    check_memory(task, threads, RING_WORDS)
    fp = None
    if start:
        check_start(start, task.dim)
        fp = fingerprint(task, config.C, config.loss, start.prior)
        if start.state is not None:
            start.state.check(fp)
            start.state.validate(task.n_examples, task.dim)
    t_warm = time.perf_counter()
    with compile_notice(log, config.time_limit) as watch:
        if plan.learners == "auto":
            plan = decide_learners(plan, task, log)
        warm_up(task, plan.algorithm, threads, config.loss, several=plan.several_learners,
                state=bool(start), extra=[("decoding", warm, 4.0, 1)] if warm else ())
    setup = _say_setup(log, config.time_limit, t_warm if since is None else since,
                       watch.compiled > 0)
    opts = plan.schedule_options()
    schedule = learner.function()
    if plan.several_learners:
        from . import multi_dcd

        schedule = multi_dcd.train_multi_dcd  # several learner processes on one shared w
    if start:
        opts["start"] = start
    if threads == 1:
        res = schedule(task, config, threads, callback, cpu_log=cpu_log, log=log, tick=tick,
                       **opts)
        res.extra.update(setup)
        return _with_state(res, start, fp, plan.algorithm)
    from ..errors import WorkerError

    seen = _LastIterate(task, callback)
    try:
        res = schedule(task, config, threads, seen, cpu_log=cpu_log, log=log, tick=tick,
                       **opts)
        res.extra.update(setup)
        return _with_state(res, start, fp, plan.algorithm)
    except WorkerError as e:  # the schedule's result is lost: rebuild it from the last iterate
        e.partial = seen.result("worker-failed")
        raise


SETUP_NOTICE_SHARE = 0.1  # set-up before the clock this share of the time limit is logged


def _say_setup(log: Any, time_limit: float | None, since: float, compiled: bool) -> dict:
    """The set-up before the solver's clock, from ``since`` (the user's call, or the warm-up's
    start): logged as ``set-up before training: N s … outside the time limit`` when it is at
    least :data:`SETUP_NOTICE_SHARE` of ``time_limit`` (and a second); returned as the
    result's ``setup_seconds`` and whether kernels compiled (``compiled_kernels``)."""
    seconds = time.perf_counter() - since
    if log is not None and time_limit and seconds >= max(1.0, SETUP_NOTICE_SHARE * time_limit):
        what = "features, encoding and compiling kernels" if compiled else "features, encoding"
        log(f"set-up before training: {seconds:.1f}s ({what}), outside the time limit of "
            f"{time_limit:g}s, which starts now")
    return {"setup_seconds": seconds, "compiled_kernels": compiled}


def _with_state(res: TrainResult, start: Start | None, fp: dict | None,
                algorithm: str) -> TrainResult:
    """Complete the final state the learner kept: the problem's fingerprint, the algorithm,
    the prior and the solver time of every run so far (a run that kept none, e.g. stopped
    before any learner began, passes on the state it started from)."""
    if not start or not start.keep_state:
        return res
    if res.state is None and start.state is not None and \
            not start.state.meta.get("released"):
        res.state = start.state
    if res.state is None:
        return res
    st = res.state
    before = float(start.state.meta.get("seconds", 0.0)) if start.state is not None else 0.0
    st.meta.update(fingerprint=fp, seconds=before + float(res.seconds or 0.0))
    st.meta.setdefault("algorithm", algorithm)
    if start.prior is not None:
        st.arrays["w0"] = start.prior
    return res


def _warm_state_kernels(dim: int) -> None:
    """Compile the kernels that save and load a dual state (:mod:`.state`) before the clock."""
    from .activeset import ActiveSets

    act = ActiveSets(1, dim, 1.0)
    act.restore(act.state())


LAST_ITERATE_SHARE = 0.02  # the share of a learner process's time its copies of w for a
# partial model may take: a copy of a large w stalls the learner process (or, with several
# learner processes, every one of them, paused for a rebuild): a copy of a w of a GiB takes a
# good part of a second


class _LastIterate:
    """The callback of a parallel schedule, remembering the records and a copy of w from a
    recent one, so that a run stopped by a :class:`~demidcd.parallel.engine.WorkerError` (a
    worker that died more than the restart limit allows) still yields its partial model,
    marked unfinished. w is copied at a record when the time since the last copy is at least
    that copy's cost over :data:`LAST_ITERATE_SHARE` (every record where w is small). The copy
    is float32, as the workers' w̄ is: it is memory held through all of training for a run that
    fails, and a partial model rounded to float32 is one the workers would infer with.
    ``clock``: seconds (for tests)."""

    def __init__(self, task: Task, callback: Callback | None,
                 clock: Callable[[], float] = time.perf_counter):
        self.callback, self.w = callback, np.zeros(task.dim, np.float32)
        self.history: list[dict] = []
        self.clock, self.copied = clock, None  # the record whose w was copied
        self.copied_at, self.copy_seconds = 0.0, 0.0

    def __call__(self, rec: dict, w: np.ndarray) -> None:
        now = self.clock()
        if self.copied is None or now - self.copied_at >= self.copy_seconds / LAST_ITERATE_SHARE:
            np.copyto(self.w, w)
            self.copied, self.copied_at, self.copy_seconds = rec, now, self.clock() - now
        self.history.append(rec)
        if self.callback is not None:
            self.callback(rec, w)

    def result(self, reason: str) -> TrainResult:
        last = self.copied or {}
        return TrainResult(self.w.astype(np.float64), False, reason, int(last.get("epoch", 0)),
                           float(last.get("seconds", 0.0)), self.history)
