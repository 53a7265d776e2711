"""A training run's progress as text, for the command line's log and the estimators'
``verbose``: the iteration lines, the cadence at which they are shown, and the ``stopped:`` line
that says how the run ended.

At ``verbose`` 1 (the command line's default) a run of hundreds of iterations stays within a
screen: the first :data:`FIRST_ITERATIONS` iterations are shown, then those whose number is a
power of two, any that carries the primal (``eval_every``'s, paced by the user), at most one
more every :data:`SECONDS_BETWEEN` seconds, and the last one, so the log ends with the final
figures. ``verbose`` 2 shows every iteration, 0 none. Lines the library does not print go to
the ``demidcd`` logger (:data:`LOGGER`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

LOGGER = logging.getLogger("demidcd")
"""Where the estimators' lines go when they print none (``verbose=0``, no ``log``): the engine's
progress lines and how fit ended at INFO, each iteration's line at DEBUG."""

FIRST_ITERATIONS = 5
SECONDS_BETWEEN = 10.0


def format_dev(rec: dict) -> str:
    """``dev 95.12%`` (accuracy) or ``dev chunk F1 93.60`` (any other headline metric)."""
    name = rec.get("dev_metric", "accuracy")
    if name == "accuracy":
        return f"dev {100 * rec['dev']:.2f}%"
    return f"dev {name} {100 * rec['dev']:.2f}"


_MEASURES = (("active", "active", ">8,"), ("shrunk", "shrunk", ">7,"),
             ("admitted", "admitted", ">7,"), ("max_pg", "max_pg", ".4f"),
             ("gap_estimate", "gap estimate", ".4g"), ("objective", "objective", ".7g"))
"""(record key, label, format) of the optional measures of an iteration line."""


_CRF_MEASURES = (("objective", "objective", ".7g"), ("gnorm", "|g|/max(1,|w|)", ".3g"),
                 ("improvement", "improvement", ".3g"), ("train_error", "train error", ".2f"),
                 ("nonzero", "nonzero", ","), ("evaluations", "evaluations", ","))
"""(record key, label, format) of an L-BFGS CRF iteration's line: its objective, relative
gradient norm, relative improvement over --period iterations, training error (%), non-zero
weights and objective evaluations so far."""


def format_iteration(rec: dict) -> str:
    """One iteration's log record as a line (``iter   3  1.23s  updates …``; an L-BFGS CRF's,
    which has ``gnorm``: ``iter   3  1.23s  objective …``)."""
    if "gnorm" in rec:
        parts = [f"iter {rec['epoch']:3d}", f"{rec['seconds']:8.2f}s"]
        parts += [f"{label} {rec[k]:{fmt}}" + ("%" if k == "train_error" else "")
                  for k, label, fmt in _CRF_MEASURES if k in rec]
        return "  ".join(parts + ([format_dev(rec)] if "dev" in rec else []))
    parts = [f"iter {rec['epoch']:3d}", f"{rec['seconds']:8.2f}s",
             f"updates {rec.get('total_updates', rec.get('updates', 0)):>10,}"]
    # only what the learner measured: a learner without active sets or shrinking (the CRF,
    # the online ones) has no such fields, and no zeros stand in for them; the objective is
    # shown with primal/dual/gap below when the record has them
    parts += [f"{label} {rec[k]:{fmt}}" for k, label, fmt in _MEASURES
              if k in rec and not (k == "objective" and "primal" in rec)]
    for k in ("inferences", "pushed", "duplicates", "dropped", "ring"):
        if k in rec:
            parts.append(f"{k} {rec[k]:,}" if isinstance(rec[k], int) else f"{k} {rec[k]}")
    if "dev" in rec:
        parts.append(format_dev(rec))
    if "primal" in rec:
        parts.append(f"primal {rec['primal']:.6g} dual {rec['dual']:.6g} gap {rec['gap']:.3g}")
    return "  ".join(parts)


class Cadence:
    """Which iteration lines a log shows at ``verbose`` (see the module docstring).
    ``every_line`` names how to ask for all of them (``--verbose 2``, ``verbose=2``): the one
    line that says the log thins them out, before the first it leaves out, names it."""

    def __init__(self, verbose: int, every_line: str):
        self.verbose, self.every_line = verbose, every_line
        self.shown_at = -math.inf  # seconds of the last line shown
        self.pending: dict | None = None  # the latest record not shown
        self.noted = False

    def lines(self, rec: dict) -> list[str]:
        """The lines to show for the record of one iteration (none, its own, or the note that
        lines are left out from now on)."""
        if self.verbose <= 0:
            return []
        epoch, seconds = rec.get("epoch", 0), rec.get("seconds", 0.0)
        if (self.verbose >= 2 or epoch <= FIRST_ITERATIONS or epoch & (epoch - 1) == 0
                or "primal" in rec or seconds - self.shown_at >= SECONDS_BETWEEN):
            self.shown_at, self.pending = seconds, None
            return [format_iteration(rec)]
        self.pending = rec
        if self.noted:
            return []
        self.noted = True
        return [f"(iteration lines from here on: powers of two, at most one more every "
                f"{SECONDS_BETWEEN:g} s, and the last; {self.every_line}: every one)"]

    def final(self) -> list[str]:
        """At the end of the run: the last iteration's line when it was not shown."""
        rec, self.pending = self.pending, None
        return [] if rec is None else [format_iteration(rec)]


_HINTS = {"max-epochs": "raise {max_epochs} or {tol}",
          "max-iterations": "raise {max_epochs} or {tol}",
          "time-limit": "raise {time_limit} or {tol}",
          "interrupted": "interrupted by a signal", "worker-failed": "a worker failed"}


def stop_line(res: Any, tol: float, loss: str | None,
              name: Callable[[str], str] = str) -> str:
    """``stopped: REASON after N iterations, S.Ss`` of a :class:`~demidcd.solvers.common.
    TrainResult`, and when it did not converge, how far it was from the tolerance ``tol`` and
    what to change; ``name(option)`` spells an option (the command line: ``--max-epochs``)."""
    line = f"stopped: {res.stop_reason} after {res.epochs} iterations, {res.seconds:.1f}s"
    cccp = getattr(res, "extra", {}).get("cccp_stop")
    if cccp is not None:
        return line + _cccp_stop(cccp, name)
    if res.finished:
        return line
    last = res.history[-1] if res.history else {}
    rule = getattr(res, "extra", {}).get("stop_rule")  # a learner's own (StopRule), or
    if rule is None:  # the DCD learners': the largest projected gradient against tol
        rule = ("largest KKT gap" if loss == "l1" else "largest projected gradient",
                last.get("max_pg"), "tol", tol, "max_epochs")
    what, value, option, target, epochs_option = rule
    state = (f"{what} {value:.3g}" if value is not None else f"{what} not measured") + \
        f", {name(option)} {target:g}"
    hint = _HINTS.get(res.stop_reason, res.stop_reason).format(
        max_epochs=name(epochs_option), time_limit=name("time_limit"), tol=name(option))
    return f"{line}; not converged ({state}): {hint}"


def _cccp_stop(c: dict, name: Callable[[str], str]) -> str:
    """The rest of a CCCP run's ``stopped:`` line (``result.extra["cccp_stop"]``, from
    :func:`~demidcd.solvers.cccp.stop_summary`): why the rounds stopped, then the state of
    the convex step whose w is returned, each said once."""
    rounds = f"{c['rounds']} CCCP round" + ("" if c["rounds"] == 1 else "s")
    head = {"converged": f": {rounds}, then the latent objective decreased by less than "
                         f"{c['tol']:g} (relative)",
            "time-limit": f": {rounds}, then out of time before the latent objective "
                          f"stopped decreasing; not converged: raise {name('time_limit')}",
            "max-rounds": f": {rounds} (the most there are) before the latent objective "
                          "stopped decreasing; not converged",
            "interrupted": f": {rounds}; interrupted by a signal"}.get(
        c["reason"], f": {rounds}")
    what, value, option, target = c["step_rule"][:4]
    state = (f"{what} {value:.3g}" if value is not None else f"{what} not measured") + \
        f", {name(option)} {target:g}"
    if c["step_finished"]:
        step = f"reached its tolerance ({state})"
    elif c["step_reason"] == "time-limit":
        step = f"stopped at its share of the time before its tolerance ({state})"
    elif c["step_reason"] == "max-epochs":
        step = f"stopped at its epoch limit before its tolerance ({state})"
    else:
        step = f"stopped ({c['step_reason']}) before its tolerance ({state})"
    return f"{head}; the returned round's convex step {step}"


def print_line(line: str) -> None:
    """A line on stdout, at once (the estimators' lines at ``verbose`` >= 1)."""
    print(line, flush=True)


def cli_flag(option: str) -> str:
    """An option as the command line spells it: ``max_epochs`` → ``--max-epochs``."""
    return "--" + option.replace("_", "-")
