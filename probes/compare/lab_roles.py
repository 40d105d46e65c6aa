"""The lab's tables about roles: (b) ensemble or division of labour, (c) capacity, (d) when roles form.

(b) reads the ``match`` units (two seeds' final models of one cell, :class:`~probes.runs.match.MatchRun`) on the
attention distance (mean JS per word row, the same sentences for every distance of a pair) and decides by tests,
each with its p-value (:data:`DIVISION_RULE`), never read off intervals: per layer, D_cross against D_within
(both all-pairs means, like with like) by a permutation test over regroupings of the heads
(:func:`probes.compare.fair_tests.within_cross_test`, on the distances the match unit keeps); beside it D_match
against the shuffled-layers null on that null's draws (:func:`~probes.compare.fair_tests.matching_p`) and the
identity share by an exact binomial test (:func:`~probes.compare.fair_tests.identity_test`). D_match, an optimised
minimum, is never compared with D_within. (c) and (d) count, per lab model, the heads carrying a relation
(:func:`probes.compare.specialisation.specialisation`: the comparison's held-out, corrected rule) and the heads with
a positional role (:func:`probes.compare.kinds.head_masks`; previous/next-token heads are those whose positional
offset is -1 or +1), from the atlas units of the models.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from probes.compare.fair_tests import PermutationTest, identity_test, matching_p, within_cross_test
from probes.compare.lab_cells import LabCell, lab_info, pair_means, seed_range
from probes.compare.lab_types import NOT_WITHIN, Capacity, Division, RoleFormation
from probes.compare.types import Unit
from probes.heads.inference import ALPHA

__all__ = ["division_rows", "division_verdict", "layer_verdict", "layer_cross_tests", "combine_pairs",
           "recurrence_test", "capacity_rows", "formation_rows", "head_roles", "match_pair", "RULES", "DIVISION_RULE",
           "NO_DRAWS", "NO_DISTANCES", "APART_FACTOR", "APART_FLOOR"]

#: (b) The rule, as the report prints it.
DIVISION_RULE = (
    "per layer and pair of seeds: D_within (the mean distance between two heads of one seed) against D_cross (the "
    "mean distance between a head of one seed and a head of the other), both all-pairs means of the match unit's "
    "attention distances, by a permutation test of D_cross - D_within over the regroupings of the layer's 2H heads "
    "into two seeds (fair_tests.within_cross_test: exact over all C(2H, H) / 2 regroupings up to 20,000, Monte Carlo "
    "beyond; the count is in the table); "
    "the pairs of seeds of a cell are combined by an intersection-union test (a layer's p is the largest of its "
    "pairs' p-values when every pair's difference has one sign, else 1; valid whatever the dependence between pairs "
    "that share a seed); each layer is its own question at 0.05, with no correction across layers or cells; "
    "'division of labour': D_cross below D_within (each seed's heads differ from each other more than from the other "
    "seed's: distinct roles that recur); "
    "'seed-specific': D_cross above D_within (a seed's heads closer to each other than to the other seed's, as copies "
    "of one head are); "
    "'no difference found': not rejected, which an ensemble of alike heads predicts, but so does a division of labour "
    "whose roles recur exactly (a head and its counterpart can change seeds without changing the statistic), so it "
    "does not tell the two apart (function does: the role lab's ablations, kind = \"role-lab\"); "
    "'untested': no distances kept, or too few regroupings for any p below 0.05 (2 heads: 3 regroupings); "
    "beside the verdict, not entering it: D_match (the mean distance of the optimal one-to-one matching within "
    "layers) against the shuffled-layers null on its draws (model B's heads shuffled across layers and re-matched; "
    "p = (1 + draws at or below D_match) / (1 + draws), fair_tests.matching_p; the cell's p is the largest over its "
    "pairs), which shows that matched heads are closer than heads of another layer (mostly that the layers differ); "
    "and the identity share (matched heads that keep their layer and number) against chance 1/H by an exact "
    "binomial test, one-sided greater (fair_tests.identity_test; the matched heads of all pairs pooled and treated "
    "as independent, though a matching is a permutation and pairs share seeds); "
    "D_match is never compared with D_within (an optimised minimum against an all-pairs mean)")
#: What a match unit saved before the null's draws were kept says about its D_match test.
NO_DRAWS = "untested: the saved match has no null draws"
#: What a match unit without kept distances says about its D_cross test.
NO_DISTANCES = "untested: the saved match keeps no head-to-head distances"
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


def layer_cross_tests(run: Any, *, seed: int = 0) -> list[PermutationTest] | str:
    """Per layer, :func:`~probes.compare.fair_tests.within_cross_test` on a match unit's distances (``(2H, 2H)``:
    the layer's heads of model A, then of model B), or why there is none (a sentence starting ``untested``)."""
    distances = getattr(run, "distances", None)
    if distances is None or not np.size(getattr(distances, "within_a", ())):
        return NO_DISTANCES
    shape_a, shape_b = tuple(distances.shape_a), tuple(distances.shape_b)
    if shape_a != shape_b:
        return f"untested: the two seeds have different layers x heads ({shape_a} and {shape_b})"
    n_layers, n_heads = shape_a
    if n_heads < 2:
        return "untested: one head per layer"
    cross, own_a, own_b = distances.per_row(), distances.within("a"), distances.within("b")  # (N, N) each
    tests = []
    for layer in range(n_layers):
        part = slice(layer * n_heads, (layer + 1) * n_heads)
        matrix = np.block([[own_a[part, part], cross[part, part]], [cross[part, part].T, own_b[part, part]]])
        if not np.isfinite(matrix).all():
            return f"untested: layer {layer + 1} has distances that are not finite numbers (no word rows?)"
        tests.append(within_cross_test(matrix, n_heads, seed=seed))
    return tests


def combine_pairs(tests: Sequence[PermutationTest]) -> tuple[float, float]:
    """``(mean D_cross - D_within, p)`` of one layer over the pairs of seeds by an intersection-union test: the
    largest of the pairs' p-values when every pair's difference has the sign of the mean, else 1."""
    stats = np.array([t.statistic for t in tests], dtype=np.float64)
    mean = float(stats.mean())
    same = bool(np.all(stats * mean > 0))
    return mean, (max(t.p_value for t in tests) if same else 1.0)


def _smallest_p(test: PermutationTest) -> float:
    """The smallest p-value the test can give (the observed grouping alone as extreme)."""
    return 1 / test.n_permutations if test.exact else 1 / (1 + test.n_permutations)


def layer_verdict(statistic: float, p: float, smallest_p: float, alpha: float = ALPHA) -> str:
    """One layer's verdict by :data:`DIVISION_RULE` from its ``D_cross - D_within``, its p-value and the smallest
    p-value its test can give."""
    if not (math.isfinite(statistic) and math.isfinite(p)) or smallest_p >= alpha:
        return "untested"
    if p >= alpha:
        return "no difference found"
    return "division of labour" if statistic < 0 else "seed-specific"


def division_verdict(layer_verdicts: Sequence[str]) -> str:
    """A cell's verdict: its layers' one verdict when they agree, else each layer's (1-based)."""
    if not layer_verdicts:
        return "untested"
    if len(set(layer_verdicts)) == 1:
        return layer_verdicts[0]
    return "layers differ: " + ", ".join(f"layer {k + 1} {v}" for k, v in enumerate(layer_verdicts))


def recurrence_test(matches: Sequence[tuple[float, Sequence[float] | str]]) -> tuple[float, int, str]:
    """``(p, draws, how)``: D_match against the shuffled-layers null over a cell's pairs, each ``(D_match, the
    null's draws)`` (or why a pair has none); the largest of the pairs' :func:`~probes.compare.fair_tests.matching_p`
    (an intersection-union test); p NaN, with the reason as ``how``, when a pair has no draws."""
    missing = next((d for _, d in matches if isinstance(d, str)), None)
    if missing is not None or not matches:
        return math.nan, 0, missing or "untested: no match unit"
    tested = [(m, d) for m, d in matches if not isinstance(d, str)]
    p = max(matching_p(m, d) for m, d in tested)
    n = min(len(d) for _, d in tested)
    return p, n, (f"D_match against the shuffled-layers null: the largest p over {len(matches)} pair(s) of seeds, "
                  f"{n} label permutations each, p = (1 + count) / (1 + draws)")


def _null_draws(summary: Mapping[str, Any], within_layers: bool) -> Sequence[float] | str:
    """The shuffled-layers null's draws of D_match, or why there are none."""
    if not within_layers:
        return "untested: an across-layer match has no label-permutation null (match within layers)"
    draws = summary.get("D_permuted_draws")
    if not isinstance(draws, (list, tuple)) or not draws:
        return NO_DRAWS
    return [float(d) for d in draws]


def _match_numbers(run: Any, seed: int) -> dict[str, Any]:
    """What one match unit gives (b): D_match, D_null, D_within of each model, D_self, identity share, profiles,
    the per-layer D_cross tests and the null's draws."""
    summary = dict(getattr(run, "summary", {}) or {})
    matching = run.matching
    if "D_null" in summary:
        null, null_iv, null_text = summary["D_null"], _interval(summary, "D_null_interval"), matching.null
    else:
        null, null_iv = summary.get("D_permuted", math.nan), _interval(summary, "D_permuted_interval")
        null_text = "model B's heads shuffled across layers and re-matched within layers (interval over permutations)"
    identity = float(summary.get("identity_share", matching.identity_share()))
    n_matched = int(matching.n_pairs)
    return {"match": float(summary.get("D_match", matching.mean_distance)),
            "match_iv": _interval(summary, "D_match_interval"), "null": float(null), "null_iv": null_iv,
            "null_text": str(null_text or ""), "identity": identity,
            "kept": int(round(identity * n_matched)) if math.isfinite(identity) else 0, "n_matched": n_matched,
            "within_a": float(np.nanmean(summary.get("D_within_a", [math.nan]))),
            "within_b": float(np.nanmean(summary.get("D_within_b", [math.nan]))),
            "self": float(summary.get("D_self", math.nan)), "self_note": str(summary.get("D_self_note", "")),
            "profile_match": float(summary.get("profile_D_match", math.nan)),
            "profile_self": float(summary.get("profile_D_self", math.nan)), "heads": int(matching.shape_a[1]),
            "layers": int(matching.shape_a[0]), "cross": layer_cross_tests(run, seed=seed),
            "draws": _null_draws(summary, bool(matching.within_layers))}


def _envelope(points: Sequence[float], intervals: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """``(mean of points, low, high)``: the widest of the intervals and the points' range (descriptive only)."""
    ends = [v for v in [*points, *(e for iv in intervals for e in iv)] if np.isfinite(v)]
    mean = seed_range(points)[0]
    return (mean, min(ends), max(ends)) if ends and all(np.isfinite(e) for iv in intervals for e in iv) \
        else (mean, math.nan, math.nan)


@dataclass(frozen=True)
class _CrossSummary:
    """A cell's D_cross tests: per layer the mean difference, its p and verdict; the mean D_cross; how."""

    differences: tuple[float, ...]
    p_values: tuple[float, ...]
    verdicts: tuple[str, ...]
    d_cross: float
    n_regroupings: int
    how: str


def _cross_summary(found: Sequence[dict[str, Any]], n_layers: int) -> _CrossSummary:
    """The per-layer D_cross tests of a cell's pairs, combined (:func:`combine_pairs`, :func:`layer_verdict`)."""
    reason = next((f["cross"] for f in found if isinstance(f["cross"], str)), None)
    if reason is not None:
        return _CrossSummary((math.nan,) * n_layers, (math.nan,) * n_layers, ("untested",) * n_layers, math.nan, 0,
                             reason)
    tests: list[list[PermutationTest]] = [f["cross"] for f in found]
    combined = [combine_pairs([pair[layer] for pair in tests]) for layer in range(n_layers)]
    smallest = max(_smallest_p(t) for pair in tests for t in pair)
    verdicts = tuple(layer_verdict(d, p, smallest) for d, p in combined)
    every = [t for pair in tests for t in pair]
    n = min(t.n_permutations for t in every)
    how = every[0].method + (f"; the smallest p it can give is {smallest:.3g}, not below 0.05"
                             if smallest >= ALPHA else "")
    return _CrossSummary(tuple(d for d, _ in combined), tuple(p for _, p in combined), verdicts,
                         float(np.mean([t.cross for t in every])), n, how)


def _why(cross: _CrossSummary, p_match: float, match_how: str, identity: tuple[int, int, float], heads: int,
         within_zero: bool) -> str:
    """The tests behind a cell's verdict, in words (layers 1-based)."""
    parts = [f"layer {k + 1}: D_cross - D_within {d:+.3g} (p {p:.3g})"
             for k, (d, p) in enumerate(zip(cross.differences, cross.p_values)) if math.isfinite(p)]
    parts = parts or [cross.how]
    if math.isfinite(p_match):
        shown = "below" if p_match < ALPHA else "not shown below"
        parts.append(f"D_match {shown} the shuffled-layers null in every pair (largest p {p_match:.3g})")
    else:
        parts.append(f"D_match: {match_how}")
    kept, pairs, p = identity
    if within_zero:
        parts.append("every head of a layer equals the others (D_within exactly 0), so every matching ties and its "
                     "identity share says nothing")
    elif pairs:
        keep = "keep" if p < ALPHA else "not shown to keep"
        parts.append(f"identity share {kept} of {pairs} against chance 1/{heads}: binomial p {p:.3g} (head numbers "
                     f"{keep} their job across seeds)")
    return "; ".join(parts)


def _division_row(cell: str, found: list[dict[str, Any]], within: dict[str, float]) -> Division:
    """One cell's row from its match units' numbers and its models' D_within."""
    heads, n_layers = found[0]["heads"], found[0]["layers"]
    w = seed_range(list(within.values()))
    match = _envelope([f["match"] for f in found], [f["match_iv"] for f in found])
    null = _envelope([f["null"] for f in found], [f["null_iv"] for f in found])
    m_seeds, n_seeds = seed_range([f["match"] for f in found]), seed_range([f["null"] for f in found])
    identity = seed_range([f["identity"] for f in found])
    cross = _cross_summary(found, n_layers)
    p_match, n_draws, match_how = recurrence_test([(f["match"], f["draws"]) for f in found])
    kept, pairs = sum(f["kept"] for f in found), sum(f["n_matched"] for f in found)
    p_identity = identity_test(kept, pairs, heads) if pairs else math.nan
    why = _why(cross, p_match, match_how, (kept, pairs, p_identity), heads, w[2] == 0.0)
    return Division(cell, heads, len(found), len(within), *w, seed_range([f["self"] for f in found])[0], *match,
                    m_seeds[1], m_seeds[2], *null, n_seeds[1], n_seeds[2], *identity, 1.0 / heads,
                    division_verdict(cross.verdicts), why, null=found[0]["null_text"],
                    d_self_note=found[0]["self_note"],
                    profile_d_match=seed_range([f["profile_match"] for f in found])[0],
                    profile_d_self=seed_range([f["profile_self"] for f in found])[0], rule=DIVISION_RULE,
                    d_cross=cross.d_cross, cross_minus_within=cross.differences, p_cross=cross.p_values,
                    layer_verdicts=cross.verdicts, n_regroupings=cross.n_regroupings, cross_test=cross.how,
                    p_match=p_match, n_null_draws=n_draws, match_test=match_how, identity_kept=kept,
                    identity_pairs=pairs, p_identity=p_identity)


def division_rows(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]],
                  why: dict[str, list[str]], *, seed: int = 0) -> list[Division]:
    """(b) One row per cell with at least 2 heads and match units between its final models (``seed``: the Monte
    Carlo regroupings of a test too large to enumerate)."""
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
        if int(unit.result.matching.shape_a[1]) < 2:
            continue
        numbers = _match_numbers(unit.result, seed)
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
