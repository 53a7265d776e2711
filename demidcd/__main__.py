"""``python -m demidcd`` and the ``demidcd`` console script: a tiny module that loads the CLI
inside a handler, so that Ctrl-C while numpy and numba load exits with 130 and one line."""

from __future__ import annotations

import sys


def run() -> None:
    """Run :func:`demidcd.cli.main` and exit with its status (130 on Ctrl-C at any point)."""
    try:
        from .primitives.pages import fixed_malloc_thresholds

        fixed_malloc_thresholds()  # the training processes' heaps (primitives.pages)
        from .cli import main

        code = main()
    except KeyboardInterrupt:
        print("demidcd: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    run()
