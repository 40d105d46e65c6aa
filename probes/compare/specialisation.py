"""Q2: how many heads are specialised, held out and corrected.

Rule (:data:`SPECIALISATION_RULE`): each head's best relation and direction is chosen on the selection side
(:func:`probes.heads.profile.best_relations`: the largest margin over that relation's best baseline, the
baseline chosen on the selection side too); on the report side the head's per-sentence hits minus the
baseline's are tested with the leaderboard's paired test (:func:`probes.heads.inference.paired_z`), and the
p-values of all L*H heads are Holm-corrected together (the leaderboard's ``_tests``). The interval of the
fraction resamples report sentences and redoes the test and the correction on every draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.stats import holm_rows, interval
from probes.compare.types import Specialisation
from probes.heads.inference import ALPHA, p_from_z
from probes.heads.intervals import resample_counts
from probes.heads.selection import _position_units, _tests, board_units  # the leaderboard's own counts, tests, units

__all__ = ["SpecialisedHeads", "specialisation", "head_counts", "weighted_z", "draw_fractions",
           "SPECIALISATION_RULE"]

#: How a head is called specialised (printed with the table).
SPECIALISATION_RULE = ("specialised: the head's best relation and direction (largest margin over the relation's "
                       "best baseline, both chosen on the selection data) beats that baseline on the report data "
                       "under the paired test of the margin (per-sentence counts), Holm-corrected over every head "
                       "of the model, alpha 0.05, margin > 0")


@dataclass(frozen=True)
class SpecialisedHeads:
    """One model's Q2 answer: the row, ``mask`` ``(L, H)`` of specialised heads, ``draws`` ``(R,)`` of the
    specialised fraction on resampled report units (``n_units`` of them: the leaderboard's unit, documents or
    sentences, :func:`probes.heads.selection.board_units`; seed of the comparison), and the per-unit counts they
    were tested on (:func:`head_counts`, summed per unit), for tests that draw again."""

    row: Specialisation
    mask: npt.NDArray[np.bool_]
    draws: npt.NDArray[np.float64]
    n_units: int
    diff: npt.NDArray[np.int64]
    total: npt.NDArray[np.int64]
    testable: npt.NDArray[np.bool_]


def _baseline_counts(board: Any, names: list[str]) -> npt.NDArray[np.int64]:
    """``(n_units, k)`` report-side per-sentence hits of each relation's best baseline, chosen on the selection
    side (the stronger of Clark's best offset and Voita's most frequent position, as the leaderboard does)."""
    chooser, base = board.select_baselines, board.report_baselines
    idx = [base.index(r) for r in names]
    offsets, positions, better = [], [], []
    for rel in names:
        k, k_acc = chooser.best_offset(rel)
        p, p_acc = chooser.most_frequent_position(rel)
        offsets.append(k)
        positions.append(p)
        better.append(p_acc > k_acc)
    off_c, _ = base.units.columns(idx, [(base.offsets.index(k),) for k in offsets])
    pos_c = _position_units(base, idx, positions)
    return np.where(np.array(better)[None, :], pos_c, off_c)


def head_counts(board: Any, profile: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``(diff, total, testable)``: ``(n_units, N)`` per-sentence hits of each head on its best relation minus
    the relation's baseline hits, ``(n_units, N)`` words of that relation, ``(N,)`` whether each head is tested
    (it has a relation with words that do not all attach to ROOT). Heads in ``layer * H + head`` order."""
    report = board.report
    names = sorted({r for r in profile.relation if r and r in report.relations
                    and r in board.report_baselines.relations})
    column = {r: c for c, r in enumerate(names)}
    n_heads = len(profile.relation)
    n_h = len(report.heads)
    picks, rels, used = [], [], []
    for i, (rel, direction) in enumerate(zip(profile.relation, profile.direction)):
        if rel in column:
            picks.append((report.directions.index(direction), i // n_h, i % n_h))
            rels.append(report.index(rel))
            used.append(i)
    diff = np.zeros((report.n_units, n_heads), dtype=np.int64)
    total = np.zeros((report.n_units, n_heads), dtype=np.int64)
    if used:
        hits, words = report.units.columns(rels, picks)  # (n_units, k)
        base = _baseline_counts(board, names)  # (n_units, R)
        cols = [column[profile.relation[i]] for i in used]
        diff[:, used] = hits - base[:, cols]
        total[:, used] = words
    root_only = np.array([bool(r) and r in column and board.report_baselines.root_only(r) for r in profile.relation])
    testable = np.isin(np.arange(n_heads), used) & ~root_only & (total.sum(axis=0) > 0)
    return diff, total, testable


def weighted_z(diff: npt.NDArray[np.int64], total: npt.NDArray[np.int64], weights: npt.NDArray[np.float64]
               ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(z, margin)``, each ``(R, N)``: :func:`probes.heads.inference.paired_z` and the margin of every column
    of ``diff``/``total`` ``(n_units, N)`` on each resample of ``weights`` ``(R, n_units)`` (unit ``u`` counted
    ``weights[r, u]`` times), from weighted sums without building the resamples."""
    d, n = diff.astype(np.float64), total.astype(np.float64)
    units = weights @ (n > 0)  # (R, N) drawn units holding items
    den = weights @ n
    with np.errstate(invalid="ignore", divide="ignore"):
        margin = (weights @ d) / den
        squares = weights @ d ** 2 - 2 * margin * (weights @ (d * n)) + margin ** 2 * (weights @ n ** 2)
        se = np.sqrt(units / np.maximum(units - 1, 1) * np.maximum(squares, 0.0)) / den
        z = np.where(se > 0, margin / se, np.where(margin == 0, 0.0, np.sign(margin) * np.inf))
    return np.where((den > 0) & (units >= 2), z, np.nan), margin


def draw_fractions(diff: npt.NDArray[np.int64], total: npt.NDArray[np.int64], testable: npt.NDArray[np.bool_],
                   weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``(R,)`` fraction of the ``N`` heads specialised on each resample of report sentences (test and Holm
    redone per draw)."""
    z, margin = weighted_z(diff, total, weights)
    p = np.where(testable[None, :], p_from_z(z), np.nan)
    adjusted = holm_rows(p)
    with np.errstate(invalid="ignore"):
        significant = (adjusted < ALPHA) & (margin > 0)
    return significant.sum(axis=1) / max(diff.shape[1], 1)


def specialisation(board: Any, profile: Any, model: str, data: str, *, n_resamples: int = 1000,
                   seed: int = 0) -> SpecialisedHeads | str:
    """Q2 for one model and data (see the module), or why it cannot be computed."""
    if board.select is None or board.select_baselines is None:
        return "heads were chosen on the data they are reported on (select_on 'same'): no held-out test"
    if board.report.units is None or board.report_baselines.units is None:
        return "the leaderboard kept no per-sentence counts (keep_units=False)"
    if profile is None:
        return "the leaderboard lists no relation besides ALL"
    diff, total, testable = head_counts(board, profile)
    groups = board_units(board.report, board.record.options.bootstrap)  # the leaderboard's own unit
    diff, total = groups.sum(diff), groups.sum(total)  # (n_units, N): per document where the board resampled those
    _, _, significant = _tests(diff, total, testable)
    n_l, n_h = len(board.report.layers), len(board.report.heads)
    weights = resample_counts(groups.n_units, n_resamples, seed)  # (R, n_units)
    draws = draw_fractions(diff, total, testable, weights)
    low, high = interval(draws)
    per_relation: dict[str, int] = {}
    for i in np.flatnonzero(significant):
        per_relation[profile.relation[i]] = per_relation.get(profile.relation[i], 0) + 1
    n = n_l * n_h
    row = Specialisation(model=model, data=data, n_heads=n, n_specialised=int(significant.sum()),
                         fraction=float(significant.sum() / n), low=low, high=high, n_tests=int(testable.sum()),
                         per_relation=dict(sorted(per_relation.items())), selected_on=board.selected_on,
                         reported_on=board.reported_on,
                         rule=f"{SPECIALISATION_RULE}; interval over {groups.n_units} {groups.unit}")
    return SpecialisedHeads(row, significant.reshape(n_l, n_h), draws, int(groups.n_units), diff, total,
                            testable)
