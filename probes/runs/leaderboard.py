"""Per-relation head leaderboards with honest selection, intervals and baselines.

Computing rows (:func:`leaderboard`) is kept apart from writing them
(:func:`write_leaderboard`). Rules, stated once:

* **Selection.** Each relation's best ``(layer, head, direction)`` is chosen on the
  *selection* scores (``--select-on``, e.g. a dev split) and reported on the
  *report* scores (e.g. test). Without a selection split both are the same data,
  as in Clark et al. (2019), and every output says so. Ties: higher accuracy, then
  lower layer, head, direction.
* **Baselines.** The fixed offset (Clark, ``-3..+2``, clipped) and the most
  frequent relative position (Voita et al.) are both *learned* on the selection
  split and *scored* on the report split; the stronger of the two on the
  selection split is the row's "best baseline".
* **Intervals.** 95% percentile bootstrap over sentences (1000 resamples, seed 0)
  for the head's accuracy, and a *paired* bootstrap (the same resampled
  sentences for head and baseline) of the margin head minus best baseline. A head
  ``beats_baseline`` when that margin's interval lies above 0.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.extraction.attention import WordAttention
from probes.analysis.baselines import OffsetBaseline
from probes.corpora.types import Sentence
from probes.errors import ConfigError
from probes.heads.naming import INDEXING_NOTE, head_name
from probes.reports.tables import markdown_table, text_table, write_csv, write_json
from probes.analysis.dependency import HeadAccuracy
from probes.analysis.scores import ALL, ALL_NOPUNCT, BaselineScores, HeadScores, redundant_pools

__all__ = [
    "SplitScores",
    "score_pairs",
    "run_leaderboard",
    "LeaderboardRow",
    "leaderboard",
    "listed_relations",
    "score_rows",
    "format_leaderboard",
    "write_leaderboard",
    "LEADERBOARD_COLUMNS",
]

logger = logging.getLogger("probes")

#: Pairs in flight between the extraction thread and the scorer (bounds memory).
_QUEUE_PAIRS = 256

#: Columns of ``leaderboard.csv`` (layer and head 1-based, accuracies as fractions).
LEADERBOARD_COLUMNS: tuple[str, ...] = (
    "relation", "count", "layer", "head", "head_name", "direction", "accuracy", "ci_low", "ci_high",
    "baseline_offset", "baseline_accuracy", "position_baseline", "position_accuracy", "best_baseline",
    "margin", "margin_ci_low", "margin_ci_high", "beats_baseline", "selection_accuracy", "selected_on",
)


@dataclass(frozen=True)
class LeaderboardRow:
    """One relation's best head, as reported. ``layer``/``head`` are 0-based; :meth:`as_dict` is 1-based.

    Attributes:
        relation, count: the relation and its number of words in the report data.
        layer, head, direction: the head selected on the selection data.
        accuracy, ci_low, ci_high: its accuracy on the report data and 95% interval.
        baseline_offset, baseline_accuracy: Clark's fixed offset (chosen on the selection data),
            scored on the report data.
        position_baseline, position_accuracy: Voita's most frequent relative position
            (0 = ROOT), learned on the selection data, scored on the report data.
        best_baseline: ``"offset"`` or ``"position"``, the stronger on the selection data.
        margin, margin_ci_low, margin_ci_high: accuracy minus best baseline, paired interval.
        beats_baseline: ``margin_ci_low > 0``.
        selection_accuracy: the head's accuracy on the selection data.
        selected_on: name of the selection data.
    """

    relation: str
    count: int
    layer: int
    head: int
    direction: str
    accuracy: float
    ci_low: float
    ci_high: float
    baseline_offset: int
    baseline_accuracy: float
    position_baseline: int
    position_accuracy: float
    best_baseline: str
    margin: float
    margin_ci_low: float
    margin_ci_high: float
    beats_baseline: bool
    selection_accuracy: float
    selected_on: str

    def as_dict(self) -> dict[str, Any]:
        """Row for people: layer and head 1-based, ``head_name`` like ``8-11``."""
        out = asdict(self)
        out["layer"], out["head"] = self.layer + 1, self.head + 1
        out["head_name"] = head_name(self.layer, self.head)
        return out


@dataclass(frozen=True)
class SplitScores:
    """Head scores and baselines of one data split, with where the time went.

    Scoring runs concurrently with extraction (see :func:`score_pairs`), so the two times
    overlap; only the time scoring adds after the last attention arrives counts as added.

    Attributes:
        heads, baselines: the results (same sentences, same order).
        extraction_s: wall time until the last attention arrived (model or store).
        scoring_s: wall time scoring added after that (the tail, plus ``compute``).
        scoring_busy_s: time spent inside the accumulators, overlapped with extraction.
    """

    heads: HeadScores
    baselines: BaselineScores
    extraction_s: float
    scoring_s: float
    scoring_busy_s: float = 0.0


_DONE = object()


def _produce(pairs: Iterable[Any], out: queue.Queue[Any], finished: list[float]) -> None:
    """Producer thread: put every pair (then ``_DONE``, or the exception raised) on ``out``."""
    try:
        for pair in pairs:
            out.put(pair)
    except BaseException as exc:  # handed to the consumer, which re-raises it
        out.put(exc)
    finally:
        finished.append(time.perf_counter())
        out.put(_DONE)


def score_pairs(pairs: Iterable[tuple[Sentence, WordAttention]], *, poss_rule: bool = True) -> SplitScores:
    """Feed ``(sentence, attention)`` pairs to a :class:`HeadAccuracy` and an :class:`OffsetBaseline`.

    The pairs are produced (the model runs) in a worker thread while this thread scores them,
    through a bounded queue, so scoring overlaps extraction: torch and numpy release the GIL
    in their kernels. Sentences the head scorer skips (truncated by the extractor) are left
    out of the baselines too, so both cover the same sentences for paired intervals.
    """
    heads = HeadAccuracy(poss_rule=poss_rule)
    base = OffsetBaseline(poss_rule=poss_rule)
    inbox: queue.Queue[Any] = queue.Queue(maxsize=_QUEUE_PAIRS)
    finished: list[float] = []
    start = time.perf_counter()
    worker = threading.Thread(target=_produce, args=(pairs, inbox, finished), name="probes-extract", daemon=True)
    worker.start()
    busy = 0.0
    while True:
        item = inbox.get()
        if item is _DONE:
            break
        if isinstance(item, BaseException):
            worker.join()
            raise item
        t1 = time.perf_counter()
        sentence, attention = item
        before = heads.n_units
        heads.update(sentence, attention)
        if heads.n_units > before:
            base.update(sentence)
        busy += time.perf_counter() - t1
    worker.join()
    t2 = time.perf_counter()
    result_heads, result_base = heads.compute(), base.compute()
    end = time.perf_counter()
    busy += end - t2
    extraction_done = finished[0] if finished else t2
    return SplitScores(result_heads, result_base, extraction_done - start, end - extraction_done, busy)


def listed_relations(
    scores: HeadScores, *, relations: Sequence[str] | None = None, min_count: int = 100,
    exclude: Sequence[str] = ("root", "punct"),
) -> list[str]:
    """Relations a leaderboard lists: ``ALL``, ``ALL-nopunct``, then others by count.

    Explicit ``relations`` are listed whatever their count (ConfigError if unseen);
    otherwise every relation with at least ``min_count`` words except ``exclude``
    (and pooled ``base:*`` names that merely repeat ``base``).
    """
    if relations:
        missing = [r for r in relations if r not in scores.relations]
        if missing:
            raise ConfigError(f"relations {missing} do not occur in the data; found {sorted(scores.relations)}")
        return list(relations)
    drop = set(exclude) | redundant_pools(scores.relations)
    drop |= {f"{r}:*" for r in exclude}
    head = [r for r in (ALL, ALL_NOPUNCT) if r in scores.relations]
    rest = [r for r in scores.relations if r not in drop and r not in head and scores.count(r) >= min_count]
    rest.sort(key=lambda r: (-scores.count(r), r))
    return head + rest


def _resample_counts(n_units: int, n_resamples: int, random_state: int | None) -> npt.NDArray[np.float64]:
    """``(n_resamples, n_units)`` multinomial resampling weights (as :func:`probes.heads.intervals.bootstrap_ci`)."""
    rng = np.random.default_rng(random_state)
    return rng.multinomial(n_units, np.full(n_units, 1.0 / n_units), size=n_resamples).astype(np.float64)


def _quantiles(draws: npt.NDArray[np.float64], alpha: float) -> npt.NDArray[np.float64]:
    """``(2, k)`` the ``alpha`` and ``1 - alpha`` quantiles of ``(n_resamples, k)`` draws, NaN draws ignored."""
    if np.isnan(draws).any():  # a resample without words of a relation (rare ones only)
        return np.nanquantile(draws, [alpha, 1.0 - alpha], axis=0)
    return np.quantile(draws, [alpha, 1.0 - alpha], axis=0)  # same numbers, much faster


def _position_units(base: BaselineScores, rels: Sequence[int], positions: Sequence[int]) -> npt.NDArray[np.int64]:
    """``(n_units, k)`` per-sentence hits of always predicting ``positions[c]`` for relation ``rels[c]``."""
    out = np.zeros((base.n_units, len(rels)), dtype=np.int64)
    table = base.unit_positions if base.unit_positions is not None else np.zeros((0, 4), np.int64)
    for col, (r, p) in enumerate(zip(rels, positions)):
        rows = table[(table[:, 1] == r) & (table[:, 2] == p)]
        np.add.at(out[:, col], rows[:, 0], rows[:, 3])
    return out


def leaderboard(
    report: HeadScores,
    report_baselines: BaselineScores,
    *,
    select: HeadScores | None = None,
    select_baselines: BaselineScores | None = None,
    relations: Sequence[str] | None = None,
    min_count: int = 100,
    exclude: Sequence[str] = ("root", "punct"),
    report_name: str = "report data",
    select_name: str | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    random_state: int | None = 0,
) -> list[LeaderboardRow]:
    """Best head per relation, selected on ``select`` (default: ``report``), reported on ``report``.

    Args:
        report, report_baselines: scores and baselines of the data reported (same sentences, same order).
        select, select_baselines: scores and baselines of the selection data; default the report data.
        relations, min_count, exclude: which relations to list (see :func:`listed_relations`).
        report_name, select_name: names written in the rows and outputs.
        n_resamples, confidence, random_state: bootstrap settings.

    Returns:
        One row per listed relation that also occurs in the selection data.
    """
    if (select is None) != (select_baselines is None):
        raise ConfigError("give both select and select_baselines, or neither")
    select = select or report
    select_baselines = select_baselines or report_baselines
    selected_on = select_name or report_name
    if report.units is None or report_baselines.units is None:
        raise ConfigError("the report scores were computed with keep_units=False; intervals need per-sentence counts")
    if report.n_units != report_baselines.n_units:
        raise ConfigError(f"head scores cover {report.n_units} sentences but baselines cover "
                          f"{report_baselines.n_units}; feed both the same sentences")
    names = [r for r in listed_relations(report, relations=relations, min_count=min_count, exclude=exclude)
             if r in select.relations and r in select_baselines.relations]
    if not names:
        return []
    picks, offsets, positions, better = [], [], [], []
    for rel in names:
        d, layer, head, _ = select.best(rel)
        picks.append((d, layer, head))
        k, k_acc = select_baselines.best_offset(rel)
        p, p_acc = select_baselines.most_frequent_position(rel)
        offsets.append(k)
        positions.append(p)
        better.append("position" if p_acc > k_acc else "offset")
    rel_idx = [report.index(r) for r in names]
    head_c, total = report.units.columns(rel_idx, picks)  # (n_units, k) each
    b_idx = [report_baselines.index(r) for r in names]
    off_c, _ = report_baselines.units.columns(b_idx, [(report_baselines.offsets.index(k),) for k in offsets])
    pos_c = _position_units(report_baselines, b_idx, positions)
    base_c = np.where(np.array(better) == "position", pos_c, off_c)  # (n_units, k)

    # One set of resampled sentences for every interval, so head and baseline are paired
    # (the same draws as probes.heads.intervals.bootstrap_ci with the same seed).
    weights = _resample_counts(report.n_units, n_resamples, random_state)  # (n_resamples, n_units)
    denominator = weights @ total  # (n_resamples, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc_draws = (weights @ head_c) / denominator  # (n_resamples, k)
        margin_draws = (weights @ (head_c - base_c)) / denominator  # (n_resamples, k)
    alpha = (1.0 - confidence) / 2.0
    low, high = _quantiles(acc_draws, alpha)
    m_low, m_high = _quantiles(margin_draws, alpha)

    rows = []
    for c, rel in enumerate(names):
        d, layer, head = picks[c]
        n = int(total[:, c].sum())
        acc = head_c[:, c].sum() / n
        k_acc = off_c[:, c].sum() / n
        p_acc = pos_c[:, c].sum() / n
        base_acc = p_acc if better[c] == "position" else k_acc
        sel_r = select.index(rel)
        rows.append(LeaderboardRow(
            relation=rel, count=n, layer=select.layers[layer], head=select.heads[head],
            direction=select.directions[d], accuracy=float(acc), ci_low=float(low[c]), ci_high=float(high[c]),
            baseline_offset=int(offsets[c]), baseline_accuracy=float(k_acc),
            position_baseline=int(positions[c]), position_accuracy=float(p_acc), best_baseline=better[c],
            margin=float(acc - base_acc), margin_ci_low=float(m_low[c]), margin_ci_high=float(m_high[c]),
            beats_baseline=bool(m_low[c] > 0),
            selection_accuracy=float(select.correct[d, layer, head, sel_r] / select.total[sel_r]),
            selected_on=selected_on,
        ))
    return rows


def score_rows(report: HeadScores, select: HeadScores | None = None) -> list[dict[str, Any]]:
    """The full table: every relation x direction x layer x head, 1-based, for ``scores.csv``."""
    acc = report.accuracy()  # (D, L, H, R)
    sel_acc = select.accuracy() if select is not None else None
    rows = []
    for r, rel in enumerate(report.relations):
        s = select.relations.index(rel) if select is not None and rel in select.relations else None
        for d, direction in enumerate(report.directions):
            for li, layer in enumerate(report.layers):
                for hi, head in enumerate(report.heads):
                    row = {"relation": rel, "count": int(report.total[r]), "layer": layer + 1, "head": head + 1,
                           "head_name": head_name(layer, head), "direction": direction,
                           "correct": int(report.correct[d, li, hi, r]), "accuracy": float(acc[d, li, hi, r])}
                    if sel_acc is not None:
                        row["selection_accuracy"] = float(sel_acc[d, li, hi, s]) if s is not None else math.nan
                    rows.append(row)
    return rows


_DISPLAY = ("relation", "count", "head_name", "direction", "accuracy", "ci", "baseline", "margin", "beats")
_HEADERS = ("relation", "count", "head", "direction", "acc %", "95% CI", "best baseline %", "margin", "sig.")


def _display_rows(rows: Sequence[LeaderboardRow]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        d = row.as_dict()
        base = (f"{100 * row.position_accuracy:.1f} (pos {_signed(row.position_baseline)})"
                if row.best_baseline == "position" else
                f"{100 * row.baseline_accuracy:.1f} (offset {_signed(row.baseline_offset)})")
        d.update(ci=f"{100 * row.ci_low:.1f}-{100 * row.ci_high:.1f}", baseline=base,
                 margin=f"{100 * row.margin:+.1f}", beats="yes" if row.beats_baseline else "no",
                 direction=row.direction)
        out.append(d)
    return out


def _signed(k: int) -> str:
    return "ROOT" if k == 0 else f"{k:+d}"


def format_leaderboard(rows: Sequence[LeaderboardRow], fmt: str = "text") -> str:
    """Rows as a terminal table (``text``) or GitHub Markdown (``markdown``); accuracies in percent."""
    if fmt not in ("text", "markdown"):
        raise ConfigError(f"format must be 'text' or 'markdown', found {fmt!r}")
    table = text_table if fmt == "text" else markdown_table
    return table(_display_rows(rows), _DISPLAY, headers=_HEADERS, percent=("accuracy",))


def _selection_sentence(record: Mapping[str, Any]) -> str:
    sel, rep = record.get("selected_on"), record.get("reported_on")
    if sel and sel != rep:
        return f"Heads and baseline offsets were selected on {sel} and are reported on {rep}."
    return (f"Heads and baseline offsets were selected and reported on the same data ({rep}), "
            "as in Clark et al. (2019); accuracies are therefore optimistic. Use --select-on for held-out selection.")


def write_leaderboard(
    rows: Sequence[LeaderboardRow],
    report: HeadScores,
    out_dir: str | Path,
    *,
    select: HeadScores | None = None,
    record: Mapping[str, Any] | None = None,
    figures: bool = True,
) -> dict[str, Path]:
    """Write ``leaderboard.{md,csv,json}``, ``scores.csv``, figures and ``run.json`` into ``out_dir``.

    ``record`` (model, data, options, timings ...) goes into ``run.json`` together with
    the time spent here (``timings.writing_s``). Returns the paths written, by name.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    record = dict(record or {})
    dict_rows = [r.as_dict() for r in rows]
    paths: dict[str, Path] = {}
    paths["leaderboard.csv"] = write_csv(dict_rows, out / "leaderboard.csv", LEADERBOARD_COLUMNS)
    paths["leaderboard.json"] = write_json({"indexing": INDEXING_NOTE, "rows": dict_rows}, out / "leaderboard.json")
    score_table = score_rows(report, select)
    columns = list(score_table[0]) if score_table else ["relation"]
    paths["scores.csv"] = write_csv(score_table, out / "scores.csv", columns)
    if figures and rows:
        paths.update(_write_figures(rows, report, out, record))
    md = [f"# Head leaderboard: {record.get('model', 'model')} on {record.get('reported_on', 'data')}", "",
          _selection_sentence(record), "",
          f"Accuracy: how often the head's most-attended other word is the gold head (Clark et al. 2019 §4.2); "
          f"{INDEXING_NOTE}. 95% intervals: bootstrap over sentences. \"sig.\" = the paired interval of the "
          "margin over the best baseline lies above 0. Baselines: fixed offset (Clark) or most frequent "
          "relative position (Voita), learned on the selection data.", "",
          format_leaderboard(rows, "markdown")]
    if "overview.png" in paths:
        md += ["", "![overview](figures/overview.png)"]
    paths["leaderboard.md"] = out / "leaderboard.md"
    paths["leaderboard.md"].write_text("\n".join(md) + "\n", encoding="utf-8")
    timings = dict(record.get("timings", {}))
    timings["writing_s"] = time.perf_counter() - t0
    record["timings"] = timings
    record["indexing"] = INDEXING_NOTE
    record["files"] = sorted(str(p.relative_to(out)) for p in paths.values()) + ["run.json"]
    paths["run.json"] = write_json(record, out / "run.json")
    return paths


def _write_figures(rows: Sequence[LeaderboardRow], report: HeadScores, out: Path,
                   record: Mapping[str, Any]) -> dict[str, Path]:
    """One heatmap per listed relation (its selected direction) and one overview figure."""
    from probes.reports.figures import HeatmapWriter, overview_figure

    acc = report.accuracy()  # (D, L, H, R)
    data = record.get("reported_on", "")
    selected = record.get("selected_on", data)
    panels: dict[str, npt.NDArray[np.float64]] = {}
    subtitles = []
    paths: dict[str, Path] = {}
    note = f"accuracy on {data}; red box: head selected on {selected}"
    for row in rows:
        d = report.directions.index(row.direction)
        panels[row.relation] = acc[d, :, :, report.index(row.relation)]  # (L, H)
        subtitles.append(f"{row.relation} ({row.direction})")
    # The overview (matplotlib) is drawn in a second thread while this one paints the per-relation
    # heatmaps (numpy + Pillow, which release the GIL while they encode).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="probes-overview") as pool:
        overview = pool.submit(overview_figure, panels, out / "figures" / "overview.png",
                               suptitle=f"Head accuracy per relation ({data})", ncols=6, subtitles=subtitles)
        with HeatmapWriter(acc.shape[1], acc.shape[2], note=note) as writer:
            for row in rows:
                safe = row.relation.replace(":", "_").replace("*", "all")
                best_base = row.position_accuracy if row.best_baseline == "position" else row.baseline_accuracy
                paths[f"figures/{safe}.png"] = writer.write(
                    panels[row.relation], out / "figures" / f"{safe}.png",
                    mark=(report.layers.index(row.layer), report.heads.index(row.head)),
                    title=f"{row.relation} ({row.direction}), n={row.count}: head {head_name(row.layer, row.head)} "
                          f"{100 * row.accuracy:.1f}%, best baseline {100 * best_base:.1f}%")
        paths["overview.png"] = overview.result()
    return paths


def run_leaderboard(
    report_pairs: Iterable[tuple[Sentence, WordAttention]],
    out_dir: str | Path,
    *,
    select_pairs: Iterable[tuple[Sentence, WordAttention]] | None = None,
    report_name: str = "report data",
    select_name: str | None = None,
    record: Mapping[str, Any] | None = None,
    relations: Sequence[str] | None = None,
    min_count: int = 100,
    exclude: Sequence[str] = ("root", "punct"),
    poss_rule: bool = True,
    figures: bool = True,
) -> tuple[list[LeaderboardRow], dict[str, Path], dict[str, Any]]:
    """The whole leaderboard pipeline: score, select, compute intervals, write every output.

    Returns:
        ``(rows, paths, record)``: the rows, the files written by name, and the run record
        (also written to ``run.json``) with ``timings`` for each phase.
    """
    record = dict(record or {})
    if figures:  # matplotlib's import overlaps the model run instead of adding to the writing time
        from probes.reports.figures import preload

        threading.Thread(target=preload, name="probes-preload", daemon=True).start()
    select = score_pairs(select_pairs, poss_rule=poss_rule) if select_pairs is not None else None
    report = score_pairs(report_pairs, poss_rule=poss_rule)
    t0 = time.perf_counter()
    rows = leaderboard(
        report.heads, report.baselines,
        select=select.heads if select else None, select_baselines=select.baselines if select else None,
        relations=relations, min_count=min_count, exclude=exclude,
        report_name=report_name, select_name=select_name if select else None,
    )
    rows_s = time.perf_counter() - t0
    extraction_s = report.extraction_s + (select.extraction_s if select else 0.0)
    scoring_s = report.scoring_s + (select.scoring_s if select else 0.0) + rows_s
    record.update(
        reported_on=report_name,
        selected_on=select_name if select else report_name,
        held_out_selection=select is not None,
        counts={
            "report": {"sentences": report.heads.n_units, "words": int(report.heads.total[report.heads.index(ALL)])
                       if ALL in report.heads.relations else 0, "skipped_truncated": report.heads.n_skipped},
            **({"select": {"sentences": select.heads.n_units,
                           "words": int(select.heads.total[select.heads.index(ALL)])
                           if ALL in select.heads.relations else 0,
                           "skipped_truncated": select.heads.n_skipped}} if select else {}),
            "relations_listed": len(rows),
        },
        options={**dict(record.get("options", {})), "poss_rule": poss_rule, "min_count": min_count,
                 "exclude": list(exclude), "relations": list(relations) if relations else None,
                 "bootstrap": {"n_resamples": 1000, "confidence": 0.95, "random_state": 0, "unit": "sentence"},
                 "tie_break": "accuracy desc, then layer, head, direction asc"},
        timings={"extraction_s": extraction_s, "scoring_s": scoring_s,
                 "scoring_busy_s": report.scoring_busy_s + (select.scoring_busy_s if select else 0.0)},
        memory={"per_sentence_counts_bytes": report.heads.units.nbytes if report.heads.units is not None else 0},
    )
    paths = write_leaderboard(rows, report.heads, out_dir, select=select.heads if select else None,
                              record=record, figures=figures)
    final = json.loads(paths["run.json"].read_text(encoding="utf-8"))
    timings = final["timings"]
    timings["overhead_fraction"] = (timings["scoring_s"] + timings["writing_s"]) / max(extraction_s, 1e-9)
    timings["note"] = ("extraction_s: wall time until the last attention arrived (model or store); scoring runs "
                       "concurrently with extraction, so scoring_s is the wall time it added after that (the tail, "
                       "compute, selection and intervals) and scoring_busy_s the time spent in the accumulators, "
                       "mostly overlapped; writing_s: tables, run record and figures; "
                       "overhead_fraction = (scoring_s + writing_s) / extraction_s")
    write_json(final, paths["run.json"])
    return rows, paths, final
