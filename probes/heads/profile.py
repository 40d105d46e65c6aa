"""Each head's best relation: chosen on the selection data, its accuracy and margin read on the report data.

The leaderboard answers "which head for this relation?"; a head atlas asks the reverse, "which relation
for this head?". For every head, the relation and direction with the largest margin over that relation's
best baseline (Clark's fixed offset or Voita's most frequent position, whichever is stronger on the
selection data) is chosen on the selection data; the head's accuracy on it, and its margin over the same
baseline, are then read on the report data, so the reported numbers are not inflated by the choice.
These are descriptive (one choice per head, no test): whether a head is *syntactic* is decided by the
leaderboard's corrected, held-out test (:func:`syntactic_heads`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.baselines import BaselineScores
from probes.analysis.dependency import HeadScores
from probes.errors import ConfigError
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["RelationProfile", "best_relations", "board_profile", "listed_relations", "syntactic_heads", "PROFILE_RULE"]

#: How the best relation of a head is chosen and reported (printed with every atlas).
PROFILE_RULE = ("best relation of a head: the listed relation and direction with the largest margin over that "
                "relation's best baseline on the selection data; accuracy and margin read on the report data "
                "(descriptive, not tested)")


@dataclass(frozen=True)
class RelationProfile(Result):
    """Per head, the relation it predicts best (relative to the baselines).

    Attributes:
        layers, heads: 0-based model layers and heads.
        relation, direction: ``L*H`` names, head index ``layer * H + head`` ("" where nothing was listed).
        accuracy: ``(L, H)`` the head's accuracy on that relation on the report data.
        margin: ``(L, H)`` accuracy minus the relation's baseline (chosen on the selection data) on the
            report data.
        selection_margin: ``(L, H)`` the margin on the selection data (what the choice maximised).
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"accuracy": "layers heads", "margin": "layers heads", "selection_margin": "layers heads"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    relation: tuple[str, ...]
    direction: tuple[str, ...]
    accuracy: npt.NDArray[np.float64]
    margin: npt.NDArray[np.float64]
    selection_margin: npt.NDArray[np.float64]

    def to_pandas(self) -> Any:
        """One row per head: ``layer, head, head_name, relation, direction, accuracy, margin`` (1-based)."""
        table = long_table(head_axes(self.layers, self.heads),
                           {"accuracy": self.accuracy, "margin": self.margin,
                            "selection_margin": self.selection_margin})
        table.insert(2, "head_name", head_names(table))
        table.insert(3, "relation", list(self.relation))
        table.insert(4, "direction", list(self.direction))
        return table


def _baselines(base: BaselineScores, relations: Sequence[str]) -> list[tuple[str, int, float]]:
    """Per relation: the stronger baseline on ``base`` as ``(kind, offset or position, accuracy)``."""
    out = []
    for rel in relations:
        k, k_acc = base.best_offset(rel)
        p, p_acc = base.most_frequent_position(rel)
        out.append(("position", p, p_acc) if p_acc > k_acc else ("offset", k, k_acc))
    return out


def _baseline_accuracy(base: BaselineScores, relation: str, kind: str, value: int) -> float:
    """Accuracy on ``base`` of the baseline ``kind`` (``offset`` or ``position``) with ``value``."""
    if kind == "position":
        return float(base.position_accuracy(relation, value))
    acc = base.accuracy()[base.offsets.index(value), base.index(relation)]
    return float(acc)


def best_relations(report: HeadScores, report_baselines: BaselineScores, relations: Sequence[str], *,
                   select: HeadScores | None = None, select_baselines: BaselineScores | None = None
                   ) -> RelationProfile:
    """Every head's best relation among ``relations`` (see the module); selection data default: the report's."""
    select = select or report
    select_baselines = select_baselines or report_baselines
    names = [r for r in relations if r in select.relations and r in report.relations]
    n_l, n_h = len(report.layers), len(report.heads)
    if not names:
        raise ConfigError(f"best_relations: none of the relations {list(relations)} occurs in both the "
                          "selection and the report data")
    chosen = _baselines(select_baselines, names)
    sel_acc = select.accuracy()[..., [select.index(r) for r in names]]  # (D, L, H, R)
    sel_margin = sel_acc - np.array([acc for _, _, acc in chosen])  # (D, L, H, R)
    flat = np.nan_to_num(sel_margin, nan=-np.inf).transpose(1, 2, 0, 3).reshape(n_l, n_h, -1)  # (L, H, D*R)
    pick = flat.argmax(axis=-1)  # (L, H)
    d_pick, r_pick = np.divmod(pick, len(names))
    rep_acc = report.accuracy()  # (D, L, H, R_report)
    report_base = [_baseline_accuracy(report_baselines, rel, kind, value)
                   for rel, (kind, value, _) in zip(names, chosen)]
    accuracy = np.empty((n_l, n_h))
    margin = np.empty((n_l, n_h))
    relation, direction = [], []
    for layer in range(n_l):
        for head in range(n_h):
            d, r = int(d_pick[layer, head]), int(r_pick[layer, head])
            accuracy[layer, head] = rep_acc[d, layer, head, report.index(names[r])]
            margin[layer, head] = accuracy[layer, head] - report_base[r]
            relation.append(names[r])
            direction.append(report.directions[d])
    selection_margin = np.take_along_axis(flat, pick[..., None], axis=-1)[..., 0]
    return RelationProfile(tuple(report.layers), tuple(report.heads), tuple(relation), tuple(direction),
                           accuracy, margin, selection_margin)


def syntactic_heads(rows: Sequence[Any], layers: Sequence[int], heads: Sequence[int]) -> tuple[str, ...]:
    """``L*H`` strings: the relations (``rel d2h``/``rel h2d``) for which each head is the leaderboard's
    reported head AND beats the best baseline after Holm's correction on held-out data ("" otherwise).
    ``ALL`` and ``ALL-nopunct`` pool every relation: they make no head syntactic."""
    found: dict[tuple[int, int], list[str]] = {}
    short = {"dep_to_head": "d2h", "head_to_dep": "h2d"}
    for row in rows:
        if row.beats_baseline and row.selection != "same" and not row.relation.startswith("ALL"):
            found.setdefault((row.layer, row.head), []).append(f"{row.relation} {short.get(row.direction, row.direction)}")
    return tuple(", ".join(found.get((layer, head), [])) for layer in layers for head in heads)


def listed_relations(board: Any) -> list[str]:
    """The relations of a leaderboard's rows, the pooled ``ALL`` and ``ALL-nopunct`` rows left out."""
    from probes.analysis.relations import ALL, ALL_NOPUNCT, plain_name

    return [row.relation for row in board.rows if plain_name(row.relation) not in (ALL, ALL_NOPUNCT)]


def board_profile(board: Any) -> RelationProfile | None:
    """Each head's best relation among a leaderboard's listed relations (:func:`listed_relations`), chosen on its
    selection side and read on its report side; None when it lists no other relation."""
    relations = listed_relations(board)
    if not relations:
        return None
    return best_relations(board.report, board.report_baselines, relations, select=board.select,
                          select_baselines=board.select_baselines)
