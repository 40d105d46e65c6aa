"""The peak growth rate in the linear regime, the onset and the permutation test of two noise sizes
(probes.compare.growth), against simulations with a known rate, hand-computed values and slow enumeration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from probes.compare.growth import EXACT_LIMIT, MONTE_CARLO, layer_growth, onset_step, peak_growth, rate_difference_test
from probes.errors import ConfigError
from probes.training.symmetry import HeadSymmetry


def _simulated(rate: float, eps: float, base: float = 0.0, start: int = 12, top: float = 1.4, n: int = 120
               ) -> tuple[np.ndarray, np.ndarray]:
    """A distance at every step: ``base`` (a plateau: excess 0) until ``start``, then ``base + eps exp(rate (t -
    start))`` until it reaches ``base + top``, then flat there (saturation)."""
    steps = np.arange(n)
    excess = np.where(steps < start, 0.0, eps * np.exp(rate * (steps - start)))
    return steps, base + np.minimum(excess, top)


@pytest.mark.parametrize("rate,eps", [(0.1, 1e-2), (0.1, 1e-4), (0.037, 1e-3)])
def test_a_simulated_exponential_is_recovered_with_r2_one(rate, eps):
    steps, distance = _simulated(rate, eps)
    fit = peak_growth(steps, distance, window=8)
    assert fit.rate == pytest.approx(rate, abs=1e-6)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert fit.doubling == pytest.approx(math.log(2) / rate, rel=1e-5)
    assert fit.n_points == 8 and fit.last - fit.first == 7
    assert fit.first >= 12  # no window that reaches into the plateau before the rise (excess 0 there)
    top = 12 + math.log(1.4 / eps) / rate  # where the curve saturates
    assert fit.last <= top + 1


def test_the_rate_does_not_depend_on_the_noise_only_the_onset_does():
    small, large = _simulated(0.1, 1e-4), _simulated(0.1, 1e-2)
    assert peak_growth(*small, window=6).rate == pytest.approx(peak_growth(*large, window=6).rate, abs=1e-9)
    # the excess reaches 0.05 at 12 + ln(0.05 / eps) / 0.1: 12 + 62.15 -> step 75 and 12 + 16.09 -> step 29
    assert onset_step(*small, 0.05) == 75 and onset_step(*large, 0.05) == 29
    assert onset_step(*large, 10.0) is None


def test_a_hand_made_case():
    # excess e^0, e^1, e^3, e^3.5 at steps 1..4 (0 at step 0); window 3: (0..2) holds excess 0 and is skipped,
    # (1..3): ln excess 0, 1, 3 -> slope 1.5, residuals 1/6, -1/3, 1/6 -> R² = 1 - (1/6) / (14/3) = 27/28;
    # (2..4): 1, 3, 3.5 -> slope 1.25
    steps = [0, 1, 2, 3, 4]
    distance = [0.5, 0.5 + 1, 0.5 + math.e, 0.5 + math.exp(3), 0.5 + math.exp(3.5)]
    fit = peak_growth(steps, distance, window=3, baseline="start")
    assert fit.rate == pytest.approx(1.5, abs=1e-12)
    assert fit.r2 == pytest.approx(27 / 28, abs=1e-12)
    assert (fit.first, fit.last, fit.n_points) == (1, 3, 3)
    assert fit.doubling == pytest.approx(math.log(2) / 1.5)
    above = peak_growth(steps, distance, window=3, floor=1.5, baseline="start")  # window (1..3) has an excess of 1 <= 1.5
    assert above.rate == pytest.approx(1.25, abs=1e-12) and (above.first, above.last) == (2, 4)
    spaced = peak_growth([0, 2, 4, 6, 8], distance, window=3, baseline="start")  # the rate is per step, not per measurement
    assert spaced.rate == pytest.approx(0.75, abs=1e-12) and (spaced.first, spaced.last) == (2, 6)


def test_no_window_gives_nan_and_bad_requests_are_refused():
    flat = peak_growth([0, 1, 2, 3], [0.2, 0.2, 0.1, 0.2], window=2, baseline="start")
    assert math.isnan(flat.rate) and math.isnan(flat.doubling) and flat.n_points == 0 and flat.first == -1
    falling = peak_growth([0, 1, 2, 3], [0.0, 0.8, 0.4, 0.2], window=2)
    assert falling.rate < 0 and math.isnan(falling.doubling)
    for bad, match in [(dict(window=1), "window"), (dict(window=2, floor=-1.0), "floor")]:
        with pytest.raises(ConfigError, match=match):
            peak_growth([0, 1, 2], [0.0, 1.0, 2.0], **bad)
    with pytest.raises(ConfigError, match="step 0"):
        peak_growth([1, 2, 3], [0.0, 1.0, 2.0], window=2)
    with pytest.raises(ConfigError, match="increasing"):
        peak_growth([0, 2, 2], [0.0, 1.0, 2.0], window=2)
    with pytest.raises(ConfigError, match="one distance per step"):
        onset_step([0, 1], [0.0], 1.0)


def _slow_p(a: list[float], b: list[float]) -> float:
    """Every permutation of the pooled values (not subsets): the share whose |mean difference| is as large."""
    pooled, n_a = a + b, len(a)
    observed = abs(np.mean(a) - np.mean(b))
    hits = [abs(np.mean(p[:n_a]) - np.mean(p[n_a:])) >= observed - 1e-12 for p in itertools.permutations(pooled)]
    return float(np.mean(hits))


@pytest.mark.parametrize("a,b", [([0.11, 0.13, 0.12], [0.09, 0.10, 0.095, 0.097]),
                                 ([0.2, 0.2, 0.3], [0.2, 0.3, 0.1]),  # ties between the samples
                                 ([0.5, 0.1, 0.4, 0.3], [0.2, 0.6, 0.0])])
def test_the_exact_p_equals_a_slow_enumeration_of_every_relabelling(a, b):
    test = rate_difference_test(a, b)
    assert test.exact and test.n_permutations == math.comb(len(a) + len(b), len(a))
    assert test.p_value == pytest.approx(_slow_p(a, b), abs=1e-12)
    difference, p = test  # unpacks as (difference of means, p)
    assert difference == pytest.approx(np.mean(a) - np.mean(b)) and p == test.p_value
    assert "exact, all" in test.method


def test_separated_samples_give_the_smallest_exact_p():
    a, b = [1.0, 1.1, 1.2, 1.3], [0.1, 0.2, 0.3, 0.4]
    assert rate_difference_test(a, b).p_value == pytest.approx(2 / math.comb(8, 4))  # both extreme splits


def test_monte_carlo_beyond_the_exact_limit_agrees_with_the_enumeration():
    rng = np.random.default_rng(4)
    a, b = rng.normal(0.1, 0.02, 10), rng.normal(0.12, 0.02, 10)
    assert math.comb(20, 10) > EXACT_LIMIT
    test = rate_difference_test(a, b, seed=1)
    assert not test.exact and test.n_permutations == MONTE_CARLO and "Monte Carlo" in test.method
    pooled = np.concatenate([a, b])
    subsets = np.asarray(list(itertools.combinations(range(20), 10)))
    sums = pooled[subsets].sum(axis=1)
    stats = np.abs(sums / 10 - (pooled.sum() - sums) / 10)
    exact = float(np.mean(stats >= abs(a.mean() - b.mean()) - 1e-12))
    assert test.p_value == pytest.approx(exact, abs=0.02)
    assert rate_difference_test(a, b, seed=1) == test  # seeded


def test_bad_samples_are_refused():
    with pytest.raises(ConfigError, match="non-empty"):
        rate_difference_test([], [0.1])
    with pytest.raises(ConfigError, match="finite"):
        rate_difference_test([math.nan, 0.1], [0.1])


def test_layer_growth_reads_the_mean_over_pairs_of_each_layer():
    steps, curve = _simulated(0.08, 1e-3, base=0.0, n=100)
    n_heads = 3
    values = np.zeros((len(steps), 2, n_heads, n_heads))
    for i, j in itertools.combinations(range(n_heads), 2):
        weight = (i + 1) * (j + 1) / 11 * 3  # pairs weights 6/11, 9/11, 18/11: mean 1
        values[:, 0, i, j] = values[:, 0, j, i] = weight * curve  # layer 1: the curve's rate
        values[:, 1, i, j] = values[:, 1, j, i] = weight * curve ** 2  # layer 2: twice the rate
    symmetry = HeadSymmetry(steps.astype(np.int64), values, values, 4)
    fits = layer_growth(symmetry, which="attention_distance", window=5)
    assert fits[0].rate == pytest.approx(0.08, abs=1e-6) and fits[1].rate == pytest.approx(0.16, abs=1e-6)
    with pytest.raises(ConfigError, match="param_distance or attention_distance"):
        layer_growth(symmetry, which="loss", window=5)


def test_the_excess_over_zero_gives_the_rate_of_a_curve_growing_from_its_start():
    """Noise of size eps grows like eps exp(rate t) from step 0: the distance itself is the excess over the
    identical control (exactly 0), and its log slope is the rate; the excess over step 0, eps (exp(rate t) - 1),
    rises like ln t at first and inflates the peak."""
    steps = np.arange(60)
    distance = 1e-3 * np.exp(0.1 * steps)
    assert peak_growth(steps, distance, window=10).rate == pytest.approx(0.1, abs=1e-9)
    assert peak_growth(steps, distance, window=10, baseline="start").rate > 0.2
    with pytest.raises(ConfigError, match="baseline"):
        peak_growth(steps, distance, window=10, baseline="first")


def test_the_ceiling_keeps_the_linear_regime_before_a_later_faster_phase():
    """Growth at 0.05 per step while small, then a faster phase (0.3 per step) up to saturation: the peak over
    every window is the later phase's; with a ceiling of a tenth of the largest distance, the linear regime's."""
    steps = np.arange(200)
    early = 1e-4 * np.exp(0.05 * steps)
    late = early[100] * np.exp(0.3 * (steps - 100))
    distance = np.minimum(np.where(steps < 100, early, late), 1.0)
    assert peak_growth(steps, distance, window=10).rate == pytest.approx(0.3, abs=1e-9)
    small = peak_growth(steps, distance, window=10, ceiling=0.01)
    assert small.rate == pytest.approx(0.05, abs=1e-9) and small.last < 100
    with pytest.raises(ConfigError, match="ceiling"):
        peak_growth(steps, distance, window=10, ceiling=0.0)
