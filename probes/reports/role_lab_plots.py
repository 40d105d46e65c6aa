"""Which data each figure of the role-lab report draws (:mod:`probes.reports.role_lab_figures` draws them).

One figure per answer: head distances at every step at the two noise sizes; the ablation matrix of the first seed
of the main cell (independent heads on the induction task); final loss against the head count; the loss curves of
the main cell with each seed's phase change and that seed's role scores over training; the pretrained models' best
role score per layer. A figure whose data were not run is left out (its answer says what was not run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from probes.reports import role_lab_figures as rlf

__all__ = ["figure_jobs", "MAIN_CELL"]

#: The cell the answers' figures show first: independent heads on the induction task.
MAIN_CELL = "independent"
_ROLES = ("std:previous_token", "induction")

Job = Callable[[Path], "Path | None"]


def _main(comparison: Any) -> str | None:
    names = [c.name for c in comparison.cells if c.kind == "lab" and c.task == "induction" and c.members == 1]
    return MAIN_CELL if MAIN_CELL in names else (names[0] if names else None)


def figure_jobs(comparison: Any, runs: Sequence[Any], analyses: Sequence[Any]) -> dict[str, Job]:
    """``stem -> draw(path)`` for every answer figure the run has data for."""
    jobs: dict[str, Job] = {}
    main = _main(comparison)
    noise = {c.name: c for c in comparison.cells if c.noise is not None and c.task == "induction"}
    stepped = {name: {r.seed: r.step_symmetry for r in runs if r.cell == name and r.step_symmetry is not None}
               for name in noise}
    stepped = {name: seeds for name, seeds in stepped.items() if seeds}
    if stepped:
        jobs["a1_symmetry"] = lambda p: rlf.step_distances(
            stepped, p, title="Head distances at every step: identical heads plus noise of two sizes")
    mine = sorted((a for a in analyses if a.cell == main), key=lambda a: a.seed)
    if mine and mine[0].function is not None:
        first = mine[0]
        jobs["a2_ablations"] = lambda p: rlf.ablation_matrix(
            first.function, p, title=f"{first.name}: single-head loss increase and pair interaction (nats)")
    losses: dict[int, list[float]] = {}
    unigram = None
    for cell in comparison.cells:
        if cell.kind == "lab" and cell.task == "induction" and cell.members == 1 and cell.init == "independent":
            for run in runs:
                if run.cell == cell.name and len(run.curves.steps):
                    losses.setdefault(cell.heads, []).append(float(run.curves.dev_loss[-1]))
                    unigram = float(run.curves.unigram_dev_loss)
    if len(losses) > 1:
        jobs["a3_capacity"] = lambda p: rlf.capacity(losses, p, unigram=unigram,
                                                     title="Induction task: final held-out loss per head count")
    curves = {r.seed: r.curves for r in runs if r.cell == main}
    if curves:
        phase = {row.seed: row.step for row in comparison.formation if row.cell == main and row.seed in curves}
        jobs["a4_formation"] = lambda p: rlf.loss_curves(
            curves, p, title=f"{main}: held-out loss on the induction task, phase change marked", phase_steps=phase)
    if mine and len(mine[0].steps) > 1:
        roles = [r for r in _ROLES if r in mine[0].role_names]
        jobs["a4_roles"] = lambda p: rlf.role_scores_over_steps(
            mine[0], roles, p, title=f"{mine[0].name}: role scores of every head over training")
    pretrained = {a.cell: a for a in analyses if a.steps.size == 1 and a.cell not in {c.name for c in comparison.cells
                                                                                     if c.kind == "lab"}}
    if pretrained:
        roles = [r for r in _ROLES if all(r in a.role_names for a in pretrained.values())]
        jobs["a5_pretrained"] = lambda p: rlf.pretrained_roles(pretrained, roles, p)
    return jobs
