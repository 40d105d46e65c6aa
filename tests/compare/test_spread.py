"""Q1, the spread of head distances: hand values, draws by hand, silhouette against scikit-learn, planted
clusters, and a planted difference between two fake models."""

from __future__ import annotations

import numpy as np
import pytest

from probes.analysis.head_distances import DistanceResult, pair_index
from probes.compare.spread import (
    NO_ITEMS,
    STRUCTURE_SILHOUETTE,
    best_cut,
    has_structure,
    histograms,
    silhouette,
    spread,
    statistic_draws,
    structure_text,
)
from probes.compare.tests import q1_tests

MODELS = {"trained": {"kind": "trained", "spec": "package:x", "base": "package:x", "seed": None},
          "random": {"kind": "random-init", "spec": "random-init:package:x@1", "base": "package:x", "seed": 1}}


def distances(item_pairs: np.ndarray, rows: np.ndarray, ids: tuple[str, ...] | None = None) -> DistanceResult:
    """A DistanceResult of ``n`` heads whose sums are those of the items."""
    n_pairs = item_pairs.shape[1]
    n = int((1 + np.sqrt(1 + 8 * n_pairs)) / 2)
    distance = np.zeros((n, n))
    first, second = pair_index(n)
    distance[first, second] = distance[second, first] = item_pairs.sum(axis=0)
    ids = ids if ids is not None else tuple(f"s{i}" for i in range(len(rows)))
    return DistanceResult((0,), tuple(range(n)), distance, int(rows.sum()), len(rows),
                          item_pairs=item_pairs.astype(np.float32), item_rows=rows.astype(np.int64), item_ids=ids)


def test_hand_value_sd_and_draws() -> None:
    # 3 heads, 2 items: pair sums (1, 2, 3) over 1 row and (1, 0, 5) over 3 rows -> per row (0.5, 0.5, 2)
    result = distances(np.array([[1.0, 2.0, 3.0], [1.0, 0.0, 5.0]]), np.array([1, 3]))
    found = spread(result, "m", "d", n_resamples=200, seed=0)
    assert found.row.value == pytest.approx(1.0)
    assert found.row.sd == pytest.approx(np.std([0.5, 0.5, 2.0]))
    assert found.row.n_items == 2 and found.row.max_k == 2
    # item 1 drawn twice: 12 / 2 / 3 = 2; item 2 twice: 12 / 6 / 3 = 2/3; once each: 12 / 4 / 3 = 1
    draws = statistic_draws(found.item_sums, found.item_rows, 3, np.array([[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]))
    np.testing.assert_allclose(draws, [2.0, 2 / 3, 1.0])
    assert 2 / 3 <= found.row.low <= found.row.high <= 2.0


def test_without_items_says_how_to_get_them() -> None:
    result = distances(np.ones((2, 3)), np.array([1, 1]))
    bare = DistanceResult(result.layers, result.heads, result.distance, result.n_rows, result.n_items)
    assert spread(bare, "m", "d") == NO_ITEMS
    assert "js_items=True" in NO_ITEMS


def test_silhouette_matches_scikit_learn() -> None:
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(0)
    for _ in range(30):
        x = rng.random((12, 2))
        d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
        labels = rng.integers(0, 4, 12)
        labels[:4] = np.arange(4)  # every label used; some may be singletons
        assert silhouette(d, labels * 5 + 1) == pytest.approx(silhouette_score(d, labels, metric="precomputed"))


def test_best_cut_finds_three_planted_groups() -> None:
    rng = np.random.default_rng(1)
    centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = np.repeat(centres, 5, axis=0) + rng.normal(scale=0.3, size=(15, 2))
    d = ((x[:, None] - x[None]) ** 2).sum(-1)  # squared: Ward runs on its square root, the Euclidean distance
    k, score = best_cut(d, 12)
    assert k == 3 and score > 0.8


def test_cluster_structure_needs_a_silhouette_of_a_quarter() -> None:
    assert STRUCTURE_SILHOUETTE == 0.25  # Kaufman & Rousseeuw 1990: below it, no substantial structure
    assert has_structure(0.25) and not has_structure(0.2499) and not has_structure(float("nan"))
    assert structure_text(3, 0.228) == "no substantial cluster structure (best silhouette 0.228 < 0.25)"
    assert structure_text(3, 0.412) == "3 clusters (best silhouette 0.412 >= 0.25)"
    rng = np.random.default_rng(3)
    x = rng.standard_normal((24, 40))  # 24 heads, no groups: some cut is still the best, with a low silhouette
    k, score = best_cut(np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1)), 12)
    assert k >= 2 and score < 0.25 and not has_structure(score)
    assert structure_text(k, score).startswith("no substantial cluster structure (best silhouette 0.")


def test_spread_clusters_of_planted_groups_have_a_tight_interval() -> None:
    rng = np.random.default_rng(2)
    x = np.repeat(np.array([[0.0, 0.0], [10.0, 0.0]]), 4, axis=0)  # 8 heads in 2 groups
    first, second = pair_index(8)
    base = ((x[first] - x[second]) ** 2).sum(-1)  # (P,)
    items = base[None, :] * rng.uniform(0.8, 1.2, size=(30, 1)) + rng.uniform(0, 0.1, size=(30, len(base)))
    found = spread(distances(items * 5, np.full(30, 5)), "m", "d", n_resamples=100, seed=0)
    assert found.row.n_clusters == 2 and found.row.structure  # two far groups: silhouette near 1
    assert (found.row.n_clusters_low, found.row.n_clusters_high) == (2.0, 2.0)


def test_planted_difference_between_two_models_paired_and_unpaired() -> None:
    rng = np.random.default_rng(3)
    rows = rng.integers(5, 20, size=40)
    a = rng.uniform(0.1, 1.0, size=(40, 6)) * rows[:, None]  # 4 heads, 6 pairs
    planted = 0.25
    b = a + planted * rows[:, None]  # every pair, every item: exactly 0.25 more per row
    trained = spread(distances(b, rows), "trained", "d", n_resamples=300, seed=0)
    random = spread(distances(a[::-1], rows[::-1], tuple(f"s{i}" for i in range(40))[::-1]), "random", "d",
                    n_resamples=300, seed=0)  # the same sentences in another order
    assert trained.row.value - random.row.value == pytest.approx(planted, abs=1e-5)
    (test,) = q1_tests({("trained", "d"): trained, ("random", "d"): random}, MODELS, n_resamples=300, seed=0)
    assert test.value == pytest.approx(planted, abs=1e-5)
    assert (test.low, test.high) == pytest.approx((planted, planted), abs=1e-5)  # paired: every draw differs by it
    assert test.p_value < 1e-12  # every paired draw differs by the planted amount: no spread
    assert "paired" in test.method
    other = spread(distances(a, rows, tuple(f"t{i}" for i in range(40))), "random", "d", n_resamples=300, seed=0)
    (unpaired,) = q1_tests({("trained", "d"): trained, ("random", "d"): other}, MODELS, n_resamples=300, seed=0)
    assert "independent" in unpaired.method and unpaired.low < planted < unpaired.high
    assert unpaired.high - unpaired.low > 1e-3  # independent draws: the interval is not a point


def test_histograms_share_edges_and_count_every_pair() -> None:
    one = spread(distances(np.array([[1.0, 2.0, 3.0]]), np.array([1])), "a", "d", n_resamples=10)
    two = spread(distances(np.array([[6.0, 6.0, 6.0]]), np.array([2])), "b", "d", n_resamples=10)
    first, second = histograms([one, two], bins=3)
    np.testing.assert_allclose(first.edges, [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_allclose(second.edges, first.edges)
    assert first.counts.tolist() == [0, 1, 2] and second.counts.tolist() == [0, 0, 3]
