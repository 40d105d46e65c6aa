"""One run per folder: a lock file naming its holder, taken over when the holder has died.

``with FolderLock(folder, what="probes extract"):`` writes ``folder/.probes.lock`` (JSON: the holder's
process id, host, start time and command) and removes it on exit. A second run into the same folder
(another process, or another thread of this one) stops at once with :class:`~probes.errors.FolderLockedError`
naming the folder, the holder's pid, host and start time. A lock left by a process that is no longer
alive on this host (killed, crashed) is stale and taken over, with a warning. A lock written on another
host cannot be checked from here and is always respected (the message says how to remove it).

Checking and writing the lock file happen under a short ``flock`` on the folder itself (where the
platform has one), so two runs starting at the same instant cannot both take the lock; the lock file
itself is written to a temporary name and renamed into place, so it is never seen half-written.
Re-entering a lock this thread already holds (a command that locks its store, then calls a library
function that locks it again) nests instead of refusing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from probes.atomic_io import write_json_atomic
from probes.errors import FolderLockedError, InputError, WriteError
from probes.safe_read import inside_folder, load_json

try:  # POSIX; elsewhere the check-and-write is not guarded against an exact tie
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]  # None marks a platform without the module (checked before use)

__all__ = ["FolderLock", "LOCK_NAME", "pid_alive"]

log = logging.getLogger("probes")

#: The lock file's name inside the locked folder (writers that list a folder should ignore it).
LOCK_NAME = ".probes.lock"

#: The largest lock file read (a real one is about 200 bytes).
_MAX_LOCK_BYTES = 64 << 10

#: Locks held by this process: resolved folder -> its holder (process, thread, token) and nesting depth.
_HELD: dict[str, _Held] = {}
_HELD_GUARD = threading.Lock()


@dataclasses.dataclass
class _Held:
    pid: int
    thread: int
    token: str
    depth: int = 1

    def mine(self) -> bool:
        return self.pid == os.getpid() and self.thread == threading.get_ident()


#: Above every process id a system hands out (Linux's ``pid_max`` is at most 2^22; ``kill`` takes a C int).
_MAX_PID = 2**31 - 1


def pid_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` runs on this host (one owned by another user counts)."""
    if pid <= 0 or pid > _MAX_PID:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:  # pragma: no cover (platforms without signal 0)
        return True
    return True


@contextlib.contextmanager
def _guard(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` for the few calls that check and write its lock file."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def _read_holder(path: Path) -> dict[str, Any] | None:
    """The lock file's content (None: no lock file); an unreadable one (not JSON, a pipe, a device, huge, a link
    leading out of the folder) gives ``{}``, which is respected as a live holder."""
    try:
        inside_folder(path.parent, path.name, what="lock file")  # a link leading out is not followed
        holder = load_json(path, what="a lock file", max_bytes=_MAX_LOCK_BYTES)
    except InputError:
        return None if not (path.exists() or path.is_symlink()) else {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "by an unreadable lock file"
    what = f" ({holder['what']})" if holder.get("what") else ""
    return f"by pid {holder.get('pid')} on host {holder.get('host')} since {holder.get('since')}{what}"


class FolderLock:
    """Exclusive use of ``folder`` by one run, for the duration of a ``with`` block.

    Args:
        folder: the folder to lock; created (with its parents) if missing.
        what: the holder's command, recorded in the lock file and quoted to a second run.

    Raises:
        FolderLockedError: on entry, when another live process (or another thread of this one) holds
            the folder, or its lock file was written on another host or cannot be read.
        WriteError: the folder or its lock file cannot be written (permission, read-only, disk full).
    """

    def __init__(self, folder: str | os.PathLike[str], what: str = "probes") -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self.what = what
        self._key = ""

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock (see the class); nests when this thread already holds it."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError.from_oserror(exc, self.folder) from exc
        self._key = str(self.folder.resolve())
        with _HELD_GUARD:
            held = _HELD.get(self._key)
            if held is not None and held.mine():
                held.depth += 1
                return
        try:
            with _guard(self.folder):
                token = self._take(_read_holder(self.path))
        except OSError as exc:
            raise WriteError.from_oserror(exc, self.path) from exc
        with _HELD_GUARD:
            _HELD[self._key] = _Held(os.getpid(), threading.get_ident(), token)

    def _take(self, holder: dict[str, Any] | None) -> str:
        """Refuse a live holder; else write this process' lock file (over a stale one): its token."""
        if holder is not None:
            here = holder.get("host") == socket.gethostname()
            pid = holder.get("pid")
            if not (here and isinstance(pid, int) and not isinstance(pid, bool) and not pid_alive(pid)):
                hint = ("wait for it to finish" if here and holder else
                        f"if that run is over, remove {self.path}")
                raise FolderLockedError(f"{self.folder}: the folder is in use {_describe(holder)}; "
                                        f"{self.what} stops here ({hint})")
            log.warning("%s: taking over the lock of pid %s (no longer running) since %s",
                        self.folder, pid, holder.get("since"))
        token = uuid.uuid4().hex
        content = {"pid": os.getpid(), "host": socket.gethostname(), "what": self.what, "token": token,
                   "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
        write_json_atomic(self.path, content, sort_keys=True)
        return token

    def release(self) -> None:
        """Drop the lock (the outermost exit removes the lock file, if it is still this run's)."""
        with _HELD_GUARD:
            held = _HELD.get(self._key)
            if held is None or not held.mine():
                return
            held.depth -= 1
            if held.depth > 0:
                return
            del _HELD[self._key]
        with contextlib.suppress(OSError), _guard(self.folder):
            if (_read_holder(self.path) or {}).get("token") == held.token:
                self.path.unlink()
