"""Train a small model from scratch with transformers' ``Trainer``: :func:`train`.

The run folder ``OUT`` holds:

* ``training.json``: the run's record, written before the first step (the whole config, data sources with their
  sha256, the tokenizer, the held-out rule, the unigram baseline); a rerun into ``OUT`` must match it;
* ``tokenizer/``: the run's tokenizer, so a resumed run uses exactly the same one;
* ``checkpoints/step-NNNNNN/``: the checkpoints (:mod:`probes.training.checkpoints`), at steps 0, 1, 2, 4, 8, ...
  and the last;
* ``resume/checkpoint-N/``: the ``Trainer``'s own state at the latest checkpoint (optimizer, scheduler, random
  states, data position); removed once the last step is written.

The loop is transformers' ``Trainer`` (``TrainingArguments(seed, data_seed, max_steps, ...)``, AdamW, a linear
schedule), so ``torchrun`` and ``accelerate launch`` run it on several processes or GPUs unchanged (each rank
draws its own blocks and masks; rank 0 alone writes the run folder); probes adds its callbacks
(:mod:`probes.training.callbacks`). Run again with the same options, a run resumes from its latest
checkpoint: the data order comes from ``data_seed`` and the epoch, the masks from ``(data_seed, batch)``, and
dropout from the random state the ``Trainer`` restores, so on CPU the resumed run ends byte-identical to one
that never stopped.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.training.allocator import keep_freed_memory
from probes.training.checkpoints import TRAINING_FILE, list_checkpoints, write_checkpoint
from probes.training.config import TrainConfig
from probes.world import launched_main, launched_processes

__all__ = ["TrainingRun", "train", "RUN_FILE", "TOKENIZER_DIR", "RESUME_DIR", "DEV_BLOCKS", "OPTIMIZER"]

log = logging.getLogger("probes")

#: The run's record in ``OUT`` (same name as each checkpoint's own record).
RUN_FILE = TRAINING_FILE
#: Where the run keeps its tokenizer.
TOKENIZER_DIR = "tokenizer"
#: Where the ``Trainer`` keeps its resume state.
RESUME_DIR = "resume"
#: The most held-out blocks evaluated at each checkpoint (the first ones of the held-out text).
DEV_BLOCKS = 512
#: The optimizer, as ``TrainingArguments(optim=...)`` names it.
OPTIMIZER = "adamw_torch"
_TOKENS_RULE = "steps x batch size x processes x seq_len (every block is full: no padding)"


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
        training: the run's ``training.json`` (config, scheme, seeds, data, tokenizer, baseline).
        allocator: what :func:`probes.training.allocator.keep_freed_memory` did, first thing.
    """

    out: Path
    config: TrainConfig
    checkpoints: dict[int, Path]
    resumed_from: int | None
    stopped: str
    seconds: float
    tokens_per_second: float
    training: dict[str, Any]
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
    record: dict[str, Any]


def _check_run_folder(out: Path, config: TrainConfig) -> dict[str, Any] | None:
    """The record of a previous run in ``out``, which must be of the same config; None for a new run."""
    path = out / RUN_FILE
    if not path.is_file():
        return None
    from probes.training.checkpoints import read_training

    training = read_training(out)
    try:
        previous = TrainConfig.from_dict(training.get("config", {}))
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"expected the record of a `probes train` run, found one it cannot read ({exc})",
                          path=path) from None
    changed = previous.differences(config)
    if int(training.get("processes", 1)) != launched_processes():
        changed = [*changed, f"processes: {training.get('processes', 1)} -> {launched_processes()}"]
    if changed:
        raise ConfigError(f"{out}: holds a training run with other options ({'; '.join(changed)}); resume it with "
                          "its own options or train into another --out folder", path=None)
    return training


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


def _prepare(config: TrainConfig, out: Path, previous: dict[str, Any] | None) -> _Data:
    """Read and tokenize the data; train (or reload) the tokenizer; the run's record."""
    from probes.training.callbacks import SeededCollator
    from probes.training.curves import UNIGRAM_RULE, unigram_loss
    from probes.training.data import read_corpus, token_blocks
    from probes.training.schemes import InitScheme
    from probes.training.tokenizer import build_tokenizer, describe_tokenizer

    corpus = read_corpus(config.treebank, config.select_on)
    if previous is not None:
        hashes = [s.sha256 for s in corpus.sources]
        before = [s.get("sha256") for s in previous.get("data", {}).get("sources", [])]
        if hashes != before:
            raise ConfigError(f"{out}: the data changed since the run started (sha256 of the data files differ); "
                              "train into another --out folder")
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
    record = {"config": config.to_dict(), "scheme": InitScheme.parse(config.init).describe(),
              "seeds": {"seed": config.seed, "data_seed": config.data_seed},
              "data": {**corpus.describe(), "train_blocks": len(train_blocks), "dev_blocks": min(len(dev_blocks),
                                                                                                  DEV_BLOCKS)},
              "tokenizer": describe_tokenizer(config, tokenizer),
              "objective": "masked-LM" if config.masked_lm else "causal-LM", "processes": launched_processes(),
              "unigram_dev_loss": baseline, "unigram_rule": UNIGRAM_RULE, "tokens_rule": _TOKENS_RULE,
              "optimizer": {"name": OPTIMIZER, "schedule": "linear", "max_grad_norm": 1.0}}
    return _Data(tokenizer=tokenizer, train=train_blocks, dev_batches=dev, record=record)


def _check_tokenizer(out: Path, tokenizer: Any) -> None:
    """The tokenizer built now must be the one the run started with (``OUT/tokenizer/tokenizer.json``)."""
    saved = out / TOKENIZER_DIR / "tokenizer.json"
    if saved.is_file() and saved.read_text(encoding="utf-8") != tokenizer.backend_tokenizer.to_str(pretty=True):
        raise ConfigError("expected the tokenizer the run started with, found another one built now (a base "
                          "tokenizer that changed?); train into another --out folder", path=saved)


def _resume_state(out: Path) -> tuple[int, Path] | None:
    """The ``Trainer``'s latest complete resume state (its ``trainer_state.json`` is written last)."""
    found = []
    for path in (out / RESUME_DIR).glob("checkpoint-*"):
        tail = path.name.split("-", 1)[1]
        if tail.isdigit() and (path / "trainer_state.json").is_file():
            found.append((int(tail), path))
    return max(found) if found else None


def _arguments(config: TrainConfig, out: Path) -> Any:
    import torch
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(out / RESUME_DIR), max_steps=config.steps, per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate, weight_decay=config.weight_decay, warmup_steps=config.warmup,
        lr_scheduler_type="linear", optim=OPTIMIZER, max_grad_norm=1.0, seed=config.seed, data_seed=config.data_seed,
        report_to=[], save_strategy="no", save_total_limit=1, logging_strategy="steps", logging_steps=1,
        disable_tqdm=True, dataloader_drop_last=True, dataloader_num_workers=0, remove_unused_columns=False,
        dataloader_pin_memory=torch.cuda.is_available(), log_level="error",
        # several processes with no GPU: accelerate sees a CPU launch (gloo) only when told it is on the CPU;
        # otherwise every rank would train alone, each writing the same folder
        use_cpu=launched_processes() > 1 and not torch.cuda.is_available())


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
        info = {**data.record, "step": step, "tokens_seen": step * config.batch_size * world * config.seq_len,
                "train_loss": train_loss, "dev_loss": dev}
        return write_checkpoint(out, step, model, data.tokenizer, info)

    return write


def train(config: TrainConfig, out: str | Path, *, progress: bool = True, resume: bool = True,
          callbacks: Sequence[Any] = ()) -> TrainingRun:
    """Train ``config``'s model into the run folder ``out`` (see the module); resume a run stopped there.

    Args:
        config: the options.
        out: the run folder (made if missing).
        progress: show the progress bar (step, loss, tokens per second) on stderr.
        resume: continue from the latest checkpoint of a run of the same config in ``out`` (False: refuse a
            folder that holds one).
        callbacks: more ``transformers.TrainerCallback`` objects for the ``Trainer``.

    Raises:
        ConfigError: ``out`` holds a run of other options or data (or any run, without ``resume``), or the data
            are too small for one batch.
    """
    out = Path(out)
    allocator = keep_freed_memory()  # before the data and the model take memory (probes.training.allocator)
    previous = _check_run_folder(out, config)
    if previous is not None and not resume:
        raise ConfigError(f"{out}: holds a training run already (resume=False); train into another folder")
    found = list_checkpoints(out)
    if config.steps in found:
        return TrainingRun(out, config, found, None, "already finished", 0.0, 0.0, previous or {}, allocator)
    data = _prepare(config, out, previous)
    if previous is None and launched_main():  # every rank builds the same tokenizer; rank 0 keeps it
        out.mkdir(parents=True, exist_ok=True)
        data.tokenizer.save_pretrained(out / TOKENIZER_DIR)
        tmp = out / f".{RUN_FILE}.tmp"  # written last and whole: another rank reads it as the run's record
        tmp.write_text(json.dumps(data.record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, out / RUN_FILE)
    return _fit(config, out, data, progress, callbacks, allocator)


def _fit(config: TrainConfig, out: Path, data: _Data, progress: bool, callbacks: Sequence[Any],
         allocator: str) -> TrainingRun:
    """Build the model and the ``Trainer``, train (resuming where the resume state says), tidy up."""
    from transformers import PrinterCallback, Trainer

    from probes.training.callbacks import Checkpointer, Progress, SeededCollator
    from probes.training.models import build_model

    args = _arguments(config, out)
    if args.world_size != launched_processes():
        raise ConfigError(f"expected the Trainer to train on the {launched_processes()} processes of this launch "
                          f"(WORLD_SIZE), found {args.world_size} ({args.parallel_mode}); launch with torchrun or "
                          "accelerate launch")
    model = build_model(config, data.tokenizer)
    collator = SeededCollator(tokenizer=data.tokenizer, mlm=config.masked_lm, data_seed=config.data_seed)
    world = max(1, args.world_size)
    state = _resume_state(out)
    done = list_checkpoints(out)
    checkpointer = Checkpointer(config.checkpoint_steps(), _writer(out, data, config, world), collator,
                                max_minutes=config.max_minutes, has=lambda step: step in done)
    bar = Progress(config.batch_size * world * config.seq_len, enabled=progress)
    trainer = Trainer(model=model, args=args, train_dataset=_Blocks(data.train), data_collator=collator,
                      callbacks=[checkpointer, bar, *callbacks])
    trainer.remove_callback(PrinterCallback)
    # The Trainer counts each batch's FLOPs for its state's `total_flos` (a walk over the parameters per step,
    # about 1% of a small model's step); probes reports tokens per second instead.
    trainer.floating_point_ops = lambda inputs: 0
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
