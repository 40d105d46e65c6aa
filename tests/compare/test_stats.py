"""The comparison's small statistics against references: scipy's Spearman, the package's Holm, hand p-values."""

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


def test_holm_rows_equals_holm_on_each_row_nan_kept() -> None:
    rng = np.random.default_rng(1)
    p = rng.random((50, 7)) ** 3
    p[rng.random(p.shape) < 0.2] = np.nan
    got = holm_rows(p)
    for row in range(50):
        np.testing.assert_allclose(got[row], holm(p[row]), equal_nan=True)
    # by hand: p = (0.01, 0.04, 0.03) -> sorted 0.01*3, 0.03*2, 0.04*1 -> 0.03, 0.06, max(0.06, 0.04) = 0.06
    np.testing.assert_allclose(holm_rows([[0.01, 0.04, 0.03]])[0], [0.03, 0.06, 0.06])


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
