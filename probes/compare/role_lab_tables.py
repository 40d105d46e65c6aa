"""(e) the literal ensemble against one model, (f) capacity and (g) formation: the role lab's tables over cells and
seeds, from the per-model measurements and the training curves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from statistics import median
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.role_lab_stats import TWO_SAMPLE, sign_test, two_sample_test
from probes.compare.role_lab_types import (
    INDUCTION,
    NOT_WITHIN,
    PREVIOUS,
    CapacityRow,
    EnsembleLayerRow,
    EnsembleRow,
    FormationRow,
    FormationTestRow,
    FunctionRow,
    LabCell,
    RoleCapacityRow,
    RoleSeedRow,
)
from probes.heads.inference import holm
from probes.importance.lab_types import LabModelAnalysis

__all__ = ["final_loss", "reference_cell", "ensemble_tables", "capacity_table", "role_capacity_table",
           "phase_change", "first_steps", "formation_tables", "ENSEMBLE_RULE", "CAPACITY_RULE", "ROLE_CAPACITY_RULE",
           "FORMATION_RULE"]

ENSEMBLE_RULE = ("each literal ensemble (N models trained apart, predictions averaged: the mean of the members' "
                 "probabilities) against the cell of one model with as many heads, layers and the same task, "
                 "independent initialisation and attention dropout (parameters of each stated); final held-out loss "
                 "at the last step, mean over seeds; " + TWO_SAMPLE + "; carriers and relative interaction per layer "
                 "from tables (b) and (c) (their p: table (c)'s Holm p)")
CAPACITY_RULE = ("per task, the cells of one model with independent initialisation and no attention dropout, by heads "
                 "count: final held-out loss at the last step (mean, and range min-max over seeds: not a confidence "
                 "interval), mean carriers per seed of each role over all layers; each heads count against the next "
                 "smaller one of its task by the " + TWO_SAMPLE + ", Holm over the table")
ROLE_CAPACITY_RULE = ("the roles task: per cell and task role, the loss on the positions the role predicts at the last "
                      "step (mean, range over seeds), the seeds where some head carries the role, the mean carriers "
                      "per seed and the layers they sit in; fewer / as many / more heads than roles per layer")
FORMATION_RULE = ("per seed: the phase change is the largest drop of held-out loss between consecutive checkpoints "
                  "(the training curve's checkpoints; an ensemble's: its measured steps), given by the step after "
                  "it; a role forms at the first measured step where its best score over every head of every layer "
                  "reaches the threshold (-1: not by the last step). Test per cell: the exact two-sided sign test of "
                  "previous-token first against induction first over the seeds where both form at different steps "
                  "(ties and never-formed seeds left out), Holm over the table. The steps are only as fine as the "
                  "checkpoints")


def final_loss(model: LabModelAnalysis) -> float:
    """The held-out loss at the model's last measured step (NaN without a language-model head)."""
    return float(model.dev_loss[-1]) if len(model.dev_loss) else float("nan")


def reference_cell(ensemble: LabCell, cells: Mapping[str, LabCell]) -> LabCell | None:
    """The one-model cell an ensemble is compared with: same task, layers, heads and attention dropout, one member,
    independent initialisation."""
    for cell in cells.values():
        if (cell.kind == "lab" and cell.members == 1 and cell.task == ensemble.task and cell.layers == ensemble.layers
                and cell.heads == ensemble.heads and cell.init == "independent"
                and cell.attention_dropout == ensemble.attention_dropout):
            return cell
    return None


def _carriers_mean(rows: Sequence[RoleSeedRow], cell: str, role: str, layer: int | None) -> float:
    """Mean over the cell's seeds of the carriers of ``role`` (in ``layer``, or summed over layers)."""
    per_seed: dict[int, int] = {}
    for row in rows:
        if row.cell == cell and row.role == role and (layer is None or row.layer == layer):
            per_seed[row.seed] = per_seed.get(row.seed, 0) + row.n_carriers
    return float(np.mean(list(per_seed.values()))) if per_seed else float("nan")


def _layer_rows(cell: str, models: Sequence[LabModelAnalysis], roles: Sequence[RoleSeedRow],
                function: Sequence[FunctionRow]) -> list[EnsembleLayerRow]:
    names = models[0].role_names
    out = []
    for layer in range(models[0].n_layers):
        tested = [f for f in function if f.cell == cell and f.layer == layer]
        out.append(EnsembleLayerRow(cell, layer, names,
                                    tuple(_carriers_mean(roles, cell, r, layer) for r in names),
                                    tested[0].relative if tested else float("nan"),
                                    tested[0].p_holm if tested else float("nan")))
    return out


def ensemble_tables(cells: Mapping[str, LabCell], by_cell: Mapping[str, list[LabModelAnalysis]],
                    roles: Sequence[RoleSeedRow], function: Sequence[FunctionRow], *, n_permutations: int, seed: int
                    ) -> tuple[list[EnsembleRow], list[EnsembleLayerRow]]:
    """Table (e): each ensemble cell against its reference cell (:func:`reference_cell`)."""
    rows: list[EnsembleRow] = []
    layers: list[EnsembleLayerRow] = []
    for cell in cells.values():
        reference = reference_cell(cell, cells) if cell.kind == "lab" and cell.members > 1 else None
        if reference is None or not by_cell.get(cell.name) or not by_cell.get(reference.name):
            continue
        mine, theirs = by_cell[cell.name], by_cell[reference.name]
        a, b = [final_loss(m) for m in mine], [final_loss(m) for m in theirs]
        test = two_sample_test(a, b, n_permutations=n_permutations, seed=seed)
        rows.append(EnsembleRow(cell.name, reference.name, cell.members, cell.heads, int(mine[0].params),
                                int(theirs[0].params), len(mine), len(theirs), float(np.nanmean(a)),
                                float(np.nanmean(b)), test.statistic, test.p, test.n, test.exact))
        layers += _layer_rows(cell.name, mine, roles, function) + _layer_rows(reference.name, theirs, roles, function)
    return rows, layers


def _capacity_cells(cells: Mapping[str, LabCell], by_cell: Mapping[str, list[LabModelAnalysis]]) -> list[LabCell]:
    chosen = [c for c in cells.values() if c.kind == "lab" and c.members == 1 and c.init == "independent"
              and c.attention_dropout == 0 and by_cell.get(c.name)]
    return sorted(chosen, key=lambda c: (c.task, c.layers, c.heads))


def capacity_table(cells: Mapping[str, LabCell], by_cell: Mapping[str, list[LabModelAnalysis]],
                   roles: Sequence[RoleSeedRow], *, n_permutations: int, seed: int) -> list[CapacityRow]:
    """Table (f): one row per heads count of a task, each tested against the next smaller, Holm over the table."""
    rows: list[CapacityRow] = []
    previous: LabCell | None = None
    for cell in _capacity_cells(cells, by_cell):
        models = by_cell[cell.name]
        loss = np.array([final_loss(m) for m in models])
        names = models[0].role_names
        smaller = previous if previous is not None and (previous.task, previous.layers) == (cell.task, cell.layers) \
            else None
        test = (two_sample_test(loss, [final_loss(m) for m in by_cell[smaller.name]], n_permutations=n_permutations,
                                seed=seed) if smaller is not None else None)
        finite = loss[np.isfinite(loss)]
        rows.append(CapacityRow(
            cell.name, cell.task, cell.heads, len(models), float(finite.mean()) if finite.size else float("nan"),
            float(finite.min()) if finite.size else float("nan"), float(finite.max()) if finite.size else float("nan"),
            names, tuple(_carriers_mean(roles, cell.name, r, None) for r in names),
            smaller.name if smaller is not None else "", test.statistic if test else float("nan"),
            test.p if test else float("nan"), test.n if test else 0, test.exact if test else False, float("nan")))
        previous = cell
    adjusted = holm([r.p for r in rows])
    return [replace(r, p_holm=float(q)) for r, q in zip(rows, adjusted)]


def _relation(heads: int, roles: int) -> str:
    return "fewer" if heads < roles else "as many" if heads == roles else "more"


def role_capacity_table(cells: Mapping[str, LabCell], by_cell: Mapping[str, list[LabModelAnalysis]],
                        roles: Sequence[RoleSeedRow]) -> list[RoleCapacityRow]:
    """Table (f), the roles task: one row per cell and task role."""
    out = []
    for cell in cells.values():
        models = by_cell.get(cell.name) or []
        if cell.kind != "lab" or cell.task != "roles" or cell.members != 1 or not models:
            continue
        for role in cell.task_roles:
            if role not in models[0].role_names:
                continue
            index = models[0].role_names.index(role)
            loss = np.array([m.role_loss[index] for m in models], dtype=np.float64)
            mine = [r for r in roles if r.cell == cell.name and r.role == role]
            seeds = {r.seed for r in mine if r.n_carriers}
            finite = loss[np.isfinite(loss)]
            out.append(RoleCapacityRow(
                cell.name, cell.heads, len(cell.task_roles), _relation(cell.heads, len(cell.task_roles)), role,
                len(models), float(finite.mean()) if finite.size else float("nan"),
                float(finite.min()) if finite.size else float("nan"),
                float(finite.max()) if finite.size else float("nan"), len(seeds),
                _carriers_mean(roles, cell.name, role, None), tuple(sorted({r.layer for r in mine if r.n_carriers}))))
    return out


def phase_change(steps: npt.ArrayLike, loss: npt.ArrayLike) -> tuple[int, int, float, float]:
    """``(step before, step after, loss before, loss after)`` of the largest drop of ``loss`` between consecutive
    ``steps`` (:data:`NOT_WITHIN` and NaN with fewer than 2 finite points)."""
    s = np.asarray(steps, dtype=np.int64)
    x = np.asarray(loss, dtype=np.float64)
    keep = np.isfinite(x)
    s, x = s[keep], x[keep]
    if len(x) < 2:
        return NOT_WITHIN, NOT_WITHIN, float("nan"), float("nan")
    i = int(np.argmax(x[:-1] - x[1:]))
    return int(s[i]), int(s[i + 1]), float(x[i]), float(x[i + 1])


def first_steps(model: LabModelAnalysis, threshold: float) -> tuple[int, ...]:
    """Per role of the model, the first measured step at which its best score over all heads reaches ``threshold``
    (:data:`NOT_WITHIN` if never)."""
    best = np.nan_to_num(model.role_scores, nan=-np.inf).max(axis=(2, 3))  # (C, R)
    out = []
    for r in range(len(model.role_names)):
        hit = np.flatnonzero(best[:, r] >= threshold)
        out.append(int(model.steps[hit[0]]) if hit.size else NOT_WITHIN)
    return tuple(out)


def _order(previous: int, induction: int) -> str:
    if previous == NOT_WITHIN or induction == NOT_WITHIN:
        return "not both formed"
    return "same checkpoint" if previous == induction else \
        "previous-token first" if previous < induction else "induction first"


def _curve(model: LabModelAnalysis, runs: Mapping[tuple[str, int], list[Any]]) -> tuple[Any, Any]:
    """The training curve of the model's run when it is one run (not an ensemble's members), else its own."""
    mine = runs.get((model.cell, model.seed), [])
    if model.members == 1 and len(mine) == 1 and getattr(mine[0], "curves", None) is not None:
        return mine[0].curves.steps, mine[0].curves.dev_loss
    return model.steps, model.dev_loss


def formation_tables(by_cell: Mapping[str, list[LabModelAnalysis]], runs: Mapping[tuple[str, int], list[Any]],
                     threshold: float) -> tuple[list[FormationRow], list[FormationTestRow]]:
    """Table (g): one row per model, and one sign test per cell, Holm over the table."""
    rows: list[FormationRow] = []
    tests: list[FormationTestRow] = []
    for cell, models in by_cell.items():
        mine = []
        for model in sorted(models, key=lambda m: m.seed):
            before, step, loss_before, loss_after = phase_change(*_curve(model, runs))
            found = first_steps(model, threshold)
            named = dict(zip(model.role_names, found))
            order = _order(named.get(PREVIOUS, NOT_WITHIN), named.get(INDUCTION, NOT_WITHIN))
            mine.append(FormationRow(cell, model.seed, step, before, loss_before, loss_after, model.role_names,
                                     found, order))
        rows += mine
        orders = [r.order for r in mine]
        first, later = orders.count("previous-token first"), orders.count("induction first")
        steps = [r.step for r in mine if r.step != NOT_WITHIN]
        tests.append(FormationTestRow(cell, len(mine), first, later, orders.count("same checkpoint"),
                                      orders.count("not both formed"), sign_test(first, first + later), float("nan"),
                                      float(median(steps)) if steps else float("nan")))
    adjusted = holm([t.p for t in tests])
    return rows, [replace(t, p_holm=float(q)) for t, q in zip(tests, adjusted)]
