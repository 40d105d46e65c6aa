"""How heads group (Clark et al. 2019 §6, Fig. 6): an MDS layout, a clustering and behaviour labels.

All three work on the ``(N, N)`` head distances of :class:`~probes.analysis.head_distances.DistanceResult`
(summed Jensen-Shannon divergence, head index = layer * H + head) or on per-head statistics in the same
order, so they are model-neutral.

* :func:`mds_layout`: metric MDS (SMACOF, Kruskal 1964) on the precomputed dissimilarities, passing the
  summed JS divergence itself (not its square root) as Clark did; with :data:`MDS_SETTINGS` (a classical
  scaling start and seeded random starts), so the layout is the same on every run (Clark's had no seed).
* :func:`cluster_heads`: hierarchical clustering (Ward on the JS distance by default, :data:`LINKAGE`)
  cut into ``k`` groups (:data:`GROUP_RULE`), labels numbered in order of each group's first head.
* :func:`behaviour_labels`: Clark's Fig. 6 colouring rules on the surface statistics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError

__all__ = ["mds_layout", "smacof", "cluster_heads", "cluster_cuts", "behaviour_labels", "MDS_SETTINGS", "GROUP_RULE", "DEFAULT_CLUSTERS",
           "BEHAVIOUR_RULES", "OTHER", "CLARK_UNIFORM_ENTROPY", "LINKAGE", "LINKAGES"]

#: SMACOF settings of :func:`mds_layout` (metric SMACOF, Guttman transform, unit weights, as sklearn's
#: ``smacof``; written here in numpy because importing ``sklearn.manifold`` alone takes about 1 s, 4% of
#: the atlas' whole budget on EWT dev; ``tests/heads/test_groups.py`` checks it against sklearn's).
#: ``eps`` is the tolerance on the relative change of stress (sklearn >= 1.7 semantics), ``max_iter``
#: Clark's cap. Starts: the classical (Torgerson) scaling of the distances, then ``random_starts`` random
#: ones drawn from the seed; the layout of lowest stress is kept. On 72 random-geometry heads the
#: classical start alone reached a lower stress in 0.03 s than Clark's 5 random starts x 1,000
#: iterations in 1.3 s. Above ``random_starts_up_to`` heads only the classical start runs (1,024 heads:
#: about 20 s on 2 cores for the one start). The distances are divided by their largest value first (and the layout
#: multiplied back), so nothing depends on how many sentences were summed.
MDS_SETTINGS: dict[str, Any] = {"n_components": 2, "max_iter": 1000, "eps": 1e-6, "random_starts": 1,
                                 "random_starts_up_to": 256}

#: Linkage of :func:`cluster_heads`: ``"ward"`` on the Jensen-Shannon *distance* sqrt(D) (a metric
#: that embeds in a Euclidean space, so Ward's variance criterion applies), or ``"average"`` (UPGMA) on D
#: itself. Ward is the default because average linkage chains: on real all-MiniLM-L6-v2 maps of the
#: packaged sample (163 sentences, 72 heads) its 8-group cut was one group of 58 heads and six singletons
#: (silhouette 0.145 on D), while Ward's groups were 21/12/11/9/7/6/5/1 heads that follow Clark's
#: behaviours ([CLS] heads, broad layer-1 heads, the last layer; silhouette 0.199 on D).
LINKAGE = "ward"
#: Linkages :func:`cluster_heads` accepts and the dissimilarity each one clusters.
LINKAGES: dict[str, str] = {"ward": "sqrt(D), the Jensen-Shannon distance", "average": "D, the summed divergence"}

#: How :func:`cluster_heads` groups heads (with the default linkage).
GROUP_RULE = ("Ward-linkage hierarchical clustering of the Jensen-Shannon distances between heads (the square "
              "root of the summed JS divergence; scipy.cluster.hierarchy.linkage, method='ward'), cut into at "
              "most k groups by the 'maxclust' criterion (the highest cut with at most k clusters; fewer only "
              "when merge heights tie); groups numbered 1..k in order of their first head (layer-major)")

#: Default number of head groups. Clark et al.'s Fig. 6 names six behaviours (attend to next, to
#: previous, broadly, to [CLS], to [SEP], to "."/","); two more groups leave room for the heads none of
#: those rules names (the "other" heads, which in BERT split into several linguistic groups), so that
#: the behaviour groups are not forced to merge with them. The data do not pick k for us: on the
#: MiniLM sample maps the silhouette of Ward's cut (on sqrt(D)) is flat: 0.10-0.13 for k = 2..12.
DEFAULT_CLUSTERS = 8

#: Clark's Fig. 6 rules, applied in this order, a later match overriding an earlier one:
#: ``(statistic, threshold, label)``, a head matching when ``statistic > threshold``.
BEHAVIOUR_RULES: tuple[tuple[str, float, str], ...] = (
    ("to_next", 0.5, "attend to next"),
    ("to_prev", 0.5, "attend to prev."),
    ("entropy", 3.8, "attend broadly"),
    ("to_cls", 0.6, "attend to [CLS]"),
    ("to_sep", 0.6, "attend to [SEP]"),
    ("to_punct", 0.6, 'attend to "." and ","'),
)
#: Label of a head no rule matches.
OTHER = "other"
#: Uniform entropy ln(128) of Clark's 128-token segments, the scale of the 3.8-nat "broad" threshold.
CLARK_UNIFORM_ENTROPY = float(np.log(128))


def _check_distance(distance: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``distance`` as a float64 ``(N, N)`` array, or ConfigError saying what is wrong."""
    d = np.asarray(distance, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ConfigError(f"distance: expected a square (N, N) matrix, found shape {d.shape}")
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ConfigError("distance: expected finite non-negative dissimilarities, found NaN, inf or negative values")
    if not np.allclose(d, d.T, rtol=1e-9, atol=0) or np.any(np.diag(d) != 0):
        raise ConfigError("distance: expected a symmetric matrix with a zero diagonal")
    return d


def mds_layout(distance: npt.ArrayLike, seed: int = 0) -> npt.NDArray[np.float64]:
    """``(N, 2)`` metric-MDS coordinates of the heads from their ``(N, N)`` dissimilarities.

    SMACOF with :data:`MDS_SETTINGS` from the classical-scaling start and from random starts drawn
    from ``seed``; the lowest stress wins. The same input and seed give the same layout. The
    coordinates are in the units of ``distance`` (only relative positions matter).
    """
    d = _check_distance(distance)
    n = d.shape[0]
    scale = float(d.max()) if n else 0.0
    if n < 3 or scale == 0:  # nothing to optimise: two heads on a line, one (or all) at the origin
        out = np.zeros((n, 2))
        if n == 2:
            out[1, 0] = d[0, 1]
        return out
    d = d / scale
    dims = int(MDS_SETTINGS["n_components"])
    starts = [_classical_scaling(d, dims)]
    if n <= int(MDS_SETTINGS["random_starts_up_to"]):  # each start costs ~N^2 per step: large models get one
        starts += [np.random.default_rng(seed + i + 1).uniform(size=(n, dims))
                   for i in range(int(MDS_SETTINGS["random_starts"]))]
    fits = (smacof(d, init, max_iter=int(MDS_SETTINGS["max_iter"]), eps=float(MDS_SETTINGS["eps"]))
            for init in starts)  # (layout, stress) of each start
    layout, _ = min(fits, key=lambda fit: fit[1])  # the first start of the lowest stress
    return np.asarray(layout, dtype=np.float64) * scale


def smacof(d: npt.NDArray[np.float64], init: npt.NDArray[np.float64], *, max_iter: int = 1000,
           eps: float = 1e-6) -> tuple[npt.NDArray[np.float64], float]:
    """Metric SMACOF from ``init`` ``(N, k)``: ``(layout, raw stress)``, stress = Σ_{i<j} (|x_i - x_j| - d_ij)².

    Guttman transform with unit weights, X <- B(X) X / N, until the stress falls by less than ``eps`` of
    itself (or ``max_iter`` steps): the iteration of sklearn's ``smacof(metric=True)``.
    """
    x = np.array(init, dtype=np.float64)
    n = d.shape[0]
    previous = None
    stress = float("inf")
    dist, ratio = np.empty_like(d), np.empty_like(d)  # (N, N) buffers reused by every step
    diagonal = np.arange(n)
    for _ in range(max_iter):
        norms = (x ** 2).sum(axis=1)  # (N,)
        np.matmul(x, x.T, out=dist)  # |x_i - x_j|^2 = |x_i|^2 + |x_j|^2 - 2 x_i.x_j, without (N, N, k) gaps
        dist *= -2
        dist += norms[:, None]
        dist += norms[None, :]
        np.maximum(dist, 0, out=dist)
        np.sqrt(dist, out=dist)
        dist[diagonal, diagonal] = 0
        stress = float(((dist - d) ** 2).sum() / 2)
        np.divide(d, dist, out=ratio, where=dist > 0)
        ratio[dist <= 0] = 0
        row_sums = ratio.sum(axis=1)  # B = diag(row sums) - ratio
        x = (row_sums[:, None] * x - ratio @ x) / n
        if previous is not None and (previous - stress) / max(previous, 1e-300) < eps:
            break
        previous = stress
    return x, stress


def _classical_scaling(d: npt.NDArray[np.float64], dims: int) -> npt.NDArray[np.float64]:
    """``(N, dims)`` Torgerson scaling of ``d``: top eigenvectors of the double-centred -d²/2, signs fixed."""
    n = d.shape[0]
    centred = -0.5 * (d ** 2)
    centred -= centred.mean(axis=0, keepdims=True)
    centred -= centred.mean(axis=1, keepdims=True)
    values, vectors = np.linalg.eigh(centred)  # ascending
    top = np.argsort(values)[::-1][:dims]
    coords = vectors[:, top] * np.sqrt(np.maximum(values[top], 0))  # (N, dims)
    flip = np.sign(coords[np.abs(coords).argmax(axis=0), np.arange(coords.shape[1])])
    coords *= np.where(flip == 0, 1.0, flip)
    return coords + 1e-9 * np.arange(n * dims).reshape(n, dims)  # no two heads start on one point


def cluster_heads(distance: npt.ArrayLike, k: int, method: str = LINKAGE) -> npt.NDArray[np.int64]:
    """``(N,)`` group labels 1..k of the heads (:data:`GROUP_RULE`); group 1 holds head 0.

    Args:
        distance: ``(N, N)`` summed JS divergences (symmetric, zero diagonal).
        k: most groups to cut the tree into.
        method: a linkage of :data:`LINKAGES` (default :data:`LINKAGE`).
    """
    return cluster_cuts(distance, (k,), method)[k]


def cluster_cuts(distance: npt.ArrayLike, ks: Sequence[int], method: str = LINKAGE
                 ) -> dict[int, npt.NDArray[np.int64]]:
    """``{k: (N,) labels}``: the one tree of :func:`cluster_heads` cut at every ``k`` of ``ks`` (each cut equal
    to ``cluster_heads(distance, k, method)``, the tree built once)."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    d = _check_distance(distance)
    n = d.shape[0]
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= max(n, 1):
            raise ConfigError(f"k: expected a whole number of groups from 1 to the {n} heads, found {k!r}")
    if method not in LINKAGES:
        raise ConfigError(f"method: expected one of {', '.join(LINKAGES)}, found {method!r}")
    if n < 2:
        return {int(k): np.ones(n, dtype=np.int64) for k in ks}
    tree = linkage(squareform(np.sqrt(d) if method == "ward" else d, checks=False), method=method)
    if np.any(np.diff(tree[:, 2]) < 0):  # not monotone (never for ward or average): scipy's own cut
        return {int(k): _first_head_order(fcluster(tree, t=int(k), criterion="maxclust")) for k in ks}
    return _monotone_cuts(tree, n, [int(k) for k in ks])


def _monotone_cuts(tree: npt.NDArray[np.float64], n: int, ks: Sequence[int]) -> dict[int, npt.NDArray[np.int64]]:
    """``{k: (N,) labels}`` of scipy's ``fcluster(tree, k, "maxclust")`` for a monotone linkage ``tree``
    ``(N - 1, 4)``: the cut at k applies every merge no higher than the ``(N - k)``-th one (so ties at that
    height give fewer than k groups, as maxclust does); every cut at once, without scipy's per-call validation
    of the tree (0.5 ms per cut: most of the time of a bootstrap of cluster counts)."""
    heights = tree[:, 2]
    applied = np.array([0 if k >= n else int(np.count_nonzero(heights <= heights[n - k - 1])) for k in ks])  # (K,)
    parent = np.full(2 * n - 1, -1, dtype=np.int64)  # node ids: leaf i is i, merge j makes n + j
    first = np.arange(2 * n - 1, dtype=np.int64)  # the first (lowest) head under each node
    for j, (a, b) in enumerate(tree[:, :2].astype(np.int64).tolist()):
        parent[a] = parent[b] = n + j
        first[n + j] = min(first[a], first[b])
    node = np.tile(np.arange(n, dtype=np.int64), (len(ks), 1))  # (K, N) each head's group in each cut
    limit = (n + applied)[:, None]  # merges below this id are applied in that cut
    while True:
        up = parent[node]
        move = (up >= 0) & (up < limit)
        if not move.any():
            break
        node = np.where(move, up, node)
    head = first[node]  # (K, N) the first head of each head's group
    marker = np.zeros(node.shape, dtype=np.int64)
    np.put_along_axis(marker, head, 1, axis=1)
    labels = np.take_along_axis(np.cumsum(marker, axis=1), head, axis=1)  # 1..k in order of first heads
    return {int(k): labels[i] for i, k in enumerate(ks)}


def _first_head_order(raw: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    """``(N,)`` labels ``raw`` (arbitrary ids) renumbered 1..k in order of each group's first head."""
    _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)  # first head of each raw label
    rank = np.empty(first.shape[0], dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(1, first.shape[0] + 1)  # raw labels by their first head
    return rank[inverse.reshape(-1)]


def behaviour_labels(means: Any, uniform_entropy: float | None = None) -> npt.NDArray[np.str_]:
    """``(N,)`` Clark Fig. 6 behaviour of every head (layer-major), from per-head surface statistics.

    Args:
        means: a mapping ``{statistic: (L, H) array}`` or an object with ``mean(statistic) -> (L, H)``
            (a surface-statistics result), holding ``to_next``, ``to_prev``, ``entropy``, ``to_cls``,
            ``to_sep`` (NaN without an end special: never matches) and ``to_punct``.
        uniform_entropy: mean ln(n) of the data (taken from ``means.uniform_entropy`` when it has one).
            Clark's 3.8-nat "broad" threshold was set on 128-token segments (uniform ln 128 = 4.85); with a
            uniform entropy given it is scaled to 3.8 / ln(128) x uniform_entropy, so that short sentences
            can have broad heads too. Without one, 3.8 nats as in the paper.
    """
    if uniform_entropy is None:
        uniform_entropy = getattr(means, "uniform_entropy", None)
    labels: npt.NDArray[np.str_] | None = None
    for statistic, threshold, label in BEHAVIOUR_RULES:
        values = np.asarray(_statistic(means, statistic), dtype=np.float64).reshape(-1)  # (N,)
        if labels is None:
            labels = np.full(values.shape[0], OTHER, dtype=object)
        elif values.shape != labels.shape:
            raise ConfigError(f"behaviour_labels: {statistic} holds {values.shape[0]} heads, expected {labels.shape[0]}")
        if statistic == "entropy" and uniform_entropy is not None:
            threshold = threshold / CLARK_UNIFORM_ENTROPY * float(uniform_entropy)
        with np.errstate(invalid="ignore"):
            labels[values > threshold] = label
    assert labels is not None  # BEHAVIOUR_RULES is not empty
    return labels.astype(str)


def _statistic(means: Any, name: str) -> Any:
    """``(L, H)`` values of one statistic from a mapping or a result with ``mean(name)``."""
    if isinstance(means, Mapping):
        if name not in means:
            raise ConfigError(f"behaviour_labels: expected statistic {name!r}, found only {', '.join(map(str, means))}")
        return means[name]
    if hasattr(means, "mean"):
        return means.mean(name)
    raise ConfigError(f"behaviour_labels: expected a mapping of statistics or a result with mean(), "
                      f"found {type(means).__name__}")
