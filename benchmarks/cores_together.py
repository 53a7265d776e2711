"""Do two processes at once run as fast as one alone on this machine? (issue 53: the 2-core
ceiling of p = 2 is the hardware's before it is the learners')

    python benchmarks/cores_together.py [--tries 5] [--seconds 3] [--name cores_together]

Each try times a numba kernel for ``--seconds`` in one process alone, then in two processes at
once, for two kernels: random reads over 32 MiB (about the size of EWT's or Brown's w: the
shared L3 and memory, as DCD's updates and inference use them) and the same reads over 8 KiB
(L1: the cores alone). The ratio is (the two processes' rates summed) / (the lone one's): 2.0
where the two cores do not slow each other. On a guest whose host is shared, tries minutes
apart differ; the JSON (``results/NAME.json``) keeps every try with its time of day.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, machine_info, say, write_json  # noqa: E402

SIZES = {"random reads over 32 MiB": 1 << 22, "random reads over 8 KiB (L1)": 1 << 10}
STEP = 1_000_000  # reads per kernel call


@njit(cache=True, nogil=True)
def reads(n: int, a: np.ndarray) -> float:
    """n dependent-index pseudo-random reads of ``a`` (its length a power of two)."""
    s, j, mask = 0.0, 0, a.shape[0] - 1
    for _ in range(n):
        j = (j * 1103515245 + 12345) & mask
        s += a[j]
    return s


def _rate(q: mp.Queue, size: int, seconds: float) -> None:
    a = np.random.default_rng(0).random(size)
    reads(10, a)
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        reads(STEP, a)
        calls += 1
    q.put(calls * STEP / (time.perf_counter() - t0))


def rates(k: int, size: int, seconds: float) -> list[float]:
    """Reads per second of each of ``k`` processes running at once."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rate, args=(q, size, seconds)) for _ in range(k)]
    for p in procs:
        p.start()
    out = [q.get() for _ in procs]
    for p in procs:
        p.join()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--name", default="cores_together")
    args = ap.parse_args(argv)
    reads(10, np.zeros(16))  # compiled (or loaded) before the processes fork
    tries = []
    for t in range(args.tries):
        row = {"time": time.strftime("%H:%M:%S")}
        for what, size in SIZES.items():
            alone = rates(1, size, args.seconds)[0]
            both = rates(2, size, args.seconds)
            row[what] = {"alone": alone, "two_at_once": both, "ratio": sum(both) / alone}
        tries.append(row)
        say(f"try {t + 1} at {row['time']}: " + "; ".join(
            f"{what}: two at once {row[what]['ratio']:.2f}x one alone" for what in SIZES))
    path = write_json(RESULTS / f"{args.name}.json", {
        "benchmark": "two processes at once against one alone (issue 53)",
        "machine": machine_info(), "seconds": args.seconds, "tries": tries})
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
