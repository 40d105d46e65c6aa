"""Q3: how many heads can go, and do the specialised and confident heads go last?

From a ``prune`` unit (``Pruning``: ``.curves`` a :class:`~probes.importance.pruning.PruningResult`, ``.start``
the unpruned model's importance on the selection data): the removable fraction of every ordered curve
(:meth:`PruningResult.removable` on the loss, relative rule: a loss increase of at most tau x (loss with every
head ablated - full loss), tau = the tolerance, every step up to the fraction within; :data:`RULE`) and its
normalised area (:meth:`PruningResult.area`), the same over the ``random:*`` curves (their min, median and
max), and Spearman's rho over heads between the starting importance and (a) each head's specialisation margin
on the selection side (the leaderboard's relation profile), (b) its Voita confidence (the atlas), each with a
bootstrap interval over heads. The every-head-ablated loss is each curve's last step (every curve of
:func:`~probes.importance.pruning.pruning_curves` ends with all heads pruned).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.stats import interval, spearman_rows
from probes.compare.types import Curve, Redundancy
from probes.errors import InputError

__all__ = ["RedundancyFound", "redundancy", "rank_rho", "METRIC", "RULE"]

#: The metric of every removable fraction and curve.
METRIC = "loss"
#: The tolerance rule of every removable fraction (:data:`probes.importance.pruning.TOLERANCE_RULES`).
RULE = "range"


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


def _band(prefix: str, values: npt.NDArray[np.float64]) -> dict[str, float]:
    """``{prefix_low, prefix_median, prefix_high}``: min, median and max of ``values`` ``(R,)`` (NaN ignored; NaN
    without a finite one)."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return {f"{prefix}_low": float("nan"), f"{prefix}_median": float("nan"), f"{prefix}_high": float("nan")}
    return {f"{prefix}_low": float(finite.min()), f"{prefix}_median": float(np.median(finite)),
            f"{prefix}_high": float(finite.max())}


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
    ordered = [name for name in curves.curves if not name.startswith("random:")]
    randoms = [name for name in curves.curves if name.startswith("random:")]
    missing = []
    try:
        removable = {name: curves.removable(name, METRIC, tolerance, rule=RULE) for name in ordered}
        area = {name: curves.area(name, METRIC) for name in ordered}
        random = np.array([curves.removable(name, METRIC, tolerance, rule=RULE) for name in randoms])  # (R,)
        random_area = np.array([curves.area(name, METRIC) for name in randoms], dtype=np.float64)  # (R,)
    except InputError as err:  # a curve that stops before every head is pruned: no every-head-ablated loss
        missing.append(f"no removable fraction: {err}")
        removable, area = {name: float("nan") for name in ordered}, {name: float("nan") for name in ordered}
        random = random_area = np.full(len(randoms), np.nan)
    losses = curves.curve(curves.curves[0], METRIC)  # (S,) the first and last steps are shared by every curve
    ablated = float("nan") if missing else float(losses[-1])
    start = None if pruning.start is None else pruning.start.importance
    if start is None:
        missing.append("the prune unit holds no starting importance")
    if margin is None:
        missing.append("no leaderboard or atlas for this model and data: no specialisation margin")
    if confidence is None:
        missing.append("no atlas for this model and data: no confidence")
    rho_m = rank_rho(start, margin, n_resamples=n_resamples, seed=seed)
    rho_c = rank_rho(start, confidence, n_resamples=n_resamples, seed=seed)
    row = Redundancy(
        model=model, data=data, objective=curves.objective, tolerance=float(tolerance), removable=removable,
        **_band("random", random),
        rho_margin=rho_m[0], rho_margin_low=rho_m[1], rho_margin_high=rho_m[2], rho_confidence=rho_c[0],
        rho_confidence_low=rho_c[1], rho_confidence_high=rho_c[2], selected_on=curves.selection,
        reported_on=curves.data, rule=RULE, full_loss=float(losses[0]), ablated_loss=ablated, area=area,
        n_random=len(randoms), **_band("random_area", random_area))
    return RedundancyFound(row, _curve(curves, model, data), random, tuple(missing))
