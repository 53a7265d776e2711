"""``demidcd`` with the process engine's experimental settings set first (benchmarks only):

    python benchmarks/experimental_cli.py update_mode=hot [rebuild_every=5] -- train ...

sets the named fields of :data:`demidcd.parallel.experimental.EXPERIMENTAL` (values parsed as
numbers where they are; forked learners inherit them) and runs the CLI on the rest. No option of
the package reaches these settings (their module docstring); this lets a benchmark compare them
on the same command (``scaling.py --modes``).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from demidcd.cli import main as cli
    from demidcd.parallel.experimental import EXPERIMENTAL

    if "--" not in argv:
        print("usage: experimental_cli.py NAME=VALUE ... -- COMMAND ...", file=sys.stderr)
        return 2
    cut = argv.index("--")
    for item in argv[:cut]:
        name, _, value = item.partition("=")
        if not hasattr(EXPERIMENTAL, name):
            print(f"experimental_cli.py: no experimental setting {name!r}", file=sys.stderr)
            return 2
        try:
            parsed: object = float(value)
        except ValueError:
            parsed = value
        setattr(EXPERIMENTAL, name, parsed)
    return cli(argv[cut + 1:])


if __name__ == "__main__":
    from demidcd.primitives.pages import fixed_malloc_thresholds

    fixed_malloc_thresholds()  # as the ``demidcd`` command does (its runs: 70-110 MiB less PSS)
    sys.exit(main(sys.argv[1:]))
