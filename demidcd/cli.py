"""The ``demidcd`` command: train, predict, evaluate, generate.

Every user error prints one line ``demidcd: error: …`` (naming the file and line, or the option)
and exits with status 2; ``--debug`` shows the traceback instead. Output paths are checked before
any data is read. Solver options default to None here and only the ones given are passed on: their
defaults live in :class:`~demidcd.solvers.common.SolverConfig` (and the schedules' signatures for
the engine options), and ``--help`` reads them from there. Heavy modules (numpy, numba) are
imported inside the commands, so that Ctrl-C at any moment exits with 130 and no traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import warnings
from typing import Any

from .errors import ConvergenceWarning, DemidcdError, InputWarning, OptionError
from .options import default
from .progress import Cadence, cli_flag, format_dev, stop_line


# --------------------------------------------------------------------------- options
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
    text = o.help
    if o.name == "task":
        from .tasks import get_task, task_names

        text += ": " + "; ".join(f"{n}: {get_task(n).help}" for n in task_names())
    elif o.name == "algorithm":
        text += " (demidcd learners NAME: its options)"
    elif o.name == "max_sentence_length":
        return _length_help(command)
    if o.type is bool and o.default is False:
        return text
    shown = o.default_text() if command == "train" or not o.rule.endswith("model's") \
        else "the model's"
    return f"{text} (default: {shown})".replace("%", "%%")


def _add_table_options(p: argparse.ArgumentParser, command: str, show_all: bool,
                       helps: bool = True) -> None:
    """The options of ``command`` from the option table, in its groups; the advanced tier is
    listed by ``--help-all`` only (always accepted). Every option defaults to None (or the
    table's value for the CLI-only data options), so that only the options given reach the
    estimators, whose defaults are the table's too. ``helps`` False: no help texts (they
    import every task's module; only --help shows them)."""
    from . import options as T

    groups = {g: p.add_argument_group(g) for g in (T.DATA, T.LEARNER, T.OUTPUT)}
    for o in T.options_for(None, command):
        kw: dict[str, Any] = {"dest": o.name,
                              "help": (_help(o, command) if helps else None)
                              if show_all or o.tier == T.BASIC else argparse.SUPPRESS}
        if o.type is bool:
            kw["action"] = argparse.BooleanOptionalAction if o.default is None \
                else "store_true"
            kw["default"] = None if o.default is None else False
        else:
            kw["type"] = o.type
            from_model = command != "train" and o.rule.endswith("model's")  # set by _load
            kw["default"] = o.default if not o.param and o.name in _CLI_DEFAULTS \
                and not from_model else None
            if o.metavar:
                kw["metavar"] = o.metavar
            if o.choices:
                kw["choices"] = _choices(o)
        groups[o.group].add_argument(o.flag, **kw)


# data options whose value is always set (evaluate / predict: the model's, once it is loaded)
_CLI_DEFAULTS = ("task", "format", "encoding")


def _choices(o: Any) -> tuple[str, ...]:
    """An option's choices; the tasks' and learners' come from their registries."""
    if o.name == "task":
        from .tasks import task_names

        return task_names()
    if o.name == "algorithm":
        from .solvers import LEARNERS

        return tuple(LEARNERS)
    return o.choices


def _length_help(command: str) -> str:
    """``--max-sentence-length`` help: each task's default and what a long sentence costs."""
    from .tasks import get_task, task_names

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
            q.add_argument("--out", required=True, metavar="FILE",
                           help="output file (the input's format and encoding; - or "
                                "/dev/stdout: standard output, status lines then go to "
                                "stderr)")

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


# --------------------------------------------------------------------------- helpers
class Log:
    """Human log on stdout (unless quiet); JSON lines to a file, written atomically at the end.

    On a terminal the per-iteration lines become a tqdm progress bar (elapsed time, iterations,
    and the latest record as its status); elsewhere (files, pipes, CI) plain lines at the
    cadence of ``--verbose`` (:class:`~demidcd.progress.Cadence`: 1, the first ones, then at
    powers of two and every few seconds, and the last; 2 every one). The JSON lines keep every
    record.
    """

    def __init__(self, quiet: bool, json_path: str | None, verbose: int = 1):
        self.quiet, self.json_path, self.records = quiet, json_path, []
        self.cadence = Cadence(verbose, "--verbose 2")
        self.bar = None
        if not quiet and sys.stdout.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(unit=" iter", dynamic_ncols=True, leave=False)
            except ImportError:
                pass

    def info(self, msg: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(msg)
        else:
            print(msg, flush=True)

    def iteration(self, rec: dict) -> None:
        self.records.append(rec)
        if self.bar is not None:
            self.bar.update(1)
            dev = f" {format_dev(rec)}" if "dev" in rec else ""
            self.bar.set_postfix_str(f"updates {rec.get('total_updates', 0):,} active "
                                     f"{rec.get('active', 0):,} max_pg "
                                     f"{rec.get('max_pg', 0.0):.3g}{dev}", refresh=False)
        else:
            for line in self.cadence.lines(rec):
                self.info(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        for line in self.cadence.final():  # the log ends with the last iteration's figures
            self.info(line)
        if self.json_path:
            from .io.model import atomic_write

            text = "".join(json.dumps(r) + "\n" for r in self.records)
            atomic_write(self.json_path, lambda f: f.write(text), mode="w")


# --------------------------------------------------------------------------- commands
def _spec(args):
    """The task's spec; ``args.max_sentence_length`` defaults to the task's."""
    from .tasks import get_task

    spec = get_task(getattr(args, "task", None) or "sequence")
    if getattr(args, "max_sentence_length", None) is None:
        args.max_sentence_length = spec.max_sentence_length
    return spec


def _read(spec, path: str, args, labeled: bool = True):
    """``spec.read``; a sentence longer than --max-sentence-length is refused saying what
    inference on it would cost (the task's ``length_cost``)."""
    return _length_checked(spec, spec.read, path, args, labeled)


def _length_checked(spec, fn, *a: Any) -> Any:
    """``fn(*a)``, a :class:`SentenceTooLong` it raises completed with what inference on a
    long sentence costs (the task's ``length_cost``)."""
    from .errors import SentenceTooLong

    try:
        return fn(*a)
    except SentenceTooLong as e:
        if e.why:
            raise
        why = "; ".join(x for x in (spec.length_cost, "raise --max-sentence-length to accept it")
                        if x)
        raise SentenceTooLong(e.path, e.line, e.n, e.limit, why) from None


def _interruptible(fn, *args: Any) -> Any:
    """``fn(*args)`` in a worker thread while the main thread waits in short slices, so that
    SIGINT/SIGTERM are honoured within a fraction of a second even while a compiled kernel
    (which releases the GIL but never returns to Python, e.g. parsing a very long sentence)
    runs: the handler raises KeyboardInterrupt here and the command exits with 130. The thread
    is a daemon; the process ends without waiting for it (:func:`main`)."""
    import threading

    box: dict[str, Any] = {}
    done = threading.Event()  # not Thread.is_alive: an interrupted join() marks the thread
    # stopped while it still runs (CPython's fix for bpo-45274, in 3.11)

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            box["error"] = e
        finally:
            done.set()

    _RUNNING.append(done)
    threading.Thread(target=run, name="demidcd-inference", daemon=True).start()
    while not done.wait(0.1):
        pass
    _RUNNING.remove(done)
    if "error" in box:
        raise box["error"]
    return box["value"]


_RUNNING: list[Any] = []  # "done" events of inference threads (left running by an interrupt)
_KEPT: list[str] = []  # what an interrupt of train now leaves of the model, said with it


def _report(spec, est, data, name: str, quiet: bool = False) -> None:
    """Print the metrics of ``est`` on ``data`` (stdout, even with --quiet; warnings to
    stderr)."""
    if not quiet:
        for w in spec.check(est, data):
            print(f"demidcd: warning: {w}", file=sys.stderr, flush=True)
    for line in spec.report(est, data, name):
        print(line, flush=True)


def _count(n: int, noun: str) -> str:
    """``1 label``, ``3 labels``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _label_warnings(spec, train, others: dict[str, Any], train_name: str) -> list[str]:
    """Before training: a training set with a single label (nothing to learn), and labels of
    --dev / --test that the training data lacks (the model cannot predict them)."""
    known = spec.label_counts(train)
    if known is None:
        return []
    out = []
    if len(known) == 1:
        (label, n), = known.items()
        out.append(f"{train_name}: all {n:,} tokens have the label {label!r}: there is nothing "
                   f"to learn, every prediction will be {label!r} (check --column)")
    for option, data in others.items():
        counts = spec.label_counts(data) if data is not None else None
        unknown = {k: v for k, v in (counts or {}).items() if k not in known}
        if not unknown:
            continue
        total = sum(counts.values())  # type: ignore[union-attr]
        n = sum(unknown.values())
        top = sorted(unknown, key=lambda t: (-unknown[t], t))
        names = ", ".join(f"{t} {unknown[t]:,}" for t in top[:5]) + (
            ", ..." if len(top) > 5 else "")
        out.append(f"{option} {getattr(data, 'path', '') or ''}: {n:,} of {total:,} tokens "
                   f"have labels the training data does not have ({_count(len(unknown), 'label')}: "
                   f"{names}); the model cannot predict them, so they count as errors "
                   "(check --column)")
    return out


def _check_outputs(*pairs: tuple[str, str | None]) -> None:
    """Fail before any work when an output (option, path) could not be written."""
    from .io.model import check_output

    for option, path in pairs:
        if path is not None:
            check_output(path, option)


def _check_out_dir(option: str, path: str) -> None:
    """An output directory must be a directory we can write in, or creatable; else one line
    saying why (:func:`demidcd.io.model.check_out_dir`)."""
    from .io.model import check_out_dir

    check_out_dir(path, option)


def _check_start(args, learner) -> None:
    """Refuse, before any data is read: --save-state, --resume or --init for a learner without
    a dual state, --save-state without --model, --resume with --init, and a --resume model
    without its state file beside it."""
    import os.path

    from .io.model import state_path
    from .solvers import check_resumable

    given = [f for f, v in (("--save-state", args.save_state), ("--resume", args.resume),
                            ("--init", args.init)) if v]
    check_resumable(learner, *given)
    if args.save_state and not args.model:
        raise OptionError("--save-state keeps the dual state beside the model: give --model")
    if args.resume and args.init:
        raise OptionError("--resume and --init: a resumed run keeps the prior of the run it "
                          "continues (its state file holds it); give one of them")
    for flag, path in (("--resume", args.resume), ("--init", args.init)):
        if path and not os.path.isfile(path):
            raise OptionError(f"{flag} {path}: no such model file")
    if args.resume and not os.path.isfile(state_path(args.resume)):
        raise OptionError(f"--resume {args.resume}: no saved state {state_path(args.resume)} "
                          "beside it (train with --save-state to keep one)")


def _metric_values(est, spec, data) -> dict[str, float]:
    """The numeric metrics of ``est`` on ``data`` (for the run summary)."""
    import numpy as np

    m = est.metrics(*spec.xy(data))
    return {k: float(v) for k, v in m.items() if isinstance(v, int | float | np.number)}


def cmd_train(args) -> int:
    """``train``, holding the lock on ``--model`` (:class:`~demidcd.io.model.ModelLock`)
    from the start: a second training of the same model file fails at once."""
    from .io.model import ModelLock

    if not args.model:
        return _train(args)
    lock = ModelLock(args.model, "--model")
    _CLEANUP.append(lock.release)  # also on the early exits that skip `finally`
    try:
        lock.acquire()
        return _train(args)
    finally:
        lock.release()
        _CLEANUP.remove(lock.release)


def _train(args) -> int:
    from .errors import WorkerError
    from .io.model import save_with_fallback, stdio_fd
    from .solvers import check_loss, check_threads, get_learner, oversubscription
    from .solvers.common import StopRequest

    if args.model is not None and stdio_fd(args.model) == 1:
        raise OptionError(f"--model {args.model}: standard output carries the log; give the "
                          "model a file name")
    _check_outputs(("--model", args.model), ("--log-json", args.log_json),
                   ("--cpu-log", args.cpu_log), ("--summary-json", args.summary_json))
    if args.snapshot_dir is not None:
        _check_out_dir("--snapshot-dir", args.snapshot_dir)
    threads = args.threads if args.threads is not None else (os.cpu_count() or 1)
    if threads < 1:
        raise OptionError(f"--threads must be >= 1, got {threads}")
    algorithm = args.algorithm or ("demi-dcd" if threads > 1 else "dcd")
    learner = get_learner(algorithm)
    check_threads(learner, threads)  # too few processes: an error, never another learner
    _check_start(args, learner)
    sequential_note = learner.single_process and threads > 1 and args.threads is not None
    if learner.single_process:
        threads = 1
    note = oversubscription(algorithm, threads, args.learners or default("learners"),
                            args.backend or default("backend"), args.ray_address)
    if note and not args.quiet:  # the layout the run will have (--learners auto included)
        print(f"demidcd: warning: {note}", file=sys.stderr)
    if args.ray_address and args.backend != "ray":
        raise OptionError("--ray-address needs --backend ray")
    if args.backend == "ray":
        from .parallel.ray import require_ray

        require_ray()  # a clear one-line error before any data is read
    spec = _spec(args)
    spec.check_options(None, args)  # options of other tasks: refused, not ignored
    if args.verbose is not None and args.verbose < 0:
        raise OptionError(f"--verbose must be an integer >= 0, got {args.verbose}")
    log = Log(args.quiet, args.log_json, 1 if args.verbose is None else args.verbose)
    if sequential_note:
        log.info(f"{algorithm} is sequential: it runs on one process (--threads {args.threads})")

    def callback(rec: dict, w: Any) -> None:
        log.iteration(rec)

    # only the options given on the command line: the estimator's defaults are the table's
    from .options import learner_params

    given = {o.name: getattr(args, o.name) for o in learner_params()}
    given["snapshot_dir"] = args.snapshot_dir or (
        os.path.splitext(args.model)[0] + ".snapshots"
        if args.snapshot_every and args.model else None)
    common = {k: v for k, v in given.items() if v is not None and k != "verbose"}  # (Log's)
    common.update(algorithm=algorithm, threads=threads, callback=callback, log=log.info,
                  debug=args.debug)
    est = spec.make_estimator(args, common)
    est.data_options_ = {**spec.data_options(args), "encoding": _encoding_name(args.encoding)}
    config = est.solver_config()  # bad options fail before the data is read
    check_loss(learner, args.loss)
    if algorithm == "demi-dcd" and threads > 1:  # --learners too
        from .solvers.multi_dcd import check_learners

        check_learners(args.learners or default("learners"), threads)
    seed = config.seed
    t0 = time.perf_counter()
    if args.train:
        train = _read(spec, args.train, args)
        dev = _read(spec, args.dev, args) if args.dev else None
        test = _read(spec, args.test, args) if args.test else None
        source = args.train
        if args.split_test is not None:
            from .io.splits import check_fraction, split_sentences

            check_fraction(args.split_test, "--split-test")
            train, test = split_sentences(train, args.split_test, seed)
            source += f" (seeded split: {1 - args.split_test:.0%} train, seed {seed})"
    else:
        args.seed = seed
        train, dev, test = spec.default_data(args)
        source = f"synthetic default corpus (demidcd.synthetic, seed {seed})"
    log.info(f"data: {source}: {spec.describe(train)} (read in "
             f"{time.perf_counter() - t0:.1f}s)")
    if not args.quiet:
        for line in _label_warnings(spec, train, {"--dev": dev, "--test": test},
                                    args.train or "the training data"):
            print(f"demidcd: warning: {line}", file=sys.stderr, flush=True)
    takes_loss = "loss" in learner.options
    log.info(f"model: task {spec.name}, algorithm {algorithm}, threads {threads}, "
             f"C {config.C:g}" + (f", loss {config.loss}" if takes_loss else ""))
    X, Y = spec.xy(train)
    Xd, Yd = spec.xy(dev) if dev is not None else (None, None)
    try:
        if args.model:
            _KEPT[:] = [f"{args.model} not written"]  # said if a Ctrl-C ends the run now
        est.fit(X, Y, Xd, Yd)
    except WorkerError as e:  # keep what was learnt: the partial model, marked unfinished
        log.close()
        if not args.model or getattr(est, "coef_", None) is None:
            raise
        with StopRequest.holding():  # a repeated Ctrl-C must not lose it
            save_with_fallback(est.save, args.model)
            _KEPT[:] = [f"the partial model was written to {args.model} (finished: false)"]
        raise WorkerError(f"{e}; partial model written to {args.model} (finished: false)",
                          e.details) from e
    log.close()
    res = est.result_
    log.info(f"features: {est.feature_summary()}")
    log.info(stop_line(res, config.tol, config.loss, cli_flag))
    with StopRequest.holding():  # a repeated Ctrl-C must not lose the model or its state
        if args.model:
            save_with_fallback(est.save, args.model)
            _KEPT[:] = [f"the model was written to {args.model}"
                        + ("" if res.finished else " (finished: false)")]
            ended = {"time-limit": " (the model reached within --time-limit)",
                     "max-epochs": " (the model after --max-epochs)"}
            log.info(f"model written to {args.model}" + ("" if res.finished else ended.get(
                res.stop_reason, f" (partial: {res.stop_reason})")))
        if args.save_state and getattr(est, "state_", None) is not None:
            from .io.model import state_path

            est.write_state(state_path(args.model))
            _KEPT.append(f"its dual state to {state_path(args.model)}")
            log.info(f"dual state written to {state_path(args.model)} (continue with --resume "
                     f"{args.model})")
    metrics = {}
    if dev is not None:
        _report(spec, est, dev, "dev ", args.quiet)
        if args.summary_json:
            metrics["dev"] = _metric_values(est, spec, dev)
    if test is not None:
        _report(spec, est, test, "test ", args.quiet)
        if args.summary_json:
            metrics["test"] = _metric_values(est, spec, test)
    if res.extra.get("memory_line"):
        log.info(res.extra["memory_line"])
    if res.extra.get("cpu_line"):  # a measurement of the run, not a result: not with --quiet
        log.info(res.extra["cpu_line"])
    if args.summary_json:
        from .solvers.recorder import write_summary

        write_summary(args.summary_json, res, algorithm=algorithm, threads=threads,
                      task=spec.name, data=source, dim=int(est.coef_.shape[0]),
                      model=args.model, **({"loss": config.loss} if takes_loss else {}),
                      **metrics)
    return 130 if res.stop_reason == "interrupted" else 0


def _load(args):
    """The model of ``--model`` and its task's spec, with the model's data options applied."""
    from .api import load_estimator

    est = load_estimator(args.model)
    args.task = est.task_name
    spec = _spec(args)
    spec.check_options(est, args)
    spec.configure(est, args)
    trained = (getattr(est, "data_options_", None) or {}).get("encoding")
    if args.encoding is None:  # the model's (utf-8 for a model that does not say)
        args.encoding = trained or default("encoding")
    elif trained and _encoding_name(args.encoding) != trained:
        warnings.warn(InputWarning(
            f"the model was trained on text read as {trained}, --encoding {args.encoding} "
            f"differs: words with non-ASCII characters will not match what it learnt unless "
            f"{args.data} really is in {args.encoding}"), stacklevel=2)
    return spec, est


def _encoding_name(encoding: str) -> str:
    """The codec's canonical name (``latin-1``, ``ISO-8859-1`` → ``iso8859-1``), or ``encoding``
    itself when Python does not know it (the reader reports that)."""
    import codecs

    try:
        return codecs.lookup(encoding).name
    except LookupError:
        return encoding


def cmd_evaluate(args) -> int:
    spec, est = _load(args)
    data = _read(spec, args.data, args)
    _interruptible(_report, spec, est, data, "", args.quiet)
    return 0


def _status_stream(out: str):
    """Where status lines go when ``out`` is written: stderr when ``out`` is standard output
    (``-``, ``/dev/stdout``), so that a pipe carries only the data; else stdout."""
    from .io.model import stdio_fd

    return sys.stderr if stdio_fd(out) == 1 else sys.stdout


def cmd_predict(args) -> int:
    from .io.model import shown_name

    _check_outputs(("--out", args.out))
    spec, est = _load(args)
    if hasattr(spec, "predict_stream") and _OWN_PROCESS:
        _numba_without_blas()
    if getattr(args, "threads", None) is not None and args.threads < 1:
        raise OptionError(f"--threads must be >= 1, got {args.threads}")
    if hasattr(spec, "predict_stream"):  # read, tag and write block by block
        if args.threads is None:
            args.threads = os.cpu_count() or 1
        n = _length_checked(spec, spec.predict_stream, est, args, _interruptible)
    else:
        data = _read(spec, args.data, args, labeled=False)
        predicted = _interruptible(spec.predict, est, data, args)
        spec.write(args.out, data, predicted, args)
        n = len(data)
    if not args.quiet:
        print(f"wrote {shown_name(args.out)} ({n:,} sentences)",
              file=_status_stream(args.out), flush=True)
    return 0


def _numba_without_blas() -> None:
    """Set numba's compiler up (its first kernel call does) without SciPy's linear algebra:
    numba imports scipy.linalg then only to let kernels it compiles call BLAS (np.dot & co.),
    which no kernel of the chain taggers' predict does; that import was 0.2-0.3 s of a
    2-3 s ``predict`` of EWT test x10. Only when the process is the command's own (not that
    of a caller of :func:`main`, whose own kernels may want BLAS); SciPy stays importable
    afterwards."""
    if "numba.np.arraymath" in sys.modules:
        return  # already set up
    missing = object()
    saved = sys.modules.get("scipy.linalg", missing)
    sys.modules["scipy.linalg"] = None  # type: ignore[assignment]  # import -> ImportError
    try:
        from numba.core.registry import cpu_target

        cpu_target.typing_context.refresh()
        cpu_target.target_context.refresh()
    finally:
        if saved is missing:
            del sys.modules["scipy.linalg"]
        else:
            sys.modules["scipy.linalg"] = saved


def cmd_evaluate_snapshots(args) -> int:
    import numpy as np

    from .io.model import atomic_write
    from .io.snapshots import list_snapshots
    from .solvers.common import primal_objective

    _check_outputs(("--out", args.out))
    snaps = list_snapshots(args.snapshot_dir)
    args.model = os.path.join(args.snapshot_dir, "base.npz")
    spec, est = _load(args)
    train = _read(spec, args.train, args)
    test = _read(spec, args.test, args) if args.test else train
    task = est.training_task(*spec.xy(train))
    rows = ["seconds,primal,dual,metric"]
    config = est.solver_config()
    for seconds, path in snaps:
        est.coef_ = np.load(path, allow_pickle=False)
        primal, _ = primal_objective(task, est.coef_, config.C, loss=config.loss)
        metric = est.score(*spec.xy(test))
        rows.append(f"{seconds:.3f},{primal:.10g},,{metric:.6f}")
        if not args.quiet:
            print(f"{seconds:9.2f}s  primal {primal:.6g}  metric {100 * metric:.2f}%",
                  file=_status_stream(args.out), flush=True)
    atomic_write(args.out, lambda f: f.write("\n".join(rows) + "\n"), mode="w")
    return 0


def cmd_dump(args) -> int:
    """``dump``: the model's weights, largest |weight| first (:meth:`weight_lines` of its
    estimator: feature, label, weight for the sequence tasks; by index for the others)."""
    from .api import load_estimator
    from .io.model import atomic_write

    if not args.all and args.top < 1:
        raise OptionError(f"--top must be >= 1, got {args.top}")
    _check_outputs(("--out", args.out))
    est = load_estimator(args.model)
    lines = est.weight_lines(None if args.all else args.top)
    atomic_write(args.out or "-", lambda f: f.writelines(x + "\n" for x in lines), mode="w")
    return 0


def cmd_split(args) -> int:
    from .io.splits import check_fraction, split_file

    check_fraction(args.test_fraction)
    _check_out_dir("--out-dir", args.out_dir)
    for path, n in split_file(args.file, args.out_dir, args.test_fraction, args.seed,
                              args.encoding):
        if not args.quiet:
            print(f"wrote {path}: {n:,} sentences")
    return 0


def cmd_generate(args) -> int:
    from .io.model import make_dirs
    from .io.tagged_writer import write_tagged
    from .synthetic import generate_splits

    _check_out_dir("--out-dir", args.out_dir)
    make_dirs(args.out_dir, "--out-dir")
    parts = generate_splits(seed=args.seed, n_sentences=args.sentences, n_tags=args.tags,
                            vocab_size=args.vocab, ambiguity=args.ambiguity,
                            mean_length=args.mean_length)
    for name, corpus in zip(("train", "dev", "test"), parts, strict=True):
        path = os.path.join(args.out_dir, f"{name}.txt")
        write_tagged(path, corpus, corpus.tags)
        if not args.quiet:
            print(f"wrote {path}: {len(corpus):,} sentences, {corpus.n_tokens:,} tokens")
    return 0


def cmd_learners(args) -> int:
    """List the learners (name, processes, objective, summary), or one learner's own options
    with their defaults (from the option table)."""
    from . import options as T
    from .solvers import LEARNERS, get_learner

    if args.name is None:
        for name, ln in LEARNERS.items():
            print(f"{name:11s} {ln.summary}; processes {ln.threads_text()}; objective: "
                  f"{ln.objective}")
        print("demidcd learners NAME: a learner's own options")
        return 0
    learner = get_learner(args.name)
    print(f"{learner.name}: {learner.summary}")
    print(f"processes: {learner.threads_text()}; objective: {learner.objective}")
    own = [o for o in T.options_for(learner.name) if o.owners and learner.name in o.owners]
    shared = [o for o in T.options_for(learner.name) if not o.owners and o.group == T.LEARNER]
    for title, opts in (("its own options", own), ("options every learner takes", shared)):
        print(f"{title}:")
        for o in opts:
            print(f"  {o.flag:26s} {o.help} (default: {o.default_text()})")
    return 0


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "predict": cmd_predict,
            "generate": cmd_generate, "evaluate-snapshots": cmd_evaluate_snapshots,
            "split": cmd_split, "learners": cmd_learners, "dump": cmd_dump}


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0, 1 internal error, 2 user error, 130
    interrupted). A Ctrl-C at any moment, even while modules load, gives 130 and one line."""
    from_command_line = argv is None  # the process is ours: it may end at once
    global _OWN_PROCESS
    _OWN_PROCESS = from_command_line
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    hook = sys.unraisablehook
    if not debug:
        sys.unraisablehook = _quiet_interrupt
    try:
        with warnings.catch_warnings():  # the caller's warning filters and hook come back
            warnings.simplefilter("ignore" if "--quiet" in argv else "always", InputWarning)
            warnings.simplefilter("ignore", ConvergenceWarning)  # train's stopped: line says it
            warnings.showwarning = _show_warning
            code = _main(argv, debug)
        if from_command_line and any(not done.is_set() for done in _RUNNING):
            # interrupted while a kernel runs in a worker thread: leave now, without waiting
            # for it or running the interpreter's shutdown around it (everything was cleaned
            # up on the way here)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(code)
        return code
    finally:  # in-process callers (tests, notebooks) get their handlers back
        sys.unraisablehook = hook
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _main(argv: list[str], debug: bool) -> int:
    if not debug:  # until the graceful handler is installed: a KeyboardInterrupt in an import
        # may surface as another exception (numpy: ImportError) or vanish (a weakref callback)
        signal.signal(signal.SIGINT, _early_exit)
        signal.signal(signal.SIGTERM, _early_exit)
    try:
        helps = any(a in ("-h", "--help", "--help-all") for a in argv)
        args = build_parser(show_all="--help-all" in argv, helps=helps).parse_args(argv)
        debug = getattr(args, "debug", False)
        from .primitives.shm import sweep_stale

        sweep_stale()  # every command removes the segments a killed run left (cheap: a listdir)
        if args.command in _HEAVY:  # load numpy, numba and the kernels' modules now
            from . import api  # noqa: F401
        # Ctrl-C / SIGINT stops gracefully and saves the partial model, even when the shell
        # that started us in the background set SIGINT to "ignore" (Python then keeps it
        # ignored); SIGTERM behaves the same way.
        from .solvers.common import StopRequest

        StopRequest.requested = StopRequest.active = False
        _KEPT.clear()
        signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)
        if _OWN_PROCESS and args.command in _HEAVY:
            _stop_with_parent()
        return COMMANDS[args.command](args)
    except DemidcdError as e:
        if debug:
            raise
        print(f"demidcd: error: {e.cli_text()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print("demidcd: interrupted" + "".join(f"; {k}" for k in _KEPT), file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of --out - went away (e.g. `| head`): stop quietly
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as a process killed by it
    except Exception as e:  # noqa: BLE001 - one line unless --debug
        if _stop_requested() and not debug:  # a signal that surfaced inside a kernel call
            print("demidcd: interrupted", file=sys.stderr)
            return 130
        if debug:
            raise
        print(f"demidcd: error: {type(e).__name__}: {e} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1


_HEAVY = ("train", "predict", "evaluate", "evaluate-snapshots", "dump")
_OWN_PROCESS = False  # main() runs as the process's entry point (python -m demidcd, demidcd)


_default_showwarning = warnings.showwarning


def _show_warning(message: Any, category: type, filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """An :class:`InputWarning` as one ``demidcd: warning: …`` line on stderr; others as
    Python shows them."""
    if issubclass(category, InputWarning):
        print(f"demidcd: warning: {message}", file=sys.stderr, flush=True)
    else:
        _default_showwarning(message, category, filename, lineno, file, line)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


_CLEANUP: list[Any] = []  # callables undoing what a command started (a lock, a temp file)


def _early_exit(signum: int, frame: object) -> None:
    """SIGINT/SIGTERM while modules load (or kernels compile): nothing is written yet, so leave
    at once, after the :data:`_CLEANUP` callables (a model lock's file)."""
    for undo in reversed(_CLEANUP):
        try:
            undo()
        except Exception:  # noqa: BLE001, S110 - leaving anyway
            pass
    sys.stderr.write("demidcd: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def _interrupt(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM once modules are loaded: :meth:`StopRequest.handler` (a flag while
    training, else KeyboardInterrupt), except inside numba or llvmlite outside training (compiling
    or loading the kernels, before any worker or shared memory exists): there a
    KeyboardInterrupt unwinding through LLVM crashed the process (cold cache, Ctrl-C at 1.5 s:
    SIGSEGV; at 5 s: "double free detected"), so leave at once as while modules load."""
    from .solvers.common import StopRequest

    if not StopRequest.active:
        f = frame
        while f is not None:
            if str(f.f_globals.get("__name__", "")).startswith(("numba", "llvmlite")):
                _early_exit(signum, frame)
            f = f.f_back
    StopRequest.handler(signum, frame)


def _stop_with_parent() -> None:
    """A command-line run stops as on SIGTERM (the model reached is saved, the workers and the
    shared memory go) when the process that started it dies: a killed ``timeout`` or job
    runner, a closed terminal. Otherwise it would go on detached, holding the cores and its
    model's lock. Not when it was started to outlive its parent: SIGHUP ignored (``nohup``) or
    a session of its own (``setsid``). Linux's ``PR_SET_PDEATHSIG`` delivers SIGHUP; a parent
    that died before it took effect is noticed by ``getppid``."""
    from .parallel.supervisor import PR_SET_PDEATHSIG, prctl

    if (prctl is None or signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            or os.getsid(0) == os.getpid()):
        return
    parent = os.getppid()
    if parent == 1:  # already reparented, e.g. a container's init started us
        return
    signal.signal(signal.SIGHUP, _interrupt)
    prctl(PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGHUP)


def _quiet_interrupt(u: Any) -> None:
    """A Ctrl-C raised inside a callback Python cannot propagate from (llvmlite's object-cache
    callback while numba compiles) is printed as "Exception ignored ... Traceback"; the stop
    flag it set ends the run at its next check, so say nothing. Anything else: the default."""
    if not isinstance(u.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(u)


def _stop_requested() -> bool:
    mod = sys.modules.get("demidcd.solvers.common")
    return bool(mod is not None and mod.StopRequest.requested)
