"""Reading ``.npy`` arrays and ``.npz`` archives that come from outside: every size checked before allocation.

numpy's own readers trust a file's header: a ``.npy`` header that claims ``(10**11,)`` float64 has numpy allocate
800 GB before the first byte of data is read, and a compressed ``.npz`` entry of 1.8 MB inflates to the 1.5 GB
it holds before its dtype is looked at. Here the header is read first (its length bounded), its dtype checked
(plain numbers, text, dates: never Python objects, so never a pickle), and its shape x itemsize compared with the
bytes the file or the zip entry holds; an entry's inflated size is held, before it is inflated, to what the
archive's own size and :data:`MAX_INFLATED_BYTES` allow, and the inflating stops at the size the entry declares.
Every fault is an :class:`~probes.errors.InputError` naming the file, the entry and what was expected and found.
"""

from __future__ import annotations

import io
import math
import os
import tokenize
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np

from probes.errors import FormatError, InputError
from probes.safe_read import regular_file

__all__ = ["MAX_HEADER_BYTES", "MAX_INFLATED_BYTES", "ArrayFileError", "NpyHeader", "read_npy_header",
           "npy_file_header", "NpzArchive"]

#: The longest ``.npy`` header read (numpy's own bound; a real header is about 128 bytes).
MAX_HEADER_BYTES = 10_000
#: How many bytes more than its own size the arrays read from one ``.npz`` archive may take: what compression
#: may add (probes writes its archives uncompressed, so for them this is never used).
MAX_INFLATED_BYTES = 256 << 20
#: The most axes of an array (numpy's own limit).
_MAX_AXES = 64
#: dtype kinds read: bools, integers, floats, complex, dates and durations, text, bytes, plain records.
_KINDS = "biufcmMUSV"
_CHUNK = 1 << 20
_MAGIC = b"\x93NUMPY"
#: What zipfile raises on a damaged, encrypted or oddly compressed archive.
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, RuntimeError,
               NotImplementedError, OverflowError)


class ArrayFileError(FormatError):
    """A ``.npy`` array or ``.npz`` entry that is not what it must be; ``expected`` and ``found`` as the message
    says them (a store lists them as a damaged file)."""

    def __init__(self, what: str, expected: str, found: str, *, path: str | os.PathLike[str] | None) -> None:
        super().__init__(f"{what}: expected {expected}, found {found}", path=path)
        self.expected, self.found = expected, found


@dataclass(frozen=True)
class NpyHeader:
    """A checked ``.npy`` header: the array's shape, order and dtype, and the bytes before its data."""

    shape: tuple[int, ...]
    fortran_order: bool
    dtype: np.dtype[Any]
    offset: int

    @property
    def count(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """The bytes of data the header announces."""
        return self.count * self.dtype.itemsize


def read_npy_header(handle: IO[bytes], *, size: int | None, what: str, path: str | os.PathLike[str] | None = None
                    ) -> NpyHeader:
    """The header of the ``.npy`` stream ``handle`` (``size`` bytes in all), read from its start.

    Refused with an :class:`ArrayFileError` (naming ``path`` and ``what``) unless the header is at most
    :data:`MAX_HEADER_BYTES` long, its dtype is plain (no Python objects) and its shape x itemsize is exactly the
    number of bytes that follow it (``size`` None: the caller compares them): nothing of the size the header
    claims is allocated before this check.
    """
    def fail(expected: str, found: str) -> InputError:
        return ArrayFileError(what, expected, found, path=path)

    prefix = handle.read(len(_MAGIC) + 2)
    if len(prefix) < len(_MAGIC) + 2 or not prefix.startswith(_MAGIC):
        raise fail("a .npy array (it starts with \\x93NUMPY)", "other bytes")
    version = (prefix[-2], prefix[-1])
    if version not in ((1, 0), (2, 0)):
        raise fail(".npy format version 1.0 or 2.0", f"version {version[0]}.{version[1]}")
    width = 2 if version == (1, 0) else 4
    length_bytes = handle.read(width)
    length = int.from_bytes(length_bytes, "little")
    if len(length_bytes) < width or length > MAX_HEADER_BYTES:
        raise fail(f"a .npy header of at most {MAX_HEADER_BYTES:,} bytes", f"one of {length:,} bytes")
    header = handle.read(length)
    if len(header) < length:
        raise fail(f"a .npy header of {length:,} bytes", f"the file ending after {len(header):,}")
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    try:
        shape, fortran_order, dtype = read(io.BytesIO(length_bytes + header), max_header_size=MAX_HEADER_BYTES)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError, OverflowError, KeyError, IndexError,
            tokenize.TokenError) as exc:  # numpy's header parser: literal_eval, then its Python 2 token filter
        raise fail("a .npy header", f"an unreadable one ({_reason(exc)})") from None
    result = NpyHeader(tuple(shape), bool(fortran_order), np.dtype(dtype), len(prefix) + width + length)
    _check_header(result, size, fail)
    return result


def _check_header(header: NpyHeader, size: int | None, fail: Any) -> None:
    """Refuse a dtype that is not plain, a shape that is not one, or data of another size than the file's."""
    dtype, shape = header.dtype, header.shape
    if dtype.hasobject:
        raise fail("an array of numbers or text", "an array of Python objects (they would need pickle, which is "
                                                  "never loaded)")
    if dtype.kind not in _KINDS or dtype.subdtype is not None or (dtype.itemsize == 0 and header.count):
        raise fail("an array of numbers, text or plain records", f"dtype {dtype}")
    if len(shape) > _MAX_AXES or any(n < 0 for n in shape):
        raise fail(f"a shape of at most {_MAX_AXES} sizes >= 0", f"{shape}")
    left = None if size is None else size - header.offset
    if left is not None and header.nbytes != left:
        raise fail(f"{header.nbytes:,} bytes of data (shape {shape} of {dtype}, as its header says)",
                   f"{max(left, 0):,} bytes")


def npy_file_header(path: str | os.PathLike[str], *, what: str = ".npy file", exact: bool = True) -> NpyHeader:
    """The checked header (:func:`read_npy_header`) of the regular ``.npy`` file ``path`` (``exact`` False: its
    data's size is not compared with the file's; the caller does)."""
    file = regular_file(path, what=what)
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            return read_npy_header(handle, size=size if exact else None, what=what, path=file)
    except OSError as exc:
        raise ArrayFileError(what, "a file that can be read", _reason(exc), path=file) from None


def _read_data(handle: IO[bytes], header: NpyHeader, fail: Any) -> np.ndarray:
    """The array whose checked ``header`` was just read from ``handle``, read in chunks into its own memory."""
    flat = np.empty(header.count, dtype=header.dtype)
    buffer = flat.view(np.uint8)
    filled = 0
    while filled < header.nbytes:
        chunk = handle.read(min(_CHUNK, header.nbytes - filled))
        if not chunk:
            raise fail(f"{header.nbytes:,} bytes of data", f"the entry ending after {filled:,}")
        buffer[filled:filled + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        filled += len(chunk)
    if header.fortran_order:
        return flat.reshape(header.shape[::-1]).transpose()
    return flat.reshape(header.shape)


class NpzArchive:
    """The arrays of an ``.npz`` archive (a zip of ``NAME.npy`` entries, as :func:`numpy.savez` writes), read one
    at a time and checked before anything is allocated (see the module docstring).

    Entries may be stored or deflated. The arrays read from one archive may take at most its own size plus
    ``limit`` bytes in all (an entry read twice counts twice), so neither one entry that inflates past it nor
    many entries that point at the same bytes can grow memory beyond what the file holds.

    Use as a context manager; ``files`` are the array names, ``archive[name]`` reads one.
    """

    def __init__(self, path: str | os.PathLike[str], *, what: str = "arrays file",
                 limit: int = MAX_INFLATED_BYTES) -> None:
        self.path = Path(path)
        self.what = what
        self.limit = limit
        file = regular_file(self.path, what=what)
        try:
            size = file.stat().st_size
            self._zip = zipfile.ZipFile(file)
        except _ZIP_ERRORS as exc:
            raise InputError(f"{what}: expected an .npz archive (a zip file), found one that cannot be read: "
                             f"{_reason(exc)}", path=self.path) from None
        self._budget = size + limit
        self._entries = {info.filename.removesuffix(".npy"): info for info in self._zip.infolist()}

    @property
    def files(self) -> list[str]:
        """The names of the archive's arrays."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __getitem__(self, name: str) -> np.ndarray:
        """The array ``name``: its header checked, its inflated size held to the archive's budget."""
        info = self._entries[name]

        def fail(expected: str, found: str) -> InputError:
            return ArrayFileError(f"{self.what}: entry {info.filename!r}", expected, found, path=self.path)

        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise fail("a stored or deflated entry", f"compression method {info.compress_type}")
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise fail(f"a stored entry of {info.compress_size:,} bytes", f"one that says {info.file_size:,}")
        if info.file_size > self._budget:
            raise fail(f"arrays of at most {self._budget:,} bytes in all (the archive's own size plus "
                       f"{self.limit:,}: what compression may add)", f"an entry of {info.file_size:,} bytes "
                       "once inflated; it was not inflated")
        self._budget -= info.file_size
        try:
            with self._zip.open(info) as handle:
                header = read_npy_header(handle, size=info.file_size, what=f"{self.what}: entry {info.filename!r}",
                                         path=self.path)
                return _read_data(handle, header, fail)
        except InputError:
            raise
        except _ZIP_ERRORS as exc:  # a damaged deflate stream, a CRC that does not match ...
            raise fail("an entry that can be read", f"one that cannot: {_reason(exc)}") from None

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> NpzArchive:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
                 ) -> None:
        self.close()


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."
