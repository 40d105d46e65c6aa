"""How fast the heads of a layer come apart in the linear regime, and whether that rate depends on the noise size.

Near a symmetric start (identical heads plus noise of size ``eps``) the distance between two heads grows like
``eps * exp(rate * step)`` while it is small (the linear regime of an unstable symmetric state), then saturates. A
single fit across warm-up, growth and saturation mixes the three; the local rate at its fastest does not:

* :func:`peak_growth`: the largest least-squares slope of ln(excess distance) against the step over every window of
  ``window`` consecutive measurements (:data:`GROWTH_RULE`), with its R², window and doubling time. Measured on the
  distances at every step (:mod:`probes.training.step_symmetry`), not on log-spaced checkpoints.
* :func:`rate_difference_test`: whether the peak rates of two noise sizes differ, by an exact two-sample
  permutation test over the seeds (Monte Carlo beyond :data:`EXACT_LIMIT` relabellings, the count stated).
* :func:`onset_step`: when the excess first reaches a threshold (smaller noise arrives later at the same rate).
* :func:`layer_growth`: :func:`peak_growth` of each layer's mean distance over its pairs of heads.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.results import saveable

__all__ = ["GrowthFit", "RateDifference", "peak_growth", "rate_difference_test", "onset_step", "layer_growth",
           "GROWTH_RULE", "EXACT_LIMIT", "MONTE_CARLO"]

#: How :func:`peak_growth` fits the rate.
GROWTH_RULE = ("excess = distance over the identical control's, which is exactly 0 (baseline 'zero'; 'start': over "
               "the distance at step 0, which inflates the early slopes of a curve that grows from its start: "
               "ln(e^(rt) - 1) rises like ln t); over every window of `window` consecutive measurements whose "
               "excess is above `floor` (> 0) at every point, the least-squares slope of ln(excess) against the step; "
               "the rate is the largest slope (per step; the first window on a tie), doubling = ln 2 / rate, R² of "
               "that window's fit")
#: The most relabellings :func:`rate_difference_test` enumerates exactly.
EXACT_LIMIT = 20_000
#: Relabellings drawn at random beyond :data:`EXACT_LIMIT`.
MONTE_CARLO = 10_000
#: Relative tolerance under which a relabelled statistic counts as equal to the observed one (float round-off).
_TIE = 1e-12


@saveable
@dataclass(frozen=True)
class GrowthFit:
    """The peak local growth rate of one distance curve (:data:`GROWTH_RULE`).

    Attributes:
        rate: the largest slope of ln(excess) per step (NaN: no window with a positive excess throughout).
        doubling: ln 2 / rate, in steps (NaN unless rate > 0).
        first, last: the first and last step of that window (-1 without one).
        r2: R² of the fit over that window (NaN when ln(excess) is constant there, or without a window).
        n_points: measurements in the window (``window``; 0 without one).
        window, floor: the options it was fitted with.
    """

    rate: float
    doubling: float
    first: int
    last: int
    r2: float
    n_points: int
    window: int
    floor: float = 0.0
    rule: str = GROWTH_RULE


@saveable
@dataclass(frozen=True)
class RateDifference:
    """The two-sample permutation test of :func:`rate_difference_test`. Unpacks as ``(difference, p_value)``.

    Attributes:
        difference: mean(a) - mean(b).
        p_value: two-sided: the share of relabellings whose |difference| is at least the observed one (exact), or
            ``(1 + count) / (1 + draws)`` (Monte Carlo).
        n_permutations: relabellings in the null (every one when ``exact``).
        exact: whether every relabelling was enumerated.
        n_a, n_b: the sizes of the two samples.
    """

    difference: float
    p_value: float
    n_permutations: int
    exact: bool
    n_a: int
    n_b: int

    def __iter__(self) -> Iterator[float]:
        return iter((self.difference, self.p_value))

    @property
    def method(self) -> str:
        """How the p-value was computed, for a table's footer."""
        how = (f"exact, all {self.n_permutations} relabellings" if self.exact
               else f"Monte Carlo, {self.n_permutations} random relabellings (p = (1 + count) / (1 + draws))")
        return (f"two-sided two-sample permutation test of the difference of means ({self.n_a} against {self.n_b} "
                f"values; {how})")


def _curve(steps: Sequence[int] | npt.ArrayLike, distance: Sequence[float] | npt.ArrayLike
           ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(steps, excess over step 0)`` as floats, checked: same length, steps strictly increasing from 0."""
    x = np.asarray(steps, dtype=np.float64)
    y = np.asarray(distance, dtype=np.float64)
    if x.ndim != 1 or y.shape != x.shape:
        raise ConfigError(f"growth: expected one distance per step, found {y.shape} distances for {x.shape} steps")
    if not x.size or x[0] != 0:
        raise ConfigError(f"growth: expected the steps to start at step 0 (the excess is over it), found "
                          f"{x[:1].tolist() or 'none'}")
    if np.any(np.diff(x) <= 0):
        raise ConfigError("growth: expected strictly increasing steps")
    return x, y - y[0]


def _fit(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> tuple[float, float]:
    """``(slope, R²)`` of the least-squares line of ``y`` on ``x`` (R² NaN when ``y`` is constant)."""
    dx, dy = x - x.mean(), y - y.mean()
    slope = float((dx * dy).sum() / (dx * dx).sum())
    spread = float((dy * dy).sum())
    residual = float(((dy - slope * dx) ** 2).sum())
    return slope, (1 - residual / spread if spread > 0 else math.nan)


def peak_growth(steps: Sequence[int] | npt.ArrayLike, distance: Sequence[float] | npt.ArrayLike, *, window: int,
                floor: float = 0.0, baseline: str = "zero", ceiling: float = 1.0) -> GrowthFit:
    """The peak local growth rate of ``distance`` (measured at ``steps``, starting at 0) by :data:`GROWTH_RULE`.

    Args:
        steps: ``(C,)`` strictly increasing, the first 0.
        distance: ``(C,)`` the distance at each step.
        window: measurements per window (at least 2; 3 or more for an R² that says something).
        floor: the excess every point of a window must be above (0: only positive excess).
        baseline: ``zero`` (the excess is the distance itself: identical heads stay at exactly 0, so a noise cell's
            distance is all excess, and ``eps exp(rate t)`` gives ``rate`` exactly) or ``start`` (over step 0).

    Raises:
        ConfigError: ``window`` below 2, a negative ``floor``, a ``baseline`` other than those two, or steps that are
            not as above.
    """
    if baseline not in ("zero", "start"):
        raise ConfigError(f"growth: expected baseline 'zero' or 'start', found {baseline!r}")
    if not 0 < ceiling <= 1:
        raise ConfigError(f"growth: expected a ceiling in (0, 1], found {ceiling!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ConfigError(f"growth: expected a window of at least 2 measurements, found {window!r}")
    if not floor >= 0:
        raise ConfigError(f"growth: expected a floor >= 0, found {floor!r}")
    x, excess = _curve(steps, distance)
    if baseline == "zero":
        excess = excess + np.asarray(distance, dtype=np.float64)[0]
    best: tuple[float, float, int] | None = None  # (slope, R², first index)
    top = ceiling * float(np.nanmax(excess)) if np.isfinite(excess).any() else math.nan
    for start in range(0, x.size - window + 1):
        part = excess[start:start + window]
        if not np.all(part > floor) or not np.all(part <= top):  # NaN fails too
            continue
        slope, r2 = _fit(x[start:start + window], np.log(part))
        if best is None or slope > best[0]:
            best = (slope, r2, start)
    if best is None:
        return GrowthFit(math.nan, math.nan, -1, -1, math.nan, 0, window, float(floor))
    rate, r2, start = best
    doubling = math.log(2) / rate if rate > 0 else math.nan
    return GrowthFit(rate, doubling, int(x[start]), int(x[start + window - 1]), r2, window, window, float(floor))


def onset_step(steps: Sequence[int] | npt.ArrayLike, distance: Sequence[float] | npt.ArrayLike,
               threshold: float) -> int | None:
    """The first step whose excess distance (over step 0) reaches ``threshold``; None when none does."""
    x, excess = _curve(steps, distance)
    reached = np.flatnonzero(excess >= threshold)
    return int(x[reached[0]]) if reached.size else None


def _relabellings(n: int, n_a: int, exact: bool, seed: int) -> Iterator[npt.NDArray[np.intp]]:
    """The indices put in the first sample by each relabelling: every subset of size ``n_a`` (exact), else
    :data:`MONTE_CARLO` random ones."""
    if exact:
        for subset in itertools.combinations(range(n), n_a):
            yield np.asarray(subset, dtype=np.intp)
        return
    rng = np.random.default_rng(seed)
    for _ in range(MONTE_CARLO):
        yield rng.permutation(n)[:n_a]


def rate_difference_test(a: Sequence[float] | npt.ArrayLike, b: Sequence[float] | npt.ArrayLike, *,
                         seed: int = 0) -> RateDifference:
    """Whether two samples (the peak rates of the seeds at two noise sizes) differ in mean: a two-sided
    two-sample permutation test, exact over all ``C(n_a + n_b, n_a)`` relabellings when there are at most
    :data:`EXACT_LIMIT`, else :data:`MONTE_CARLO` random ones (``seed``). Unpacks as ``(difference, p)``.

    Raises:
        ConfigError: an empty sample or a value that is not finite.
    """
    xa, xb = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    if not xa.size or not xb.size:
        raise ConfigError(f"rate difference: expected two non-empty samples, found {xa.size} and {xb.size} values")
    if not (np.isfinite(xa).all() and np.isfinite(xb).all()):
        raise ConfigError("rate difference: expected finite values (a NaN rate: no window to fit?)")
    pooled = np.concatenate([xa, xb])
    n, n_a = pooled.size, xa.size
    total, observed = pooled.sum(), float(xa.mean() - xb.mean())
    exact = math.comb(n, n_a) <= EXACT_LIMIT
    scale = _TIE * max(1.0, abs(observed))
    count = draws = 0
    for chosen in _relabellings(n, n_a, exact, seed):
        in_a = float(pooled[chosen].sum())
        statistic = in_a / n_a - (total - in_a) / (n - n_a)
        count += abs(statistic) >= abs(observed) - scale
        draws += 1
    p = count / draws if exact else (1 + count) / (1 + draws)
    return RateDifference(observed, float(p), draws, exact, n_a, n - n_a)


def layer_growth(symmetry: Any, *, which: str = "param_distance", window: int, floor: float = 0.0
                 ) -> tuple[GrowthFit, ...]:
    """:func:`peak_growth` of each layer's distance (mean over its pairs of distinct heads) of a
    :class:`~probes.training.symmetry.HeadSymmetry` (the distances at every step, ``symmetry-steps/``).

    Args:
        symmetry: the distances ``(C, L, H, H)`` at ``symmetry.steps``.
        which: ``param_distance`` or ``attention_distance``.
        window, floor: as :func:`peak_growth`.

    Raises:
        ConfigError: another ``which``, or fewer than 2 heads (no pair).
    """
    if which not in ("param_distance", "attention_distance"):
        raise ConfigError(f"growth: expected param_distance or attention_distance, found {which!r}")
    values = np.asarray(getattr(symmetry, which), dtype=np.float64)  # (C, L, H, H)
    n_heads = values.shape[-1]
    if n_heads < 2:
        raise ConfigError(f"growth: expected at least 2 heads per layer (a pair to measure), found {n_heads}")
    upper = np.triu(np.ones((n_heads, n_heads), dtype=bool), k=1)
    curves = values[:, :, upper].mean(axis=-1)  # (C, L)
    steps = np.asarray(symmetry.steps)
    return tuple(peak_growth(steps, curves[:, layer], window=window, floor=floor) for layer in range(curves.shape[1]))
