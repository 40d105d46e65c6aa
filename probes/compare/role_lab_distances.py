"""(d) D_within against D_cross between the heads of two seeds of a cell, on their attention maps (issue 39, point 5).

Every seed of a cell keeps the maps of the same held-out sequences (``LabModelAnalysis.maps``, ``(L, H, M, T, T)``),
so the heads of two seeds can be compared position by position. For one layer the ``2H`` heads (seed a's, then
seed b's) get an ``(2H, 2H)`` distance matrix in two distances:

* ``js``: the Jensen-Shannon divergence of attention rows smoothed as :mod:`probes.training.symmetry` smooths them
  (:func:`probes.training.symmetry.attention_divergences`), the mean over every query row of every sequence;
* ``rank``: :func:`probes.compare.fair_tests.rank_distance`, one minus the mean Spearman correlation of rows, which
  sharpening does not move. In a causal model a query row is ranked over its allowed keys only (``0..q``; the
  masked keys are zero in every head, and their ties would count as agreement): the value is that of
  ``rank_distance`` on each row cut to its allowed keys, averaged over the rows it keeps.

and :func:`probes.compare.fair_tests.within_cross_test` tests D_cross - D_within over regroupings of the heads.
D_match (an optimised minimum over matchings) is never compared with D_within here: only like with like.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from statistics import median

import numpy as np
import numpy.typing as npt

from probes.compare.fair_tests import PermutationTest, within_cross_test
from probes.compare.role_lab_types import ALPHA, DistanceRow, DistanceSummaryRow
from probes.importance.lab_types import LabModelAnalysis
from probes.training.symmetry import attention_divergences

__all__ = ["js_matrix", "rank_matrix", "rank_parts", "rank_from_parts", "RankParts", "is_causal", "pair_tests", "distance_tables", "DISTANCES", "RULE"]

#: The distances between heads, in table order.
DISTANCES: tuple[str, ...] = ("js", "rank")
#: How table (d) is made.
RULE = ("per cell, layer and pair of seeds: the distances between the 2H heads of the two models on the maps of the "
        "same held-out sequences (js: Jensen-Shannon of rows smoothed (1 - 0.001) A + 0.001 / T, mean over query "
        "rows; rank: one minus the mean Spearman correlation of rows, causal rows ranked over their allowed keys, "
        "unchanged when a head only sharpens); D_within and D_cross are all-pairs means (like with like), and "
        "D_cross - D_within is tested by a permutation test over regroupings of the heads into the two models "
        "(fair_tests.within_cross_test; the count of regroupings and whether all were enumerated in each row). "
        "Above 0: heads of one seed are closer to each other than to the other seed's (seed-specific heads); about "
        "0: heads exchangeable between seeds (an ensemble of alike heads); below 0: each model's heads differ from "
        "each other more than from the other seed's (distinct roles that recur in every seed: a division of "
        "labour). Over the pairs of seeds: the share of pairs with p < 0.05 and the median p, descriptive only "
        "(the pairs share seeds, so their p-values are not independent; no combined p). D_match is never compared "
        "with D_within.")


def is_causal(maps: npt.NDArray[np.floating]) -> bool:
    """Whether every map ``(..., T, T)`` puts exactly 0 on every key after its query (a causal model's maps)."""
    above = np.triu_indices(maps.shape[-1], k=1)
    return bool(np.all(maps[..., above[0], above[1]] == 0))


def js_matrix(maps: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(N, N)`` mean Jensen-Shannon divergence per query row between heads ``(N, M, T, T)`` (smoothed rows)."""
    x = np.asarray(maps, dtype=np.float64)
    n, m, t, _ = x.shape
    return attention_divergences(x.reshape(n, m * t, t)) / (m * t)


def _centred_ranks(rows: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Ranks of ``rows`` ``(N, R, K)`` along keys, centred, and their norms ``(N, R)``."""
    from scipy.stats import rankdata

    ranks = rankdata(rows, axis=-1)
    ranks -= ranks.mean(axis=-1, keepdims=True)
    return ranks, np.sqrt((ranks ** 2).sum(axis=-1))


#: Ranked rows of a stack of heads, one entry per group of rows of equal length: centred ranks ``(N, R, K)`` and
#: their norms ``(N, R)``.
RankParts = list[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]


def rank_parts(maps: npt.ArrayLike, causal: bool | None = None) -> RankParts:
    """The centred ranks of every row of heads ``(N, M, T, T)``: causal rows (``causal``; default: read from the
    maps) cut to their allowed keys ``0..q`` (the row of query 0 has one key and is left out), one group per ``q``."""
    x = np.asarray(maps, dtype=np.float64)
    t = x.shape[-1]
    causal = is_causal(x) if causal is None else causal
    groups = [x[:, :, q, :q + 1] for q in range(1, t)] if causal else [x.reshape(x.shape[0], -1, t)]
    return [_centred_ranks(rows) for rows in groups]


def _join(a: RankParts, b: RankParts) -> RankParts:
    """The parts of two stacks of heads (a's heads first)."""
    return [(np.concatenate([ra, rb]), np.concatenate([na, nb])) for (ra, na), (rb, nb) in zip(a, b)]


def rank_from_parts(parts: RankParts) -> npt.NDArray[np.float64]:
    """``(N, N)`` one minus the mean Spearman correlation over the rows both heads order (see :func:`rank_matrix`)."""
    n = parts[0][0].shape[0]
    total, count = np.zeros((n, n)), np.zeros((n, n))
    for ranks, norms in parts:
        ok = (norms[:, None, :] > 0) & (norms[None, :, :] > 0)  # (N, N, R)
        dots = np.einsum("irk,jrk->ijr", ranks, ranks)
        scale = np.where(ok, norms[:, None, :] * norms[None, :, :], 1.0)
        total += np.where(ok, dots / scale, 0.0).sum(axis=-1)
        count += ok.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 1 - total / count
    np.fill_diagonal(out, 0.0)
    return np.where(count > 0, out, np.nan)


def rank_matrix(maps: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(N, N)`` rank distance between heads ``(N, M, T, T)``: one minus the mean Spearman correlation over the
    rows both heads order (constant rows and single-key rows left out, as
    :func:`~probes.compare.fair_tests.rank_distance` leaves them); causal rows cut to their allowed keys."""
    return rank_from_parts(rank_parts(maps))


def pair_tests(a: LabModelAnalysis, b: LabModelAnalysis, layer: int, *, n_permutations: int, seed: int,
               ranked: dict[tuple[int, int], RankParts] | None = None) -> dict[str, PermutationTest]:
    """``{distance: test}`` of D_cross - D_within for one layer of two seeds' models (their maps stacked a, b);
    ``ranked`` caches each model's ranked rows by ``(id(model), layer)``."""
    maps = np.concatenate([a.maps[layer], b.maps[layer]])  # (2H, M, T, T)
    cache = {} if ranked is None else ranked
    causal = is_causal(maps)
    for model in (a, b):
        if (id(model), layer) not in cache:
            cache[(id(model), layer)] = rank_parts(model.maps[layer], causal)
    distances = {"js": js_matrix(maps), "rank": rank_from_parts(_join(cache[(id(a), layer)], cache[(id(b), layer)]))}
    return {kind: within_cross_test(distances[kind], a.n_heads, seed=seed, n_permutations=n_permutations)
            for kind in DISTANCES}


def _comparable(models: Sequence[LabModelAnalysis]) -> list[LabModelAnalysis]:
    """The models with maps of one shape and at least 2 heads, by seed."""
    kept = sorted((m for m in models if m.maps.size and m.n_heads >= 2), key=lambda m: m.seed)
    return [m for m in kept if m.maps.shape == kept[0].maps.shape]


def distance_tables(by_cell: dict[str, list[LabModelAnalysis]], *, n_permutations: int, seed: int
                    ) -> tuple[list[DistanceRow], list[DistanceSummaryRow]]:
    """Table (d): one row per cell, layer, distance and pair of seeds, and one summary per cell, layer, distance."""
    rows: list[DistanceRow] = []
    for cell, models in by_cell.items():
        kept = _comparable(models)
        ranked: dict[tuple[int, int], RankParts] = {}
        for a, b in combinations(kept, 2):
            for layer in range(a.n_layers):
                tests = pair_tests(a, b, layer, n_permutations=n_permutations, seed=seed, ranked=ranked)
                for kind, test in tests.items():
                    rows.append(DistanceRow(cell, layer, kind, a.seed, b.seed, test.within, test.cross,
                                            test.statistic, test.p_value, test.n_permutations, test.exact))
    return rows, _summaries(rows)


def _summaries(rows: list[DistanceRow]) -> list[DistanceSummaryRow]:
    groups: dict[tuple[str, int, str], list[DistanceRow]] = {}
    for row in rows:
        groups.setdefault((row.cell, row.layer, row.distance), []).append(row)
    out = []
    for (cell, layer, kind), mine in groups.items():
        p = [r.p for r in mine]
        smallest = min(1.0 / r.n_permutations if r.exact else 1.0 / (1 + r.n_permutations) for r in mine)
        out.append(DistanceSummaryRow(cell, layer, kind, len(mine), float(np.mean([v < ALPHA for v in p])),
                                      float(median(p)), float(np.mean([r.within for r in mine])),
                                      float(np.mean([r.cross for r in mine])),
                                      float(np.mean([r.statistic for r in mine])), smallest))
    return out
