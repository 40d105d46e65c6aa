"""What a role-lab report reads back from its run folder: the saved units, each cell's description, the families.

Only ``run.json`` and the units it names are read (no model, no data), so ``probes report`` re-makes the report of a
finished run in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.errors import InputError
from probes.importance.lab_types import LabModelAnalysis
from probes.run_record import RunRecord
from probes.runs.experiment_cache import UnitStore
from probes.runs.experiment_train import LabRun
from probes.runs.role_lab_jobs import LAB, PRETRAINED, TRAIN

__all__ = ["load_units", "lab_cells", "families_of"]


def load_units(run_dir: Path, record: RunRecord) -> tuple[list[LabRun], list[LabModelAnalysis]]:
    """``(training runs, measurements)`` of every unit ``run.json`` names, each checked to be of its kind."""
    store = UnitStore(run_dir)
    runs: list[LabRun] = []
    analyses: list[LabModelAnalysis] = []
    for unit in record.details.run.units or ():
        result = store.load(unit.path)
        want = LabRun if unit.analysis == TRAIN else LabModelAnalysis
        if unit.analysis not in (TRAIN, LAB, PRETRAINED) or not isinstance(result, want):
            raise InputError(f"units: {unit.path}: expected a saved {want.__name__} for analysis "
                             f"{unit.analysis!r}, found {type(result).__name__}", path=run_dir / "run.json")
        (runs if unit.analysis == TRAIN else analyses).append(result)  # type: ignore[arg-type]  # checked above
    return runs, analyses


def _init_noise(init: str) -> float | None:
    """The noise size of an ``identical+noise:S`` scheme (None for the others)."""
    return float(init.split(":", 1)[1]) if init.startswith("identical+noise:") else None


def lab_cells(record: RunRecord, analyses: Sequence[LabModelAnalysis]) -> dict[str, Any]:
    """Each cell's :class:`~probes.compare.role_lab_types.LabCell`, from the record's training configs and the
    measurements (pretrained models are cells of their own)."""
    from probes.compare.role_lab_types import LabCell
    from probes.training.config import TrainConfig

    settings = record.details.run.role_lab or {}
    cells: dict[str, Any] = {}
    configs: dict[str, TrainConfig] = {}
    for unit in record.details.run.units or ():
        if unit.analysis == TRAIN and unit.options is not None and unit.options.config is not None \
                and str(unit.options.cell) not in configs:  # one config per cell (its seeds differ only by seed)
            configs[str(unit.options.cell)] = TrainConfig.from_dict(dict(unit.options.config))
    by_cell: dict[str, list[LabModelAnalysis]] = {}
    for a in analyses:
        by_cell.setdefault(a.cell, []).append(a)
    for name, options in (settings.get("cells") or {}).items():
        config = configs.get(name)
        if config is None:
            continue
        members = int(options.get("ensemble", 1))
        mine = by_cell.get(name, [])
        roles = tuple(r for r in mine[0].role_names if not r.startswith("std:")) if mine else ()
        cells[name] = LabCell(name=name, task=config.task, layers=config.layers, heads=config.heads * members,
                              members=members, init=config.init.text, noise=_init_noise(config.init.text),
                              attention_dropout=config.attention_dropout, seeds=tuple(options.get("seeds", ())),
                              task_roles=roles, kind="lab")
    for name, mine in by_cell.items():
        if name not in cells and mine[0].steps.size == 1:  # a pretrained model (or a named family's members)
            first = mine[0]
            cells[name] = LabCell(name=name, task=first.task, layers=first.n_layers, heads=first.n_heads, members=1,
                                  init="pretrained", noise=None, attention_dropout=0.0,
                                  seeds=tuple(sorted({a.seed for a in mine})),
                                  task_roles=tuple(r for r in first.role_names if not r.startswith("std:")),
                                  kind="pretrained")
    return cells


def families_of(settings: Mapping[str, Any], analyses: Sequence[LabModelAnalysis], *, n_draws: int, seed: int
                ) -> tuple[Any, ...]:
    """Each ``[families.*]`` table's :class:`~probes.compare.families.FamilyRoles` (a lab cell's seeds, or the
    members of a named family)."""
    from probes.compare.families import family_roles

    out = []
    for name, family in (settings.get("families") or {}).items():
        cell = family.get("cell") or name
        members = sorted((a for a in analyses if a.cell == cell), key=lambda a: a.seed)
        if len(members) >= 2:
            out.append(family_roles(members, str(family.get("role")), n_draws=n_draws, seed=seed))
    return tuple(out)
