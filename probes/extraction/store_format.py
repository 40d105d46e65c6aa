"""Reading an attention store's own files safely: the manifest and each shard's index checked, sentences parsed.

A store is read from outside (``--store``, ``probes verify``), so its JSON is input like any other: a field of the
wrong type, a shard name that is absolute or climbs out of the store, a record whose offset is negative or whose
map runs past the end of its shard is one :class:`~probes.errors.StoreError` naming the file and the field
(``shard-00000.json: records[3].offset: expected a whole number >= 0, found -5``), before anything is read from
where it points; never a ``KeyError`` in the middle of a leaderboard, never a read outside the store folder.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from probes.corpora.types import Sentence
from probes.errors import InputError, StoreError
from probes.extraction.store_verify import MANIFEST
from probes.safe_read import inside_folder, load_json, loads_json, regular_file

__all__ = ["check_manifest", "check_records", "read_index", "own_file", "sentence_from_json", "paired", "MAX_AXIS",
           "MAX_WORDS"]

#: The most layers or heads a store may hold.
MAX_AXIS = 100_000
#: The most positions (words and special tokens) of one stored sentence.
MAX_WORDS = 1 << 20
_COUNT_MAX = 1 << 62


class _Wrong(Exception):
    """A field that is not what the reader reads (turned into a StoreError naming the file)."""

    def __init__(self, field: str, expected: str, found: str) -> None:
        super().__init__(field)
        self.field, self.expected, self.found = field, expected, found


def _shown(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _count(value: Any, field: str, least: int = 0, most: int = _COUNT_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not least <= int(value) <= most:
        expected = f"a whole number >= {least}" if most == _COUNT_MAX else f"a whole number from {least} to {most}"
        raise _Wrong(field, expected, _shown(value))
    return int(value)


def _text(value: Any, field: str, *, optional: bool = False) -> None:
    if not (isinstance(value, str) or (optional and value is None)):
        raise _Wrong(field, "a string" + (" or null" if optional else ""), _shown(value))


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _Wrong(field, "a JSON object", _shown(value))
    return value


def _list(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Wrong(field, "a list", _shown(value))
    return value


def _ids(value: Any, field: str) -> None:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise _Wrong(field, "a list of sentence ids (strings)", _shown(value))


def _info(info: Any) -> None:
    info = _mapping(info, "info")
    for key in ("layers", "heads"):
        items = _list(info.get(key), f"info.{key}")
        if not 1 <= len(items) <= MAX_AXIS:
            raise _Wrong(f"info.{key}", f"a list of 1 to {MAX_AXIS} numbers", f"{len(items)} numbers")
        for i, item in enumerate(items):
            _count(item, f"info.{key}[{i}]", 0, MAX_AXIS)
    for key in ("model", "source", "revision", "tokenizer", "dtype", "weights_sha256"):
        _text(info.get(key), f"info.{key}", optional=True)
    if info.get("max_tokens") is not None:
        _count(info["max_tokens"], "info.max_tokens")


def _shards(shards: Any, root: Path) -> None:
    for i, shard in enumerate(_list(shards, "shards")):
        where = f"shards[{i}]"
        shard = _mapping(shard, where)
        try:  # absolute, climbing out, through a link: refused before any read
            inside_folder(root, shard.get("name"), what=f"{where}.name", source=root / MANIFEST)
        except InputError as exc:
            raise StoreError(exc.reason, path=exc.path) from None
        for key in ("n_sentences", "n_stored"):
            _count(shard.get(key), f"{where}.{key}")
        for key in ("npy_sha256", "data_sha256"):
            _text(shard.get(key), f"{where}.{key}")


def _report(report: Any) -> None:
    report = _mapping(report, "report")
    for key in ("skipped", "truncated", "windowed"):
        if key in report:
            _ids(report[key], f"report.{key}")
        if f"n_{key}" in report:
            _count(report[f"n_{key}"], f"report.n_{key}")


def check_manifest(manifest: Any, root: Path) -> dict[str, Any]:
    """``manifest`` (read from ``root/manifest.json``) if every field a reader reads has its type and every shard
    name stays inside ``root``; else a StoreError naming the manifest and the field."""
    path = root / MANIFEST
    if not isinstance(manifest, dict):
        raise StoreError(f"expected a JSON object (the store's manifest), found {type(manifest).__name__}",
                         path=path)
    try:
        _info(manifest.get("info"))
        _count(manifest.get("shard_size"), "shard_size", 1)
        if not isinstance(manifest.get("complete", False), bool):
            raise _Wrong("complete", "true or false", _shown(manifest["complete"]))
        if manifest.get("complete"):
            for key in ("n_sentences", "n_stored"):
                _count(manifest.get(key), key)
            _text(manifest.get("data_sha256"), "data_sha256")
            for key in ("source", "source_sha256"):
                _text(manifest.get(key), key, optional=True)
            _shards(manifest.get("shards"), root)
            _report(manifest.get("report"))
    except _Wrong as wrong:
        raise StoreError(f"{wrong.field}: expected {wrong.expected}, found {wrong.found}", path=path) from None
    return manifest


def _record(entry: Any, where: str, per_word: int, n_values: int) -> Mapping[str, Any]:
    """One record of a shard index: skipped, or a map of ``n`` positions at ``offset`` that fits the shard."""
    entry = _mapping(entry, where)
    if entry.get("skipped"):
        return entry
    offset = _count(entry.get("offset"), f"{where}.offset")
    n = _count(entry.get("n"), f"{where}.n", 1, MAX_WORDS)
    special = _list(entry.get("is_special"), f"{where}.is_special")
    if len(special) != n or not all(v in (0, 1) for v in special):
        raise _Wrong(f"{where}.is_special", f"{n} flags (0 or 1, true or false), one per position", _shown(special))
    _mapping(entry.get("meta", {}), f"{where}.meta")
    end = offset + per_word * n * n
    if end > n_values:
        raise _Wrong(f"{where}.offset", f"a map that ends within the shard's {n_values} values (offset + layers x "
                                        f"heads x n x n)", f"offset {offset} with n {n}, ending at {end}")
    return entry


def check_records(index: Any, path: Path, shard: Mapping[str, Any], n_values: int, per_word: int
                  ) -> list[Mapping[str, Any]]:
    """The records of the shard index read from ``path``: one per sentence of ``shard``, each skipped or a map of
    ``per_word x n x n`` values (layers x heads per position pair) within the shard's ``n_values``; else a
    StoreError naming the index file and the record."""
    try:
        records = _list(_mapping(index, "the index").get("records"), "records")
        if len(records) != shard["n_sentences"]:
            raise _Wrong("records", f"{shard['n_sentences']} records (one per sentence of the shard)",
                         f"{len(records)} records")
        return [_record(entry, f"records[{i}]", per_word, n_values) for i, entry in enumerate(records)]
    except _Wrong as wrong:
        raise StoreError(f"{wrong.field}: expected {wrong.expected}, found {wrong.found}", path=path) from None


# ----------------------------------------------------------------------------- reading the shard files
def sentence_from_json(data: bytes, path: Path, line: int) -> Sentence:
    """The Sentence on ``line`` (its UTF-8 bytes) of a shard's sentences file; StoreError naming the file and line
    if it is not one."""
    try:
        fields = loads_json(data.decode("utf-8"), path=path, what="a JSON sentence")
        if not isinstance(fields, dict):
            raise TypeError(f"expected a JSON object, found {type(fields).__name__}")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        return Sentence(**values)  # an unknown or missing field is a TypeError, reported below
    except (InputError, TypeError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        reason = exc.reason if isinstance(exc, InputError) else str(exc)
        raise StoreError(f"expected a stored sentence, found one that cannot be read: {reason}", path=path,
                         line=line) from None

def own_file(root: Path, path: Path) -> bool:
    """Whether ``path`` is a regular file of the store (not a link leading out of it, a pipe or a device)."""
    try:
        inside_folder(root, path.name, what="shard file")
        regular_file(path)
    except InputError:
        return False
    return True


#: The fields of a shard index that the manifest copies, and their types.
_INDEX_FIELDS = {"name": str, "n_sentences": int, "n_stored": int, "npy_sha256": str, "data_sha256": str}


def read_index(path: Path) -> dict[str, Any] | None:
    """The shard index at ``path`` if it is a regular file inside the store holding the fields the manifest copies;
    None when it is damaged (its shard is then extracted again)."""
    if not own_file(path.parent, path):
        return None
    try:
        index = load_json(path, what="a JSON shard index")
    except InputError:
        return None
    ok = isinstance(index, dict) and all(isinstance(index.get(k), t) and not isinstance(index.get(k), bool)
                                         for k, t in _INDEX_FIELDS.items())
    return index if ok else None

def paired(records: list[Any], lines: Iterable[bytes], path: Path) -> Iterator[tuple[Any, bytes]]:
    """Each record with its sentence's line; StoreError naming the sentences file when their numbers differ."""
    remaining = iter(lines)
    for record in records:
        line = next(remaining, None)
        if line is None:
            raise StoreError(f"expected {len(records)} sentences, one per record of the shard's index, found fewer",
                             path=path)
        yield record, line
    if next(remaining, None) is not None:
        raise StoreError(f"expected {len(records)} sentences, one per record of the shard's index, found more",
                         path=path)
