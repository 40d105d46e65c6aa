"""The lab's tables about roles: (b) ensemble or division of labour, (c) capacity, (d) when roles form.

(b) reads the ``match`` units (two seeds' final models of one cell, :class:`~probes.runs.match.MatchRun`) on the
attention distance (mean JS per word row, the same sentences for every distance of a pair) and applies
seed_methods.md §g's rule with intervals (:func:`division_verdict`). (c) and (d) count, per lab model, the heads
carrying a relation (:func:`probes.compare.specialisation.specialisation`: the comparison's held-out, corrected
rule) and the heads with a positional role (:func:`probes.compare.kinds.head_masks`; previous/next-token heads
are those whose positional offset is -1 or +1), from the atlas units of the models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from probes.compare.lab_cells import LabCell, lab_info, pair_means, seed_range
from probes.compare.lab_types import NOT_WITHIN, Capacity, Division, RoleFormation
from probes.compare.types import Unit

__all__ = ["division_rows", "division_verdict", "capacity_rows", "formation_rows", "head_roles", "match_pair",
           "RULES", "DIVISION_RULE", "APART_FACTOR", "APART_FLOOR"]

#: (b) The rule, as the report prints it.
DIVISION_RULE = (
    "on the attention distance, D_self is 0 by construction (JS row by row on the same rows), so the floor a "
    "distance is held against is D_match, the distance between heads doing the same job in two seeds. 'division "
    "of labour': D_match below D_null and D_within above D_match (distinct roles that recur across seeds); "
    "'ensemble': D_match and D_within below D_null and D_within not above D_match (a layer's heads as alike as "
    "matched heads: interchangeable); 'idiosyncratic': D_match not below D_null, each of the two inside the "
    "other's interval (nothing recurs beyond the null), and D_within not below D_null; 'inconclusive' otherwise "
    "(e.g. D_match below D_null by its value, but with overlapping intervals), or when all three intervals overlap. 'Above' and "
    "'below' mean intervals that do not overlap: D_match's and D_null's from the widest of the pairs' 95% intervals "
    "over sentences (permutations for the shuffle null) and the pairs' range, D_within's the range over seeds")
#: (d) Heads have come apart when a layer's mean attention distance exceeds this many times its step-0 value ...
APART_FACTOR = 10.0
#: ... and at least this much (mean JS per token row).
APART_FLOOR = 0.01
#: Every rule of this module's tables.
RULES: dict[str, str] = {
    "division": DIVISION_RULE,
    "capacity": ("cells with independent initialisation and no attention dropout, by heads; loss: held-out loss "
                 "at the last step; specialised: the comparison's held-out corrected rule (best relation beats its "
                 "best baseline on the report half, Holm over the model's heads); positional: an offset for at "
                 "least 90% of token rows (head kinds); previous/next: that offset is -1 or +1; mean over seeds, "
                 "range over seeds"),
    "formation": (f"apart: the first checkpoint at which some layer's mean attention distance between its heads "
                  f"exceeds {APART_FACTOR:g} x its value at the first checkpoint and {APART_FLOOR:g}; positional / "
                  "relation: the first checkpoint model whose atlas has a previous/next-token head / a specialised "
                  "head; -1 (not within the steps looked at) when it never did"),
}


def match_pair(unit: Unit) -> tuple[str, str]:
    """``(model A, model B)`` of a match unit: ``A~B`` as its model, or A with its ``other`` option."""
    if "~" in unit.model:
        a, b = unit.model.split("~", 1)
        return a, b
    return unit.model, str(unit.options.other or "")


def _interval(summary: Mapping[str, Any], key: str) -> tuple[float, float]:
    found = summary.get(key)
    if isinstance(found, (list, tuple)) and len(found) == 2:
        return float(found[0]), float(found[1])
    return math.nan, math.nan


def _match_numbers(run: Any) -> dict[str, Any]:
    """What one match unit gives (b): D_match, D_null, D_within of each model, D_self, identity share, profiles."""
    summary = dict(getattr(run, "summary", {}) or {})
    matching = run.matching
    if "D_null" in summary:
        null, null_iv, null_text = summary["D_null"], _interval(summary, "D_null_interval"), matching.null
    else:
        null, null_iv = summary.get("D_permuted", math.nan), _interval(summary, "D_permuted_interval")
        null_text = "model B's heads shuffled across layers and re-matched within layers (interval over permutations)"
    identity = summary.get("identity_share", matching.identity_share())
    return {"match": float(summary.get("D_match", matching.mean_distance)),
            "match_iv": _interval(summary, "D_match_interval"), "null": float(null), "null_iv": null_iv,
            "null_text": str(null_text or ""), "identity": float(identity),
            "within_a": float(np.nanmean(summary.get("D_within_a", [math.nan]))),
            "within_b": float(np.nanmean(summary.get("D_within_b", [math.nan]))),
            "self": float(summary.get("D_self", math.nan)), "self_note": str(summary.get("D_self_note", "")),
            "profile_match": float(summary.get("profile_D_match", math.nan)),
            "profile_self": float(summary.get("profile_D_self", math.nan)), "heads": int(matching.shape_a[1])}


def _relation(x: tuple[float, float, float], y: tuple[float, float, float]) -> str:
    """``above`` / ``below`` when the intervals ``(value, low, high)`` do not overlap, ``near`` when they do,
    ``unknown`` when an end is missing."""
    if not all(np.isfinite(v) for v in (*x[1:], *y[1:])):
        return "unknown"
    if x[1] > y[2]:
        return "above"
    if x[2] < y[1]:
        return "below"
    return "near"


def division_verdict(within: tuple[float, float, float], match: tuple[float, float, float],
                     null: tuple[float, float, float]) -> tuple[str, str]:
    """``(verdict, why)`` of :data:`DIVISION_RULE` from ``(value, low, high)`` of D_within, D_match and D_null."""
    w_m, m_n, w_n = _relation(within, match), _relation(match, null), _relation(within, null)
    why = f"D_within {w_m} D_match, D_match {m_n} D_null, D_within {w_n} D_null"
    if "unknown" in (w_m, m_n, w_n):
        return "inconclusive", why + " (an interval is missing)"
    if w_m == m_n == w_n == "near":
        return "inconclusive", why + " (all three intervals overlap)"
    if m_n == "below" and w_m == "above":
        return "division of labour", why
    if m_n == "below" and w_n == "below" and w_m != "above":
        return "ensemble", why
    if m_n == "near" and not _inside(match, null):
        return "inconclusive", why + " (D_match and D_null overlap without either value inside the other's interval)"
    if m_n != "below" and w_n != "below":
        return "idiosyncratic", why
    return "inconclusive", why


def _inside(x: tuple[float, float, float], y: tuple[float, float, float]) -> bool:
    """Whether each value of ``(value, low, high)`` ``x`` and ``y`` lies inside the other's interval."""
    return bool(y[1] <= x[0] <= y[2] and x[1] <= y[0] <= x[2])


def _envelope(points: Sequence[float], intervals: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """``(mean of points, low, high)``: the widest of the intervals and the points' range."""
    ends = [v for v in [*points, *(e for iv in intervals for e in iv)] if np.isfinite(v)]
    mean = seed_range(points)[0]
    return (mean, min(ends), max(ends)) if ends and all(np.isfinite(e) for iv in intervals for e in iv) \
        else (mean, math.nan, math.nan)


def _division_row(cell: str, found: list[dict[str, Any]], within: dict[str, float]) -> Division:
    """One cell's row from its match units' numbers and its models' D_within."""
    heads = found[0]["heads"]
    w = seed_range(list(within.values()))
    match = _envelope([f["match"] for f in found], [f["match_iv"] for f in found])
    null = _envelope([f["null"] for f in found], [f["null_iv"] for f in found])
    m_seeds, n_seeds = seed_range([f["match"] for f in found]), seed_range([f["null"] for f in found])
    identity = seed_range([f["identity"] for f in found])
    verdict, why = division_verdict(w, match, null)
    chance = 1.0 / heads
    if w[2] == 0.0:
        why += ("; every head of a layer equals the others (D_within exactly 0), so every matching ties and its "
                "identity share says nothing")
    elif np.isfinite(identity[1]):
        tied = identity[1] > chance
        why += (f"; identity share {identity[0]:.2f} against chance {chance:.2f}: "
                + ("head numbers tend to keep their job across seeds" if tied else "head numbers are arbitrary"))
    return Division(cell, heads, len(found), len(within), *w, seed_range([f["self"] for f in found])[0], *match,
                    m_seeds[1], m_seeds[2], *null, n_seeds[1], n_seeds[2], *identity, chance, verdict, why,
                    null=found[0]["null_text"], d_self_note=found[0]["self_note"],
                    profile_d_match=seed_range([f["profile_match"] for f in found])[0],
                    profile_d_self=seed_range([f["profile_self"] for f in found])[0], rule=DIVISION_RULE)


def division_rows(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]],
                  why: dict[str, list[str]]) -> list[Division]:
    """(b) One row per cell with at least 2 heads and match units between its final models."""
    by_cell: dict[str, list[dict[str, Any]]] = {}
    within: dict[str, dict[str, float]] = {}
    for unit in units:
        if unit.kind != "match":
            continue
        a, b = match_pair(unit)
        lab = lab_info(models, a) or {}
        cell = str(unit.options.cell if "cell" in unit.options else lab.get("cell", ""))
        if not cell:
            why.setdefault("division", []).append(f"{unit.analysis} on {unit.model}: not a lab model")
            continue
        numbers = _match_numbers(unit.result)
        if numbers["heads"] < 2:
            continue
        by_cell.setdefault(cell, []).append(numbers)
        models_of = within.setdefault(cell, {})
        models_of.setdefault(a or f"{unit.analysis}:a", numbers["within_a"])
        models_of.setdefault(b or f"{unit.analysis}:b", numbers["within_b"])
    if not by_cell:
        why.setdefault("division", []).append("no match unit between lab models of 2 or more heads (add a match "
                                              "analysis with pairs = \"seeds\")")
    return [_division_row(cell, found, within[cell]) for cell, found in by_cell.items()]


def head_roles(units: Sequence[Unit], model: str, *, n_resamples: int, seed: int,
               cache: dict[str, Any]) -> dict[str, Any] | None:
    """``{"specialised", "positional", "prev_next", "n_heads", "data"}`` of one model from its first atlas unit
    (specialised NaN when it cannot be decided; ``why`` then says so), or None without an atlas."""
    from probes.compare.inputs import profile_of
    from probes.compare.kinds import head_masks
    from probes.compare.specialisation import specialisation

    if model in cache:
        return cache[model]
    found = next((u for u in units if u.kind == "atlas" and u.model == model), None)
    if found is None:
        cache[model] = None
        return None
    atlas = found.result
    spec = specialisation(atlas.board, profile_of(atlas.board, atlas), model, found.data, n_resamples=n_resamples,
                          seed=seed)
    offsets = np.asarray(atlas.roles.positional())
    masks = head_masks(atlas)
    cache[model] = {"specialised": math.nan if isinstance(spec, str) else float(spec.row.n_specialised),
                    "why": spec if isinstance(spec, str) else "", "positional": float(masks["positional"].sum()),
                    "prev_next": float(np.isin(offsets, (-1, 1)).sum()), "n_heads": int(offsets.size),
                    "data": found.data}
    return cache[model]


def _final_models(models: Mapping[str, Mapping[str, Any]], cell: str) -> dict[int, str]:
    """seed -> the final (last-step) model of ``cell``."""
    out = {}
    for name in models:
        lab = lab_info(models, name)
        if lab and lab.get("cell") == cell and lab.get("step") is None:
            out[int(lab.get("seed", 0))] = name
    return dict(sorted(out.items()))


def capacity_rows(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]], cells: Mapping[str, LabCell],
                  why: dict[str, list[str]], *, n_resamples: int, seed: int,
                  cache: dict[str, Any] | None = None) -> list[Capacity]:
    """(c) One row per cell with independent initialisation and no attention dropout, by heads."""
    cache = {} if cache is None else cache
    rows = []
    chosen = [c for c in cells.values() if c.info["init"] == "independent" and c.info["attention_dropout"] == 0]
    for cell in sorted(chosen, key=lambda c: (c.info["heads"], c.name)):
        losses = [float(r.curves.dev_loss[-1]) for r in cell.runs.values() if len(r.curves.steps)]
        roles = [head_roles(units, m, n_resamples=n_resamples, seed=seed, cache=cache)
                 for m in _final_models(models, cell.name).values()]
        found = [r for r in roles if r is not None]
        for r in found:
            if r["why"]:
                why.setdefault("capacity", []).append(f"{cell.name}: specialised heads not decided ({r['why']})")
        n_heads = cell.info["heads"] * cell.info["layers"]
        rows.append(Capacity(cell.name, cell.info["heads"], n_heads, len(cell.runs), *seed_range(losses),
                             *seed_range([r["specialised"] for r in found]),
                             *seed_range([r["positional"] for r in found]), *seed_range([r["prev_next"] for r in found]),
                             n_atlas=len(found), data=found[0]["data"] if found else ""))
        if not found:
            why.setdefault("capacity", []).append(f"{cell.name}: no atlas on its final models (add an atlas analysis)")
    if not chosen:
        why.setdefault("capacity", []).append("no cell with independent initialisation and no attention dropout")
    return rows


def _apart(run: Any) -> tuple[int, int, tuple[int, ...]]:
    """``(step, layer, symmetry steps)``: the first checkpoint some layer's heads are apart (NOT_WITHIN if none)."""
    sym = getattr(run, "symmetry", None)
    if sym is None or np.asarray(sym.attention_distance).shape[-1] < 2:
        return NOT_WITHIN, NOT_WITHIN, ()
    curves = pair_means(np.asarray(sym.attention_distance, dtype=np.float64))  # (C, L)
    threshold = np.maximum(APART_FACTOR * curves[0], APART_FLOOR)  # (L,)
    steps = tuple(int(s) for s in sym.steps)
    for k in range(curves.shape[0]):
        above = np.flatnonzero(curves[k] > threshold)
        if above.size:
            return steps[k], int(above[0]), steps
    return NOT_WITHIN, NOT_WITHIN, steps


def _first(found: Sequence[tuple[int, dict[str, Any]]], key: str) -> int:
    return next((step for step, roles in found if np.isfinite(roles[key]) and roles[key] > 0), NOT_WITHIN)


def formation_rows(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]], cells: Mapping[str, LabCell],
                   why: dict[str, list[str]], *, n_resamples: int, seed: int,
                   cache: dict[str, Any] | None = None) -> list[RoleFormation]:
    """(d) One row per cell and seed with checkpoint models or a head symmetry."""
    cache = {} if cache is None else cache
    steps: dict[tuple[str, int], dict[int, str]] = {}
    for name in models:
        lab = lab_info(models, name)
        if lab and lab.get("cell"):
            step = lab.get("step") if lab.get("step") is not None else lab.get("last_step")
            if isinstance(step, int):
                steps.setdefault((str(lab["cell"]), int(lab.get("seed", 0))), {})[step] = name
    rows = []
    for cell in cells.values():
        for run_seed, run in sorted(cell.runs.items()):
            by_step = steps.get((cell.name, run_seed), {})
            found = [(s, r) for s, m in sorted(by_step.items())
                     if (r := head_roles(units, m, n_resamples=n_resamples, seed=seed, cache=cache)) is not None]
            apart, layer, sym_steps = _apart(run)
            if len(found) < 2 and not sym_steps:
                continue
            last = int(run.curves.steps[-1]) if len(run.curves.steps) else max(by_step, default=NOT_WITHIN)
            rows.append(RoleFormation(cell.name, run_seed, apart, layer, _first(found, "prev_next"),
                                      _first(found, "specialised"), last, tuple(s for s, _ in found), sym_steps,
                                      RULES["formation"]))
    if not any(len(r.steps_checked) >= 2 for r in rows):
        why.setdefault("formation", []).append("no cell with atlases at two or more checkpoints (add checkpoint_models "
                                               "and an atlas on them) for the positional and relation steps")
    return rows
