"""Q1: do heads differ more than chance? The spread of head-to-head Jensen-Shannon distances in one model.

The statistic is the mean over all pairs of distinct heads of the per-row JS divergence (``distance /
n_rows``). Its interval resamples the JS sentences: on a draw, each pair's distance is Σ item_pairs / Σ
item_rows over the drawn items (the per-item sums that ``HeadDistances(keep_items=True)`` keeps). The
number of clusters is the Ward cut (:func:`probes.heads.groups.cluster_cuts`) with the best silhouette on the
per-row distances (k = 2..``max_k``, ``max_k = min(12, N - 1)``, the smallest k on ties); its interval uses the
first :data:`CLUSTER_RESAMPLES` draws only (each draw builds a tree and up to 11 cuts: about 3 ms for 72 heads).
The heads are said to have cluster structure only when that best silhouette reaches :data:`STRUCTURE_SILHOUETTE`
(:func:`has_structure`); below it the best cut is only the least bad one (:func:`structure_text`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.head_distances import pair_index
from probes.compare.stats import interval
from probes.compare.types import Histogram, Spread
from probes.heads.groups import cluster_cuts
from probes.heads.intervals import resample_counts

__all__ = ["SpreadDraws", "spread", "statistic_draws", "silhouette", "silhouettes", "best_cut", "histograms", "STATISTIC",
           "CLUSTER_RESAMPLES", "MAX_CLUSTERS", "HISTOGRAM_BINS", "NO_ITEMS", "STRUCTURE_SILHOUETTE",
           "STRUCTURE_RULE", "has_structure", "structure_text"]

#: The statistic of :class:`Spread`.
STATISTIC = "mean per-row Jensen-Shannon divergence over all pairs of distinct heads"
#: Bootstrap draws used for the interval of the number of clusters (fewer than the statistic's: each builds a tree).
CLUSTER_RESAMPLES = 100
#: Largest number of clusters tried.
MAX_CLUSTERS = 12
#: Bins of the distance histograms (edges shared by every model of a comparison).
HISTOGRAM_BINS = 30
#: The least best silhouette called cluster structure: Kaufman & Rousseeuw (1990), *Finding Groups in Data*,
#: ch. 2: an average silhouette below 0.25 means "no substantial structure has been found" (0.26-0.50 weak,
#: 0.51-0.70 reasonable, above 0.70 strong).
STRUCTURE_SILHOUETTE = 0.25
#: How the report decides whether the heads cluster.
STRUCTURE_RULE = (f"the number of clusters counts as structure only when the best silhouette is >= "
                  f"{STRUCTURE_SILHOUETTE} (Kaufman & Rousseeuw 1990: below it, no substantial structure)")
#: Why the spread cannot be computed without per-item distances.
NO_ITEMS = "the atlas kept no per-sentence head distances: rerun the atlas with js_items=True"


@dataclass(frozen=True)
class SpreadDraws:
    """One model's Q1 answer: the row, ``values`` ``(P,)`` per-row JS of every pair, and what a paired
    comparison needs: ``item_ids``, ``item_sums`` ``(I,)`` (Σ over pairs of each item's pair sums), ``item_rows``
    ``(I,)`` and ``n_pairs``."""

    row: Spread
    values: npt.NDArray[np.float64]
    item_ids: tuple[str, ...]
    item_sums: npt.NDArray[np.float64]
    item_rows: npt.NDArray[np.int64]
    n_pairs: int


def statistic_draws(item_sums: npt.NDArray[np.float64], item_rows: npt.NDArray[np.int64], n_pairs: int,
                    weights: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``(R,)`` the statistic on each resample of items ``weights`` ``(R, I)``: Σ_pairs Σ_items / Σ rows / P."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ item_sums) / (weights @ item_rows.astype(np.float64)) / max(n_pairs, 1)


def silhouette(distance: npt.NDArray[np.float64], labels: npt.NDArray[np.int64]) -> float:
    """Mean silhouette of ``labels`` ``(N,)`` on the precomputed ``distance`` ``(N, N)`` (0 for a head alone in
    its cluster, as scikit-learn's ``silhouette_score(metric="precomputed")``); NaN unless 2 <= k <= N - 1."""
    _, own = np.unique(labels, return_inverse=True)
    return float(silhouettes(distance, own.reshape(1, -1) + 1)[0])


def silhouettes(distance: npt.NDArray[np.float64], labels: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """``(C,)`` mean silhouette of each row of ``labels`` ``(C, N)`` (numbered 1..k without gaps) on ``distance``."""
    n_cuts, n = labels.shape
    made = labels.max(axis=1)  # (C,) clusters of each cut
    own = labels - 1  # (C, N)
    onehot = np.zeros((n_cuts, n, int(made.max())))
    np.put_along_axis(onehot, own[..., None], 1.0, axis=2)
    sums = distance[None] @ onehot  # (C, N, K) summed distance of each head to each cluster
    sizes = onehot.sum(axis=1)  # (C, K)
    own_size = np.take_along_axis(sizes, own, axis=1)  # (C, N)
    a = np.take_along_axis(sums, own[..., None], axis=2)[..., 0] / np.maximum(own_size - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(sizes[:, None, :] > 0, sums / sizes[:, None, :], np.inf)  # (C, N, K)
    np.put_along_axis(means, own[..., None], np.inf, axis=2)
    b = means.min(axis=2)
    top = np.maximum(a, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where((top > 0) & (own_size > 1), (b - a) / np.where(top > 0, top, 1.0), 0.0)
    return np.where((made >= 2) & (made <= n - 1), s.mean(axis=1), np.nan)


def best_cut(per_row: npt.NDArray[np.float64], max_k: int) -> tuple[int, float]:
    """``(clusters, silhouette)`` of the Ward cut k in 2..``max_k`` with the best silhouette (smallest k on ties;
    ``clusters`` counts the groups the cut really made); ``(0, NaN)`` when ``max_k < 2``. The count is cluster
    structure only when the silhouette passes :func:`has_structure`."""
    if max_k < 2:
        return 0, float("nan")
    cuts = cluster_cuts(per_row, range(2, max_k + 1))  # labels 1..k', in first-head order
    labels = np.stack([cuts[k] for k in range(2, max_k + 1)])  # (C, N)
    scores = silhouettes(per_row, labels)
    if not np.isfinite(scores).any():
        return 0, float("nan")
    best = int(np.nanargmax(scores))  # the first (smallest k) of equal maxima
    return int(labels[best].max()), float(scores[best])


def has_structure(silhouette: float) -> bool:
    """Whether a best silhouette shows cluster structure (>= :data:`STRUCTURE_SILHOUETTE`; NaN never does)."""
    return bool(np.isfinite(silhouette) and silhouette >= STRUCTURE_SILHOUETTE)


def structure_text(n_clusters: int, silhouette: float) -> str:
    """``3 clusters (best silhouette 0.412 >= 0.25)`` or ``no substantial cluster structure (best silhouette
    0.228 < 0.25)``; a sentence saying so without a silhouette (fewer than 3 heads)."""
    if not np.isfinite(silhouette):
        return "no cluster structure measured (no silhouette)"
    if has_structure(silhouette):
        return f"{n_clusters} clusters (best silhouette {silhouette:.3f} >= {STRUCTURE_SILHOUETTE})"
    return f"no substantial cluster structure (best silhouette {silhouette:.3f} < {STRUCTURE_SILHOUETTE})"


def _matrix(pairs: npt.NDArray[np.float64], n: int) -> npt.NDArray[np.float64]:
    """``(N, N)`` symmetric matrix with zero diagonal from ``(P,)`` values in :func:`pair_index` order."""
    out = np.zeros((n, n))
    first, second = pair_index(n)
    out[first, second] = pairs
    out[second, first] = pairs
    return out


def _cluster_draws(item_pairs: npt.NDArray[np.float64], rows: npt.NDArray[np.float64], weights: npt.NDArray[np.float64],
                   n: int, max_k: int) -> npt.NDArray[np.float64]:
    """``(R,)`` best number of clusters on each resample of items ``weights`` ``(R, I)``."""
    out = np.empty(weights.shape[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        per_row = (weights @ item_pairs) / (weights @ rows)[:, None]  # (R, P)
    for r in range(weights.shape[0]):
        out[r] = best_cut(_matrix(np.maximum(per_row[r], 0.0), n), max_k)[0] if np.isfinite(per_row[r]).all() \
            else np.nan
    return out


def spread(distances: Any, model: str, data: str, *, n_resamples: int = 1000, seed: int = 0) -> SpreadDraws | str:
    """Q1 for one model and data from its ``DistanceResult`` (see the module), or why it cannot be computed."""
    item_pairs = getattr(distances, "item_pairs", None)
    if item_pairs is None or getattr(distances, "item_rows", None) is None:
        return NO_ITEMS
    n = int(distances.distance.shape[0])
    if n < 2 or len(distances.item_rows) < 1 or not distances.n_rows:
        return f"head distances of {n} heads over {len(distances.item_rows)} sentences: nothing to spread"
    item_pairs = np.asarray(item_pairs, dtype=np.float64)  # (I, P)
    rows = np.asarray(distances.item_rows, dtype=np.int64)  # (I,)
    first, second = pair_index(n)
    values = np.asarray(distances.distance, dtype=np.float64)[first, second] / distances.n_rows  # (P,)
    sums = item_pairs.sum(axis=1)  # (I,)
    weights = resample_counts(len(rows), n_resamples, seed)  # (R, I)
    low, high = interval(statistic_draws(sums, rows, len(values), weights))
    max_k = min(MAX_CLUSTERS, n - 1)
    k, score = best_cut(_matrix(values, n), max_k)
    n_cluster = min(n_resamples, CLUSTER_RESAMPLES)
    k_low, k_high = interval(_cluster_draws(item_pairs, rows.astype(np.float64), weights[:n_cluster], n, max_k))
    row = Spread(model=model, data=data, statistic=STATISTIC, value=float(values.mean()), low=low, high=high,
                 sd=float(values.std()), n_clusters=k, n_clusters_low=k_low, n_clusters_high=k_high, silhouette=score,
                 n_items=len(rows), n_resamples=n_resamples, max_k=max_k, n_cluster_resamples=n_cluster,
                 structure=has_structure(score))
    return SpreadDraws(row, values, tuple(distances.item_ids), sums, rows, len(values))


def histograms(found: Sequence[SpreadDraws], bins: int = HISTOGRAM_BINS) -> tuple[Histogram, ...]:
    """One histogram of the per-row pair distances per model, on edges shared by all (0 to the largest value)."""
    if not found:
        return ()
    top = max(float(f.values.max()) if f.values.size else 0.0 for f in found)
    edges = np.linspace(0.0, top if top > 0 else 1.0, bins + 1)
    return tuple(Histogram(f.row.model, f.row.data, edges, np.histogram(f.values, bins=edges)[0].astype(np.int64))
                 for f in found)
