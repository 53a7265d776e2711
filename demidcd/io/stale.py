"""What a killed process left behind, named after its pid: found and removed by a later one.

A process that is SIGKILLed (or leaves through ``os._exit``) runs no ``finally`` and no
``atexit``: the temporary file of a model it was writing (``.MODEL.<pid>.XXXX.tmp``, as big as
the model) and its private CBC directory (``demidcd-cbc-<pid>-XXXX``) stay. Their names carry
the pid of the process that made them, so a later process removes those whose process is gone
(:func:`sweep_dead`): at the next save into that directory, and at every command's start.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

CBC_DIR = re.compile(r"demidcd-cbc-(?P<pid>\d+)-")
"""The private temporary directories of the entity-relation task's CBC solves
(:mod:`demidcd.tasks.entity_relation.cbc`), in the system's temporary directory."""


def owner_alive(pid: int, made: float) -> bool:
    """Whether process ``pid`` runs and can have made a file last modified at ``made`` (a
    process started after that is another one that reused the pid)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return proc.create_time() <= made + 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return False


def sweep_dead(directory: str | os.PathLike[str], pattern: re.Pattern[str]) -> list[str]:
    """Remove the entries of ``directory`` whose name matches ``pattern`` (from its start; the
    group ``pid`` is the maker's pid) and whose maker is gone: files unlinked, directories
    removed with their contents. Never this process's own. Returns the paths removed; an
    entry that vanishes or cannot be removed meanwhile is skipped."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in entries:
        m = pattern.match(name)
        if not m or int(m["pid"]) == os.getpid():
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
            if owner_alive(int(m["pid"]), st.st_mtime):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed


def temp_name_pattern(target_name: str) -> re.Pattern[str]:
    """The temporary files :func:`~.model.atomic_write` makes beside ``target_name``:
    ``.<target_name>.<pid>.XXXX.tmp``."""
    return re.compile(re.escape(f".{target_name}.") + r"(?P<pid>\d+)\.[a-z0-9_]{8}\.tmp$")


def sweep_cbc_dirs() -> list[str]:
    """The CBC directories of dead processes in the system's temporary directory."""
    return sweep_dead(tempfile.gettempdir(), CBC_DIR)
