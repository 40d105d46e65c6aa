"""The role lab's comparison (issue 39, points 4, 5, 7 and 8): from the per-model measurements to the tables, their
tests and five short answers: :func:`role_lab` -> :class:`~probes.compare.role_lab_types.RoleLabComparison`, and
:func:`~probes.compare.role_lab_answers.answers`.

Inputs: one :class:`~probes.importance.lab_types.LabModelAnalysis` per trained model (``CELL-sS``), per literal
ensemble and per pretrained model; one ``LabRun``-like training unit per trained run (``cell``, ``seed``, ``curves``,
``symmetry``, ``step_symmetry``; read by attribute, so any object with them will do); and the cells
(:class:`~probes.compare.role_lab_types.LabCell`). Every verdict comes from a stated test with its p-value, never from
intervals overlapping; every table says how many tests it holds (``table_notes``).

The tables, each from its own module: (a) :mod:`~probes.compare.role_lab_symmetry`, (b) and (h)'s roles
:mod:`~probes.compare.role_lab_roles`, (c) and (h)'s function :mod:`~probes.compare.role_lab_function`, (d)
:mod:`~probes.compare.role_lab_distances`, (e), (f) and (g) :mod:`~probes.compare.role_lab_tables`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from probes.compare import (
    role_lab_distances,
    role_lab_function,
    role_lab_roles,
    role_lab_symmetry,
    role_lab_tables,
)
from probes.compare.role_lab_answers import answers
from probes.compare.role_lab_types import CARRIER_THRESHOLD, EFFECT_REASON, TABLES, LabCell, RoleLabComparison
from probes.errors import ConfigError
from probes.importance.lab_types import LabModelAnalysis

__all__ = ["role_lab", "answers", "RULES"]

#: How each table is made.
RULES: dict[str, str] = {
    "symmetry": role_lab_symmetry.SYMMETRY_RULE,
    "growth_seeds": role_lab_symmetry.GROWTH_TABLE_RULE,
    "growth": role_lab_symmetry.GROWTH_TABLE_RULE,
    "growth_tests": role_lab_symmetry.GROWTH_TABLE_RULE,
    "roles": role_lab_roles.RULE,
    "identity": role_lab_roles.IDENTITY_RULE,
    "function": role_lab_function.RULE,
    "distances": role_lab_distances.RULE,
    "distance_summary": role_lab_distances.RULE,
    "ensemble": role_lab_tables.ENSEMBLE_RULE,
    "ensemble_layers": role_lab_tables.ENSEMBLE_RULE,
    "capacity": role_lab_tables.CAPACITY_RULE,
    "role_capacity": role_lab_tables.ROLE_CAPACITY_RULE,
    "formation": role_lab_tables.FORMATION_RULE,
    "formation_tests": role_lab_tables.FORMATION_RULE,
    "pretrained_roles": role_lab_roles.RULE,
    "pretrained_effects": "the top 5 heads by std:induction score on the induction probe, and their single-ablation "
                          "effect (nats per scored token) on the same sequences",
    "pretrained_function": role_lab_function.PRETRAINED_RULE,
}

_SAME = "selected on the same held-out sequences they are measured on"
#: Per table: where heads were selected, and how intervals were made.
_SELECTION: dict[str, tuple[str, str]] = {
    "symmetry": ("every head of every layer, no selection", "none (largest values over seeds and steps)"),
    "growth_seeds": ("every pair of heads of each layer (their mean distance)", "none (one fit per seed)"),
    "growth": ("every pair of heads of each layer", "range min-max over seeds, not a confidence interval"),
    "growth_tests": ("every pair of heads of each layer", "none; tests over seeds"),
    "roles": (f"carriers: heads with score >= {CARRIER_THRESHOLD} at the last step, {_SAME}", "none (per seed)"),
    "identity": ("the unique top carrier of each seed", "none; tests over seeds"),
    "function": ("every head and every within-layer pair, no selection", "none; per-seed values listed"),
    "distances": ("every head of the layer, no selection", "none; one permutation test per pair of seeds"),
    "distance_summary": ("every head of the layer", "none; share of pairs and median p (pairs share seeds)"),
    "ensemble": ("whole models", "none; test over seeds"),
    "ensemble_layers": (f"carriers as in (b), {_SAME}", "none (means over seeds)"),
    "capacity": ("whole models; carriers as in (b)", "range min-max over seeds, not a confidence interval"),
    "role_capacity": ("carriers as in (b)", "range min-max over seeds, not a confidence interval"),
    "formation": ("the best head of any layer at each step", "none (per seed)"),
    "formation_tests": ("the best head of any layer at each step", "none; test over seeds"),
    "pretrained_roles": (f"carriers: heads with score >= {CARRIER_THRESHOLD}, {_SAME}", "none (one model)"),
    "pretrained_effects": (f"top 5 by induction score, {_SAME}", "none (one model)"),
    "pretrained_function": (f"heads with effect ({EFFECT_REASON}), {_SAME}", "none; test over layers"),
}
#: Per table: the field holding each row's p-value, and how the table's tests are corrected.
_TESTS: dict[str, tuple[str, str]] = {
    "growth_tests": ("p", "Holm over the table"), "identity": ("p_exact", "Holm per cell"),
    "function": ("p", "Holm over the table"), "distances": ("p", "not corrected: read over pairs in the summary"),
    "ensemble": ("p", "one test per ensemble, not corrected"), "capacity": ("p", "Holm over the table"),
    "formation_tests": ("p", "Holm over the table"),
    "pretrained_function": ("p", "one test per model, not corrected"),
}


def _notes(comparison: RoleLabComparison) -> dict[str, str]:
    """Per table: where heads were selected, how intervals were made, and how many tests it holds."""
    notes = {}
    for table in TABLES:
        selection, interval = _SELECTION[table]
        field, correction = _TESTS.get(table, ("", ""))
        rows = getattr(comparison, table)
        count = sum(1 for r in rows if np.isfinite(getattr(r, field))) if field else 0
        tests = f"{count} test{'' if count == 1 else 's'} ({correction})" if field else "no tests (measurements only)"
        notes[table] = f"Heads: {selection}. Intervals: {interval}. Tests: {tests}."
    return notes


def _check(analyses: Sequence[LabModelAnalysis], cells: Mapping[str, LabCell], n_permutations: int) -> None:
    if isinstance(n_permutations, bool) or not isinstance(n_permutations, int) or n_permutations < 1:
        raise ConfigError(f"n_permutations: expected a whole number >= 1, found {n_permutations!r}")
    unknown = sorted({a.cell for a in analyses} - set(cells))
    if unknown:
        raise ConfigError(f"cells: expected a LabCell for every analysed cell, found none for {', '.join(unknown)}")


def _group(analyses: Sequence[LabModelAnalysis], cells: Mapping[str, LabCell], kind: str
           ) -> dict[str, list[LabModelAnalysis]]:
    """The analyses of ``kind`` cells by cell, in the order of ``cells``, each list by seed."""
    out: dict[str, list[LabModelAnalysis]] = {}
    for name, cell in cells.items():
        mine = sorted((a for a in analyses if a.cell == name), key=lambda a: a.seed)
        if cell.kind == kind and mine:
            out[name] = mine
    return out


def role_lab(analyses: Sequence[LabModelAnalysis], runs: Sequence[Any], cells: Mapping[str, LabCell], *,
             n_permutations: int = 10_000, seed: int = 0) -> RoleLabComparison:
    """Every table of the role lab's comparison (:data:`~probes.compare.role_lab_types.TABLES`), with its rule and
    notes. ``n_permutations`` random draws (``seed``) where a test's null is too large to enumerate.

    Raises:
        ConfigError: an analysed cell without a :class:`LabCell`, or ``n_permutations`` not a whole number >= 1.
    """
    _check(analyses, cells, n_permutations)
    tests = {"n_permutations": n_permutations, "seed": seed}
    lab = _group(analyses, cells, "lab")
    models = [m for mine in lab.values() for m in mine]
    runs_by: dict[tuple[str, int], list[Any]] = {}
    for run in runs:
        runs_by.setdefault((str(run.cell), int(run.seed)), []).append(run)
    roles = role_lab_roles.role_rows(models, CARRIER_THRESHOLD)
    function = role_lab_function.function_table(lab, **tests)
    growth_seeds, growth, growth_tests = role_lab_symmetry.growth_tables(cells, runs)
    distances, summary = role_lab_distances.distance_tables(lab, **tests)
    ensemble, ensemble_layers = role_lab_tables.ensemble_tables(cells, lab, roles, function, **tests)
    formation, formation_tests = role_lab_tables.formation_tables(lab, runs_by, CARRIER_THRESHOLD)
    pretrained = [m for mine in _group(analyses, cells, "pretrained").values() for m in mine]
    pretrained_function = [row for m in pretrained
                           if (row := role_lab_function.pretrained_function(m, **tests)) is not None]
    comparison = RoleLabComparison(
        cells=tuple(cells.values()), symmetry=tuple(role_lab_symmetry.symmetry_table(cells, runs)),
        growth_seeds=tuple(growth_seeds), growth=tuple(growth), growth_tests=tuple(growth_tests), roles=tuple(roles),
        identity=tuple(role_lab_roles.identity_table(roles)), function=tuple(function), distances=tuple(distances),
        distance_summary=tuple(summary), ensemble=tuple(ensemble), ensemble_layers=tuple(ensemble_layers),
        capacity=tuple(role_lab_tables.capacity_table(cells, lab, roles, **tests)),
        role_capacity=tuple(role_lab_tables.role_capacity_table(cells, lab, roles)), formation=tuple(formation),
        formation_tests=tuple(formation_tests),
        pretrained_roles=tuple(r for m in pretrained for r in role_lab_roles.pretrained_roles(m, CARRIER_THRESHOLD)),
        pretrained_effects=tuple(r for m in pretrained for r in role_lab_function.pretrained_effects(m)),
        pretrained_function=tuple(pretrained_function), rules=dict(RULES), n_permutations=n_permutations, seed=seed,
        threshold=CARRIER_THRESHOLD)
    from dataclasses import replace

    comparison = replace(comparison, table_notes=_notes(comparison))
    return replace(comparison, answers=answers(comparison))
