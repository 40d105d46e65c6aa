"""Is an attention store's every file what ``probes extract`` recorded? Sizes cheaply, sha256 in full.

:func:`check_sizes` (run by :func:`probes.extraction.store.open_store` every time) reads each shard's
``.npy`` header and compares the size it implies with the file's size, so a truncated or extended shard
is refused before anything is read. :func:`check_shard` (run by the store the first time it reads a
shard) compares the sha256 of the shard's ``.npy`` and sentences with those in the manifest, and its
index with the manifest's entry. :func:`damaged_shards` runs both over every shard for ``probes verify``.
A damaged store is refused with :class:`~probes.errors.DamagedStoreError` naming the store, the file,
what was expected and what was found, and how to repair it: running the same ``probes extract`` into the
same folder keeps the intact shards and extracts the damaged ones again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from probes.checksum import file_sha256
from probes.errors import DamagedStoreError, InputError, StoreError
from probes.safe_arrays import ArrayFileError, npy_file_header
from probes.safe_read import inside_folder, load_json, read_bytes, regular_file

__all__ = ["Damage", "Verification", "check_sizes", "check_shard", "damaged_shards", "repair_hint", "shard_path",
           "MANIFEST"]

#: The store's manifest file.
MANIFEST = "manifest.json"
#: The files of one shard, by suffix: the attention, the shard's index, its sentences.
_SUFFIXES = (".npy", ".json", ".sentences.jsonl")


@dataclass(frozen=True)
class Damage:
    """One damaged file of a store: which, what was expected, what was found (``hashable``: False when the file
    is missing, not a regular file or outside the store, so that nothing reads it)."""

    file: Path
    expected: str
    found: str
    hashable: bool = field(default=True, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.file}: expected {self.expected}, found {self.found}"


@dataclass(frozen=True)
class Verification:
    """What :func:`probes.extraction.store.verify_store` found: the store, its size and every damaged file."""

    root: Path
    info: Mapping[str, Any]
    n_shards: int
    n_sentences: int
    damage: tuple[Damage, ...]

    @property
    def damaged_shards(self) -> list[str]:
        """Names of the shards with a damaged file, in order."""
        return list(dict.fromkeys(d.file.name.split(".", 1)[0] for d in self.damage))


def repair_hint(root: Path, info: Mapping[str, Any]) -> str:
    """How to repair the store at ``root``: the extraction that wrote it, run again into the same folder."""
    source = f", treebank {info['source']}" if info.get("source") else ""
    return (f"repair it by running the same `probes extract ... --store {root}` again (model "
            f"{info.get('model')}{source}): it keeps the intact shards and extracts the damaged ones again; "
            f"`probes verify {root}` lists every damaged shard")


def refuse(root: Path, info: Mapping[str, Any], damage: Damage) -> DamagedStoreError:
    """The error for ``damage`` in the store at ``root`` (to raise)."""
    return DamagedStoreError(f"damaged attention store {root}: this shard file is not what `probes extract` "
                             f"recorded: expected {damage.expected}, found {damage.found}; {repair_hint(root, info)}",
                             path=damage.file)


def shard_path(root: Path, name: str, suffix: str) -> Path:
    """The shard file ``name + suffix`` of the store at ``root``, resolved; StoreError when it is (or leads, through
    a link) outside the store."""
    try:
        return inside_folder(root, f"{name}{suffix}", what="shard file", source=root / MANIFEST)
    except InputError as exc:
        raise StoreError(exc.reason, path=exc.path) from None


def _npy_size(shown: Path, path: Path) -> Damage | None:
    """A shard's ``.npy`` (at ``path``, named ``shown``) whose header is not a 1-D float16 array of the file's
    size: checked before any of its data is read."""
    try:
        header = npy_file_header(path, what="shard", exact=False)
    except ArrayFileError as exc:
        return Damage(shown, exc.expected, exc.found)
    if header.dtype != np.float16 or len(header.shape) != 1:
        return Damage(shown, "a 1-D float16 array", f"shape {header.shape} of {header.dtype}")
    expected, found = header.offset + header.nbytes, path.stat().st_size
    if expected != found:
        return Damage(shown, f"{expected} bytes (its header's shape {header.shape} of {header.dtype})",
                      f"{found} bytes")
    return None


def _file_damage(root: Path, name: str, suffix: str) -> Damage | None:
    """A shard file that is missing, not a regular file, or outside the store (through a link)."""
    shown = root / f"{name}{suffix}"
    try:
        path = shard_path(root, name, suffix)
    except StoreError:
        return Damage(shown, "a file inside the store", "a link leading outside it", hashable=False)
    if not path.exists():
        return Damage(shown, f"a {suffix} file", "none", hashable=False)
    try:
        regular_file(path, what=f"a {suffix} file")
    except InputError as exc:
        return Damage(shown, f"a {suffix} file (a regular file)", exc.reason.rpartition("found ")[2], hashable=False)
    return _npy_size(shown, path) if suffix == ".npy" else None


def _shard_sizes(root: Path, shard: Mapping[str, Any]) -> list[Damage]:
    """The shard's files that are missing, not regular, outside the store, or (``.npy``) of the wrong size."""
    return [d for suffix in _SUFFIXES if (d := _file_damage(root, shard["name"], suffix)) is not None]


def check_sizes(root: Path, manifest: Mapping[str, Any]) -> None:
    """Refuse the store when a shard file is missing or a ``.npy`` has the wrong size (no hashing)."""
    for shard in manifest["shards"]:
        for damage in _shard_sizes(root, shard):
            raise refuse(root, manifest["info"], damage)


def _text_sha256(path: Path) -> str:
    """The shard's data checksum as ``probes extract`` computes it: sha256 of its lines, newline-joined."""
    data = read_bytes(path, limit=path.stat().st_size, what="a sentences file")
    return hashlib.sha256(data[:-1] if data.endswith(b"\n") else data).hexdigest()


def _shard_hashes(root: Path, shard: Mapping[str, Any]) -> list[Damage]:
    """The damaged files of one shard, by sha256 (``.npy``, sentences) and against its index (its files are
    regular files inside the store: :func:`_shard_sizes` found no damage that forbids reading them)."""
    name = shard["name"]
    damage: list[Damage] = []
    npy, index_path, lines = (shard_path(root, name, suffix) for suffix in _SUFFIXES)
    shown = {path: root / f"{name}{suffix}" for path, suffix in zip((npy, index_path, lines), _SUFFIXES)}
    for path, key, digest in ((npy, "npy_sha256", file_sha256), (lines, "data_sha256", _text_sha256)):
        found = digest(path)
        if found != shard[key]:
            damage.append(Damage(shown[path], f"sha256 {shard[key]}", f"sha256 {found}"))
    try:
        index = load_json(index_path, what="a JSON shard index")
    except InputError as exc:
        return [*damage, Damage(shown[index_path], "a JSON shard index", f"an unreadable one ({exc.reason})")]
    for key in ("npy_sha256", "data_sha256"):
        if not isinstance(index, dict) or index.get(key) != shard[key]:
            held = index.get(key) if isinstance(index, dict) else type(index).__name__
            damage.append(Damage(shown[index_path], f"{key} {shard[key]}", f"{held}"))
    return damage


def check_shard(root: Path, manifest: Mapping[str, Any], shard: Mapping[str, Any]) -> None:
    """Refuse the store when one shard's files differ from what the manifest records (sizes, sha256)."""
    for find in (_shard_sizes, _shard_hashes):  # a missing file is named before any hashing
        for damage in find(root, shard):
            raise refuse(root, manifest["info"], damage)


def damaged_shards(root: Path, manifest: Mapping[str, Any]) -> list[Damage]:
    """Every damaged file of the store, shard by shard (sizes first; a shard missing files is not hashed)."""
    out: list[Damage] = []
    for shard in manifest["shards"]:
        sizes = _shard_sizes(root, shard)
        out.extend(sizes if not all(d.hashable for d in sizes) else [*sizes, *_shard_hashes(root, shard)])
    return out
