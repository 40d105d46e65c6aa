"""The inputs of a leaderboard: treebanks run through a model, or attention stores, split by split.

:class:`LeaderboardRequest` is one request, checked (the model resolved, its extractor options checked, the data
named), made once by :func:`probes.runs.leaderboard.leaderboard`; :func:`from_model` reads the treebanks of a
:class:`FromModel` and streams each split's pairs through the model (under ``torchrun``, this rank's contiguous
block of each split); :func:`from_stores` streams the stored attention of :class:`FromStores` instead. Both
return :class:`LeaderboardInputs`: the pairs, and what the run record says of the model and the data.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.analysis.base import item_id
from probes.corpora.overlap import DataOverlap, measure_overlap, refuse_overlap
from probes.errors import ConfigError
from probes.progress import stage
from probes.runs.inputs import ModelSource, data_name, gather_report, open_attention_store, read_sentences, store_name
from probes.runs.record import data_record, store_record
from probes.runs.relation_names import check_relations
from probes.world import World, block_record

if TYPE_CHECKING:
    from probes.corpora.types import Sentence
    from probes.extraction.attention import WordAttention
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.outputs import ExtractionReport

__all__ = ["LeaderboardRequest", "FromModel", "FromStores", "LeaderboardInputs", "from_model", "from_stores",
           "tracked", "store_pairs", "check_same_extraction"]

Pairs = Iterable[tuple["Sentence", "WordAttention"]]


@dataclass(frozen=True)
class FromModel:
    """Attention from a model run on treebanks.

    Attributes:
        model: the model to load (resolved, its options checked) or a ready extractor.
        treebank, select_on: the data to report on and a separate selection split (None: none), each a file, a
            registry spec or sentences.
        batch_size, device: the extractor options as given, for the record.
    """

    model: ModelSource | AttentionExtractor
    treebank: str | Path | Sequence[Sentence]
    select_on: str | Path | Sequence[Sentence] | None = None
    batch_size: int = 32
    device: str | None = None


@dataclass(frozen=True)
class FromStores:
    """Attention read from stores (``probes extract``): paths or open stores; ``select_store`` None: none."""

    store: Any
    select_store: Any = None


@dataclass(frozen=True)
class LeaderboardRequest:
    """One leaderboard request, checked before any work: where the attention comes from, the selection, the limit.

    Attributes:
        attention: from a model (:class:`FromModel`) or from stores (:class:`FromStores`).
        same: choose heads on the report data itself (Clark et al.'s selection).
        limit: sentences read of each split (None: all).
        progress: progress bars (on the main rank only).
        relations: the relations asked for, checked against the report data's as soon as it is read.
    """

    attention: FromModel | FromStores
    same: bool = False
    limit: int | None = None
    progress: bool = False
    relations: tuple[str, ...] = ()

    def inputs(self, world: World | None = None) -> LeaderboardInputs:
        """The pairs of each split, and what the record says of them (:func:`from_model`, :func:`from_stores`)."""
        if isinstance(self.attention, FromModel):
            return from_model(self.attention, self.limit, world, relations=self.relations)
        return from_stores(self.attention, self.progress, self.limit, world, relations=self.relations)


@dataclass(frozen=True)
class LeaderboardInputs:
    """What :func:`from_model` and :func:`from_stores` give: the pairs of each split and what the run record says
    of the model and the data.

    Attributes:
        report_pairs, select_pairs: the pairs of each split (select None: no separate selection split).
        report_name, select_name: the splits' names in outputs.
        model: the model as named (an extractor's or a store's name for it).
        extractor: the extractor's ``info()`` (a store's: the info it recorded).
        data: per split, the data record.
        batch_size, device: the extractor options as given (None for stores).
        blocks: per split, this rank's block of it (filled as a store is read).
        extraction: per split, the ids skipped or run in windows: a store's, or filled while a split runs.
        loaded: whether a model ran (then the record also names ``model_path`` and the ``timings`` of reading and
            loading, and ``extraction_report`` is the extractor's report, read once the passes are done).
        model_path: the resolved model (None for an extractor given ready).
        timings: reading and model loading, in seconds.
        extraction_report: the extractor's report (None for stores).
        overlap: what a separate selection split shares with the report data (None: no separate split).
    """

    report_pairs: Pairs
    select_pairs: Pairs | None
    report_name: str
    select_name: str | None
    model: str
    extractor: Mapping[str, Any]
    data: Mapping[str, Any]
    batch_size: int | None
    device: str | None
    blocks: Mapping[str, Any]
    extraction: dict[str, Any]
    loaded: bool = False
    model_path: str | None = None
    timings: Mapping[str, float] | None = None
    extraction_report: ExtractionReport | None = None
    overlap: DataOverlap | None = None

    @property
    def causal(self) -> bool:
        """Whether the attention is a causal decoder's."""
        return bool(self.extractor.get("causal"))

    def record_fields(self, limit: int | None) -> dict[str, Any]:
        """The run record's fields on the model and the data, in ``run.json``'s order (``limit``: as given)."""
        fields: dict[str, Any] = {"model": self.model}
        if self.loaded:
            fields["model_path"] = self.model_path
        fields.update(extractor=self.extractor, data=self.data,
                      options={"batch_size": self.batch_size, "device": self.device, "limit": limit})
        if self.loaded:
            fields["timings"] = dict(self.timings or {})
        if self.overlap is not None:
            fields["overlap"] = self.overlap.to_dict()
        return fields


#: What the extractors of a report store and a selection store must share.
_SAME_EXTRACTION = ("model", "weights_sha256", "layers", "heads", "from_pool", "dtype", "attention_source")


def sentences_of(data: str | Path | Sequence[Sentence], what: str, limit: int | None = None, progress: bool = False
                 ) -> tuple[list[Sentence], dict[str, Any], str]:
    """``(sentences, data record, name)`` of a treebank spec, or of sentences given as such (the first ``limit``);
    ``progress``: say so on stderr before a treebank is read."""
    if isinstance(data, (str, Path)):
        stage(f"reading treebank {data_name(data)}", progress)
        path, sentences = read_sentences(data, limit)
        return sentences, data_record(str(data), path, len(sentences)), data_name(data)
    sentences = list(data)[:limit]
    return sentences, {"sentences": len(sentences)}, f"{what} data"


def from_model(request: FromModel, limit: int | None = None, world: World | None = None,
               relations: Sequence[str] = ()) -> LeaderboardInputs:
    """Run the request's model (one to load, or a ready extractor) on the first ``limit`` sentences of its treebanks.

    Every rank reads the whole treebanks (the record describes them whole) and runs the model on its own
    contiguous block of each split only (``blocks``: which one, see :func:`probes.world.block_record`).
    """
    world = world or World()
    source = request.model
    t_read = time.perf_counter()
    shown = source.settings.progress if isinstance(source, ModelSource) else source.progress  # the stage lines
    report_sents, report_data, report_name = sentences_of(request.treebank, "report", limit, shown)
    check_relations(relations, report_sents, report_name)  # before the model loads
    select = sentences_of(request.select_on, "selection", limit, shown) if request.select_on is not None else None
    overlap = held_out(select[0], report_sents, select[2], report_name, "--select-on") if select else None
    reading_s = time.perf_counter() - t_read
    t_load = time.perf_counter()
    if isinstance(source, ModelSource):
        extractor = source.load()
        model, model_path, batch_size, device = source.model.spec, source.model.path, request.batch_size, request.device
    else:  # a ready extractor: named and described by itself
        extractor = source
        model, model_path, batch_size, device = extractor.name_or_path, None, extractor.batch_size, str(extractor.device)
    model_load_s = time.perf_counter() - t_load
    extraction: dict[str, Any] = {}  # per split: ids skipped / windowed, filled while the split runs
    select_pairs = (tracked(extractor, world.take(select[0]), f"selection split ({select[2]})", extraction,
                            "select", world) if select else None)
    report_pairs = tracked(extractor, world.take(report_sents), _bar_label(report_name, select is not None),
                           extraction, "report", world)
    return LeaderboardInputs(
        report_pairs, select_pairs, report_name, select[2] if select else None,
        model=model, extractor=extractor.info(), data={"report": report_data, **({"select": select[1]} if select else {})},
        batch_size=batch_size, device=device, blocks={split: block_record(world, [item_id(s, k) for k, s in enumerate(sents)])
                for split, sents in (("select", select[0] if select else None), ("report", report_sents))
                if sents is not None},
        extraction=extraction, loaded=True, model_path=model_path,
        timings={"reading_s": reading_s, "model_load_s": model_load_s}, extraction_report=extractor.report,
        overlap=overlap)


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

    def noted() -> Iterator[tuple[Sentence, WordAttention]]:
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
    from probes.progress import iterate

    total = len(store) if limit is None else min(len(store), limit)
    mine = (world or World()).shard(total)
    if block is not None:
        block.update(range=[mine.start, mine.stop], count=len(mine), first=None, last=None)
    pairs = iterate(itertools.islice(iter(store), mine.start, mine.stop), desc, total=len(mine), unit="sent",
                    progress=progress)
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


def from_stores(request: FromStores, progress: bool = False, limit: int | None = None, world: World | None = None,
                relations: Sequence[str] = ()) -> LeaderboardInputs:
    """Read the request's attention stores (the first ``limit`` sentences of each; in a distributed run this rank's
    block of them, ``blocks``)."""
    report = request.store if hasattr(request.store, "info") else open_attention_store(request.store, "--store")
    if relations:  # the stored sentences only, without their attention
        check_relations(relations, itertools.islice(report.sentences(), limit), store_name(report))
    select = None
    if request.select_store is not None:
        select = (request.select_store if hasattr(request.select_store, "info")
                  else open_attention_store(request.select_store, "--select-store"))
        check_same_extraction(report.info, select.info)
    overlap = None
    if select is not None:  # the stored sentences only, without their attention
        overlap = held_out(list(itertools.islice(select.sentences(), limit)),
                           list(itertools.islice(report.sentences(), limit)), f"{Path(select.path).name} "
                           f"({store_name(select)})", f"{Path(report.path).name} ({store_name(report)})", "--select-store")
    info = report.info
    blocks: dict[str, dict[str, Any]] = {"select": {}, "report": {}} if select is not None else {"report": {}}
    select_pairs = (store_pairs(select, f"selection split ({store_name(select)}, store)", progress, limit, world,
                                blocks["select"]) if select is not None else None)
    label = _bar_label(f"{store_name(report)}, store", select is not None)
    return LeaderboardInputs(
        store_pairs(report, label, progress, limit, world, blocks["report"]), select_pairs,
        store_name(report), store_name(select) if select is not None else None,
        model=info.get("model", str(report.path)), extractor=dict(info),
        data={"report": store_record(report), **({"select": store_record(select)} if select else {})},
        batch_size=None, device=None, blocks=blocks,
        extraction={"report": store_extraction(report),
                    **({"select": store_extraction(select)} if select is not None else {})}, overlap=overlap)


def held_out(select: Sequence[Sentence], report: Sequence[Sentence], select_name: str, report_name: str,
             flag: str) -> DataOverlap:
    """What the selection data share with the report data; ConfigError when they overlap (not held out)."""
    overlap = measure_overlap(select, report)
    refuse_overlap(overlap, select_name, report_name, flag=flag)
    return overlap


def check_same_extraction(report: Mapping[str, Any], select: Mapping[str, Any]) -> None:
    """ConfigError naming only the extraction options in which two stores differ."""
    from probes.extraction.store import attention_source_of

    report, select = attention_source_of(report), attention_source_of(select)
    differ = [k for k in _SAME_EXTRACTION if report.get(k) != select.get(k)]
    if differ:
        shown = "; ".join(f"{k} {report.get(k)!r} vs {select.get(k)!r}" for k in differ)
        raise ConfigError(f"--store and --select-store hold attention of different models or options: {shown}")
