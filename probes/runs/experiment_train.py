"""The training units of an experiment (``[train]`` tables, :mod:`probes.runs.experiment_lab`), run before the
analyses: :func:`run_training`.

Each (cell, seed) trains with :func:`probes.runs.train.train_model` into ``OUT/train/CELL/seed-S/`` (the
checkpoints, curves, head symmetry and ``run.json`` of ``probes train``), and is saved as a unit
(``results/train/CELL-sS/CELL/``, a :class:`LabRun`) keyed by the whole config, ``symmetry_sentences`` and the
sha256 of every data file (not the package version: a new release does not retrain; ``--fresh`` does). A unit
whose key is unchanged and whose run folder holds its last checkpoint is re-used without training; a run folder
of the same config without a finished report (an interrupt) resumes at its latest checkpoint; a run folder of
another config or data is removed and trained again, and the record says why.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from probes.errors import InputError
from probes.progress import stage
from probes.results import Result, require_pandas
from probes.run_details import ExperimentUnit, TrainingSummary, UnitOptions
from probes.training.curves import TrainingCurves
from probes.training.step_symmetry import STEP_SYMMETRY_DIR
from probes.training.symmetry import HeadSymmetry

__all__ = ["LabRun", "run_training", "load_lab_run", "progress_line", "unit_options", "TRAIN"]

#: The analysis and kind name of training units.
TRAIN = "train"


@dataclass(frozen=True)
class LabRun(Result):
    """One finished training unit, as the comparison reads it (kind ``train``).

    Attributes:
        cell, seed: its ``[train.CELL]`` table and seed.
        curves: held-out and training loss at every checkpoint, with the unigram baseline.
        symmetry: ``(C, L, H, H)`` parameter and attention distances between the heads of each layer at every
            checkpoint (None for 1-head models, or ``symmetry_sentences = 0``).
        seconds: training wall time of the call that finished the run (s; a resumed run's earlier calls are not
            counted); tokens_per_second: that call's throughput.
        last_step: the last checkpoint's step; resumed_from: the step that call resumed from (None: from scratch).
        folder: the run folder, relative to the experiment's run folder (``train/CELL/seed-S``).
        step_symmetry: the same distances at every step ``0..K`` of a run trained with ``symmetry_steps = K``
            (its ``symmetry-steps/``; None when it has none).
    """

    cell: str
    seed: int
    curves: TrainingCurves
    symmetry: HeadSymmetry | None
    seconds: float
    tokens_per_second: float
    last_step: int
    folder: str
    resumed_from: int | None = None
    step_symmetry: HeadSymmetry | None = None

    def to_pandas(self) -> Any:
        """The loss curves, one row per checkpoint, with the cell and the seed."""
        require_pandas()
        table = self.curves.to_pandas()
        table.insert(0, "seed", self.seed)
        table.insert(0, "cell", self.cell)
        return table

    def format(self) -> str:
        """One line: the run's size, speed and time."""
        return progress_line(self, "trained")


def progress_line(run: LabRun, how: str) -> str:
    """``train CELL seed S: N steps, T tokens/s, X s (how)``: what a training unit did."""
    return (f"train {run.cell} seed {run.seed}: {run.last_step} steps, {run.tokens_per_second:,.0f} tokens/s, "
            f"{run.seconds:.1f} s ({how})")


def load_lab_run(unit: Any, folder: Path) -> LabRun:
    """The :class:`LabRun` of a finished run folder (its ``run.json``, ``curves/``, ``symmetry/`` and, when there,
    ``symmetry-steps/``)."""
    from probes.run_record import RunRecord

    done = RunRecord.load(folder)  # every field of its type; the numbers checked below
    training = done.details.train.training or TrainingSummary()
    seconds = _number(done.timings.training_s if "training_s" in done.timings else 0.0, "timings.training_s", folder,
                      float)
    speed = _number(training.tokens_per_second or 0.0, "training.tokens_per_second", folder, float)
    last_step = _number(training.last_step if "last_step" in training else 0, "training.last_step", folder, int)
    symmetry = _saved(folder / "symmetry", HeadSymmetry) if (folder / "symmetry" / "result.json").is_file() else None
    steps = folder / STEP_SYMMETRY_DIR
    step_symmetry = _saved(steps, HeadSymmetry) if (steps / "result.json").is_file() else None
    return LabRun(unit.cell, unit.seed, _saved(folder / "curves", TrainingCurves), symmetry, seconds, speed,
                  last_step, unit.folder, training.resumed_from, step_symmetry)


R = TypeVar("R", bound=Result)


def _saved(folder: Path, kind: type[R]) -> R:
    """The result saved in ``folder`` if it is a ``kind``; else an InputError naming the folder."""
    from probes.results import load

    result = load(folder)
    if not isinstance(result, kind):
        raise InputError(f"expected a saved {kind.__name__}, found a saved {type(result).__name__}", path=folder)
    return result


def _number(value: Any, field: str, folder: Path, kind: type[float] | type[int]) -> Any:
    """``value`` (the run record's ``field`` in ``folder``) as a finite, non-negative ``kind``; else an InputError."""
    good = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if not good or (kind is int and value != int(value)):
        raise InputError(f"{field}: expected a {'whole ' if kind is int else ''}number >= 0, found {value!r}"[:300],
                         path=folder / "run.json")
    return kind(value)


def _data_shas(unit: Any, hashes: Any) -> list[str]:
    """sha256 of every data file of the unit, in the trainer's order (treebank specs, then select_on)."""
    config = unit.config
    return [hashes.data(s)["sha256"] for s in (*config.treebank, *([config.select_on] if config.select_on else []))]


def _inputs(unit: Any, hashes: Any) -> dict[str, Any]:
    """What a training unit's key hashes."""
    return {"kind": TRAIN, "config": unit.config.to_dict(), "symmetry_sentences": _symmetry_sentences(unit),
            "data": _data_shas(unit, hashes)}


def _symmetry_sentences(unit: Any) -> int:
    return 0 if unit.config.heads < 2 else unit.symmetry_sentences  # one head: no pair of heads to measure


def _finished(unit: Any, folder: Path) -> bool:
    """Whether ``folder`` holds this unit's finished run: its report (``run.json`` of ``probes train`` with the same
    options and symmetry sentences), curves and last checkpoint."""
    from probes.errors import InputError
    from probes.extraction.trained_runs import list_checkpoints
    from probes.run_record import RunRecord
    from probes.runs.train import COMMAND

    try:
        done = RunRecord.load(folder)
    except (InputError, OSError):
        return False
    symmetry = done.details.train.symmetry
    asked = 0 if symmetry is None or "asked" not in symmetry else symmetry.asked
    return (done.command == COMMAND and dict(done.options) == unit.config.to_dict()
            and asked == _symmetry_sentences(unit) and (folder / "curves" / "result.json").is_file()
            and unit.config.steps in list_checkpoints(folder))


def _stale(unit: Any, folder: Path, shas: list[str]) -> str | None:
    """Why the run in ``folder`` is of another config or data (None: none there, or the same one)."""
    from probes.errors import ConfigError
    from probes.training.runfolder import read_run

    if not (folder / "training.json").is_file():
        return None
    try:
        training = read_run(folder)
    except ConfigError:
        return "its training.json cannot be read"
    if training is None:
        return None
    changed = training.config.differences(unit.config)
    if changed:
        return "options changed (" + "; ".join(changed) + ")"
    if [s.sha256 for s in training.data.sources] != shas:
        return "the data files changed (sha256)"
    return None


def _train(unit: Any, folder: Path, shas: list[str], progress: bool, experiment: str) -> tuple[LabRun, str]:
    """Train (or resume, or read back) one unit; ``(run, how)``."""
    from probes.runs.train import train_model

    why = _stale(unit, folder, shas)
    if why is not None:
        shutil.rmtree(folder)
    elif _finished(unit, folder):  # trained before, its unit file lost: read it back
        return load_lab_run(unit, folder), "re-used the finished run folder"
    # this unit's own run (same config and data: checked above) resumes without --overwrite (which starts over)
    report = train_model(unit.config, folder, progress=progress, symmetry_sentences=_symmetry_sentences(unit),
                         record={"experiment": {"name": experiment, "cell": unit.cell, "seed": unit.seed}})
    report.write(folder)
    run = load_lab_run(unit, folder)
    resumed, stopped = report.run.resumed_from, report.run.stopped
    how = ("checkpoints found, report made again" if stopped == "already finished"
           else "trained" if resumed is None else f"resumed from step {resumed}")
    return run, how if why is None else f"{how}: the earlier run was removed, {why}"


def run_training(experiment: Any, run_dir: Path, store: Any, hashes: Any, progress: bool
                 ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train (or re-use) every training unit of ``experiment`` in file order.

    Returns:
        ``(units, summary)``: each unit's entry of ``run.json``'s ``units``, and the lab's summary for ``run.json``
        (``lines``: the progress line of every unit; ``skipped``: checkpoint models left out; ``seconds``).
    """
    from probes.runs.experiment_cache import unit_key

    t0 = time.perf_counter()
    entries, lines = [], []
    skipped = [note for unit in experiment.train for note in unit.skipped]
    for note in skipped:
        stage(note, progress)
    for unit in experiment.train:
        shas = _data_shas(unit, hashes)
        inputs = _inputs(unit, hashes)
        key, folder = unit_key(inputs), run_dir / unit.folder
        saved = store.find(TRAIN, unit.name, unit.cell, key)
        if saved is not None and _finished(unit, folder):
            run, how = store.load(saved.folder), "re-used, as trained before"
        else:
            run, how = _train(unit, folder, shas, progress, experiment.name)
            saved = store.save(TRAIN, unit.name, unit.cell, key, inputs, run, run.seconds)
        lines.append(progress_line(run, how))
        stage(lines[-1], progress)
        entries.append(_entry(unit, saved, how))
    return entries, {"lines": lines, "skipped": skipped, "seconds": round(time.perf_counter() - t0, 3)}


def _entry(unit: Any, saved: Any, how: str) -> dict[str, Any]:
    """A training unit's entry of ``run.json``'s ``units`` (its options are those :class:`Unit` gets)."""
    return {"analysis": TRAIN, "kind": TRAIN, "model": unit.name, "data": unit.cell, "key": saved.key,
            "reused": how.startswith("re-used"), "seconds": saved.entry.get("seconds"), "path": saved.folder,
            "from_atlas": None, "run_folder": unit.folder, "how": how,
            "options": {"cell": unit.cell, "seed": unit.seed, "config": unit.config.to_dict()}}


def unit_options(entry: ExperimentUnit, analyses: Mapping[str, Mapping[str, Any]]) -> UnitOptions:
    """The options a saved unit's :class:`~probes.compare.types.Unit` gets: its own (train and match units), else
    its analysis' options."""
    if entry.options is not None:
        return entry.options
    analysis = analyses.get(entry.analysis, {})
    return UnitOptions.of(analysis.get("options", {}), f"analyses[{entry.analysis!r}].options")
