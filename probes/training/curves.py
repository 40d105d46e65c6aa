"""Loss curves of a training run, as a result: :class:`TrainingCurves`, and the unigram baseline.

The curves are read from the ``training.json`` of every checkpoint (:func:`read_curves`), so they describe the
checkpoints that exist. The baseline is the held-out loss of a unigram model fit on the training tokens
(:func:`unigram_loss`): what a model that ignores every context would reach; a trained model's dev loss below
it is what it learned from context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from probes.errors import InputError
from probes.results import Result, require_pandas

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TrainingCurves", "read_curves", "unigram_loss", "UNIGRAM_RULE"]

#: How the baseline is computed (recorded beside it).
UNIGRAM_RULE = ("cross-entropy (nats per predicted token) on the held-out targets of a unigram model fit on the "
                "training tokens, add-one smoothed over the vocabulary")


def unigram_loss(train_tokens: npt.ArrayLike, dev_targets: npt.ArrayLike, vocab_size: int) -> float:
    """Mean ``-log p(target)`` of ``dev_targets`` under add-one smoothed unigram counts of ``train_tokens``."""
    counts = np.bincount(np.asarray(train_tokens, dtype=np.int64).reshape(-1), minlength=vocab_size)[:vocab_size]
    log_p = np.log(counts + 1.0) - math.log(float(counts.sum()) + vocab_size)
    targets = np.asarray(dev_targets, dtype=np.int64).reshape(-1)
    return float(-log_p[targets].mean()) if targets.size else math.nan


@dataclass(frozen=True)
class TrainingCurves(Result):
    """Train and held-out loss at every checkpoint of a run, with the unigram baseline.

    Attributes:
        steps: ``(C,)`` checkpoint steps, ascending.
        tokens_seen: ``(C,)`` training tokens the model had seen at each.
        train_loss: ``(C,)`` training loss of the step (NaN at step 0: no step taken yet).
        dev_loss: ``(C,)`` held-out loss of the checkpoint (the same masked or causal targets at every step).
        unigram_dev_loss: the baseline (:func:`unigram_loss`) on the same held-out targets.
        objective: ``masked-LM`` or ``causal-LM``.
        rule: how the baseline was computed.
    """

    _shapes = {"tokens_seen": "C", "train_loss": "C", "dev_loss": "C", "steps": "C"}

    steps: npt.NDArray[np.int64]
    tokens_seen: npt.NDArray[np.int64]
    train_loss: npt.NDArray[np.float64]
    dev_loss: npt.NDArray[np.float64]
    unigram_dev_loss: float
    objective: str = "masked-LM"
    rule: str = UNIGRAM_RULE

    def to_pandas(self) -> pd.DataFrame:
        """One row per checkpoint: ``step``, ``tokens_seen``, ``train_loss``, ``dev_loss``, ``unigram_dev_loss``."""
        pandas = require_pandas()
        return pandas.DataFrame({"step": self.steps, "tokens_seen": self.tokens_seen, "train_loss": self.train_loss,
                                 "dev_loss": self.dev_loss,
                                 "unigram_dev_loss": np.full(len(self.steps), self.unigram_dev_loss)})

    def format(self) -> str:
        """A few lines for a terminal: the first and last held-out loss against the baseline."""
        if not len(self.steps):
            return "no checkpoints\n"
        return (f"held-out {self.objective} loss: {self.dev_loss[0]:.3f} at step {int(self.steps[0])}, "
                f"{self.dev_loss[-1]:.3f} at step {int(self.steps[-1])} ({int(self.tokens_seen[-1]):,} tokens seen); "
                f"unigram baseline {self.unigram_dev_loss:.3f}\n")


def read_curves(run: str | Path) -> TrainingCurves:
    """The curves of the run folder ``run``, from its checkpoints' ``training.json``.

    Raises:
        InputError: the run has no checkpoints, or a checkpoint's record is not one (naming the file and field).
    """
    from probes.extraction.trained_runs import list_checkpoints
    from probes.training.checkpoints import read_training

    found = list_checkpoints(run)
    if not found:
        raise InputError("expected a training run with checkpoints (checkpoints/step-NNNNNN/), found none",
                         path=run)
    records = [read_training(folder) for folder in found.values()]
    last = records[-1].run
    return TrainingCurves(
        steps=np.asarray(list(found), dtype=np.int64),
        tokens_seen=np.asarray([r.tokens_seen for r in records], dtype=np.int64),
        train_loss=np.asarray([math.nan if r.train_loss is None else r.train_loss for r in records],
                              dtype=np.float64),
        dev_loss=np.asarray([r.dev_loss for r in records], dtype=np.float64),
        unigram_dev_loss=float(last.unigram_dev_loss), objective=last.objective)
