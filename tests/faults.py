"""Fault injection for the tests, kept out of the package: inference workers that raise.

``inject_worker_faults(n)`` patches the sequence task's loss-augmented inference so that every
process other than the one that called it (the forked inference workers, each restarted one
afresh) raises ``RuntimeError("injected fault")`` at its n-th call. Run as a script, it injects
and then runs the CLI: ``python tests/faults.py N train ...``.
"""

from __future__ import annotations

import os
import sys


def inject_worker_faults(after: int, monkeypatch=None) -> None:
    from demidcd.tasks.chain.task import SequenceTask

    parent = os.getpid()
    calls: dict[int, int] = {}
    original = SequenceTask.loss_augmented

    def faulty(self, w, examples):
        pid = os.getpid()
        if pid != parent:
            calls[pid] = calls.get(pid, 0) + 1
            if calls[pid] == after:
                raise RuntimeError("injected fault")
        return original(self, w, examples)

    if monkeypatch is not None:
        monkeypatch.setattr(SequenceTask, "loss_augmented", faulty)
    else:
        SequenceTask.loss_augmented = faulty


if __name__ == "__main__":
    inject_worker_faults(int(sys.argv[1]))
    sys.argv = ["demidcd", *sys.argv[2:]]
    from demidcd.__main__ import run

    run()
