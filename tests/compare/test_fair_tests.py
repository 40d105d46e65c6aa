"""The fair tests of issue 39 against slow references, hand-computed values and published numbers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import probes.compare.fair_tests as fair
from probes.compare.fair_tests import identity_test, matching_p, rank_distance, within_cross_test


def _distances(points: np.ndarray) -> np.ndarray:
    return np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(-1))


def _slow_p(distance: np.ndarray, n_a: int) -> float:
    """Every permutation of the model labels (not groupings): the share with |D_cross - D_within| as large."""
    n = len(distance)

    def stat(labels: tuple[int, ...]) -> float:
        within, cross = [], []
        for i, j in itertools.combinations(range(n), 2):
            (within if labels[i] == labels[j] else cross).append(distance[i, j])
        return float(np.mean(cross) - np.mean(within))

    observed = stat(tuple([0] * n_a + [1] * (n - n_a)))
    perms = list(itertools.permutations([0] * n_a + [1] * (n - n_a)))
    return float(np.mean([abs(stat(p)) >= abs(observed) - 1e-12 for p in perms]))


@pytest.mark.parametrize("n_a,n_b", [(3, 3), (3, 4), (4, 4)])
def test_exact_p_equals_the_enumeration_of_every_label_permutation(n_a, n_b):
    rng = np.random.default_rng(n_a * 10 + n_b)
    points = rng.normal(size=(n_a + n_b, 3))
    points[:n_a] += 0.8  # model A's heads a little apart
    d = _distances(points)
    test = within_cross_test(d, n_a)
    assert test.exact and test.n_permutations == math.comb(n_a + n_b, n_a) // (2 if n_a == n_b else 1)
    assert test.p_value == pytest.approx(_slow_p(d, n_a), abs=1e-12)


def test_monte_carlo_agrees_with_the_exact_p(monkeypatch):
    rng = np.random.default_rng(3)
    points = rng.normal(size=(10, 2))
    points[:5] += 0.7
    d = _distances(points)
    exact = within_cross_test(d, 5)
    monkeypatch.setattr(fair, "EXACT_LIMIT", 10)
    drawn = within_cross_test(d, 5, n_permutations=4000, seed=1)
    assert not drawn.exact and drawn.n_permutations == 4000
    assert drawn.p_value == pytest.approx(exact.p_value, abs=0.03)
    assert "Monte Carlo, 4000" in drawn.method and "exact, all 126" in exact.method


def test_seed_specific_heads_are_found_and_exchangeable_heads_are_not():
    rng = np.random.default_rng(0)
    apart = rng.normal(size=(8, 4))
    apart[4:] += 5.0  # model B's heads far from model A's
    assert within_cross_test(_distances(apart), 4).p_value == pytest.approx(1 / 35)  # the most extreme of 35
    p_values = [within_cross_test(_distances(rng.normal(size=(8, 4))), 4).p_value for _ in range(200)]
    assert 0.02 < np.mean(np.array(p_values) <= 0.05) < 0.09  # exchangeable: about 5% rejected at 0.05


def test_matching_p_counts_the_null_at_or_below():
    assert matching_p(0.077, [0.08, 0.09, 0.1, 0.2]) == pytest.approx(1 / 5)
    assert matching_p(0.09, [0.08, 0.09, 0.1, 0.2]) == pytest.approx(3 / 5)
    with pytest.raises(ValueError):
        matching_p(0.1, [float("nan")])


def test_identity_share_matches_the_issue_and_a_hand_computed_binomial():
    # issue 39: 11 of 48 matched heads keep their index with 8 heads: above chance, p about 0.03; 3 of 24 at 4 heads:
    # p = 0.12 below chance
    assert identity_test(11, 48, 8) == pytest.approx(0.032, abs=0.001)
    assert identity_test(3, 24, 4, alternative="less") == pytest.approx(0.115, abs=0.001)
    hand = sum(math.comb(24, k) * 0.25 ** k * 0.75 ** (24 - k) for k in range(9, 25))
    assert identity_test(9, 24, 4) == pytest.approx(hand, rel=1e-9)


def _softmax(z: np.ndarray, temperature: float) -> np.ndarray:
    e = np.exp((z - z.max(-1, keepdims=True)) / temperature)
    return e / e.sum(-1, keepdims=True)


def test_rank_distance_ignores_sharpening_where_jensen_shannon_does_not():
    from scipy.spatial.distance import jensenshannon

    rng = np.random.default_rng(5)
    z, w = rng.normal(size=(2, 4, 6, 6))
    base = rank_distance(_softmax(z, 1.0), _softmax(w, 1.0))
    sharp = rank_distance(_softmax(z, 0.2), _softmax(w, 0.3))
    assert sharp == pytest.approx(base, abs=1e-12)
    js = [np.mean(jensenshannon(_softmax(z, t).reshape(-1, 6), _softmax(w, t).reshape(-1, 6), axis=1) ** 2)
          for t in (1.0, 0.2)]
    assert abs(js[0] - js[1]) > 0.05  # JS moves with sharpening
    assert rank_distance(_softmax(z, 1.0), _softmax(z, 0.1)) == pytest.approx(0.0, abs=1e-12)  # same head, sharper
