"""Confidence intervals by bootstrap over sentences (or documents): a paired cluster bootstrap.

Hand-written on purpose: ``scipy.stats.bootstrap`` resamples observations for one statistic per call, while
here the units are clusters (a sentence's words count together, so the statistic is a ratio of summed
counts), and one matrix of draws (:func:`resample_counts`) serves every head, baseline and difference at once,
so that intervals computed from it are paired and a difference's interval is that of the paired draws. The
quantiles are numpy's (:func:`percentile_interval`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["bootstrap_ci", "resample_counts", "percentile_interval"]


def resample_counts(n_units: int, n_resamples: int = 1000,
                    random_state: int | None = 0) -> npt.NDArray[np.float64]:
    """``(n_resamples, n_units)`` how often each unit is drawn in each resample (with replacement).

    The one source of bootstrap draws: the same ``random_state`` gives the same resamples,
    so intervals computed from the same draws (a head and its baseline) are paired.
    """
    rng = np.random.default_rng(random_state)
    return rng.multinomial(n_units, np.full(n_units, 1.0 / n_units), size=n_resamples).astype(np.float64)


def percentile_interval(draws: npt.NDArray[np.float64],
                        confidence: float = 0.95) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(low, high)``, each ``(k,)``: percentile interval of ``(n_resamples, k)`` draws, NaN draws ignored.

    A column with no finite draw at all gives NaN.
    """
    alpha = (1.0 - confidence) / 2.0
    if not np.isfinite(draws).any():
        nan = np.full(draws.shape[1], np.nan)
        return nan, nan.copy()
    if np.isnan(draws).any():  # a resample without items for a column (rare ones only)
        low, high = np.nanquantile(draws, [alpha, 1.0 - alpha], axis=0)
    else:
        low, high = np.quantile(draws, [alpha, 1.0 - alpha], axis=0)  # same numbers, much faster
    return low, high


def bootstrap_ci(
    correct: npt.ArrayLike,
    total: npt.ArrayLike,
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    random_state: int | None = 0,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Percentile bootstrap interval of an accuracy, resampling units (sentences).

    Args:
        correct: ``(n_units, *k)`` correct counts per unit, for ``k`` accuracies at once.
        total: ``(n_units,)`` or ``(n_units, *k)`` item counts per unit.
        n_resamples: number of bootstrap resamples.
        confidence: coverage of the interval.
        random_state: seed (the same seed gives the same interval).

    Returns:
        ``(low, high)``, each of shape ``k``; NaN where a resample has no items at all.
    """
    correct = np.asarray(correct, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    n_units = correct.shape[0]
    if n_units == 0:
        nan = np.full(correct.shape[1:], np.nan)
        return nan, nan.copy()
    counts = resample_counts(n_units, n_resamples, random_state)  # (n_resamples, n_units)
    num = counts @ correct.reshape(n_units, -1)  # (n_resamples, k)
    den = counts @ (total.reshape(n_units, -1) if total.ndim > 1 else total[:, None])
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = num / den
    low, high = percentile_interval(acc, confidence)
    return low.reshape(correct.shape[1:]), high.reshape(correct.shape[1:])
