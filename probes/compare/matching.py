"""Head matching between two models: the optimal one-to-one assignment of heads on a distance matrix, and its nulls.

``seed_methods.md`` §g "Matching": :func:`match_heads` solves ``scipy.optimize.linear_sum_assignment`` on a cost
matrix of head distances, either *within layers* (one H x H problem per layer: head l-h of A may only match a head
of layer l of B; the models must have the same layers x heads) or *across layers* (one rectangular
N_A x N_B problem; with N_A != N_B only min(N_A, N_B) heads are matched). The matching minimises the summed
distance of the matched pairs; D_match is their mean.

Intervals and nulls, each a 95% percentile interval (:func:`probes.heads.intervals.percentile_interval`), drawn
with :func:`probes.heads.intervals.resample_counts` so that the same seed gives the same draws:

* :func:`bootstrap_pairs`: each matched pair's distance over resampled units (documents or sentences), the
  matching held fixed: how much the distance owes to the sample;
* :func:`null_model_intervals` (D_null): model A matched to an unrelated model (a sharpness-matched
  random-init twin, or another seed), re-matched in every resample, so the interval holds the optimisation's
  own pull toward small distances: head a's matched distance to that null model;
* :func:`label_permutation_null` (within layers only): B's heads shuffled across layers and re-matched within
  layers, head a's matched distance each time; it asks whether layer l of B holds a's partner more than a random
  layer would (across layers the matching does not depend on B's labels, so there it is refused);
* :func:`random_assignment_mean`: the expected mean distance of a uniformly random one-to-one assignment,
  what D_match is when the distance says nothing about which head goes with which.

Heads are numbered ``layer * H + head`` (0-based) in every array; :meth:`HeadMatching.to_pandas` and every file
for people are 1-based.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.heads.intervals import percentile_interval, resample_counts
from probes.results import Result, require_pandas

__all__ = ["HeadMatching", "MATCHING_RULE", "as_cost", "match_heads", "assign", "random_assignment_mean",
           "bootstrap_pairs", "null_model_intervals", "label_permutation_null", "within_layer_distance",
           "with_intervals"]

#: How heads are matched (cited by reports).
MATCHING_RULE = ("optimal one-to-one matching of heads minimising the summed distance "
                 "(scipy.optimize.linear_sum_assignment); within layers: one H x H problem per layer; "
                 "across layers: one N_A x N_B problem")

Shape = tuple[int, int]


@dataclass(frozen=True)
class HeadMatching(Result):
    """A one-to-one matching of the heads of model A to those of model B.

    Attributes:
        shape_a, shape_b: ``(layers, heads)`` of each model.
        within_layers: matched within layers (else across layers).
        head_a, head_b: ``(P,)`` int64 matched heads, 0-based flat index ``layer * H + head``, in order of A's heads.
        distance: ``(P,)`` each pair's distance.
        distance_name: which distance (``"attention"``: mean JS per word row; ``"profile"``...).
        distance_low, distance_high: ``(P,)`` each pair's interval over resampled units, or None.
        null_low, null_high: ``(P,)`` the null interval of head a's matched distance, or None.
        null: how the null interval was made ("" without one).
        random_mean: expected mean distance of a uniformly random one-to-one assignment (NaN if unknown).
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"head_a": "P", "head_b": "P", "distance": "P", "distance_low": "P", "distance_high": "P",
               "null_low": "P", "null_high": "P"}

    shape_a: tuple[int, int]
    shape_b: tuple[int, int]
    within_layers: bool
    head_a: npt.NDArray[np.int64]
    head_b: npt.NDArray[np.int64]
    distance: npt.NDArray[np.float64]
    distance_name: str = ""
    distance_low: npt.NDArray[np.float64] | None = None
    distance_high: npt.NDArray[np.float64] | None = None
    null_low: npt.NDArray[np.float64] | None = None
    null_high: npt.NDArray[np.float64] | None = None
    null: str = ""
    random_mean: float = float("nan")

    @property
    def n_pairs(self) -> int:
        """Number of matched pairs."""
        return int(self.head_a.shape[0])

    @property
    def mean_distance(self) -> float:
        """D_match: the mean distance of the matched pairs (NaN without pairs)."""
        return float(self.distance.mean()) if self.n_pairs else float("nan")

    def positions(self, model: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(layers, heads)`` 0-based positions of the matched heads of model ``"a"`` or ``"b"``."""
        flat, width = (self.head_a, self.shape_a[1]) if model == "a" else (self.head_b, self.shape_b[1])
        return flat // width, flat % width

    def partner(self) -> dict[int, int]:
        """A's flat head -> its matched B head."""
        return {int(a): int(b) for a, b in zip(self.head_a, self.head_b)}

    def identity_share(self) -> float:
        """Share of pairs whose two heads have the same layer and head numbers (1.0: the identity matching)."""
        if not self.n_pairs:
            return float("nan")
        la, ha = self.positions("a")
        lb, hb = self.positions("b")
        return float(np.mean((la == lb) & (ha == hb)))

    def agreement(self, other: HeadMatching) -> float:
        """Share of this matching's A heads that ``other`` matches to the same B head (e.g. two halves)."""
        mine, theirs = self.partner(), other.partner()
        return float(np.mean([theirs.get(a) == b for a, b in mine.items()])) if mine else float("nan")

    def to_pandas(self) -> Any:
        """One row per pair: 1-based ``layer_a, head_a, layer_b, head_b``, ``distance``, its interval
        (``distance_low``, ``distance_high``) and the null's (``null_low``, ``null_high``), NaN where not made."""
        pandas = require_pandas()
        la, ha = self.positions("a")
        lb, hb = self.positions("b")
        nan = np.full(self.n_pairs, np.nan)
        return pandas.DataFrame({
            "layer_a": la + 1, "head_a": ha + 1, "layer_b": lb + 1, "head_b": hb + 1, "distance": self.distance,
            "distance_low": nan if self.distance_low is None else self.distance_low,
            "distance_high": nan if self.distance_high is None else self.distance_high,
            "null_low": nan if self.null_low is None else self.null_low,
            "null_high": nan if self.null_high is None else self.null_high})


def as_cost(cost: npt.ArrayLike, shape_a: Shape | None = None,
            shape_b: Shape | None = None) -> tuple[npt.NDArray[np.float64], Shape, Shape]:
    """``(cost (N_A, N_B), shape_a, shape_b)`` from a ``(L_A, H_A, L_B, H_B)`` or a ``(N_A, N_B)`` matrix (a 2-D one
    without shapes is one layer of each model). ConfigError for another shape, shapes that do not fit, or a
    value that is not finite."""
    matrix = np.asarray(cost, dtype=np.float64)
    if matrix.ndim == 4:
        given = (tuple(matrix.shape[:2]), tuple(matrix.shape[2:]))
        if (shape_a is not None and tuple(shape_a) != given[0]) or (shape_b is not None and tuple(shape_b) != given[1]):
            raise ConfigError(f"cost: a {matrix.shape} matrix is layers x heads {given[0]} against {given[1]}, "
                              f"found shapes {shape_a} and {shape_b}")
        layers_heads_a, layers_heads_b = given
        matrix = matrix.reshape(int(np.prod(layers_heads_a)), int(np.prod(layers_heads_b)))
    elif matrix.ndim == 2:
        layers_heads_a = tuple(shape_a) if shape_a is not None else (1, matrix.shape[0])
        layers_heads_b = tuple(shape_b) if shape_b is not None else (1, matrix.shape[1])
        if matrix.shape != (int(np.prod(layers_heads_a)), int(np.prod(layers_heads_b))):
            raise ConfigError(f"cost: a {matrix.shape} matrix does not hold layers x heads {layers_heads_a} against "
                              f"{layers_heads_b}")
    else:
        raise ConfigError(f"cost: expected a (L_A, H_A, L_B, H_B) or (N_A, N_B) matrix, found shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ConfigError(f"cost: {int((~np.isfinite(matrix)).sum())} entries are not finite numbers; every pair of "
                          "heads needs a distance to be matched")
    return (matrix, (int(layers_heads_a[0]), int(layers_heads_a[1])),
            (int(layers_heads_b[0]), int(layers_heads_b[1])))


def _check_within(shape_a: Shape, shape_b: Shape) -> None:
    if shape_a != shape_b:
        raise ConfigError(f"matching within layers needs the same layers x heads in both models, found {shape_a[0]} x "
                          f"{shape_a[1]} (model A) and {shape_b[0]} x {shape_b[1]} (model B); match across layers")


def assign(cost: npt.NDArray[np.float64], shape_a: Shape, shape_b: Shape,
           within_layers: bool) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(heads of A, heads of B)`` of the optimal matching on ``cost`` ``(N_A, N_B)`` (flat indices, in order of
    A's heads)."""
    from scipy.optimize import linear_sum_assignment

    if not within_layers:
        rows, cols = linear_sum_assignment(cost)
        return rows.astype(np.int64), cols.astype(np.int64)
    _check_within(shape_a, shape_b)
    n_layers, n_heads = shape_a
    rows_all, cols_all = [], []
    for layer in range(n_layers):
        block = slice(layer * n_heads, (layer + 1) * n_heads)
        rows, cols = linear_sum_assignment(cost[block, block])
        rows_all.append(rows + layer * n_heads)
        cols_all.append(cols + layer * n_heads)
    return np.concatenate(rows_all).astype(np.int64), np.concatenate(cols_all).astype(np.int64)


def match_heads(cost: npt.ArrayLike, *, within_layers: bool = False, shape_a: Shape | None = None,
                shape_b: Shape | None = None, distance_name: str = "") -> HeadMatching:
    """The optimal one-to-one matching of A's heads to B's on ``cost`` (see the module docstring).

    Args:
        cost: ``(L_A, H_A, L_B, H_B)``, or ``(N_A, N_B)`` with ``shape_a`` / ``shape_b`` (heads ``layer * H + head``).
        within_layers: one problem per layer (needs equal layers x heads; ConfigError naming both shapes), else
            one problem across layers.
        distance_name: which distance the cost is (kept in the result).

    The result carries :func:`random_assignment_mean`; intervals are added with :func:`dataclasses.replace`
    from :func:`bootstrap_pairs`, :func:`null_model_intervals` or :func:`label_permutation_null`.
    """
    matrix, shape_a, shape_b = as_cost(cost, shape_a, shape_b)
    heads_a, heads_b = assign(matrix, shape_a, shape_b, within_layers)
    return HeadMatching(shape_a, shape_b, bool(within_layers), heads_a, heads_b, matrix[heads_a, heads_b].copy(),
                        distance_name, random_mean=random_assignment_mean(matrix, shape_a, shape_b, within_layers))


def random_assignment_mean(cost: npt.NDArray[np.float64], shape_a: Shape, shape_b: Shape,
                           within_layers: bool) -> float:
    """Expected mean matched distance of a uniformly random one-to-one assignment of the same kind.

    Each matched head of A then has a uniformly random partner among its candidates (its layer's heads of B
    within layers, every head of B across), so the expectation is the mean of the candidate entries (exact, no
    sampling): within layers the mean of the diagonal layer blocks, across layers the mean of every entry.
    """
    if not cost.size:
        return float("nan")
    if not within_layers:
        return float(cost.mean())
    _check_within(shape_a, shape_b)
    n_layers, n_heads = shape_a
    blocks = cost.reshape(n_layers, n_heads, n_layers, n_heads)[np.arange(n_layers), :, np.arange(n_layers), :]
    return float(blocks.mean())


def _unit_costs(unit_sums: npt.NDArray[np.float64], unit_rows: npt.NDArray[np.float64]) -> None:
    if unit_sums.ndim != 3 or unit_rows.shape != unit_sums.shape[:1]:
        raise ConfigError(f"unit sums: expected (U, N_A, N_B) sums and (U,) rows, found {unit_sums.shape} and "
                          f"{unit_rows.shape}")
    if unit_sums.shape[0] < 2:
        raise ConfigError(f"intervals over units need at least 2 units (documents or sentences), found "
                          f"{unit_sums.shape[0]}")


def bootstrap_pairs(unit_sums: npt.ArrayLike, unit_rows: npt.ArrayLike, matching: HeadMatching, *,
                    n_resamples: int = 1000, random_state: int | None = 0
                    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(low (P,), high (P,), mean draws (R,))``: each matched pair's distance over resampled units, the matching
    fixed, and D_match's draws.

    Args:
        unit_sums: ``(U, N_A, N_B)`` summed divergences per unit (document or sentence); ``unit_rows``: ``(U,)``
            the rows each unit holds. A draw's distance is Σ counts x sums / Σ counts x rows (ratio of sums).
    """
    sums, rows = np.asarray(unit_sums, dtype=np.float64), np.asarray(unit_rows, dtype=np.float64)
    _unit_costs(sums, rows)
    counts = resample_counts(sums.shape[0], n_resamples, random_state)  # (R, U)
    picked = sums[:, matching.head_a, matching.head_b]  # (U, P)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = (counts @ picked) / (counts @ rows)[:, None]  # (R, P)
    low, high = percentile_interval(draws)
    return low, high, draws.mean(axis=1)


def null_model_intervals(matching: HeadMatching, unit_sums: npt.ArrayLike, unit_rows: npt.ArrayLike,
                         shape_null: Shape, *, n_resamples: int = 200, random_state: int | None = 0
                         ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64],
                                    npt.NDArray[np.float64]]:
    """D_null: ``(low (P,), high (P,), point (P,), mean draws (R,))`` of each of ``matching``'s A heads' matched
    distance to a null model, matched the same way (within or across layers), re-matched in every resample.

    Args:
        unit_sums: ``(U, N_A, N_null)`` divergences of model A against the null model per unit, on the same units as
            the matching's distances; ``unit_rows``: ``(U,)``.
        shape_null: the null model's ``(layers, heads)``.

    An A head that the null matching leaves unmatched (N_A > N_null across layers) gets NaN. The same
    ``random_state`` as :func:`bootstrap_pairs` draws the same resamples, so the two intervals are paired.
    """
    sums, rows = np.asarray(unit_sums, dtype=np.float64), np.asarray(unit_rows, dtype=np.float64)
    _unit_costs(sums, rows)
    if sums.shape[1] != int(np.prod(matching.shape_a)) or sums.shape[2] != int(np.prod(shape_null)):
        raise ConfigError(f"null sums: expected (U, {int(np.prod(matching.shape_a))}, {int(np.prod(shape_null))}) for "
                          f"model A {matching.shape_a} against the null model {shape_null}, found {sums.shape}")
    flat = sums.reshape(sums.shape[0], -1)  # (U, N_A*N_null)

    def matched(cost: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        rows_a, cols = assign(cost, matching.shape_a, (int(shape_null[0]), int(shape_null[1])), matching.within_layers)
        out = np.full(cost.shape[0], np.nan)
        out[rows_a] = cost[rows_a, cols]
        return out[matching.head_a]  # (P,)

    point = matched(sums.sum(axis=0) / max(rows.sum(), 1e-300))
    counts = resample_counts(sums.shape[0], n_resamples, random_state)  # (R, U)
    draws = np.empty((n_resamples, matching.n_pairs))
    for r in range(n_resamples):
        draws[r] = matched((counts[r] @ flat / (counts[r] @ rows)).reshape(sums.shape[1:]))
    low, high = percentile_interval(draws)
    return low, high, point, np.nanmean(draws, axis=1)


def label_permutation_null(cost: npt.ArrayLike, matching: HeadMatching, *, n_permutations: int = 1000,
                           random_state: int | None = 0
                           ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(low (P,), high (P,), mean draws (n_permutations,))``: each of A's matched heads' distance when B's heads
    are shuffled across layers and re-matched within layers (within-layer matchings only).

    Raises:
        ConfigError: an across-layer matching (it does not depend on how B's heads are labelled).
    """
    if not matching.within_layers:
        raise ConfigError("label permutations are a null for matchings within layers only: an across-layer matching "
                          "does not depend on how model B's heads are labelled (give a null model instead)")
    matrix, shape_a, shape_b = as_cost(cost, matching.shape_a, matching.shape_b)
    rng = np.random.default_rng(random_state)
    draws = np.empty((n_permutations, matching.n_pairs))
    for r in range(n_permutations):
        shuffled = matrix[:, rng.permutation(matrix.shape[1])]
        rows, cols = assign(shuffled, shape_a, shape_b, True)
        out = np.empty(matrix.shape[0])
        out[rows] = shuffled[rows, cols]
        draws[r] = out[matching.head_a]
    low, high = percentile_interval(draws)
    return low, high, draws.mean(axis=1)


def within_layer_distance(distance: npt.ArrayLike, shape: Shape) -> npt.NDArray[np.float64]:
    """D_within per layer: ``(L,)`` the mean distance between distinct heads of each layer of one model, from its
    ``(N, N)`` head-to-head matrix (NaN for a layer of one head)."""
    matrix = np.asarray(distance, dtype=np.float64)
    n_layers, n_heads = shape
    if matrix.shape != (n_layers * n_heads,) * 2:
        raise ConfigError(f"distance: expected a {(n_layers * n_heads,) * 2} matrix for {shape}, found {matrix.shape}")
    if n_heads < 2:
        return np.full(n_layers, np.nan)
    blocks = matrix.reshape(n_layers, n_heads, n_layers, n_heads)[np.arange(n_layers), :, np.arange(n_layers), :]
    off = ~np.eye(n_heads, dtype=bool)
    return blocks[:, off].mean(axis=1)


def with_intervals(matching: HeadMatching, **fields: Any) -> HeadMatching:
    """``matching`` with interval fields set (``distance_low``, ``null_low``, ``null`` ...)."""
    return dataclasses.replace(matching, **fields)
