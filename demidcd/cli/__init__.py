"""The ``demidcd`` command: train, predict, evaluate, generate.

Every user error prints one line ``demidcd: error: …`` (naming the file and line, or the option)
and exits with status 2; ``--debug`` shows the traceback instead. Output paths are checked before
any data is read. Solver options default to None here and only the ones given are passed on: their
defaults live in :class:`~demidcd.solvers.common.SolverConfig` (and the schedules' signatures for
the engine options), and ``--help`` reads them from there. Heavy modules (numpy, numba) are
imported inside the commands, so that Ctrl-C at any moment exits with 130 and no traceback.

The parsed namespace stays here: each command turns it once into frozen option objects
(:class:`~demidcd.options.DataOptions`, :class:`~demidcd.options.OutputOptions`) and hands
those to the task's spec (:mod:`demidcd.tasks`), which returns new ones rather than writing
back. The parser and its help texts are :mod:`demidcd.cli.parser`; the log, the interruptible
inference thread and the signal handling are :mod:`demidcd.cli.log`; :mod:`demidcd.cli.setup`
runs ``train``'s set-up (reading, feature dictionary, encoding) in a short-lived child process,
so that its Python objects never live in the processes that train.
"""

from __future__ import annotations

import argparse
import codecs
import os
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from ..errors import ConvergenceWarning, DemidcdError, InputWarning, OptionError
from ..options import DataOptions, OutputOptions, default
from ..progress import cli_flag, stop_line
from .log import (
    CLEANUP,
    ENVIRONMENT_ERRNOS,
    KEPT,
    RUNNING,
    Log,
    early_exit,
    interrupt,
    interruptible,
    quiet_interrupt,
    show_warning,
    silence_stdout,
    stop_requested,
    stop_with_parent,
)
from .parser import build_parser
from .setup import exit_now, run_in_child

__all__ = ["main", "build_parser", "load_model", "COMMANDS", "Log"]


# --------------------------------------------------------------------------- commands
def _options(args: Any, task: str | None = None) -> tuple[Any, DataOptions, OutputOptions]:
    """The spec of ``task`` (default: ``--task``, else sequence) and the command's options,
    parsed once into frozen values: the data options (``--max-sentence-length``: the task's
    default when not given) and the output options. An option the command does not take is
    None, as one it takes but was not given (not the table's default: the specs' checks
    tell given options by it)."""
    from ..options import OPTIONS
    from ..tasks import get_task

    values = {**{o.name: None for o in OPTIONS}, **vars(args)}
    spec = get_task(task or values.get("task") or "sequence")
    options = DataOptions.from_mapping({**values, "task": spec.name})
    if options.max_sentence_length is None:
        options = replace(options, max_sentence_length=spec.max_sentence_length)
    return spec, options, OutputOptions.from_mapping(values)


def _read(spec: Any, path: str, options: DataOptions, labelled: bool = True) -> Any:
    """``spec.read``; a sentence longer than --max-sentence-length is refused saying what
    inference on it would cost (the task's ``length_cost``)."""
    return _length_checked(spec, spec.read, path, options, labelled)


def _length_checked(spec, fn, *a: Any) -> Any:
    """``fn(*a)``, a :class:`SentenceTooLong` it raises completed with what inference on a
    long sentence costs (the task's ``length_cost``)."""
    from ..errors import SentenceTooLong

    try:
        return fn(*a)
    except SentenceTooLong as e:
        if e.why:
            raise
        why = "; ".join(x for x in (spec.length_cost, "raise --max-sentence-length to accept it")
                        if x)
        raise SentenceTooLong(e.path, e.line, e.n, e.limit, why) from None


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


def _label_warnings(spec, train, others: dict[str, Any], train_name: str,
                    known: dict[str, int] | None = None) -> list[str]:
    """Before training: a training set with a single label (nothing to learn), and labels of
    --dev / --test that the training data lacks (the model cannot predict them); ``known``:
    the training labels' counts (else ``spec.label_counts(train)``)."""
    known = spec.label_counts(train) if known is None else known
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
    from ..io.model import check_output

    for option, path in pairs:
        if path is not None:
            check_output(path, option)


def _check_out_dir(option: str, path: str) -> None:
    """An output directory must be a directory we can write in, or creatable; else one line
    saying why (:func:`demidcd.io.model.check_out_dir`)."""
    from ..io.model import check_out_dir

    check_out_dir(path, option)


def _check_start_files(args) -> None:
    """Refuse, before any data is read, what the plan cannot see: --save-state without
    --model, a --resume / --init model that is not there, a --resume model without its state
    file beside it (the start options themselves are the plan's: ``make_plan``)."""
    import os.path

    from ..io.model import state_path

    if args.save_state and not args.model:
        raise OptionError("--save-state keeps the dual state beside the model: give --model")
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


def cmd_train(args: argparse.Namespace) -> int:
    """``train``, holding the lock on ``--model`` (:class:`~demidcd.io.model.ModelLock`)
    from the start: a second training of the same model file fails at once."""
    from ..io.model import ModelLock

    if not args.model:
        return _train(args)
    lock = ModelLock(args.model, "--model")
    CLEANUP.append(lock.release)  # also on the early exits that skip `finally`
    try:
        lock.acquire()
        return _train(args)
    finally:
        lock.release()
        CLEANUP.remove(lock.release)


def _train(args) -> int:
    """:func:`_trained` with the whole run's peak memory read (its log line: the set-up's
    peak, before any training process's monitor starts, included)."""
    from ..primitives.monitor import RunPeak

    with RunPeak() as peak:
        return _trained(args, peak)


def _trained(args, peak) -> int:
    from ..errors import WorkerError
    from ..io.model import save_with_fallback, stdio_fd
    from ..solvers import get_learner, oversubscription
    from ..solvers.common import StopRequest
    from ..solvers.plan import learner_name

    if args.model is not None and stdio_fd(args.model) == 1:
        raise OptionError(f"--model {args.model}: standard output carries the log; give the "
                          "model a file name")
    _check_outputs(("--model", args.model), ("--log-json", args.log_json),
                   ("--cpu-log", args.cpu_log), ("--summary-json", args.summary_json))
    if args.snapshot_dir is not None:
        _check_out_dir("--snapshot-dir", args.snapshot_dir)
    spec, options, output = _options(args)
    spec.check_options(None, options, output)  # options of other tasks: refused, not ignored
    if args.verbose is not None and args.verbose < 0:
        raise OptionError(f"--verbose must be an integer >= 0, got {args.verbose}")
    log = Log(args.quiet, args.log_json, 1 if args.verbose is None else args.verbose)

    def callback(rec: dict, w: Any) -> None:
        log.iteration(rec)

    threads = args.threads
    if threads is None:  # the command line's default: every core, for a learner that uses them
        sequential = args.algorithm is not None and \
            get_learner(learner_name(args.algorithm)).single_process
        threads = 1 if sequential else (os.cpu_count() or 1)
    # only the options given on the command line: the estimator's defaults are the table's
    from ..options import learner_params

    given = {o.name: getattr(args, o.name) for o in learner_params()}  # learning and output
    given["snapshot_dir"] = args.snapshot_dir or (
        os.path.splitext(args.model)[0] + ".snapshots"
        if args.snapshot_every and args.model else None)
    common = {k: v for k, v in given.items() if v is not None and k != "verbose"}  # (Log's)
    common.update(threads=threads, callback=callback, log=log.info, debug=args.debug)
    est = spec.make_estimator(options, common)
    plan = est.plan()  # every learner option checked once; its errors name the flags here
    _check_start_files(args)
    note = oversubscription(plan.algorithm, plan.threads, plan.learners, plan.backend,
                            plan.ray_address)
    if note and not args.quiet:  # the layout the run will have (--learners auto included)
        print(f"demidcd: warning: {note}", file=sys.stderr)
    if not args.model:  # said up front: a long run must not end with the model thrown away
        log.info("no --model: the trained model is not saved (only its scores are printed); "
                 "give --model FILE to keep it")
    est.data_options_ = {**spec.data_options(est, options),
                         "encoding": _encoding_name(options.encoding)}
    config = plan.config
    seed = config.seed
    def say_plan() -> None:
        lines = [x for x in plan.lines() if x != plan.note]  # (fit logs the note itself)
        log.info(f"model: task {spec.name}, {lines[0]}")
        for line in lines[1:]:  # the learner's own options that are set
            log.info(line)
        if config.time_limit:
            log.info(f"--time-limit {config.time_limit:g} counts training only: building the "
                     "features, encoding and compiling kernels come first, each step logged")

    def set_up_in_parts() -> tuple[str, Any, Any, Any] | None:
        """:func:`set_up` with the training file read, its features counted and encoded in
        ``--threads`` processes (the cores given, also for a one-process learner;
        :mod:`demidcd.estimators.parts`; with one, in one part here: the same model as the
        serial set-up's, sooner and in less memory); None where it does not apply (the
        caller then sets up serially)."""
        from ..errors import PartialLabelError
        from ..estimators.parts import PartsUnsupported, parts_supported, prepare_fit_parts

        cores = max(plan.threads, threads)  # (--threads 2 --algorithm dcd: set-up on 2)
        if not options.train or options.split_test is not None or \
                not hasattr(spec, "read_part") or not parts_supported(est):
            return None
        from ..io.shards import byte_ranges
        from ..io.tagged import first_columns_state
        from ..parallel.forked import PartFailed

        t0 = time.perf_counter()
        fmt = spec.read_plan(options.train, options)[0]
        ranges = byte_ranges(options.train, cores, fmt == "conllu", options.encoding)
        if not ranges:
            return None
        state = first_columns_state(options.train, options.encoding) \
            if fmt == "columns" else None
        if fmt == "columns" and state is None:
            return None
        dev = _read(spec, options.dev, options) if options.dev else None
        test = _read(spec, options.test, options) if options.test else None
        if codecs.lookup(options.encoding).name != "utf-8":  # the whole file's warning, once
            from ..io.text_source import check_utf8_read_as_other, source_name

            with open(options.train, "rb") as f:
                check_utf8_read_as_other(f.read(), "", source_name(options.train),
                                         options.encoding)

        def read(k: int) -> tuple[Any, Any]:
            part = _length_checked(spec, spec.read_part, options.train, options, ranges[k],
                                   state)
            return spec.xy(part)

        def on_read(parts: list[dict]) -> None:
            known: dict[str, int] = {}
            for p in parts:
                for k, v in p["labels"].items():
                    known[k] = known.get(k, 0) + v
            n_sent = sum(p["n_sentences"] for p in parts)
            if not n_sent:
                from ..errors import InputError

                raise InputError(options.train, None, "no sentences found (empty file?)")
            unknown, sets = (sum(p["partial"][j] for p in parts) for j in (0, 1))
            partial = (f" ({unknown:,} with an unknown label, {sets:,} with a set of labels)"
                       if unknown or sets else "")
            log.info(f"data: {options.train}: {n_sent:,} sentences, "
                     f"{sum(p['n_tokens'] for p in parts):,} tokens{partial} (read in "
                     f"{time.perf_counter() - t0:.1f}s, with its features, in "
                     f"{len(parts)} part{'s' if len(parts) > 1 else ''})")
            if not args.quiet:
                for line in _label_warnings(spec, None, {"--dev": dev, "--test": test},
                                            options.train, known):
                    print(f"demidcd: warning: {line}", file=sys.stderr, flush=True)
            say_plan()

        Xd, Yd = spec.xy(dev) if dev is not None else (None, None)
        try:
            prepared = prepare_fit_parts(est, read, len(ranges), Xd, Yd, on_read)
        except (PartsUnsupported, PartialLabelError):  # (the serial reader names the line)
            return None
        except PartFailed as e:  # a process died (killed, out of memory): once more, serially
            print(f"demidcd: warning: {e}; setting up again in one process", file=sys.stderr,
                  flush=True)
            return None
        return options.train, dev, test, prepared

    def set_up(prepare: bool) -> tuple[str, Any, Any, Any]:
        """Read the data, say what was read and how the model will train; (source, dev, test,
        ``est.prepare_fit``'s result with ``prepare``, else the arguments of ``est.fit``)."""
        if prepare:
            out = set_up_in_parts()
            if out is not None:
                return out
        t0 = time.perf_counter()
        if options.train:
            train = _read(spec, options.train, options)
            dev = _read(spec, options.dev, options) if options.dev else None
            test = _read(spec, options.test, options) if options.test else None
            source = options.train
            if options.split_test is not None:
                from ..io.splits import check_fraction, split_sentences

                check_fraction(options.split_test, "--split-test")
                train, test = split_sentences(train, options.split_test, seed)
                source += f" (seeded split: {1 - options.split_test:.0%} train, seed {seed})"
        else:
            train, dev, test = spec.default_data(options, seed)
            source = f"synthetic default corpus (demidcd.synthetic, seed {seed})"
        log.info(f"data: {source}: {spec.describe(train)} (read in "
                 f"{time.perf_counter() - t0:.1f}s)")
        if not args.quiet:
            for line in _label_warnings(spec, train, {"--dev": dev, "--test": test},
                                        options.train or "the training data"):
                print(f"demidcd: warning: {line}", file=sys.stderr, flush=True)
        say_plan()
        X, Y = spec.xy(train)
        Xd, Yd = spec.xy(dev) if dev is not None else (None, None)
        del train
        if prepare:
            return source, dev, test, est.prepare_fit(X, Y, Xd, Yd)
        return source, dev, test, (X, Y, Xd, Yd)

    # the set-up's Python objects (tokens, feature strings) stay out of the processes that
    # train: a child process prepares the arrays and exits (demidcd.cli.setup)
    from ..estimators.cluster import runs_on_cluster

    cluster = runs_on_cluster(est, plan)
    if cluster:  # each node of the cluster reads its own part: the driver reads no examples
        source, data, done = options.train, None, False
        dev = _read(spec, options.dev, options) if options.dev else None
        test = _read(spec, options.test, options) if options.test else None
        log.info(f"data: {source}: read by the nodes of the Ray cluster at "
                 f"{plan.ray_address}, each its own part")
    else:
        child = _OWN_PROCESS and not args.debug and hasattr(est, "prepare_fit")
        # (on two cores or more the fit's kernels load here while the child sets up)
        beside = (lambda: est.preload_kernels(plan)) if plan.threads > 1 else None
        done, out = run_in_child(lambda: set_up(True), beside) if child else (False, None)
        source, dev, test, data = out if done else set_up(False)
        del out

    def fit() -> None:
        nonlocal data
        if cluster:
            from ..estimators.cluster import fit_on_cluster

            fit_on_cluster(est, plan, options, spec, log.info, plan.ray_address, args.debug)
        elif done:
            prepared, data = data, None
            est.fit_prepared(prepared)
        else:
            X, Y, Xd, Yd = data
            data = None
            est.fit(X, Y, Xd, Yd)

    try:
        if args.model:
            KEPT[:] = [f"{args.model} not written"]  # said if a Ctrl-C ends the run now
        fit()
    except WorkerError as e:  # keep what was learnt: the partial model, marked unfinished
        log.close()
        if not args.model or getattr(est, "coef_", None) is None:
            raise
        with StopRequest.holding():  # a repeated Ctrl-C must not lose it
            save_with_fallback(est.save, args.model)
            KEPT[:] = [f"the partial model was written to {args.model} (finished: false)"]
        raise WorkerError(f"{e}; partial model written to {args.model} (finished: false)",
                          e.details) from e
    log.close()
    res = est.result_
    log.info(f"features: {est.feature_summary()}")
    log.info(stop_line(res, config.tol, config.loss, cli_flag))
    with StopRequest.holding():  # a repeated Ctrl-C must not lose the model or its state
        if args.model:
            save_with_fallback(est.save, args.model)
            KEPT[:] = [f"the model was written to {args.model}"
                        + ("" if res.finished else " (finished: false)")]
            ended = {"time-limit": " (the model reached within --time-limit)",
                     "max-epochs": " (the model after --max-epochs)",
                     "max-iterations": " (the model after --max-iterations)",
                     "converged": " (CCCP converged; its convex step short of --tol)",
                     "max-rounds": " (the model after the most CCCP rounds)"}
            log.info(f"model written to {args.model}" + ("" if res.finished else ended.get(
                res.stop_reason, f" (partial: {res.stop_reason})")))
        if args.save_state and getattr(est, "state_", None) is not None:
            from ..io.model import state_path

            est.write_state(state_path(args.model))
            KEPT.append(f"its dual state to {state_path(args.model)}")
            log.info(f"dual state written to {state_path(args.model)} (continue with --resume "
                     f"{args.model})")
    # training is over and the model written: a Ctrl-C from here on ends the command at once
    # (exit 130), and the scoring runs where a signal can reach the main thread (it was a flag
    # nobody polled any more: Ctrl-C during the --dev scoring waited for its end)
    StopRequest.active = False
    metrics = {}
    if dev is not None:
        interruptible(_report, spec, est, dev, "dev ", args.quiet)
        if args.summary_json:
            metrics["dev"] = interruptible(_metric_values, est, spec, dev)
    if test is not None:
        interruptible(_report, spec, est, test, "test ", args.quiet)
        if args.summary_json:
            metrics["test"] = interruptible(_metric_values, est, spec, test)
    if res.extra.get("memory_line"):
        peak.stop()
        log.info(res.extra["memory_line"] if cluster else peak.line())
    if res.extra.get("cpu_line"):  # a measurement of the run, not a result: not with --quiet
        log.info(res.extra["cpu_line"])
    if args.summary_json:
        from ..solvers.recorder import write_summary

        ran = est.plan_  # the plan as trained (learners decided)
        write_summary(args.summary_json, res, algorithm=ran.algorithm, threads=ran.threads,
                      task=spec.name, data=source, dim=int(est.coef_.shape[0]),
                      model=args.model, **({"loss": config.loss}
                                           if "loss" in ran.learner.options else {}),
                      **metrics)
    return 130 if res.stop_reason == "interrupted" else 0


def load_model(args: argparse.Namespace, model: str | None = None
               ) -> tuple[Any, Any, DataOptions, OutputOptions]:
    """``(spec, est, options, output)``: the model of ``--model`` (or ``model``), its task's
    spec, and the command's data options with the model's applied (its remembered data
    options as defaults, what the spec derives from it, its encoding) and output options."""
    from ..api import load_estimator

    est = load_estimator(model or args.model)
    given = vars(args).get("task")
    if given is not None and given != est.task_name:  # the model's task is the one used
        raise OptionError(f"--task {given}: {model or args.model} is a {est.task_name} model "
                          "(drop --task: the model's is used)")
    spec, options, output = _options(args, est.task_name)
    if model is not None:
        output = replace(output, model=model)
    spec.check_options(est, options, output)
    options = spec.configure(est, options)
    trained = (getattr(est, "data_options_", None) or {}).get("encoding")
    if options.encoding is None:  # the model's (utf-8 for a model that does not say)
        options = replace(options, encoding=trained or default("encoding"))
    elif trained and _encoding_name(options.encoding) != trained:
        warnings.warn(InputWarning(
            f"the model was trained on text read as {trained}, --encoding {options.encoding} "
            f"differs: words with non-ASCII characters will not match what it learnt unless "
            f"{options.data} really is in {options.encoding}"), stacklevel=2)
    return spec, est, options, output


def _encoding_name(encoding: str) -> str:
    """The codec's canonical name (``latin-1``, ``ISO-8859-1`` → ``iso8859-1``), or ``encoding``
    itself when Python does not know it (the reader reports that)."""
    import codecs

    try:
        return codecs.lookup(encoding).name
    except LookupError:
        return encoding


def cmd_evaluate(args: argparse.Namespace) -> int:
    spec, est, options, output = load_model(args)
    data = _read(spec, options.data, options)
    interruptible(_report, spec, est, data, "", output.quiet)
    return 0


def _status_stream(out: str):
    """Where status lines go when ``out`` is written: stderr when ``out`` is standard output
    (``-``, ``/dev/stdout``), so that a pipe carries only the data; else stdout."""
    from ..io.model import stdio_fd

    return sys.stderr if stdio_fd(out) == 1 else sys.stdout


def cmd_predict(args: argparse.Namespace) -> int:
    from ..io.model import shown_name

    _check_outputs(("--out", args.out))
    spec, est, options, output = load_model(args)
    streamed = hasattr(spec, "predict_stream")
    threads = vars(args).get("threads")
    if threads is not None:
        from ..solvers.plan import check_threads_value

        check_threads_value(threads)  # 1..MAX_THREADS
    if streamed:  # read, tag and write block by block
        n = _length_checked(spec, spec.predict_stream, est, options, output,
                            threads if threads is not None else os.cpu_count() or 1,
                            interruptible)
    else:
        data = _read(spec, options.data, options, labelled=False)
        predicted = interruptible(spec.predict, est, data, options, output)
        spec.write(output.out, data, predicted, options)
        n = len(data)
    if not output.quiet:
        print(f"wrote {shown_name(output.out)} ({n:,} sentences)",
              file=_status_stream(output.out), flush=True)
    return 0


@contextmanager
def _scipy_hidden() -> Iterator[None]:
    """SciPy unimportable inside the block (a ``None`` in ``sys.modules``: ImportError), and
    as it was after. numba imports it at its own import only to check its version, and at its
    compiler's set-up only so that kernels it compiles may call BLAS (np.dot & co.), which no
    kernel of this package does; that set-up took 0.33 s with SciPy 1.17 and 0.17 s without,
    in every process that did it (benchmarks/README.md, "numba without SciPy"). Only for the
    process of the command itself (:data:`_OWN_PROCESS`), never for a caller of :func:`main`,
    whose own kernels may want BLAS; SciPy stays importable afterwards."""
    if not _OWN_PROCESS or "scipy.linalg" in sys.modules:  # nothing to save
        yield
        return
    name = "scipy.linalg" if "scipy" in sys.modules else "scipy"
    sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get(name, 0) is None:
            del sys.modules[name]


def cmd_evaluate_snapshots(args: argparse.Namespace) -> int:
    from ..io.model import atomic_write
    from ..io.snapshots import list_snapshots, load_snapshot, read_work
    from ..solvers.cccp import latent_objective
    from ..solvers.common import primal_objective

    _check_outputs(("--out", args.out))
    snaps = list_snapshots(args.snapshot_dir)
    spec, est, options, _ = load_model(args, os.path.join(args.snapshot_dir, "base.npz"))
    train = _read(spec, options.train, options)
    test = _read(spec, options.test, options) if options.test else train
    task = est.training_task(*spec.xy(train))
    work = read_work(args.snapshot_dir)  # (updates, inferences) per snapshot, if counted
    rows = ["seconds,primal,dual,metric,updates,inferences"]
    config = est.solver_config()
    dim = est.coef_.shape[0]
    for seconds, path in snaps:
        est.coef_ = load_snapshot(path, dim)
        if getattr(task, "partial", False):  # (a CCCP run's objective: the latent one)
            primal = latent_objective(task, est.coef_, config.C, config.loss)[0]
        else:
            primal, _ = primal_objective(task, est.coef_, config.C, loss=config.loss)
        metric = est.score(*spec.xy(test))
        u, i = work.get(f"{seconds:.3f}", ("", ""))
        rows.append(f"{seconds:.3f},{primal:.10g},,{metric:.6f},{u},{i}")
        if not args.quiet:
            print(f"{seconds:9.2f}s  primal {primal:.6g}  metric {100 * metric:.2f}%",
                  file=_status_stream(args.out), flush=True)
    atomic_write(args.out, lambda f: f.write("\n".join(rows) + "\n"), mode="w")
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    """``dump``: the model's weights, largest |weight| first (:meth:`weight_lines` of its
    estimator: feature, label, weight for the sequence tasks; by index for the others)."""
    from ..api import load_estimator
    from ..io.model import atomic_write

    if not args.all and args.top < 1:
        raise OptionError(f"--top must be >= 1, got {args.top}")
    _check_outputs(("--out", args.out))
    est = load_estimator(args.model)
    lines = est.weight_lines(None if args.all else args.top)
    atomic_write(args.out or "-", lambda f: f.writelines(x + "\n" for x in lines), mode="w")
    return 0


def cmd_split(args: argparse.Namespace) -> int:
    from ..io.splits import check_fraction, split_file

    check_fraction(args.test_fraction)
    _check_out_dir("--out-dir", args.out_dir)
    for path, n in split_file(args.file, args.out_dir, args.test_fraction, args.seed,
                              args.encoding):
        if not args.quiet:
            print(f"wrote {path}: {n:,} sentences")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from ..io.model import make_dirs
    from ..io.tagged_writer import write_tagged
    from ..synthetic import generate_splits

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


def cmd_learners(args: argparse.Namespace) -> int:
    """List the learners (name, processes, objective, summary), or one learner's own options
    with their defaults (from the option table)."""
    from .. import options as T
    from ..solvers import LEARNERS, get_learner

    if args.name is None:
        for name, ln in LEARNERS.items():
            print(f"{name:11s} {ln.summary}; processes {ln.processes_text()}; objective: "
                  f"{ln.objective}")
        from ..solvers.plan import ALIASES

        names = ", ".join(f"{a} = {v[0]}" for a, v in ALIASES.items() if v[0])
        print(f"sklearn-crfsuite's names: {names} (lbfgs: --crf-method lbfgs; ap, pa: "
              "max_iterations is --max-epochs)")
        print("demidcd learners NAME: a learner's own options")
        return 0
    learner = get_learner(args.name)
    print(f"{learner.name}: {learner.summary}")
    print(f"processes: {learner.processes_text()}; objective: {learner.objective}")
    own = [o for o in T.options_for(learner.name) if o.owners and learner.name in o.owners]
    from dataclasses import fields

    from ..solvers.common import SolverConfig

    config = {f.name for f in fields(SolverConfig)}
    ignored = set() if learner.config_fields is None else config - set(learner.config_fields)
    shared = [o for o in T.options_for(learner.name)
              if not o.owners and o.group == T.LEARNER and o.name not in ignored]
    for title, opts in (("its own options", own), ("options it shares with other learners",
                                                   shared)):
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
        sys.unraisablehook = quiet_interrupt
    try:
        with warnings.catch_warnings():  # the caller's warning filters and hook come back
            warnings.simplefilter("ignore" if "--quiet" in argv else "always", InputWarning)
            warnings.simplefilter("ignore", ConvergenceWarning)  # train's stopped: line says it
            warnings.showwarning = show_warning
            code = _main(argv, debug)
        if from_command_line and any(not done.is_set() for done in RUNNING):
            # interrupted while a kernel runs in a worker thread: leave now, without waiting
            # for it or running the interpreter's shutdown around it (everything was cleaned
            # up on the way here)
            exit_now(code)
        return code
    finally:  # in-process callers (tests, notebooks) get their handlers back
        sys.unraisablehook = hook
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _main(argv: list[str], debug: bool) -> int:
    if not debug:  # until the graceful handler is installed: a KeyboardInterrupt in an import
        # may surface as another exception (numpy: ImportError) or vanish (a weakref callback)
        signal.signal(signal.SIGINT, early_exit)
        signal.signal(signal.SIGTERM, early_exit)
    try:
        helps = any(a in ("-h", "--help", "--help-all") for a in argv)
        args = build_parser(show_all="--help-all" in argv, helps=helps).parse_args(argv)
        debug = getattr(args, "debug", False)
        from ..primitives.shm import sweep_once

        sweep_once()  # every command removes the segments a killed run left (cheap: a listdir)
        if args.command in _HEAVY:  # load numpy, numba and the kernels' modules now
            _load_heavy(args.command)
        # Ctrl-C / SIGINT stops gracefully and saves the partial model, even when the shell
        # that started us in the background set SIGINT to "ignore" (Python then keeps it
        # ignored); SIGTERM behaves the same way.
        from ..solvers.common import StopRequest

        StopRequest.requested = StopRequest.active = False
        KEPT.clear()
        signal.signal(signal.SIGINT, interrupt)
        signal.signal(signal.SIGTERM, interrupt)
        if _OWN_PROCESS and args.command in _HEAVY:
            stop_with_parent()
        return COMMANDS[args.command](args)
    except DemidcdError as e:
        if debug:
            raise
        print(f"demidcd: error: {e.cli_text()}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        if debug:
            raise
        print("demidcd: interrupted" + "".join(f"; {k}" for k in KEPT), file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of --out - went away (e.g. `| head`): stop quietly
        silence_stdout()
        return 141  # 128 + SIGPIPE, as a process killed by it
    except MemoryError as e:
        if debug:
            raise
        print(f"demidcd: error: out of memory{f' ({e})' if str(e) else ''}: the run needs more "
              "memory than this process may have (a limit such as ulimit -v, or the machine's)",
              file=sys.stderr)
        return 2
    except OSError as e:
        if "libllvmlite" in str(e) and not debug:  # numba's compiler, under a memory limit
            print(f"demidcd: error: {LLVMLITE}", file=sys.stderr)
            return 2
        if debug or e.errno not in ENVIRONMENT_ERRNOS:
            if debug:
                raise
            print(f"demidcd: error: {type(e).__name__}: {e} (run with --debug for the "
                  "traceback)", file=sys.stderr)
            return 1
        if _OWN_PROCESS:  # what is buffered for standard output would be written again
            silence_stdout()
        where = f"{e.filename}: " if e.filename else ""
        print(f"demidcd: error: {where}{e.strerror or e} (a limit of this process or a full "
              "disk; nothing half-written is left)", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - one line unless --debug
        if stop_requested() and not debug:  # a signal that surfaced inside a kernel call
            print("demidcd: interrupted", file=sys.stderr)
            return 130
        if debug:
            raise
        print(f"demidcd: error: {type(e).__name__}: {e} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1


_HEAVY = ("train", "predict", "evaluate", "evaluate-snapshots", "dump")
_KERNELS = ("train", "predict", "evaluate", "evaluate-snapshots")  # those that call kernels


def _load_heavy(command: str) -> None:
    """Import numpy and numba and :mod:`demidcd.api` (whose estimators load on first use),
    and for a command that calls kernels set numba's compiler up now (its first kernel call
    would), both with SciPy hidden (:func:`_scipy_hidden`), in the command's own process:
    before ``train`` forks its set-up child, whose parts and learners then inherit it.
    numba's compiler library (llvmlite) that cannot be loaded, as under a small address-space
    limit (``prlimit --as``, ``ulimit -v``), is one line saying so."""
    try:
        with _scipy_hidden():
            from numba.core.registry import cpu_target

            from .. import api  # noqa: F401

            if _OWN_PROCESS and command in _KERNELS:
                cpu_target.typing_context.refresh()
                cpu_target.target_context.refresh()
    except OSError as e:
        if "llvmlite" not in str(e):
            raise
        raise DemidcdError(LLVMLITE) from None


LLVMLITE = ("cannot load numba's compiler library (libllvmlite.so): under a memory limit "
            "(ulimit -v, prlimit --as) give the process at least 1 GiB of address space")
_OWN_PROCESS = False  # main() runs as the process's entry point (python -m demidcd, demidcd)
