"""A run's inputs from how people name them: treebank specs, attention stores, model names.

Shared by every pipeline (leaderboard, probes, coreference) and by the CLI that calls them.
"""

from __future__ import annotations

import itertools
import numbers
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.errors import ConfigError, InputError

if TYPE_CHECKING:
    from probes.corpora.types import Sentence
    from probes.extraction.extractor import AttentionExtractor

__all__ = ["read_sentences", "open_attention_store", "load_extractor", "check_run_options", "data_name",
           "store_name"]


def read_sentences(spec: str | Path, limit: int | None = None) -> tuple[Path, list[Sentence]]:
    """``(path, sentences)`` of a treebank file or registry spec (``ud:NAME:SPLIT``, ``sample:SPLIT``).

    ``limit`` keeps only the first sentences (all when None).
    """
    from probes.corpora import read_treebank
    from probes.corpora.registry import resolve_treebank

    path = Path(resolve_treebank(spec))
    sentences = read_treebank(path)
    return path, list(sentences if limit is None else itertools.islice(sentences, limit))


def open_attention_store(path: str | Path, flag: str = "store") -> Any:
    """The attention store at ``path``; InputError naming ``flag`` when there is none."""
    from probes.extraction.store import open_store

    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such folder ({flag} expects an attention store written by `probes extract`)")
    return open_store(path)


def check_run_options(*, n_resamples: int | None = None, limit: int | None = None, **extractor: Any) -> None:
    """Check a run's options before any work (reading data, loading the model): one ConfigError for the first bad one.

    ``extractor``: options of :func:`probes.extraction.extractor.check_options` (``device``, ``dtype``,
    ``batch_size``, ``on_long`` ...); ``n_resamples``: bootstrap resamples (>= 1); ``limit``: items per split.
    """
    from probes.extraction.extractor import check_options

    for name, value, least in (("n_resamples", n_resamples, 1), ("limit", limit, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least):
            raise ConfigError(f"{name} must be a whole number >= {least} (--{name.replace('_', '-')}), found {value!r}")
    check_options(**extractor)


def load_extractor(model: str | Path, *, batch_size: int = 32, device: str | None = None, progress: bool = True,
                   **options: Any) -> AttentionExtractor:
    """An extractor for a model folder, ``package:NAME`` or hub name (``options`` go to ``from_pretrained``)."""
    from probes.extraction.extractor import AttentionExtractor, check_options
    from probes.extraction.loading import resolve_model

    check_options(batch_size=batch_size, device=device,
                  **{k: v for k, v in options.items() if k in ("dtype", "from_pool", "max_length", "on_long")})
    return AttentionExtractor.from_pretrained(resolve_model(str(model)), batch_size=batch_size, device=device,
                                              progress=progress, **options)


def data_name(spec: str | Path) -> str:
    """How a data spec is named in outputs: registry specs whole, files by their name."""
    text = str(spec)
    return text if text.startswith(("ud:", "sample:")) else Path(text).name


def store_name(store: Any) -> str:
    """A store's data name: its source file's name if recorded, else the folder's."""
    source = store.info.get("source")
    return Path(source).name if source else Path(store.path).name
