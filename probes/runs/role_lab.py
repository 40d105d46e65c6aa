"""The role lab's runner: ``probes run`` of a file with ``[experiment] kind = "role-lab"``
(:mod:`probes.runs.role_lab_spec`), and ``probes report`` of its run folder.

The run is a list of jobs (:mod:`probes.runs.role_lab_jobs`): train and measure each (cell, seed) model; train each
literal ensemble's members, then measure the ensemble; probe each pretrained model and each member of a named
family. Jobs go to ``workers`` worker processes of one thread each (both cores of a small machine work); under
``torchrun`` the jobs are dealt to the ranks in turn (job ``i`` to rank ``i mod size``), every rank writing its
units into the one shared run folder, and rank 0 waits for every unit before it writes the report. Every unit is
saved under a key of what it depends on, so a second run re-uses them all and only re-makes the report.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from probes.errors import ConfigError
from probes.progress import bar as progress_bar
from probes.progress import stage
from probes.results import Result
from probes.run_record import RunRecord
from probes.runs.experiment_cache import UnitStore, unit_key
from probes.runs.role_lab_jobs import (
    LAB,
    PRETRAINED,
    TORCHRUN_VARIABLES,
    TRAIN,
    Job,
    JobDone,
    init_worker,
    run_job,
)
from probes.runs.role_lab_spec import KIND, RoleLab

__all__ = ["RoleLabRun", "run_role_lab", "report_role_lab", "lab_jobs", "deal"]

#: Seconds between looks at the shared run folder while another rank finishes its jobs.
POLL_SECONDS = 2.0
RUN_FILE = "run.json"


@dataclass(frozen=True)
class RoleLabRun(Result):
    """A finished role-lab run: the comparison, the seed families and the run record."""

    comparison: Any  # Any: a probes.compare.role_lab.RoleLabComparison (compare stage; typed there)
    families: tuple[Any, ...] = ()  # Any: probes.compare.families.FamilyRoles, one per [families.*] table
    record: RunRecord = field(default_factory=RunRecord)

    @property
    def info(self) -> Any:
        """The experiment's name, title, file and run folder (``out``), as ``run.json`` holds them."""
        from probes.run_details import ExperimentInfo

        return self.record.details.run.experiment or ExperimentInfo()

    def to_pandas(self, table: str = "function") -> Any:
        """One table of the comparison (:data:`probes.compare.role_lab_types.TABLES`)."""
        return self.comparison.to_pandas(table)

    def format(self) -> str:
        """A short terminal summary: units computed and re-used."""
        units = self.record.details.run.units or ()
        reused = sum(1 for u in units if u.reused)
        return f"role lab: {len(units)} units ({reused} re-used, {len(units) - reused} computed)"

    def write(self, out_dir: str | Path, *, figure_format: str = "png", run_dir: str | Path | None = None,
              units: tuple[Sequence[Any], Sequence[Any]] | None = None) -> dict[str, Path]:
        """Write ``report.md``, ``report.html``, ``figures/``, ``tables/``, ``comparison/`` and ``run.json``.

        ``run_dir``: the run folder holding the units (default ``out_dir``); ``units``: its ``(training runs,
        measurements)`` when already loaded (read from ``run_dir`` otherwise), for the figures."""
        from probes.reports.role_lab import write_role_lab
        from probes.reports.writer import write_output
        from probes.runs.experiment_folder import COMMAND
        from probes.runs.role_lab_inputs import load_units

        folder = Path(run_dir or out_dir)
        loaded = units if units is not None else load_units(folder, self.record)
        return write_output(out_dir, COMMAND, partial(write_role_lab, run=self, run_dir=folder, units=loaded),
                            figure_format=figure_format, own_folder=True)


# ----------------------------------------------------------------------------- the jobs
def _data_shas(config: Any) -> tuple[str, ...]:
    from probes.checksum import files_sha256
    from probes.corpora.registry import resolve_treebank

    specs = (*config.treebank, *((config.select_on,) if config.select_on else ()))
    return tuple(files_sha256([resolve_treebank(s)]) for s in specs)


def _model_sha(spec: str) -> str | None:
    from probes.extraction.loading import check_model, resolve_model, weights_sha256

    path = resolve_model(spec)
    check_model(str(path))  # before anything reads its files: no remote code, regular files only
    return weights_sha256(path) if Path(path).is_dir() else None


def _train_job(lab: RoleLab, run_dir: str, cell: Any, name: str, seed: int, config: Any, folder: str, *,
               measure: bool, options: dict[str, Any]) -> Job:
    shas = _data_shas(config) if config.task == "text" else ()
    sentences = 0 if config.heads < 2 else lab_symmetry(cell)
    steps = 0 if config.heads < 2 else cell.symmetry_steps
    inputs = {"kind": TRAIN, "config": config.to_dict(), "symmetry_sentences": sentences, "symmetry_steps": steps,
              "data": list(shas)}
    return Job(TRAIN, name, cell.name, seed, run_dir, unit_key(inputs), inputs, config, folder, options=options,
               measure=measure, symmetry_sentences=sentences, symmetry_steps=steps, experiment=lab.name, shas=shas)


def lab_symmetry(cell: Any) -> int:
    """Held-out sequences of a cell's checkpoint symmetry (its units all share it)."""
    return cell.units[0].symmetry_sentences if cell.units else 0


def lab_jobs(lab: RoleLab, run_dir: str) -> tuple[list[Job], list[Job]]:
    """``(first, then)``: the jobs that need nothing else, and the ensembles' measurements (after their members)."""
    from dataclasses import replace

    from probes.training.ensemble import member_config, member_seed

    first, then = [], []
    for cell in lab.cells:
        options = {"eval_sequences": cell.eval_sequences, "map_sequences": cell.map_sequences,
                   "ablation": cell.ablation}
        for unit in cell.units:
            if cell.ensemble == 1:
                first.append(_train_job(lab, run_dir, cell, unit.name, unit.seed, unit.config, unit.folder,
                                        measure=True, options=options))
                continue
            base = member_config(unit.config, cell.ensemble)
            members = [_train_job(lab, run_dir, cell, f"{unit.name}-m{m + 1}", unit.seed,
                                  replace(base, seed=member_seed(unit.seed, m)), f"{unit.folder}/member-{m + 1}",
                                  measure=False, options=options) for m in range(cell.ensemble)]
            first.extend(members)
            inputs: dict[str, Any] = {"kind": "ensemble", "members": [m.key for m in members]}
            then.append(Job("ensemble", unit.name, cell.name, unit.seed, run_dir, unit_key(inputs), inputs,
                            members=tuple(m.folder for m in members), options=options))
    for p in lab.pretrained:
        options = {"model": p.model, "sequences": p.sequences, "seq_len": p.seq_len, "period_min": p.period_min,
                   "period_max": p.period_max, "seed": p.seed, "ablation": p.ablation, "function": p.function,
                   "pairs": p.pairs}
        inputs = {"kind": PRETRAINED, "model": p.model, "weights_sha256": _model_sha(p.model)}
        first.append(Job(PRETRAINED, p.name, p.name, 0, run_dir, unit_key(inputs), inputs, options=options))
    for family in lab.families:
        for name, spec, seed, _ in family.members():
            options = {"model": spec, "sequences": family.sequences, "seq_len": family.seq_len,
                       "function": family.function}
            inputs = {"kind": PRETRAINED, "model": spec, "weights_sha256": _model_sha(spec)}
            first.append(Job(PRETRAINED, name, family.name, seed, run_dir, unit_key(inputs), inputs,
                             options=options))
    return first, then


def deal(jobs: Sequence[Job], rank: int, size: int) -> list[Job]:
    """This rank's jobs: job ``i`` goes to rank ``i mod size`` (the slow and fast ones spread evenly)."""
    return [job for i, job in enumerate(jobs) if i % size == rank]


# ----------------------------------------------------------------------------- running them
def _execute(jobs: Sequence[Job], workers: int, progress: bool, label: str) -> list[JobDone]:
    """Run ``jobs`` on ``workers`` processes (inline for one), a bar over them and a line per finished job."""
    done: list[JobDone] = []
    with progress_bar(label, total=len(jobs), unit="unit", progress=progress) as bar:
        if workers <= 1 or len(jobs) <= 1:
            with _single_process():
                for job in jobs:
                    done.append(run_job(job))
                    stage(done[-1].line, progress)
                    bar.update(1)
            return done
        import multiprocessing
        from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait

        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=init_worker) as pool:
            pending = {pool.submit(run_job, job) for job in jobs}
            while pending:
                finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for future in finished:
                    if future.exception() is not None:
                        for other in pending:
                            other.cancel()
                        raise future.exception()  # type: ignore[misc]  # a job's own error, raised as it is
                    done.append(future.result())
                    stage(done[-1].line, progress)
                    bar.update(1)
    return done


@contextmanager
def _single_process() -> Iterator[None]:
    """Jobs run in this process see no ``torchrun`` variables (a model they train trains here alone)."""
    saved = {name: os.environ.pop(name) for name in TORCHRUN_VARIABLES if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _wait_for(store: UnitStore, expected: Iterable[tuple[str, str, str, str]], timeout: float) -> None:
    """Wait until every ``(analysis, name, cell, key)`` unit is saved (another rank computes it)."""
    missing = list(expected)
    deadline = time.monotonic() + timeout
    while missing:
        missing = [u for u in missing if store.find(*u) is None]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise ConfigError(f"{store.run_dir}: {len(missing)} units of other ranks did not appear within "
                              f"{timeout:.0f} s (first: {missing[0][1]})")
        time.sleep(POLL_SECONDS)


def _wait_for_file(path: Path, timeout: float) -> None:
    """Wait until rank 0 has written ``path``."""
    deadline = time.monotonic() + timeout
    while not path.is_file():
        if time.monotonic() > deadline:
            raise ConfigError(f"{path.parent}: rank 0 did not claim the run folder within {timeout:.0f} s")
        time.sleep(POLL_SECONDS)


def _expected(job: Job) -> list[tuple[str, str, str, str]]:
    """The units a job saves, as :meth:`UnitStore.find` looks them up."""
    from probes.runs.role_lab_jobs import _measure_key

    out = [(TRAIN, job.name, job.cell, job.key)] if job.kind == TRAIN else []
    if job.kind != TRAIN or job.measure:
        out.append((PRETRAINED if job.kind == PRETRAINED else LAB, job.name, job.cell, _measure_key(job)))
    return out


def _world() -> tuple[int, int]:
    """``(rank, size)`` of a ``torchrun`` launch as the environment says (``(0, 1)`` without one)."""
    from probes.world import launched_processes

    try:
        rank = int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        rank = 0
    return rank, launched_processes()


def run_role_lab(path: str | Path, *, out: str | Path | None = None, progress: bool = True, fresh: bool = False,
                 workers: int | None = None) -> RoleLabRun | None:
    """Run (or resume) the role-lab file ``path``; the run (None on a ``torchrun`` rank other than 0).

    Raises:
        ConfigError: the file is refused, or the run folder holds another run.
    """
    from probes.runs.experiment_folder import check_out, mark_started
    from probes.runs.experiment_preflight import role_lab_preflight
    from probes.runs.role_lab_spec import read_role_lab
    from probes.world import timeout

    lab = read_role_lab(path)
    role_lab_preflight(lab)  # every model, package and dataset here, before anything trains or loads
    run_dir = Path(out if out is not None else lab.out)
    rank, size = _world()
    if rank == 0:
        check_out(run_dir, lab.name)
        if fresh:
            for folder in ("results", "train"):
                shutil.rmtree(run_dir / folder, ignore_errors=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        UnitStore(run_dir).clean()
        mark_started(run_dir, lab.name)
        shutil.copyfile(path, run_dir / "experiment.toml")
    else:  # rank 0 claims the folder first (check_out refuses a folder other ranks have written into)
        _wait_for_file(run_dir / RUN_FILE, timeout().total_seconds())
    t0 = time.perf_counter()
    first, then = lab_jobs(lab, str(run_dir))
    store = UnitStore(run_dir)
    done = _execute(deal(first, rank, size), workers or lab.workers, progress, "role lab: train and measure")
    members = {j.folder: j for j in first if j.kind == TRAIN}
    mine = deal(then, rank, size)
    _wait_for(store, [u for j in mine for m in j.members for u in _expected(members[m])], timeout().total_seconds())
    done += _execute(mine, workers or lab.workers, progress, "role lab: ensembles")
    if rank != 0:
        return None
    _wait_for(store, [u for j in (*first, *then) for u in _expected(j)], timeout().total_seconds())
    record = _record(lab, path, run_dir, [*first, *then], done, store, time.perf_counter() - t0)
    stage(f"writing report to {run_dir}", progress)
    return _report(run_dir, record)


def _record(lab: RoleLab, path: str | Path, run_dir: Path, jobs: Sequence[Job], done: Sequence[JobDone],
            store: UnitStore, seconds: float) -> RunRecord:
    from probes.runs.experiment_folder import COMMAND
    from probes.runs.record import run_record

    how = {d.name: d.line for d in done}
    reused = {u[1]: u[4] for d in done for u in d.units}
    units = []
    for job in jobs:
        for analysis, name, cell, key in _expected(job):
            folder = store.relative(store.folder(analysis, name, cell))
            units.append({"analysis": analysis, "kind": analysis, "model": name, "data": cell, "key": key,
                          "path": folder, "reused": reused.get(folder, True), "how": how.get(name),
                          "run_folder": job.folder or None,
                          "options": {"cell": job.cell, "seed": job.seed,
                                      **({"config": job.config.to_dict()} if job.config is not None else {})}})
    settings = {"workers": lab.workers, "n_permutations": lab.n_permutations, "n_draws": lab.n_draws,
                "seed": lab.seed, "cells": {c.name: {"ensemble": c.ensemble, "symmetry_steps": c.symmetry_steps,
                                                     "eval_sequences": c.eval_sequences,
                                                     "map_sequences": c.map_sequences, "ablation": c.ablation,
                                                     "seeds": [u.seed for u in c.units]} for c in lab.cells},
                "pretrained": {p.name: p.model for p in lab.pretrained},
                "families": {f.name: {"cell": f.cell, "models": f.models, "seeds": list(f.seeds),
                                      "checkpoints": list(f.checkpoints), "role": f.role} for f in lab.families}}
    return run_record(COMMAND, experiment={"name": lab.name, "title": lab.title, "description": lab.description,
                                           "file": str(path), "copy": "experiment.toml", "out": str(run_dir),
                                           "kind": KIND},
                      units=units, role_lab=settings, timings={"units_s": round(seconds, 3)})


# ----------------------------------------------------------------------------- the report
def _report(run_dir: Path, record: RunRecord, out: Path | None = None) -> RoleLabRun:
    """Load every unit the record names, compare, write the report (into ``out``, default the run folder)."""
    from probes.compare.role_lab import role_lab
    from probes.runs.role_lab_inputs import families_of, lab_cells, load_units

    t0 = time.perf_counter()
    runs, analyses = load_units(run_dir, record)
    settings = record.details.run.role_lab or {}
    cells = lab_cells(record, analyses)
    comparison = role_lab(analyses, runs, cells, n_permutations=int(settings.get("n_permutations", 10_000)),
                          seed=int(settings.get("seed", 0)))
    families = families_of(settings, analyses, n_draws=int(settings.get("n_draws", 1000)),
                           seed=int(settings.get("seed", 0)))
    record = record.with_timings(report_s=round(time.perf_counter() - t0, 3))
    run = RoleLabRun(comparison=comparison, families=families, record=record)
    run.write(run_dir if out is None else out, run_dir=run_dir, units=(runs, analyses))
    return run


def report_role_lab(run_dir: str | Path, *, out: str | Path | None = None) -> RoleLabRun:
    """Re-make the report of a finished role-lab run folder from its saved units alone."""
    run_dir = Path(run_dir)
    record = RunRecord.load(run_dir)
    if not record.details.run.units:
        raise ConfigError(f"{run_dir}: the run has not finished ({record.details.run.status or 'no units'})")
    return _report(run_dir, record, None if out is None else Path(out))
