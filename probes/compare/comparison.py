"""The entry point of the cross-model comparison: :func:`compare` turns an experiment's loaded units into a
:class:`~probes.compare.types.Comparison` (every table, the seed questions' answers, their tests, what is missing
and what the evidence cannot tell). It reads saved results only, never a model, so a report is redone in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from probes.compare import tests as family_tests
from probes.compare.best_heads import best_heads
from probes.compare.consistency import model_consistency
from probes.compare.inputs import atlas_of, board_of, model_data_pairs, profile_of
from probes.compare.kinds import head_kinds
from probes.compare.lab import lab_tables
from probes.compare.layers import layer_profiles
from probes.compare.notes import notes
from probes.compare.redundancy import redundancy
from probes.compare.specialisation import specialisation
from probes.compare.spread import histograms, spread
from probes.compare.types import Comparison, Unit
from probes.errors import ConfigError

__all__ = ["compare"]


@dataclass
class _Found:
    """What the per-model passes found, and why some tables could not be made (table -> reasons)."""

    specs: dict[tuple[str, str], Any] = field(default_factory=dict)
    spreads: dict[tuple[str, str], Any] = field(default_factory=dict)
    kinds: list[Any] = field(default_factory=list)
    layers: list[Any] = field(default_factory=list)
    pruned: list[Any] = field(default_factory=list)
    consistency: dict[str, list[Any]] = field(default_factory=dict)
    why: dict[str, list[str]] = field(default_factory=dict)

    def miss(self, table: str, reason: str) -> None:
        """Record why ``table`` lacks something."""
        self.why.setdefault(table, []).append(reason)


def _check(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]], n_resamples: int, tolerance: float) -> None:
    """ConfigError for arguments compare cannot work with."""
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 1:
        raise ConfigError(f"n_resamples: expected a whole number >= 1, found {n_resamples!r}")
    if not 0 <= tolerance < 1:
        raise ConfigError(f"tolerance: expected a fraction in [0, 1), found {tolerance!r}")
    unknown = sorted({u.model for u in units} - set(models))
    if unknown:
        raise ConfigError(f"units name models {unknown} that models does not describe (found {sorted(models)})")
    kinds = {name: info.get("kind") for name, info in models.items()}
    wrong = {name: kind for name, kind in kinds.items() if kind not in ("trained", "random-init")}
    if wrong:
        raise ConfigError(f"models: expected kind 'trained' or 'random-init', found {wrong}")


def _per_model(units: Sequence[Unit], found: _Found, *, seed_questions: bool, n_resamples: int, seed: int) -> None:
    """Q2 (always: the head kinds and layers need it), head kinds, Q5 and Q1 for every (model, data)."""
    for model, data in model_data_pairs(units):
        board, atlas = board_of(units, model, data), atlas_of(units, model, data)
        spec = specialisation(board, profile_of(board, atlas), model, data, n_resamples=n_resamples, seed=seed)
        if isinstance(spec, str):
            found.miss("specialisation", f"{model} on {data}: {spec}")
        else:
            found.specs[(model, data)] = spec
        mask = None if isinstance(spec, str) else spec.mask
        if atlas is None:
            for table in ("head_kinds", "layers", "spread"):
                found.miss(table, f"{model} on {data}: no atlas (add an atlas analysis)")
            continue
        found.kinds.append(head_kinds(atlas, mask, model, data))
        if not seed_questions:
            continue
        found.layers.extend(layer_profiles(atlas, mask, model, data))
        q1 = spread(atlas.distances, model, data, n_resamples=n_resamples, seed=seed)
        if isinstance(q1, str):
            found.miss("spread", f"{model} on {data}: {q1}")
        else:
            found.spreads[(model, data)] = q1


def _pruning(units: Sequence[Unit], found: _Found, *, tolerance: float, n_resamples: int, seed: int,
             asked: bool) -> None:
    """Q3 for every prune unit, with the margin and confidence of the same model and data (``asked``: the seed
    questions are, so a missing prune unit is worth saying)."""
    prunes = [u for u in units if u.kind == "prune"]
    if not prunes and asked:
        found.miss("redundancy", "no prune unit (add a prune analysis)")
    for unit in prunes:
        board, atlas = board_of(units, unit.model, unit.data), atlas_of(units, unit.model, unit.data)
        profile = None if board is None else profile_of(board, atlas)
        result = redundancy(unit.result, unit.model, unit.data,
                            margin=None if profile is None else profile.selection_margin,
                            confidence=None if atlas is None else atlas.roles.confidence(), tolerance=tolerance,
                            n_resamples=n_resamples, seed=seed)
        found.pruned.append(result)
        for reason in result.missing:
            found.miss("redundancy", f"{unit.model} on {unit.data} ({unit.analysis}): {reason}")


def _consistency(units: Sequence[Unit], found: _Found, *, n_resamples: int, seed: int) -> None:
    """Q4 for every model with a leaderboard."""
    pairs = model_data_pairs(units)
    for model in dict.fromkeys(m for m, _ in pairs):
        datas = [d for m, d in pairs if m == model]
        found.consistency[model] = model_consistency(units, model, datas, n_resamples=n_resamples, seed=seed)
    if not any(found.consistency.values()):
        found.miss("consistency", "no leaderboard with a held-out selection side and no model on two data "
                                  "(select on another split, or add a second data)")


def _tests(models: Mapping[str, Mapping[str, Any]], found: _Found, *, n_resamples: int, seed: int) -> tuple[Any, ...]:
    """The report's family of tests, Holm-corrected together."""
    if not family_tests.partners(models):
        found.miss("tests", "no pair of a trained and a random-init model (add a random-init model)")
        return ()
    raw = (family_tests.q1_tests(found.spreads, models, n_resamples=n_resamples, seed=seed)
           + family_tests.q2_tests(found.specs, models, n_resamples=n_resamples, seed=seed)
           + family_tests.q4_tests(found.consistency, models, n_resamples=n_resamples, seed=seed))
    if not raw:
        found.miss("tests", "no question was answered for both a trained and a random-init model")
    return family_tests.family(raw)


def compare(units: Sequence[Unit], models: Mapping[str, Mapping[str, Any]], *, seed_questions: bool = True,
            n_resamples: int = 1000, tolerance: float = 0.05, seed: int = 0) -> Comparison:
    """The comparison of an experiment's saved results (see :mod:`probes.compare`).

    Args:
        units: the loaded results (:class:`~probes.compare.types.Unit`).
        models: name -> ``{"kind": "trained" | "random-init", "spec", "base", "seed"}`` (a random-init twin's
            ``query_key``, what ``random_init.json`` records of ``?qk=...``, labels its tests with its scale).
        seed_questions: also answer Q1..Q5 and run their tests (otherwise only the cross-model tables).
        n_resamples: bootstrap draws of every interval and test (the cluster counts use at most
            :data:`probes.compare.spread.CLUSTER_RESAMPLES` of them).
        tolerance: tau of Q3's removable fraction: the loss increase it may cost, as a fraction of the increase
            when every head is ablated (:data:`probes.importance.pruning.TOLERANCE_RULES`, ``range``).
        seed: the seed of every bootstrap.
    """
    _check(units, models, n_resamples, tolerance)
    found = _Found()
    every, lab_models = units, models  # the lab's tables read its own models; every other table the [models] alone
    models = {name: info for name, info in models.items() if not info.get("lab")}
    units = [u for u in units if u.model in models]  # _check: every unit's model is described
    _per_model(units, found, seed_questions=seed_questions, n_resamples=n_resamples, seed=seed)
    best = best_heads(units)
    if not best:
        found.miss("best_heads", "no leaderboard or atlas unit (add a leaderboard analysis)")
    tests: tuple[Any, ...] = ()
    _pruning(units, found, tolerance=tolerance, n_resamples=n_resamples, seed=seed,  # the overlaid curves, always
             asked=seed_questions)
    if seed_questions:
        _consistency(units, found, n_resamples=n_resamples, seed=seed)
        tests = _tests(models, found, n_resamples=n_resamples, seed=seed)
    spreads = list(found.spreads.values())
    return Comparison(
        models={name: dict(info) for name, info in models.items()}, best_heads=best, head_kinds=tuple(found.kinds),
        spread=tuple(s.row for s in spreads),
        specialisation=tuple(s.row for s in found.specs.values()) if seed_questions else (),
        redundancy=tuple(r.row for r in found.pruned), consistency=tuple(
            c.row for rows in found.consistency.values() for c in rows),
        layers=tuple(found.layers), tests=tests, curves=tuple(r.curve for r in found.pruned),
        histograms=histograms(spreads), missing={table: "; ".join(reasons) for table, reasons in found.why.items()},
        notes=notes(units, models, lab=len(lab_models) - len(models)),
        lab=lab_tables(every, lab_models, n_resamples=n_resamples, seed=seed))
