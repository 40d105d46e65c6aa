"""Seed families (issue 39, point 9): statistics over the models of one family, one model per seed (the lab's runs
of one cell, MultiBERTs ``google/multiberts-seed_N``, PolyPythias), model-free: they take arrays and
:class:`~probes.importance.lab_types.LabModelAnalysis` results, never a model.

* :func:`multi_bootstrap`, :func:`multi_bootstrap_difference`, :func:`over_checkpoints`: the Multi-Bootstrap of
  Sellam et al. 2022 (The MultiBERTs): an interval over seeds *and* examples, resampled jointly
  (:data:`RULE`, :data:`DIFFERENCE_RULE`), so a claim about a training procedure does not rest on one seed.
* :func:`role_stability`: whether one role sits on the same head index in every seed of a family (:data:`STABILITY`
  says how each number is made and tested).
* :func:`family_roles`: both on a family of analyses: stability at the last step, and a Multi-Bootstrap interval of
  each layer's best head's score over the held-out sequences.

Layers and heads are 0-based in the arrays and 1-based (``layer-head``) in every table a person reads.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.head_types import previous_token_pattern, similarity_score
from probes.compare import fair_tests
from probes.compare.fair_tests import identity_test
from probes.errors import ConfigError
from probes.heads.inference import spearman_rows
from probes.heads.intervals import percentile_interval
from probes.importance.interactions import role_carriers
from probes.importance.lab_types import LabModelAnalysis
from probes.results import Result, require_pandas

__all__ = ["MultiBootstrap", "MultiBootstrapDifference", "RoleStability", "FamilyRoles", "multi_bootstrap",
           "multi_bootstrap_difference", "over_checkpoints", "role_stability", "family_roles", "RULE",
           "DIFFERENCE_RULE", "STABILITY", "PER_SEQUENCE"]

#: How :func:`multi_bootstrap` draws (the generator calls are in the function's docstring).
RULE = ("Multi-Bootstrap (Sellam et al. 2022): each draw resamples the S seeds with replacement and the E examples "
        "with replacement, one example draw shared by every drawn seed, and takes the mean over the S x E drawn "
        "(seed, example) cells; the estimate is the mean of all cells, the interval the percentile interval of the "
        "draws")
#: How :func:`multi_bootstrap_difference` draws and tests.
DIFFERENCE_RULE = ("Multi-Bootstrap of a difference (Sellam et al. 2022): each draw resamples the seeds of a and of b "
                   "independently, and the examples jointly (one example draw for both families, when they are "
                   "measured on the same examples; otherwise one per family), and takes mean(a) - mean(b) over the "
                   "drawn cells; two-sided p: the share of draws on the other side of 0 from the estimate (0 "
                   "included), doubled, at most 1 and at least 1 / (draws + 1)")
#: How :func:`role_stability` measures and tests.
STABILITY = ("per layer, over every pair of seeds: the Spearman correlation of the heads' scores aligned by head index "
             "(tested against heads shuffled within each seed: exact over every arrangement when there are at most "
             f"{fair_tests.EXACT_LIMIT}, else Monte Carlo with p = (1 + count) / (1 + draws)); the same after the best "
             "one-to-one matching of heads, an optimised maximum (1 by construction for one role's scores, and "
             "unchanged by the shuffles, so never a test); the share of seed pairs whose top carrier has the same "
             "index, against 1 / H by an exact binomial test over the pairs (which share seeds, so are not "
             "independent) and against the same shuffles")


def _cells(values: npt.ArrayLike, name: str) -> npt.NDArray[np.float64]:
    """``values`` as a finite ``(S, E)`` float array, or ConfigError."""
    out = np.asarray(values, dtype=np.float64)
    if out.ndim != 2 or 0 in out.shape or not np.isfinite(out).all():
        raise ConfigError(f"{name}: expected a finite (seeds, examples) array with at least one of each, found "
                          f"shape {out.shape}" + ("" if np.isfinite(out).all() else " with non-finite values"))
    return out


def _draw_options(n_draws: int, level: float) -> None:
    if isinstance(n_draws, bool) or not isinstance(n_draws, (int, np.integer)) or n_draws < 1:
        raise ConfigError(f"n_draws: expected a whole number >= 1, found {n_draws!r}")
    if not 0 < level < 1:
        raise ConfigError(f"level: expected a fraction in (0, 1), found {level!r}")


def _counts(index: npt.NDArray[np.int64], size: int) -> npt.NDArray[np.float64]:
    """``(B, size)``: how often each item was drawn in each row of ``index`` ``(B, k)``."""
    rows = index.shape[0]
    flat = (index + size * np.arange(rows)[:, None]).reshape(-1)
    return np.bincount(flat, minlength=rows * size).reshape(rows, size).astype(np.float64)


def _cell_means(values: npt.NDArray[np.float64], seed_counts: npt.NDArray[np.float64],
                example_counts: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``(B,)`` the mean over each draw's cells: ``seed_counts (B, S) @ values (S, E) . example_counts (B, E)``."""
    s, e = values.shape
    return np.asarray(((seed_counts @ values) * example_counts).sum(axis=1) / (s * e), dtype=np.float64)


def _interval(draws: npt.NDArray[np.float64], level: float) -> tuple[float, float]:
    low, high = percentile_interval(draws.reshape(-1, 1), level)
    return float(low[0]), float(high[0])


@dataclass(frozen=True)
class MultiBootstrap(Result):
    """A Multi-Bootstrap interval of the mean of a per-example statistic over seeds and examples (:data:`RULE`).

    Attributes:
        estimate: the mean over every (seed, example) cell.
        low, high: the percentile interval of the draws at ``level``.
        level: the interval's coverage (0.95).
        n_draws: the draws.
        seeds, examples: S and E.
        draws: ``(n_draws,)`` each draw's mean (draws made with one seed are paired across calls).
        rule: :data:`RULE`.
    """

    _shapes = {"draws": "n_draws"}

    estimate: float
    low: float
    high: float
    level: float
    n_draws: int
    seeds: int
    examples: int
    draws: npt.NDArray[np.float64]
    rule: str

    def to_pandas(self) -> Any:
        """One row: the estimate, its interval and what it was drawn from."""
        return require_pandas().DataFrame([{"estimate": self.estimate, "low": self.low, "high": self.high,
                                            "level": self.level, "seeds": self.seeds, "examples": self.examples,
                                            "draws": self.n_draws}])


@dataclass(frozen=True)
class MultiBootstrapDifference(Result):
    """A Multi-Bootstrap of mean(a) - mean(b) for two families, with its two-sided p (:data:`DIFFERENCE_RULE`).

    Attributes:
        estimate: mean of a's cells minus mean of b's.
        low, high: the percentile interval of the draws at ``level``.
        p_value: two-sided, from the draws (:data:`DIFFERENCE_RULE`).
        level, n_draws: as in :class:`MultiBootstrap`.
        seeds_a, seeds_b, examples_a, examples_b: each family's seeds and examples.
        paired_examples: whether one example draw served both families.
        draws: ``(n_draws,)`` each draw's difference.
        rule: :data:`DIFFERENCE_RULE`.
    """

    _shapes = {"draws": "n_draws"}

    estimate: float
    low: float
    high: float
    p_value: float
    level: float
    n_draws: int
    seeds_a: int
    seeds_b: int
    examples_a: int
    examples_b: int
    paired_examples: bool
    draws: npt.NDArray[np.float64]
    rule: str

    def to_pandas(self) -> Any:
        """One row: the difference, its interval and p."""
        return require_pandas().DataFrame([{"estimate": self.estimate, "low": self.low, "high": self.high,
                                            "p_value": self.p_value, "level": self.level, "seeds_a": self.seeds_a,
                                            "seeds_b": self.seeds_b, "examples_a": self.examples_a,
                                            "examples_b": self.examples_b, "paired_examples": self.paired_examples,
                                            "draws": self.n_draws}])


def multi_bootstrap(values: npt.ArrayLike, *, n_draws: int = 1000, seed: int = 0,
                    level: float = 0.95) -> MultiBootstrap:
    """The Multi-Bootstrap of the mean of ``values`` ``(S seeds, E examples)`` (:data:`RULE`).

    The draws come from ``numpy.random.default_rng(seed)`` in two calls: ``integers(0, S, size=(n_draws, S))`` (the
    seeds of every draw), then ``integers(0, E, size=(n_draws, E))`` (the examples of every draw). With one seed the
    first call draws nothing, so this is the ordinary bootstrap over examples.

    Raises:
        ConfigError: values not a finite 2-D array, ``n_draws < 1`` or ``level`` outside (0, 1).
    """
    v = _cells(values, "values")
    _draw_options(n_draws, level)
    s, e = v.shape
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, s, size=(n_draws, s))
    examples = rng.integers(0, e, size=(n_draws, e))
    draws = _cell_means(v, _counts(seeds, s), _counts(examples, e))
    low, high = _interval(draws, level)
    return MultiBootstrap(float(v.mean()), low, high, float(level), int(n_draws), s, e, draws, RULE)


def over_checkpoints(values: npt.ArrayLike, *, n_draws: int = 1000, seed: int = 0,
                     level: float = 0.95) -> list[MultiBootstrap]:
    """:func:`multi_bootstrap` of each checkpoint of ``values`` ``(C checkpoints, S seeds, E examples)``, with one
    ``seed`` for all: every checkpoint gets the same seeds and examples in each draw, so the draws are paired across
    checkpoints (a change between two checkpoints can be read off the difference of their draws)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 3:
        raise ConfigError(f"values: expected (checkpoints, seeds, examples), found shape {v.shape}")
    return [multi_bootstrap(v[c], n_draws=n_draws, seed=seed, level=level) for c in range(v.shape[0])]


def _two_sided_p(draws: npt.NDArray[np.float64], estimate: float) -> float:
    """:data:`DIFFERENCE_RULE`'s p: the share of draws at or beyond 0 on the side away from ``estimate``, doubled."""
    if estimate == 0:
        return 1.0
    other = float((draws <= 0).mean() if estimate > 0 else (draws >= 0).mean())
    return max(min(1.0, 2 * other), 1 / (len(draws) + 1))


def multi_bootstrap_difference(a: npt.ArrayLike, b: npt.ArrayLike, *, paired_examples: bool = True,
                               n_draws: int = 1000, seed: int = 0, level: float = 0.95) -> MultiBootstrapDifference:
    """The Multi-Bootstrap of ``mean(a) - mean(b)`` for two families ``(S_a, E)`` and ``(S_b, E)``
    (:data:`DIFFERENCE_RULE`).

    ``paired_examples``: both families were measured on the same ``E`` examples (column ``j`` of ``a`` and of ``b``
    is one example), so one example draw serves both; otherwise each family's examples are drawn on their own (and
    may differ in number). Generator calls, from ``default_rng(seed)``: a's seeds ``(n_draws, S_a)``, b's seeds
    ``(n_draws, S_b)``, then the examples ``(n_draws, E)`` (unpaired: a's, then b's).

    Raises:
        ConfigError: as :func:`multi_bootstrap`, or paired families measured on different numbers of examples.
    """
    va, vb = _cells(a, "a"), _cells(b, "b")
    _draw_options(n_draws, level)
    if paired_examples and va.shape[1] != vb.shape[1]:
        raise ConfigError(f"paired_examples: expected a and b on the same examples, found {va.shape[1]} and "
                          f"{vb.shape[1]} examples")
    rng = np.random.default_rng(seed)
    seeds_a = _counts(rng.integers(0, va.shape[0], size=(n_draws, va.shape[0])), va.shape[0])
    seeds_b = _counts(rng.integers(0, vb.shape[0], size=(n_draws, vb.shape[0])), vb.shape[0])
    examples_a = _counts(rng.integers(0, va.shape[1], size=(n_draws, va.shape[1])), va.shape[1])
    examples_b = (examples_a if paired_examples
                  else _counts(rng.integers(0, vb.shape[1], size=(n_draws, vb.shape[1])), vb.shape[1]))
    draws = _cell_means(va, seeds_a, examples_a) - _cell_means(vb, seeds_b, examples_b)
    estimate = float(va.mean() - vb.mean())
    low, high = _interval(draws, level)
    return MultiBootstrapDifference(estimate, low, high, _two_sided_p(draws, estimate), float(level), int(n_draws),
                                    va.shape[0], vb.shape[0], va.shape[1], vb.shape[1], bool(paired_examples), draws,
                                    DIFFERENCE_RULE)


def _head(layer: int, head: int) -> str:
    return f"{layer + 1}-{head + 1}"


@dataclass(frozen=True)
class RoleStability(Result):
    """Whether one role sits on the same heads in every seed of a family (:func:`role_stability`, :data:`STABILITY`).

    Attributes:
        role: the role's name ("" when not given).
        threshold: the score a head must reach to carry the role.
        seeds, n_layers, n_heads: S, L and H.
        aligned_rho: ``(L,)`` the mean over seed pairs of the Spearman correlation of the heads' scores, head ``k``
            of one seed against head ``k`` of the other (seeds whose scores are constant in a layer left out; NaN
            with fewer than two others).
        aligned_p: ``(L,)`` one-sided p of ``aligned_rho`` against heads shuffled within each seed.
        matched_rho: ``(L,)`` the same after the best one-to-one matching of each pair's heads: an optimised
            maximum, 1 by construction (ties aside) for one role's scores, and unchanged by the shuffles, so it
            is never tested; it is the ceiling ``aligned_rho`` would reach if head indices did not matter.
        aligned_distance, matched_distance: ``(L,)`` the mean absolute score difference between heads of two seeds,
            index-aligned and after the matching (the least any matching gives): a small matched and a large
            aligned distance mean the same division of the role at other indices.
        n_permutations: the shuffles of the null (every arrangement when ``exact``).
        exact: whether the null enumerated every arrangement of heads.
        carriers: ``[seed][layer]`` the heads (0-based) reaching ``threshold`` (:func:`role_carriers`).
        top: ``(S, L)`` each seed's top carrier (its highest-scoring carrier, the first on ties), -1 where none.
        same_top, top_pairs: ``(L,)`` the pairs of seeds, both with a carrier, whose top carriers share an index,
            and all such pairs.
        identity_p: ``(L,)`` exact binomial p (:func:`~probes.compare.fair_tests.identity_test`) of ``same_top`` of
            ``top_pairs`` against ``1 / H``, one-sided (greater); it treats the pairs as independent, which they
            are not (they share seeds).
        identity_p_shuffled: ``(L,)`` the same share tested against the shuffles (which keep the pairs' dependence).
    """

    _shapes = {"aligned_rho": "n_layers", "aligned_p": "n_layers", "matched_rho": "n_layers",
               "aligned_distance": "n_layers", "matched_distance": "n_layers", "top": "seeds n_layers",
               "same_top": "n_layers", "top_pairs": "n_layers", "identity_p": "n_layers",
               "identity_p_shuffled": "n_layers"}

    role: str
    threshold: float
    seeds: int
    n_layers: int
    n_heads: int
    aligned_rho: npt.NDArray[np.float64]
    aligned_p: npt.NDArray[np.float64]
    matched_rho: npt.NDArray[np.float64]
    aligned_distance: npt.NDArray[np.float64]
    matched_distance: npt.NDArray[np.float64]
    n_permutations: int
    exact: bool
    carriers: tuple[tuple[tuple[int, ...], ...], ...]
    top: npt.NDArray[np.int64]
    same_top: npt.NDArray[np.int64]
    top_pairs: npt.NDArray[np.int64]
    identity_p: npt.NDArray[np.float64]
    identity_p_shuffled: npt.NDArray[np.float64]

    @property
    def method(self) -> str:
        """How the numbers were made, with the null's size, for a table's footer."""
        null = (f"exact, all {self.n_permutations} arrangements" if self.exact
                else f"Monte Carlo, {self.n_permutations} shuffles")
        return f"{STABILITY}; null: {null}"

    def to_pandas(self) -> Any:
        """One row per layer (``layer`` 1-based; heads as ``layer-head``; carriers per seed joined by ``|``)."""
        rows = []
        for layer in range(self.n_layers):
            carriers = " | ".join(" ".join(_head(layer, k) for k in per_seed[layer]) or "-"
                                  for per_seed in self.carriers)
            tops = " ".join(_head(layer, int(k)) if k >= 0 else "-" for k in self.top[:, layer])
            pairs = int(self.top_pairs[layer])
            rows.append({"role": self.role, "layer": layer + 1, "aligned_rho": float(self.aligned_rho[layer]),
                         "aligned_p": float(self.aligned_p[layer]), "matched_rho": float(self.matched_rho[layer]),
                         "aligned_distance": float(self.aligned_distance[layer]),
                         "matched_distance": float(self.matched_distance[layer]), "carriers": carriers,
                         "carriers_per_seed": " ".join(str(len(per_seed[layer])) for per_seed in self.carriers),
                         "top_carriers": tops, "same_top": int(self.same_top[layer]), "top_pairs": pairs,
                         "identity_share": int(self.same_top[layer]) / pairs if pairs else float("nan"),
                         "chance": 1 / self.n_heads, "identity_p": float(self.identity_p[layer]),
                         "identity_p_shuffled": float(self.identity_p_shuffled[layer]),
                         "permutations": self.n_permutations, "exact": self.exact})
        return require_pandas().DataFrame(rows)


def _standard_ranks(scores: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """``(S, H)`` each seed's centred ranks scaled to unit length (``z_i . z_j`` is Spearman's rho), and ``(S,)``
    which seeds are not constant (a constant seed's row is 0)."""
    from scipy.stats import rankdata

    r = rankdata(scores, axis=1)
    r -= r.mean(axis=1, keepdims=True)
    norm = np.sqrt((r ** 2).sum(axis=1))
    ok = norm > 1e-12
    return np.where(ok[:, None], r / np.where(ok, norm, 1.0)[:, None], 0.0), ok


def _mean_pair_rho(z: npt.NDArray[np.float64], n: int) -> npt.NDArray[np.float64]:
    """``(N,)`` the mean Spearman rho over the pairs of ``n`` unit rank rows, from ``z`` ``(N, S, H)`` (constant
    seeds' rows 0): ``(|sum_i z_i|^2 - n) / (n (n - 1))``."""
    if n < 2:
        return np.full(z.shape[0], np.nan)
    total = z.sum(axis=1)
    return np.asarray(((total ** 2).sum(axis=1) - n) / (n * (n - 1)), dtype=np.float64)


def _same_pairs(position: npt.NDArray[np.int64], heads: int) -> npt.NDArray[np.int64]:
    """``(N,)`` the pairs of seeds sharing a top index, from ``position`` ``(N, S')``."""
    counts = np.zeros((position.shape[0], heads), dtype=np.int64)
    np.add.at(counts, (np.arange(position.shape[0])[:, None], position), 1)
    return np.asarray((counts * (counts - 1) // 2).sum(axis=1), dtype=np.int64)


def _arrangements(seeds: int, heads: int, n_permutations: int, rng: np.random.Generator
                  ) -> tuple[npt.NDArray[np.int64], bool]:
    """``(N, S, H)`` orders of each seed's heads (``scores[s][order]``): every arrangement with seed 0 fixed (both
    statistics are unchanged when every seed is relabelled alike) when there are at most
    :data:`~probes.compare.fair_tests.EXACT_LIMIT`, else ``n_permutations`` random shuffles of every seed."""
    if math.factorial(heads) ** (seeds - 1) <= fair_tests.EXACT_LIMIT:
        perms = np.array(list(itertools.permutations(range(heads))), dtype=np.int64)
        pick = np.array(list(itertools.product(range(len(perms)), repeat=seeds - 1)), dtype=np.int64)
        pick = pick.reshape(-1, seeds - 1)
        fixed = np.broadcast_to(np.arange(heads), (len(pick), 1, heads))
        return np.concatenate([fixed, perms[pick]], axis=1), True
    base = np.broadcast_to(np.arange(heads, dtype=np.int64), (n_permutations, seeds, heads))
    return rng.permuted(base, axis=2), False


def _pair_distances(scores: npt.NDArray[np.float64]) -> tuple[float, float, float]:
    """Over every pair of seeds of one layer ``(S, H)``: mean matched rho, mean aligned and matched |difference|.

    The matching is scipy's linear_sum_assignment on squared differences: its best matching (heads in score order)
    is also a best matching on absolute differences, and, unlike those, unique when scores differ."""
    from scipy.optimize import linear_sum_assignment

    rhos, aligned, matched = [], [], []
    for i, j in itertools.combinations(range(len(scores)), 2):
        a, b = scores[i], scores[j]
        rows, cols = linear_sum_assignment((a[:, None] - b[None, :]) ** 2)
        rhos.append(float(spearman_rows(a[rows], b[cols])))
        aligned.append(float(np.abs(a - b).mean()))
        matched.append(float(np.abs(a[rows] - b[cols]).mean()))
    finite = [r for r in rhos if np.isfinite(r)]
    return (float(np.mean(finite)) if finite else float("nan")), float(np.mean(aligned)), float(np.mean(matched))


def _shuffle_p(null: npt.NDArray[np.float64], observed: float, exact: bool) -> float:
    if not np.isfinite(observed):
        return float("nan")
    count = int((null >= observed - 1e-12).sum())
    return count / len(null) if exact else (1 + count) / (1 + len(null))


def _layer(scores: npt.NDArray[np.float64], top: npt.NDArray[np.int64], orders: npt.NDArray[np.int64],
           exact: bool) -> dict[str, float]:
    """The statistics of one layer ``(S, H)`` with its top carriers ``(S,)`` and the null's orders."""
    z, ok = _standard_ranks(scores)
    n = int(ok.sum())
    observed = float(_mean_pair_rho(z[None], n)[0])
    null = _mean_pair_rho(z[np.arange(len(z))[None, :, None], orders], n)
    matched_rho, aligned_distance, matched_distance = _pair_distances(scores)
    carrying = np.flatnonzero(top >= 0)
    pairs = len(carrying) * (len(carrying) - 1) // 2
    same = int(_same_pairs(top[None, carrying], scores.shape[1])[0]) if pairs else 0
    shuffled = float("nan")
    if pairs:
        # where each top carrier lands after the shuffle: the k with orders[..., k] == top
        landed = np.argmax(orders[:, carrying, :] == top[carrying][None, :, None], axis=2)
        shuffled = _shuffle_p(_same_pairs(landed, scores.shape[1]).astype(np.float64), float(same), exact)
    return {"aligned_rho": observed, "aligned_p": _shuffle_p(null, observed, exact), "matched_rho": matched_rho,
            "aligned_distance": aligned_distance, "matched_distance": matched_distance, "same_top": same,
            "top_pairs": pairs, "identity_p": identity_test(same, pairs, scores.shape[1]) if pairs else float("nan"),
            "identity_p_shuffled": shuffled}


def role_stability(scores: npt.ArrayLike, *, threshold: float = 0.5, role: str = "", n_permutations: int = 1000,
                   seed: int = 0) -> RoleStability:
    """How stable one role's heads are across the seeds of a family, from ``scores`` ``(S seeds, L, H)`` (each head's
    score for the role at one step; :data:`STABILITY`).

    ``threshold``: the score that makes a head a carrier (:func:`role_carriers`). The null shuffles the heads of each
    seed independently, layer by layer: exact when ``(H!)^(S-1)`` arrangements are at most
    :data:`~probes.compare.fair_tests.EXACT_LIMIT` (2 seeds of 4 heads: 24; 3: 576), else ``n_permutations``
    shuffles drawn from ``default_rng(seed)``.

    Raises:
        ConfigError: scores not a finite ``(S, L, H)`` array with ``S >= 2`` and ``H >= 2``, or ``n_permutations < 1``.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 3 or s.shape[0] < 2 or s.shape[2] < 2 or not np.isfinite(s).all():
        raise ConfigError(f"scores: expected a finite (seeds >= 2, layers, heads >= 2) array, found shape {s.shape}"
                          + ("" if np.isfinite(s).all() else " with non-finite values"))
    if isinstance(n_permutations, bool) or not isinstance(n_permutations, (int, np.integer)) or n_permutations < 1:
        raise ConfigError(f"n_permutations: expected a whole number >= 1, found {n_permutations!r}")
    n_seeds, n_layers, n_heads = s.shape
    carriers = [role_carriers(s[:, layer], threshold) for layer in range(n_layers)]  # [layer][seed]
    top = np.full((n_seeds, n_layers), -1, dtype=np.int64)
    for layer, per_seed in enumerate(carriers):
        for i, heads in enumerate(per_seed):
            if heads:
                top[i, layer] = heads[int(np.argmax(s[i, layer, list(heads)]))]
    rng = np.random.default_rng(seed)
    columns: dict[str, list[float]] = {}
    exact = False
    count = 0
    for layer in range(n_layers):
        orders, exact = _arrangements(n_seeds, n_heads, n_permutations, rng)
        count = len(orders)
        for key, value in _layer(s[:, layer], top[:, layer], orders, exact).items():
            columns.setdefault(key, []).append(value)
    floats = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
    return RoleStability(
        role=role, threshold=float(threshold), seeds=n_seeds, n_layers=n_layers, n_heads=n_heads,
        aligned_rho=floats["aligned_rho"], aligned_p=floats["aligned_p"], matched_rho=floats["matched_rho"],
        aligned_distance=floats["aligned_distance"], matched_distance=floats["matched_distance"],
        n_permutations=count, exact=exact,
        carriers=tuple(tuple(carriers[layer][i] for layer in range(n_layers)) for i in range(n_seeds)), top=top,
        same_top=floats["same_top"].astype(np.int64), top_pairs=floats["top_pairs"].astype(np.int64),
        identity_p=floats["identity_p"], identity_p_shuffled=floats["identity_p_shuffled"])


def _previous_token(maps: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """``(L, H, M)`` from maps ``(L, H, M, T, T)``: each sequence's previous-token score, as
    :func:`probes.analysis.task_roles.role_scores` scores ``std:previous_token`` per sequence."""
    return np.asarray(similarity_score(maps, previous_token_pattern(np.arange(maps.shape[-1]))), dtype=np.float64)


#: The roles :func:`family_roles` can bootstrap over sequences, and how each sequence's score is computed from the
#: stored attention maps. ``std:previous_token``: TransformerLens' ``mul`` score of the previous-token pattern, the
#: attention on key ``q - 1`` summed over queries over all the attention (the mean over the T queries when rows sum
#: to 1, the first query counting 0): role_scores' own per-sequence statistic, so its mean over the sequences is the
#: stored score when the maps hold every held-out sequence. The other roles need what the analysis does not keep:
#: the ids (``std:induction``) or each query's ideal key (the task's roles).
PER_SEQUENCE: dict[str, tuple[str, Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float64]]]] = {
    "std:previous_token": ("attention on key q - 1 summed over the queries, over all the attention (TransformerLens "
                           "mul score of the previous-token pattern), per sequence, from the stored maps",
                           _previous_token)}


@dataclass(frozen=True)
class FamilyRoles(Result):
    """One role across a family of seeds (:func:`family_roles`).

    Attributes:
        role, task: the role and the family's task.
        names, seeds: each member's name and seed, in order.
        step: the step everything is measured at (every member's last).
        stability: :func:`role_stability` of the stored role scores at ``step``.
        statistic: how each sequence's score was computed from the maps (:data:`PER_SEQUENCE`); "" when the role
            has no per-sequence statistic, and then ``intervals`` is empty.
        best_head: ``(S, L)`` each member's best head per layer (highest mean per-sequence score), -1 without
            intervals.
        intervals: per layer, the Multi-Bootstrap of the best head's score over seeds and the ``M`` sequences the
            maps hold (the best head is chosen once on all sequences, not again in each draw).
        note: what the intervals cannot tell.
    """

    _shapes = {"best_head": "seeds stability.n_layers"}

    role: str
    task: str
    names: tuple[str, ...]
    seeds: tuple[int, ...]
    step: int
    stability: RoleStability
    statistic: str
    best_head: npt.NDArray[np.int64]
    intervals: tuple[MultiBootstrap, ...]
    note: str

    def to_pandas(self) -> Any:
        """The stability table (one row per layer, 1-based), with each layer's best heads and interval."""
        table = self.stability.to_pandas()
        table.insert(0, "task", self.task)
        if self.intervals:
            table["best_heads"] = [" ".join(_head(layer, int(k)) for k in self.best_head[:, layer])
                                   for layer in range(self.stability.n_layers)]
            for key in ("estimate", "low", "high"):
                table[f"best_score_{key}"] = [getattr(b, key) for b in self.intervals]
            table["draws"] = [b.n_draws for b in self.intervals]
        return table


def _family_step(analyses: Sequence[LabModelAnalysis], role: str) -> int:
    """The family's common last step, after checking one task, shape and maps and the role in every member."""
    if len(analyses) < 2:
        raise ConfigError(f"analyses: expected a family of at least 2 seeds, found {len(analyses)}")
    first = analyses[0]
    for a in analyses:
        found = (a.task, a.n_layers, a.n_heads, a.maps.shape, int(a.steps[-1]))
        expected = (first.task, first.n_layers, first.n_heads, first.maps.shape, int(first.steps[-1]))
        if found != expected:
            raise ConfigError(f"family member {a.name!r}: expected (task, layers, heads, maps shape, last step) "
                              f"{expected} as {first.name!r}, found {found}")
        if role not in a.role_names:
            raise ConfigError(f"role {role!r}: expected one of {', '.join(a.role_names)} (member {a.name!r})")
    return int(first.steps[-1])


def family_roles(analyses: Sequence[LabModelAnalysis], role: str, *, n_draws: int = 1000, seed: int = 0,
                 threshold: float = 0.5, n_permutations: int = 1000, level: float = 0.95) -> FamilyRoles:
    """``role`` across a family (the analyses of one cell or one named family, one per seed, same task and shape):
    :func:`role_stability` at the last step, and per layer a :func:`multi_bootstrap` interval of the best head's
    score where the examples are the held-out sequences of ``maps`` (roles in :data:`PER_SEQUENCE` only; the
    analysis keeps mean scores, so per-sequence scores come from the maps, and other roles get no interval).

    What it cannot do: draw over more sequences than the maps hold (``M``); re-choose the best head in each draw (the
    interval is of the chosen head, so it leans high); bootstrap a role whose ideal key the analysis does not keep.

    Raises:
        ConfigError: fewer than 2 members, members of another task, shape or last step, or an unknown role.
    """
    step = _family_step(analyses, role)
    stability = role_stability(np.stack([a.scores(role) for a in analyses]), threshold=threshold, role=role,
                               n_permutations=n_permutations, seed=seed)
    first = analyses[0]
    best = np.full((len(analyses), first.n_layers), -1, dtype=np.int64)
    intervals: list[MultiBootstrap] = []
    statistic, per_sequence = PER_SEQUENCE.get(role, ("", None))
    note = ("the interval is of each seed's best head chosen on the same sequences (it leans high); the examples are "
            f"the {first.maps.shape[2]} sequences the maps hold")
    if per_sequence is None:
        note = (f"no interval: {role!r} has no per-sequence statistic from the stored maps (supported: "
                f"{', '.join(PER_SEQUENCE)})")
    else:
        values = np.stack([per_sequence(a.maps) for a in analyses])  # (S, L, H, M)
        best = values.mean(axis=3).argmax(axis=2)
        for layer in range(first.n_layers):
            cells = values[np.arange(len(analyses)), layer, best[:, layer]]  # (S, M)
            intervals.append(multi_bootstrap(cells, n_draws=n_draws, seed=seed, level=level))
    return FamilyRoles(role=role, task=first.task, names=tuple(a.name for a in analyses),
                       seeds=tuple(int(a.seed) for a in analyses), step=step, stability=stability,
                       statistic=statistic, best_head=best.astype(np.int64),
                       intervals=tuple(intervals), note=note)
