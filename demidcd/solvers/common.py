"""What every learner shares: hyper-parameters, the objective, the stopping clock, the result."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np

from ..errors import OptionError
from ..options import BY_NAME, default, default_C
from ..primitives.vectors import dot
from ..tasks.base import InferenceInterrupted, Task


@dataclass
class SolverConfig:
    """Hyper-parameters shared by the learners (names as in the CLI), with the option table's
    defaults (:mod:`demidcd.options`, where every default lives); the CLI passes on only the
    options given and the estimators build the config with :meth:`from_options`.

    C: regularisation of Eq. (1). tol: stop when a full inference pass finds no structure whose
    violation Δ − w·φ − A_i/(2C) exceeds tol and the largest projected gradient on the active
    set is below tol. delta: shrinking threshold δ of Eq. (9); the admission threshold is
    min(delta, tol) so that a structure the stopping rule counts can always enter.
    inner_passes: r of DCD-SSVM (Algorithm 3); 0 gives DCD-Light (Algorithm 2).
    max_epochs: outer iterations (None: see :meth:`epochs`). time_limit: seconds of solver
    time (None: none). seed: shuffling and sharding. eval_every: seconds between primal/dual
    evaluations in the log (None: never).
    batch: examples per loss-augmented inference call in 1-DCD (1 = the exact sequential
    algorithm; larger amortises call overhead, with w refreshed between batches).
    skip: share of the examples with the smallest projected gradients that a pass over the
    active sets leaves out between full passes (:class:`~demidcd.solvers.activeset.SweepPlan`).
    sweeps: sweeps over an example's active set per visit, at most
    (:func:`~demidcd.solvers.kernels.update_examples`); for the L1 loss, at most sweeps · |A_i|
    SMO pair steps per visit (:meth:`~demidcd.solvers.activeset.ActiveSets.update`).
    loss: the SSVM the DCD learners solve: ``"l2"``, the L2-loss (squared hinge) SSVM of
    Eq. (1), or ``"l1"``, the L1-loss (hinge) SSVM ½‖w‖² + C Σ_i ξ_i, whose per-example update
    is the SDM's SMO on the same active sets (:class:`~demidcd.solvers.activeset.ActiveSets`).
    For the L1 loss the violation of a structure is Δ − w·φ − ξ̂_i (ξ̂_i the example's hinge
    loss on its active set) and the largest projected gradient is the largest per-example KKT
    gap; the stopping rule is otherwise the same.
    """

    C: float = default_C()  # the option table's rule for C=None (feature dicts: the estimator's)
    tol: float = default("tol")
    delta: float = default("delta")
    max_epochs: int | None = default("max_epochs")
    time_limit: float | None = default("time_limit")
    seed: int = default("seed")
    inner_passes: int = default("inner_passes")
    max_active: int = default("max_active")
    batch: int = default("batch")
    eval_every: float | None = default("eval_every")
    skip: float = default("skip")
    sweeps: int = default("sweeps")
    loss: str = "l2"  # the option table's rule for loss=None outside chunking and ner

    @classmethod
    def from_options(cls, **given: Any) -> SolverConfig:
        """The config with the options that are not None (the others keep their defaults),
        each converted to its field's type; a value of the wrong type, or a name that is not a
        field, raises :class:`OptionError`."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for name, v in given.items():
            if name not in known:
                raise OptionError(f"unknown solver option {name!r}")
            if v is None:
                continue
            if "str" in str(known[name].type):
                if not isinstance(v, str):
                    raise OptionError(f"--{name.replace('_', '-')} must be a string, got {v!r}")
                values[name] = v
                continue
            kind = float if "float" in str(known[name].type) else int
            flag = BY_NAME[name].flag if name in BY_NAME else f"--{name.replace('_', '-')}"
            if kind is int and isinstance(v, int | np.integer) and not isinstance(v, bool) \
                    and not -2**63 < v < 2**63:
                digits = len(str(abs(int(v))))
                raise OptionError(f"{flag} must be an integer below 2**63, got a number of "
                                  f"{digits} digits")
            try:
                if isinstance(v, bool) or (kind is int and float(v) != int(v)):
                    raise ValueError
                values[name] = kind(v)
            except (TypeError, ValueError, OverflowError):
                raise OptionError(f"{flag} must be a number"
                                  f"{' (an integer)' if kind is int else ''}, got {v!r}"
                                  ) from None
        return cls(**values)

    def validate(self) -> None:
        """Raise :class:`OptionError` for a value outside its range (C, tol and delta must be
        finite: C = inf would be the hard-margin SVM, which the L2-loss dual does not solve)."""
        if not 0 < self.C < math.inf:
            raise OptionError(f"--C must be a finite number > 0, got {self.C}")
        if not 0 < self.tol < math.inf:
            raise OptionError(f"--tol must be a finite number > 0, got {self.tol}")
        if not 0 <= self.delta < math.inf:
            raise OptionError(f"--delta must be a finite number >= 0, got {self.delta}")
        if self.max_epochs is not None and self.max_epochs < 1:
            raise OptionError(f"--max-epochs must be >= 1, got {self.max_epochs}")
        if self.time_limit is not None and not self.time_limit > 0:
            raise OptionError(f"--time-limit must be > 0, got {self.time_limit}")
        if not 0 <= self.seed < 2**32:
            raise OptionError(f"--seed must be an integer in [0, 2**32), got {self.seed}")
        if self.inner_passes < 0:
            raise OptionError(f"--inner-passes must be >= 0, got {self.inner_passes}")
        if self.max_active < 1:
            raise OptionError(f"--max-active-per-example must be >= 1, got {self.max_active}")
        if self.batch < 1:
            raise OptionError(f"--batch must be >= 1, got {self.batch}")
        if self.sweeps < 1:
            raise OptionError(f"--sweeps must be >= 1, got {self.sweeps}")
        if not 0.0 <= self.skip < 1.0:
            raise OptionError(f"--skip must be in [0, 1), got {self.skip}")
        if self.eval_every is not None and not self.eval_every >= 0:
            raise OptionError(f"--eval-every must be >= 0, got {self.eval_every}")
        if self.loss not in LOSSES:
            raise OptionError(f"--loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")

    def epochs(self, default: int) -> int:
        """The epoch limit: ``max_epochs``, or the learner's own default when None (the DCD
        learners: none, they run until converged or the time limit; SP-IPM: 100 rounds)."""
        return default if self.max_epochs is None else int(self.max_epochs)

    @property
    def admit(self) -> float:
        """The DCD learners' shrinking threshold of Eq. (9) and admission threshold of
        Eq. (11): δ, at most the tolerance. A δ above tol would shrink a structure admitted
        with a violation between them (α = 0, violation < δ) before its first step, at every
        visit, while the stop rule counts it as a violator (> tol): no run could certify."""
        return min(self.delta, self.tol)


@dataclass
class Objective:
    primal: float
    dual: float | None
    gap: float | None  # (primal − dual) / primal
    violators: int


LOSSES = ("l1", "l2")  # SolverConfig.loss: the hinge and the squared hinge


def primal_objective(task: Task, w: np.ndarray, C: float, chunk: int = 512,
                     loss: str = "l2", w0: np.ndarray | None = None) -> tuple[float, int]:
    """The primal, with ξ_i = max(0, max_y Δ(y_i, y) − w·φ(y, y_i, x_i)) by loss-augmented
    inference (Eq. 5) over all examples: for the L2 loss P(w) = ½‖w‖² + C Σ_i ξ_i² (Eq. 1), for
    the L1 loss (hinge) ½‖w‖² + C Σ_i ξ_i; with a prior ``w0`` (warm start,
    :mod:`.state`) ½‖w − w₀‖² in place of ½‖w‖². Returns (P, #ξ_i > 0)."""
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}")
    total, n_viol = 0.0, 0
    for s in range(0, task.n_examples, chunk):
        b = task.loss_augmented(w, np.arange(s, min(s + chunk, task.n_examples)))
        xi = np.maximum(b.delta - b.margin, 0.0)
        total += dot(xi, xi) if loss == "l2" else float(xi.sum())
        n_viol += int((xi > 0).sum())
    v = w if w0 is None else w - w0
    return 0.5 * dot(v, v) + C * total, n_viol


def objective(task: Task, w: np.ndarray, C: float, dual: float | None = None,
              loss: str = "l2", w0: np.ndarray | None = None) -> Objective:
    """Primal (Eq. 1, or the hinge loss's for ``loss="l1"``; ``w0``: the prior of a warm
    start), optional dual lower bound and relative duality gap."""
    p, nv = primal_objective(task, w, C, loss=loss, w0=w0)
    gap = None if dual is None else (p - dual) / max(abs(p), 1e-300)
    return Objective(p, dual, gap, nv)


REPEAT_SECONDS = 0.5  # a signal this soon after the first is the same request (a double Ctrl-C)


class StopRequest:
    """A graceful stop asked for by a signal (the CLI's SIGINT/SIGTERM handler).

    The handler only sets a flag that the learners poll between blocks of work, so a signal
    never interrupts a compiled kernel half-way. A signal within :data:`REPEAT_SECONDS` of the
    first is the same request (two or three Ctrl-C in a row); a later one raises
    KeyboardInterrupt at once. While :meth:`holding` (the model is written) a signal is only
    counted, so a second Ctrl-C right after the first can neither land outside the handler nor
    lose the model.
    """

    requested = False
    active = False  # a learner loop is running and polls the flag (set by Clock)
    first = 0.0  # time.monotonic() of the first signal while active
    held = -1  # signals counted while holding (-1: not holding)
    listeners: list[Callable[[], None]] = []  # told at once of a request (a kernel's stop flag)

    @classmethod
    def handler(cls, signum: int, frame: object) -> None:
        """First signal during training: set the flag; the same again within
        :data:`REPEAT_SECONDS`: nothing more; a later one while :meth:`holding`: counted;
        otherwise (a later signal, or one while reading data) raise KeyboardInterrupt."""
        now = time.monotonic()
        if cls.active and cls.requested and now - cls.first < REPEAT_SECONDS:
            return  # the same request again
        if cls.held >= 0:
            cls.requested = True
            cls.held += 1
            return
        for tell in list(cls.listeners):  # (threads in compiled kernels see it at once)
            tell()
        if cls.requested or not cls.active:
            cls.requested = True
            raise KeyboardInterrupt
        cls.requested, cls.first = True, now

    @classmethod
    @contextmanager
    def holding(cls) -> Iterator[None]:
        """Signals are only counted inside (a file being written must not be lost to a
        repeated Ctrl-C); KeyboardInterrupt once it is done when one came."""
        cls.held = 0
        try:
            yield
        finally:
            came, cls.held = cls.held, -1
        if came:
            raise KeyboardInterrupt


class Clock:
    """Wall-clock since the solver started (after data loading), the same for every learner.
    :meth:`expired` is also true once a stop was requested."""

    def __init__(self, time_limit: float | None = None,
                 tick: Callable[[float, np.ndarray], None] | None = None):
        self.t0 = time.perf_counter()
        self.time_limit = time_limit
        self.tick = tick
        StopRequest.active = True

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def expired(self) -> bool:
        return StopRequest.requested or (self.time_limit is not None
                                         and self.elapsed() >= self.time_limit)

    def count_work(self, source: Callable[[], tuple[int, int]]) -> None:
        """Let the snapshot writer (the ``tick``'s owner, when it has a ``work_source``) read
        the run's cumulative (updates, inferences) when it takes a snapshot: ``source`` is
        called then only, so a learner's hot loop pays nothing. The counts let
        ``evaluate-snapshots`` say how much work a run had done at each primal it reports
        (work inflation: updates + inferences to a gap, against 1-DCD's)."""
        owner = getattr(self.tick, "__self__", None)
        if owner is not None and hasattr(owner, "work_source"):
            owner.work_source = source

    def poll(self, w: np.ndarray) -> bool:
        """Called by a learner between blocks of work (well under a second apart, whatever one
        outer iteration costs): passes (seconds, w) to ``tick`` (the snapshot writer, which
        keeps its own schedule) and returns :meth:`expired`."""
        if self.tick is not None:
            self.tick(self.elapsed(), w)
        return self.expired()


def work_done(extra: dict[str, Any]) -> tuple[int, int] | None:
    """(updates, inferences) a finished run did, from its ``result.extra``: the coordinate
    updates and every process's loss-augmented inferences (DEMI-DCD's learner's own
    included); None for a learner that does not count them."""
    if "updates" not in extra or "inferences" not in extra:
        return None
    return int(extra["updates"]), int(extra["inferences"]) + int(
        extra.get("learner_inferences", 0))


def stop_reason(converged: bool, clock: Clock) -> str | None:
    """Why an outer loop stops now: ``"interrupted"`` (a signal), ``"converged"``,
    ``"time-limit"``, or None to go on."""
    if StopRequest.requested:
        return "interrupted"
    if converged:
        return "converged"
    return "time-limit" if clock.expired() else None


class OuterLoop:
    """Stop handling of a single learner's outer loop, used as ``with OuterLoop(task, clock) as
    run:``. While it runs, ``task.should_stop`` interrupts an expensive inference on a stop or the
    time limit; :attr:`reason` says why it ended: ``"max-epochs"`` unless :meth:`stop` returned
    True, ``"time-limit"`` (or ``"interrupted"``) when an inference was interrupted,
    ``"interrupted"`` on KeyboardInterrupt (both exceptions end the loop, not the run). The
    clock may come later, through :meth:`start`, for a learner that starts workers first."""

    def __init__(self, task: Task, clock: Clock | None = None) -> None:
        self.task, self.clock, self.reason = task, None, "max-epochs"
        if clock is not None:
            self.start(clock)

    def start(self, clock: Clock) -> Clock:
        """Let a stop or the time limit on ``clock`` interrupt the task's inference."""
        self.clock = clock
        self.task.should_stop = lambda: StopRequest.requested or clock.expired()
        return clock

    def stop(self, converged: bool) -> bool:
        """After an iteration: True, with :attr:`reason` set, when the loop must end."""
        if reason := stop_reason(converged, self.clock):
            self.reason = reason
            return True
        return False

    def __enter__(self) -> OuterLoop:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> bool:
        self.task.__dict__.pop("should_stop", None)  # back to the class default
        if kind is None:
            return False
        if issubclass(kind, InferenceInterrupted):  # a stop while an expensive solver ran
            self.reason = (self.clock and stop_reason(False, self.clock)) or "time-limit"
        elif issubclass(kind, KeyboardInterrupt):
            self.reason = "interrupted"
        else:
            return False
        return True


Callback = Callable[[dict, np.ndarray], None]
"""Called once per outer iteration with a log record and the current w (do not modify w)."""


class StopRule(NamedTuple):
    """A learner's own stopping rule, for the stop line of a run that did not meet it (the
    DCD learners' is the largest projected gradient against ``tol``, the default): what it
    measures, its last value (None: not measured since w last moved), the option setting its
    target, the target, and the option bounding the learner's epochs."""

    what: str
    value: float | None
    option: str
    target: float
    epochs_option: str


@dataclass
class TrainResult:
    w: np.ndarray
    finished: bool  # True when the tolerance test passed
    stop_reason: str  # "converged" | "time-limit" | "max-epochs" | "interrupted"
    epochs: int
    seconds: float
    history: list[dict] = field(default_factory=list)
    dual: float | None = None
    extra: dict = field(default_factory=dict)  # engine measurements (CPU, publish cost, …)
    state: Any = None  # the final DualState (solvers.state), when the run was asked to keep it
