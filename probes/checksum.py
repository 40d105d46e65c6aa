"""File checksums for run records, stores, the registry and model weights."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

__all__ = ["file_sha256", "files_sha256"]

_CHUNK = 1 << 22  # 4 MiB


def _update(digest: hashlib._Hash, path: str | Path) -> None:
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file, read in 4 MiB chunks (bounded memory for any size)."""
    return files_sha256([path])


def files_sha256(paths: Iterable[str | Path]) -> str:
    """Hex sha256 of the files' bytes one after the other, in the order given (e.g. weight shards)."""
    digest = hashlib.sha256()
    for path in paths:
        _update(digest, path)
    return digest.hexdigest()
