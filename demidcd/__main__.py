"""``python -m demidcd`` and the ``demidcd`` console script: a tiny module that loads the CLI
inside a handler, so that Ctrl-C while numpy and numba load exits with 130 and one line."""

from __future__ import annotations

import atexit
import sys


def run() -> None:
    """Run :func:`demidcd.cli.main` and exit with its status (130 on Ctrl-C at any point):
    the exit handlers run (:mod:`atexit`: the safety nets of shared memory and temporary
    files, Ray's shutdown), the standard streams are flushed, and the process leaves without
    the interpreter's shutdown, whose teardown of numba and of the heap took 0.1-0.2 s after
    each ``train`` for nothing (benchmarks/README.md, "numba without SciPy"). Every file a
    command writes is closed by then (written whole, then renamed)."""
    try:
        from .primitives.pages import fixed_malloc_thresholds

        fixed_malloc_thresholds()  # the training processes' heaps (primitives.pages)
        from .cli import main

        code = main()
    except KeyboardInterrupt:
        print("demidcd: interrupted", file=sys.stderr)
        code = 130
    try:
        atexit._run_exitfuncs()  # (CPython's: what its own exit would run first)
    finally:
        from .cli.setup import exit_now

        exit_now(code)


if __name__ == "__main__":
    run()
