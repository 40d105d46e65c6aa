"""Train a small model from scratch with transformers' ``Trainer``: :func:`train`.

The run folder ``OUT`` holds:

* ``training.json``: the run's record (:class:`~probes.training.record.TrainingRecord`), written before the first
  step (the whole config, data sources with their sha256, the tokenizer, the held-out rule, the unigram baseline);
  a rerun into ``OUT`` must match it;
* ``tokenizer/``: the run's tokenizer, so a resumed run uses exactly the same one;
* ``checkpoints/step-NNNNNN/``: the checkpoints (:mod:`probes.training.checkpoints`), at steps 0, 1, 2, 4, 8, ...
  and the last;
* ``resume/checkpoint-N/``: the ``Trainer``'s own state at the latest checkpoint (optimizer, scheduler, random
  states, data position); removed once the last step is written.

Whose folder it is, what a stopped run leaves half-written there and how a run starts over is
:mod:`probes.training.runfolder`'s. Before anything is read or built, the sizes are checked against the memory of
the machine (:func:`probes.training.memory.check_memory`).

The loop is transformers' ``Trainer`` (``TrainingArguments(seed, data_seed, max_steps, ...)``, AdamW, a linear
schedule), so ``torchrun`` and ``accelerate launch`` run it on several processes or GPUs unchanged (each rank
draws its own blocks and masks; rank 0 alone writes the run folder); probes adds its callbacks
(:mod:`probes.training.callbacks`). Run again with the same options after Ctrl-C, ``kill -9``, an error or
``max_minutes``, a run resumes from its latest complete checkpoint: the data order comes from ``data_seed`` and
the epoch, the masks from ``(data_seed, batch)``, and dropout from the random state the ``Trainer`` restores, so
on CPU the resumed run ends byte-identical to one that never stopped. A failed write (a full disk) is one
:class:`~probes.errors.WriteError` naming the folder.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.extraction.trained_runs import list_checkpoints
from probes.progress import stage
from probes.training.allocator import keep_freed_memory
from probes.training.checkpoints import write_checkpoint, writing
from probes.training.config import TrainConfig
from probes.training.data import TextSource
from probes.training.lean_trainer import lean_trainer
from probes.training.memory import check_memory
from probes.training.record import CheckpointRecord, DataRecord, OptimizerRecord, TrainingRecord, record_text
from probes.training.runfolder import (
    RESUME_DIR,
    RUN_FILE,
    TOKENIZER_DIR,
    read_run,
    remove_run,
    remove_stale,
    resume_state,
    run_differences,
)
from probes.training.tasks import TaskSpec
from probes.world import launched_main, launched_processes

__all__ = ["TrainingRun", "train", "RUN_FILE", "TOKENIZER_DIR", "RESUME_DIR", "DEV_BLOCKS", "TASK_DEV_SEQUENCES", "OPTIMIZER"]

log = logging.getLogger("probes")

#: The most held-out blocks evaluated at each checkpoint (the first ones of the held-out text).
DEV_BLOCKS = 512
#: Held-out sequences of a task run (drawn, not read: each is a fresh sample, so 128 sequences of 64 tokens give the
#: held-out loss to about 0.01 nats, and 31 checkpoints of a lab run spend ~2% of its time on them, not ~10%).
TASK_DEV_SEQUENCES = 128
#: The optimizer, as ``TrainingArguments(optim=...)`` names it.
OPTIMIZER = "adamw_torch"
_TOKENS_RULE = "steps x batch size x processes x seq_len (every block is full: no padding)"
#: The optimizer, its schedule and the gradient clipping, as the record keeps them (:func:`_arguments` sets them).
_OPTIMIZER = OptimizerRecord(name=OPTIMIZER, schedule="linear", max_grad_norm=1.0)


@dataclass(frozen=True)
class TrainingRun:
    """What :func:`train` did.

    Attributes:
        out: the run folder.
        config: the options.
        checkpoints: every checkpoint folder of the run, by step.
        resumed_from: the step this call resumed from (None: it started from scratch, or had nothing to do).
        stopped: ``finished``, ``max-minutes`` (stopped at a checkpoint by the time limit) or ``already finished``.
        seconds: this call's training time; tokens_per_second: its throughput.
        training: the run's record, ``training.json`` (None: a finished run whose folder has lost it).
        allocator: what :func:`probes.training.allocator.keep_freed_memory` did, first thing.
    """

    out: Path
    config: TrainConfig
    checkpoints: dict[int, Path]
    resumed_from: int | None
    stopped: str
    seconds: float
    tokens_per_second: float
    training: TrainingRecord | None
    allocator: str = ""

    @property
    def last_step(self) -> int:
        """The latest checkpoint's step."""
        return max(self.checkpoints) if self.checkpoints else 0


@dataclass(frozen=True)
class _Data:
    """The tokenized data of a run."""

    tokenizer: Any
    train: npt.NDArray[np.int64]
    dev_batches: list[dict[str, Any]]
    record: TrainingRecord
    examples: Any = None  # Any: a task run's probes.training.task_data.TaskExamples (torch-side, imported lazily)


def _check_run_folder(out: Path, config: TrainConfig) -> TrainingRecord | None:
    """The record of a previous run in ``out``, which must be of the same config; None for a new run.

    Raises:
        ConfigError: ``out`` holds a run of other options (each one named, with both values), or a
            ``training.json`` that is no run's record.
    """
    training = read_run(out)
    if training is None:
        return None
    changed = run_differences(training, config, launched_processes())
    if changed:
        raise ConfigError(f"{out}: holds a training run with other options ({'; '.join(changed)}); run it with its "
                          "own options to resume it, train into another --out folder, or pass --overwrite to start "
                          "over", path=None)
    return training


def _check_data(out: Path, previous: TrainingRecord, sources: Sequence[TextSource]) -> None:
    """The data files must be those the run started with (same specs, same sha256); else name the first that
    differs."""
    before = previous.data.sources
    for k, source in enumerate(sources):
        old = before[k] if k < len(before) else None
        if old is None or old.sha256 != source.sha256:
            was = f"sha256 {old.sha256[:12]}..." if old is not None else "not part of it"
            raise ConfigError(f"{out}: the data changed since the run started ({source.spec}: {was} then, sha256 "
                              f"{source.sha256[:12]}... now); run it on its own data to resume it, train into "
                              "another --out folder, or pass --overwrite to start over")
    if len(before) != len(sources):
        raise ConfigError(f"{out}: the data changed since the run started ({len(before)} data files then, "
                          f"{len(sources)} now); train into another --out folder, or pass --overwrite to start over")


def _dev_batches(blocks: npt.NDArray[np.int64], collator: Any, batch_size: int) -> list[dict[str, Any]]:
    """The held-out batches, masked once (stream :data:`~probes.training.callbacks.DEV_STREAM`)."""
    import torch

    from probes.training.callbacks import DEV_STREAM

    collator.rank, collator.batches = DEV_STREAM, 0
    rows = [torch.as_tensor(b) for b in blocks[:DEV_BLOCKS]]
    return [collator([r.clone() for r in rows[i:i + batch_size]]) for i in range(0, len(rows), batch_size)]


def _targets(batches: Sequence[dict[str, Any]], masked_lm: bool) -> npt.NDArray[np.int64]:
    """The token ids the held-out loss predicts (masked positions; every token but the first of a causal row)."""
    parts = []
    for batch in batches:
        labels = batch["labels"].numpy()
        labels = labels if masked_lm else labels[:, 1:]
        parts.append(labels[labels != -100])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _prepare(config: TrainConfig, out: Path, previous: TrainingRecord | None) -> _Data:
    """Read and tokenize the data; train (or reload) the tokenizer; the run's record."""
    from probes.training.callbacks import SeededCollator
    from probes.training.curves import UNIGRAM_RULE, unigram_loss
    from probes.training.data import read_corpus, token_blocks
    from probes.training.tokenizer import build_tokenizer, describe_tokenizer

    if config.task_spec is not None:
        return _prepare_task(config, config.task_spec, out)
    corpus = read_corpus(config.treebank, config.select_on)
    if previous is not None:
        _check_data(out, previous, corpus.sources)
    tokenizer = build_tokenizer(config, corpus.train)
    if previous is not None:
        _check_tokenizer(out, tokenizer)
    train_blocks = token_blocks(corpus.train, tokenizer, config.seq_len, masked_lm=config.masked_lm)
    dev_blocks = token_blocks(corpus.dev, tokenizer, config.seq_len, masked_lm=config.masked_lm)
    if len(train_blocks) < config.batch_size or not len(dev_blocks):
        raise ConfigError(f"--treebank {list(config.treebank)!r}: expected at least --batch-size "
                          f"{config.batch_size} training blocks and one held-out block of --seq-len "
                          f"{config.seq_len} tokens, found {len(train_blocks)} and {len(dev_blocks)}")
    collator = SeededCollator(tokenizer=tokenizer, mlm=config.masked_lm, data_seed=config.data_seed)
    dev = _dev_batches(dev_blocks, collator, config.batch_size)
    baseline = unigram_loss(train_blocks, _targets(dev, config.masked_lm), len(tokenizer))
    data = DataRecord(sources=corpus.sources, train_sentences=len(corpus.train), dev_sentences=len(corpus.dev),
                      dev_rule=corpus.dev_rule, train_blocks=len(train_blocks),
                      dev_blocks=min(len(dev_blocks), DEV_BLOCKS))
    record = TrainingRecord(config=config, data=data, tokenizer=describe_tokenizer(config, tokenizer),
                            processes=launched_processes(), unigram_dev_loss=baseline, unigram_rule=UNIGRAM_RULE,
                            tokens_rule=_TOKENS_RULE, optimizer=_OPTIMIZER)
    return _Data(tokenizer=tokenizer, train=train_blocks, dev_batches=dev, record=record)


def _prepare_task(config: TrainConfig, spec: TaskSpec, out: Path) -> _Data:
    """A task run's data (:mod:`probes.training.task_data`): no files read; the tokenizer is the task's own
    vocabulary, the examples are drawn when asked for, the loss is on the predictable positions."""
    from probes.training.curves import UNIGRAM_RULE, unigram_loss
    from probes.training.record import TokenizerRecord
    from probes.training.task_data import TOKENIZER_KIND, TaskExamples, labelled, task_dev_batches, task_tokenizer
    from probes.training.tasks import TRAIN_STREAM

    tokenizer = task_tokenizer(config)
    _check_tokenizer(out, tokenizer)
    offset, world = len(config.family.special_tokens), launched_processes()
    count = config.steps * config.batch_size * world
    examples = TaskExamples(spec, config.data_seed, count, offset)
    dev = task_dev_batches(config, offset, TASK_DEV_SEQUENCES)
    sample = np.concatenate([labelled(spec.example(config.data_seed, TRAIN_STREAM, i), offset)[0]
                             for i in range(min(count, TASK_DEV_SEQUENCES))])  # what the unigram baseline is fit on
    targets = np.concatenate([b["labels"].numpy()[:, 1:] for b in dev])
    baseline = unigram_loss(sample, targets[targets != -100], len(tokenizer))
    rule = f"{TASK_DEV_SEQUENCES} sequences of the held-out stream of --data-seed (none of them trained on)"
    data = DataRecord(sources=(), train_sentences=count, dev_sentences=TASK_DEV_SEQUENCES, dev_rule=rule,
                      train_blocks=count, dev_blocks=TASK_DEV_SEQUENCES)
    described = TokenizerRecord(spec=config.tokenizer, kind=TOKENIZER_KIND, vocab_size=len(tokenizer),
                                trained_on=None)
    record = TrainingRecord(config=config, data=data, tokenizer=described, processes=world,
                            unigram_dev_loss=baseline, unigram_rule=UNIGRAM_RULE + " (the first training sequences)",
                            tokens_rule=_TOKENS_RULE, optimizer=_OPTIMIZER)
    return _Data(tokenizer=tokenizer, train=sample.reshape(-1, config.seq_len), dev_batches=dev, record=record,
                 examples=examples)


def _check_tokenizer(out: Path, tokenizer: Any) -> None:
    """The tokenizer built now must be the one the run started with (``OUT/tokenizer/tokenizer.json``)."""
    saved = out / TOKENIZER_DIR / "tokenizer.json"
    if saved.is_file() and saved.read_text(encoding="utf-8") != tokenizer.backend_tokenizer.to_str(pretty=True):
        raise ConfigError("expected the tokenizer the run started with, found another one built now (a base "
                          "tokenizer that changed?); train into another --out folder", path=saved)


def _arguments(config: TrainConfig, out: Path, log_every_step: bool = True) -> Any:
    import torch
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out / RESUME_DIR), max_steps=config.steps, per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate, weight_decay=config.weight_decay, warmup_steps=config.warmup,
        lr_scheduler_type=_OPTIMIZER.schedule, optim=_OPTIMIZER.name, max_grad_norm=_OPTIMIZER.max_grad_norm,
        seed=config.seed, data_seed=config.data_seed,
        report_to=[], save_strategy="no", save_total_limit=1,
        logging_strategy="steps" if log_every_step else "no", logging_steps=1,  # else: the Checkpointer's steps
        disable_tqdm=True, dataloader_drop_last=True, dataloader_num_workers=0, remove_unused_columns=False,
        dataloader_pin_memory=torch.cuda.is_available(), log_level="error",
        # several processes with no GPU: accelerate sees a CPU launch (gloo) only when told it is on the CPU;
        # otherwise every rank would train alone, each writing the same folder
        use_cpu=launched_processes() > 1 and not torch.cuda.is_available())


def _save_or_write_error(trainer: Any, folder: Path) -> None:
    """Make a failed write of the ``Trainer``'s resume state (a full disk: torch and safetensors raise their own
    errors) one :class:`~probes.errors.WriteError` naming ``folder``."""
    save = trainer._save_checkpoint

    def save_checkpoint(*args: Any, **kwargs: Any) -> None:
        with writing(folder):
            save(*args, **kwargs)

    trainer._save_checkpoint = save_checkpoint


class _Blocks:
    """The training blocks as a map-style dataset of 1-d long tensors."""

    def __init__(self, blocks: npt.NDArray[np.int64]) -> None:
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> Any:
        import torch

        return torch.from_numpy(self.blocks[i].copy())


def _writer(out: Path, data: _Data, config: TrainConfig, world: int) -> Any:
    """``write(step, model, train_loss)``: one checkpoint folder with its held-out loss."""
    from probes.training.callbacks import held_out_loss

    def write(step: int, model: Any, train_loss: float | None) -> Path:
        dev = held_out_loss(model, data.dev_batches, config.masked_lm)
        record = CheckpointRecord(run=data.record, step=step, train_loss=train_loss, dev_loss=dev,
                                  tokens_seen=step * config.batch_size * world * config.seq_len)
        return write_checkpoint(out, model, data.tokenizer, record)

    return write


def train(config: TrainConfig, out: str | Path, *, progress: bool = True, resume: bool = True, fresh: bool = False,
          callbacks: Sequence[Any] = ()) -> TrainingRun:
    """Train ``config``'s model into the run folder ``out`` (see the module); resume a run stopped there.

    Args:
        config: the options.
        out: the run folder (made if missing).
        progress: show the progress bar (step, loss, tokens per second) on stderr.
        resume: continue from the latest checkpoint of a run of the same config in ``out`` (False: refuse a
            folder that holds one).
        fresh: start over: remove what a run wrote into ``out`` first (:func:`~probes.training.runfolder.remove_run`;
            on rank 0 of a ``torchrun`` launch, before any rank looks at the folder), whatever its options.
        callbacks: more ``transformers.TrainerCallback`` objects for the ``Trainer``.

    Raises:
        ConfigError: the sizes need more memory than the machine has; ``out`` holds a run of other options or
            data (or any run, without ``resume``); the data are too small for one batch.
        WriteError: the run folder cannot be written (a full disk, a read-only folder).
    """
    out = Path(out)
    check_memory(config)  # the sizes against the machine, before anything is read or built
    allocator = keep_freed_memory()  # before the data and the model take memory (probes.training.allocator)
    main = launched_main()
    if fresh and main:
        remove_run(out)
    previous = None if fresh else _check_run_folder(out, config)
    if previous is not None and not resume:
        raise ConfigError(f"{out}: holds a training run already (resume=False); train into another folder")
    if main:
        remove_stale(out)  # before the checkpoints and the resume state are read
    found = {} if fresh else list_checkpoints(out)
    if config.steps in found:
        if main:
            shutil.rmtree(out / RESUME_DIR, ignore_errors=True)  # stopped between its last step and this
        return TrainingRun(out, config, found, None, "already finished", 0.0, 0.0, previous, allocator)
    stage(f"preparing the training data of {out} (tokenizer and blocks)", progress and main)
    data = _prepare(config, out, previous)
    check_memory(config, len(data.tokenizer))  # now with the tokenizer's own size
    if main:  # every rank builds the same tokenizer; rank 0 keeps it
        _keep_record(out, data, previous)
    return _fit(config, out, data, progress, callbacks, allocator)


def _keep_record(out: Path, data: _Data, previous: TrainingRecord | None) -> None:
    """Write the run's record (first: it makes the folder a training run's) and its tokenizer, each whole."""
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
    if previous is None:  # another rank may read it as the run's record: written whole
        text = record_text(data.record)
        _whole(out / RUN_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    if previous is None:  # a tokenizer/ left by hand beside no record must at least be this run's
        _check_tokenizer(out, data.tokenizer)
    if not (out / TOKENIZER_DIR).exists():
        _whole(out / TOKENIZER_DIR, data.tokenizer.save_pretrained)


def _whole(path: Path, write: Any) -> None:
    """``write(tmp)`` to a temporary name beside ``path`` (a file or a folder; :func:`probes.atomic_io.atomic_file`),
    then renamed to ``path``; a failed write is one WriteError naming ``path`` and leaves nothing behind."""
    from probes.atomic_io import atomic_file

    with writing(path), atomic_file(path) as tmp:
        write(tmp)


def _fit(config: TrainConfig, out: Path, data: _Data, progress: bool, callbacks: Sequence[Any],
         allocator: str) -> TrainingRun:
    """Build the model and the ``Trainer``, train (resuming where the resume state says), tidy up."""
    from transformers import PrinterCallback

    from probes.training.callbacks import Checkpointer, Progress, SeededCollator
    from probes.training.models import build_model
    from probes.training.task_data import TaskCollator

    log_every_step = progress or config.max_minutes is not None  # the bar shows each step; a stop may come anywhere
    args = _arguments(config, out, log_every_step)
    if args.world_size != launched_processes():
        raise ConfigError(f"expected the Trainer to train on the {launched_processes()} processes of this launch "
                          f"(WORLD_SIZE), found {args.world_size} ({args.parallel_mode}); launch with torchrun or "
                          "accelerate launch")
    model = build_model(config, data.tokenizer)
    kind = SeededCollator if data.examples is None else TaskCollator  # a task's examples carry their labels
    collator = kind(tokenizer=data.tokenizer, mlm=config.masked_lm, data_seed=config.data_seed)
    world = max(1, args.world_size)
    with args.main_process_first(local=False, desc="the run folder"):  # rank 0 tidied it (train) before this
        state = resume_state(out)
        done = list_checkpoints(out)
    checkpointer = Checkpointer(config.checkpoint_steps(), _writer(out, data, config, world), collator,
                                max_minutes=config.max_minutes, has=lambda step: step in done,
                                log_every_step=log_every_step)
    bar = Progress(config.batch_size * world * config.seq_len, enabled=progress)
    dataset = _Blocks(data.train) if data.examples is None else data.examples
    trainer = lean_trainer(model=model, args=args, train_dataset=dataset, data_collator=collator,
                           callbacks=[checkpointer, bar, *callbacks])
    trainer.remove_callback(PrinterCallback)
    _save_or_write_error(trainer, out / RESUME_DIR)
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the Trainer's "Writing model shards" bar at every save
    t0 = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=str(state[1]) if state is not None else None)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    seconds = time.perf_counter() - t0
    start = state[0] if state is not None else 0
    steps_done = trainer.state.global_step - start
    if trainer.state.global_step >= config.steps and args.process_index == 0:
        shutil.rmtree(out / RESUME_DIR, ignore_errors=True)
    rate = steps_done * config.batch_size * world * config.seq_len / seconds if seconds > 0 else 0.0
    return TrainingRun(out, config, list_checkpoints(out), start if state is not None else None,
                       checkpointer.stopped or "finished", seconds, rate, data.record, allocator)
