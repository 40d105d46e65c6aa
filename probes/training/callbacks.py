"""What a training run adds to transformers' ``Trainer``: seeded masks, checkpoints, a time limit, a progress bar.

* :class:`SeededCollator`: transformers' ``DataCollatorForLanguageModeling`` whose masks (masked-LM) come from a
  generator seeded by ``(data_seed, rank, batch number)``, so batch ``k`` gets the same masks in a run that
  resumed before it as in one that never stopped (the global random state, which the ``Trainer`` saves and
  restores, is left to dropout).
* :class:`Checkpointer`: at the checkpoint steps, asks the ``Trainer`` to save its resume state (optimizer,
  scheduler, random states, data position) and then writes the checkpoint folder with the held-out loss
  (:mod:`probes.training.checkpoints`); stops cleanly at a checkpoint once ``max_minutes`` have passed.
* :class:`Progress`: one bar on stderr with the step, the loss and tokens per second.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import DataCollatorForLanguageModeling, TrainerCallback

__all__ = ["SeededCollator", "Checkpointer", "Progress", "mixed_seed", "DEV_STREAM"]

#: The ``rank`` of the held-out batches' masks (a stream no training process uses).
DEV_STREAM = -1


def mixed_seed(*parts: int) -> int:
    """A 63-bit seed from ``parts`` (sha256), so nearby inputs give unrelated streams."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass
class SeededCollator(DataCollatorForLanguageModeling):
    """Stacks equal-length blocks; masked-LM: masks from :func:`mixed_seed` ``(data_seed, rank, batch)``; causal:
    labels are the inputs (every token predicted, none taken for padding)."""

    data_seed: int = 0
    rank: int = 0
    batches: int = 0

    def torch_call(self, examples: list[Any]) -> dict[str, Any]:
        import torch

        self.generator = torch.Generator().manual_seed(mixed_seed(self.data_seed, self.rank, self.batches))
        self._generator_pid = os.getpid()
        self.batches += 1
        if self.mlm:
            return super().torch_call(examples)
        ids = torch.stack([torch.as_tensor(e, dtype=torch.long) for e in examples])
        return {"input_ids": ids, "labels": ids.clone()}


def held_out_loss(model: Any, batches: Sequence[Mapping[str, Any]], masked_lm: bool) -> float:
    """Mean loss per predicted token over ``batches`` in eval mode (no random state touched); the mode restored."""
    import torch

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    device = next(model.parameters()).device
    try:
        with torch.no_grad():
            for batch in batches:
                labels = batch["labels"]
                n = int((labels != -100).sum()) if masked_lm else int((labels[:, 1:] != -100).sum())
                if n:
                    loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
                    total, count = total + float(loss) * n, count + n
    finally:
        model.train(was_training)
    return total / count if count else math.nan


class Checkpointer(TrainerCallback):
    """Saves at ``steps`` (and at a stop), writing each checkpoint folder through ``write(step, model, train_loss)``.

    Attributes:
        stopped: ``"max-minutes"`` once the time limit stopped the run, else ``""``.
        written: the steps written by this process.
    """

    def __init__(self, steps: Sequence[int], write: Callable[[int, Any, float | None], Path],
                 collator: SeededCollator, *, max_minutes: float | None = None, has: Callable[[int], bool],
                 log_every_step: bool = True) -> None:
        self.steps = frozenset(steps)
        # Without a log every step (no progress bar, no time limit), the Trainer logs only at each checkpoint step
        # and the step before it, so the loss logged at a checkpoint is still that one step's (the Trainer logs the
        # mean over the steps since its last log): the same number, without a log entry and a sync every step.
        self.log_every_step = log_every_step
        self.log_steps = frozenset(s for c in self.steps for s in (c - 1, c) if s > 0)
        self.write = write
        self.has = has
        self.collator = collator
        self.deadline = None if max_minutes is None else time.monotonic() + 60.0 * max_minutes
        self.losses: dict[int, float] = {}
        self.stopped = ""
        self.written: list[int] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.collator.batches = state.global_step * args.gradient_accumulation_steps
        self.collator.rank = args.process_index
        for entry in state.log_history:  # a resumed run: the losses logged before the stop
            if "loss" in entry and "step" in entry:
                self.losses[int(entry["step"])] = float(entry["loss"])
        if state.is_world_process_zero and not self.has(state.global_step):
            self._write(state.global_step, model)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.log_every_step and state.global_step in self.log_steps:
            control.should_log = True
        if state.global_step in self.steps or state.global_step >= state.max_steps:
            control.should_save = True
        if self.deadline is not None and time.monotonic() >= self.deadline and state.global_step < state.max_steps:
            control.should_save = control.should_training_stop = True
            self.stopped = "max-minutes"

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
               **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self.losses[state.global_step] = float(logs["loss"])

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            self._write(state.global_step, model)

    def _write(self, step: int, model: Any) -> None:
        self.write(step, model, self.losses.get(step))
        self.written.append(step)


class Progress(TrainerCallback):
    """A progress bar on stderr (:func:`probes.progress.bar`): steps done of the total, the last loss and training
    tokens per second."""

    def __init__(self, tokens_per_step: int, enabled: bool = True) -> None:
        self.tokens_per_step = tokens_per_step
        self.enabled = enabled
        self.bar: Any = None
        self._start = (0, 0.0)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.enabled and state.is_world_process_zero:
            from probes.progress import bar

            self.bar = bar("training", total=state.max_steps, initial=state.global_step, unit="step")
        self._start = (state.global_step, time.perf_counter())

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None,
               **kwargs: Any) -> None:
        if self.bar is None or not logs or "loss" not in logs:
            return
        steps, seconds = state.global_step - self._start[0], time.perf_counter() - self._start[1]
        rate = steps * self.tokens_per_step / seconds if seconds > 0 else 0.0
        self.bar.set_postfix_str(f"loss {float(logs['loss']):.3f}, {rate:,.0f} tokens/s", refresh=False)
        self.bar.update(state.global_step - self.bar.n)  # shows the postfix just set

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
