"""A GGUF file's header, read with bounds: every count and length checked against the file's size first.

The ``gguf`` package's reader and transformers' own build lists as long as a header claims, so a 1.4 KB file
claiming 10^8 tensors grew memory until the process was killed. This reader checks each count and length
against the bytes the file has left before it allocates or loops (a tensor info takes at least 33 bytes, a
metadata entry 14, a string 8 ...), reads no field longer than :data:`MAX_STRING_BYTES`, keeps only the
arrays `probes` needs (the vocabulary and the merges; numeric arrays up to :data:`KEPT_ELEMENTS` values), and
refuses anything else with one :class:`GGUFError` naming the file and the field, what was expected and what
was found. The layout (llama.cpp's ``docs/gguf.md``, versions 2 and 3, little-endian)::

    'GGUF' | uint32 version | uint64 tensor_count | uint64 metadata_kv_count
    metadata_kv_count x (string key, uint32 value type, value)
    tensor_count x (string name, uint32 n_dims, uint64 dims[n_dims], uint32 ggml type, uint64 offset)
    padding to general.alignment (default 32) | tensor data

A string is a uint64 length then UTF-8 bytes; an array a uint32 element type, a uint64 count, the elements.
The ``gguf`` package is used for its table of ggml types (block sizes) only, never to read the file.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from probes.errors import ConfigError, FormatError
from probes.safe_read import regular_file

__all__ = [
    "KEPT_ELEMENTS",
    "KEPT_STRINGS",
    "MAX_ARRAY_DEPTH",
    "MAX_DIMS",
    "MAX_NAME_BYTES",
    "MAX_STRING_BYTES",
    "GGUFArray",
    "GGUFError",
    "GGUFHeader",
    "GGUFTensor",
    "ggml_types",
    "read_gguf_header",
]

#: The first bytes of every GGUF file.
MAGIC = b"GGUF"
#: The versions read: 1 counted in 32 bits (2023, before any model `probes` knows).
VERSIONS = (2, 3)
#: The longest string value read (a chat template, the longest in real files, takes some KB).
MAX_STRING_BYTES = 1 << 24
#: The longest metadata key or tensor name (the GGUF specification's limit for keys).
MAX_NAME_BYTES = (1 << 16) - 1
#: The most dimensions of a tensor (ggml's GGML_MAX_DIMS).
MAX_DIMS = 4
#: Arrays of arrays nest at most this deep.
MAX_ARRAY_DEPTH = 3
#: Numeric arrays with at most this many elements keep their values (per-layer head counts); longer ones are
#: skipped, their length checked.
KEPT_ELEMENTS = 1 << 16
#: The arrays of strings whose values are kept: the vocabulary and the merges (checked before conversion).
KEPT_STRINGS = frozenset({"tokenizer.ggml.tokens", "tokenizer.ggml.merges"})
#: ``general.alignment`` when a file does not say.
DEFAULT_ALIGNMENT = 32

_STRING, _ARRAY = 8, 9
#: Fixed-width value types: id -> (struct format, name).
_SCALARS = {0: ("B", "uint8"), 1: ("b", "int8"), 2: ("H", "uint16"), 3: ("h", "int16"), 4: ("I", "uint32"),
            5: ("i", "int32"), 6: ("f", "float32"), 7: ("?", "bool"), 10: ("Q", "uint64"), 11: ("q", "int64"),
            12: ("d", "float64")}
#: The fewest bytes a value of each type takes: what bounds a count before it is looped over.
_MIN_BYTES = {**{k: struct.calcsize(f) for k, (f, _) in _SCALARS.items()}, _STRING: 8, _ARRAY: 12}
_TYPE_NAMES = {**{k: n for k, (_, n) in _SCALARS.items()}, _STRING: "string", _ARRAY: "array"}
#: A metadata entry takes at least a key (8-byte length, one byte), a type and a one-byte value.
_MIN_ENTRY = 8 + 1 + 4 + 1
#: A tensor info takes at least a name (8-byte length, one byte), n_dims, one size, a type and an offset.
_MIN_TENSOR = 8 + 1 + 4 + 8 + 4 + 8
_HEAD = 4 + 4 + 8 + 8
_INSTALL = "pip install gguf accelerate"


class GGUFError(FormatError, ConfigError):
    """A GGUF file that is not what its format or its model says: a FormatError of the file, and a ConfigError
    of the model name that led to it (what callers of the GGUF loader caught before)."""


@dataclass(frozen=True)
class GGUFArray:
    """A metadata array: its element type, its length and, where kept, its values."""

    element_type: str
    count: int
    values: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor info: ``dims`` in ggml order (fastest first), ``offset`` from the start of the data."""

    name: str
    dims: tuple[int, ...]
    type_id: int
    type_name: str
    offset: int
    n_elements: int
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """Everything before a GGUF file's tensor data, checked against the file's size."""

    path: Path
    size: int
    version: int
    metadata: dict[str, Any]
    tensors: tuple[GGUFTensor, ...]
    data_start: int

    def text(self, key: str) -> str | None:
        """The string value of ``key`` (None when absent or not a string)."""
        value = self.metadata.get(key)
        return value if isinstance(value, str) else None


def ggml_types(path: str | Path) -> dict[int, tuple[str, int, int]]:
    """ggml type id -> (name, elements per block, bytes per block), from the ``gguf`` package's constants."""
    try:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    except ImportError:
        raise ConfigError(f"{path}: reading GGUF files needs the gguf package, which is not installed: "
                          f"{_INSTALL}") from None
    return {int(t): (t.name, *GGML_QUANT_SIZES[t]) for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}


def _show(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class _Cursor:
    """Reads a file front to back; every read is checked against the bytes left before it is made."""

    def __init__(self, handle: BinaryIO, size: int, path: Path) -> None:
        self.handle, self.size, self.path, self.pos = handle, size, path, 0

    @property
    def left(self) -> int:
        return self.size - self.pos

    def fail(self, field: str, text: str) -> GGUFError:
        return GGUFError(f"a damaged or truncated GGUF file: {field}: {text}", path=self.path)

    def take(self, n: int, field: str) -> bytes:
        if n > self.left:
            raise self.fail(field, f"needs {n:,} bytes at byte {self.pos:,}, but the file of {self.size:,} bytes "
                                   f"ends {self.left:,} bytes later")
        data = self.handle.read(n)
        if len(data) != n:  # the file shrank while it was read
            raise self.fail(field, f"expected {n:,} bytes at byte {self.pos:,}, found {len(data):,}")
        self.pos += n
        return data

    def skip(self, n: int, field: str) -> None:
        if n > self.left:
            raise self.fail(field, f"needs {n:,} bytes at byte {self.pos:,}, but the file ends "
                                   f"{self.left:,} bytes later")
        self.handle.seek(n, 1)
        self.pos += n

    def unpack(self, code: str, field: str) -> Any:
        return struct.unpack("<" + code, self.take(struct.calcsize(code), field))[0]

    def count(self, field: str, what: str, each: int) -> int:
        """A uint64 count of items of at least ``each`` bytes, refused when the rest of the file cannot hold it."""
        n = self.unpack("Q", field)
        most = self.left // each
        if n > most:
            raise self.fail(field, f"claims {n:,} {what}, but the file of {self.size:,} bytes can hold at most "
                                   f"{most:,} ({each} bytes each at least, from byte {self.pos:,})")
        return int(n)

    def string(self, field: str, limit: int = MAX_STRING_BYTES) -> str:
        n = self.unpack("Q", field)
        if n > min(limit, self.left):
            where = (f"the file ends {self.left:,} bytes later" if n > self.left
                     else f"the most read is {limit:,}")
            raise self.fail(field, f"claims a string of {n:,} bytes at byte {self.pos:,}, but {where}")
        raw = self.take(n, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(field, f"expected UTF-8 text, found byte 0x{raw[exc.start]:02x} at position "
                                   f"{exc.start} of {_show(raw)}") from None


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """The header of the GGUF file ``path``, every count and length checked before it is used.

    Raises:
        InputError: not a regular file.
        GGUFError: not a GGUF file, a version other than 2 or 3, or any field that the file's size, the
            format or the limits above rule out (named in the message).
        ConfigError: the gguf package (its table of ggml types) is not installed.
    """
    file = Path(regular_file(path, what="a GGUF file"))
    types = ggml_types(file)
    try:
        size = file.stat().st_size
        with file.open("rb", buffering=1 << 16) as handle:
            return _read(_Cursor(handle, size, file), types)
    except OSError as err:
        raise GGUFError(f"cannot read the GGUF file ({err.strerror or err})", path=file) from None


def _read(cursor: _Cursor, types: dict[int, tuple[str, int, int]]) -> GGUFHeader:
    magic = cursor.handle.read(4)
    if magic != MAGIC:
        raise GGUFError(f"not a GGUF file (expected it to start with {MAGIC!r}, found {magic!r})", path=cursor.path)
    cursor.pos = 4
    version = _version(cursor)
    tensor_count = cursor.unpack("Q", "tensor_count")
    room = max(cursor.left - 8, 0)  # after the metadata_kv_count field
    if tensor_count > room // _MIN_TENSOR:
        raise cursor.fail("tensor_count", f"claims {tensor_count:,} tensors, but the file of {cursor.size:,} bytes "
                                          f"can hold at most {room // _MIN_TENSOR:,} ({_MIN_TENSOR} bytes each at least)")
    entries = cursor.unpack("Q", "metadata_kv_count")
    most = (cursor.left - tensor_count * _MIN_TENSOR) // _MIN_ENTRY
    if entries > most:
        raise cursor.fail("metadata_kv_count", f"claims {entries:,} entries, but the file of {cursor.size:,} "
                                               f"bytes can hold at most {most:,} ({_MIN_ENTRY} bytes each at least)")
    metadata = _metadata(cursor, entries)
    tensors = _tensor_infos(cursor, tensor_count, types)
    alignment = _alignment(cursor, metadata)
    data_start = -(-cursor.pos // alignment) * alignment
    for tensor in tensors:
        end = data_start + tensor.offset + tensor.n_bytes
        if end > cursor.size:
            raise cursor.fail(f"tensor {_show(tensor.name)} data",
                              f"{tensor.n_bytes:,} bytes of {tensor.type_name} at offset {tensor.offset:,} end at "
                              f"byte {end:,}, beyond the end of the file ({cursor.size:,} bytes)")
    return GGUFHeader(path=cursor.path, size=cursor.size, version=version, metadata=metadata,
                      tensors=tuple(tensors), data_start=data_start)


def _version(cursor: _Cursor) -> int:
    version = int(cursor.unpack("I", "version"))
    if version in VERSIONS:
        return version
    swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
    found = (f"{version} (a big-endian file of version {swapped}; only little-endian files are read)"
             if swapped in VERSIONS else str(version))
    raise GGUFError(f"GGUF version not supported: version: expected {' or '.join(map(str, VERSIONS))}, found "
                    f"{found}", path=cursor.path)


def _metadata(cursor: _Cursor, entries: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for index in range(entries):
        key = cursor.string(f"metadata key {index + 1}", MAX_NAME_BYTES)
        field = f"metadata key {index + 1} ({_show(key)})"
        if not key or key in metadata:
            raise cursor.fail(field, "expected a key named once, found " + ("it again" if key else "an empty key"))
        kind = cursor.unpack("I", f"{field} type")
        metadata[key] = _value(cursor, kind, field, key)
    return metadata


def _value(cursor: _Cursor, kind: int, field: str, key: str) -> Any:
    if kind in _SCALARS:
        return cursor.unpack(_SCALARS[kind][0], field)
    if kind == _STRING:
        return cursor.string(field)
    if kind == _ARRAY:
        return _array(cursor, field, key in KEPT_STRINGS, depth=1)
    raise cursor.fail(f"{field} type", f"expected a value type from 0 to 12, found {kind}")


def _array(cursor: _Cursor, field: str, keep_strings: bool, depth: int) -> GGUFArray:
    """An array value; nested arrays, strings not kept and long numeric arrays are walked, not stored."""
    if depth > MAX_ARRAY_DEPTH:
        raise cursor.fail(field, f"expected arrays nested at most {MAX_ARRAY_DEPTH} deep, found deeper nesting")
    element = cursor.unpack("I", f"{field} element type")
    if element not in _MIN_BYTES:
        raise cursor.fail(f"{field} element type", f"expected a value type from 0 to 12, found {element}")
    count = cursor.count(f"{field} count", "elements", _MIN_BYTES[element])
    values: tuple[Any, ...] | None = None
    if element in _SCALARS:
        width = _MIN_BYTES[element]
        if count <= KEPT_ELEMENTS:
            values = struct.unpack(f"<{count}{_SCALARS[element][0]}", cursor.take(count * width, field))
        else:
            cursor.skip(count * width, field)
    elif element == _STRING:
        strings = _strings(cursor, field, count, keep_strings)
        values = tuple(strings) if keep_strings else None
    else:
        for index in range(count):
            _array(cursor, f"{field}[{index}]", False, depth + 1)
    return GGUFArray(_TYPE_NAMES[element], count, values)


def _strings(cursor: _Cursor, field: str, count: int, keep: bool) -> list[str]:
    """``count`` strings, each checked (length, UTF-8); kept only when ``keep``."""
    kept: list[str] = []
    for index in range(count):
        text = cursor.string(f"{field}[{index}]")
        if keep:
            kept.append(text)
    return kept


def _tensor_infos(cursor: _Cursor, count: int, types: dict[int, tuple[str, int, int]]) -> list[GGUFTensor]:
    tensors: list[GGUFTensor] = []
    names: set[str] = set()
    for index in range(count):
        name = cursor.string(f"tensor {index + 1} name", MAX_NAME_BYTES)
        field = f"tensor {index + 1} ({_show(name)})"
        if not name or name in names:
            raise cursor.fail(field, "expected a name given once, found " + ("it again" if name else "none"))
        names.add(name)
        n_dims = cursor.unpack("I", f"{field} n_dims")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cursor.fail(f"{field} n_dims", f"expected 1 to {MAX_DIMS} dimensions, found {n_dims:,}")
        dims = struct.unpack(f"<{n_dims}Q", cursor.take(8 * n_dims, f"{field} dims"))
        type_id = cursor.unpack("I", f"{field} type")
        offset = cursor.unpack("Q", f"{field} offset")
        if type_id not in types:
            raise cursor.fail(f"{field} type", f"expected a ggml type id ({', '.join(map(str, sorted(types)))}), "
                                               f"found {type_id}")
        type_name, block, block_bytes = types[type_id]
        if 0 in dims or dims[0] % block:
            raise cursor.fail(f"{field} dims", f"expected sizes above 0, the first a multiple of {type_name}'s "
                                               f"block of {block}, found {list(dims)}")
        n_elements = math.prod(dims)
        tensors.append(GGUFTensor(name, tuple(dims), type_id, type_name, offset, n_elements,
                                  n_elements // block * block_bytes))
    return tensors


def _alignment(cursor: _Cursor, metadata: dict[str, Any]) -> int:
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1):
        raise cursor.fail("general.alignment", f"expected a power of two, found {_show(value)}")
    return value
