"""``probes train`` as a library call: train a small model from scratch, then write its loss curves.

:func:`train_model` claims the run folder (a second run into it stops at once; a folder holding a training run's
``training.json`` is that run's, and the same call resumes it; ``overwrite`` starts over), trains
(:func:`probes.training.trainer.train`: checkpoints under ``OUT/checkpoints/``), and reads the loss curves back
from the checkpoints. ``report.write(out)`` writes ``curves.csv``, ``figures/loss.png`` (held-out
and training loss against tokens seen, with the unigram baseline), ``curves/`` (the
:class:`~probes.training.curves.TrainingCurves`, for :func:`probes.load`), ``symmetry/`` (the
:class:`~probes.training.symmetry.HeadSymmetry` of every checkpoint on the first ``symmetry_sentences`` held-out
sentences that fit the model, for :func:`probes.load`), ``figures/symmetry.png`` and ``run.json``. With
``symmetry_steps = K``, :func:`train_model` itself writes ``symmetry-steps/``: the same distances on the same
sentences at every step ``0..K``, measured in memory while training (:mod:`probes.training.step_symmetry`)::

    from probes.training.config import TrainConfig
    from probes.runs.train import train_model
    config = TrainConfig(arch="bert", layers=4, heads=8, hidden=256, treebank=("ud:en_ewt:train",))
    report = train_model(config, "runs/train-bert")
    report.write("runs/train-bert")

Every checkpoint is then a model folder: ``trained:runs/train-bert@last`` in every command.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.reports.writer import OutputFolder, check_out_dir, write_output
from probes.results import Result, require_pandas, saveable
from probes.run_record import RunRecord
from probes.training.config import TrainConfig
from probes.training.curves import TrainingCurves
from probes.training.record import RECORD_TYPES, run_parts
from probes.training.step_symmetry import STEP_SYMMETRY_DIR, StepSymmetry
from probes.training.symmetry import HeadSymmetry
from probes.training.trainer import TrainingRun
from probes.world import World, launched_main, world_record

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["TrainReport", "train_model", "measure_symmetry", "COMMAND", "SYMMETRY_SENTENCES", "STEP_SYMMETRY_DIR"]

#: The command whose output a run folder is.
COMMAND = "probes train"
#: Held-out sentences the head symmetry is measured on, by default.
SYMMETRY_SENTENCES = 32


# the run's parts inside a saved TrainReport (the trainer's run, its options and record) are allowed to load
saveable(TrainingRun)
for _part in RECORD_TYPES:  # its training.json record: the config, the scheme inside it, the data and tokenizer
    saveable(_part)


@dataclass(frozen=True)
class TrainReport(Result):
    """A finished (or cleanly stopped) training run: what :func:`~probes.training.trainer.train` did, the curves,
    and the run record. A result like every other: ``save(path)``, ``TrainReport.load(path)``, ``to_pandas()``.

    Attributes:
        run: :class:`probes.training.trainer.TrainingRun`.
        curves: the loss curves of every checkpoint.
        record: the run record (``run.json``).
        symmetry: the distances between the heads of each layer at every checkpoint (None: not measured).
        step_symmetry: the same distances at every step ``0..K`` (``symmetry_steps``; None: not asked, or not
            measured: the record's ``symmetry_steps.skipped`` says why), as saved in ``OUT/symmetry-steps/``.
    """

    run: TrainingRun
    curves: TrainingCurves
    record: RunRecord
    symmetry: HeadSymmetry | None = None
    step_symmetry: HeadSymmetry | None = None

    def to_pandas(self) -> pd.DataFrame:
        """The loss curves, one row per checkpoint (:meth:`TrainingCurves.to_pandas`)."""
        require_pandas()
        return self.curves.to_pandas()

    def format(self) -> str:
        """A few lines for a terminal: how the run ended, its checkpoints and its loss against the baseline."""
        run = self.run
        steps = ", ".join(map(str, run.checkpoints))
        how = {"finished": "finished", "max-minutes": "stopped by --max-minutes at a checkpoint",
               "already finished": "already finished (nothing to train; the report is made again)"}.get(run.stopped,
                                                                                                       run.stopped)
        resumed = f", resumed from step {run.resumed_from}" if run.resumed_from is not None else ""
        speed = f", {run.tokens_per_second:,.0f} tokens/s" if run.tokens_per_second else ""
        return (f"training {how}{resumed}: step {run.last_step} of {run.config.steps}{speed}\n"
                f"checkpoints at steps {steps} in {Path(run.out) / 'checkpoints'}\n" + self.curves.format()
                + self.format_symmetry() + self.format_step_symmetry())

    def format_step_symmetry(self) -> str:
        """One line: where the distances at every early step are, or why there are none (nothing when not asked)."""
        summary = self.record.details.train.symmetry_steps
        if summary is None:
            return ""
        if self.step_symmetry is None:
            return f"head symmetry at every step: not measured ({summary.skipped})\n"
        last = int(self.step_symmetry.steps[-1])
        return f"head symmetry at every step 0..{last}: {Path(self.run.out) / STEP_SYMMETRY_DIR}\n"

    def format_symmetry(self) -> str:
        """One line per layer (from 1): the last checkpoint's mean distances between its heads (or nothing)."""
        if self.symmetry is None:
            return ""
        means = self.symmetry.layer_means()
        last = means[means["step"] == means["step"].max()]
        return "".join(f"head symmetry at step {int(row.step)}, layer {int(row.layer)}: mean parameter distance "
                       f"{row.param_distance:.4f}, mean attention distance {row.attention_distance:.4f}\n"
                       for row in last.itertuples())

    def write(self, out_dir: str | Path, *, figure_format: str = "png", overwrite: bool = False) -> dict[str, Path]:
        """Write ``curves.csv``, ``figures/loss.png`` (and ``figure_format`` when another), ``curves/`` and
        ``run.json`` into the run folder (the checkpoints stay as they are)."""
        from probes.training.checkpoints import writing

        out = Path(out_dir)
        if launched_main():  # the other ranks write to scratch folders; checking rank 0's would race its files
            check_out_dir(out, COMMAND, overwrite=overwrite)  # the run folder holds checkpoints: it is its own
        with writing(out):  # a failed write that no writer named (a full disk): one line naming the folder
            return write_output(out, COMMAND, partial(_write_report, report=self), figure_format=figure_format,
                                own_folder=True)


def _remove_report(out: Path) -> None:
    """Remove the report of an earlier ``probes train`` run in ``out``: its ``run.json`` and the files it lists
    (inside ``out`` only), and the folders they leave empty."""
    import contextlib

    from probes.errors import InputError, WriteError
    from probes.run_record import RUN_FILE, RunRecord
    from probes.safe_read import inside_folder

    path = out / RUN_FILE
    try:
        record = RunRecord.load(path)
    except InputError:  # none, or not a record: nothing of this run's to remove
        return
    if record.command != COMMAND:
        return
    files = record.details.files or ()
    for name in [*files, RUN_FILE]:
        try:
            target = inside_folder(out, name, what="file", source=path)
        except InputError:
            continue  # never removed: not inside the folder
        try:
            if target.is_file():
                target.unlink()
            for parent in target.parents:
                if parent == out.resolve():
                    break
                with contextlib.suppress(OSError):
                    parent.rmdir()  # only when empty
        except OSError as exc:
            raise WriteError.from_oserror(exc, target) from exc


def _draw(curves: TrainingCurves, path: Path) -> Path:
    """Held-out and training loss against tokens seen (log scale), the unigram baseline as a line."""
    from probes.reports.training import draw_loss

    return draw_loss(curves, path)


def _write_report(folder: OutputFolder, report: TrainReport) -> RunRecord:
    """The report writer of ``probes train``: curves table, figure, saved curves; the record to write last."""
    from probes.reports.tables import write_csv

    table = report.curves.to_pandas()
    folder.add(write_csv(table.to_dict("records"), folder.path("curves.csv"), columns=list(table.columns)))
    if folder.figures:
        formats = ["png"] + ([folder.figure_format] if folder.figure_format != "png" else [])
        for fmt in formats:
            folder.add(_draw(report.curves, folder.path(f"figures/loss.{fmt}")))
    folder.save("curves", report.curves)
    if report.symmetry is not None:
        folder.save("symmetry", report.symmetry)
        if folder.figures:
            from probes.reports.training import draw_symmetry

            for fmt in formats:
                folder.add(draw_symmetry(report.symmetry, folder.path(f"figures/symmetry.{fmt}")))
    from probes.reports.training import training_markdown  # the answers first: the loss against the baseline

    shown = {"Held-out and training loss": "figures/loss.png"} if folder.figures else {}
    if folder.figures and report.symmetry is not None:
        shown["Distance between the heads of each layer"] = "figures/symmetry.png"
    folder.text("report.md", training_markdown(report, shown))
    files = sorted(str(p.relative_to(folder.root)) for p in folder.listed()) + ["run.json"]
    return report.record.with_timings(writing_s=folder.seconds()).updated(files=files)


def _symmetry_texts(config: TrainConfig, checkpoint: Path, n: int) -> list[str]:
    """The first ``n`` held-out sentences whose tokens fit the model (``seq_len``), by the run's tokenizer."""
    from transformers import AutoTokenizer

    from probes.training.data import read_corpus

    if config.task_spec is not None:  # a task run: its held-out sequences, one word per token
        from probes.training.task_data import task_texts

        return task_texts(config, n)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=False)
    texts: list[str] = []
    for text in read_corpus(config.treebank, config.select_on).dev:
        if text.split() and len(tokenizer(text)["input_ids"]) <= config.seq_len:
            texts.append(text)
            if len(texts) == n:
                break
    return texts


def measure_symmetry(run: Any, n_sentences: int, *, progress: bool = False) -> HeadSymmetry | None:
    """:class:`~probes.training.symmetry.HeadSymmetry` of every checkpoint of ``run`` on its first
    ``n_sentences`` held-out sentences that fit; None when ``n_sentences`` is 0 or none fits."""
    from probes.training.symmetry import head_symmetry

    if n_sentences <= 0 or not run.checkpoints:
        return None
    steps = sorted(run.checkpoints)
    texts = _symmetry_texts(run.config, run.checkpoints[steps[-1]], n_sentences)
    if not texts:
        return None
    return head_symmetry([run.checkpoints[s] for s in steps], texts, steps=steps, progress=progress)


def _step_callback(config: TrainConfig, out: Path, symmetry_steps: int, n_sentences: int) -> StepSymmetry:
    """The callback that measures the head distances at steps ``0..symmetry_steps`` (at most the run's last) on
    the checkpoint symmetry's sentences, continuing what an earlier call of the run kept in ``symmetry-steps/``."""
    from probes.errors import InputError
    from probes.extraction.loading import load_tokenizer
    from probes.training.runfolder import TOKENIZER_DIR

    earlier = None
    if (out / STEP_SYMMETRY_DIR / "result.json").is_file():
        try:
            earlier = HeadSymmetry.load(out / STEP_SYMMETRY_DIR)
        except InputError:
            earlier = None  # not a HeadSymmetry, or unreadable: measured again from step 0 when the run is
    folder = out / TOKENIZER_DIR  # written before the first step; the checkpoints hold the same tokenizer
    return StepSymmetry(min(symmetry_steps, config.steps), lambda: _symmetry_texts(config, folder, n_sentences),
                        lambda: load_tokenizer(str(folder)), earlier=earlier)


def _keep_step_symmetry(callback: StepSymmetry | None, out: Path, asked: int, main: bool
                        ) -> tuple[HeadSymmetry | None, dict[str, Any] | None]:
    """Write what ``callback`` measured to ``OUT/symmetry-steps/`` (rank 0); ``(it, the record's section)``. A run
    that had finished before this call (no step trained) keeps what its training call wrote there."""
    if callback is None:
        return None, None
    measured = callback.result()
    folder = out / STEP_SYMMETRY_DIR
    if measured is not None and main:
        from probes.training.checkpoints import writing

        with writing(folder):
            measured.save(folder)
    elif not callback.started and (folder / "result.json").is_file():
        measured = HeadSymmetry.load(folder)
    why = callback.skipped or ("" if measured is not None else "the run had finished before (no step trained) "
                                                                "and no earlier call measured its steps")
    return measured, {"asked": asked, "last_step": None if measured is None else int(measured.steps[-1]),
                      "sentences": None if measured is None else measured.n_sentences,
                      "folder": STEP_SYMMETRY_DIR if measured is not None else None, "skipped": why or None,
                      "rule": "in memory after each optimizer step (step 0: the initial model), by the checkpoint "
                              "symmetry's rule on its sentences"}


def train_model(config: TrainConfig, out: str | Path, *, progress: bool = True, overwrite: bool = False,
                record: dict[str, Any] | None = None, symmetry_sentences: int = SYMMETRY_SENTENCES,
                symmetry_steps: int = 0) -> TrainReport:
    """Train ``config``'s model into ``out`` (resuming a run of the same options stopped there); the report.

    A folder holding a training run (its ``training.json``) is that run's: the same config resumes it from its
    latest complete checkpoint, whether it stopped by Ctrl-C, ``kill -9``, an error or ``max_minutes``; a finished
    one is not trained again (``run.stopped == "already finished"``; its report is made again); other options or
    data are refused, naming what differs. ``overwrite`` starts over: the files the run wrote (record, tokenizer,
    checkpoints, resume state, and the report its ``run.json`` lists) are removed first, and nothing else.

    Then, unless ``symmetry_sentences`` is 0, the distances between the heads of each layer at every checkpoint
    on the first ``symmetry_sentences`` held-out sentences that fit the model (on rank 0 only, under ``torchrun``:
    the other ranks' reports hold none and are written nowhere).

    ``symmetry_steps = K > 0``: the same distances on the same sentences at every step ``0..K`` (at most the last
    step), measured in memory during training (:class:`~probes.training.step_symmetry.StepSymmetry`; the training
    is the same with and without it) and written to ``OUT/symmetry-steps/``. A call that resumes from a step
    ``s > 0`` continues the steps an earlier call kept there; without them it writes nothing, and the record's
    ``symmetry_steps.skipped`` says why.

    Raises:
        ConfigError: the sizes need more memory than the machine has (:func:`probes.training.memory.check_memory`);
            ``symmetry_steps`` below 0, or above 0 with ``symmetry_sentences`` 0;
            ``out`` holds other files than a training run, or a run of other options or data (without
            ``overwrite``).
        FolderLockedError: another run writes into ``out``.
        WriteError: ``out`` cannot be written (a full disk, a read-only folder).
    """
    from probes.runs.record import run_record
    from probes.training.curves import read_curves
    from probes.training.memory import check_memory
    from probes.training.runfolder import read_run
    from probes.training.trainer import train

    out = Path(out)
    _check_step_options(symmetry_steps, symmetry_sentences)
    check_memory(config)  # before the folder is claimed: a model this machine cannot hold is refused at once
    if launched_main():  # rank 0 alone claims and checks the folder: the others would race its first files
        own = out.is_dir() and read_run(out) is not None  # a run's folder (a foreign training.json: refused)
        check_out_dir(out, COMMAND, overwrite=overwrite or own)  # claimed (locked) before any work
        if overwrite:
            _remove_report(out)
            shutil.rmtree(out / STEP_SYMMETRY_DIR, ignore_errors=True)
    t0 = time.perf_counter()
    stepper = _step_callback(config, out, symmetry_steps, symmetry_sentences) if symmetry_steps > 0 else None
    run = train(config, out, progress=progress, fresh=overwrite, callbacks=[stepper] if stepper else [])
    world = World.current()  # under torchrun: the Trainer's process group
    world.barrier("the end of training")  # rank 0 has written the last checkpoint
    curves = read_curves(out)
    step_symmetry, step_summary = _keep_step_symmetry(stepper, out, symmetry_steps, world.is_main)
    t1 = time.perf_counter()
    symmetry = measure_symmetry(run, symmetry_sentences if world.is_main else 0, progress=progress)
    measured = None if symmetry is None else {"sentences": symmetry.n_sentences, "asked": symmetry_sentences,
                                              "steps": [int(s) for s in symmetry.steps], "rule": symmetry.rule}
    full = run_record(COMMAND, model=f"trained:{out}@last", options=config.to_dict(),
                      training={"stopped": run.stopped, "resumed_from": run.resumed_from, "last_step": run.last_step,
                                "checkpoints": {str(k): str(v.relative_to(out)) for k, v in run.checkpoints.items()},
                                "tokens_per_second": run.tokens_per_second, "allocator": run.allocator},
                      **run_parts(run.training), symmetry=measured, world=world_record(world, {}),
                      timings={"training_s": run.seconds, "symmetry_s": time.perf_counter() - t1,
                               "total_s": time.perf_counter() - t0,
                               **({} if stepper is None else {"symmetry_steps_s": stepper.seconds})},
                      **({} if step_summary is None else {"symmetry_steps": step_summary}))
    extra_fields = dict(record or {})
    if extra_fields:
        full = full.updated(extra_fields, options={**full.options, **extra_fields.get("options", {})})
    return TrainReport(run=run, curves=curves, record=full, symmetry=symmetry, step_symmetry=step_symmetry)


def _check_step_options(symmetry_steps: int, symmetry_sentences: int) -> None:
    """``symmetry_steps`` is a step count >= 0, and measures on sentences (``symmetry_sentences`` > 0) when > 0."""
    from probes.errors import ConfigError

    if isinstance(symmetry_steps, bool) or not isinstance(symmetry_steps, int) or symmetry_steps < 0:
        raise ConfigError(f"--symmetry-steps: expected a whole number of steps >= 0, found {symmetry_steps!r}")
    if symmetry_steps > 0 and symmetry_sentences <= 0:
        raise ConfigError(f"--symmetry-steps {symmetry_steps}: expected --symmetry-sentences above 0 (the held-out "
                          f"sentences the distances are measured on), found {symmetry_sentences}")
