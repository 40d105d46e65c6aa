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
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from probes.errors import ConfigError, InputError
from probes.checksum import file_sha256

__all__ = ["REGISTRY_PATH", "SAMPLE_DIR", "SAMPLE_SPLITS", "load_registry", "cache_dir", "fetch_treebank",
           "sample_path", "resolve_treebank", "is_registry_name"]

logger = logging.getLogger("probes")

#: The registry shipped inside the package (package data, so wheels carry it).
REGISTRY_PATH = Path(__file__).resolve().parent / "registry.json"
#: The sample corpus shipped inside the package: ``sample-<split>.conllu`` for each split.
SAMPLE_DIR = Path(__file__).resolve().parent / "sample"
SAMPLE_SPLITS = ("dev", "test")
_TOFU = "checksums.json"


def load_registry(path: str | Path | None = None) -> dict[str, Any]:
    """The registry as a dict (``{"treebanks": {name: {"files": {split: {url, sha256}}}}}``)."""
    path = Path(path) if path is not None else REGISTRY_PATH
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (the treebank registry)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from exc


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

def fetch_treebank(
    name: str, split: str, *, registry: Mapping[str, Any] | None = None, cache: str | Path | None = None
) -> Path:
    """Download (once) and return the local path of ``split`` of treebank ``name``.

    Raises:
        ConfigError: unknown treebank or split.
        InputError: the download failed or its checksum does not match.
    """
    import pooch

    registry = registry if registry is not None else load_registry()
    banks = registry.get("treebanks", {})
    if name not in banks:
        raise ConfigError(f"unknown treebank {name!r}; the registry has {sorted(banks)}")
    files = banks[name].get("files", {})
    if split not in files:
        raise ConfigError(f"treebank {name!r} has no split {split!r}; it has {sorted(files)}")
    entry = files[split]
    url: str = entry["url"]
    folder = Path(cache) if cache is not None else cache_dir()
    folder = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    fname = url.rsplit("/", 1)[-1]
    tofu_path = folder / _TOFU
    recorded: dict[str, str] = json.loads(tofu_path.read_text(encoding="utf-8")) if tofu_path.is_file() else {}
    expected = entry.get("sha256") or recorded.get(url)
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
        raise InputError(f"{url}: download failed ({type(exc).__name__}: {exc})") from exc
    if not expected:
        digest = file_sha256(path)
        recorded[url] = digest
        tofu_path.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
        logger.warning("%s: the registry has no checksum for %s:%s; trusting this first download "
                       "(sha256 %s, recorded in %s)", url, name, split, digest, tofu_path)
    return path


def resolve_treebank(spec: str | Path, *, registry: Mapping[str, Any] | None = None,
                     cache: str | Path | None = None) -> Path:
    """A treebank argument as a local path: a file, ``sample:<split>`` (packaged), or
    ``ud:<name>:<split>`` fetched through the registry."""
    text = str(spec)
    if text.startswith("sample:"):
        return sample_path(text.split(":", 1)[1])
    if is_registry_name(text):
        parts = text.split(":")
        if len(parts) != 3 or not all(parts[1:]):
            raise ConfigError(f"treebank name {text!r} must look like ud:<treebank>:<split>, e.g. ud:en_ewt:dev")
        return fetch_treebank(parts[1], parts[2], registry=registry, cache=cache)
    path = Path(text)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder; expected a treebank file (.conllu, .conllx, .spacy)")
    return path
