"""The record of a training run, ``training.json``, as typed values: :class:`TrainingRecord` and
:class:`CheckpointRecord`.

The run folder's ``training.json`` (written before the first step, :mod:`probes.training.trainer`) is a
:class:`TrainingRecord`: the whole config, the data sources with their sha256, the tokenizer, the processes, the
unigram baseline and the rules behind the numbers. Each checkpoint's ``training.json`` is a
:class:`CheckpointRecord`: the run's record and, beside it, the step, the tokens seen and both losses. Both are
written and read only through these types (``to_dict`` / ``from_dict``): JSON with sorted keys and a two-space
indent (:func:`record_text`). The scheme, the seeds, the objective and (for an attention-only model) the
``attention_only_rule`` are written for a person to read; they are the config's (:attr:`TrainConfig.init`, ``seed``, ``data_seed``, ``arch``), so reading takes them from there.

A record that lacks a field, or holds one of the wrong type, is one :class:`~probes.errors.InputError` naming the
file and the field; keys a record does not know are passed over. No torch import.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probes.errors import ConfigError, InputError
from probes.result_checks import value_problems
from probes.training.config import TrainConfig
from probes.training.data import TextSource
from probes.training.schemes import InitScheme

__all__ = ["TrainingRecord", "CheckpointRecord", "DataRecord", "TokenizerRecord", "OptimizerRecord",
           "RECORD_TYPES", "record_text", "run_parts"]



def _fields(cls: type[Any], data: Any, where: str, path: str | Path | None, *, nested: tuple[str, ...] = (),
            flat: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of the record type ``cls`` from the JSON object ``data`` at the field path ``where`` ("" at the
    top), each one present and of its annotated type; else an InputError naming ``path`` and the field. The
    ``nested`` fields must be present too, and are left out for their own types to read; the ``flat`` ones are
    records whose fields sit beside these in ``data`` (not keys of it), and are left out."""
    prefix = f"{where}." if where else ""
    if not isinstance(data, Mapping):
        raise InputError(f"field {where or 'the record'!r}: expected a JSON object, found {type(data).__name__}",
                         path=path)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in flat]
    missing = [prefix + name for name in names if name not in data]
    if missing:
        raise InputError(f"expected the field(s) {', '.join(missing)}, found none", path=path)
    values = {name: data[name] for name in names if name not in nested}
    for problem in value_problems(cls, values, prefix=prefix):
        raise InputError(problem, path=path)
    return values


@dataclass(frozen=True)
class DataRecord:
    """What a run trained on and was held out on.

    Attributes:
        sources: every data file (treebank specs, then ``select_on``), with its sha256.
        train_sentences, dev_sentences: sentences trained on and held out.
        dev_rule: how the held-out part was chosen.
        train_blocks, dev_blocks: token blocks trained on, and held-out blocks evaluated at each checkpoint.
    """

    sources: tuple[TextSource, ...]
    train_sentences: int
    dev_sentences: int
    dev_rule: str
    train_blocks: int
    dev_blocks: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, in the order ``run.json`` shows it."""
        return {"sources": [s.describe() for s in self.sources], "train_sentences": self.train_sentences,
                "dev_sentences": self.dev_sentences, "dev_rule": self.dev_rule, "train_blocks": self.train_blocks,
                "dev_blocks": self.dev_blocks}

    @classmethod
    def from_dict(cls, data: Any, path: str | Path | None = None) -> DataRecord:
        """The record :meth:`to_dict` wrote (an InputError naming ``path`` and the field otherwise)."""
        values = _fields(cls, data, "data", path, nested=("sources",))
        sources = data.get("sources")
        if not isinstance(sources, list):
            raise InputError(f"field 'data.sources': expected a list, found {type(sources).__name__}", path=path)
        found = tuple(TextSource(**_fields(TextSource, s, f"data.sources[{k}]", path)) for k, s in enumerate(sources))
        return cls(sources=found, **values)


@dataclass(frozen=True)
class TokenizerRecord:
    """The run's tokenizer: the spec it came from, its kind, its size and what it was trained on (None: a base
    model's)."""

    spec: str
    kind: str
    vocab_size: int
    trained_on: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, in the order ``run.json`` shows it."""
        return {"spec": self.spec, "kind": self.kind, "vocab_size": self.vocab_size, "trained_on": self.trained_on}

    @classmethod
    def from_dict(cls, data: Any, path: str | Path | None = None) -> TokenizerRecord:
        """The record :meth:`to_dict` wrote (an InputError naming ``path`` and the field otherwise)."""
        return cls(**_fields(cls, data, "tokenizer", path))


@dataclass(frozen=True)
class OptimizerRecord:
    """The optimizer as ``TrainingArguments`` names it, its schedule and the gradient clipping."""

    name: str
    schedule: str
    max_grad_norm: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"name": self.name, "schedule": self.schedule, "max_grad_norm": self.max_grad_norm}

    @classmethod
    def from_dict(cls, data: Any, path: str | Path | None = None) -> OptimizerRecord:
        """The record :meth:`to_dict` wrote (an InputError naming ``path`` and the field otherwise)."""
        return cls(**_fields(cls, data, "optimizer", path))


@dataclass(frozen=True)
class TrainingRecord:
    """A training run's record (``OUT/training.json``; see the module).

    Attributes:
        config: the run's options (its scheme, seeds and objective are the config's: :attr:`scheme`,
            :attr:`objective`).
        data: the data trained on and held out.
        tokenizer: the run's tokenizer.
        processes: the processes of the launch (``torchrun``), each drawing its own blocks.
        unigram_dev_loss: the unigram baseline on the held-out targets; unigram_rule: how it was computed.
        tokens_rule: how tokens seen are counted.
        optimizer: the optimizer and its schedule.
    """

    config: TrainConfig
    data: DataRecord
    tokenizer: TokenizerRecord
    processes: int
    unigram_dev_loss: float
    unigram_rule: str
    tokens_rule: str
    optimizer: OptimizerRecord

    @property
    def scheme(self) -> InitScheme:
        """The initialisation scheme (the config's)."""
        return self.config.init

    @property
    def objective(self) -> str:
        """``masked-LM`` or ``causal-LM``: what the held-out loss measures (a task run: on the task's predictable
        positions only, and it says so)."""
        if self.config.task_spec is not None:
            return f"causal-LM ({self.config.task} task, predictable positions only)"
        return "masked-LM" if self.config.masked_lm else "causal-LM"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as ``training.json`` holds it."""
        return {"config": self.config.to_dict(), "scheme": self.scheme.describe(),
                "seeds": {"seed": self.config.seed, "data_seed": self.config.data_seed},
                "data": self.data.to_dict(), "tokenizer": self.tokenizer.to_dict(), "objective": self.objective,
                "processes": self.processes, "unigram_dev_loss": self.unigram_dev_loss,
                "unigram_rule": self.unigram_rule, "tokens_rule": self.tokens_rule,
                "optimizer": self.optimizer.to_dict(), **self._attention_only(), **self._task()}

    def _task(self) -> dict[str, Any]:
        """``task``: a task run's task (options, roles, loss and data rules), for a person to read (derived from the
        config); nothing for natural text, so a record without it is of text, as every record before tasks."""
        spec = self.config.task_spec
        return {} if spec is None else {"task": spec.describe()}

    def _attention_only(self) -> dict[str, str]:
        """``attention_only_rule``: how an attention-only model's MLP adds exactly 0 (written for a person, derived
        from the config: only for ``config.attention_only``, which a record without it holds as False)."""
        if not self.config.attention_only:
            return {}
        return {"attention_only_rule": self.config.family.attention_only_rule}

    @classmethod
    def from_dict(cls, data: Any, path: str | Path | None = None) -> TrainingRecord:
        """The record :meth:`to_dict` wrote.

        Raises:
            InputError: not a JSON object, a field missing or of the wrong type, a config
                :class:`TrainConfig` refuses (each naming ``path`` and the field).
        """
        parts = ("config", "data", "tokenizer", "optimizer")
        values = _fields(cls, data, "", path, nested=parts)
        config = data.get("config")
        if not isinstance(config, Mapping):
            raise InputError(f"field 'config': expected a JSON object of the run's options, found "
                             f"{type(config).__name__}", path=path)
        try:
            options = TrainConfig.from_dict(config)
        except (ConfigError, TypeError) as exc:
            raise InputError(f"field 'config': {exc}", path=path) from None
        return cls(config=options, data=DataRecord.from_dict(data.get("data"), path),
                   tokenizer=TokenizerRecord.from_dict(data.get("tokenizer"), path),
                   optimizer=OptimizerRecord.from_dict(data.get("optimizer"), path), **values)


@dataclass(frozen=True)
class CheckpointRecord:
    """A checkpoint's record (``checkpoints/step-NNNNNN/training.json``): the run's, and the step's numbers.

    Attributes:
        run: the run's record.
        step: the optimizer steps taken.
        tokens_seen: training tokens the model has seen (:attr:`TrainingRecord.tokens_rule`).
        train_loss: the training loss of that step (None at step 0: no step taken yet).
        dev_loss: the held-out loss of the checkpoint.
    """

    run: TrainingRecord
    step: int
    tokens_seen: int
    train_loss: float | None
    dev_loss: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as the checkpoint's ``training.json`` holds it (the run's fields beside the step's)."""
        return {**self.run.to_dict(), "step": self.step, "tokens_seen": self.tokens_seen,
                "train_loss": self.train_loss, "dev_loss": self.dev_loss}

    @classmethod
    def from_dict(cls, data: Any, path: str | Path | None = None) -> CheckpointRecord:
        """The record :meth:`to_dict` wrote (an InputError naming ``path`` and the field otherwise)."""
        values = _fields(cls, data, "", path, flat=("run",))
        if values["step"] < 0:
            raise InputError(f"field 'step': expected a whole number >= 0, found {values['step']!r}", path=path)
        if values["tokens_seen"] < 0:
            raise InputError(f"field 'tokens_seen': expected a whole number >= 0, found {values['tokens_seen']!r}",
                             path=path)
        return cls(run=TrainingRecord.from_dict(data, path), **values)


#: Every type a :class:`TrainingRecord` holds (with the record types themselves), for :func:`probes.results.saveable`.
RECORD_TYPES: tuple[type, ...] = (TrainingRecord, CheckpointRecord, DataRecord, TokenizerRecord, OptimizerRecord,
                                  TextSource, TrainConfig, InitScheme)


def run_parts(record: TrainingRecord | None) -> dict[str, Any]:
    """What ``run.json`` repeats of a run's record, JSON-ready and in its order: ``data``, ``scheme`` and
    ``tokenizer`` (each None without a record)."""
    if record is None:
        return {"data": None, "scheme": None, "tokenizer": None}
    return {"data": record.data.to_dict(), "scheme": record.scheme.describe(), "tokenizer": record.tokenizer.to_dict()}


def record_text(record: TrainingRecord | CheckpointRecord) -> str:
    """``training.json``'s text: sorted keys, two-space indent, a final newline."""
    return json.dumps(record.to_dict(), indent=2, sort_keys=True) + "\n"
