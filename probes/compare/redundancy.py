"""Q3: how many heads can go, and do the specialised and confident heads go last?

From a ``prune`` unit (``Pruning``: ``.curves`` a :class:`~probes.importance.pruning.PruningResult`, ``.start``
the unpruned model's importance on the selection data): the removable fraction of every ordered curve
(:meth:`PruningResult.removable` with the tolerance, on the loss), the same over the ``random:*`` curves (their
min, median and max), and Spearman's rho over heads between the starting importance and (a) each head's
specialisation margin on the selection side (the leaderboard's relation profile), (b) its Voita confidence
(the atlas), each with a bootstrap interval over heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.stats import interval, spearman_rows
from probes.compare.types import Curve, Redundancy

__all__ = ["RedundancyFound", "redundancy", "rank_rho", "METRIC"]

#: The metric of every removable fraction and curve.
METRIC = "loss"


@dataclass(frozen=True)
class RedundancyFound:
    """One prune unit's Q3 answer: the row, its curves, each random order's removable fraction, and what
    could not be computed (``missing``)."""

    row: Redundancy
    curve: Curve
    random: npt.NDArray[np.float64]
    missing: tuple[str, ...] = ()


def rank_rho(a: npt.ArrayLike | None, b: npt.ArrayLike | None, *, n_resamples: int = 1000,
             seed: int = 0) -> tuple[float, float, float]:
    """``(rho, low, high)``: Spearman's rho over heads of ``a`` and ``b`` (same shape, heads where either is not
    finite left out) and its interval from resampling heads; NaNs without two usable heads or without ``b``."""
    if a is None or b is None:
        return float("nan"), float("nan"), float("nan")
    x, y = np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        return float("nan"), float("nan"), float("nan")
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size < 2:
        return float("nan"), float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_resamples, x.size))  # (R, N) heads drawn
    low, high = interval(spearman_rows(x[idx], y[idx]))
    return float(spearman_rows(x, y)), low, high


def _curve(curves: Any, model: str, data: str) -> Curve:
    """The curves of one unit for the overlaid figure (the loss)."""
    if any(name.startswith("random:") for name in curves.curves):
        low, median, high = curves.random_band(METRIC)
    else:
        low = median = high = np.full(len(curves.fractions), np.nan)
    orders = {name: curves.curve(name, METRIC) for name in curves.curves
              if name != "importance" and not name.startswith("random:")}
    importance = curves.curve("importance", METRIC) if "importance" in curves.curves \
        else np.full(len(curves.fractions), np.nan)
    return Curve(model=model, data=data, objective=curves.objective, metric=METRIC,
                 fractions=np.asarray(curves.fractions, dtype=np.float64), importance=importance, random_low=low,
                 random_median=median, random_high=high, orders=orders)


def redundancy(pruning: Any, model: str, data: str, *, margin: Any = None, confidence: Any = None,
               tolerance: float = 0.05, n_resamples: int = 1000, seed: int = 0) -> RedundancyFound:
    """Q3 for one prune unit; ``margin`` and ``confidence`` ``(L, H)`` (or None: NaN rho, named in ``missing``)."""
    curves = pruning.curves
    removable = {name: curves.removable(name, METRIC, tolerance) for name in curves.curves
                 if not name.startswith("random:")}
    random = np.array([curves.removable(name, METRIC, tolerance) for name in curves.curves
                       if name.startswith("random:")], dtype=np.float64)
    start = None if pruning.start is None else pruning.start.importance
    missing = []
    if start is None:
        missing.append("the prune unit holds no starting importance")
    if margin is None:
        missing.append("no leaderboard or atlas for this model and data: no specialisation margin")
    if confidence is None:
        missing.append("no atlas for this model and data: no confidence")
    rho_m = rank_rho(start, margin, n_resamples=n_resamples, seed=seed)
    rho_c = rank_rho(start, confidence, n_resamples=n_resamples, seed=seed)
    nan = float("nan")
    row = Redundancy(
        model=model, data=data, objective=curves.objective, tolerance=float(tolerance), removable=removable,
        random_low=float(random.min()) if random.size else nan,
        random_median=float(np.median(random)) if random.size else nan,
        random_high=float(random.max()) if random.size else nan,
        rho_margin=rho_m[0], rho_margin_low=rho_m[1], rho_margin_high=rho_m[2], rho_confidence=rho_c[0],
        rho_confidence_low=rho_c[1], rho_confidence_high=rho_c[2], selected_on=curves.selection,
        reported_on=curves.data)
    return RedundancyFound(row, _curve(curves, model, data), random, tuple(missing))
