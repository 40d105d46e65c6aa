"""Every output file appears whole or not at all: written to a temporary name, then renamed into place.

``with atomic_path(path) as tmp:`` gives a temporary path in the same folder (``.NAME.tmp-HOST-PID-N``, made by
:mod:`probes.atomic_io`, the one implementation of the atomic write) to
write to; when the block ends the file is renamed to ``path`` (``os.replace``: atomic on one file system),
so a run stopped at any moment (Ctrl-C, ``kill -9``, a full disk) never leaves a half-written file under
its final name. On an error the temporary file is removed, and an ``OSError`` (disk full, permission
denied, read-only file system) becomes one :class:`~probes.errors.WriteError` naming the file.

Where a run's files may go is the run's own business: its :class:`~probes.reports.writer.OutputFolder`
carries its folder and checks every path it hands out (and every file added) against it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from probes import atomic_io

__all__ = ["atomic_path", "atomic_open", "write_text", "is_temporary", "remove_temporary"]

#: Temporary names of earlier versions (``.NAME.tmp-PID-N``, results' ``NAME.tmp``, locks' ``.probes.lock.*.tmp``),
#: still removed when a stopped run of such a version left them.
_LEGACY = re.compile(r"^\..+\.tmp-\d+-\d+$|^(result\.json|arrays\.npz)\.tmp$|^\.probes\.lock\..+\.tmp$")


def is_temporary(name: str) -> bool:
    """Whether ``name`` is the temporary name of a file being written (left behind by a stopped run)."""
    return atomic_io.is_temporary(name) or bool(_LEGACY.match(name))


def remove_temporary(folder: str | Path) -> list[Path]:
    """Remove the temporary files a stopped run left anywhere under ``folder``; the paths removed."""
    removed = []
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and not path.is_symlink() and is_temporary(path.name):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path next to ``path`` to write; renamed to ``path`` when the block ends without error.

    Raises:
        WriteError: the folder or the file cannot be written; nothing is left under either name.
    """
    with atomic_io.atomic_file(path) as tmp:
        yield tmp


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """``open(path, mode, **kwargs)`` on a temporary name, renamed to ``path`` once closed (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see the module); ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return Path(path)
