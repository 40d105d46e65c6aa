"""(a) Does initialisation make heads differ, and what decides: whether identical heads stay exactly identical, and
how fast heads started as copies plus noise come apart (issue 39, point 6).

From the training units (``LabRun``-like objects: ``cell``, ``seed``, ``symmetry`` at the checkpoints and
``step_symmetry`` at every step ``0..K``, each a :class:`~probes.training.symmetry.HeadSymmetry` or None):

* :func:`symmetry_table`: per cell, the largest parameter and attention distance between two heads of a layer over
  every seed, checkpoint and early step; identical heads stay identical when both are exactly 0.
* :func:`growth_tables`: per noise cell, layer and distance, the peak growth rate of the log excess distance at
  every step (:func:`probes.compare.growth.peak_growth`), per seed and over seeds, and whether it depends on the
  noise size (:func:`probes.compare.growth.rate_difference_test` between two noise sizes' seeds, Holm over the
  table), with the onset steps (:func:`probes.compare.growth.onset_step`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import combinations
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.growth import GROWTH_RULE, onset_step, peak_growth, rate_difference_test
from probes.compare.role_lab_types import (
    NOT_WITHIN,
    GrowthCellRow,
    GrowthSeedRow,
    GrowthTestRow,
    LabCell,
    SymmetryRow,
)
from probes.heads.inference import holm

__all__ = ["symmetry_table", "growth_seed_rows", "growth_cell_rows", "growth_test_rows", "growth_tables",
           "layer_curve", "GROWTH_WINDOW", "ONSET", "SYMMETRY_RULE", "GROWTH_TABLE_RULE"]

#: Measurements per window of the peak growth rate.
GROWTH_WINDOW = 10
#: The linear regime: windows whose distance stays within this share of the run's largest (before saturation).
LINEAR_REGIME = 0.1
#: Why :data:`GROWTH_WINDOW` is 10.
WINDOW_REASON = ("ten steps is about one doubling at the fastest rates seen (doubling every 7-12 steps), so a window "
                 "stays inside the linear regime, and ten points give an R² that says whether it is straight")
#: The excess distance (over step 0) at which heads have come apart (the onset), per distance.
ONSET: dict[str, float] = {"param": 0.1, "attention": 0.01}
#: Why :data:`ONSET` holds these values.
ONSET_REASON = ("param 0.1: 7% of the 1.41 of two independent random heads, and 10 times the start of noise 1e-2; "
                "attention 0.01 nats: 1.4% of the Jensen-Shannon maximum ln 2")
_FIELDS = {"param": "param_distance", "attention": "attention_distance"}
SYMMETRY_RULE = ("per cell: the largest parameter distance (relative L2 of the heads' query, key, value and output "
                 "blocks) and attention distance (Jensen-Shannon of smoothed rows) between two heads of any layer, "
                 "over every seed, every checkpoint and every early step measured in memory (n_steps: steps 0..K; 0 "
                 "when not measured); stays_identical when both are exactly 0 (a measurement, no test: a single "
                 "non-zero distance shows the symmetry broke)")
GROWTH_TABLE_RULE = (GROWTH_RULE + f"; the linear regime only: every distance of the window at most "
                     f"{LINEAR_REGIME} of the run's largest (ceiling); window = {GROWTH_WINDOW} steps ({WINDOW_REASON}); distance = the layer's mean "
                     "over its pairs of heads at every step 0..K; onset = the first step whose excess reaches "
                     f"{ONSET['param']} (param) or {ONSET['attention']} (attention) ({ONSET_REASON}), -1 if none. Per "
                     "cell: mean rate and range (min-max over seeds, not a confidence interval), doubling = ln 2 / "
                     "mean rate, the smallest R². Test: rate_difference_test, two-sample exact permutation test of "
                     "the two noise sizes' seeds, per layer and distance; Holm over the table")


def _max(values: npt.NDArray[np.float64]) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else float("nan")


def _by_cell(runs: Sequence[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for run in runs:
        out.setdefault(str(run.cell), []).append(run)
    return out


def symmetry_table(cells: Mapping[str, LabCell], runs: Sequence[Any]) -> list[SymmetryRow]:
    """Table (a): one row per lab cell with head distances measured (checkpoints, or every step)."""
    rows = []
    for cell_name, mine in _by_cell(runs).items():
        cell = cells.get(cell_name)
        measured = [s for run in mine for s in (getattr(run, "symmetry", None), getattr(run, "step_symmetry", None))
                    if s is not None]
        if cell is None or not measured:
            continue
        param = max((_max(np.asarray(s.param_distance)) for s in measured), default=float("nan"))
        attention = max((_max(np.asarray(s.attention_distance)) for s in measured), default=float("nan"))
        checkpoints = max((len(r.symmetry.steps) for r in mine if getattr(r, "symmetry", None) is not None),
                          default=0)
        steps = max((len(r.step_symmetry.steps) for r in mine if getattr(r, "step_symmetry", None) is not None),
                    default=0)
        rows.append(SymmetryRow(cell.name, cell.task, cell.init, cell.attention_dropout, cell.heads,
                                len({r.seed for r in mine}), checkpoints, steps, param, attention,
                                param == 0 and attention == 0, cell.init.startswith("identical")))
    return sorted(rows, key=lambda r: (r.task, r.cell))


def layer_curve(symmetry: Any, distance: str, layer: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """``(steps, mean distance over the layer's pairs of heads)`` of a HeadSymmetry (``param`` or ``attention``)."""
    values = np.asarray(getattr(symmetry, _FIELDS[distance]), dtype=np.float64)[:, layer]  # (C, H, H)
    upper = np.triu(np.ones(values.shape[1:], dtype=bool), k=1)
    return np.asarray(symmetry.steps, dtype=np.int64), values[:, upper].mean(axis=-1)


def growth_seed_rows(cells: Mapping[str, LabCell], runs: Sequence[Any]) -> list[GrowthSeedRow]:
    """Table (a), per seed: the peak growth of every noise cell's layers, on both distances."""
    rows = []
    for run in sorted(runs, key=lambda r: (str(r.cell), int(r.seed))):
        cell = cells.get(str(run.cell))
        steps_symmetry = getattr(run, "step_symmetry", None)
        if cell is None or cell.noise is None or steps_symmetry is None or cell.heads < 2:
            continue
        n_layers = np.asarray(steps_symmetry.param_distance).shape[1]
        for distance in _FIELDS:
            for layer in range(n_layers):
                steps, curve = layer_curve(steps_symmetry, distance, layer)
                if len(steps) < 2 or steps[0] != 0:
                    continue  # a resumed run that did not measure from step 0: no excess over the start
                fit = peak_growth(steps, curve, window=min(GROWTH_WINDOW, len(steps)), ceiling=LINEAR_REGIME)
                onset = onset_step(steps, curve, ONSET[distance])
                rows.append(GrowthSeedRow(cell.name, float(cell.noise), layer, distance, int(run.seed), fit.rate,
                                          fit.doubling, fit.first, fit.last, fit.r2,
                                          NOT_WITHIN if onset is None else onset))
    return rows


def _groups(rows: Sequence[GrowthSeedRow]) -> dict[tuple[str, int, str], list[GrowthSeedRow]]:
    out: dict[tuple[str, int, str], list[GrowthSeedRow]] = {}
    for row in rows:
        out.setdefault((row.cell, row.layer, row.distance), []).append(row)
    return out


def _finite(values: Sequence[float]) -> npt.NDArray[np.float64]:
    x = np.asarray(values, dtype=np.float64)
    return x[np.isfinite(x)]


def _onsets(rows: Sequence[GrowthSeedRow]) -> float:
    found = [r.onset for r in rows if r.onset != NOT_WITHIN]
    return float(np.mean(found)) if found else float("nan")


def growth_cell_rows(rows: Sequence[GrowthSeedRow]) -> list[GrowthCellRow]:
    """Table (a), per cell, layer and distance over its seeds."""
    out = []
    for (cell, layer, distance), mine in _groups(rows).items():
        rates, r2 = _finite([r.rate for r in mine]), _finite([r.r2 for r in mine])
        mean = float(rates.mean()) if rates.size else float("nan")
        out.append(GrowthCellRow(cell, mine[0].noise, layer, distance, len(mine), mean,
                                 float(rates.min()) if rates.size else float("nan"),
                                 float(rates.max()) if rates.size else float("nan"),
                                 math.log(2) / mean if mean > 0 else float("nan"),
                                 float(r2.min()) if r2.size else float("nan"), _onsets(mine)))
    return out


def _noise_pairs(cells: Mapping[str, LabCell], names: set[str]) -> list[tuple[LabCell, LabCell]]:
    """Pairs of noise cells alike but for the noise size (larger noise first)."""
    noisy = [c for c in cells.values() if c.name in names and c.noise is not None]
    pairs = []
    for a, b in combinations(noisy, 2):
        alike = (a.task, a.layers, a.heads, a.attention_dropout) == (b.task, b.layers, b.heads, b.attention_dropout)
        if alike and a.noise != b.noise:
            pairs.append((a, b) if (a.noise or 0) > (b.noise or 0) else (b, a))
    return pairs


def growth_test_rows(cells: Mapping[str, LabCell], rows: Sequence[GrowthSeedRow]) -> list[GrowthTestRow]:
    """Table (a): the rate of each pair of noise sizes compared per layer and distance, Holm over the table."""
    groups = _groups(rows)
    out = []
    for a, b in _noise_pairs(cells, {r.cell for r in rows}):
        for (cell, layer, distance), mine in groups.items():
            theirs = groups.get((b.name, layer, distance))
            if cell != a.name or not theirs:
                continue
            ra, rb = _finite([r.rate for r in mine]), _finite([r.rate for r in theirs])
            test = rate_difference_test(ra, rb) if ra.size and rb.size else None
            out.append(GrowthTestRow(a.name, b.name, float(a.noise or 0), float(b.noise or 0), layer, distance,
                                     int(ra.size), int(rb.size), float(ra.mean()) if ra.size else float("nan"),
                                     float(rb.mean()) if rb.size else float("nan"),
                                     test.difference if test else float("nan"), test.p_value if test else float("nan"),
                                     float("nan"), _onsets(mine), _onsets(theirs)))
    adjusted = holm([r.p for r in out])
    return [replace(r, p_holm=float(q)) for r, q in zip(out, adjusted)]


def growth_tables(cells: Mapping[str, LabCell], runs: Sequence[Any]
                  ) -> tuple[list[GrowthSeedRow], list[GrowthCellRow], list[GrowthTestRow]]:
    """Table (a)'s growth: per seed, per cell, and the tests of the noise size."""
    seeds = growth_seed_rows(cells, runs)
    return seeds, growth_cell_rows(seeds), growth_test_rows(cells, seeds)
