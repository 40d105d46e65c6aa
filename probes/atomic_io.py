"""The one atomic write of `probes`: a file or a folder appears whole under its name, or not at all.

Everything is written under a temporary name in the same folder, ``.NAME.tmp-HOST-PID-N`` (HOST: 8 hex digits
of the host name's sha256, PID: the writing process, N: a per-process counter), then renamed into place with
``os.replace`` (atomic on one file system). On failure the temporary is removed, and an ``OSError`` (disk full,
quota exceeded, permission denied, read-only file system) becomes one :class:`~probes.errors.WriteError` naming
the final path. :data:`TEMP_PATTERN` / :func:`is_temporary` / :func:`parse_temporary` are the one place that
knows these names (for whoever removes the temporaries a killed run left behind).

Base layer: imports only :mod:`probes.errors` and the standard library.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import os
import re
import shutil
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from probes.errors import ProbesError, WriteError

__all__ = ["TEMP_PATTERN", "TempName", "temporary_path", "is_temporary", "parse_temporary", "host_tag",
           "atomic_file", "atomic_open", "atomic_folder", "write_bytes_atomic", "write_text_atomic",
           "write_json_atomic"]

#: ``.NAME.tmp-HOST-PID-N``: the temporary name of every file or folder being written.
TEMP_PATTERN = re.compile(r"^\.(?P<target>.+)\.tmp-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-(?P<n>\d+)$")
#: Errors of the body of :func:`atomic_folder` that are the disk's or the folder's fault (become WriteError).
_DISK_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
_COUNTER = itertools.count()


@dataclass(frozen=True)
class TempName:
    """What a temporary name says: the final name, the writer's host tag and process id."""
    target: str
    host: str
    pid: int


def host_tag() -> str:
    """This host's tag in temporary names: 8 hex digits of the sha256 of the host name."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def temporary_path(path: str | os.PathLike[str]) -> Path:
    """A fresh temporary name beside ``path`` (``.NAME.tmp-HOST-PID-N``); nothing is created."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{host_tag()}-{os.getpid()}-{next(_COUNTER)}")


def parse_temporary(name: str) -> TempName | None:
    """The parts of a temporary name made here; None for any other name."""
    match = TEMP_PATTERN.match(name)
    if match is None:
        return None
    return TempName(match["target"], match["host"], int(match["pid"]))


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary name made here (a file or folder being written, or left by a killed run)."""
    return TEMP_PATTERN.match(name) is not None


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` to write (the block writes it); renamed to ``path`` when the block ends
    without error. The folder is made if missing.

    Raises:
        WriteError: any ``OSError`` of the block or the rename, naming ``path``; nothing is left under either name.
    """
    path = Path(path)
    tmp = temporary_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, path)
    except WriteError:
        _remove(tmp)
        raise
    except OSError as exc:
        _remove(tmp)
        raise WriteError.from_oserror(exc, path) from exc
    except BaseException:
        _remove(tmp)
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", *, fsync: bool = False,
                **kwargs: Any) -> Iterator[IO[Any]]:
    """``open(path, mode, **kwargs)`` on a temporary name, renamed to ``path`` once closed (see :func:`atomic_file`);
    text defaults to UTF-8. ``fsync``: flush to the disk before the rename."""
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    with atomic_file(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes, *, fsync: bool = False) -> Path:
    """Write ``data`` to ``path`` whole or not at all; ``path``."""
    with atomic_open(path, "wb", fsync=fsync) as handle:
        handle.write(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8",
                      fsync: bool = False) -> Path:
    """Write ``text`` to ``path`` whole or not at all (no newline translation); ``path``."""
    with atomic_open(path, "w", fsync=fsync, encoding=encoding, newline="") as handle:
        handle.write(text)
    return Path(path)


def write_json_atomic(path: str | os.PathLike[str], value: Any, *, fsync: bool = False, **dumps_kwargs: Any) -> Path:
    """Write ``json.dumps(value, **dumps_kwargs)`` and a newline to ``path`` whole or not at all; ``path``."""
    return write_text_atomic(path, json.dumps(value, **dumps_kwargs) + "\n", fsync=fsync)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike[str], *, replace: bool = False,
                  keep_existing: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """A fresh temporary folder beside ``path`` to fill; renamed to ``path`` when the block ends without error,
    removed otherwise. The parent folder is made if missing.

    Args:
        replace: remove a folder already at ``path`` before the rename (else the rename fails on a non-empty one).
        keep_existing: when the rename fails, called with ``path``: True keeps what is there (another process
            wrote it first) and drops this one's.

    Raises:
        WriteError: making, filling (disk full, quota, permission denied, read-only) or renaming the folder failed,
            naming ``path``; nothing is left under the temporary name.
    """
    path = Path(path)
    tmp = temporary_path(path)
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
        except OSError as exc:
            raise WriteError.from_oserror(exc, path) from exc
        try:
            yield tmp
        except OSError as exc:
            if isinstance(exc, ProbesError) or exc.errno not in _DISK_ERRORS:
                raise
            raise WriteError.from_oserror(exc, path) from exc
        try:
            if replace and (path.exists() or path.is_symlink()):
                _remove(path)
            os.replace(tmp, path)
        except OSError as exc:
            if keep_existing is None or not keep_existing(path):
                raise WriteError.from_oserror(exc, path) from exc
    finally:
        _remove(tmp)
