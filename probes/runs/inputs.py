"""A run's inputs from how people name them: treebank specs, attention stores, model names.

Shared by every pipeline (leaderboard, probes, coreference ...) and by the CLI that calls them. This is the
boundary where a run's options are checked and its model resolved, once each: :func:`check_extraction` turns the
extractor options into checked :class:`~probes.extraction.checks.ExtractorSettings`, :func:`model_source` resolves
a model name into a :class:`ModelSource`, and everything below takes those values as they are.
"""

from __future__ import annotations

import itertools
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.errors import ConfigError, InputError
from probes.runs.extraction_options import ExtractionOptions
from probes.world import World

if TYPE_CHECKING:
    from probes.corpora.types import Sentence
    from probes.extraction.checks import ExtractorSettings
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.loading import ResolvedModel

__all__ = ["read_sentences", "open_attention_store", "load_extractor", "ExtractionOptions", "ModelSource",
           "check_run_options", "check_extraction", "model_source", "data_name", "store_name", "gather_report"]


@dataclass(frozen=True)
class ModelSource:
    """A model a run loads by name: resolved once, its extractor settings checked once (:func:`model_source`).

    Attributes:
        model: the resolved name (:class:`~probes.extraction.loading.ResolvedModel`).
        settings: the checked extractor options (:func:`check_extraction`).
        revision: the hub revision to load (None: the default branch).
    """

    model: ResolvedModel
    settings: ExtractorSettings
    revision: str | None = None

    def load(self) -> AttentionExtractor:
        """The extractor of the model (nothing is checked or resolved again)."""
        from probes.extraction.extractor import AttentionExtractor

        return AttentionExtractor.load(self.model, self.settings, revision=self.revision)


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


def check_run_options(*, n_resamples: int | None = None, limit: int | None = None) -> None:
    """Check a run's counts before any work: one ConfigError for the first bad one.

    ``n_resamples``: bootstrap resamples (>= 1); ``limit``: items per split (>= 1); None: not given.
    """
    for name, value, least in (("n_resamples", n_resamples, 1), ("limit", limit, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least):
            raise ConfigError(f"{name} must be a whole number >= {least} (--{name.replace('_', '-')}), found {value!r}")


def check_extraction(extraction: ExtractionOptions | None = None, **extractor: Any) -> ExtractorSettings:
    """The extractor options of a run that loads its model by name, checked once, before any work.

    ``extraction`` (dtype, batch and memory bounds, device map; default the extractor's own) and ``extractor``
    (the other options of :func:`probes.extraction.checks.check_options`: ``device``, ``batch_size``, ``on_long``
    ...; one named in both takes the value named here) are checked in one :meth:`ExtractionOptions.check`.

    Raises:
        ConfigError: a bad option, or a device map under ``torchrun`` (every rank loads its own model).
    """
    settings = (extraction or ExtractionOptions()).check(**extractor)
    if settings.device_map is not None and World.current().distributed:
        raise ConfigError("device_map spreads one model over several devices, but under torchrun every rank loads "
                          "its own model: give each rank one device (--device cuda: the rank's own GPU) or run "
                          "without torchrun")
    return settings


def model_source(model: str | Path, settings: ExtractorSettings, revision: str | None = None) -> ModelSource:
    """``model`` (a folder, ``package:NAME``, ``random-init:BASE@SEED`` ... or hub name) resolved once, with the
    run's checked ``settings``: what the run loads its extractor from.

    Raises:
        ConfigError: a name that resolves to no model (:func:`probes.extraction.loading.resolve_model`).
    """
    from probes.extraction.loading import ResolvedModel

    return ModelSource(ResolvedModel.of(model, revision), settings, revision)


def load_extractor(model: str | Path, *, batch_size: int = 32, device: str | None = None, progress: bool = True,
                   revision: str | None = None, extraction: ExtractionOptions | None = None,
                   **options: Any) -> AttentionExtractor:
    """An extractor for a model folder, ``package:NAME`` or hub name, in one step: the options checked
    (:func:`check_extraction`), the model resolved (:func:`model_source`), then loaded.

    ``extraction``: dtype, batch and memory bounds and device map (default :class:`ExtractionOptions`,
    the extractor's defaults); ``options``: the extractor's other options (``on_long``, ``keep_tokens``,
    ``layers`` ...; an option of ``extraction`` named here too takes the value named here).

    Raises:
        ConfigError: a bad option, or a device map under ``torchrun`` (every rank loads its own model).
    """
    settings = check_extraction(extraction, batch_size=batch_size, device=device, progress=progress, **options)
    return model_source(model, settings, revision).load()


def data_name(spec: str | Path) -> str:
    """How a data spec is named in outputs: registry specs whole, files by their name."""
    text = str(spec)
    return text if text.startswith(("ud:", "sample:")) else Path(text).name


def store_name(store: Any) -> str:
    """A store's data name: its source file's name if recorded, else the folder's."""
    source = store.info.get("source")
    return Path(source).name if source else Path(store.path).name


def gather_report(report: dict[str, Any], world: World) -> dict[str, Any]:
    """An extractor's report (``ExtractionReport.as_dict()``) of every rank as one, on every rank.

    Counts are added, id lists joined in rank order (the input order: ranks hold contiguous blocks), the
    rest (``max_tokens``) taken from rank 0; a collective step in a distributed run, the report itself otherwise.
    """
    if not world.distributed:
        return report
    ranks = world.gather(report)
    out = dict(ranks[0])
    for key, value in ranks[0].items():
        if isinstance(value, list):
            out[key] = [i for rank in ranks for i in rank[key]]
        elif isinstance(value, int) and not isinstance(value, bool) and key.startswith("n_"):
            out[key] = sum(int(rank[key]) for rank in ranks)
    return out
