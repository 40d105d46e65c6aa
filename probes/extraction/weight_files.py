"""A model folder's weight files, checked before transformers reads them.

transformers hands ``*.safetensors`` files to the safetensors library and ``*.bin`` / ``*.pt`` files to
``torch.load(weights_only=True)``. A crafted file must end in one line naming it, never in a memory blow-up
(a header that claims 2**62 bytes), a crash inside the reader (offsets that overlap or point past the end) or
an "internal error":

* :func:`check_weight_files`: every ``*.safetensors`` file's header (its 8-byte length, bounded by the file and
  by :data:`MAX_HEADER_BYTES`; the JSON through :func:`probes.safe_read.loads_json`; every tensor's dtype,
  shape and ``data_offsets``, which must tile the data section in order, each as long as dtype x shape says), and
  every ``*.index.json`` shard map, whose file names must stay inside the folder;
* :func:`pickles_refused`: around the loader call, the ``UnpicklingError`` that ``weights_only`` raises for a
  pickle holding code or objects that are not tensors becomes a :class:`~probes.errors.FormatError` naming the
  file (probes never unpickles anything else).
"""

from __future__ import annotations

import pickle
import struct
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from probes.errors import FormatError
from probes.safe_read import decode_utf8, inside_folder, load_json, loads_json, regular_file

__all__ = [
    "DTYPE_BITS",
    "MAX_HEADER_BYTES",
    "PICKLE_PATTERNS",
    "check_safetensors",
    "check_shard_index",
    "check_weight_files",
    "pickles_refused",
]

#: The largest safetensors header read (the safetensors library's own limit is 100 MB).
MAX_HEADER_BYTES = 100 << 20

#: Bits per element of each safetensors dtype.
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64,
    "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

#: Weight files transformers unpickles (with ``weights_only=True``).
PICKLE_PATTERNS = ("*.bin", "*.pt")

#: The most dimensions a tensor of a weight file may have.
_MAX_DIMS = 64


def check_weight_files(folder: str | Path) -> None:
    """Check every ``*.safetensors`` header and every ``*.index.json`` shard map in ``folder`` (see the module).

    Raises:
        InputError: a weight file that is not a regular file, or a header or shard map that is not what
            transformers expects; the message names the file.
    """
    root = Path(folder)
    for path in sorted(root.glob("*.safetensors")):
        check_safetensors(path)
    for path in sorted(root.glob("*.index.json")):
        check_shard_index(path)


def check_safetensors(path: str | Path) -> None:
    """The header of the safetensors file ``path``, checked against the file's own size (see the module).

    Raises:
        FormatError: naming ``path``, what was expected and what was found.
    """
    file = regular_file(path, what="a safetensors weight file")
    size = file.stat().st_size
    with file.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise FormatError(f"expected a safetensors file (an 8-byte header length, then the header), found "
                              f"{size} bytes", path=file)
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, MAX_HEADER_BYTES):
            raise FormatError(f"expected a safetensors header of at most {min(size - 8, MAX_HEADER_BYTES):,} bytes "
                              f"(the file holds {size:,}; the limit is {MAX_HEADER_BYTES:,}), found a header length "
                              f"of {length:,}", path=file)
        raw = handle.read(length)
    header = loads_json(decode_utf8(raw, path=file, what="a safetensors header"), path=file,
                        what="a safetensors header")
    if not isinstance(header, dict):
        raise FormatError(f"expected a safetensors header that is a JSON object, found {type(header).__name__}",
                          path=file)
    _check_tensors(file, header, size - 8 - length)


def _check_tensors(file: Path, header: dict[str, Any], data_bytes: int) -> None:
    """Every tensor's entry checked; their ``data_offsets`` must tile ``[0, data_bytes)`` in order."""
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FormatError("__metadata__: expected an object of strings, found "
                          f"{_shown(metadata)}", path=file)
    spans = sorted((_span(file, name, entry), name) for name, entry in header.items() if name != "__metadata__")
    end = 0
    for (begin, stop), name in spans:
        if begin != end:
            found = "overlaps the tensor before it" if begin < end else f"leaves bytes {end}..{begin} unused"
            raise FormatError(f"tensor {name!r}: expected data_offsets to start at byte {end} (tensors stored one "
                              f"after the other), found [{begin}, {stop}], which {found}", path=file)
        end = stop
    if end != data_bytes:
        raise FormatError(f"expected tensors that fill the {data_bytes:,} data bytes after the header, found "
                          f"{end:,} bytes of tensors", path=file)


def _span(file: Path, name: str, entry: object) -> tuple[int, int]:
    """``(begin, end)`` of one tensor, checked: known dtype, whole-number shape, offsets within the data section
    (``end`` is checked against it by the caller) and as long as dtype x shape."""
    if not isinstance(entry, dict):
        raise FormatError(f"tensor {name!r}: expected an object with dtype, shape and data_offsets, found "
                          f"{_shown(entry)}", path=file)
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BITS:
        raise FormatError(f"tensor {name!r}: expected dtype one of {', '.join(DTYPE_BITS)}, found {_shown(dtype)}",
                          path=file)
    if not isinstance(shape, list) or len(shape) > _MAX_DIMS or not all(_natural(n) for n in shape):
        raise FormatError(f"tensor {name!r}: expected shape a list of at most {_MAX_DIMS} whole numbers >= 0, found "
                          f"{_shown(shape)}", path=file)
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_natural(n) for n in offsets) \
            or offsets[0] > offsets[1]:
        raise FormatError(f"tensor {name!r}: expected data_offsets [begin, end], whole numbers with begin <= end, "
                          f"found {_shown(offsets)}", path=file)
    elements = 1
    for n in shape:
        elements *= n
    bits = elements * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
        raise FormatError(f"tensor {name!r}: expected {dtype} x {shape} to take {bits / 8:g} bytes, found "
                          f"data_offsets {offsets} ({offsets[1] - offsets[0]} bytes)", path=file)
    return offsets[0], offsets[1]


def _natural(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def check_shard_index(path: str | Path) -> None:
    """A sharded checkpoint's ``*.index.json``: its ``weight_map`` names shard files inside its own folder.

    Raises:
        InputError: not a JSON object with a ``weight_map`` of names to relative file names that stay inside the
            folder (after links are followed); the message names the index file.
    """
    file = Path(path)
    index = load_json(file, what="a weight shard index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise FormatError(f"expected a JSON object with a weight_map object, found {_shown(index)}", path=file)
    for shard in sorted({str(v) if not isinstance(v, str) else v for v in weight_map.values()}):
        inside_folder(file.parent, shard, what="weight_map shard", source=file)


@contextmanager
def pickles_refused(folder: str | Path) -> Iterator[None]:
    """Around a transformers loader call: a pickled weight file of ``folder`` that ``torch.load(weights_only=True)``
    refuses (it holds code or objects that are not tensors) or cannot read (cut short) becomes a FormatError
    naming the file; torch's warning about the pickle protocol is kept off the terminal."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            yield
    except (pickle.UnpicklingError, EOFError, RuntimeError) as exc:
        found = _unreadable_pickle(Path(folder))
        if found is None and not isinstance(exc, pickle.UnpicklingError):
            raise  # not a weight file's fault
        file, refused = found if found is not None else (Path(folder), True)
        if refused:
            raise FormatError("expected a weight file of tensors only, found a pickle that holds code or objects "
                              "that are not tensors, which probes never unpickles (save the weights with "
                              "safetensors, or torch.save a state dict of tensors)", path=file) from None
        raise FormatError(f"expected a torch weight file, found one that cannot be read ({_first_line(exc)})",
                          path=file) from None


def _unreadable_pickle(folder: Path) -> tuple[Path, bool] | None:
    """The first pickled weight file of ``folder`` that ``torch.load(weights_only=True)`` refuses (True) or cannot
    read (False); None when every one loads or the folder has safetensors files (which transformers reads
    instead). Run only after a load failed, on meta tensors (no weight memory)."""
    import torch

    if any(folder.glob("*.safetensors")):  # transformers read those, not the pickles
        return None
    for file in sorted(p for pattern in PICKLE_PATTERNS for p in folder.glob(pattern)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.load(file, map_location="meta", weights_only=True)
        except pickle.UnpicklingError:
            return file, True
        except (EOFError, RuntimeError, OSError, ValueError):
            return file, False
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
