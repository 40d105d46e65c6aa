"""The units of a role-lab run, as jobs a worker process runs on its own: train one model (and measure it), measure
a literal ensemble from its trained members, probe a pretrained model. Each job re-uses its saved unit when the
key is unchanged, saves its result atomically into the run folder's ``results/`` (so workers and ``torchrun``
ranks share one cache without a lock) and returns a :class:`JobDone` the runner records.

A job holds only frozen values checked at the boundary (:mod:`probes.runs.role_lab_spec`), so it pickles to a
spawned worker as it is. Workers run one thread each (:func:`init_worker`) and never see the ``torchrun``
variables of the rank that started them, so a model they train is never trained across ranks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.runs.experiment_cache import UnitStore, unit_key
from probes.training.config import TrainConfig

__all__ = ["Job", "JobDone", "run_job", "init_worker", "TRAIN", "LAB", "PRETRAINED", "TORCHRUN_VARIABLES"]

#: Unit analyses: a trained run, a model's (or ensemble's) measurements, a pretrained model's probe.
TRAIN, LAB, PRETRAINED = "train", "lab", "pretrained"
#: What ``torchrun`` sets; a worker drops them (its models train on one process).
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                      "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True)
class Job:
    """One unit of work.

    Attributes:
        kind: ``train`` (train ``config`` into ``folder``, then measure it unless ``measure`` is False),
            ``ensemble`` (measure the members' run folders as one averaged model), ``pretrained`` (probe ``model``).
        name, cell, seed: the unit's model name (``CELL-sS``, ``CELL-sS-mM``, a pretrained name), cell, seed.
        run_dir: the run folder.
        key, inputs: the unit's key and what it hashes (computed by the runner).
        config: the training config (train jobs).
        folder: the training run folder, relative to ``run_dir`` (train jobs).
        members: the members' run folders, relative to ``run_dir`` (ensemble jobs).
        options: the measurement's options (eval/map sequences, ablation; a pretrained probe's options).
        measure: whether a train job also measures its model (False for an ensemble's members).
        symmetry_sentences, symmetry_steps: head distances at checkpoints and at every step.
        experiment: the experiment's name (recorded in the training run's ``run.json``).
        shas: sha256 of the training data files (text cells), in the trainer's order.
    """

    kind: str
    name: str
    cell: str
    seed: int
    run_dir: str
    key: str
    inputs: Mapping[str, Any]
    config: TrainConfig | None = None
    folder: str = ""
    members: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    measure: bool = True
    symmetry_sentences: int = 0
    symmetry_steps: int = 0
    experiment: str = ""
    shas: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobDone:
    """What a job did: its saved units (``(analysis, folder, key, seconds, reused)``) and a progress line."""

    name: str
    units: tuple[tuple[str, str, str, float, bool], ...]
    line: str


def init_worker() -> None:
    """A worker process: one thread, and no ``torchrun`` variables (see the module)."""
    for name in TORCHRUN_VARIABLES:
        os.environ.pop(name, None)
    import torch

    torch.set_num_threads(1)


def _measure_key(job: Job) -> str:
    return unit_key({"kind": LAB, "of": job.key, "options": dict(job.options)})


def _train(job: Job, store: UnitStore) -> tuple[tuple[str, str, str, float, bool], str]:
    """Train (or re-use) the job's run; its unit entry and how."""
    import shutil

    from probes.runs.experiment_train import _finished, _stale, load_lab_run
    from probes.runs.train import train_model

    if job.config is None:
        raise ValueError(f"train job {job.name}: made without a config")
    folder, unit = Path(job.run_dir) / job.folder, _Unit(job, job.config)
    saved = store.find(TRAIN, job.name, job.cell, job.key)
    if saved is not None and _finished(unit, folder):
        return (TRAIN, saved.folder, job.key, float(saved.entry.get("seconds") or 0.0), True), "re-used"
    why = _stale(unit, folder, list(job.shas))
    if why is not None:
        shutil.rmtree(folder)
    t0 = time.perf_counter()
    report = train_model(job.config, folder, progress=False, symmetry_sentences=job.symmetry_sentences,
                         symmetry_steps=job.symmetry_steps,
                         record={"experiment": {"name": job.experiment, "cell": job.cell, "seed": job.seed}})
    report.write(folder)
    run = load_lab_run(unit, folder)
    saved = store.save(TRAIN, job.name, job.cell, job.key, job.inputs, run, time.perf_counter() - t0)
    return (TRAIN, saved.folder, job.key, saved.entry["seconds"], False), f"trained, {run.tokens_per_second:,.0f} tokens/s"


@dataclass(frozen=True)
class _Unit:
    """What :mod:`probes.runs.experiment_train`'s helpers read of a training unit."""

    job: Job
    config: TrainConfig

    @property
    def cell(self) -> str:
        return self.job.cell

    @property
    def seed(self) -> int:
        return self.job.seed

    @property
    def folder(self) -> str:
        return self.job.folder

    @property
    def symmetry_sentences(self) -> int:
        return self.job.symmetry_sentences


def _measure(job: Job, store: UnitStore) -> tuple[tuple[str, str, str, float, bool], str]:
    """Measure the job's model, ensemble or pretrained model (or re-use the saved measurement)."""
    from probes.importance import lab_model, lab_pretrained

    key = _measure_key(job)
    analysis = PRETRAINED if job.kind == PRETRAINED else LAB
    saved = store.find(analysis, job.name, job.cell, key)
    if saved is not None:
        return (analysis, saved.folder, key, float(saved.entry.get("seconds") or 0.0), True), "re-used"
    t0 = time.perf_counter()
    options = dict(job.options)
    run_dir = Path(job.run_dir)
    if job.kind == PRETRAINED:
        result = lab_pretrained.analyse_pretrained(options.pop("model"), name=job.name, **options)
    elif job.kind == "ensemble":
        result = lab_model.analyse_ensemble([run_dir / m for m in job.members], name=job.name, cell=job.cell,
                                            seed=job.seed, **options)
    else:
        result = lab_model.analyse_lab_run(run_dir / job.folder, name=job.name, cell=job.cell, seed=job.seed,
                                           **options)
    inputs = {"kind": analysis, "of": job.key, "options": dict(job.options)}
    saved = store.save(analysis, job.name, job.cell, key, inputs, result, time.perf_counter() - t0)
    return (analysis, saved.folder, key, saved.entry["seconds"], False), "measured"


def run_job(job: Job) -> JobDone:
    """Run one job (in a worker process or inline) and say what it did."""
    store = UnitStore(job.run_dir)
    units, hows = [], []
    if job.kind == TRAIN:
        entry, how = _train(job, store)
        units.append(entry)
        hows.append(how)
    if job.kind != TRAIN or job.measure:
        entry, how = _measure(job, store)
        units.append(entry)
        hows.append(how)
    seconds = sum(u[3] for u in units if not u[4])
    return JobDone(job.name, tuple(units), f"{job.kind} {job.name}: {', '.join(hows)} ({seconds:.1f} s)")
