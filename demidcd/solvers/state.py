"""Where a DCD learner starts and what it leaves: resume (a saved dual state) and warm start
(a prior w₀).

**Resume.** The dual of Eq. (2) is fully described by the active sets: per example i its
structures (hash h, Δ, φ, α_{i,y}), A_i = Σ_y α_{i,y} (the L1 loss: ξ̂_i too) and the
skipping state ``ex_pg`` of :class:`~.activeset.SweepPlan`. A :class:`DualState` holds them as
flat arrays (φ in CSR form), with the epoch count, the learner's shuffling state and a
:func:`fingerprint` of the problem (task, C, loss, dimension, examples, a digest of the encoded
data and gold structures, the prior). A run given the state (:class:`Start`) loads the active
sets (:meth:`~.activeset.ActiveSets.restore`), rebuilds w = w₀ + Σ α φ (Eq. 3) and goes on
where the saved run stopped; the stopping rule certifies the same optimum as one uninterrupted
run. The state does not depend on the learner: one saved by ``dcd`` resumes under
``demi-dcd`` and the other way round (only the shuffling state is learner-specific).

**Warm start.** With a prior w₀ the learners solve

    min_w ½‖w − w₀‖² + C Σ_i ξ_i²   (L1 loss: C Σ_i ξ_i),

whose dual, with v = w − w₀ = Σ α φ, is Eq. (2) for the margins Δ − w₀·φ:
−D(α) = −½‖v‖² − w₀·v − (1/4C) Σ A_i² + Σ Δ α = −½‖w‖² + ½‖w₀‖² − (1/4C) Σ A_i² + Σ Δ α.
The gradient g = w·φ − Δ + A_i/(2C) and the update w += d φ are unchanged, so the learners
start from w = w₀ with α = 0 and run as they are; only w = Σ α φ becomes w = w₀ + Σ α φ (the
rebuilds of :mod:`.multi_dcd`), the dual gains ½‖w₀‖² and the primal measures ‖w − w₀‖
(:func:`~.common.primal_objective`). w₀ = 0 is plain training.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import OptionError
from ..tasks.base import Task

STATE_ARRAYS = ("example", "hash", "delta", "alpha", "phi_ptr", "phi_idx", "phi_val",
                "alpha_sum", "xi", "ex_pg")
"""The arrays of a :class:`DualState` (``w0`` too, when the run had a prior)."""


class StateMismatch(OptionError):
    """A saved state that is not of this problem (other data, C, loss or feature space)."""


@dataclass
class DualState:
    """The dual state of a DCD run: ``arrays`` (:data:`STATE_ARRAYS`: per structure its
    example, hash, Δ, α and φ (CSR); per example A_i, ξ̂_i and the last visit's max |PG|; and
    ``w0``, the prior, when there was one; 1-DCD: ``pending_order``, the shuffled order of an
    inference pass it was stopped in) and ``meta`` (``fingerprint``, ``epoch``,
    ``algorithm``, ``rng``: the learner's shuffling state, ``plan``: its sweep plan,
    ``pending``: where in that pass it stopped, ``seconds``: solver time over every run so
    far)."""

    arrays: dict[str, np.ndarray]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_structures(self) -> int:
        return int(self.arrays["example"].shape[0])

    @property
    def w0(self) -> np.ndarray | None:
        return self.arrays.get("w0")

    @property
    def epoch(self) -> int:
        return int(self.meta.get("epoch", 0))

    def belongs_to(self, w: np.ndarray) -> bool:
        """Whether ``w`` (the weights of the model beside this state) is the w the state was
        saved with (``meta["model_weights"]``, :func:`weights_digest`); a state that does not
        record it (written before it did) is taken on trust."""
        saved = self.meta.get("model_weights")
        return saved is None or saved == weights_digest(w)

    def check(self, expected: dict[str, Any]) -> None:
        """Raise :class:`StateMismatch` naming the first entry of the :func:`fingerprint`
        that differs from ``expected`` (this run's)."""
        saved = self.meta.get("fingerprint") or {}
        for key, what in _FINGERPRINT_TEXT.items():
            a, b = saved.get(key), expected.get(key)
            if a != b:
                raise StateMismatch(what(a, b))

    def validate(self, n: int, dim: int) -> None:
        """Raise :class:`StateMismatch` when the arrays do not fit ``n`` examples and a w of
        length ``dim`` (a damaged or foreign file that slipped past its fingerprint)."""
        a = self.arrays
        s = self.n_structures
        ok = (all(k in a for k in STATE_ARRAYS)
              and all(a[k].shape == (s,) for k in ("example", "hash", "delta", "alpha"))
              and a["phi_ptr"].shape == (s + 1,) and a["phi_idx"].shape == a["phi_val"].shape
              and all(a[k].shape == (n,) for k in ("alpha_sum", "xi", "ex_pg"))
              and (a.get("w0") is None or a["w0"].shape == (dim,)))
        if ok and s:
            ptr, ex, idx = a["phi_ptr"], a["example"], a["phi_idx"]
            ok = (ptr[0] == 0 and ptr[-1] == idx.shape[0] and bool(np.all(np.diff(ptr) >= 0))
                  and ex.min() >= 0 and ex.max() < n and bool(np.all(np.diff(ex) >= 0))
                  and (idx.size == 0 or (idx.min() >= 0 and idx.max() < dim))
                  and bool(np.all(np.isfinite(a["alpha"]))) and a["alpha"].min() >= 0.0)
        if not ok:
            raise StateMismatch("the saved state is damaged (inconsistent arrays)")


def weights_digest(w: np.ndarray) -> str:
    """A digest of the weights ``w`` (as a model file stores them: float64), kept in a saved
    state so that a resume can tell whether the model beside it is the one the state was saved
    with: a run stopped between writing the two leaves a new model beside an old state."""
    return hashlib.blake2b(np.ascontiguousarray(w, np.float64), digest_size=16).hexdigest()


def _differ(name: str, unit: str = "") -> Any:
    return lambda a, b: f"{name} is {a}{unit} in the saved state, {b}{unit} in this run"


_FINGERPRINT_TEXT = {
    "task": _differ("the task"),
    "n_examples": lambda a, b: (f"the training data differ: {a} examples in the saved state, "
                                f"{b} in this run"),
    "dim": lambda a, b: (f"the feature space differs: w has {a} weights in the saved state, "
                         f"{b} in this run (other features, labels or feature options)"),
    "C": _differ("--C"),
    "loss": _differ("--loss"),
    "prior": lambda a, b: ("the prior differs: the saved run " + ("started from a model "
                           "(--init)" if a else "had none") + ", this run " +
                           ("starts from " + ("another " if a else "a ") + "model"
                            if b else "has none")),
    "data": lambda a, b: ("the training data differ: same number of examples and weights, but "
                          "other sentences, labels or features (another file?)"),
}


@dataclass
class Start:
    """Where a DCD learner starts: ``w0``, the prior of a warm start (None: w₀ = 0), and
    ``state``, a saved :class:`DualState` to resume from (its own w₀ then); ``keep_state``:
    return the final state in :attr:`~.common.TrainResult.state`; ``release``: the state's
    φ arrays may be dropped once the learner has loaded them (CCCP's re-expressed state, held
    nowhere else: :func:`~.dcd.begin` then empties them and marks the state ``released``)."""

    w0: np.ndarray | None = None
    state: DualState | None = None
    keep_state: bool = False
    release: bool = False

    @property
    def prior(self) -> np.ndarray | None:
        """w₀: the state's when resuming, else ``w0``; None for w₀ = 0."""
        if self.state is not None:
            return self.state.w0
        return self.w0

    @property
    def epoch(self) -> int:
        """Epochs done before this run (0 unless resuming)."""
        return 0 if self.state is None else self.state.epoch

    def __bool__(self) -> bool:
        return self.w0 is not None or self.state is not None or self.keep_state


def digest(arrays: list[tuple[str, np.ndarray]]) -> str:
    """SHA-256 (hex, 32 digits) of named arrays: names, dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for name, a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
    return h.hexdigest()[:32]


def _task_arrays(obj: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, np.ndarray]]:
    """Every public numpy array of ``obj`` (a task), sorted by name, descending one level into
    tuples and into objects of this package that hold arrays (an encoding)."""
    out: list[tuple[str, np.ndarray]] = []
    for name in sorted(vars(obj)):
        if name.startswith("_"):
            continue
        v = getattr(obj, name)
        key = prefix + name
        if isinstance(v, np.ndarray):
            out.append((key, v))
        elif depth < 2 and isinstance(v, tuple):
            out += [(f"{key}.{j}", x) for j, x in enumerate(v) if isinstance(x, np.ndarray)]
        elif depth < 2 and hasattr(v, "__dict__") and not callable(v) and \
                type(v).__module__.startswith("demidcd"):
            out += _task_arrays(v, key + ".", depth + 1)
    return out


def data_digest(task: Task) -> str:
    """A digest of the encoded training data and gold structures of ``task``: the task's own
    ``fingerprint_arrays()`` when it has one, else every public array it holds."""
    own = getattr(task, "fingerprint_arrays", None)
    return digest(list(own()) if callable(own) else _task_arrays(task))


def fingerprint(task: Task, C: float, loss: str, w0: np.ndarray | None) -> dict[str, Any]:
    """What defines the problem a state solves: task name, examples, dimension of w, C, loss,
    a digest of the prior w₀ (None: none) and of the data (:func:`data_digest`)."""
    return {"task": task.name, "n_examples": int(task.n_examples), "dim": int(task.dim),
            "C": float(C), "loss": str(loss),
            "prior": None if w0 is None else digest([("w0", w0)]),
            "data": data_digest(task)}


def merge_parts(n: int, parts: list[tuple[np.ndarray, dict[str, np.ndarray]]]
                ) -> dict[str, np.ndarray]:
    """One state's arrays from disjoint parts of the examples (the learners of
    :mod:`.multi_dcd`): ``parts`` holds (the part's examples, that part's
    :meth:`~.activeset.ActiveSets.state`); structures are ordered by example, each example's
    in their order."""
    out = {"alpha_sum": np.zeros(n), "xi": np.zeros(n), "ex_pg": np.full(n, np.inf)}
    for ex, a in parts:
        for k in ("alpha_sum", "xi", "ex_pg"):
            out[k][ex] = a[k][ex]
    if not parts:
        return {**out, **_empty_structures()}
    cat = {k: np.concatenate([a[k] for _, a in parts])
           for k in ("example", "hash", "delta", "alpha", "phi_idx", "phi_val")}
    lengths = np.concatenate([np.diff(a["phi_ptr"]) for _, a in parts])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    order = np.argsort(cat["example"], kind="stable")
    for k in ("example", "hash", "delta", "alpha"):
        out[k] = cat[k][order]
    lens = lengths[order]
    ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    take = np.repeat(starts[order] - ptr[:-1], lens) + np.arange(ptr[-1], dtype=np.int64)
    out["phi_ptr"] = ptr
    out["phi_idx"] = cat["phi_idx"][take]
    out["phi_val"] = cat["phi_val"][take]
    return out


def _empty_structures() -> dict[str, np.ndarray]:
    from ..tasks.base import INDEX_DTYPE

    return {"example": np.zeros(0, np.int64), "hash": np.zeros(0, np.int64),
            "delta": np.zeros(0), "alpha": np.zeros(0), "phi_ptr": np.zeros(1, np.int64),
            "phi_idx": np.zeros(0, INDEX_DTYPE), "phi_val": np.zeros(0)}


def empty_state(n: int) -> dict[str, np.ndarray]:
    """The arrays of the state with empty active sets (α = 0) for ``n`` examples."""
    return {**_empty_structures(), "alpha_sum": np.zeros(n), "xi": np.zeros(n),
            "ex_pg": np.full(n, np.inf)}


def state_w(state: DualState, dim: int) -> np.ndarray:
    """w = w₀ + Σ α φ (Eq. 3) from a state's arrays."""
    a = state.arrays
    w = np.zeros(dim) if state.w0 is None else state.w0.astype(np.float64).copy()
    reps = np.diff(a["phi_ptr"])
    np.add.at(w, a["phi_idx"].astype(np.int64), np.repeat(a["alpha"], reps) * a["phi_val"])
    return w


def check_start(start: Start | None, dim: int) -> None:
    """Refuse a prior of the wrong length or with non-finite entries."""
    if start is None or start.w0 is None:
        return
    w0 = start.w0
    if w0.shape != (dim,) or not np.all(np.isfinite(w0)):
        raise OptionError(f"the initial model's weights do not fit this problem ({w0.shape[0]:,}"
                          f" weights, {dim:,} expected)" if w0.shape != (dim,) else
                          "the initial model has non-finite weights")
