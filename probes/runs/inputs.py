"""A run's inputs from how people name them: treebank specs, attention stores, model names.

Shared by every pipeline (leaderboard, probes, coreference) and by the CLI that calls them.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.errors import InputError

if TYPE_CHECKING:
    from probes.corpora.types import Sentence
    from probes.extraction.extractor import AttentionExtractor

__all__ = ["read_sentences", "open_attention_store", "load_extractor", "data_name", "store_name"]


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


def load_extractor(model: str | Path, *, batch_size: int = 32, device: str | None = None, progress: bool = True,
                   **options: Any) -> AttentionExtractor:
    """An extractor for a model folder, ``package:NAME`` or hub name (``options`` go to ``from_pretrained``)."""
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.loading import resolve_model

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
