"""The training lab's tables: does random initialisation make heads differ, ensemble or division of labour,
capacity, and when roles form (issue 27 part 3; seed_methods.md §g).

:func:`lab_tables` reads an experiment's lab units (duck-typed, no import of probes.runs):

* ``train`` units, one per (cell, seed): ``result.curves`` (held-out loss per checkpoint) and ``result.symmetry``
  (:class:`~probes.training.symmetry.HeadSymmetry`: ``(C, L, H, H)`` distances between the heads of each layer);
* ``atlas`` units on the lab models (``CELL-sS`` and the checkpoint models ``CELL-sS-stepK``), whose model info
  carries ``"lab": {"cell", "seed", "step", "last_step", "heads", "layers", "init", "attention_dropout"}``;
* ``match`` units (:class:`~probes.runs.match.MatchRun` between two seeds' final models of one cell).

(a) per cell, layer and step the mean distance between the distinct heads of a layer (mean over pairs, then over
seeds, with the range over seeds), the peak local growth rate of that distance for identical+noise cells
(:func:`growth_rows`: :func:`probes.compare.growth.peak_growth` on the distances at every step when the train unit
measured them, else on its checkpoints), the final held-out loss per cell, and whether identical heads stay
identical (measured: every distance exactly 0) beside the reason. (b), (c), (d): :mod:`probes.compare.lab_roles`. Intervals over seeds are ranges
(:data:`~probes.compare.lab_types.SEED_INTERVAL`): with 3 seeds a bootstrap or t interval would claim more than
three numbers hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare import lab_roles
from probes.compare.growth import GROWTH_RULE as PEAK_RULE
from probes.compare.growth import GrowthFit, peak_growth
from probes.compare.lab_cells import LabCell, lab_cells, lab_info, pair_means, seed_range
from probes.compare.lab_types import FinalLoss, GrowthRate, LabTables, SymmetryStep, SymmetryVerdict
from probes.compare.role_lab_symmetry import GROWTH_WINDOW
from probes.compare.types import Unit
from probes.errors import ConfigError

__all__ = ["lab_tables", "seed_growth", "symmetry_rows", "growth_rows", "loss_row", "verdict_row",
           "SYMMETRY_REASON", "DROPOUT_REASON", "LOSS_RULE", "GROWTH_RULE", "SYMMETRY_RULE", "VERDICT_RULE",
           "CHECKPOINT_WINDOW"]

#: Why identical heads stay identical without attention dropout (seed_methods.md §g).
SYMMETRY_REASON = ("the loss is invariant under permuting the heads of a layer (with their query, key, value and "
                   "output blocks), so two equal heads get equal gradients, and AdamW's update of each parameter "
                   "depends only on that parameter's own gradient history, so equal heads get equal updates and "
                   "stay equal at every step; hidden dropout and the data are shared by all heads")
#: Why attention dropout breaks the symmetry.
DROPOUT_REASON = ("attention-probability dropout draws a separate mask for each head, so equal heads see different "
                  "inputs to their gradients and come apart")
#: Measurements per window of the peak growth rate on saved checkpoints (the fewest that give an R²).
CHECKPOINT_WINDOW = 3
#: How the growth rate is measured (:func:`growth_rows`).
GROWTH_RULE = (PEAK_RULE + "; per seed, layer and distance (param: relative L2 of the heads' blocks; attention: JS "
               "per token row, which also grows when heads only sharpen); "
               f"on the distances at every step 0..K when the run measured them (symmetry_steps = K; window "
               f"{GROWTH_WINDOW} steps), else on the saved checkpoints (window {CHECKPOINT_WINDOW} checkpoints); "
               "log-spaced checkpoints cannot give a per-step rate below their spacing: a window of 3 from step s "
               "spans s..4s and its slope averages over it, so a faster peak that lasts fewer steps is understated "
               "(train with symmetry_steps to measure every step); "
               "rate: mean over seeds with its range (min to max, not a confidence interval), doubling = ln 2 / mean "
               "rate, R²: the smallest of the seeds' windows; a seed without step 0 or without a window of positive "
               "excess has no rate (its window says why)")
#: How the symmetry table is made.
SYMMETRY_RULE = ("mean over the pairs of distinct heads of a layer of the train unit's head symmetry (attention: JS "
                 "per token row on held-out sentences; parameters: relative L2 of the head's blocks), then mean over "
                 "seeds with its range; steps held by every seed of the cell")
#: How the verdict is decided.
VERDICT_RULE = ("'stays identical' when the largest parameter and attention distance between any two heads, at any "
                "checkpoint of any seed, is exactly 0; expected for identical initialisation without attention "
                "dropout")
#: How the final-loss table is made.
LOSS_RULE = ("held-out loss (nats per predicted token, the training run's held-out targets) at each seed's last "
             "checkpoint, mean and range over seeds; unigram: the run's baseline on the same targets, mean over seeds")


def _symmetries(cell: LabCell) -> dict[int, Any]:
    return {s: r.symmetry for s, r in sorted(cell.runs.items()) if getattr(r, "symmetry", None) is not None}


def _common_steps(symmetries: Mapping[int, Any]) -> list[int]:
    """Steps every seed's symmetry holds, ascending."""
    sets = [set(int(s) for s in sym.steps) for sym in symmetries.values()]
    return sorted(set.intersection(*sets)) if sets else []


def _at(sym: Any, steps: Sequence[int], which: str) -> npt.NDArray[np.float64]:
    """``(len(steps), L)`` pair means of one seed's ``which`` distance at ``steps``."""
    index = {int(s): k for k, s in enumerate(sym.steps)}
    values = np.asarray(getattr(sym, which), dtype=np.float64)[[index[s] for s in steps]]
    return pair_means(values)


def symmetry_rows(cell: LabCell) -> list[SymmetryStep]:
    """(a) One row per layer and common step: mean over seeds of the pair-mean distances, with their range."""
    syms = _symmetries(cell)
    steps = _common_steps(syms)
    if not steps:
        return []
    att = np.stack([_at(s, steps, "attention_distance") for s in syms.values()])  # (S, C, L)
    par = np.stack([_at(s, steps, "param_distance") for s in syms.values()])
    rows = []
    for layer in range(att.shape[2]):
        for k, step in enumerate(steps):
            a, p = seed_range(att[:, k, layer].tolist()), seed_range(par[:, k, layer].tolist())
            rows.append(SymmetryStep(cell.name, layer, step, len(syms), *a, *p))
    return rows


_DISTANCES = {"param": "param_distance", "attention": "attention_distance"}


def _growth_source(run: Any) -> tuple[Any, str, int] | None:
    """``(head symmetry, source, window)`` of one seed: its distances at every step when it has them (preferred),
    else at its checkpoints; None with neither."""
    stepped = getattr(run, "step_symmetry", None)
    if stepped is not None and len(stepped.steps) >= 2:
        return stepped, "every step", GROWTH_WINDOW
    saved = getattr(run, "symmetry", None)
    if saved is not None and len(saved.steps) >= 2:
        return saved, "checkpoints", CHECKPOINT_WINDOW
    return None


def seed_growth(symmetry: Any, distance: str, layer: int, window: int) -> tuple[GrowthFit | None, str]:
    """``(fit, window text)``: :func:`~probes.compare.growth.peak_growth` of one layer's mean ``distance``
    (``param`` or ``attention``) between its heads; None with the reason when there is no rate."""
    steps = np.asarray(symmetry.steps, dtype=np.int64)
    curve = pair_means(np.asarray(getattr(symmetry, _DISTANCES[distance]), dtype=np.float64))[:, layer]  # (C,)
    try:
        fit = peak_growth(steps, curve, window=min(window, int(steps.size)))
    except ConfigError as exc:
        return None, f"no rate ({exc})"
    if fit.first < 0:
        return None, "no window of positive excess"
    return fit, f"{fit.first}..{fit.last}"


def _source_text(sources: Mapping[int, tuple[Any, str, int]]) -> tuple[str, int]:
    """``(source, window)`` of a cell's seeds: one source and window when they agree, else each seed's."""
    kinds = {(source, window) for _, source, window in sources.values()}
    if len(kinds) == 1:
        source, window = kinds.pop()
        return source, window
    by: dict[str, list[str]] = {}
    for seed, (_, source, window) in sources.items():
        by.setdefault(f"{source} (window {window})", []).append(str(seed))
    return "; ".join(f"{k}: seeds {', '.join(v)}" for k, v in by.items()), 0


def growth_rows(cell: LabCell) -> list[GrowthRate]:
    """(a) The peak growth rate of each layer's parameter and attention distance (identical+noise cells), per seed
    on its distances at every step when it has them, else on its checkpoints (:data:`GROWTH_RULE`)."""
    sources = {seed: found for seed, run in sorted(cell.runs.items()) if (found := _growth_source(run)) is not None}
    if not sources or cell.info["heads"] < 2:
        return []
    source, window = _source_text(sources)
    n_layers = np.asarray(next(iter(sources.values()))[0].attention_distance).shape[1]
    rows = []
    for layer in range(n_layers):
        for distance in _DISTANCES:
            rates, r2s, windows = [], [], {}
            for seed, (symmetry, _, size) in sources.items():
                fit, text = seed_growth(symmetry, distance, layer, size)
                windows[str(seed)] = text
                if fit is not None:
                    rates.append(fit.rate)
                    r2s.append(fit.r2)
            mean, low, high = seed_range(rates)
            doubling = math.log(2) / mean if np.isfinite(mean) and mean > 0 else math.nan
            finite_r2 = [r for r in r2s if np.isfinite(r)]
            rows.append(GrowthRate(cell.name, layer, distance, len(sources), mean, low, high, doubling,
                                   min(finite_r2) if finite_r2 else math.nan, windows, source, window))
    return rows


def loss_row(cell: LabCell) -> FinalLoss | None:
    """(a, c) The held-out loss at each seed's last checkpoint: mean and range over seeds."""
    curves = [r.curves for r in cell.runs.values() if getattr(r, "curves", None) is not None and len(r.curves.steps)]
    if not curves:
        return None
    mean, low, high = seed_range([float(c.dev_loss[-1]) for c in curves])
    unigram = seed_range([float(c.unigram_dev_loss) for c in curves])[0]
    info = cell.info
    return FinalLoss(cell.name, len(curves), info["heads"], info["layers"], info["init"], info["attention_dropout"],
                     max(int(c.steps[-1]) for c in curves), mean, low, high, unigram, str(curves[0].objective))


def verdict_row(cell: LabCell) -> SymmetryVerdict | None:
    """(a) For an identically initialised cell: the largest distance between heads, and whether it is exactly 0."""
    info = cell.info
    if info["init"] != "identical":
        return None
    syms = _symmetries(cell)
    if not syms:
        return None
    max_param = max(float(np.max(s.param_distance)) if np.size(s.param_distance) else 0.0 for s in syms.values())
    max_att = max(float(np.max(s.attention_distance)) if np.size(s.attention_distance) else 0.0
                  for s in syms.values())
    dropout = info["attention_dropout"]
    return SymmetryVerdict(cell.name, info["init"], dropout, len(syms), max(len(s.steps) for s in syms.values()),
                           max_param, max_att, max_param == 0.0 and max_att == 0.0, dropout == 0.0,
                           SYMMETRY_REASON if dropout == 0.0 else DROPOUT_REASON)


def _has_lab(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]]) -> bool:
    return any(u.kind in ("train", "match") for u in units) or any(lab_info(models, m) for m in models)


def lab_tables(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]], *, n_resamples: int = 1000,
               seed: int = 0) -> LabTables | None:
    """Every lab table from the experiment's units (see the module docstring), or None without lab units.

    Args:
        units: the loaded results; ``train``, ``match`` and the ``atlas`` units of lab models are read.
        models: name -> model info (a lab model's holds ``"lab"``).
        n_resamples, seed: the bootstrap of the specialisation test (the comparison's); ``seed`` also draws the
            regroupings of a D_cross test too large to enumerate.
    """
    if not _has_lab(units, models):
        return None
    cells = lab_cells(units, models)
    why: dict[str, list[str]] = {}
    symmetry, growth, losses, verdicts = [], [], [], []
    for cell in cells.values():
        if not _symmetries(cell) and cell.info["heads"] > 1:
            why.setdefault("symmetry", []).append(f"{cell.name}: no head symmetry (symmetry_sentences = 0?)")
        symmetry += symmetry_rows(cell)
        if cell.info["init"].startswith("identical+noise"):
            growth += growth_rows(cell)
        losses += [r for r in [loss_row(cell)] if r is not None]
        verdicts += [r for r in [verdict_row(cell)] if r is not None]
    if not cells:
        why.setdefault("final_loss", []).append("no train unit (add [train] tables)")
    if not any(c.info["init"].startswith("identical+noise") for c in cells.values()):
        why.setdefault("growth", []).append("no identical+noise cell")
    if not any(c.info["init"] == "identical" for c in cells.values()):
        why.setdefault("verdicts", []).append("no identically initialised cell")
    division = lab_roles.division_rows(units, models, why, seed=seed)
    cache: dict[str, Any] = {}  # each lab model's head roles, read once for (c) and (d)
    capacity = lab_roles.capacity_rows(units, models, cells, why, n_resamples=n_resamples, seed=seed, cache=cache)
    formation = lab_roles.formation_rows(units, models, cells, why, n_resamples=n_resamples, seed=seed, cache=cache)
    rules = {"final_loss": LOSS_RULE, "symmetry": SYMMETRY_RULE, "growth": GROWTH_RULE, "verdicts": VERDICT_RULE, **lab_roles.RULES}
    return LabTables(tuple(symmetry), tuple(growth), tuple(losses), tuple(verdicts), tuple(division),
                     tuple(capacity), tuple(formation), rules, {k: "; ".join(dict.fromkeys(v)) for k, v in why.items()})
