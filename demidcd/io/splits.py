"""Seeded train/test splits for users with a single annotated file.

The entity-relation split shuffles sentences with ``random.Random(seed)`` and cuts at
⌊(1 − f)·n⌋, the same split as the acceptance checks' ``split_conll04.py`` (seed 0 on CoNLL04:
4,412 train / 1,104 test sentences). Tagged corpora are split the same way.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from typing import Any

from ..errors import OptionError
from .conll04 import read_conll04, split_corpus, write_conll04
from .model import make_dirs
from .tagged import TaggedCorpus


def check_fraction(test_fraction: float, option: str = "--test-fraction") -> float:
    """``test_fraction`` as a float strictly between 0 and 1 (NaN and inf rejected)."""
    try:
        f = float(test_fraction)
    except (TypeError, ValueError):
        f = float("nan")
    if not 0.0 < f < 1.0:
        raise OptionError(f"{option} must be a number in (0, 1), got {test_fraction!r}")
    return f


def split_sentences(data: Any, test_fraction: float, seed: int) -> tuple[Any, Any]:
    """(train, test) of a TaggedCorpus, a DepCorpus or a list of ERSentence."""
    from .dependency import DepCorpus

    test_fraction = check_fraction(test_fraction)
    if isinstance(data, DepCorpus):
        fields = ("words", "pos", "heads", "lines", "raw", "other_pos", "deprels")
    elif isinstance(data, TaggedCorpus):
        fields = ("tokens", "tags", "lines", "raw", "attributes", "columns")
    else:
        return split_corpus(data, test_fraction, seed)
    order = list(range(len(data)))
    random.Random(seed).shuffle(order)
    cut = int((1 - test_fraction) * len(order))

    def part(ids: list[int]) -> Any:
        pick = lambda xs: None if xs is None else [xs[i] for i in ids]  # noqa: E731
        return replace(data, **{f: pick(getattr(data, f)) for f in fields})

    return part(order[:cut]), part(order[cut:])


def split_file(path: str, out_dir: str, test_fraction: float = 0.2, seed: int = 0,
               encoding: str = "utf-8") -> list[tuple[str, int]]:
    """Write ``train.corp`` and ``test.corp`` (CoNLL04 format, in ``encoding``) into
    ``out_dir``."""
    test_fraction = check_fraction(test_fraction)
    train, test = split_corpus(read_conll04(path, encoding), test_fraction, seed)
    make_dirs(out_dir, "--out-dir")
    out = []
    for name, part in (("train.corp", train), ("test.corp", test)):
        p = os.path.join(out_dir, name)
        write_conll04(p, part, encoding=encoding)
        out.append((p, len(part)))
    return out
