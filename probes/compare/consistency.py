"""Q4: are the same heads chosen on two datasets (the selection and report sides of one run, or two corpora)?

Per relation listed on both sides (the pooled ``ALL`` rows left out), the best head on each side (argmax of
accuracy over direction, layer and head, ties as :meth:`HeadScores.best`: lower layer, head, direction) and
Spearman's rho of the D*L*H accuracies between the sides. ``same_head`` compares the (layer, head) of the two
best heads (a head chosen in the other direction counts as the same head); ``rho`` is the mean over
relations, its interval a bootstrap over relations.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.inputs import board_of
from probes.heads.profile import listed_relations
from probes.compare.stats import interval, spearman_rows
from probes.compare.types import Consistency, Unit

__all__ = ["ConsistencyDraws", "consistency", "model_consistency", "relation_rhos"]


@dataclass(frozen=True)
class ConsistencyDraws:
    """One comparison of two sides: the row and each relation's rho (``rhos`` by relation, for paired tests)."""

    row: Consistency
    rhos: dict[str, float]


def relation_rhos(first: Any, second: Any, relations: Sequence[str]) -> tuple[dict[str, float], dict[str, bool]]:
    """``({relation: rho}, {relation: same best head})`` between two ``HeadScores`` of the same heads."""
    rhos, same = {}, {}
    for rel in relations:
        a = first.accuracy()[..., first.index(rel)].reshape(-1)  # (D*L*H,)
        b = second.accuracy()[..., second.index(rel)].reshape(-1)
        rhos[rel] = float(spearman_rows(a, b)) if np.isfinite(a).all() and np.isfinite(b).all() else float("nan")
        pick_a, pick_b = first.best(rel), second.best(rel)
        same[rel] = (first.layers[pick_a[1]], first.heads[pick_a[2]]) == (second.layers[pick_b[1]],
                                                                          second.heads[pick_b[2]])
    return rhos, same


def _mean_draws(values: npt.NDArray[np.float64], n_resamples: int, seed: int) -> npt.NDArray[np.float64]:
    """``(R,)`` mean of ``values`` ``(K,)`` over resampled relations (NaN values ignored)."""
    idx = np.random.default_rng(seed).integers(0, len(values), size=(n_resamples, len(values)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a draw of NaN relations only: NaN
        return np.nanmean(values[idx], axis=1)


def consistency(model: str, first: tuple[str, Any], second: tuple[str, Any], relations: Sequence[str], *,
                n_resamples: int = 1000, seed: int = 0) -> ConsistencyDraws | None:
    """Q4 between two named sides ``(name, HeadScores)`` over ``relations`` present on both (None without any)."""
    names = [r for r in relations if r in first[1].relations and r in second[1].relations
             and first[1].count(r) > 0 and second[1].count(r) > 0]
    if not names:
        return None
    rhos, same = relation_rhos(first[1], second[1], names)
    values = np.array([rhos[r] for r in names])
    low, high = interval(_mean_draws(values, n_resamples, seed)) if np.isfinite(values).any() else (np.nan, np.nan)
    row = Consistency(model=model, first=first[0], second=second[0], n_relations=len(names),
                      same_head=float(np.mean([same[r] for r in names])),
                      rho=float(np.nanmean(values)) if np.isfinite(values).any() else float("nan"),
                      low=float(low), high=float(high), relations=tuple(names))
    return ConsistencyDraws(row, rhos)


def model_consistency(units: Sequence[Unit], model: str, datas: Sequence[str], *, n_resamples: int = 1000,
                      seed: int = 0) -> list[ConsistencyDraws]:
    """Q4 for one model: (a) each data's selection side vs its report side, (b) every pair of data, report side
    vs report side (relations listed in both boards' rows)."""
    boards = {d: board_of(units, model, d) for d in datas}
    boards = {d: b for d, b in boards.items() if b is not None}
    out = []
    for board in boards.values():
        if board.select is not None:
            found = consistency(model, (board.selected_on, board.select), (board.reported_on, board.report),
                                listed_relations(board), n_resamples=n_resamples, seed=seed)
            out.append(found)
    names = list(boards)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            theirs = set(listed_relations(boards[b]))
            shared = [r for r in listed_relations(boards[a]) if r in theirs]
            out.append(consistency(model, (boards[a].reported_on, boards[a].report),
                                   (boards[b].reported_on, boards[b].report), shared, n_resamples=n_resamples,
                                   seed=seed))
    return [c for c in out if c is not None]
