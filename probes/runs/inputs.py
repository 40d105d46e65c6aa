"""A run's inputs from how people name them: treebank specs, attention stores, model names.

Shared by every pipeline (leaderboard, probes, coreference) and by the CLI that calls them.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.errors import ConfigError, InputError
from probes.world import World

if TYPE_CHECKING:
    from probes.corpora.types import Sentence
    from probes.extraction.extractor import AttentionExtractor

__all__ = ["read_sentences", "open_attention_store", "load_extractor", "extraction_options", "check_run_options",
           "data_name", "store_name", "gather_report"]


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


#: Extractor options set for a block of code by :func:`extraction_options` (the CLI's ``--dtype``,
#: ``--max-batch-tokens``, ``--max-attention-mb``, ``--device-map``).
_EXTRACTION: ContextVar[dict[str, Any]] = ContextVar("probes_extraction_options", default={})
#: The options :func:`extraction_options` takes.
EXTRACTION_OPTIONS = ("dtype", "max_batch_tokens", "max_attention_mb", "device_map")


@contextmanager
def extraction_options(**options: Any) -> Iterator[None]:
    """Inside the block, every :func:`load_extractor` call uses these options unless it names them itself.

    How the CLI hands ``dtype``, ``max_batch_tokens``, ``max_attention_mb`` (None: no budget) and
    ``device_map`` (None: not given) to the run functions (leaderboard, coreference, atlas, probing),
    which load their extractor by name. Options left at None are not passed, except ``max_attention_mb``.

    Raises:
        ConfigError: an option not in ``EXTRACTION_OPTIONS``.
    """
    unknown = sorted(set(options) - set(EXTRACTION_OPTIONS))
    if unknown:
        raise ConfigError(f"extraction options: expected some of {', '.join(EXTRACTION_OPTIONS)}, found "
                          f"{', '.join(unknown)}")
    given = {k: v for k, v in options.items() if v is not None or k == "max_attention_mb"}
    token = _EXTRACTION.set({**_EXTRACTION.get(), **given})
    try:
        yield
    finally:
        _EXTRACTION.reset(token)


def load_extractor(model: str | Path, *, batch_size: int = 32, device: str | None = None, progress: bool = True,
                   **options: Any) -> AttentionExtractor:
    """An extractor for a model folder, ``package:NAME`` or hub name (``options`` go to ``from_pretrained``).

    ``options`` include ``dtype``, ``max_batch_tokens``, ``max_attention_mb`` and ``device_map`` (see
    :class:`~probes.extraction.extractor.AttentionExtractor`); those not given come from an enclosing
    :func:`extraction_options` block, else the extractor's defaults.
    """
    from probes.extraction.extractor import AttentionExtractor, check_options
    from probes.extraction.loading import resolve_model

    options = {**_EXTRACTION.get(), **options}
    if options.get("device_map") is not None and World.current().distributed:
        raise ConfigError("device_map spreads one model over several devices, but under torchrun every rank loads "
                          "its own model: give each rank one device (--device cuda: the rank's own GPU) or run "
                          "without torchrun")
    check_options(batch_size=batch_size, device=device,
                  **{k: v for k, v in options.items() if k in ("dtype", "from_pool", "max_length", "on_long",
                                                                "max_batch_tokens", "max_attention_mb")})
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
