"""The task registry: the one place the CLI and the API learn which tasks exist.

A task is **one module plus one registration line** (at the bottom of this file)::

    register("dependency", "demidcd.tasks.dependency.spec:SPEC")

The module defines ``SPEC``, an instance of a :class:`TaskSpec` subclass. Registration is lazy
(a ``"module:attribute"`` string): listing the task names (``--task`` choices) imports nothing,
and the module is imported the first time the task is used. :mod:`demidcd.cli` and ``api.py``
never test a task's name; everything task-specific comes through the spec and its estimator.

What a spec provides. Options arrive as values, frozen, parsed once by the CLI (or built by a
script): ``options`` is a :class:`~demidcd.options.DataOptions` (the data rows of the table
:mod:`demidcd.options`, a task's own ones among them, plus ``data`` and ``derived``),
``output`` an :class:`~demidcd.options.OutputOptions`. A spec never writes to them: what it
derives from a loaded model it returns, as a new object, from ``configure``.

================================  ============================================================
``name``, ``help``                the ``--task`` choice and its one-line help
``max_sentence_length``,          the ``--max-sentence-length`` default and what inference on a
``length_cost``                   long sentence costs (said when a longer one is refused)
``estimator``                     ``"module:Class"`` of the estimator (contract below)
``read(path, options, labelled)``  reader → a data object (raises ``InputError`` FILE:LINE)
``xy(data)``                      → ``(X, Y)`` as the estimator's ``fit`` / ``metrics`` take them
``describe(data)``                ``"8,936 sentences, 211,727 tokens"`` for the log
``default_data(options, seed)``   ``(train, dev, test)`` when ``train`` has no ``--train``;
                                  the default raises ``OptionError`` (the task needs a file)
``make_estimator(options,         the estimator; ``common`` holds the learner's keyword
common)``                         arguments; what the options name (a ``--template``) is
                                  resolved here, once, and the estimator holds it
``data_options(est, options)``    JSON-able dict saved in the model (``est.data_options_``),
                                  e.g. the label column, so evaluate / predict default to it;
                                  ``est`` the estimator ``make_estimator`` built
``configure(est, options)``       after loading a model for evaluate / predict: returns the
                                  options with the model's ``data_options_`` as defaults (and
                                  ``derived`` filled); sets the options that change inference
                                  on ``est`` (e.g. ``--ilp-solver``, ``--decoder``)
``check_options(est, options,     refuse options of other tasks (one line, before any data)
output)``
``label_counts(data)``            tokens per gold label (None: no label set), for train's
                                  early warnings (a single label; dev labels unknown to train)
``check(est, data)``              warning lines before evaluating (e.g. labels the model lacks)
``report(est, data, prefix)``     the lines ``evaluate`` (and ``train`` for dev/test) prints
``predict(est, data, options,     what ``predict`` writes for ``data``
output)``
``write(path, data, predicted,    predict's writer (atomic; the input's encoding)
options)``
================================  ============================================================

A spec may also define ``predict_stream(est, options, output, threads, run)``: ``predict`` in
blocks of sentences (constant memory), ``threads`` blocks at once; it returns the number of
sentences written to ``output.out``.

Only ``name``, ``estimator``, ``read``, ``xy``, ``describe``, ``report`` and ``write`` have no
useful default.

The estimator contract (subclass :class:`demidcd.api.StructuredEstimator`): ``task_name`` (the
registered name, written into the model file), ``score_name`` (what the headline ``score`` is:
``"accuracy"``, ``"chunk F1"``, ``"UAS"``, …), ``fit(X, Y, X_dev=None, Y_dev=None)``,
``predict(X)``, ``metrics(X, Y) -> dict`` (key ``"score"`` = the headline, higher is better),
``score(X, Y) -> float``, ``feature_summary() -> str`` (the log's features line),
``training_task(X, Y)`` (the bound :class:`~demidcd.tasks.base.Task`, for objectives),
``save(path)`` and the classmethod ``load(path)``. :func:`demidcd.api.load_estimator` finds the
class through this registry from the model file's ``task`` entry.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import OptionError
from ..options import DATA, LEARNER, OPTIONS

__all__ = ["TaskSpec", "TASKS", "register", "get_task", "task_names"]


class TaskSpec:
    """Everything the CLI and API need to know about one task (see the module docstring)."""

    name: str = ""
    help: str = ""
    estimator: str = ""  # "module:Class"
    # --max-sentence-length default: longer sentences are refused when read, before any work,
    # with ``length_cost`` (what inference on a long sentence costs) in the message and --help
    max_sentence_length: int = 5000
    length_cost: str = ""

    # -- estimator ------------------------------------------------------------------------
    def estimator_class(self) -> type:
        """The estimator class named by :attr:`estimator` (imported on first use)."""
        return _resolve(self.estimator)

    def make_estimator(self, options: Any, common: dict[str, Any]) -> Any:
        """The estimator for ``train``, built from the learner options ``common``."""
        return self.estimator_class()(**common)

    def data_options(self, est: Any, options: Any) -> dict[str, Any]:
        """What a model remembers about its training data (JSON-able), e.g. the label column;
        ``est``: the estimator of :meth:`make_estimator` (what it resolved, e.g. a
        template)."""
        return {}

    def configure(self, est: Any, options: Any) -> Any:
        """The data options for a loaded model's evaluate / predict: ``options`` with the
        model's remembered data options as defaults (a new object); inference options are set
        on ``est``."""
        return options

    # -- data -------------------------------------------------------------------------------
    def read(self, path: str, options: Any, labelled: bool = True) -> Any:
        raise NotImplementedError

    def xy(self, data: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def describe(self, data: Any) -> str:
        return f"{len(data):,} examples"

    def default_data(self, options: Any, seed: int) -> tuple[Any, Any, Any]:
        raise OptionError(f"--task {self.name} needs --train FILE")

    def write(self, path: str, data: Any, predicted: Any, options: Any) -> None:
        raise NotImplementedError

    # -- options of some tasks only ----------------------------------------------------------
    def check_options(self, est: Any, options: Any, output: Any) -> None:
        """Refuse, with one line before the data is read, every option given in ``options`` or
        ``output`` that this task does not read: the data and output options of the table
        :mod:`demidcd.options` owned by other tasks (``--template`` for dependency, ``--nbest``
        for entity-relation …), which would be ignored without a word. Given: neither None nor
        False, as the CLI leaves an option that is not on the command line; a value equal to
        the table's default is given too (``--ilp-time-limit 2`` for sequence is refused), so
        options built by a script for this check hold None, not the defaults, where nothing
        was given. ``est``: the loaded model (evaluate / predict), None in ``train``; a spec
        may check more against it."""
        for o in OPTIONS:
            if o.group == LEARNER or self.name in o.owners or not set(o.owners) & TASKS.keys():
                continue  # every task reads it, or learners own it (--save-state: the DCD ones)
            given = getattr(options if o.group == DATA else output, o.name, None)
            if given not in (None, False):  # given, even at its default: the CLI's None
                owners = list(o.owners)
                who = ", ".join(owners[:-1]) + " and " + owners[-1] if len(owners) > 1 \
                    else owners[0]
                raise OptionError(f"{o.flag} is not available for {self.name} models (only "
                                  f"for {who})")

    def predict(self, est: Any, data: Any, options: Any, output: Any) -> Any:
        """What ``predict`` writes (:meth:`write`) for ``data``: ``est.predict`` of it."""
        return est.predict(self.xy(data)[0])

    def label_counts(self, data: Any) -> dict[str, int] | None:
        """How many tokens carry each gold label in ``data`` (None: the task has no label set
        to compare, e.g. dependency heads); ``train`` warns with it before training about a
        single label and about --dev / --test labels the training data lacks."""
        return None

    # -- results ------------------------------------------------------------------------------
    def check(self, est: Any, data: Any) -> list[str]:
        """Warnings about ``data`` for this model (printed to stderr before evaluating)."""
        return []

    def report(self, est: Any, data: Any, prefix: str = "") -> list[str]:
        raise NotImplementedError


def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


TASKS: dict[str, str | TaskSpec] = {}  # name -> "module:attribute" (until first use) or the spec


def register(name: str, target: str | TaskSpec) -> None:
    """Register a task under ``name``: a :class:`TaskSpec` or its ``"module:attribute"``."""
    TASKS[name] = target


def task_names() -> tuple[str, ...]:
    """The registered task names, in registration order (the CLI's ``--task`` choices)."""
    return tuple(TASKS)


def get_task(name: str) -> TaskSpec:
    """The spec registered under ``name`` (imports its module on first use)."""
    try:
        target = TASKS[name]
    except KeyError:
        raise OptionError(f"unknown task {name!r}; choose from {', '.join(TASKS)}") from None
    if isinstance(target, str):
        target = _resolve(target)
        TASKS[name] = target
    return target


# -- the registered tasks (one line each) -------------------------------------------------
register("sequence", "demidcd.tasks.chain.spec:SPEC")
register("chunking", "demidcd.tasks.chain.spec:CHUNKING")
register("ner", "demidcd.tasks.chain.spec:NER")
register("entity-relation", "demidcd.tasks.entity_relation.spec:SPEC")
register("dependency", "demidcd.tasks.dependency.spec:SPEC")
