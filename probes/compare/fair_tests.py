"""Fair tests of "ensemble or division of labour" on the heads of models trained from different seeds (issue 39).

Three comparisons, each a test with its p-value, never intervals overlapping:

* :func:`within_cross_test`: D_within (the mean distance between two heads of one model) against D_cross (the mean
  distance between a head of one model and a head of the other), both all-pairs means, so like is compared with
  like. The null is that heads are exchangeable between the two models: every regrouping of the ``2H`` heads
  into two groups of ``H`` is equally likely. Small cases are enumerated exactly (``C(2H, H) / 2`` regroupings:
  35 for 4 heads, 6,435 for 8); larger ones draw :data:`MONTE_CARLO` regroupings, the count stated in the result.
* :func:`matching_p`: an optimised matching distance D_match against the same statistic on a null (shuffled labels,
  random heads ...): the share of null values at or below it, with the ``+1`` that keeps a Monte Carlo p-value
  valid.
* :func:`identity_test`: the share of matched pairs that keep their head index, against chance ``1 / H`` by an
  exact binomial test (scipy).

And one distance that separation cannot be confused with sharpening by: :func:`rank_distance`, one minus the mean
Spearman correlation of two maps' rows. Sharpening a head (dividing its logits by a temperature below 1) keeps each
row's order, so it leaves this distance unchanged while Jensen-Shannon moves.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["PermutationTest", "within_cross_test", "matching_p", "identity_test", "rank_distance",
           "MONTE_CARLO", "EXACT_LIMIT"]

#: Regroupings drawn when there are more than :data:`EXACT_LIMIT`.
MONTE_CARLO = 10_000
#: The most regroupings enumerated exactly.
EXACT_LIMIT = 20_000


@dataclass(frozen=True)
class PermutationTest:
    """One permutation test: the observed statistic, its p-value and how the null was made.

    Attributes:
        statistic: the observed value (here D_cross - D_within).
        p_value: the share of null regroupings at least as extreme (two-sided: by absolute value), exact or with
            the ``+1`` of a Monte Carlo test.
        n_permutations: regroupings in the null (all of them when ``exact``).
        exact: whether every regrouping was enumerated.
        within, cross: the observed D_within and D_cross.
    """

    statistic: float
    p_value: float
    n_permutations: int
    exact: bool
    within: float
    cross: float

    @property
    def method(self) -> str:
        """How the p-value was computed, for a table's footer."""
        how = (f"exact, all {self.n_permutations} regroupings" if self.exact
               else f"Monte Carlo, {self.n_permutations} random regroupings (p = (1 + count) / (1 + draws))")
        return f"permutation test of D_cross - D_within over regroupings of the heads into the two models ({how})"


def _means(distance: npt.NDArray[np.float64], in_a: npt.NDArray[np.bool_]) -> tuple[float, float]:
    """``(D_within, D_cross)`` of one grouping: the mean over unordered pairs inside a group, and across groups."""
    same = in_a[:, None] == in_a[None, :]
    upper = np.triu(np.ones_like(same), k=1)
    within = distance[same & upper]
    cross = distance[~same & upper]
    return float(within.mean()), float(cross.mean())


def _statistic(distance: npt.NDArray[np.float64], in_a: npt.NDArray[np.bool_]) -> float:
    within, cross = _means(distance, in_a)
    return cross - within


def within_cross_test(distance: npt.ArrayLike, n_a: int, *, seed: int = 0,
                      n_permutations: int = MONTE_CARLO) -> PermutationTest:
    """Test D_cross against D_within for the heads of two models.

    Args:
        distance: ``(N, N)`` symmetric distances between all heads, model A's first ``n_a``, then model B's.
        n_a: model A's heads (model B has the rest; both at least 2).
        seed, n_permutations: the Monte Carlo draws, when the regroupings number more than :data:`EXACT_LIMIT`.

    Returns:
        The test of ``D_cross - D_within`` (two-sided): large when the heads of one model are closer to each
        other than to the other model's (seed-specific heads), about 0 when heads are exchangeable.
    """
    d = np.asarray(distance, dtype=np.float64)
    n = d.shape[0]
    if d.shape != (n, n) or not 2 <= n_a <= n - 2:
        raise ValueError(f"distance: expected an (N, N) matrix with 2 <= n_a <= N - 2, found {d.shape}, n_a={n_a}")
    observed = np.zeros(n, dtype=bool)
    observed[:n_a] = True
    within, cross = _means(d, observed)
    stat = cross - within
    count = math.comb(n, n_a) // (2 if 2 * n_a == n else 1)
    if count <= EXACT_LIMIT:
        stats = np.array([_statistic(d, _grouping(n, group)) for group in _groupings(n, n_a)])
        extreme = np.abs(stats) >= abs(stat) - 1e-12
        return PermutationTest(stat, float(extreme.mean()), len(stats), True, within, cross)
    rng = np.random.default_rng(seed)
    draws = np.array([_statistic(d, _grouping(n, rng.choice(n, n_a, replace=False)))
                      for _ in range(n_permutations)])
    extreme = int((np.abs(draws) >= abs(stat) - 1e-12).sum())
    return PermutationTest(stat, (1 + extreme) / (1 + n_permutations), n_permutations, False, within, cross)


def _groupings(n: int, n_a: int) -> list[tuple[int, ...]]:
    """Every split of ``n`` heads into a group of ``n_a`` and the rest, each unordered split once."""
    groups = list(itertools.combinations(range(n), n_a))
    if 2 * n_a == n:  # a group and its complement are one split
        groups = [g for g in groups if 0 in g]
    return groups


def _grouping(n: int, group: tuple[int, ...] | npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    mask = np.zeros(n, dtype=bool)
    mask[list(group)] = True
    return mask


def matching_p(observed: float, null: npt.ArrayLike) -> float:
    """One-sided p-value of an optimised matching distance against the same statistic under a null: the share of
    null values at or below ``observed``, ``(1 + count) / (1 + draws)`` (a Monte Carlo p-value that is never 0)."""
    values = np.asarray(null, dtype=np.float64).reshape(-1)
    values = values[np.isfinite(values)]
    if not values.size:
        raise ValueError("null: expected at least one finite value")
    return float((1 + int((values <= observed + 1e-12).sum())) / (1 + values.size))


def identity_test(kept: int, pairs: int, heads: int, alternative: str = "greater") -> float:
    """Exact binomial p-value (scipy) that ``kept`` of ``pairs`` matched heads keep their index, against the chance
    ``1 / heads`` of a matching that ignores head numbers. ``alternative``: ``greater`` (default: do heads keep their
    index more often than chance, as identity fixed by the initialisation would make them?), ``less`` or
    ``two-sided``."""
    from scipy.stats import binomtest

    if not 0 <= kept <= pairs or heads < 1:
        raise ValueError(f"expected 0 <= kept <= pairs and heads >= 1, found {kept}, {pairs}, {heads}")
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative: expected greater, less or two-sided, found {alternative!r}")
    return float(binomtest(kept, pairs, 1 / heads, alternative=alternative).pvalue)


def rank_distance(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """One minus the mean Spearman correlation of the rows of two attention maps ``(..., Q, K)`` (rows with a
    single allowed key, or constant, are left out: they have no order). Unchanged when either map only sharpens or
    flattens (a positive temperature on its logits keeps every row's order)."""
    from scipy.stats import rankdata

    x = np.asarray(a, dtype=np.float64).reshape(-1, np.shape(a)[-1])
    y = np.asarray(b, dtype=np.float64).reshape(-1, np.shape(b)[-1])
    if x.shape != y.shape:
        raise ValueError(f"expected maps of one shape, found {np.shape(a)} and {np.shape(b)}")
    rx, ry = rankdata(x, axis=1), rankdata(y, axis=1)
    rx -= rx.mean(axis=1, keepdims=True)
    ry -= ry.mean(axis=1, keepdims=True)
    norm = np.sqrt((rx ** 2).sum(axis=1) * (ry ** 2).sum(axis=1))
    ok = norm > 0
    if not ok.any():
        return float("nan")
    rho = (rx[ok] * ry[ok]).sum(axis=1) / norm[ok]
    return float(1 - rho.mean())
