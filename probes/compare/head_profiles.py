"""Head profiles across models: the profile distance and the recurrence of roles.

``seed_methods.md`` §g "Head distances" (2): a head's *profile* is its vector of per-head measures (surface
statistics, pattern fractions, role scores, relation accuracies: the columns of an atlas' ``heads.csv`` or any
table with one row per head). :func:`profile_cost` z-scores every feature over all heads of the two models
together (so neither model sets the scale alone), drops the features it cannot use (not numeric, missing in one
model, NaN for some head, or constant over all heads; each named with its reason) and returns the Euclidean
distance between every head of A and every head of B, ready for :func:`probes.compare.matching.match_heads`.

D_self for this distance (:func:`profile_self_distance`): a head's distance to itself between two halves of the
sentences, both halves' profiles standardised with the scale of the full data: what perfect recurrence looks
like at this sample size.

:func:`role_recurrence`: the share of A's distinct roles found again among B's heads, and (given a matching) the
share of matched pairs whose two heads have the same role.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError

__all__ = ["ProfileCost", "profile_cost", "profile_self_distance", "RoleRecurrence", "role_recurrence",
           "ID_COLUMNS", "PROFILE_RULE"]

#: Columns that name a head rather than measure it; never features.
ID_COLUMNS: frozenset[str] = frozenset({"layer", "head", "head_name", "layer_a", "head_a", "layer_b", "head_b"})
#: How the profile distance is made (cited by reports).
PROFILE_RULE = ("profile distance: every per-head feature z-scored over all heads of both models together (mean 0, "
                "sd 1; features not numeric, missing in one model, NaN for some head or constant dropped), "
                "Euclidean distance between the feature vectors")


@dataclass(frozen=True)
class ProfileCost:
    """The profile distance between the heads of two models.

    Attributes:
        cost: ``(N_A, N_B)`` Euclidean distance of the standardised features.
        columns: the features used, in order; ``mean``, ``scale``: ``(K,)`` their mean and standard deviation over
            the heads of both models.
        dropped: feature -> why it was left out.
        z_a, z_b: ``(N_A, K)``, ``(N_B, K)`` the standardised features.
    """

    cost: npt.NDArray[np.float64]
    columns: tuple[str, ...]
    mean: npt.NDArray[np.float64]
    scale: npt.NDArray[np.float64]
    z_a: npt.NDArray[np.float64]
    z_b: npt.NDArray[np.float64]
    dropped: dict[str, str] = field(default_factory=dict)

    def standardise(self, table: Any) -> npt.NDArray[np.float64]:
        """``(N, K)`` the features of another table of heads (a half of the data, a null model) on this scale."""
        values = _values(table, self.columns, "table")
        return (values - self.mean) / self.scale


def _values(table: Any, columns: Sequence[str], name: str) -> npt.NDArray[np.float64]:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ConfigError(f"{name}: expected the feature columns {', '.join(missing)}, found {', '.join(map(str, table.columns))}")
    return np.asarray(table[list(columns)].to_numpy(dtype=np.float64), dtype=np.float64)


def profile_cost(table_a: Any, table_b: Any, columns: Sequence[str] | None = None) -> ProfileCost:
    """The profile distance between the heads of two tables (pandas DataFrames, one row per head in matrix order).

    Args:
        table_a, table_b: per-head features (e.g. ``heads.csv``); columns in :data:`ID_COLUMNS` are never features.
        columns: the features to use (default: every column of either table but the id columns); those that cannot
            be used are dropped and named in ``dropped``.

    Raises:
        ConfigError: no usable feature is left.
    """
    candidates = list(columns) if columns is not None else list(dict.fromkeys(
        [c for c in (*table_a.columns, *table_b.columns) if c not in ID_COLUMNS]))
    used, dropped = [], {}
    for name in candidates:
        if name not in table_a.columns or name not in table_b.columns:
            dropped[name] = "missing in model " + ("A" if name not in table_a.columns else "B")
            continue
        try:
            both = np.concatenate([np.asarray(table_a[name], dtype=np.float64), np.asarray(table_b[name], dtype=np.float64)])
        except (TypeError, ValueError):
            dropped[name] = "not numeric"
            continue
        if not np.isfinite(both).all():
            dropped[name] = f"not a finite number for {int((~np.isfinite(both)).sum())} heads"
        elif np.ptp(both) == 0:
            dropped[name] = "constant over every head"
        else:
            used.append(name)
    if not used:
        raise ConfigError("profile distance: no usable feature (" + "; ".join(f"{k}: {v}" for k, v in dropped.items())
                          + ")")
    a, b = _values(table_a, used, "table_a"), _values(table_b, used, "table_b")
    both = np.concatenate([a, b])
    mean, scale = both.mean(axis=0), both.std(axis=0)
    z_a, z_b = (a - mean) / scale, (b - mean) / scale
    cost = np.sqrt(np.maximum(((z_a[:, None, :] - z_b[None, :, :]) ** 2).sum(axis=-1), 0.0))  # (N_A, N_B)
    return ProfileCost(cost, tuple(used), mean, scale, z_a, z_b, dropped)


def profile_self_distance(scale: ProfileCost, half_1: Any, half_2: Any) -> npt.NDArray[np.float64]:
    """D_self of the profile distance: ``(N,)`` each head's distance between its profile on two halves of the
    sentences (tables of the same heads), both standardised with ``scale`` (the full data's)."""
    one, two = scale.standardise(half_1), scale.standardise(half_2)
    if one.shape != two.shape:
        raise ConfigError(f"halves: expected the same heads in both, found {one.shape[0]} and {two.shape[0]} rows")
    return np.sqrt(((one - two) ** 2).sum(axis=-1))


@dataclass(frozen=True)
class RoleRecurrence:
    """How many of A's roles recur in B.

    Attributes:
        share: the share of A's distinct roles that some head of B has (NaN when A has none).
        roles_a: A's distinct roles, sorted; ``found``: those B has too; ``missing``: those it lacks.
        matched_share: among matched pairs whose A head has a role, the share whose B head has the same role
            (NaN without a matching or without such pairs); ``n_matched``: the number of those pairs.
    """

    share: float
    roles_a: tuple[str, ...]
    found: tuple[str, ...]
    missing: tuple[str, ...]
    matched_share: float = float("nan")
    n_matched: int = 0


def _roles(labels: Sequence[str | None]) -> list[str | None]:
    return [None if label is None or str(label) == "" else str(label) for label in labels]


def role_recurrence(roles_a: Sequence[str | None], roles_b: Sequence[str | None], matching: Any = None) -> RoleRecurrence:
    """The role-recurrence score (see :class:`RoleRecurrence`).

    Args:
        roles_a, roles_b: each head's role (flat order ``layer * H + head``), None or ``""`` for a head without one.
        matching: a :class:`~probes.compare.matching.HeadMatching` of these heads (optional).
    """
    a, b = _roles(roles_a), _roles(roles_b)
    distinct = tuple(sorted({r for r in a if r is not None}))
    present = {r for r in b if r is not None}
    found = tuple(r for r in distinct if r in present)
    missing = tuple(r for r in distinct if r not in present)
    share = len(found) / len(distinct) if distinct else float("nan")
    matched_share, n_matched = float("nan"), 0
    if matching is not None:
        pairs = [(a[int(i)], b[int(j)]) for i, j in zip(matching.head_a, matching.head_b)
                 if int(i) < len(a) and int(j) < len(b)]
        if len(pairs) != matching.n_pairs:
            raise ConfigError(f"roles: the matching names heads beyond the {len(a)} roles of A or {len(b)} of B")
        with_role = [(x, y) for x, y in pairs if x is not None]
        n_matched = len(with_role)
        if with_role:
            matched_share = sum(x == y for x, y in with_role) / n_matched
    return RoleRecurrence(share, distinct, found, missing, matched_share, n_matched)
