"""The inputs of a coreference or bridging run, checked once before any work: the model and the corpora.

:func:`anaphora_request` checks a request (counts, the extractor options of a model loaded by name, windows, the
corpora and their annotation), resolves the model name once and returns an :class:`AnaphoraRequest`, which
:mod:`probes.runs.coreference` runs as it is.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.corpora.overlap import DataOverlap, measure_overlap, refuse_overlap
from probes.errors import ConfigError
from probes.runs.extraction_options import ExtractionOptions
from probes.runs.inputs import ModelSource, check_extraction, check_run_options, model_source

if TYPE_CHECKING:
    from probes.corpora.types import Sentence
    from probes.extraction.extractor import AttentionExtractor

__all__ = ["AnaphoraRequest", "anaphora_request", "selection_mode"]


@dataclass(frozen=True)
class AnaphoraRequest:
    """One coreference or bridging request, checked.

    Attributes:
        model: the model to load (resolved, its options checked) or a ready extractor.
        corpus: the corpus scored (a file; a registry spec resolved to its file).
        select_on: a separate selection corpus (a file), or None.
        mode: where heads are chosen (:func:`selection_mode`): ``split``, ``same`` or ``separate``.
        window, stride: tokens per window and between window starts (None: the model's maximum, half a window).
        limit: documents read of each corpus (None: all).
        overlap: what the selection corpus shares with the scored one (None: no separate selection corpus).
    """

    model: ModelSource | AttentionExtractor
    corpus: Path
    select_on: Path | None
    mode: str
    window: int | None = None
    stride: int | None = None
    limit: int | None = None
    overlap: DataOverlap | None = None

    def overlap_record(self) -> dict[str, Any]:
        """``{"overlap": ...}`` for the run record when heads are chosen on a separate corpus, else nothing."""
        return {} if self.overlap is None else {"overlap": self.overlap.to_dict()}

    def extractor(self) -> AttentionExtractor:
        """The extractor: the one given, or the model loaded (nothing is checked or resolved again)."""
        return self.model.load() if isinstance(self.model, ModelSource) else self.model


def selection_mode(select_on: str | Path | None) -> str:
    """``split`` (None), ``same`` (the word ``same``) or ``separate`` (a corpus)."""
    return "split" if select_on is None else "same" if str(select_on) == "same" else "separate"


def anaphora_request(model: Any, corpus: str | Path, select_on: str | Path | None, *, bridges: bool,
                     window: int | None, stride: int | None, limit: int | None, n_resamples: int,
                     revision: str | None, extraction: ExtractionOptions | None, **extractor: Any) -> AnaphoraRequest:
    """The request checked before any work (each check once): the counts, the extractor options of a model loaded
    by name (``extraction`` and ``extractor``: see :func:`probes.runs.inputs.check_extraction`), the windows, the
    corpora (each must hold coreference, or bridging, annotation), then the model name resolved.

    Raises:
        ConfigError: the first bad option or corpus, named.
    """
    from probes.corpora.registry import resolve_treebank

    check_run_options(limit=limit, n_resamples=n_resamples)
    settings = check_extraction(extraction, **extractor) if isinstance(model, (str, Path)) else None
    if window is not None and window < 3 or stride is not None and stride < 1:
        raise ConfigError(f"--window/--stride: expected a window over 2 tokens and a positive stride, "
                          f"found {window} and {stride}")
    mode = selection_mode(select_on)
    path = Path(resolve_treebank(corpus))  # a file, or ud:en_gum:SPLIT from the registry
    select = Path(resolve_treebank(select_on)) if mode == "separate" and select_on is not None else None
    for each in (path, select):
        if each is not None:
            _check_annotated(each, bridges=bridges)
    overlap = _held_out(select, path, limit) if select is not None else None
    source = model if settings is None else model_source(model, settings, revision)
    return AnaphoraRequest(source, path, select, mode, window, stride, limit, overlap)


def _held_out(select: Path, corpus: Path, limit: int | None) -> DataOverlap:
    """What the first ``limit`` documents of the selection corpus share with those of the scored corpus, by their
    sentences' words and ids and by document ids; ConfigError when they overlap (heads would not be held out)."""
    from probes.corpora import read_documents

    def sentences(path: Path) -> list[Sentence]:
        return [s for doc in itertools.islice(read_documents(path), limit) for s in doc.sentences]

    overlap = measure_overlap(sentences(select), sentences(corpus))
    refuse_overlap(overlap, select.name, corpus.name)
    return overlap


def _check_annotated(corpus: Path, *, bridges: bool) -> None:
    """Fail before the model loads when ``corpus`` has no coreference (or bridging) annotation at all."""
    from probes.corpora import read_documents

    what = "bridging links (Bridge= in MISC)" if bridges else "coreference mentions (Entity= in MISC)"
    for doc in read_documents(corpus):
        if doc.bridges if bridges else doc.mentions:
            return
    raise ConfigError(f"expected {what}, found none; give a GUM / CorefUD CoNLL-U file", path=corpus)
