"""The role lab's small-sample tests, each exact where its null can be enumerated (issue 39, point 5).

* :func:`sign_flip_test`: one-sample test that values (one per seed, or per layer) have mean 0, against the null
  that each value's sign is a fair coin (a symmetric distribution about 0): every one of the ``2^n`` sign patterns
  when there are at most :data:`~probes.compare.fair_tests.EXACT_LIMIT`, else ``n_permutations`` random ones with
  ``p = (1 + count) / (1 + draws)``. Two-sided. With ``n`` values the smallest exact p is ``2 / 2^n`` (0.25 for 3
  seeds, 0.031 for 6).
* :func:`two_sample_test`: difference of means of two groups (seeds of two cells) against every regrouping of the
  pooled values (exact when there are at most ``EXACT_LIMIT``: 924 for 6 + 6, 20 for 3 + 3, smallest p 0.1).
* :func:`same_index_p`: how surprising ``kept`` same-index pairs among ``S`` seeds' top heads are when each seed's
  index is independent and uniform over ``H`` (exact over the seeds' occupancy counts, not over pairs).
* :func:`sign_test`: exact binomial sign test (scipy), two-sided.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from probes.compare.fair_tests import EXACT_LIMIT

__all__ = ["Tested", "sign_flip_test", "two_sample_test", "same_index_p", "sign_test", "SIGN_FLIP", "TWO_SAMPLE"]

#: How :func:`sign_flip_test` computes its p, for a table's rule.
SIGN_FLIP = ("one-sample sign-flip permutation test of the mean (two-sided; every sign pattern when there are at most "
             f"{EXACT_LIMIT}, else Monte Carlo with p = (1 + count) / (1 + draws))")
#: How :func:`two_sample_test` computes its p.
TWO_SAMPLE = ("two-sample permutation test of the difference of means over the seeds (two-sided; every regrouping "
              f"of the pooled seeds when there are at most {EXACT_LIMIT}, else Monte Carlo with p = (1 + count) / "
              "(1 + draws))")
_TOLERANCE = 1e-12


@dataclass(frozen=True)
class Tested:
    """A statistic, its p-value, how many arrangements the null held and whether all were enumerated (``p`` NaN
    and ``n`` 0 when there were too few values for a test)."""

    statistic: float
    p: float
    n: int
    exact: bool


def _finite(values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    out = np.asarray(values, dtype=np.float64).reshape(-1)
    return out[np.isfinite(out)]


def sign_flip_test(values: npt.ArrayLike, *, n_permutations: int = 10_000, seed: int = 0) -> Tested:
    """Two-sided sign-flip test of ``mean(values) = 0`` (NaN values left out; fewer than 2 left: no test)."""
    x = _finite(values)
    if len(x) < 2:
        return Tested(float(x.mean()) if len(x) else float("nan"), float("nan"), 0, False)
    observed = abs(float(x.mean()))
    if 2 ** len(x) <= EXACT_LIMIT:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(x))))  # (2^n, n)
        null = np.abs(signs @ x / len(x))
        return Tested(float(x.mean()), float((null >= observed - _TOLERANCE).mean()), len(signs), True)
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(n_permutations, len(x)))
    count = int((np.abs(signs @ x / len(x)) >= observed - _TOLERANCE).sum())
    return Tested(float(x.mean()), (1 + count) / (1 + n_permutations), n_permutations, False)


def two_sample_test(a: npt.ArrayLike, b: npt.ArrayLike, *, n_permutations: int = 10_000, seed: int = 0) -> Tested:
    """Two-sided permutation test of ``mean(a) - mean(b)`` over regroupings of the pooled values (NaN left out;
    either group empty: no test)."""
    x, y = _finite(a), _finite(b)
    if not len(x) or not len(y):
        return Tested(float("nan"), float("nan"), 0, False)
    pooled = np.concatenate([x, y])
    observed = float(x.mean() - y.mean())
    n, k = len(pooled), len(x)
    total = pooled.sum()
    if math.comb(n, k) <= EXACT_LIMIT:
        groups = np.array(list(itertools.combinations(range(n), k)))  # (C, k)
        sums = pooled[groups].sum(axis=1)
        null = sums / k - (total - sums) / (n - k)
        return Tested(observed, float((np.abs(null) >= abs(observed) - _TOLERANCE).mean()), len(groups), True)
    rng = np.random.default_rng(seed)
    draws = np.array([rng.permutation(n)[:k] for _ in range(n_permutations)])
    sums = pooled[draws].sum(axis=1)
    null = sums / k - (total - sums) / (n - k)
    count = int((np.abs(null) >= abs(observed) - _TOLERANCE).sum())
    return Tested(observed, (1 + count) / (1 + n_permutations), n_permutations, False)


def same_index_p(kept: int, seeds: int, heads: int) -> float:
    """One-sided exact p that at least ``kept`` of the ``C(seeds, 2)`` pairs of seeds share their top head's index,
    when each seed's index is independent and uniform over ``heads``: the multinomial law of the occupancy counts
    ``n_k``, summed where ``sum_k C(n_k, 2) >= kept`` (a dynamic programme over heads: ``P(n) = seeds! / (heads^seeds
    prod n_k!)``). NaN for fewer than 2 seeds."""
    if seeds < 2 or heads < 1:
        return float("nan")
    most = math.comb(seeds, 2)
    # weight[s, k]: sum over the heads so far of prod 1 / n_k! with s seeds placed and k same-index pairs
    weight = np.zeros((seeds + 1, most + 1))
    weight[0, 0] = 1.0
    for _ in range(heads):
        nxt = np.zeros_like(weight)
        for c in range(seeds + 1):
            pairs, scale = math.comb(c, 2), 1.0 / math.factorial(c)
            nxt[c:, pairs:] += weight[:seeds + 1 - c, :most + 1 - pairs] * scale
        weight = nxt
    law = weight[seeds] * math.factorial(seeds) / float(heads) ** seeds  # (most + 1,) P(K = k)
    return float(min(1.0, law[max(kept, 0):].sum()))


def sign_test(successes: int, trials: int) -> float:
    """Exact two-sided binomial sign test (p = 1/2) of ``successes`` of ``trials`` (scipy); NaN without trials."""
    from scipy.stats import binomtest

    if trials < 1:
        return float("nan")
    return float(binomtest(successes, trials, 0.5, alternative="two-sided").pvalue)
