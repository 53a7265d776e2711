"""SharedArena never leaks /dev/shm segments: close, atexit, child exits, SIGKILL + sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import multiprocess as mp
import numpy as np
import pytest

from demidcd.primitives.shm import SHM_DIR, SharedArena, list_segments, sweep_stale

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not os.path.isdir(SHM_DIR), reason="needs Linux /dev/shm")


def _run(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(ROOT))


def test_create_attach_close():
    a = SharedArena(prefix="demidcdtest")
    x = a.create("w", (3, 4), np.float64)
    y = a.create("ring/1", 10, np.int64)
    assert x.shape == (3, 4) and y.shape == (10,) and not x.any() and not y.any()
    segs = list_segments("demidcdtest", os.getpid())
    assert len(segs) == 2
    assert all(s.startswith(f"demidcdtest-{os.getpid()}-") for s in segs)
    with pytest.raises(KeyError):
        a.create("w", 3, np.float64)
    x[1, 2] = 5.0
    d = SharedArena.attach(a.spec())
    assert d["w"][1, 2] == 5.0 and d["ring/1"].dtype == np.int64
    d["ring/1"][3] = 7  # writes are shared both ways
    assert y[3] == 7
    del x, y
    a.close()
    assert list_segments("demidcdtest", os.getpid()) == []
    a.close()  # idempotent
    with pytest.raises(RuntimeError):
        a.create("z", 1, np.int8)
    with pytest.raises(ValueError):
        SharedArena(prefix="bad-prefix")


def test_context_manager_and_zero_size():
    with SharedArena(prefix="demidcdtest") as a:
        z = a.create("empty", 0, np.float64)
        assert z.shape == (0,)
        assert len(list_segments("demidcdtest", os.getpid())) == 1
    assert list_segments("demidcdtest", os.getpid()) == []


def _child_touch(spec):
    d = SharedArena.attach(spec)
    d["v"][0] += 1


def _child_fail(spec):
    d = SharedArena.attach(spec)
    d["v"][0] += 1
    raise RuntimeError("child dies with an exception")


def test_children_exiting_do_not_unlink():
    a = SharedArena(prefix="demidcdtest")
    try:
        v = a.create("v", 1, np.int64)
        ctx = mp.get_context("fork")
        for target in (_child_touch, _child_fail, _child_touch):
            p = ctx.Process(target=target, args=(a.spec(),))
            p.start()
            p.join(30)
        assert v[0] == 3
        assert len(list_segments("demidcdtest", os.getpid())) == 1
    finally:
        a.close()
    assert list_segments("demidcdtest", os.getpid()) == []


def test_fork_and_spawn_children_print_no_warnings_and_leave_nothing():
    """Whole scenario in a fresh interpreter so all stderr (janitor included) is captured."""
    r = _run("""
        import os, sys, numpy as np, multiprocess as mp
        from demidcd.primitives.shm import SharedArena, list_segments

        def child(spec):
            from demidcd.primitives.shm import SharedArena  # spawn: dill pickles by value
            d = SharedArena.attach(spec)
            d["v"][0] += 1

        if __name__ == "__main__":
            a = SharedArena(prefix="demidcdtest")   # track=True: a janitor is started
            try:
                v = a.create("v", 1, np.int64)
                for method in ("fork", "spawn"):
                    p = mp.get_context(method).Process(target=child, args=(a.spec(),))
                    p.start(); p.join(60)
                    assert p.exitcode == 0, (method, p.exitcode)
                assert v[0] == 2, v[0]
                pid = os.fork()  # a raw fork child exiting through sys.exit runs the
                if pid == 0:     # inherited atexit handler: it must not unlink
                    try:
                        SharedArena.attach(a.spec())["v"][0] += 1
                    finally:
                        sys.exit(0)
                os.waitpid(pid, 0)
                assert v[0] == 3, v[0]
                assert len(list_segments("demidcdtest", os.getpid())) == 1
                print("PID", os.getpid())
            finally:
                a.close()
    """)
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout.split("PID")[1])
    assert list_segments("demidcdtest", pid) == []
    assert "leak" not in r.stderr.lower() and "warn" not in r.stderr.lower(), r.stderr
    assert "Traceback" not in r.stderr, r.stderr


def test_atexit_unlinks_without_close():
    r = _run("""
        import os, numpy as np
        from demidcd.primitives.shm import SharedArena
        a = SharedArena(prefix="demidcdtest", track=False)
        a.create("w", 100, np.float64)
        print(os.getpid())
    """)
    assert r.returncode == 0, r.stderr
    assert list_segments("demidcdtest", int(r.stdout)) == []


@pytest.mark.parametrize("track", [False, True])
def test_sigkill_then_sweep(track):
    prefix = "demidcdkill"
    p = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import os, sys, time, numpy as np
            from demidcd.primitives.shm import SharedArena
            a = SharedArena(prefix="{prefix}", track={track})
            a.create("w", 1000, np.float64)
            a.create("ring", 1000, np.int64)
            print("ready", flush=True)
            time.sleep(60)
        """)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert p.stdout.readline().strip() == "ready"
        assert len(list_segments(prefix, p.pid)) == 2
        assert sweep_stale(prefix) == []  # owner alive: nothing swept
        assert len(list_segments(prefix, p.pid)) == 2
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        p.stdout.close()
        err = p.stderr.read() if not track else ""
        p.stderr.close()
    if track:  # the janitor sees the owner die (pipe EOF) and unlinks by itself
        t_end = time.monotonic() + 10
        while list_segments(prefix, p.pid) and time.monotonic() < t_end:
            time.sleep(0.05)
        assert list_segments(prefix, p.pid) == []
    else:
        assert len(list_segments(prefix, p.pid)) == 2, err  # really leaked
        removed = sweep_stale(prefix)
        assert sorted(removed) == sorted(s for s in removed if s.startswith(f"{prefix}-"))
        assert len([s for s in removed if f"-{p.pid}-" in s]) == 2
    assert list_segments(prefix, p.pid) == []
    assert sweep_stale(prefix) == []
