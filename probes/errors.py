"""The one exception hierarchy of `probes`.

Every error caused by the user's input subclasses both :class:`ProbesError` and
:class:`ValueError` (scikit-learn's double-base trick), so ``except ValueError``
keeps working. Errors about a place in a file start with ``path:line:`` so that
editors and ``grep`` can jump to them.
"""

from __future__ import annotations

import errno
from os import PathLike

__all__ = [
    "ProbesError",
    "InputError",
    "FormatError",
    "AnnotationError",
    "AlignmentError",
    "ModelOutputError",
    "ConfigError",
    "StoreError",
    "DistributedError",
    "OutOfMemoryError",
    "DamagedStoreError",
    "FolderLockedError",
    "WriteError",
    "ProbesWarning",
    "SkippedItemWarning",
    "located",
]


def located(path: str | PathLike[str] | None, line: int | None, message: str) -> str:
    """Format ``message`` in compiler style: ``path:line: message``."""
    if path is None:
        return message
    if line is None:
        return f"{path}: {message}"
    return f"{path}:{line}: {message}"


class ProbesError(Exception):
    """Base class of every error raised on purpose by `probes`."""


class InputError(ProbesError, ValueError):
    """The input (a file, an argument, a value) is at fault.

    Attributes:
        path: the file the problem is in, if any.
        line: the 1-based line of the problem, if known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | PathLike[str] | None = None,
        line: int | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.reason = message
        super().__init__(located(self.path, line, message))


class FormatError(InputError):
    """A file is malformed: wrong column count, non-integer id, bad encoding, empty file."""


class AnnotationError(InputError):
    """A file is well formed but its annotation is invalid: a head out of range, a cycle,
    no root or two roots, an unclosed coreference bracket, a link to an unknown entity."""


class AlignmentError(InputError):
    """A word could not be aligned to the model's tokens (it maps to no token)."""


class ModelOutputError(ProbesError, RuntimeError):
    """The model did not give what `probes` needs (e.g. no attention weights)."""


class ConfigError(InputError):
    """A bad option value or configuration file entry."""


class StoreError(InputError):
    """An attention store on disk is missing, incomplete or inconsistent."""


class DistributedError(ProbesError, RuntimeError):
    """A collective step of a ``torchrun`` run failed: another rank stopped, hung past the group timeout
    (:func:`probes.world.timeout`) or left the run."""


class OutOfMemoryError(ProbesError, MemoryError):
    """The model ran out of memory on an input; the message names the input, its tokens and the option
    that bounds the memory."""


class DamagedStoreError(StoreError):
    """A file of an attention store is not what ``probes extract`` recorded (wrong size or sha256)."""


class FolderLockedError(ProbesError, RuntimeError):
    """Another run holds the folder's lock file (:class:`probes.locks.FolderLock`): the second run stops."""


class WriteError(ProbesError, OSError):
    """A file could not be written (disk full, permission denied, read-only file system).

    Attributes:
        path: the file or folder that could not be written.
    """

    def __init__(self, message: str, *, path: str | PathLike[str] | None = None) -> None:
        self.path = None if path is None else str(path)
        self.reason = message
        super().__init__(located(self.path, None, message))

    @classmethod
    def from_oserror(cls, exc: OSError, path: str | PathLike[str]) -> WriteError:
        """One line for ``exc`` raised while writing ``path``: why it failed and what to do (errno kept)."""
        hints = {"ENOSPC": "the disk is full: free space or write elsewhere",
                 "EDQUOT": "the disk quota is exceeded: free space or write elsewhere",
                 "EACCES": "permission denied: choose a folder you can write to",
                 "EPERM": "permission denied: choose a folder you can write to",
                 "EROFS": "the file system is read-only: choose a writable folder"}
        code = errno.errorcode.get(exc.errno or 0, "")
        error = cls(f"cannot write ({hints.get(code, exc.strerror or str(exc))})", path=path)
        error.errno = exc.errno
        return error


class ProbesWarning(UserWarning):
    """Base class of the warnings `probes` emits."""


class SkippedItemWarning(ProbesWarning):
    """Something was skipped on request (``on_error="skip"``, over-long inputs); counted in results."""
