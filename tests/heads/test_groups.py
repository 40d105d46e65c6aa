"""Head groups (Clark §6): MDS layout, clustering and Fig. 6 behaviour labels on planted structure."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from probes.analysis.head_distances import HeadDistances
from probes.errors import ConfigError
from probes.extraction.attention import TokenAttention, WordAttention
from probes.heads.groups import (
    BEHAVIOUR_RULES,
    DEFAULT_CLUSTERS,
    GROUP_RULE,
    LINKAGE,
    LINKAGES,
    OTHER,
    behaviour_labels,
    cluster_heads,
    mds_layout,
)


def euclidean(points: np.ndarray) -> np.ndarray:
    return np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))


def planted_groups(rng: np.random.Generator, membership: list[int], spread: float = 0.05) -> np.ndarray:
    """Distances of points drawn around one far-apart 2-D centre per group."""
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    points = centres[membership] + spread * rng.normal(size=(len(membership), 2))
    return euclidean(points)


def test_mds_is_deterministic_and_keeps_planar_distances() -> None:
    rng = np.random.default_rng(0)
    points = rng.normal(size=(30, 2)) * 50
    d = euclidean(points)
    layout = mds_layout(d, seed=0)
    assert layout.shape == (30, 2) and layout.dtype == np.float64
    np.testing.assert_array_equal(layout, mds_layout(d, seed=0))
    np.testing.assert_allclose(euclidean(layout), d, atol=1e-3 * d.max())  # exact 2-D geometry recovered


def test_mds_recovers_two_planted_groups() -> None:
    rng = np.random.default_rng(1)
    membership = [0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1]
    d = planted_groups(rng, membership) + 0.3 * np.abs(rng.normal(size=(12, 12)))
    d = np.triu(d, 1) + np.triu(d, 1).T  # noisy, symmetric, zero diagonal: not exactly planar
    layout = mds_layout(d, seed=3)
    within = [euclidean(layout)[i, j] for i in range(12) for j in range(i + 1, 12) if membership[i] == membership[j]]
    between = [euclidean(layout)[i, j] for i in range(12) for j in range(i + 1, 12) if membership[i] != membership[j]]
    assert max(within) < 0.2 * min(between)
    assert min(between) == pytest.approx(10, abs=1.5)


def test_mds_small_inputs_and_checks() -> None:
    assert mds_layout(np.zeros((0, 0))).shape == (0, 2)
    np.testing.assert_array_equal(mds_layout(np.array([[0.0, 3.0], [3.0, 0.0]])), [[0, 0], [3, 0]])
    np.testing.assert_array_equal(mds_layout(np.zeros((4, 4))), np.zeros((4, 2)))
    with pytest.raises(ConfigError, match="square"):
        mds_layout(np.zeros((3, 2)))
    with pytest.raises(ConfigError, match="symmetric"):
        mds_layout(np.array([[0.0, 1.0], [2.0, 0.0]]))
    with pytest.raises(ConfigError, match="non-negative"):
        cluster_heads(np.array([[0.0, np.nan], [np.nan, 0.0]]), 1)


@pytest.mark.parametrize("method", sorted(LINKAGES))
def test_clustering_recovers_planted_groups_numbered_by_first_head(method: str) -> None:
    rng = np.random.default_rng(2)
    membership = [2, 2, 0, 3, 0, 2, 3, 3, 0, 2]  # first heads: group 2 at 0, group 0 at 2, group 3 at 3
    labels = cluster_heads(planted_groups(rng, membership), 3, method)
    np.testing.assert_array_equal(labels, [1, 1, 2, 3, 2, 1, 3, 3, 2, 1])
    assert labels.dtype == np.int64
    np.testing.assert_array_equal(cluster_heads(planted_groups(rng, membership), 1), np.ones(10))
    assert sorted(set(cluster_heads(planted_groups(rng, membership), 10))) == list(range(1, 11))
    with pytest.raises(ConfigError, match="from 1 to the 10 heads"):
        cluster_heads(planted_groups(rng, membership), 11)
    assert LINKAGE in GROUP_RULE and "maxclust" in GROUP_RULE and DEFAULT_CLUSTERS >= 6
    with pytest.raises(ConfigError, match="method: expected one of ward, average"):
        cluster_heads(planted_groups(rng, membership), 2, "single")


def test_groups_of_planted_heads_through_head_distances() -> None:
    """Heads 1-1, 1-3, 2-2 attend to the previous token, the other three to [CLS]: two groups, apart in MDS."""
    rng = np.random.default_rng(3)
    analysis = HeadDistances()
    prev_heads = [(0, 0), (0, 2), (1, 1)]
    for k, t in enumerate((7, 9, 6, 11)):
        w = rng.random((2, 3, t, t)) * 0.2
        for layer in range(2):
            for head in range(3):
                target = np.maximum(np.arange(t) - 1, 0) if (layer, head) in prev_heads else np.zeros(t, int)
                w[layer, head, np.arange(t), target] += 3.0
        w = (w / w.sum(-1, keepdims=True)).astype(np.float32)
        start, end = np.zeros(t, bool), np.zeros(t, bool)
        start[0], end[-1] = True, True
        tokens = TokenAttention(w, tuple("x" * t), np.r_[-1, np.arange(t - 2), -1], start, end)
        analysis.update(SimpleNamespace(sent_id=f"s{k}"),
                        WordAttention(w, start | end, (0, 1), (0, 1, 2), {}, tokens))
    distance = analysis.compute().distance
    for method in LINKAGES:
        np.testing.assert_array_equal(cluster_heads(distance, 2, method), [1, 2, 1, 2, 1, 2])
    layout = mds_layout(distance)
    gap = euclidean(layout)
    prev = [0, 2, 4]
    cls = [1, 3, 5]
    assert gap[np.ix_(prev, prev)].max() < 0.3 * gap[np.ix_(prev, cls)].min()


def test_behaviour_labels_follow_fig6_order() -> None:
    zeros = np.zeros((2, 4))
    means = {key: zeros.copy() for key, _, _ in BEHAVIOUR_RULES}
    means["to_next"][0, 0] = 0.6                                   # 1-1 next
    means["to_prev"][0, 1] = 0.51                                  # 1-2 prev
    means["to_next"][0, 2], means["to_cls"][0, 2] = 0.7, 0.65      # 1-3 next, overridden by [CLS]
    means["entropy"][0, 3] = 3.9                                   # 1-4 broad (Clark's 3.8 nats)
    means["to_sep"][1, 0] = 0.61                                   # 2-1 [SEP]
    means["to_punct"][1, 1], means["to_sep"][1, 1] = 0.9, 0.9      # 2-2 punct overrides [SEP]
    means["to_prev"][1, 2] = 0.5                                   # 2-3 not above 0.5: other
    means["to_sep"][1, 3] = np.nan                                 # 2-4 no end special: other
    labels = behaviour_labels(means)
    assert labels.tolist() == ["attend to next", "attend to prev.", "attend to [CLS]", "attend broadly",
                               "attend to [SEP]", 'attend to "." and ","', OTHER, OTHER]
    # scaled "broad" threshold: uniform ln(16) = 2.77 nats gives 3.8 / ln(128) x 2.77 = 2.17 nats
    means["entropy"][1, 2] = 2.2
    means["entropy"][1, 3] = 2.1
    scaled = behaviour_labels(means, uniform_entropy=float(np.log(16)))
    assert scaled[6] == "attend broadly" and scaled[7] == OTHER and scaled[3] == "attend broadly"
    result = SimpleNamespace(mean=lambda key: means[key], uniform_entropy=float(np.log(16)))
    assert behaviour_labels(result).tolist() == scaled.tolist()
    with pytest.raises(ConfigError, match="to_punct"):
        behaviour_labels({k: v for k, v in means.items() if k != "to_punct"})


def test_smacof_matches_sklearns_from_the_same_start() -> None:
    """Our numpy SMACOF (no sklearn import at run time) against sklearn's smacof, same data, same start."""
    from sklearn.manifold import smacof as sk_smacof

    from probes.heads.groups import _classical_scaling, smacof

    rng = np.random.default_rng(5)
    points = rng.normal(size=(30, 5))  # 5-D geometry: a 2-D layout cannot fit it exactly
    d = np.sqrt(((points[:, None] - points[None]) ** 2).sum(-1))
    d /= d.max()
    init = _classical_scaling(d, 2)
    ours, stress = smacof(d, init, max_iter=1000, eps=1e-9)
    theirs = sk_smacof(d, metric=True, init=init, n_init=1, max_iter=1000, eps=1e-9, normalized_stress=False)[0]
    theirs_stress = float(((np.sqrt(((theirs[:, None] - theirs[None]) ** 2).sum(-1)) - d) ** 2).sum() / 2)
    ours_check = float(((np.sqrt(((ours[:, None] - ours[None]) ** 2).sum(-1)) - d) ** 2).sum() / 2)
    assert ours_check == pytest.approx(theirs_stress, rel=1e-3)
    assert ours_check <= stress + 1e-12  # the returned layout is at least as good as the last stress measured
    np.testing.assert_allclose(ours, theirs, atol=1e-3)


@pytest.mark.parametrize("method", sorted(LINKAGES))
def test_cluster_cuts_equal_scipys_maxclust_ties_included(method: str) -> None:
    """Every cut of the one tree equals scipy's fcluster(maxclust) renumbered by first head, also where merge
    heights tie (integer points: fewer groups than asked) and with identical heads."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    from probes.heads.groups import cluster_cuts

    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(2, 25))
        x = rng.integers(0, 3, (n, 2)).astype(float) if trial % 2 else rng.random((n, 3))
        d = ((x[:, None] - x[None]) ** 2).sum(-1)
        cuts = cluster_cuts(d, range(1, n + 1), method)
        tree = linkage(squareform(np.sqrt(d) if method == "ward" else d, checks=False), method=method)
        for k in range(1, n + 1):
            raw = fcluster(tree, t=k, criterion="maxclust")
            _, first = np.unique(raw, return_index=True)
            order = {label: rank + 1 for rank, label in enumerate(np.unique(raw)[np.argsort(first)])}
            np.testing.assert_array_equal(cuts[k], [order[r] for r in raw])
            np.testing.assert_array_equal(cuts[k], cluster_heads(d, k, method))
