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
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from probes.checksum import file_sha256
from probes.errors import DamagedStoreError

__all__ = ["Damage", "Verification", "check_sizes", "check_shard", "damaged_shards", "repair_hint"]


@dataclass(frozen=True)
class Damage:
    """One damaged file of a store: which, what was expected, what was found."""

    file: Path
    expected: str
    found: str

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


def _npy_size(path: Path) -> Damage | None:
    """A shard's ``.npy`` whose size differs from the one its header implies (or that is missing)."""
    try:
        with path.open("rb") as handle:
            version = np.lib.format.read_magic(handle)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(handle)
            header = handle.tell()
        found = path.stat().st_size
    except FileNotFoundError:
        return Damage(path, "a .npy file", "none")
    except (OSError, ValueError) as exc:
        return Damage(path, "a .npy header", f"an unreadable one ({exc})")
    expected = header + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if expected != found:
        return Damage(path, f"{expected} bytes (its header's shape {tuple(shape)} of {np.dtype(dtype)})",
                      f"{found} bytes")
    return None


def _shard_sizes(root: Path, shard: Mapping[str, Any]) -> list[Damage]:
    name = shard["name"]
    damage = [] if (d := _npy_size(root / f"{name}.npy")) is None else [d]
    for suffix in (".json", ".sentences.jsonl"):
        if not (root / f"{name}{suffix}").is_file():
            damage.append(Damage(root / f"{name}{suffix}", f"a {suffix} file", "none"))
    return damage


def check_sizes(root: Path, manifest: Mapping[str, Any]) -> None:
    """Refuse the store when a shard file is missing or a ``.npy`` has the wrong size (no hashing)."""
    for shard in manifest["shards"]:
        for damage in _shard_sizes(root, shard):
            raise refuse(root, manifest["info"], damage)


def _text_sha256(path: Path) -> str:
    """The shard's data checksum as ``probes extract`` computes it: sha256 of its lines, newline-joined."""
    data = path.read_bytes()
    return hashlib.sha256(data[:-1] if data.endswith(b"\n") else data).hexdigest()


def _shard_hashes(root: Path, shard: Mapping[str, Any]) -> list[Damage]:
    """The damaged files of one shard, by sha256 (``.npy``, sentences) and against its index."""
    name = shard["name"]
    damage: list[Damage] = []
    npy, lines, index_path = root / f"{name}.npy", root / f"{name}.sentences.jsonl", root / f"{name}.json"
    for path, key, digest in ((npy, "npy_sha256", file_sha256), (lines, "data_sha256", _text_sha256)):
        found = digest(path)
        if found != shard[key]:
            damage.append(Damage(path, f"sha256 {shard[key]}", f"sha256 {found}"))
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return [*damage, Damage(index_path, "a JSON shard index", f"invalid JSON ({exc})")]
    for key in ("npy_sha256", "data_sha256"):
        if not isinstance(index, dict) or index.get(key) != shard[key]:
            found = index.get(key) if isinstance(index, dict) else type(index).__name__
            damage.append(Damage(index_path, f"{key} {shard[key]}", f"{found}"))
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
        out.extend(sizes if any(d.found == "none" for d in sizes) else [*sizes, *_shard_hashes(root, shard)])
    return out
