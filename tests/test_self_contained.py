"""A fresh clone works on its own: no Python file of the project reads or names the developers'
check folder beside the checkout (issue 45, item 3). Data beside the checkout (``../shared/data``)
is fine: the tests that need it skip when it is absent."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("demidcd", "benchmarks", "tests", "examples")
_NAME = "accep" + "tance"  # split so that this file does not match itself
_REFERENCE = re.compile(r"shared.{0,8}" + _NAME + r"|['\"]" + _NAME + r"['\"]", re.IGNORECASE)


def test_no_python_file_references_the_check_folder():
    hits = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _REFERENCE.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not hits, "\n".join(hits)
