"""Errors a user can cause: each prints as one line and exits with status 2 from the CLI."""

from __future__ import annotations


class DemidcdError(Exception):
    """A clean, user-facing error (bad input file, bad option, bad model file)."""

    exit_code = 2


class InputError(DemidcdError):
    """Malformed input data: the message names the file and the 1-based line."""

    def __init__(self, path: str, line: int | None, message: str):
        self.path, self.line = str(path), line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


class ModelFileError(DemidcdError):
    """A model file that is truncated, corrupt, of another format version or another task."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}")


class OptionError(DemidcdError):
    """A bad command-line option or estimator argument."""
