"""What a SIGKILLed run leaves behind (issue 56, defect 18): the hidden temporary file of the
model it was writing (258 MB once) and its empty CBC directory stayed for ever. Their names
now carry the writer's pid, and a later save into the directory (the model's temporary files)
or any later command (the CBC directories) removes those of dead processes."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from cli_run import run

from demidcd.io.model import atomic_write


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_save_removes_the_temporary_files_of_dead_writers_of_that_model(tmp_path: Path):
    dead, alive = _dead_pid(), os.getppid()
    stale = tmp_path / f".m.npz.{dead}.abcd1234.tmp"
    other_model = tmp_path / f".n.npz.{dead}.abcd1234.tmp"  # another model's: not this save's
    running = tmp_path / f".m.npz.{alive}.wxyz5678.tmp"  # a live writer's: kept
    for f in (stale, other_model, running):
        f.write_bytes(b"x" * 100)
    seen = []

    def write(f):
        seen.extend(p.name for p in tmp_path.iterdir())
        f.write(b"model")

    atomic_write(tmp_path / "m.npz", write)
    assert (tmp_path / "m.npz").read_bytes() == b"model"
    assert not stale.exists()  # before: there for ever
    assert other_model.exists() and running.exists()
    mine = [n for n in seen if n.startswith(f".m.npz.{os.getpid()}.") and n.endswith(".tmp")]
    assert len(mine) == 1, seen  # the temporary file names its writer
    assert not any(n.startswith(f".m.npz.{os.getpid()}.") for n in os.listdir(tmp_path))


def test_every_command_removes_the_cbc_directories_of_dead_processes():
    dead = _dead_pid()
    gone = Path(tempfile.mkdtemp(prefix=f"demidcd-cbc-{dead}-"))
    live = Path(tempfile.mkdtemp(prefix=f"demidcd-cbc-{os.getppid()}-"))
    try:
        r = run("learners")
        assert r.returncode == 0, r.stderr
        assert not gone.exists()  # before: only a later CBC solve removed it
        assert live.exists()
    finally:
        for d in (gone, live):
            if d.exists():
                d.rmdir()
