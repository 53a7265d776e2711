"""The ``demidcd`` command's parser: the subcommands, and the options of the table
:mod:`demidcd.options` with their help texts (defaults from the table, task and learner lists
from their registries)."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import OptionError


class _HelpFormatter(argparse.HelpFormatter):
    """Help text as written: the option table's rows already end with their default."""


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error convention: a bad option is one line, ``demidcd: error:
    …`` naming it, exit 2 (argparse's usage block is left to ``--help``)."""

    def error(self, message: str) -> Any:
        raise OptionError(f"{message} (see demidcd {self.prog.split()[-1]} --help)"
                          if " " in self.prog else message)


def _help(o: Any, command: str) -> str:
    """An option's help line with its default from the option table (:mod:`demidcd.options`);
    a few options complete theirs from the registries (the tasks, the learners)."""
    text = _USE_HELP.get((command, o.name), o.help)
    readers = _learners_reading(o)
    if readers and not text.startswith(readers[0]):
        text = f"[{', '.join(readers)}] {text}"
    if (command, o.name) in _USE_HELP:
        pass
    elif o.name == "task":
        from ..tasks import get_task, task_names

        text += ": " + "; ".join(f"{n}: {get_task(n).help}" for n in task_names())
    elif o.name == "algorithm":
        text += (" (demidcd learners NAME: its options; sklearn-crfsuite's names lbfgs, ap, "
                 "pa are crf, perceptron, mira)")
    elif o.name == "max_sentence_length":
        return _length_help(command)
    if o.type is bool and o.default is False:
        return text
    shown = o.default_text() if command == "train" or not o.rule.endswith("model's") \
        else "the model's"
    return f"{text} (default: {shown})".replace("%", "%%")


def _learners_reading(o: Any) -> list[str]:
    """The learners that read option ``o`` (its owners, when they are learners; [] for an
    option every learner reads, or a task's): ``--help-all`` names them before its help."""
    if not o.owners:
        return []
    from ..solvers import LEARNERS

    return list(o.owners) if all(x in LEARNERS for x in o.owners) else []


_USE_HELP = {
    ("predict", "threads"): "threads tagging blocks of sentences at once (output in input "
                            "order)",
    ("predict", "task"): "the task (the model's: given, it must be the model's)",
    ("evaluate", "task"): "the task (the model's: given, it must be the model's)",
}
"""Help lines of the options that ``predict`` and ``evaluate`` read differently from
``train`` (in their own words: nothing is learnt there)."""
_NOT_READ = {"predict": ("template", "label_scheme"), "evaluate": ("template",)}
"""Options a command accepts (a model's own value, or a check) but that change nothing it
does: not in its ``--help``."""
_GROUP_TITLES = {"data": "input", "learner": "run", "output": "output"}
"""The option groups' titles in the commands that use a model (no learner there)."""


def _add_table_options(p: argparse.ArgumentParser, command: str, show_all: bool,
                       helps: bool = True) -> None:
    """The options of ``command`` from the option table, in its groups; the advanced tier is
    listed by ``--help-all`` only (always accepted). Every option defaults to None (or the
    table's value for the CLI-only data options), so that only the options given reach the
    estimators, whose defaults are the table's too. ``helps`` False: no help texts (they
    import every task's module; only --help shows them)."""
    from .. import options as T

    titles = {g: g if command == "train" else _GROUP_TITLES[g]
              for g in (T.DATA, T.LEARNER, T.OUTPUT)}
    groups = {g: p.add_argument_group(titles[g]) for g in (T.DATA, T.LEARNER, T.OUTPUT)}
    for o in T.options_for(None, command):
        shown = (show_all or o.tier == T.BASIC) and o.name not in _NOT_READ.get(command, ())
        kw: dict[str, Any] = {"dest": o.name,
                              "help": (_help(o, command) if helps else None)
                              if shown else argparse.SUPPRESS}
        if o.type is bool:
            kw["action"] = argparse.BooleanOptionalAction if o.default is None \
                else "store_true"
            kw["default"] = None if o.default is None else False
        else:
            kw["type"] = _lower if o.choices else o.type  # --pos-column XPOS as xpos
            from_model = command != "train" and o.rule.endswith("model's")  # set by load_model
            kw["default"] = o.default if not o.param and o.name in _CLI_DEFAULTS \
                and not from_model else None
            if o.metavar:
                kw["metavar"] = o.metavar
            if o.choices:
                kw["choices"] = _choices(o)
            if o.const is not None:
                kw.update(nargs="?", const=o.const)
        groups[o.group].add_argument(o.flag, **kw)


def _lower(text: str) -> str:
    """The argparse type of an option with choices: any case (the choices are lower case)."""
    return text.lower()


# data options whose value is always set (evaluate / predict: the model's, once it is loaded)
_CLI_DEFAULTS = ("task", "format", "encoding")


def _choices(o: Any) -> tuple[str, ...]:
    """An option's choices; the tasks' and learners' come from their registries."""
    if o.name == "task":
        from ..tasks import task_names

        return task_names()
    if o.name == "algorithm":
        from ..solvers import LEARNERS

        return tuple(LEARNERS)
    return o.choices


def _length_help(command: str) -> str:
    """``--max-sentence-length`` help: each task's default and what a long sentence costs."""
    from ..tasks import get_task, task_names

    groups: dict[tuple[int, str], list[str]] = {}
    for name in task_names():
        spec = get_task(name)
        groups.setdefault((spec.max_sentence_length, spec.length_cost), []).append(name)
    per_task = "; ".join(f"{', '.join(names)} {limit:,}" + (f" ({cost})" if cost else "")
                         for (limit, cost), names in groups.items())
    whose = "the task's" if command == "train" else "the model's task's"
    return (f"longest sentence accepted, in tokens: a longer one is refused when the file is "
            f"read, before any work (default: {whose}: {per_task})").replace("%", "%%")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="print only results and errors")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def build_parser(show_all: bool = False, helps: bool = True) -> argparse.ArgumentParser:
    """The parser; ``show_all``: list the advanced options too (``train --help-all``);
    ``helps`` False: without the table options' help texts (when no help is asked for:
    building them imports every task's module)."""
    parser = _Parser(
        prog="demidcd", description="Fast multi-core structural SVM training (DEMI-DCD).",
        formatter_class=_HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _sub_add = sub.add_parser

    def add_parser(*a: Any, **kw: Any) -> argparse.ArgumentParser:
        return _sub_add(*a, formatter_class=_HelpFormatter, **kw)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    t = sub.add_parser("train", help="train a model (no data arguments: the synthetic default)",
                       epilog=None if show_all else "demidcd train --help-all: every option; "
                       "demidcd learners NAME: a learner's own options")
    t.add_argument("--help-all", action="help", help="show every option and exit")
    _add_table_options(t, "train", show_all, helps)

    for name, hlp in (("predict", "tag a file"), ("evaluate", "score a model on a file")):
        q = sub.add_parser(name, help=hlp)
        q.add_argument("--model", required=True, help="model file written by train")
        q.add_argument("--data", required=True, metavar="FILE",
                       help="input data (- : standard input; --format auto then tells CoNLL-U "
                            "from columns by the content)")
        _add_table_options(q, name, True, helps)
        if name == "predict":
            q.add_argument("--out", default="-", metavar="FILE",
                           help="output file, in the input's format and encoding (default: "
                                "-, standard output, as crf_test writes; status lines then go "
                                "to stderr)")

    e = sub.add_parser("evaluate-snapshots",
                       help="primal objective and metric of every snapshot, as CSV")
    e.add_argument("snapshot_dir", metavar="DIR")
    e.add_argument("--train", required=True, metavar="FILE", help="data the primal is taken on")
    e.add_argument("--test", metavar="FILE", help="data the metric is taken on (default: train)")
    e.add_argument("--out", required=True, metavar="CSV", help="CSV file to write")
    _add_table_options(e, "evaluate-snapshots", True, helps)

    d = sub.add_parser("dump", help="print a model's features and weights, largest |weight| "
                                    "first (as crf_learn's text model, wapiti dump)")
    d.add_argument("--model", required=True, help="model file written by train")
    d.add_argument("--top", type=int, default=50, metavar="N",
                   help="the N largest weights by |weight| (and the N largest transitions)")
    d.add_argument("--all", action="store_true", help="every non-zero weight (instead of --top)")
    d.add_argument("--out", metavar="FILE",
                   help="write to FILE (atomically) instead of standard output")
    _common(d)

    sp = sub.add_parser("split", help="seeded train/test split of a corpus file")
    sp.add_argument("file", help="CoNLL04 file")
    sp.add_argument("--out-dir", required=True, help="directory for train.corp and test.corp")
    sp.add_argument("--test-fraction", type=float, default=0.2,
                    help="share of the sentences held out, in (0, 1)")
    sp.add_argument("--seed", type=int, default=0, help="shuffling seed")
    sp.add_argument("--encoding", default="utf-8", help="input and output encoding")
    _common(sp)

    g = sub.add_parser("generate", help="write the synthetic corpus (train/dev/test)")
    g.add_argument("--out-dir", required=True, help="directory for train/dev/test.txt")
    g.add_argument("--sentences", type=int, default=2000, help="training sentences")
    g.add_argument("--tags", type=int, default=12, help="number of tags")
    g.add_argument("--vocab", type=int, default=3000, help="vocabulary size")
    g.add_argument("--ambiguity", type=float, default=0.3, help="share of ambiguous words")
    g.add_argument("--mean-length", type=float, default=15, help="mean sentence length")
    g.add_argument("--seed", type=int, default=0, help="generator seed")
    _common(g)

    ls = sub.add_parser("learners", help="the learners, or one learner's own options")
    ls.add_argument("name", nargs="?", metavar="NAME", help="a learner (see the list)")
    _common(ls)
    return parser
