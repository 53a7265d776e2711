"""The ``demidcd`` command line as a subprocess, for the tests that need a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "demidcd"]


def run(*args: str, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess:
    """``demidcd *args``, its output captured as text."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kw)


def train_model(corpus: Path, max_epochs: int) -> Path:
    """``corpus/m.npz``: one process trained on ``corpus/train.txt`` (min_count 1)."""
    m = corpus / "m.npz"
    r = run("train", "--train", str(corpus / "train.txt"), "--threads", "1", "--max-epochs",
            str(max_epochs), "--min-count", "1", "--model", str(m), "--quiet")
    assert r.returncode == 0, r.stderr
    return m
