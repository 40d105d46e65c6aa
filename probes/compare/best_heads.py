"""The cross-model table of best heads: every leaderboard row of every model and data, on relative depth."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from probes.compare.inputs import board_of, depth, model_data_pairs
from probes.compare.types import BestHead, Unit

__all__ = ["best_heads", "best_head_rows"]


def best_head_rows(board: Any, model: str, data: str) -> list[BestHead]:
    """Every row of one leaderboard as :class:`BestHead` (the baseline is the row's best baseline, chosen on the
    selection data; ``n_layers`` is the number of layers the board holds)."""
    n_layers = len(board.report.layers)
    out = []
    for row in board.rows:
        base = row.position_accuracy if row.best_baseline == "position" else row.baseline_accuracy
        out.append(BestHead(
            model=model, data=data, relation=row.relation, direction=row.direction, layer=int(row.layer),
            head=int(row.head), n_layers=n_layers, depth=depth(int(row.layer), n_layers), count=int(row.count),
            accuracy=float(row.accuracy), ci_low=float(row.ci_low), ci_high=float(row.ci_high),
            baseline_accuracy=float(base), margin=float(row.margin), margin_ci_low=float(row.margin_ci_low),
            margin_ci_high=float(row.margin_ci_high), p_adjusted=float(row.p_adjusted),
            beats_baseline=bool(row.beats_baseline), selected_on=str(row.selected_on),
            reported_on=board.reported_on))
    return out


def best_heads(units: Sequence[Unit]) -> tuple[BestHead, ...]:
    """Every leaderboard row, per model and data (the ``leaderboard`` unit, else the atlas's board)."""
    out: list[BestHead] = []
    for model, data in model_data_pairs(units):
        board = board_of(units, model, data)
        if board is not None:
            out.extend(best_head_rows(board, model, data))
    return tuple(out)
