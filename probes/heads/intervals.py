"""Confidence intervals by bootstrap over sentences (or documents)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["bootstrap_ci"]


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
    rng = np.random.default_rng(random_state)
    # Resampling with replacement = multinomial counts of each unit; (n_resamples, n_units).
    counts = rng.multinomial(n_units, np.full(n_units, 1.0 / n_units), size=n_resamples).astype(np.float64)
    flat_c = correct.reshape(n_units, -1)
    num = counts @ flat_c  # (n_resamples, k)
    den = counts @ (total.reshape(n_units, -1) if total.ndim > 1 else total[:, None])
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = num / den
    alpha = (1.0 - confidence) / 2.0
    low = np.nanquantile(acc, alpha, axis=0) if np.isfinite(acc).any() else np.full(acc.shape[1], np.nan)
    high = np.nanquantile(acc, 1.0 - alpha, axis=0) if np.isfinite(acc).any() else np.full(acc.shape[1], np.nan)
    return low.reshape(correct.shape[1:]), high.reshape(correct.shape[1:])
