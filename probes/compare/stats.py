"""Small vectorised statistics of the comparison: Spearman's rho per row, Holm per row, bootstrap p-values.

Spearman's rho, Holm and the normal p-value are :mod:`probes.heads.inference`'s (scipy's ranks, correlation
and normal distribution; the package's one Holm), so every stage computes them one way. Every bootstrap of
:mod:`probes.compare` draws with :func:`probes.heads.intervals.resample_counts` (the same seed gives the same
draws, so two quantities computed from one set of draws are paired) and reports 95% percentile intervals
(:func:`interval`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from probes.heads.inference import holm, p_from_z, spearman_rows
from probes.heads.intervals import percentile_interval

__all__ = ["spearman_rows", "holm_rows", "bootstrap_p", "interval", "BOOTSTRAP_P"]

#: How a bootstrap p-value is computed (:func:`bootstrap_p`), cited by each test's method.
BOOTSTRAP_P = ("two-sided p from the bootstrap standard error: z = estimate / sd of the draws, p = 2 (1 - Phi(|z|)) "
               "(normal approximation, so a p below 1 / draws can still be told apart)")


def holm_rows(p_values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Holm-adjusted p-values of every row of ``p_values`` ``(R, m)`` (:func:`probes.heads.inference.holm`
    on each row: NaN entries are not tests and stay NaN)."""
    return holm(np.atleast_2d(np.asarray(p_values, dtype=np.float64)))


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
    return float(p_from_z(value / se))  # 2 (1 - Phi(|z|))


def interval(draws: npt.ArrayLike) -> tuple[float, float]:
    """95% percentile interval of 1-D ``draws`` (NaN draws ignored; NaN, NaN without a finite one)."""
    low, high = percentile_interval(np.asarray(draws, dtype=np.float64).reshape(-1, 1))
    return float(low[0]), float(high[0])
