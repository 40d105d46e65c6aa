"""The best head per relation, chosen on one set of data and reported on another, with selection-aware tests.

Rules, stated once:

* **Selection** (:data:`SELECTION_MODES`). Each relation's best ``(layer, head, direction)``
  is chosen on the *selection* scores and reported on the *report* scores:

  - ``"split"`` (the default of :func:`probes.runs.leaderboard.leaderboard`): one dataset split in
    two halves by a fixed hash of sentence ids (:mod:`probes.analysis.split`);
  - ``"separate"``: a separate selection split (e.g. dev), reported on another (e.g. test);
  - ``"same"``: chosen and reported on the same data, as in Clark et al. (2019): *optimistic*;
    such rows are never tested nor marked significant.

  Ties: higher accuracy, then lower layer, head, direction.
* **Baselines.** The fixed offset (Clark, ``-3..+2``, never ROOT by default) and the most
  frequent relative position (Voita et al.) are both *learned* on the selection data and
  *scored* on the report data; the stronger of the two on the selection data is the row's
  "best baseline".
* **Intervals.** 95% percentile bootstrap (1000 resamples, seed 0) for the head's accuracy, and a
  *paired* bootstrap (the same resampled units for head and baseline) of the margin head minus best
  baseline. The unit is the document when every reported sentence has a document id and there are at
  least 10 documents, else the sentence (:func:`probes.heads.intervals.resampling_units`,
  :func:`interval_units`); the paired tests and near ties below use the same units.
* **Significance** (:mod:`probes.heads.inference`). Per row, a two-sided paired test of the margin
  on the report data (valid because the head and the baseline were chosen on other data);
  the p-values of a table are Holm-corrected over its tested rows; ``beats_baseline`` = corrected
  p below 0.05 and margin above 0. Untested rows: ``"same"`` mode, and relations whose words all
  attach to ROOT (no head or baseline can predict them).
* **Near ties.** Per row, every ``(direction, layer, head)`` whose accuracy on the report data is
  not significantly below the reported head's (:func:`probes.heads.inference.near_ties`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.baselines import BaselineScores
from probes.analysis.dependency import HeadScores
from probes.analysis.relations import leading_relations, plain_name, redundant_pools
from probes.errors import ConfigError
from probes.heads.inference import CORRECTION, Correction, correct_rows, near_ties, p_from_z, paired_z
from probes.heads.intervals import ResamplingUnits, percentile_interval, resample_counts, resampling_units
from probes.heads.naming import head_name
from probes.results import saveable

__all__ = ["LeaderboardRow", "leaderboard_rows", "listed_relations", "LEADERBOARD_COLUMNS", "SELECTION_MODES",
           "ROOT_NOTE", "table_correction", "tie_name", "interval_units",
           "board_units"]

#: Where heads are chosen: two halves of one dataset, a separate split, or the reported data itself.
SELECTION_MODES: tuple[str, ...] = ("split", "separate", "same")
#: The note of a row whose words all attach to ROOT.
ROOT_NOTE = "every word attaches to ROOT, which no head or baseline can predict: not tested"

#: Columns of ``leaderboard.csv`` (layer and head 1-based, accuracies as fractions).
LEADERBOARD_COLUMNS: tuple[str, ...] = (
    "relation", "count", "layer", "head", "head_name", "direction", "accuracy", "ci_low", "ci_high",
    "baseline_offset", "baseline_accuracy", "position_baseline", "position_accuracy", "best_baseline",
    "margin", "margin_ci_low", "margin_ci_high", "p_value", "p_adjusted", "beats_baseline", "ties", "tied_heads",
    "selection_accuracy", "selected_on", "selection", "note",
)


@saveable
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
        beats_baseline: significant after correction: Holm-adjusted ``p_adjusted < 0.05`` and ``margin > 0``
            (never in ``"same"`` mode).
        selection_accuracy: the head's accuracy on the selection data.
        selected_on: name of the selection data.
        p_value, p_adjusted: paired test of the margin on the report data, raw and Holm-adjusted over the
            table's tested rows (NaN: not tested).
        ties, tied_heads: the heads not significantly worse than the reported one on the report data
            (``layer-head direction``, 1-based, best first) and their number.
        selection: the selection mode (:data:`SELECTION_MODES`).
        note: why a row is not tested, if it is not.
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
    p_value: float = float("nan")
    p_adjusted: float = float("nan")
    ties: int = 0
    tied_heads: tuple[str, ...] = ()
    selection: str = "separate"
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Row for people: layer and head 1-based, ``head_name`` like ``8-11``, ``tied_heads`` a list."""
        out = asdict(self)
        out["tied_heads"] = list(self.tied_heads)
        out["layer"], out["head"] = self.layer + 1, self.head + 1
        out["head_name"] = head_name(self.layer, self.head)
        return out


def listed_relations(
    scores: HeadScores, *, relations: Sequence[str] | None = None, min_count: int = 100,
    exclude: Sequence[str] = ("root", "punct"),
) -> list[str]:
    """Relations a leaderboard lists: ``ALL``, ``ALL-nopunct``, then others by count.

    Explicit ``relations`` are listed whatever their count (ConfigError if unseen);
    otherwise every relation with at least ``min_count`` words except ``exclude``
    (and pooled ``base:*`` names that merely repeat ``base``).
    """
    if relations:  # a plain name of sided scores lists both its sides
        listed = [[r] if r in scores.relations else [s for s in scores.relations if plain_name(s) == r]
                  for r in relations]
        missing = [r for r, found in zip(relations, listed) if not found]
        if missing:
            raise ConfigError(f"relations {missing} do not occur in the data; found {sorted(scores.relations)}")
        return [r for found in listed for r in found]
    drop = set(exclude) | {f"{r}:*" for r in exclude}
    pools = redundant_pools(scores.relations)
    head = leading_relations(scores.relations)
    rest = [r for r in scores.relations if plain_name(r) not in drop and r not in pools and r not in head
            and scores.count(r) >= min_count]
    rest.sort(key=lambda r: (-scores.count(r), r))
    return head + rest


@dataclass(frozen=True)
class _Choices:
    """What the selection data chose for each listed relation (``k`` of them)."""

    names: list[str]
    picks: list[tuple[int, int, int]]  # (direction, layer, head) indices into the selection scores
    offsets: list[int]
    positions: list[int]
    better: list[str]  # "offset" or "position"


def _choose(select: HeadScores, select_baselines: BaselineScores, names: list[str]) -> _Choices:
    """Best head, best offset, most frequent position and the stronger baseline, per relation."""
    picks, offsets, positions, better = [], [], [], []
    for rel in names:
        d, layer, head, _ = select.best(rel)
        picks.append((d, layer, head))
        k, k_acc = select_baselines.best_offset(rel)
        p, p_acc = select_baselines.most_frequent_position(rel)
        offsets.append(k)
        positions.append(p)
        better.append("position" if p_acc > k_acc else "offset")
    return _Choices(names, picks, offsets, positions, better)


def _position_units(base: BaselineScores, rels: Sequence[int], positions: Sequence[int]) -> npt.NDArray[np.int64]:
    """``(n_units, k)`` per-sentence hits of always predicting ``positions[c]`` for relation ``rels[c]``
    (position 0, ROOT, hits nothing unless the baselines may predict ROOT)."""
    out = np.zeros((base.n_units, len(rels)), dtype=np.int64)
    table = base.unit_positions if base.unit_positions is not None else np.zeros((0, 4), np.int64)
    for col, (r, p) in enumerate(zip(rels, positions)):
        if p == 0 and not base.clip_to_root:
            continue
        if p in base.grid and base.grid_units is not None:  # scored with the edge rule (baselines module)
            out[:, col] = base.grid_units.columns([r], [(base.grid.index(p),)])[0][:, 0]
            continue
        rows = table[(table[:, 1] == r) & (table[:, 2] == p)]
        np.add.at(out[:, col], rows[:, 0], rows[:, 3])
    return out


def _check(report: HeadScores, report_baselines: BaselineScores, select: HeadScores | None,
           select_baselines: BaselineScores | None) -> tuple[Any, Any]:
    """The per-sentence counts of ``report`` and ``report_baselines``; ConfigError unless they give intervals."""
    if (select is None) != (select_baselines is None):
        raise ConfigError("give both select and select_baselines, or neither")
    if report.units is None or report_baselines.units is None:
        raise ConfigError("the report scores were computed with keep_units=False; intervals need per-sentence counts")
    if report.n_units != report_baselines.n_units:
        raise ConfigError(f"head scores cover {report.n_units} sentences but baselines cover "
                          f"{report_baselines.n_units}; feed both the same sentences")
    return report.units, report_baselines.units


def interval_units(report: HeadScores, unit: str = "auto") -> ResamplingUnits:
    """The bootstrap unit of ``report``'s sentences: documents or sentences (``unit``: ``auto``, ``documents``,
    ``sentences``; :func:`probes.heads.intervals.resampling_units`). Scores without document ids (or saved before
    they were kept) resample sentences."""
    docs = report.units.documents if report.units is not None else ()
    return resampling_units(docs, report.n_units, unit=unit)


def board_units(report: HeadScores, bootstrap: Any = None) -> ResamplingUnits:
    """The units a leaderboard's intervals resampled, from its recorded ``options.bootstrap`` (``unit``
    ``documents``/``sentences``); ``auto`` for records without one."""
    unit = bootstrap.get("unit") if isinstance(bootstrap, Mapping) else None
    return interval_units(report, unit if unit in ("documents", "sentences") else "auto")


def tie_name(scores: HeadScores, direction: int, layer: int, head: int) -> str:
    """``layer-head direction`` (1-based) of the candidate at these positions of ``scores``."""
    return f"{head_name(scores.layers[layer], scores.heads[head])} {scores.directions[direction]}"


def _near_ties(report: HeadScores, relation: str, pick: tuple[int, int, int],
               groups: ResamplingUnits | None = None) -> tuple[str, ...]:
    """Every ``(direction, layer, head)`` not significantly worse than ``pick`` on ``report``, named (the test over
    the units of ``groups``, default sentences)."""
    units = report.units
    if units is None:
        raise ConfigError("near ties need per-sentence counts (keep_units=True)")
    rows = np.flatnonzero(units.relation == report.index(relation))
    shape = units.correct.shape[1:]  # (D, L, H)
    correct = np.zeros((units.n_units, int(np.prod(shape))), dtype=np.int64)
    total = np.zeros(units.n_units, dtype=np.int64)
    unit = units.unit_of_row()[rows]
    correct[unit] = units.correct[rows].reshape(len(rows), -1)
    total[unit] = units.total[rows]
    if groups is not None:
        correct, total = groups.sum(correct), groups.sum(total)
    chosen = int(np.ravel_multi_index(pick, shape))
    return tuple(tie_name(report, *(int(i) for i in np.unravel_index(int(c), shape)))
                 for c in near_ties(correct, total, chosen))


def _tests(diff: npt.NDArray[np.int64], total: npt.NDArray[np.int64], testable: npt.NDArray[np.bool_]
           ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Raw p, Holm-adjusted p and significance of each column's margin (NaN p where not testable)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        margins = diff.sum(axis=0) / total.sum(axis=0)
    p = np.where(testable, p_from_z(paired_z(diff, total)), np.nan)
    adjusted, significant, _ = correct_rows(margins, p, testable=testable)
    return p, adjusted, significant


def table_correction(rows: Sequence[LeaderboardRow]) -> Correction:
    """The correction of a table of rows: Holm over the rows that were tested."""
    return Correction(CORRECTION, sum(1 for r in rows if r.p_adjusted == r.p_adjusted))


def leaderboard_rows(
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
    mode: str | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    random_state: int | None = 0,
    unit: str | ResamplingUnits = "auto",
) -> list[LeaderboardRow]:
    """Best head per relation, selected on ``select`` (default: ``report``), reported and tested on ``report``.

    Args:
        report, report_baselines: scores and baselines of the data reported (same sentences, same order).
        select, select_baselines: scores and baselines of the selection data; default the report data.
        relations, min_count, exclude: which relations to list (see :func:`listed_relations`); ``min_count``
            counts words of the report data.
        report_name, select_name: names written in the rows and outputs.
        mode: the selection mode (:data:`SELECTION_MODES`): default ``"same"`` without ``select``, else
            ``"separate"``; pass ``"split"`` for two halves of one dataset. ``"same"`` rows are never tested.
        n_resamples, confidence, random_state: bootstrap settings.
        unit: the resampling unit of intervals, tests and near ties: ``"auto"`` (documents when there are enough,
            :func:`interval_units`), ``"documents"``, ``"sentences"``, or ready :class:`ResamplingUnits`.

    Returns:
        One row per listed relation that also occurs in the selection data.
    """
    units, base_units = _check(report, report_baselines, select, select_baselines)
    mode = mode or ("same" if select is None else "separate")
    if mode not in SELECTION_MODES or (mode == "same") != (select is None):
        raise ConfigError(f"mode: expected one of {', '.join(SELECTION_MODES)} ('same' exactly when no selection "
                          f"scores are given), found {mode!r}")
    select = select or report
    select_baselines = select_baselines or report_baselines
    names = [r for r in listed_relations(report, relations=relations, min_count=min_count, exclude=exclude)
             if r in select.relations and r in select_baselines.relations]
    if not names:
        return []
    chosen = _choose(select, select_baselines, names)
    head_c, total = units.columns([report.index(r) for r in names], chosen.picks)  # (n_units, k) each
    b_idx = [report_baselines.index(r) for r in names]
    off_c, _ = base_units.columns(b_idx, [(report_baselines.offsets.index(k),) for k in chosen.offsets])
    pos_c = _position_units(report_baselines, b_idx, chosen.positions)
    base_c = np.where(np.array(chosen.better) == "position", pos_c, off_c)  # (n_units, k)

    groups = unit if isinstance(unit, ResamplingUnits) else interval_units(report, unit)
    head_u, diff_u, total_u = groups.sum(head_c), groups.sum(head_c - base_c), groups.sum(total)  # (n_units, k)
    # One set of resampled units for every interval, so head and baseline are paired.
    weights = resample_counts(groups.n_units, n_resamples, random_state)  # (n_resamples, n_units)
    denominator = weights @ total_u  # (n_resamples, k)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc_draws = (weights @ head_u) / denominator  # (n_resamples, k)
        margin_draws = (weights @ diff_u) / denominator  # (n_resamples, k)
    root_only = np.array([report_baselines.root_only(r) for r in names])
    testable = ~root_only & (mode != "same") & (total.sum(axis=0) > 0)
    p, adjusted, significant = _tests(diff_u, total_u, testable)
    inference = {"ci": percentile_interval(acc_draws, confidence),
                 "margin_ci": percentile_interval(margin_draws, confidence),
                 "p": p, "adjusted": adjusted, "significant": significant, "root_only": root_only, "groups": groups}
    counts = {"head": head_c, "total": total, "offset": off_c, "position": pos_c}
    return [_row(c, report, select, chosen, counts, inference, select_name or report_name, mode)
            for c in range(len(names))]


def _row(c: int, report: HeadScores, select: HeadScores, chosen: _Choices, counts: dict[str, npt.NDArray[np.int64]],
         inference: dict[str, Any], selected_on: str, mode: str) -> LeaderboardRow:
    """Column ``c`` of the per-sentence counts as one reported row."""
    rel = chosen.names[c]
    d, layer, head = chosen.picks[c]
    n = int(counts["total"][:, c].sum())
    acc = counts["head"][:, c].sum() / n
    k_acc = counts["offset"][:, c].sum() / n
    p_acc = counts["position"][:, c].sum() / n
    base_acc = p_acc if chosen.better[c] == "position" else k_acc
    sel_r = select.index(rel)
    ci, margin_ci = inference["ci"], inference["margin_ci"]
    ties = _near_ties(report, rel, (d, layer, head), inference["groups"])
    note = ROOT_NOTE if inference["root_only"][c] else ""
    return LeaderboardRow(
        relation=rel, count=n, layer=select.layers[layer], head=select.heads[head],
        direction=select.directions[d], accuracy=float(acc), ci_low=float(ci[0][c]), ci_high=float(ci[1][c]),
        baseline_offset=int(chosen.offsets[c]), baseline_accuracy=float(k_acc),
        position_baseline=int(chosen.positions[c]), position_accuracy=float(p_acc), best_baseline=chosen.better[c],
        margin=float(acc - base_acc), margin_ci_low=float(margin_ci[0][c]), margin_ci_high=float(margin_ci[1][c]),
        beats_baseline=bool(inference["significant"][c]),
        selection_accuracy=float(select.correct[d, layer, head, sel_r] / select.total[sel_r]),
        selected_on=selected_on, p_value=float(inference["p"][c]), p_adjusted=float(inference["adjusted"][c]),
        ties=len(ties), tied_heads=ties, selection=mode, note=note,
    )
