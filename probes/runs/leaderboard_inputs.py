"""The inputs of a leaderboard: treebanks run through a model, or attention stores, split by split.

:func:`from_model` reads the treebanks and streams each split's pairs through the model (under ``torchrun``,
this rank's contiguous block of each split); :func:`from_stores` streams stored attention instead.
Both return what the run record says of the inputs.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.analysis.base import item_id
from probes.errors import ConfigError
from probes.runs.inputs import (
    ExtractionOptions,
    data_name,
    gather_report,
    load_extractor,
    open_attention_store,
    read_sentences,
    store_name,
)
from probes.runs.record import data_record, store_record
from probes.world import World, block_record

if TYPE_CHECKING:
    from probes.corpora.types import Sentence
    from probes.extraction.attention import WordAttention
    from probes.extraction.extractor import AttentionExtractor

__all__ = ["from_model", "from_stores", "tracked", "store_pairs", "check_same_extraction"]

Pairs = Iterable[tuple["Sentence", "WordAttention"]]

#: What the extractors of a report store and a selection store must share.
_SAME_EXTRACTION = ("model", "weights_sha256", "layers", "heads", "from_pool", "dtype")


def sentences_of(data: str | Path | Sequence[Sentence], what: str, limit: int | None = None
               ) -> tuple[list[Sentence], dict[str, Any], str]:
    """``(sentences, data record, name)`` of a treebank spec, or of sentences given as such (the first ``limit``)."""
    if isinstance(data, (str, Path)):
        path, sentences = read_sentences(data, limit)
        return sentences, data_record(str(data), path, len(sentences)), data_name(data)
    sentences = list(data)[:limit]
    return sentences, {"sentences": len(sentences)}, f"{what} data"


def from_model(model: str | Path | AttentionExtractor, treebank: str | Path | Sequence[Sentence],
                select_on: str | Path | Sequence[Sentence] | None, *, batch_size: int, device: str | None,
                progress: bool, on_long: str = "skip", limit: int | None = None, world: World | None = None,
                extraction: ExtractionOptions | None = None) -> tuple[Any, Any, str, str | None, dict[str, Any]]:
    """Run a model on treebanks: ``(report_pairs, select_pairs, report_name, select_name, facts)``
    (``facts``: the run record's fields on the model and data).

    Every rank reads the whole treebanks (the record describes them whole) and runs the model on its own
    contiguous block of each split only (``facts["blocks"]``: which one, see :func:`probes.world.block_record`).
    """
    from probes.extraction.loading import resolve_model

    world = world or World()
    given = not isinstance(model, (str, Path))
    model_path = None if given else resolve_model(str(model))  # a bad name fails before any reading
    t_read = time.perf_counter()
    report_sents, report_data, report_name = sentences_of(treebank, "report", limit)
    select = sentences_of(select_on, "selection", limit) if select_on is not None else None
    reading_s = time.perf_counter() - t_read
    t_load = time.perf_counter()
    extractor = model if given else load_extractor(model_path, batch_size=batch_size, device=device,  # type: ignore
                                                   progress=progress, on_long=on_long, extraction=extraction)
    model_load_s = time.perf_counter() - t_load
    facts: dict[str, Any] = {
        "model": str(model) if not given else extractor.name_or_path, "model_path": model_path,
        "extractor": extractor.info(),
        "data": {"report": report_data, **({"select": select[1]} if select else {})},
        "options": {"batch_size": extractor.batch_size if given else batch_size,
                    "device": str(extractor.device) if given else device},
        "timings": {"reading_s": reading_s, "model_load_s": model_load_s},
        "extraction_report": extractor.report,  # replaced by its final dict after the run
        "extraction": {},  # per split: ids skipped / windowed, filled while the split runs
        "blocks": {split: block_record(world, [item_id(s, k) for k, s in enumerate(sents)])
                   for split, sents in (("select", select[0] if select else None), ("report", report_sents))
                   if sents is not None},
    }
    select_pairs = (tracked(extractor, world.take(select[0]), f"selection split ({select[2]})", facts["extraction"],
                            "select", world) if select else None)
    report_pairs = tracked(extractor, world.take(report_sents), _bar_label(report_name, select is not None),
                           facts["extraction"], "report", world)
    return report_pairs, select_pairs, report_name, select[2] if select else None, facts


def _bar_label(name: str, separate: bool) -> str:
    """The progress bar's label of the report data's pass: without a separate selection split that pass also
    covers the selection (its half, or the same data), so it is not called the report split."""
    return f"report split ({name})" if separate else f"{name} (selection and report)"


def tracked(extractor: AttentionExtractor, sentences: Sequence[Sentence], desc: str,
             sink: dict[str, Any], split: str, world: World | None = None) -> Pairs:
    """``extractor``'s pairs of ``sentences`` (progress bar labelled ``desc``); when they are all out,
    ``sink[split]`` gets the ids it skipped or ran in windows during this split (its report is cumulative),
    every rank's in rank order (a collective step, taken in the producer before it ends the stream)."""
    from probes.extraction.extractor import PairStream

    report = extractor.report
    pairs = extractor.iter_attention(sentences, desc=desc, total=len(sentences))  # lazy: runs when iterated

    def noted() -> Pairs:
        before = {key: len(getattr(report, key)) for key in ("skipped", "windowed", "over_budget")}  # cumulative
        yield from pairs
        mine = {key: list(getattr(report, key)[n:]) for key, n in before.items()}
        sink[split] = {**gather_report(mine, world or World()), "max_tokens": report.max_tokens,
                       "max_attention_mb": report.max_attention_mb}

    return PairStream.like(noted(), pairs)


def store_pairs(store: Any, desc: str, progress: bool, limit: int | None, world: World | None = None,
                 block: dict[str, Any] | None = None) -> Pairs:
    """A store's pairs (its first ``limit``; in a distributed run this rank's contiguous block of them, by index),
    with a progress bar labelled ``desc``; ``block`` gets the block's range, count and first and last ids."""
    import sys

    from tqdm.auto import tqdm

    total = len(store) if limit is None else min(len(store), limit)
    mine = (world or World()).shard(total)
    if block is not None:
        block.update(range=[mine.start, mine.stop], count=len(mine), first=None, last=None)
    pairs = tqdm(itertools.islice(iter(store), mine.start, mine.stop), desc=desc, total=len(mine), unit="sent",
                 file=sys.stderr, disable=not progress, dynamic_ncols=True, mininterval=0.5)
    for k, (sentence, attention) in enumerate(pairs):
        if block is not None:
            block["last"] = item_id(sentence, mine.start + k)
            block["first"] = block["first"] or block["last"]
        yield sentence, attention


def store_extraction(store: Any) -> dict[str, Any]:
    """What the extractor that wrote ``store`` skipped or ran in windows (the store's report)."""
    report = getattr(store, "report", {}) or {}
    return {"skipped": list(report.get("skipped", ())), "windowed": list(report.get("windowed", ())),
            "max_tokens": (getattr(store, "info", {}) or {}).get("max_tokens")}


def from_stores(store: Any, select_store: Any, progress: bool = False, limit: int | None = None,
                 world: World | None = None) -> tuple[Any, Any, str, str | None, dict[str, Any]]:
    """Read attention stores: ``(report_pairs, select_pairs, report_name, select_name, facts)`` (the first
    ``limit`` sentences of each; in a distributed run this rank's block of them, ``facts["blocks"]``)."""
    report = store if hasattr(store, "info") else open_attention_store(store, "--store")
    select = None
    if select_store is not None:
        select = select_store if hasattr(select_store, "info") else open_attention_store(select_store,
                                                                                          "--select-store")
        check_same_extraction(report.info, select.info)
    info = report.info
    blocks: dict[str, dict[str, Any]] = {"select": {}, "report": {}} if select is not None else {"report": {}}
    facts = {"model": info.get("model", str(report.path)), "extractor": dict(info),
             "data": {"report": store_record(report), **({"select": store_record(select)} if select else {})},
             "options": {"batch_size": None, "device": None}, "blocks": blocks,
             "extraction": {"report": store_extraction(report),
                            **({"select": store_extraction(select)} if select is not None else {})}}
    select_pairs = (store_pairs(select, f"selection split ({store_name(select)}, store)", progress, limit, world,
                                blocks["select"]) if select is not None else None)
    label = _bar_label(f"{store_name(report)}, store", select is not None)
    return (store_pairs(report, label, progress, limit, world, blocks["report"]), select_pairs,
            store_name(report), store_name(select) if select is not None else None, facts)


def check_same_extraction(report: Mapping[str, Any], select: Mapping[str, Any]) -> None:
    """ConfigError naming only the extraction options in which two stores differ."""
    differ = [k for k in _SAME_EXTRACTION if report.get(k) != select.get(k)]
    if differ:
        shown = "; ".join(f"{k} {report.get(k)!r} vs {select.get(k)!r}" for k in differ)
        raise ConfigError(f"--store and --select-store hold attention of different models or options: {shown}")
