"""Errors a user can cause: each prints as one line and exits with status 2 from the CLI."""

from __future__ import annotations

import re


class DemidcdError(Exception):
    """A clean, user-facing error (bad input file, bad option, bad model file)."""

    exit_code = 2

    def cli_text(self) -> str:
        """The message as the command line prints it (see :class:`OptionError`)."""
        return str(self)


class InputError(DemidcdError):
    """Malformed input data: the message names the file and the 1-based line."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line = str(path), line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class PartialLabelError(DemidcdError):
    """Partially labelled training data whose sentence ``sentence`` (0-based) admits no
    tagging consistent with its label cells under the label scheme, first failing at token
    ``token`` (0-based); the command line names the file and line instead
    (:func:`demidcd.tasks.chain.partial`)."""

    def __init__(self, sentence: int, token: int, message: str):
        self.sentence, self.token, self.message = sentence, token, message
        super().__init__(f"sentence {sentence + 1}, token {token + 1}: {message}")


class SentenceTooLong(InputError):
    """A sentence of ``n`` tokens (starting on ``line``) longer than ``--max-sentence-length``
    ``limit``; ``why`` (the task's inference cost) is added to the message."""

    def __init__(self, path: str, line: int | None, n: int, limit: int, why: str = ""):
        self.n, self.limit, self.why = n, limit, why
        super().__init__(path, line, f"sentence of {n:,} tokens is longer than "
                                     f"--max-sentence-length {limit:,}"
                                     + (f" ({why})" if why else ""))


class InputWarning(UserWarning):
    """Input that is read but probably not as meant (e.g. UTF-8 text read as latin-1); the CLI
    prints it as one ``demidcd: warning: …`` line on stderr."""


class ConvergenceWarning(UserWarning):
    """``fit`` stopped before its tolerance test passed, for a reason other than its time limit
    or a signal: at ``max_epochs`` (as scikit-learn's ``ConvergenceWarning`` at ``max_iter``).
    The model is usable; the message says how far it was and what to raise. The command line
    does not show it: its ``stopped:`` line says the same."""


class CompileWarning(UserWarning):
    """``fit`` compiles numba kernels (a fresh install, or a learner used for the first time):
    set-up of tens of seconds before training starts, outside its ``time_limit``. Given only
    where ``fit`` logs nowhere else (no ``log``, ``verbose`` 0), once per compiling fit."""


class ModelFileError(DemidcdError):
    """A model file that is truncated, corrupt, of another format version or another task."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")


FLAG_PARAMETERS: dict[str, str] = {
    "max-active-per-example": "max_active", "lambda": "lam",
    "perceptron-epochs": "perceptron_epochs_per_round", "ilp-solver": "solver"}
"""Command-line flags (without ``--``) whose Python parameter is not the flag with ``-`` → ``_``."""

_FLAG = re.compile(r"(?<![\w'\"-])--([A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)")


def parameter_name(flag: str) -> str:
    """The estimator or reader parameter of a command-line flag: ``--max-epochs`` →
    ``max_epochs``, ``--lambda`` → ``lam`` (:data:`FLAG_PARAMETERS`)."""
    name = flag[2:] if flag.startswith("--") else flag
    return FLAG_PARAMETERS.get(name, name.replace("-", "_"))


class OptionError(DemidcdError, ValueError):
    """A bad option or argument value: a ``ValueError``.

    Raised with the message in command-line terms (``"--C must be a finite number > 0, got
    -1.0"``), the one vocabulary of the raise sites. ``str()`` speaks the library's: every flag
    outside quotes becomes its parameter name (``"C must be a finite number > 0, got -1.0"``,
    :func:`parameter_name`); :meth:`cli_text`, which the CLI prints, keeps the flags."""

    def __str__(self) -> str:
        return _FLAG.sub(lambda m: parameter_name(m.group(1)), self.cli_text())

    def cli_text(self) -> str:
        return super().__str__()


class InputTypeError(DemidcdError, TypeError):
    """Data of the wrong shape for an estimator, e.g. a string where a token list is expected."""


class InputValueError(DemidcdError, ValueError):
    """Data of the right shape with a value an estimator refuses, e.g. a feature dict's real
    value that is not finite or too large (the message names the sentence, token and
    feature)."""


class NotFittedError(DemidcdError, ValueError, AttributeError):
    """An estimator used before ``fit`` (the same bases as scikit-learn's ``NotFittedError``;
    :func:`not_fitted` returns an instance of a subclass of both when scikit-learn is
    installed)."""


_SK_NOT_FITTED: list[type] = []


def not_fitted(message: str) -> NotFittedError:
    """A :class:`NotFittedError`, also a ``sklearn.exceptions.NotFittedError`` when
    scikit-learn is installed (imported only here, on the error path: it takes seconds)."""
    import importlib.util

    if not _SK_NOT_FITTED:
        cls: type = NotFittedError
        if importlib.util.find_spec("sklearn") is not None:
            try:
                from sklearn.exceptions import NotFittedError as SkNotFitted

                cls = type("NotFittedError", (NotFittedError, SkNotFitted),
                           {"__module__": __name__, "__doc__": NotFittedError.__doc__})
            except ImportError:  # a broken install: our own class is still a ValueError
                pass
        _SK_NOT_FITTED.append(cls)
    return _SK_NOT_FITTED[0](message)


class WorkerError(DemidcdError):
    """An inference worker or learner process failed past its restarts (the message is one
    line; ``details`` has the traceback)."""

    exit_code = 1

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details
