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

from .errors import DemidcdError, InputWarning, OptionError


# --------------------------------------------------------------------------- options
def _signature_default(module: str, function: str, name: str) -> Any:
    """The default of keyword ``name`` of ``module.function`` (None when absent), or the
    value of ``module.function`` itself when ``name`` is empty."""
    import importlib
    import inspect

    try:
        fn = getattr(importlib.import_module(f"demidcd.{module}"), function)
        if not name:
            return fn
        default = inspect.signature(fn).parameters[name].default
    except (ImportError, AttributeError, KeyError):
        return None
    return None if default is inspect.Parameter.empty else default


def _config_default(name: str) -> Any:
    from .solvers.common import SolverConfig

    return getattr(SolverConfig(), name)


# option dest → where its default lives, read only when --help is printed (it imports numpy)
_DEFAULT_SOURCES: dict[str, Any] = {
    **{k: (lambda k=k: _config_default(k)) for k in (
        "C", "tol", "delta", "seed", "inner_passes", "max_active", "batch", "skip", "sweeps",
        "loss")},
    "rho": lambda: _signature_default("solvers.demi_dcd", "train_demi_dcd", "rho"),
    "rho_worker": lambda: _signature_default("solvers.demi_dcd", "train_demi_dcd",
                                             "rho_worker"),
    "publish_interval": lambda: _signature_default("solvers.demi_dcd", "train_demi_dcd",
                                                   "publish_interval"),
    "perceptron_epochs": lambda: _signature_default(
        "solvers.sp_ipm", "train_sp_ipm", "perceptron_epochs_per_round"),
    "mixing": lambda: _signature_default("solvers.sp_ipm", "train_sp_ipm", "mixing"),
    "min_count": lambda: (f"{_signature_default('api', 'DEFAULT_MIN_COUNT', '')} for "
                          "sequence and chunking, 1 for ner and entity-relation"),
    "hashing": lambda: 0,
}


class _HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: …)`` to every option whose help does not state its default; the
    solver defaults are read from where they live (:data:`_DEFAULT_SOURCES`)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or "default" in text or action.nargs == 0
                or action.default is argparse.SUPPRESS):
            return text
        default = action.default
        if default is None and action.dest in _DEFAULT_SOURCES:
            default = _DEFAULT_SOURCES[action.dest]()
        if default is None and action.required:
            return text
        shown = "none" if default is None else str(default).replace("%", "%%")
        return f"{text} (default: {shown})".strip()


def _data_options(p: argparse.ArgumentParser, command: str) -> None:
    from .tasks import get_task, task_names

    g = p.add_argument_group("data")
    g.add_argument("--task", choices=task_names(), default="sequence",
                   help="; ".join(f"{n}: {get_task(n).help}" for n in task_names())
                   + ("" if command == "train" else " (default: the model's task)"))
    g.add_argument("--format", choices=("conllu", "columns", "conllx", "auto"), default="auto",
                   help="input format (auto: .conllu → conllu, else columns; --task dependency: "
                        "else conllx)")
    g.add_argument("--column", default=None,
                   help="label column: upos|xpos for CoNLL-U (default upos), a 1-based column "
                        "number for columns files (default the last); evaluate / predict "
                        "default to the model's")
    g.add_argument("--encoding", default="utf-8",
                   help="input encoding (the original CoNLL-2002: latin-1); predict writes in it")
    g.add_argument("--max-sentence-length", type=int, default=None, metavar="N",
                   help=_length_help(command))
    seen: set[str] = set()
    for name in task_names():
        for opt in get_task(name).options:
            if command in opt.commands and opt.flags[0] not in seen:
                seen.add(opt.flags[0])
                g.add_argument(*opt.flags, **opt.kwargs)


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
            f"read, before any work (default: {whose}: {per_task})")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="print only results and errors")
    p.add_argument("--debug", action="store_true", help="show tracebacks")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="demidcd", description="Fast multi-core structural SVM training (DEMI-DCD).",
        formatter_class=_HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    _sub_add = sub.add_parser

    def add_parser(*a: Any, **kw: Any) -> argparse.ArgumentParser:
        return _sub_add(*a, formatter_class=_HelpFormatter, **kw)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    t = sub.add_parser("train", help="train a model (no data arguments: the synthetic default)")
    t.add_argument("--train", metavar="FILE",
                   help="training data (default: the synthetic corpus)")
    t.add_argument("--dev", metavar="FILE", help="data scored in the log and at the end")
    t.add_argument("--test", metavar="FILE", help="data scored at the end")
    t.add_argument("--split-test", type=float, default=None, metavar="FRACTION",
                   help="hold out a seeded random FRACTION of --train as the test set")
    _data_options(t, "train")
    s = t.add_argument_group("solver")
    from .solvers import LEARNERS  # the learner registry (imported under the early handler)

    s.add_argument("--algorithm", choices=tuple(LEARNERS), default=None, metavar="NAME",
                   help="learner (default: demi-dcd when --threads > 1, else dcd): "
                        + "; ".join(f"{k}: {v.summary} (threads {v.threads_text()})"
                                    for k, v in LEARNERS.items()))
    s.add_argument("--threads", type=int, default=None,
                   help="processes (default: the number of cores)")
    s.add_argument("--C", type=float, default=None, help="regularisation C of Eq. (1)")
    s.add_argument("--loss", default=None, metavar="l1|l2",
                   help="DCD learners (dcd, dcd-light, demi-dcd, ms-dcd): the SSVM's loss, l2 "
                        "(squared hinge, Eq. 1) or l1 (hinge: SMO updates on the same active "
                        "sets; one learner)")
    s.add_argument("--tol", type=float, default=None,
                   help="stopping tolerance on violations and projected gradients")
    s.add_argument("--delta", type=float, default=None, help="shrinking threshold δ, Eq. (9)")
    s.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="solver time limit (default: none)")
    s.add_argument("--max-epochs", type=int, default=None,
                   help="outer iterations (default: until converged for the DCD learners, "
                        "100 rounds for sp-ipm)")
    s.add_argument("--seed", type=int, default=None, help="shuffling, sharding and splits")
    s.add_argument("--inner-passes", type=int, default=None, help="r of DCD-SSVM")
    s.add_argument("--max-active-per-example", type=int, default=None, dest="max_active",
                   help="bound on an example's active set |A_i|")
    s.add_argument("--batch", type=int, default=None,
                   help="examples per inference call in 1-DCD (1 = strictly sequential)")
    s.add_argument("--skip", type=float, default=None, metavar="SHARE",
                   help="DCD learners: share of the examples with the smallest projected "
                        "gradients that a pass over the active sets leaves out between full "
                        "passes (0 = always full passes)")
    s.add_argument("--sweeps", type=int, default=None,
                   help="DCD learners: sweeps over an example's active set per visit (--loss "
                        "l1: SWEEPS x |A_i| SMO pair steps per visit), at most")
    s.add_argument("--rho", type=int, default=None, help="updates between publishes of w")
    s.add_argument("--publish-interval", type=float, default=None, metavar="SECONDS",
                   help="DEMI-DCD: publish w at least this often when it changed")
    s.add_argument("--learners", default="auto", metavar="K|auto",
                   help="DEMI-DCD: learner processes updating one shared w (K = --threads: "
                        "every process infers and learns; 1: one learner and --threads − 1 "
                        "inference workers; auto, the default: --threads when one learner "
                        "could not keep up with the workers (measured cost of an update "
                        "against an inference), else 1)")
    s.add_argument("--update-mode", choices=("atomic", "plain", "hybrid"), default=None,
                   help="with several learners: atomic float adds to w, or plain stores "
                        "(lost updates possible, repaired when w is rebuilt; the default: measured "
                        "faster), or hybrid (atomic adds on the lines that lost updates)")
    s.add_argument("--rho-worker", type=int, default=None,
                   help="inferences between refreshes of a worker's w")
    s.add_argument("--backend", choices=("shm", "ray"), default="shm",
                   help="how the learner reaches its inference workers: shm (forked processes "
                        "on this machine) or ray (Ray actors on a cluster; pip install "
                        "'demidcd[ray]')")
    s.add_argument("--ray-address", metavar="ADDR", default=None,
                   help="--backend ray: the cluster to join (e.g. HEAD_IP:6379); default: start "
                        "a local Ray instance for this run")
    s.add_argument("--perceptron-epochs", type=int, default=None,
                   help="SP-IPM: perceptron epochs per mixing round")
    s.add_argument("--mixing", choices=("uniform", "mistakes"), default=None,
                   help="SP-IPM: parameter mixing weights")
    s.add_argument("--averaged", action=argparse.BooleanOptionalAction, default=None,
                   help="output averaged weights (SP-IPM: over mixing rounds, default off; "
                        "perceptron, mira, pegasos: over steps, default on)")
    s.add_argument("--batch-size", type=int, default=None, metavar="K",
                   help="pegasos, adagrad: examples per mini-batch step (16)")
    s.add_argument("--lambda", type=float, default=None, dest="lam",
                   help="pegasos: regularisation λ (default 1/(C n), the same objective)")
    s.add_argument("--projection", action="store_true", default=None,
                   help="pegasos: project w onto the ball ||w|| <= 1/sqrt(λ)")
    s.add_argument("--eta", type=float, default=None, help="adagrad: learning rate η (0.1)")
    s.add_argument("--regularizer", choices=("l1", "l2"), default=None,
                   help="adagrad: regulariser (l2)")
    s.add_argument("--min-count", type=int, default=None,
                   help="feature dictionary cut-off")
    s.add_argument("--hashing", type=int, default=None, metavar="DIM",
                   help="hash observation features into DIM buckets (no dictionary)")
    o = t.add_argument_group("output")
    o.add_argument("--model", metavar="OUT", help="model file to write (.npz)")
    o.add_argument("--log-json", metavar="FILE", help="write the log records as JSON lines")
    o.add_argument("--summary-json", metavar="FILE",
                   help="write the run summary as JSON (stop reason, time, counters, CPU, "
                        "dev/test metrics)")
    o.add_argument("--cpu-log", metavar="FILE", help="CPU-use timeline as CSV")
    o.add_argument("--eval-every", type=float, default=None, metavar="SECONDS",
                   help="log primal, dual and gap at most every SECONDS")
    o.add_argument("--snapshot-every", type=float, default=None, metavar="SECONDS",
                   help="save w every SECONDS of solver time (see evaluate-snapshots)")
    o.add_argument("--snapshot-dir", metavar="DIR",
                   help="where snapshots go (default: MODEL without .npz + .snapshots)")
    _common(t)

    for name, hlp in (("predict", "tag a file"), ("evaluate", "score a model on a file")):
        q = sub.add_parser(name, help=hlp)
        q.add_argument("--model", required=True, help="model file written by train")
        q.add_argument("--data", required=True, metavar="FILE",
                       help="input data (- : standard input; --format auto then tells CoNLL-U "
                            "from columns by the content)")
        _data_options(q, name)
        if name == "predict":
            q.add_argument("--out", required=True, metavar="FILE",
                           help="output file (the input's format and encoding; - or "
                                "/dev/stdout: standard output, status lines then go to "
                                "stderr)")
            c = q.add_argument_group("sequence, chunking and ner models")
            c.add_argument("--nbest", type=int, default=None, metavar="K",
                           help="the K best taggings of each sentence, best first, in CRF++'s "
                                "n-best layout (crf_test -n): a line '# RANK SCORE' (rank from "
                                "0) before each labelled copy of the sentence; SCORE is the "
                                "model's score w·Phi(x, y), not CRF++'s probability")
            c.add_argument("--force", action="store_true",
                           help="keep the labels given in the input's label column (the "
                                "model's; a columns file: the last column) where the model "
                                "knows them and decode the other tokens around them (?, _ or "
                                "an unknown label: free), as Wapiti's --force")
            c.add_argument("--scores", action="store_true",
                           help="confidences: a line '# SCORE MARGIN' before each sentence "
                                "(its score w·Phi(x, y) and best minus second-best score) and "
                                "after each label a column with the token's margin (its "
                                "max-marginal minus the best other label's, >= 0; inf: no "
                                "other label possible; CoNLL-U: Margin= in MISC)")
        _common(q)

    e = sub.add_parser("evaluate-snapshots",
                       help="primal objective and metric of every snapshot, as CSV")
    e.add_argument("snapshot_dir", metavar="DIR")
    e.add_argument("--train", required=True, metavar="FILE", help="data the primal is taken on")
    e.add_argument("--test", metavar="FILE", help="data the metric is taken on (default: train)")
    e.add_argument("--out", required=True, metavar="CSV", help="CSV file to write")
    _data_options(e, "evaluate-snapshots")
    _common(e)

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
    return parser


# --------------------------------------------------------------------------- helpers
class Log:
    """Human log on stdout (unless quiet); JSON lines to a file, written atomically at the end.

    On a terminal the per-iteration lines become a tqdm progress bar (elapsed time, iterations,
    and the latest record as its status); elsewhere (files, pipes, CI) plain lines.
    """

    def __init__(self, quiet: bool, json_path: str | None):
        self.quiet, self.json_path, self.records = quiet, json_path, []
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
            dev = f" {_fmt_dev(rec)}" if "dev" in rec else ""
            self.bar.set_postfix_str(f"updates {rec.get('total_updates', 0):,} active "
                                     f"{rec.get('active', 0):,} max_pg "
                                     f"{rec.get('max_pg', 0.0):.3g}{dev}", refresh=False)
        else:
            self.info(_fmt_iter(rec))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.json_path:
            from .io.model import atomic_write

            text = "".join(json.dumps(r) + "\n" for r in self.records)
            atomic_write(self.json_path, lambda f: f.write(text), mode="w")


def _fmt_dev(rec: dict) -> str:
    """``dev 95.12%`` (accuracy) or ``dev chunk F1 93.60`` (any other headline metric)."""
    name = rec.get("dev_metric", "accuracy")
    if name == "accuracy":
        return f"dev {100 * rec['dev']:.2f}%"
    return f"dev {name} {100 * rec['dev']:.2f}"


def _fmt_iter(rec: dict) -> str:
    parts = [f"iter {rec['epoch']:3d}", f"{rec['seconds']:8.2f}s",
             f"updates {rec.get('total_updates', rec.get('updates', 0)):>10,}",
             f"active {rec.get('active', 0):>8,}", f"shrunk {rec.get('shrunk', 0):>7,}",
             f"admitted {rec.get('admitted', 0):>7,}", f"max_pg {rec.get('max_pg', 0.0):.4f}"]
    for k in ("inferences", "pushed", "duplicates", "dropped", "ring"):
        if k in rec:
            parts.append(f"{k} {rec[k]:,}" if isinstance(rec[k], int) else f"{k} {rec[k]}")
    if "dev" in rec:
        parts.append(_fmt_dev(rec))
    if "primal" in rec:
        parts.append(f"primal {rec['primal']:.6g} dual {rec['dual']:.6g} gap {rec['gap']:.3g}")
    return "  ".join(parts)


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
    from .errors import SentenceTooLong

    try:
        return spec.read(path, args, labeled)
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


def _why_not_converged(res, config) -> str:
    """Why a run stopped before the tolerance test passed, and what to change."""
    last = res.history[-1] if res.history else {}
    pg = last.get("max_pg")
    what = "largest KKT gap" if config.loss == "l1" else "largest projected gradient"
    state = f"{what} {pg:.3g}, --tol {config.tol:g}" if pg is not None else \
        f"--tol {config.tol:g}"
    hint = {"max-epochs": "raise --max-epochs or --tol",
            "time-limit": "raise --time-limit or --tol",
            "interrupted": "interrupted by a signal",
            "worker-failed": "a worker failed"}.get(res.stop_reason, res.stop_reason)
    return f"not converged ({state}): {hint}"


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
    sequential_note = learner.single_process and threads > 1 and args.threads is not None
    if learner.single_process:
        threads = 1
    note = oversubscription(algorithm, threads, args.learners, args.backend, args.ray_address)
    if note and not args.quiet:  # the layout the run will have (--learners auto included)
        print(f"demidcd: warning: {note}", file=sys.stderr)
    if args.ray_address and args.backend != "ray":
        raise OptionError("--ray-address needs --backend ray")
    if args.backend == "ray":
        from .parallel.ray import require_ray

        require_ray()  # a clear one-line error before any data is read
    spec = _spec(args)
    log = Log(args.quiet, args.log_json)
    if sequential_note:
        log.info(f"{algorithm} is sequential: it runs on one process (--threads {args.threads})")

    def callback(rec: dict, w: Any) -> None:
        log.iteration(rec)

    # only the options given on the command line: the estimator's None means the default
    given = {k: getattr(args, k) for k in (
        "C", "tol", "delta", "max_epochs", "time_limit", "seed", "inner_passes", "max_active",
        "batch", "skip", "sweeps", "loss", "rho", "rho_worker", "publish_interval", "mixing",
        "averaged", "cpu_log", "eval_every", "snapshot_every", "batch_size", "lam",
        "projection", "eta", "regularizer", "learners", "update_mode", "ray_address")}
    given["backend"] = args.backend if args.backend != "shm" else None  # shm: the default
    given["perceptron_epochs_per_round"] = args.perceptron_epochs
    given["snapshot_dir"] = args.snapshot_dir or (
        os.path.splitext(args.model)[0] + ".snapshots"
        if args.snapshot_every and args.model else None)
    common = {k: v for k, v in given.items() if v is not None}
    common.update(algorithm=algorithm, threads=threads, callback=callback, log=log.info,
                  debug=args.debug)
    est = spec.make_estimator(args, common)
    est.data_options_ = {**spec.data_options(args), "encoding": _encoding_name(args.encoding)}
    config = est.solver_config()  # bad options fail before the data is read
    check_loss(learner, args.loss)
    if algorithm == "demi-dcd" and threads > 1:  # --learners too
        from .solvers.multi_dcd import check_learners

        check_learners(args.learners, threads)
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
        est.fit(X, Y, Xd, Yd)
    except WorkerError as e:  # keep what was learnt: the partial model, marked unfinished
        log.close()
        if not args.model or getattr(est, "coef_", None) is None:
            raise
        save_with_fallback(est.save, args.model)
        raise WorkerError(f"{e}; partial model written to {args.model} (finished: false)",
                          e.details) from e
    log.close()
    res = est.result_
    log.info(f"features: {est.feature_summary()}")
    log.info(f"stopped: {res.stop_reason} after {res.epochs} iterations, {res.seconds:.1f}s"
             + ("" if res.finished else f"; {_why_not_converged(res, config)}"))
    if args.model:
        save_with_fallback(est.save, args.model)
        log.info(f"model written to {args.model}"
                 + ("" if res.finished else f" (partial: {res.stop_reason})"))
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
    if res.extra.get("cpu_line"):
        print(res.extra["cpu_line"], flush=True)
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
    if trained and _encoding_name(args.encoding) != trained:
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
    data = _read(spec, args.data, args, labeled=False)
    predicted = _interruptible(spec.predict, est, data, args)
    spec.write(args.out, data, predicted, args)
    if not args.quiet:
        print(f"wrote {shown_name(args.out)} ({len(data):,} sentences)",
              file=_status_stream(args.out), flush=True)
    return 0


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
    from .io.tagged import write_tagged
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


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "predict": cmd_predict,
            "generate": cmd_generate, "evaluate-snapshots": cmd_evaluate_snapshots,
            "split": cmd_split}


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit status (0, 1 internal error, 2 user error, 130
    interrupted). A Ctrl-C at any moment, even while modules load, gives 130 and one line."""
    from_command_line = argv is None  # the process is ours: it may end at once
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    if not debug:
        sys.unraisablehook = _quiet_interrupt
    try:
        with warnings.catch_warnings():  # the caller's warning filters and hook come back
            warnings.simplefilter("ignore" if "--quiet" in argv else "always", InputWarning)
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
        args = build_parser().parse_args(argv)
        debug = getattr(args, "debug", False)
        if args.command in _HEAVY:  # load numpy, numba and the kernels' modules now
            from . import api  # noqa: F401
        # Ctrl-C / SIGINT stops gracefully and saves the partial model, even when the shell
        # that started us in the background set SIGINT to "ignore" (Python then keeps it
        # ignored); SIGTERM behaves the same way.
        from .solvers.common import StopRequest

        StopRequest.requested = StopRequest.active = False
        signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)
        return COMMANDS[args.command](args)
    except DemidcdError as e:
        if debug:
            raise
        print(f"demidcd: error: {e.cli_text()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print("demidcd: interrupted", file=sys.stderr)
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


_HEAVY = ("train", "predict", "evaluate", "evaluate-snapshots")


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


def _quiet_interrupt(u: Any) -> None:
    """A Ctrl-C raised inside a callback Python cannot propagate from (llvmlite's object-cache
    callback while numba compiles) is printed as "Exception ignored ... Traceback"; the stop
    flag it set ends the run at its next check, so say nothing. Anything else: the default."""
    if not isinstance(u.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(u)


def _stop_requested() -> bool:
    mod = sys.modules.get("demidcd.solvers.common")
    return bool(mod is not None and mod.StopRequest.requested)
