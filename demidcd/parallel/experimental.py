"""The process engine's one experimental hook: settings for experiments and tests, not options.

No command-line option, estimator parameter or ``solvers.train`` keyword reaches these; a test
or an experiment sets a field of :data:`EXPERIMENTAL` (pytest: ``monkeypatch.setattr``, which
puts it back afterwards) before it trains, and forked processes inherit it. Every field's
default is what a user's run does.

* ``update_mode``: how the learners of the multi-learner schedule
  (:mod:`demidcd.parallel.coordinator`) write the shared w: ``"atomic"`` adds (the default: no
  update is lost, so w = Σ α φ up to rounding and no periodic rebuild pauses the learners),
  ``"plain"`` loads and stores (PASSCoDe-Wild: a lost update is repaired at the next periodic
  rebuild), or ``"hot"``: the pages of w nearly every φ writes private to each learner and
  merged by atomic adds, the rest atomic adds (:mod:`demidcd.solvers.hot_pages`).
* ``rebuild_every``: seconds between the schedule's periodic records: with plain stores each
  is a rebuild of w = Σ α φ, with atomic adds a progress record (tests shorten it to see many).
* ``check_rebuild``: after the final rebuild each learner also sums its α φ sequentially into
  a shared array, and the result's ``extra["rebuild_error"]`` is the largest difference from
  the rebuilt w (tests of the rebuild; None otherwise).
* ``transport``: a factory ``transport(task, n_workers, spec, log=, debug=, learner_share=)``
  that :func:`~demidcd.parallel.transport.make_transport` calls instead of building the named
  backend (tests run the schedules over a fake :class:`~demidcd.parallel.transport.Transport`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

UPDATE_MODES = ("atomic", "hot", "plain")
REBUILD_EVERY = 5.0  # seconds between periodic records (plain stores: rebuilds of w)


@dataclass
class Experimental:
    """The settings of :data:`EXPERIMENTAL` (see the module docstring)."""

    update_mode: str = "atomic"
    rebuild_every: float = REBUILD_EVERY
    check_rebuild: bool = False
    transport: Callable[..., Any] | None = None

    def checked_update_mode(self) -> str:
        """``update_mode``, refused with ValueError unless one of :data:`UPDATE_MODES`."""
        if self.update_mode not in UPDATE_MODES:
            raise ValueError(f"EXPERIMENTAL.update_mode must be one of "
                             f"{', '.join(UPDATE_MODES)}, got {self.update_mode!r}")
        return self.update_mode


EXPERIMENTAL = Experimental()
"""The settings every run reads (defaults: a user's run)."""
