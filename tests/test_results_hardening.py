"""Result folders from outside (``probes.load``): sizes checked before allocation, no pickle, no read outside.

A ``.npy`` header that claims hundreds of GiB, a 1.4 MB compressed entry that inflates to 1.4 GB, an entry that
lies about its inflated size, an object dtype: each is refused with an InputError naming ``arrays.npz`` and the
entry, with peak memory bounded by construction (tracemalloc), before the data is read. A ``result.json`` or
``arrays.npz`` that is a link leading out of the folder is not followed; a malformed ``record`` field names the
field. Valid folders (Fortran order, 0-d, empty, text, compressed by numpy) still load exactly.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pickle
import struct
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from probes.errors import InputError
from probes.results import ARRAYS_FILE, RESULT_FILE, Result, equal, load
from probes.run_record import RunRecord
from probes.safe_arrays import ArrayFileError, NpzArchive

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need a POSIX system")

#: Peak memory a refused bomb may cost (tracemalloc sees numpy's and Python's allocations).
BOUND = 100 << 20


@dataclasses.dataclass(frozen=True)
class Held(Result):
    """A result of one array and a run record, for these tests."""

    values: npt.NDArray[Any]
    record: RunRecord = dataclasses.field(default_factory=RunRecord)


def _saved(tmp_path: Path, values: np.ndarray | None = None) -> Path:
    values = np.arange(6, dtype=np.float64) if values is None else values
    return Held(values, RunRecord.of({"command": "probes test"})).save(tmp_path / "held")


def _npy_header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    handle = io.BytesIO()
    np.lib.format.write_array_header_1_0(handle, {"descr": descr, "fortran_order": False, "shape": shape})
    return handle.getvalue()


def _zip(name: str, data: bytes, *, method: int, size: int, crc: int | None = None) -> bytes:
    """A one-entry zip archive whose entry ``name`` holds ``data`` (already compressed with ``method``) and says it
    inflates to ``size`` bytes (``crc``: the CRC-32 it states; default that of ``data``)."""
    raw = name.encode()
    crc = zlib.crc32(data) if crc is None else crc
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(data), size, len(raw), 0) + raw
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, len(data), size, len(raw),
                          0, 0, 0, 0, 0, 0) + raw
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(data), 0)
    return local + data + central + end


def _bomb(header: bytes, mib: int) -> bytes:
    """A raw deflate stream of ``header`` then ``mib`` MiB of zeros, built without ever holding them: after a full
    flush every MiB of zeros compresses to the same bytes, so one segment is repeated."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = packer.compress(header) + packer.flush(zlib.Z_FULL_FLUSH)
    segment = packer.compress(bytes(1 << 20)) + packer.flush(zlib.Z_FULL_FLUSH)
    assert packer.compress(bytes(1 << 20)) + packer.flush(zlib.Z_FULL_FLUSH) == segment
    return start + segment * mib + packer.flush(zlib.Z_FINISH)


def _peak(action: Callable[[], Any]) -> tuple[Any, int]:
    """What ``action`` returns, or the exception it raises, and the peak memory (bytes) allocated while it ran."""
    tracemalloc.start()
    try:
        outcome = action()
    except Exception as exc:  # noqa: BLE001 - returned for the test to check its type
        outcome = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return outcome, peak


def _plant(folder: Path, archive: bytes) -> None:
    (folder / ARRAYS_FILE).write_bytes(archive)


# --- sizes before allocation --------------------------------------------------------------------------------


def test_a_npy_header_claiming_hundreds_of_gib_is_refused_before_allocating(tmp_path: Path) -> None:
    folder = _saved(tmp_path)
    claimed = (40 << 30,)  # 40 Gi float64 values: 320 GiB
    entry = _npy_header(claimed) + bytes(48)
    _plant(folder, _zip("values.npy", entry, method=zipfile.ZIP_STORED, size=len(entry)))
    error, peak = _peak(lambda: load(folder))
    assert isinstance(error, ArrayFileError) and isinstance(error, InputError)
    assert ARRAYS_FILE in str(error) and "'values.npy'" in str(error) and str(folder) in str(error)
    assert "343,597,383,680 bytes of data" in str(error) and "found 48 bytes" in str(error)
    assert peak < BOUND


def test_a_compressed_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    folder = _saved(tmp_path)
    mib = 1400
    header = _npy_header((mib << 20,), "|u1")
    stream = _bomb(header, mib)
    assert len(stream) < 2 << 20  # a 1.4 MB entry ...
    _plant(folder, _zip("values.npy", stream, method=zipfile.ZIP_DEFLATED, size=len(header) + (mib << 20), crc=0))
    error, peak = _peak(lambda: load(folder))  # ... that would inflate to 1.4 GB
    assert type(error) is ArrayFileError
    assert "'values.npy'" in str(error) and "was not inflated" in str(error) and ARRAYS_FILE in str(error)
    assert peak < BOUND


def test_a_compressed_entry_that_lies_about_its_size_stops_inflating_at_the_size_it_states(tmp_path: Path) -> None:
    folder = _saved(tmp_path)
    header = _npy_header((6,))
    stated = header + bytes(48)  # says: 6 float64 values (and their CRC); holds 1.4 GB of zeros
    stream = _bomb(header, 1400)
    _plant(folder, _zip("values.npy", stream, method=zipfile.ZIP_DEFLATED, size=len(stated), crc=zlib.crc32(stated)))
    loaded, peak = _peak(lambda: load(folder))
    assert isinstance(loaded, Held) and np.array_equal(loaded.values, np.zeros(6))
    assert peak < BOUND
    _plant(folder, _zip("values.npy", stream, method=zipfile.ZIP_DEFLATED, size=len(stated), crc=0))
    error, peak = _peak(lambda: load(folder))
    assert type(error) is ArrayFileError and "Bad CRC-32" in str(error) and peak < BOUND


def test_a_header_claiming_more_than_the_entry_states_is_refused_before_inflating(tmp_path: Path) -> None:
    folder = _saved(tmp_path)
    header = _npy_header((1400 << 20,), "|u1")
    stream = _bomb(header, 1400)
    stated = header + bytes(48)
    _plant(folder, _zip("values.npy", stream, method=zipfile.ZIP_DEFLATED, size=len(stated), crc=zlib.crc32(stated)))
    error, peak = _peak(lambda: load(folder))
    assert type(error) is ArrayFileError and "1,468,006,400 bytes of data" in str(error)
    assert peak < BOUND


def test_arrays_read_from_one_archive_are_held_to_its_size_plus_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, big=np.zeros(1 << 18))  # 2 MiB, stored
    with NpzArchive(path, limit=0) as archive:
        assert archive["big"].shape == (1 << 18,)  # once: within its own size
        with pytest.raises(ArrayFileError, match="'big.npy'.*was not inflated"):
            archive["big"]  # twice: more than the file holds


def test_an_object_array_is_refused_before_its_pickle_is_read(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Touch:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (marker,))

    folder = _saved(tmp_path)
    entry = _npy_header((1,), "|O") + pickle.dumps(np.array([Touch()], dtype=object))
    _plant(folder, _zip("values.npy", entry, method=zipfile.ZIP_STORED, size=len(entry)))
    with pytest.raises(ArrayFileError, match="Python objects .*never loaded"):
        load(folder)
    assert not marker.exists()


@pytest.mark.parametrize("header, found", [
    (b"\x93NUMPY\x01\x00\xff\xff", "at most 10,000 bytes"),
    (b"\x93NUMPY\x03\x00" + bytes(8), "version 3.0"),
    (b"PK\x03\x04junk", "other bytes"),
    (_npy_header((-4,)), "sizes >= 0"),
    (b"\x93NUMPY\x01\x00\x20\x00{'descr': '<f8', 'shape': (((((1,}", "unreadable"),
])
def test_damaged_headers_are_input_errors(tmp_path: Path, header: bytes, found: str) -> None:
    folder = _saved(tmp_path)
    _plant(folder, _zip("values.npy", header, method=zipfile.ZIP_STORED, size=len(header)))
    with pytest.raises(ArrayFileError, match=found) as err:
        load(folder)
    assert str(folder) in str(err.value) and "'values.npy'" in str(err.value)


@needs_fifo
def test_an_archive_that_is_not_a_zip_or_not_a_regular_file_is_an_input_error(tmp_path: Path) -> None:
    folder = _saved(tmp_path)
    _plant(folder, b"not a zip at all")
    with pytest.raises(InputError, match="cannot be read"):
        load(folder)
    (folder / ARRAYS_FILE).unlink()
    os.mkfifo(folder / ARRAYS_FILE)  # would hang a plain open()
    with pytest.raises(InputError, match="named pipe"):
        load(folder)


# --- nothing read from outside the folder --------------------------------------------------------------------


@pytest.mark.parametrize("name", [RESULT_FILE, ARRAYS_FILE])
def test_a_file_of_the_folder_that_links_out_of_it_is_not_followed(tmp_path: Path, name: str) -> None:
    outside = _saved(tmp_path / "outside", np.array([4.0, 2.0]))
    folder = _saved(tmp_path)
    (folder / name).unlink()
    (folder / name).symlink_to(outside / name)
    with pytest.raises(InputError, match="leads outside") as err:
        load(folder)
    assert name in str(err.value)


# --- malformed result.json -----------------------------------------------------------------------------------


@pytest.mark.parametrize("record, message", [
    ({"invocation": {"git": {"commit": 5}}}, "field 'record': a run record's invocation.git"),
    ({"invocation": "python x"}, "field 'record': a run record's invocation: expected a mapping"),
    ({"options": [1, 2]}, "field 'record': a run record's options: expected a mapping"),
    ({"command": 17}, "field 'record': a run record's command: expected a string, found 17"),
])
def test_a_malformed_record_field_names_the_field(tmp_path: Path, record: dict[str, Any], message: str) -> None:
    folder = _saved(tmp_path)
    doc = json.loads((folder / RESULT_FILE).read_text(encoding="utf-8"))
    doc["fields"]["record"] = record
    (folder / RESULT_FILE).write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(InputError, match=message) as err:
        load(folder)
    assert RESULT_FILE in str(err.value)


@pytest.mark.parametrize("fmt", [True, "1", 1.5, None])
def test_a_format_that_is_not_a_whole_number_is_refused(tmp_path: Path, fmt: object) -> None:
    folder = _saved(tmp_path)
    doc = json.loads((folder / RESULT_FILE).read_text(encoding="utf-8"))
    (folder / RESULT_FILE).write_text(json.dumps({**doc, "format": fmt}), encoding="utf-8")
    with pytest.raises(InputError, match="expected format 1 or older"):
        load(folder)


# --- valid folders still load ----------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [
    np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
    np.array(3.5),
    np.zeros((0, 3), dtype=np.float16),
    np.array(["a", "bcd"]),
    np.array([[True, False]]),
    np.arange(6, dtype=">f8").reshape(2, 3),
])
def test_valid_arrays_load_exactly(tmp_path: Path, values: np.ndarray) -> None:
    result = Held(values, RunRecord.of({"command": "probes test"}))
    again = load(result.save(tmp_path / "r"))
    assert equal(again, result)
    assert again.values.flags.f_contiguous == values.flags.f_contiguous


def test_an_archive_numpy_compressed_loads(tmp_path: Path) -> None:
    folder = _saved(tmp_path)
    values = np.linspace(0, 1, 1000).reshape(10, 100)
    np.savez_compressed(folder / ARRAYS_FILE, values=values)
    assert np.array_equal(load(folder).values, values)
