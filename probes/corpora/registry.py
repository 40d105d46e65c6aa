"""Treebank names: public UD treebanks fetched and cached with pooch, and the packaged sample.

``ud:en_ewt:dev`` names split ``dev`` of treebank ``en_ewt`` in ``probes/corpora/registry.json``;
``sample:dev`` and ``sample:test`` name the sample corpus shipped inside the package
(``probes/corpora/sample/``, silver parses of sentences written for this project), so examples
run from any folder with no download and no path.
Files are downloaded once into the cache (``$PROBES_CACHE``, else the platform
cache folder, e.g. ``~/.cache/probes``) and checked against the registry's
sha256. Entries without a recorded sha256 are *trusted on first use*: the hash of
the first download is written to ``checksums.json`` in the cache, a warning says
so, and every later use is checked against it.

Offline, :func:`add_to_cache` (``probes data add``) fills the cache from local files: a file is
copied in after its sha256 is checked against the registry's, or, for an entry without one, its
hash is recorded as a first download's would be. A cached file is then used with no network.

Every file read here comes from outside and is read by :mod:`probes.safe_read`: the registry and the cache's
``checksums.json`` (regular files, bounded, JSON of the expected shape), and a local copy handed to
:func:`add_to_cache` (a regular file of at most :data:`MAX_TREEBANK_BYTES`: a device, a pipe or a huge file is
refused in one line before a byte is hashed).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probes.checksum import file_sha256
from probes.errors import ConfigError, InputError
from probes.safe_read import file_size, load_json, regular_file

__all__ = ["REGISTRY_PATH", "SAMPLE_DIR", "SAMPLE_SPLITS", "CachedFile", "load_registry", "cache_dir",
           "fetch_treebank", "add_to_cache", "cache_status", "sample_path", "resolve_treebank", "is_registry_name",
           "MAX_TREEBANK_BYTES"]

logger = logging.getLogger("probes")

#: The registry shipped inside the package (package data, so wheels carry it).
REGISTRY_PATH = Path(__file__).resolve().parent / "registry.json"
#: The sample corpus shipped inside the package: ``sample-<split>.conllu`` for each split.
SAMPLE_DIR = Path(__file__).resolve().parent / "sample"
SAMPLE_SPLITS = ("dev", "test")
_TOFU = "checksums.json"
#: The largest treebank file :func:`add_to_cache` copies into the cache (4 GiB: far above any UD treebank file,
#: the largest of which hold a few hundred MB), so a huge or endless file is refused before it is hashed.
MAX_TREEBANK_BYTES = 4 << 30
#: The largest registry or ``checksums.json`` read (both hold a few KB).
_MAX_JSON_BYTES = 4 << 20


def load_registry(path: str | Path | None = None) -> dict[str, Any]:
    """The registry as a dict (``{"treebanks": {name: {"files": {split: {url, sha256}}}}}``).

    Raises:
        ConfigError: the file is missing, not a regular file, too large, not JSON, or not of that shape (the
            message names the file and the entry).
    """
    path = Path(path) if path is not None else REGISTRY_PATH
    try:
        registry = load_json(path, what="the treebank registry (JSON)", max_bytes=_MAX_JSON_BYTES)
    except InputError as exc:
        raise ConfigError(exc.reason, path=path, line=exc.line) from None
    _check_registry(registry, path)
    return registry


def _check_registry(registry: Any, path: Path) -> None:
    """Refuse a registry not of the shape ``{"treebanks": {NAME: {"files": {SPLIT: {"url": URL, ...}}}}}``."""
    banks = registry.get("treebanks") if isinstance(registry, dict) else None
    if not isinstance(banks, dict):
        raise ConfigError('expected a JSON object with a "treebanks" object, found none', path=path)
    for name, bank in banks.items():
        files = bank.get("files") if isinstance(bank, dict) else None
        if not isinstance(files, dict):
            raise ConfigError(f'treebanks.{name}: expected an object with a "files" object', path=path)
        for split, entry in files.items():
            if not (isinstance(entry, dict) and isinstance(entry.get("url"), str) and entry["url"].strip("/")
                    and isinstance(entry.get("sha256") or "", str)):
                raise ConfigError(f'treebanks.{name}.files.{split}: expected an object with a "url" string (and a '
                                  f'"sha256" string), found {json.dumps(entry)[:80]}', path=path)


def cache_dir() -> Path:
    """Where downloads are kept: ``$PROBES_CACHE`` or the platform cache folder."""
    env = os.environ.get("PROBES_CACHE")
    if env:
        return Path(env)
    import pooch

    return Path(pooch.os_cache("probes"))


def is_registry_name(spec: str | Path) -> bool:
    """True for ``ud:<treebank>:<split>`` and ``sample:<split>`` names."""
    return str(spec).startswith(("ud:", "sample:"))


def sample_path(split: str) -> Path:
    """The packaged sample corpus file of ``split`` (``"dev"`` or ``"test"``).

    Raises:
        ConfigError: an unknown split, or the file is missing (a broken install).
    """
    if split not in SAMPLE_SPLITS:
        raise ConfigError(f"the sample corpus has no split {split!r}; it has {list(SAMPLE_SPLITS)} "
                          "(e.g. sample:dev)")
    path = SAMPLE_DIR / f"sample-{split}.conllu"
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (the sample corpus shipped with probes; reinstall probes)")
    return path

def _files(registry: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The ``files`` table of treebank ``name``; ConfigError naming the known treebanks."""
    banks = registry.get("treebanks", {})
    if name not in banks:
        raise ConfigError(f"unknown treebank {name!r}; the registry has {sorted(banks)}")
    return banks[name].get("files", {})


def _entry(registry: Mapping[str, Any], name: str, split: str) -> Mapping[str, Any]:
    """The registry entry (``url``, ``sha256``) of ``split`` of treebank ``name``."""
    files = _files(registry, name)
    if split not in files:
        raise ConfigError(f"treebank {name!r} has no split {split!r}; it has {sorted(files)}")
    return files[split]


def _recorded(tofu_path: Path) -> dict[str, str]:
    """The hashes recorded at first use (``checksums.json`` of a treebank's cache folder; none when absent).

    Raises:
        InputError: the file is not a regular file, too large, not JSON or not an object of url -> sha256
            strings (named, with how to start afresh).
    """
    if not os.path.lexists(tofu_path):
        return {}
    try:
        recorded = load_json(tofu_path, what="the cache's recorded checksums (JSON)", max_bytes=_MAX_JSON_BYTES)
    except InputError as exc:
        raise InputError(f"{exc.reason}; delete it (and the files beside it) to start afresh", path=tofu_path,
                         line=exc.line) from None
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        raise InputError("expected a JSON object of url -> sha256 strings, found "
                         f"{type(recorded).__name__ if not isinstance(recorded, dict) else 'other values'}; delete "
                         "it (and the files beside it) to start afresh", path=tofu_path)
    return recorded


def _record(tofu_path: Path, url: str, digest: str) -> None:
    recorded = _recorded(tofu_path)
    recorded[url] = digest
    tofu_path.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")


def fetch_treebank(
    name: str, split: str, *, registry: Mapping[str, Any] | None = None, cache: str | Path | None = None
) -> Path:
    """Download (once) and return the local path of ``split`` of treebank ``name``.

    A file already in the cache (downloaded, or put there by :func:`add_to_cache`) is checked and
    used without the network.

    Raises:
        ConfigError: unknown treebank or split.
        InputError: the download failed or its checksum does not match.
    """
    import pooch

    registry = registry if registry is not None else load_registry()
    entry = _entry(registry, name, split)
    url: str = entry["url"]
    folder = (Path(cache) if cache is not None else cache_dir()) / name
    folder.mkdir(parents=True, exist_ok=True)
    fname = url.rsplit("/", 1)[-1]
    tofu_path = folder / _TOFU
    expected = entry.get("sha256") or _recorded(tofu_path).get(url)
    pooch.get_logger().setLevel(logging.WARNING)
    try:
        path = Path(pooch.retrieve(url, known_hash=f"sha256:{expected}" if expected else None,
                                   fname=fname, path=folder, progressbar=False))
    except ValueError as exc:  # pooch: hash mismatch
        (folder / fname).unlink(missing_ok=True)
        source = "the registry" if entry.get("sha256") else f"the hash recorded at first download in {tofu_path}"
        raise InputError(f"{url}: checksum mismatch: expected sha256 {expected} from {source}; the downloaded "
                         f"file differs (pooch: {exc})") from exc
    except Exception as exc:  # requests / urllib errors: one clear line
        raise InputError(f"{url}: download failed ({type(exc).__name__}: {exc}); with a local copy of the "
                         f"file, `probes data add ud:{name}:{split} FILE` puts it in the cache, offline") from exc
    if not expected:
        digest = file_sha256(path)
        _record(tofu_path, url, digest)
        logger.warning("%s: the registry has no checksum for %s:%s; trusting this first download "
                       "(sha256 %s, recorded in %s)", url, name, split, digest, tofu_path)
    return path


@dataclass(frozen=True)
class CachedFile:
    """A registry file in the cache: its name (``ud:en_ewt:dev``), path and sha256, and whether that
    hash is the registry's (``pinned``) or was recorded at first use."""

    name: str
    path: Path
    sha256: str
    pinned: bool


def _parse_name(text: str) -> tuple[str, str | None]:
    """``ud:NAME:SPLIT`` -> ``(NAME, SPLIT)``, ``ud:NAME`` -> ``(NAME, None)``."""
    parts = text.split(":")
    if text.startswith("sample:"):
        raise ConfigError(f"{text} ships inside the package; only ud:<treebank>:<split> names are cached")
    if parts[0] != "ud" or len(parts) not in (2, 3) or not all(parts[1:]):
        raise ConfigError(f"treebank name {text!r} must look like ud:<treebank>:<split> (or ud:<treebank> "
                          "with a folder), e.g. ud:en_ewt:dev")
    return parts[1], parts[2] if len(parts) == 3 else None


def _add_one(name: str, split: str, source: Path, entry: Mapping[str, Any], cache: Path) -> CachedFile:
    """Check ``source`` against the registry (or what the cache recorded) and copy it into the cache."""
    url: str = entry["url"]
    spec, digest, pinned = f"ud:{name}:{split}", file_sha256(source), entry.get("sha256")
    folder = cache / name
    tofu_path = folder / _TOFU
    if pinned and digest != pinned:
        raise InputError(f"{source}: sha256 {digest} is not the registry's {pinned} for {spec}: not the "
                         f"file the registry names ({url})")
    recorded = _recorded(tofu_path).get(url)
    if not pinned and recorded and recorded != digest:
        raise InputError(f"{source}: sha256 {digest} differs from the {recorded} recorded for {spec} in "
                         f"{tofu_path}; delete {folder} to replace the cached copy")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / url.rsplit("/", 1)[-1]
    if not (target.exists() and target.samefile(source)):
        partial = target.with_name(target.name + ".part")
        shutil.copyfile(source, partial)
        partial.replace(target)
    if not pinned:
        _record(tofu_path, url, digest)
    return CachedFile(spec, target, digest, bool(pinned))


def add_to_cache(spec: str, source: str | Path, *, registry: Mapping[str, Any] | None = None,
                 cache: str | Path | None = None) -> list[CachedFile]:
    """Fill the cache from local files, with no network (``probes data add``).

    ``spec`` is ``ud:NAME:SPLIT`` with ``source`` a file (or a folder holding the registry's file
    name for it), or ``ud:NAME`` with ``source`` a folder: every split whose file (e.g.
    ``en_ewt-ud-dev.conllu``) is in the folder is added. A file must match the registry's sha256 where
    it pins one; otherwise its hash is recorded and later uses are checked against it.

    Returns:
        One :class:`CachedFile` per file added.

    Raises:
        ConfigError: a bad name, or a file given for a whole treebank.
        InputError: a missing source, or a file whose sha256 is not the one pinned or recorded.
    """
    registry = registry if registry is not None else load_registry()
    name, split = _parse_name(str(spec))
    files = _files(registry, name)
    splits = [split] if split is not None else sorted(files)
    entries = {s: _entry(registry, name, s) for s in splits}
    source = Path(_no_nul(source, "a treebank file or folder"))
    if not os.path.lexists(source):
        raise InputError(f"{source}: no such file or folder")
    if _is_folder(source):
        found = {s: source / e["url"].rsplit("/", 1)[-1] for s, e in entries.items()}
        found = {s: p for s, p in found.items() if os.path.lexists(p)}
        if not found:
            wanted = ", ".join(e["url"].rsplit("/", 1)[-1] for e in entries.values())
            raise InputError(f"{source}: holds none of the files of {spec} ({wanted})")
    elif split is None:
        _local_copy(source)  # a missing path, a device or a pipe says so first
        raise ConfigError(f"{source} is a file: name its split, e.g. ud:{name}:{sorted(files)[0]}")
    else:
        found = {split: source}
    for path in found.values():
        _local_copy(path)
    folder = Path(cache) if cache is not None else cache_dir()
    return [_add_one(name, s, p, entries[s], folder) for s, p in found.items()]


def _no_nul(path: str | Path, what: str) -> str | Path:
    """``path``, unless it holds a NUL (which no file name can): then one InputError saying so."""
    if "\x00" in str(path):
        raise InputError(f"expected {what}, found a NUL character in the path {str(path)!r}")
    return path


def _is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder (False for a path that cannot be looked at: the file check then says why)."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _local_copy(path: Path) -> int:
    """The size of the local treebank copy ``path``, if it is a regular file of at most
    :data:`MAX_TREEBANK_BYTES`; else one InputError naming it (missing, a device such as /dev/zero, a pipe,
    a NUL in the path, too large), before a byte is read."""
    size = file_size(path, what="a treebank file")
    if size > MAX_TREEBANK_BYTES:
        raise InputError(f"expected a treebank file of at most {MAX_TREEBANK_BYTES:,} bytes, found {size:,} bytes",
                         path=path)
    return size


def cache_status(*, registry: Mapping[str, Any] | None = None,
                 cache: str | Path | None = None) -> list[tuple[str, Path | None]]:
    """``(ud:NAME:SPLIT, cached path or None)`` for every file of the registry, in registry order."""
    registry = registry if registry is not None else load_registry()
    folder = Path(cache) if cache is not None else cache_dir()
    out: list[tuple[str, Path | None]] = []
    for name, bank in registry.get("treebanks", {}).items():
        for split, entry in bank.get("files", {}).items():
            path = folder / name / entry["url"].rsplit("/", 1)[-1]
            out.append((f"ud:{name}:{split}", path if path.is_file() else None))
    return out


def resolve_treebank(spec: str | Path, *, registry: Mapping[str, Any] | None = None,
                     cache: str | Path | None = None) -> Path:
    """A treebank argument as a local path: a file, ``sample:<split>`` (packaged), or
    ``ud:<name>:<split>`` fetched through the registry (or found in the cache)."""
    text = str(spec)
    if text.startswith("sample:"):
        return sample_path(text.split(":", 1)[1])
    if is_registry_name(text):
        parts = text.split(":")
        if len(parts) != 3 or not all(parts[1:]):
            raise ConfigError(f"treebank name {text!r} must look like ud:<treebank>:<split>, e.g. ud:en_ewt:dev")
        return fetch_treebank(parts[1], parts[2], registry=registry, cache=cache)
    path = Path(_no_nul(text, "a treebank file"))
    if not os.path.lexists(path):
        raise InputError(f"{path}: no such file")
    if _is_folder(path):
        raise InputError(f"{path}: is a folder; expected a treebank file (.conllu, .conllx, .spacy)")
    return regular_file(path, what="a treebank file")
