"""The data of a task run (``probes train --task induction|roles``), beside the corpus of a text run
(:mod:`probes.training.data`): its tokenizer, its training examples and its held-out batches.

* :func:`task_tokenizer`: a word-level tokenizer over the family's special tokens (first, as a trained tokenizer
  holds them) and the task's tokens ``t0 .. t{V-1}`` and markers (:func:`probes.training.tasks.task_token_names`),
  split at whitespace; saved and reloaded like any model's, so a checkpoint reads ``"t3 t7 t3"`` as three tokens.
  A task's token ``k`` is the model's ``k + len(special tokens)``.
* :class:`TaskExamples`: training example ``i`` is :meth:`TaskSpec.example` ``(data_seed, TRAIN_STREAM, i)``, drawn
  when asked for (nothing stored; a resumed run sees the same examples), with labels ``-100`` outside the loss
  mask, so the ``Trainer``'s loss is the mean over the predictable positions only; one fresh sequence per example
  (``steps x batch size x processes`` of them).
* :func:`task_dev_batches`: the held-out sequences (stream :data:`~probes.training.tasks.DEV_STREAM`), labelled
  the same way, so :func:`~probes.training.callbacks.held_out_loss` measures the same positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.training.callbacks import SeededCollator
from probes.training.config import TrainConfig
from probes.training.tasks import DEV_STREAM, TRAIN_STREAM, TaskBatch, TaskSpec, task_token_names

__all__ = ["task_tokenizer", "TaskExamples", "TaskCollator", "task_dev_batches", "labelled", "task_texts",
           "TOKENIZER_KIND"]

#: The kind of a task run's tokenizer, as ``training.json`` names it.
TOKENIZER_KIND = "word-level: the family's special tokens, then the task's tokens and markers"


def _spec(config: TrainConfig) -> TaskSpec:
    spec = config.task_spec
    if spec is None:
        raise ConfigError(f"--task: expected induction or roles for the data of a task run, found {config.task!r}")
    return spec


def task_tokenizer(config: TrainConfig) -> Any:
    """The run's tokenizer (see the module), as a :class:`transformers.PreTrainedTokenizerFast`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    spec, family = _spec(config), config.family
    if not family.byte_level or len(family.special_tokens) != 2:
        raise ConfigError(f"--arch: expected a causal LM with an end-of-text and a padding token for --task "
                          f"{config.task}, found {config.arch}")
    end, pad = family.special_tokens
    names = [end, pad, *task_token_names(spec.vocab, spec.markers)]
    tok = Tokenizer(models.WordLevel({name: k for k, name in enumerate(names)}, unk_token=end))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=config.seq_len, bos_token=end,
                                   eos_token=end, unk_token=end, pad_token=pad)


def labelled(batch: TaskBatch, offset: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(input_ids, labels)`` of ``batch`` in the model's ids (task ids + ``offset``): labels ``-100`` where the
    loss mask is off."""
    ids = batch.ids + offset
    return ids, np.where(batch.loss_mask, ids, -100)


class TaskExamples:
    """The training examples of a task run as a map-style dataset (see the module)."""

    def __init__(self, spec: TaskSpec, data_seed: int, count: int, offset: int) -> None:
        self.spec, self.data_seed, self.count, self.offset = spec, data_seed, count, offset

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> dict[str, Any]:
        import torch

        ids, labels = labelled(self.spec.example(self.data_seed, TRAIN_STREAM, int(i)), self.offset)
        return {"input_ids": torch.from_numpy(ids[0]), "labels": torch.from_numpy(labels[0])}


@dataclass
class TaskCollator(SeededCollator):
    """Stacks the examples of :class:`TaskExamples` (inputs and their masked labels); counts batches like
    :class:`SeededCollator` (a task draws no masks: its examples are fixed by their index)."""

    def torch_call(self, examples: list[Any]) -> dict[str, Any]:
        import torch

        self.batches += 1
        return {key: torch.stack([e[key] for e in examples]) for key in ("input_ids", "labels")}


def task_dev_batches(config: TrainConfig, offset: int, count: int) -> list[dict[str, Any]]:
    """The ``count`` held-out sequences in batches of ``--batch-size``, labelled as the training examples."""
    import torch

    spec = _spec(config)
    rows = [labelled(spec.example(config.data_seed, DEV_STREAM, i), offset) for i in range(count)]
    out = []
    for start in range(0, count, config.batch_size):
        part = rows[start:start + config.batch_size]
        out.append({"input_ids": torch.from_numpy(np.concatenate([r[0] for r in part])),
                    "labels": torch.from_numpy(np.concatenate([r[1] for r in part]))})
    return out


def task_texts(config: TrainConfig, count: int) -> list[str]:
    """The first ``count`` held-out sequences as text the run's tokenizer reads back token for token
    (``"t3 t7 <previous> t7 ..."``), for what takes sentences (the head symmetry)."""
    spec = _spec(config)
    names = task_token_names(spec.vocab, spec.markers)
    return [" ".join(names[k] for k in spec.example(config.data_seed, DEV_STREAM, i).ids[0]) for i in range(count)]
