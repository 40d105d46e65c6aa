"""Every output file appears whole or not at all: written to a temporary name, then renamed into place.

``with atomic_path(path) as tmp:`` gives a temporary path in the same folder (``.NAME.tmp-HOST-PID-N``, made by
:mod:`probes.atomic_io`, the one implementation of the atomic write) to
write to; when the block ends the file is renamed to ``path`` (``os.replace``: atomic on one file system),
so a run stopped at any moment (Ctrl-C, ``kill -9``, a full disk) never leaves a half-written file under
its final name. On an error the temporary file is removed, and an ``OSError`` (disk full, permission
denied, read-only file system) becomes one :class:`~probes.errors.WriteError` naming the file.

While :func:`probes.reports.writer.write_output` writes a run, its folder is an *output root*
(:func:`output_root`): a file written through this module outside every active root is refused before
anything is written, whichever writer made its path.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from probes import atomic_io
from probes.errors import ConfigError

__all__ = ["atomic_path", "atomic_open", "write_text", "output_root", "is_temporary", "remove_temporary"]

_ROOTS: dict[Path, int] = {}
_ROOTS_GUARD = threading.Lock()
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
def output_root(folder: str | Path) -> Iterator[Path]:
    """While the block runs, files written through this module must lie inside ``folder`` (or another root)."""
    root = Path(folder).resolve()
    with _ROOTS_GUARD:
        _ROOTS[root] = _ROOTS.get(root, 0) + 1
    try:
        yield root
    finally:
        with _ROOTS_GUARD:
            _ROOTS[root] -= 1
            if not _ROOTS[root]:
                del _ROOTS[root]


def _check_inside(path: Path) -> None:
    """Refuse ``path`` when output roots are active and it lies in none of them (links followed)."""
    with _ROOTS_GUARD:
        roots = list(_ROOTS)
    if not roots:
        return
    resolved = path.resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        raise ConfigError(f"refusing to write {path}: it lies outside the output folder "
                          f"{' or '.join(str(r) for r in roots)}")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path next to ``path`` to write; renamed to ``path`` when the block ends without error.

    Raises:
        ConfigError: ``path`` lies outside the active output folder (see the module).
        WriteError: the folder or the file cannot be written; nothing is left under either name.
    """
    path = Path(path)
    _check_inside(path)
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
