"""(b), (h): which heads carry each role, per seed, and whether a role's top carrier keeps its index across seeds.

A head **carries** a role when its score at the last step reaches :data:`~probes.compare.role_lab_types.CARRIER_THRESHOLD`
(:func:`probes.importance.interactions.role_carriers`); the **top** carrier is the one head with the highest score
(None when there is no carrier, or when two heads tie for it, as the heads of an identical initialisation do: an
index chosen by a tie is no fact of training).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from probes.compare.fair_tests import identity_test
from probes.compare.role_lab_function import layer_effects
from probes.compare.role_lab_stats import same_index_p
from probes.compare.role_lab_types import (
    ALPHA,
    CARRIER_REASON,
    CARRIER_THRESHOLD,
    IdentityRow,
    PretrainedRoleRow,
    RoleSeedRow,
)
from probes.heads.inference import holm
from probes.importance.interactions import role_carriers
from probes.importance.lab_types import LabModelAnalysis

__all__ = ["carriers", "top_carrier", "role_rows", "identity_table", "pretrained_roles", "RULE", "IDENTITY_RULE"]

#: How table (b)'s per-seed rows are made.
RULE = ("per model (cell, seed), layer and role (the task's roles, then std:previous_token and std:induction): the "
        f"heads whose score at the last step reaches the threshold ({CARRIER_THRESHOLD}: " + CARRIER_REASON + "), best first; "
        "the top carrier is the unique best head (none when heads tie for it); each carrier's single-ablation effect "
        "is its loss increase (nats per scored token) at the last step")
#: How table (b)'s identity rows are made and tested.
IDENTITY_RULE = ("per cell, layer and role over the seeds with a top carrier: the pairs of seeds whose top carriers "
                 "have the same index ('kept' of 'pairs'), against chance 1/H; p: exact binomial test over the pairs "
                 "(fair_tests.identity_test, one-sided greater), which treats the pairs as independent though they "
                 "share seeds; p_exact: exact p under independent uniform indices per seed (the count of same-index "
                 "pairs enumerated over the seeds' occupancy counts), the one the verdict reads, after Holm over the "
                 "cell's tests (its layers and roles)")


def carriers(scores: npt.NDArray[np.float64], threshold: float) -> tuple[int, ...]:
    """0-based heads of one layer ``(H,)`` whose score reaches ``threshold``, best first (ties by index)."""
    found = role_carriers(np.nan_to_num(scores, nan=-np.inf)[None, :], threshold)[0]
    return tuple(sorted(found, key=lambda h: (-scores[h], h)))


def top_carrier(scores: npt.NDArray[np.float64], threshold: float) -> int | None:
    """The unique best head of one layer if it reaches ``threshold``; None when none does or two tie for best."""
    found = carriers(scores, threshold)
    if not found or (len(found) > 1 and scores[found[1]] == scores[found[0]]):
        return None
    return found[0]


def _seed_rows(model: LabModelAnalysis, threshold: float) -> list[RoleSeedRow]:
    effects = (layer_effects(model.function, model.n_layers, model.n_heads) if model.function is not None
               else None)
    rows = []
    for role in model.role_names:
        scores = model.scores(role)  # (L, H)
        if not np.isfinite(scores).any():
            continue  # the role applies nowhere in this task
        for layer in range(model.n_layers):
            found = carriers(scores[layer], threshold)
            top = top_carrier(scores[layer], threshold)
            best = float(np.nanmax(scores[layer])) if np.isfinite(scores[layer]).any() else float("nan")
            rows.append(RoleSeedRow(model.cell, model.seed, layer, role, model.n_heads, len(found), found, top, best,
                                    () if effects is None else tuple(float(effects[layer, h]) for h in found)))
    return rows


def role_rows(models: Sequence[LabModelAnalysis], threshold: float) -> list[RoleSeedRow]:
    """Table (b), per seed: one row per model, layer and role with a score."""
    return [row for model in sorted(models, key=lambda m: (m.cell, m.seed)) for row in _seed_rows(model, threshold)]


def _identity(cell: str, layer: int, role: str, rows: list[RoleSeedRow]) -> IdentityRow:
    heads = rows[0].heads
    tops = [r.top for r in rows if r.top is not None]
    pairs = math.comb(len(tops), 2)
    kept = sum(1 for i in range(len(tops)) for j in range(i + 1, len(tops)) if tops[i] == tops[j])
    p = identity_test(kept, pairs, heads) if pairs else float("nan")
    return IdentityRow(cell, layer, role, heads, len(rows), len(tops), pairs, kept, 1.0 / heads, p,
                       same_index_p(kept, len(tops), heads), float("nan"), "")


def _identity_verdict(row: IdentityRow) -> str:
    if not np.isfinite(row.p_holm):
        return "no test (fewer than 2 seeds with a unique top carrier)"
    if row.p_holm < ALPHA:
        return f"the same index more often than chance (p_exact Holm = {row.p_holm:.3g}): not arbitrary"
    return f"no more often the same index than chance 1/{row.heads} (p_exact Holm = {row.p_holm:.3g})"


def identity_table(rows: Sequence[RoleSeedRow]) -> list[IdentityRow]:
    """Table (b), across seeds: one row per cell, layer and role (heads >= 2), Holm of ``p_exact`` per cell."""
    groups: dict[tuple[str, int, str], list[RoleSeedRow]] = {}
    for row in rows:
        if row.heads >= 2:
            groups.setdefault((row.cell, row.layer, row.role), []).append(row)
    out = [_identity(cell, layer, role, mine) for (cell, layer, role), mine in groups.items()]
    adjusted: list[IdentityRow] = []
    for cell in dict.fromkeys(r.cell for r in out):
        mine = [r for r in out if r.cell == cell]
        for test, q in zip(mine, holm([r.p_exact for r in mine])):
            done = replace(test, p_holm=float(q))
            adjusted.append(replace(done, verdict=_identity_verdict(done)))
    return adjusted


def pretrained_roles(model: LabModelAnalysis, threshold: float) -> list[PretrainedRoleRow]:
    """Table (h): one row per role of a pretrained model: its carriers over all layers, best first."""
    out = []
    for role in model.role_names:
        scores = model.scores(role)
        if not np.isfinite(scores).any():
            continue
        flat = np.nan_to_num(scores, nan=-np.inf).reshape(-1)
        found = [int(i) for i in np.argsort(-flat, kind="stable") if flat[i] >= threshold]
        names = tuple(f"{i // model.n_heads + 1}-{i % model.n_heads + 1}" for i in found)
        layers = tuple(sorted({i // model.n_heads for i in found}))
        out.append(PretrainedRoleRow(model.cell, role, model.n_layers * model.n_heads, len(found), names, layers,
                                     float(np.nanmax(scores))))
    return out
