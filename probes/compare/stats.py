"""Small vectorised statistics of the comparison: Spearman's rho per row, Holm per row, bootstrap p-values.

Every bootstrap of :mod:`probes.compare` draws with :func:`probes.heads.intervals.resample_counts` (the same seed
gives the same draws, so two quantities computed from one set of draws are paired) and reports 95% percentile
intervals (:func:`interval`).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from probes.heads.intervals import percentile_interval

__all__ = ["spearman_rows", "holm_rows", "bootstrap_p", "interval", "BOOTSTRAP_P"]

#: How a bootstrap p-value is computed (:func:`bootstrap_p`), cited by each test's method.
BOOTSTRAP_P = ("two-sided p from the bootstrap standard error: z = estimate / sd of the draws, p = 2 (1 - Phi(|z|)) "
               "(normal approximation, so a p below 1 / draws can still be told apart)")


def _ranks(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Average ranks along the last axis (ties share their mean rank)."""
    from scipy.stats import rankdata

    return np.asarray(rankdata(values, axis=-1), dtype=np.float64)


def spearman_rows(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(...,)`` Spearman's rho between ``a`` and ``b`` ``(..., N)`` along the last axis (average ranks for
    ties); NaN where either side is constant or ``N < 2``. Inputs must hold no NaN."""
    x, y = _ranks(np.asarray(a, dtype=np.float64)), _ranks(np.asarray(b, dtype=np.float64))
    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    den = np.sqrt((x ** 2).sum(axis=-1) * (y ** 2).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (x * y).sum(axis=-1) / np.where(den > 0, den, 1.0), np.nan)


def holm_rows(p_values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Holm-adjusted p-values of every row of ``p_values`` ``(R, m)`` (as :func:`probes.heads.inference.holm`
    on each row: NaN entries are not tests and stay NaN)."""
    p = np.atleast_2d(np.asarray(p_values, dtype=np.float64))
    order = np.argsort(np.where(np.isnan(p), np.inf, p), axis=1, kind="stable")  # NaN last
    ranked = np.take_along_axis(p, order, axis=1)  # (R, m)
    m = (~np.isnan(p)).sum(axis=1, keepdims=True)  # (R, 1) tests per row
    factor = m - np.arange(p.shape[1])[None, :]  # (R, m)
    scaled = np.where(np.isnan(ranked), -np.inf, factor * ranked)
    adjusted = np.minimum(1.0, np.maximum.accumulate(scaled, axis=1))
    adjusted = np.where(np.isnan(ranked), np.nan, adjusted)
    out = np.empty_like(p)
    np.put_along_axis(out, order, adjusted, axis=1)
    return out


def bootstrap_p(draws: npt.ArrayLike, value: float) -> float:
    """Two-sided p-value that the quantity estimated by ``value``, whose bootstrap ``draws`` are given, is 0
    (:data:`BOOTSTRAP_P`). Counting the draws beyond 0 cannot give a p below about 1 / draws, which a Holm
    correction over tens of tests then pushes above 0.05 however large the effect; the standard-error z does not.
    NaN draws are dropped; NaN with fewer than 2; a zero spread gives 0 (value not 0) or 1 (value 0)."""
    d = np.asarray(draws, dtype=np.float64).reshape(-1)
    d = d[np.isfinite(d)]
    if d.size < 2 or not np.isfinite(value):
        return float("nan")
    se = float(d.std(ddof=1))
    if se == 0:
        return 1.0 if value == 0 else 0.0
    return float(math.erfc(abs(value) / se / math.sqrt(2.0)))  # 2 (1 - Phi(|z|))


def interval(draws: npt.ArrayLike) -> tuple[float, float]:
    """95% percentile interval of 1-D ``draws`` (NaN draws ignored; NaN, NaN without a finite one)."""
    low, high = percentile_interval(np.asarray(draws, dtype=np.float64).reshape(-1, 1))
    return float(low[0]), float(high[0])
