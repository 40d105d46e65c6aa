"""The comparison's small statistics against references: scipy's spearmanr, a hand Holm loop, hand p-values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from probes.compare.stats import bootstrap_p, holm_rows, interval, spearman_rows
from probes.heads.inference import holm


def test_spearman_rows_matches_scipy_with_ties_and_is_nan_for_constants() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, size=(20, 9)).astype(float)  # many ties
    b = rng.integers(0, 4, size=(20, 9)).astype(float)
    got = spearman_rows(a, b)
    for row in range(20):
        ref = spearmanr(a[row], b[row]).statistic
        assert got[row] == pytest.approx(ref, abs=1e-12) or (np.isnan(ref) and np.isnan(got[row]))
    assert spearman_rows([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(spearman_rows([1, 1, 1], [1, 2, 3]))
    assert np.isnan(spearman_rows([1.0], [2.0]))  # N < 2
    # by hand, one tie: ranks (1, 2.5, 2.5, 4) and (1, 2, 3, 4) -> centred (-1.5, 0, 0, 1.5), (-1.5, -.5, .5, 1.5)
    # rho = 4.5 / sqrt(4.5 * 5) = 0.9487
    assert spearman_rows([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / np.sqrt(4.5 * 5.0), abs=1e-15)


def _holm_reference(p: np.ndarray) -> np.ndarray:
    """The textbook step-down on one row, as a plain loop: the i-th smallest of m tests times m - i, running max,
    capped at 1; NaN is not a test."""
    out = np.full(p.shape, np.nan)
    tested = [j for j in range(p.size) if not np.isnan(p[j])]
    running = 0.0
    for i, j in enumerate(sorted(tested, key=lambda j: p[j])):  # stable: ties keep their order
        running = max(running, (len(tested) - i) * p[j])
        out[j] = min(1.0, running)
    return out


def test_holm_rows_equals_the_step_down_on_each_row_nan_kept() -> None:
    rng = np.random.default_rng(1)
    p = rng.random((50, 7)) ** 3
    p[rng.random(p.shape) < 0.2] = np.nan
    p[:5, :3] = 0.01  # tied p-values
    got = holm_rows(p)
    for row in range(50):
        np.testing.assert_allclose(got[row], _holm_reference(p[row]), rtol=1e-15, equal_nan=True)
        np.testing.assert_array_equal(holm(p[row]), got[row])  # the same function row by row
    # by hand: p = (0.01, 0.04, 0.03) -> sorted 0.01*3, 0.03*2, 0.04*1 -> 0.03, 0.06, max(0.06, 0.04) = 0.06
    np.testing.assert_allclose(holm_rows([[0.01, 0.04, 0.03]])[0], [0.03, 0.06, 0.06])
    assert np.isnan(holm_rows([[np.nan, np.nan]])).all()


def test_bootstrap_p_by_hand() -> None:
    # draws 1, 2, 3: sd 1; estimate 2 -> z = 2, p = 2 (1 - Phi(2)) = 0.0455
    assert bootstrap_p([1.0, 2.0, 3.0], 2.0) == pytest.approx(2 * (1 - 0.9772498680518208))
    assert bootstrap_p([1.0, 2.0, 3.0, np.nan], -2.0) == pytest.approx(0.0455002638963584)  # NaN draws dropped
    assert bootstrap_p(np.ones(5), 0.0) == 1.0 and bootstrap_p(np.ones(5), 1.0) == 0.0  # no spread
    p = bootstrap_p([np.nan, 1.0], 1.0)
    assert p != p  # NaN with fewer than two draws


def test_bootstrap_p_is_calibrated_under_the_null_and_resolves_large_effects() -> None:
    """Simulated: a mean whose true value is 0 is called significant at 0.05 about 5% of the time; an effect of
    10 standard errors gets a p far below 1 / draws (what counting draws could not show)."""
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(400):
        x = rng.normal(size=50)
        draws = x[rng.integers(0, 50, size=(500, 50))].mean(axis=1)
        hits += bootstrap_p(draws, float(x.mean())) < 0.05
    assert 0.02 < hits / 400 < 0.09
    x = rng.normal(size=100) + 1.0  # mean 1, standard error 0.1
    draws = x[rng.integers(0, 100, size=(1000, 100))].mean(axis=1)
    assert bootstrap_p(draws, float(x.mean())) < 1e-6

def test_interval_is_the_percentile_interval() -> None:
    low, high = interval(np.arange(1001, dtype=float))
    assert (low, high) == pytest.approx((25.0, 975.0))
