"""The training cells of an experiment's lab and small helpers of the lab tables (:mod:`probes.compare.lab`).

A cell is one ``[train.CELL]`` table: its options (heads, layers, initialisation, attention dropout) and one
``train`` unit per seed. Intervals over seeds are ranges (:func:`seed_range`,
:data:`~probes.compare.lab_types.SEED_INTERVAL`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.types import Unit
from probes.errors import ConfigError

__all__ = ["LabCell", "lab_cells", "lab_info", "pair_means", "seed_range"]


@dataclass
class LabCell:
    """One training cell: its options (``heads``, ``layers``, ``init``, ``attention_dropout``) and its train
    results by seed."""

    name: str
    info: dict[str, Any] = field(default_factory=dict)
    runs: dict[int, Any] = field(default_factory=dict)


def _number(value: Any, default: float = math.nan) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def lab_info(models: Mapping[str, Mapping[str, Any]], model: str) -> dict[str, Any] | None:
    """The ``lab`` entry of a model's info, or None for a model not trained in the lab."""
    info = models.get(model, {}).get("lab")
    return dict(info) if isinstance(info, Mapping) else None


def _cell_facts(unit: Unit, models: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """heads, layers, init, attention dropout of a train unit: its model's lab info, else its training config."""
    config = unit.options.config or {}
    lab = lab_info(models, unit.model) or {}
    return {"heads": int(lab.get("heads", config.get("heads", 0)) or 0),
            "layers": int(lab.get("layers", config.get("layers", 0)) or 0),
            "init": str(lab.get("init", config.get("init", "independent"))),
            "attention_dropout": _number(lab.get("attention_dropout", config.get("attention_dropout", 0.0)), 0.0)}


def lab_cells(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]]) -> dict[str, LabCell]:
    """Every cell with train units, in the order of the units: cell -> its facts and its runs by seed."""
    cells: dict[str, LabCell] = {}
    for unit in units:
        if unit.kind != "train":
            continue
        lab = lab_info(models, unit.model) or {}
        name = str(unit.options.cell if "cell" in unit.options else lab.get("cell", unit.data))
        seed = unit.options.seed if "seed" in unit.options else lab.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ConfigError(f"train unit {unit.analysis}/{unit.model}: expected a whole-number seed in its options "
                              f"or its model's lab info, found {seed!r}")
        cell = cells.setdefault(name, LabCell(name, _cell_facts(unit, models)))
        cell.runs[seed] = unit.result
    return cells


def seed_range(values: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, min, max)`` of the finite per-seed values (NaN, NaN, NaN without one)."""
    finite = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    if not finite.size:
        return math.nan, math.nan, math.nan
    return float(finite.mean()), float(finite.min()), float(finite.max())


def pair_means(distance: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``(C, L)`` the mean over pairs ``a < b`` of ``distance`` ``(C, L, H, H)`` (NaN for one head)."""
    n_heads = distance.shape[-1]
    if n_heads < 2:
        return np.full(distance.shape[:2], np.nan)
    first, second = np.triu_indices(n_heads, k=1)
    return distance[..., first, second].mean(axis=-1)
