"""Tests that survive selection: p-values from paired per-unit counts, multiplicity corrections, near ties.

Rules, stated once (tables and run records cite :data:`INFERENCE_NOTE`):

* **Selection.** A head (or offset) chosen on some data is only tested on *other* data
  (a separate split, or the other half of :func:`probes.analysis.split.half_of`); its choice is
  then independent of the test data, so a plain paired test is valid. Heads chosen and reported on
  the same data are labelled optimistic and never marked significant.
* **Paired test of a margin.** ``margin = sum_u d_u / sum_u n_u`` over units ``u`` (sentences or
  documents), where ``d_u`` is head hits minus baseline hits and ``n_u`` the items of the unit.
  Its standard error is that of a ratio estimator (linearised, units resampled as clusters):
  ``se = sqrt(N / (N - 1) * sum_u (d_u - margin * n_u)^2) / sum_u n_u``; ``z = margin / se``
  and the two-sided p-value is ``2 * (1 - Phi(|z|))``. A row is "significant" when its margin
  is positive and its corrected p-value is below ``alpha`` (two-sided, so this matches a 95%
  interval lying above 0 before correction).
* **Correction.** Holm's step-down method over every tested row of one table (it controls the
  family-wise error rate under any dependence between rows).
* **Near ties.** Heads whose accuracy on the report data is not significantly below the
  reported head's (same paired test, two-sided, uncorrected, alpha 0.05: the list errs on the
  side of listing).

The normal distribution is scipy's (:data:`scipy.stats.norm`), and so are the ranks and the correlation of
:func:`spearman_rows`, Spearman's rho shared by the importance and comparison stages. Two pieces are
written here because no dependency has them: the ratio estimator's cluster standard error of
:func:`paired_z`, and :func:`holm` (scipy's ``false_discovery_control`` is Benjamini-Hochberg/Yekutieli
only; statsmodels, which has Holm, is not a dependency). Every Holm correction of the package calls it.
scipy is imported inside the functions: its import holds the interpreter lock, so it waits until needed.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ALPHA", "CORRECTION", "INFERENCE_NOTE", "Correction", "paired_z", "p_from_z", "holm",
           "near_ties", "correct_rows", "spearman_rows"]

#: Level of every test (two-sided).
ALPHA = 0.05
#: The multiplicity correction used in every table.
CORRECTION = "holm"
#: One sentence for table footers.
INFERENCE_NOTE = ("two-sided paired test of the margin (ratio estimator, units resampled as clusters), "
                  "Holm-corrected over the rows tested in this table, alpha 0.05")


@dataclass(frozen=True)
class Correction:
    """How a table's p-values were corrected: the method, the number of tests and the level."""

    method: str
    n_tests: int
    alpha: float = ALPHA

    def as_dict(self) -> dict[str, object]:
        """For ``run.json``."""
        return {"method": self.method, "n_tests": self.n_tests, "alpha": self.alpha, "test": INFERENCE_NOTE}

    def footer(self) -> str:
        """One line for a table's footer."""
        return (f"Significance: {INFERENCE_NOTE}; {self.n_tests} test{'s' if self.n_tests != 1 else ''} "
                f"in this table.")


def paired_z(diff: npt.ArrayLike, total: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``z`` of the ratio ``sum(diff) / sum(total)`` against 0, per column.

    Args:
        diff: ``(n_units, *k)`` per-unit differences (e.g. head hits minus baseline hits).
        total: ``(n_units,)`` or ``(n_units, *k)`` per-unit item counts.

    Returns:
        ``(*k,)`` z statistics: ``+inf``/``-inf`` when every unit agrees exactly on a non-zero margin,
        0 when the margin is 0, NaN without items or with fewer than two units that hold items
        (units without items are not counted: they would shrink the standard error).
    """
    d = np.asarray(diff, dtype=np.float64)
    n = np.asarray(total, dtype=np.float64)
    if n.ndim < d.ndim:
        n = n.reshape(n.shape + (1,) * (d.ndim - n.ndim))
    n = np.broadcast_to(n, d.shape)
    units = (n > 0).sum(axis=0)  # units with items: a unit without any is no cluster
    den = n.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        margin = d.sum(axis=0) / den
        resid = d - margin * n
        se = np.sqrt(units / np.maximum(units - 1, 1) * (resid ** 2).sum(axis=0)) / den
        z = np.where(se > 0, margin / se, np.where(margin == 0, 0.0, np.sign(margin) * np.inf))
    return np.where((den > 0) & (units >= 2), z, np.nan)


def p_from_z(z: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Two-sided normal p-values ``2 * (1 - Phi(|z|))`` of ``z``, shape kept (NaN stays NaN, infinite z gives 0)."""
    from scipy.stats import norm

    return np.asarray(2.0 * norm.sf(np.abs(np.asarray(z, dtype=np.float64))), dtype=np.float64)


def holm(p_values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Holm-adjusted p-values along the last axis (step-down, monotone, capped at 1), each row ``(..., m)`` its
    own family; NaN entries are not tests and stay NaN.

    The package's one Holm (no dependency has it, see the module): sort each row (NaN last), scale the
    ``i``-th smallest of ``m`` tests by ``m - i``, take the running maximum and cap it at 1.
    """
    p = np.asarray(p_values, dtype=np.float64)
    rows = np.atleast_1d(p)  # (..., m)
    order = np.argsort(rows, axis=-1, kind="stable")  # NaN sorts last; ties keep their order
    ranked = np.take_along_axis(rows, order, axis=-1)  # (..., m) ascending
    missing = np.isnan(ranked)
    factor = (~missing).sum(axis=-1, keepdims=True) - np.arange(rows.shape[-1])  # (..., m): tests left, m - i
    scaled = np.where(missing, -np.inf, factor * np.where(missing, 0.0, ranked))
    adjusted = np.where(missing, np.nan, np.minimum(1.0, np.maximum.accumulate(scaled, axis=-1)))
    out = np.empty_like(rows)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out.reshape(p.shape)


def spearman_rows(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(...,)`` Spearman's rho between ``a`` and ``b`` ``(..., N)`` along the last axis (average ranks for
    ties); NaN where either side is constant or ``N < 2``. Inputs must hold no NaN.

    scipy's ``rankdata`` and ``pearsonr`` on the ranks: the statistic of ``scipy.stats.spearmanr``, row by row
    (``spearmanr`` itself correlates every row with every other, 2R x 2R for R bootstrap draws; ``pearsonr``'s
    ``axis`` is why setup.cfg asks for scipy 1.14).
    """
    from scipy.stats import ConstantInputWarning, pearsonr, rankdata

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape[-1] < 2:
        return np.full(np.broadcast_shapes(x.shape, y.shape)[:-1], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConstantInputWarning)  # a constant side: NaN, as documented
        rho = pearsonr(rankdata(x, axis=-1), rankdata(y, axis=-1), axis=-1).statistic
    return np.asarray(rho, dtype=np.float64)


def correct_rows(margins: npt.ArrayLike, p_values: npt.ArrayLike, *, testable: npt.ArrayLike | None = None,
                 alpha: float = ALPHA) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_], Correction]:
    """Holm over the testable rows of a table: ``(adjusted p, significant, correction)``.

    ``testable`` (default: every row with a p-value) excludes rows from the family, e.g. rows whose
    heads were chosen on the data they are reported on; those get NaN and are never significant.
    """
    p = np.asarray(p_values, dtype=np.float64).copy()
    if testable is not None:
        p[~np.asarray(testable, dtype=bool)] = np.nan
    adjusted = holm(p)
    significant = (adjusted < alpha) & (np.asarray(margins, dtype=np.float64) > 0)
    return adjusted, np.nan_to_num(significant, nan=False).astype(bool), Correction(
        CORRECTION, int((~np.isnan(p)).sum()), alpha)


def near_ties(correct: npt.ArrayLike, total: npt.ArrayLike, chosen: int, *,
              alpha: float = ALPHA) -> npt.NDArray[np.int64]:
    """Candidates (columns) not significantly worse than column ``chosen``, ``chosen`` excluded.

    Args:
        correct: ``(n_units, C)`` per-unit hits of every candidate (e.g. every head and direction).
        total: ``(n_units,)`` per-unit items.
        chosen: the reported candidate's column.

    Returns:
        Column indices, best first (by total hits, then index).
    """
    c = np.asarray(correct, dtype=np.float64)
    diff = c - c[:, [chosen]]  # (n_units, C): candidate minus chosen
    z = paired_z(diff, total)
    tied = ~(z < -_critical(alpha))  # NaN (no data) counts as not distinguishable
    tied[chosen] = False
    cols = np.flatnonzero(tied)
    hits = c.sum(axis=0)
    return cols[np.lexsort((cols, -hits[cols]))].astype(np.int64)


def _critical(alpha: float) -> float:
    """The two-sided normal critical value of level ``alpha`` (1.96 for 0.05)."""
    from scipy.stats import norm

    return float(norm.ppf(1.0 - alpha / 2.0))
