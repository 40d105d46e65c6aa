"""Every option of a training run, checked once: :class:`TrainConfig`.

A config is recorded whole in every checkpoint's ``training.json`` and in the run folder, so a run can be
resumed only with the options it started with (:meth:`TrainConfig.resume_key`), and any checkpoint says
exactly how it was made. Each bad value is one :class:`~probes.errors.ConfigError` naming the option (as
``probes train`` spells it), what was expected and what was found. The initialisation scheme is parsed here, once,
into an :class:`~probes.training.schemes.InitScheme` that every layer below takes as it is. What each architecture
is (its config, objective, tokenizer and limits) is its row of :data:`probes.extraction.families.FAMILIES`
(:attr:`TrainConfig.family`). No torch import.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from probes.errors import ConfigError
from probes.extraction.families import Sizes, Trainable, trainable_families
from probes.training.schemes import InitScheme
from probes.training.tasks import ROLES, TASKS, TEXT, TaskSpec

__all__ = ["TrainConfig", "whole_number", "ARCHS", "CHECKPOINT_RULES", "TRAIN_TOKENIZER", "BYTE_ALPHABET", "RESUME_EXEMPT",
           "MAX_LAYERS", "MAX_HEADS", "MAX_HIDDEN", "MAX_INTERMEDIATE", "MAX_SEQ_LEN", "MAX_BATCH_SIZE", "MAX_VOCAB",
           "MAX_STEPS", "checkpoint_steps", "ATTENTION_ONLY_INTERMEDIATE", "LATER_OPTIONS", "hidden_size"]

#: Architectures ``probes train`` builds (a BERT-style masked-LM encoder and two causal LMs): the families of
#: :data:`probes.extraction.families.FAMILIES` with a ``training`` row, as the table held them at import.
ARCHS: tuple[str, ...] = tuple(trainable_families())
#: Bytes in a byte-level BPE alphabet: every vocabulary holds them all, so no input is ever unknown.
BYTE_ALPHABET = 256
#: Where checkpoints are written: ``log2`` = steps 0, 1, 2, 4, 8, ... and the last; ``log2+50`` = those and every
#: 50th step (role scores over training at a resolution that shows a phase change).
CHECKPOINT_RULES: tuple[str, ...] = ("log2", "log2+50")
_EVERY = {"log2": 0, "log2+50": 50}
#: Options a resumed run may change: they say how long to run, not what is trained.
RESUME_EXEMPT: tuple[str, ...] = ("max_minutes",)
#: ``--tokenizer train:VOCAB``: train a tokenizer of VOCAB entries on the training text.
TRAIN_TOKENIZER = "train:"
# The largest sizes a run may ask for: far above any model trained from scratch on a treebank, so a larger value
# is a typo, refused before anything is allocated (the memory a size needs is checked separately, against the
# machine: :mod:`probes.training.memory`).
#: Most ``--layers``.
MAX_LAYERS = 1024
#: Most ``--heads`` (and ``--kv-heads``).
MAX_HEADS = 1024
#: Most ``--hidden``.
MAX_HIDDEN = 65536
#: Most ``--intermediate``.
MAX_INTERMEDIATE = 4 * MAX_HIDDEN
#: Most ``--seq-len``.
MAX_SEQ_LEN = 65536
#: Most ``--batch-size``.
MAX_BATCH_SIZE = 65536
#: Most VOCAB of ``--tokenizer train:VOCAB``.
MAX_VOCAB = 1 << 20
#: Most ``--steps`` (and ``--warmup``): what the other commands take as a count.
MAX_STEPS = 1_000_000_000
#: The MLP width of an ``--attention-only`` model: the smallest the families' configs take (its output is 0).
ATTENTION_ONLY_INTERMEDIATE = 1
#: Options added after ``training.json`` was first written, with their defaults: :meth:`TrainConfig.to_dict` leaves
#: one out while it holds its default, so an older record writes back byte for byte (a missing one reads as it).
LATER_OPTIONS: dict[str, Any] = {"attention_only": False, "head_dim": None}
#: The task options (``--task`` and the task's own), later options too: a record without them is of natural text.
TASK_OPTIONS: dict[str, Any] = {"task": TEXT, "task_vocab": 64, "period_min": 8, "period_max": 32,
                                "task_roles": len(ROLES)}
LATER_OPTIONS.update(TASK_OPTIONS)
#: ``--tokenizer`` of a task run: the task's own vocabulary and the family's special tokens.
TASK_TOKENIZER = "task"


def checkpoint_steps(rule: str, steps: int) -> list[int]:
    """The steps ``rule`` writes a checkpoint at, for a run of ``steps`` steps (``log2``: 0, 1, 2, 4, ... and
    ``steps``; ``log2+50``: those and every multiple of 50)."""
    if rule not in CHECKPOINT_RULES:
        raise ConfigError(f"--checkpoints: expected one of {', '.join(CHECKPOINT_RULES)}, found {rule!r}")
    out, power = {0, steps}, 1
    while power <= steps:
        out.add(power)
        power *= 2
    every = _EVERY[rule]
    if every:
        out.update(range(every, steps, every))
    return sorted(out)


def hidden_size(heads: int, hidden: int | None, head_dim: int | None) -> int:
    """The hidden size of ``--heads`` with either ``--hidden`` or ``--head-dim`` (hidden = heads x head size).

    Raises:
        ConfigError: both given or neither (naming both options), or a product past :data:`MAX_HIDDEN`.
    """
    if hidden is not None and head_dim is None:
        return hidden
    if head_dim is None or hidden is not None:
        found = "both" if hidden is not None else "neither"
        raise ConfigError(f"--hidden, --head-dim: expected one of them (hidden = heads x head size), found {found}")
    _whole("--heads", heads, 1, MAX_HEADS)
    _whole("--head-dim", head_dim, 1, MAX_HIDDEN)
    if heads * head_dim > MAX_HIDDEN:
        raise ConfigError(f"--head-dim: expected --heads x --head-dim <= {MAX_HIDDEN}, found {heads} x {head_dim} = "
                          f"{heads * head_dim}")
    return heads * head_dim


def parse_init(init: InitScheme | str) -> InitScheme:
    """``init`` as an :class:`InitScheme`: its text parsed (the one place it is), a scheme kept as it is."""
    if isinstance(init, InitScheme):
        return init
    try:
        return InitScheme.parse(init)
    except ConfigError as exc:
        raise ConfigError(f"--init: {exc}") from None


def _short(value: Any, most: int = 60) -> str:
    """``repr(value)``, cut to ``most`` characters (an error line stays one short line)."""
    try:
        text = repr(value)
    except ValueError:  # an int of more than 4300 digits has no repr
        text = f"a whole number of about {int(value.bit_length() * 0.30103)} digits"
    return text if len(text) <= most else text[:most] + "..."


def whole_number(name: str, value: Any, least: int = 1) -> int:
    """``value`` as an int when it is a whole number >= ``least`` (not a bool); else a ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < least:
        raise ConfigError(f"{name}: expected a whole number >= {least}, found {value!r}")
    return int(value)


def _whole(flag: str, value: Any, least: int, most: int | None = None) -> None:
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= least
    if not ok or (most is not None and int(value) > most):
        span = f"from {least} to {most}" if most is not None else f">= {least}"
        raise ConfigError(f"{flag}: expected a whole number {span}, found {_short(value)}")


def _number(flag: str, value: Any, low: float, high: float | None, *, low_open: bool = False,
            high_open: bool = True) -> None:
    try:  # math.isfinite of an int past a float's range raises OverflowError
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:
        ok = False
    ok = ok and (value > low if low_open else value >= low)
    ok = ok and (high is None or (value < high if high_open else value <= high))
    if not ok:
        left = f"> {low}" if low_open else f">= {low}"
        right = "" if high is None else (f" and < {high}" if high_open else f" and <= {high}")
        raise ConfigError(f"{flag}: expected a number {left}{right}, found {_short(value)}")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """The options of one training run (``probes train``), validated on construction.

    Attributes:
        arch: ``bert`` (masked-LM encoder), ``gpt2`` or ``llama`` (causal LMs).
        layers, heads, hidden: the size; head size = ``hidden / heads`` (``heads`` must divide ``hidden``).
        intermediate: the MLP's width (None: ``4 * hidden``; :data:`ATTENTION_ONLY_INTERMEDIATE` when
            ``attention_only``).
        kv_heads: key/value heads of Llama's grouped-query attention (None: one per head).
        attention_only: blocks without an MLP: the family's own model with the MLP's output exactly 0 and never
            trained (:attr:`~probes.extraction.families.Trainable.attention_only_rule`); False in older records.
        head_dim: the head size the run fixed (``--head-dim``; ``hidden`` is then ``heads x head_dim``, see
            :func:`hidden_size`); None: ``hidden`` was given, head size ``hidden / heads``.
        init: the initialisation scheme; given as its text (``identical+noise:0.01``), it is parsed on
            construction, so the field always holds an :class:`~probes.training.schemes.InitScheme`.
        attention_dropout: dropout on attention probabilities (0: symmetric starts stay symmetric).
        hidden_dropout: every other dropout (embeddings, residual, MLP); Llama has none, so 0 there.
        seed: seed of the initialisation (and of the dropout masks); data_seed: of the data order and masks.
        steps, batch_size, seq_len, learning_rate, warmup, weight_decay: the optimisation (AdamW, linear decay).
        tokenizer: ``train:VOCAB`` (trained on the training text) or a base model's name or folder.
        treebank: the training data: treebank specs (``sample:``, ``ud:``, files) or ``.txt`` files.
        select_on: the held-out data (None: a fixed tenth of ``treebank`` chosen by hashing sentence ids).
        checkpoints: where checkpoints are written (``log2``).
        max_minutes: stop cleanly at a checkpoint after this long (None: no limit); not part of the run's
            identity, so a run stopped by it resumes with another limit.
        task: ``text`` (``treebank``, the default), ``induction`` or ``roles`` (:mod:`probes.training.tasks`:
            no data files, the tokenizer ``task``); task_vocab, period_min, period_max, task_roles: the task's
            options (:class:`~probes.training.tasks.TaskSpec`); each at its default for ``text``.
    """

    arch: str
    layers: int
    heads: int
    hidden: int
    treebank: tuple[str, ...] = ()
    init: InitScheme = InitScheme("independent")
    intermediate: int | None = None
    kv_heads: int | None = None
    attention_only: bool = False
    head_dim: int | None = None
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    seed: int = 0
    data_seed: int = 0
    steps: int = 1000
    batch_size: int = 32
    seq_len: int = 64
    learning_rate: float = 1e-3
    warmup: int = 0
    weight_decay: float = 0.0
    tokenizer: str = "train:4000"
    select_on: str | None = None
    checkpoints: str = "log2"
    max_minutes: float | None = None
    task: str = TEXT
    task_vocab: int = 64
    period_min: int = 8
    period_max: int = 32
    task_roles: int = len(ROLES)

    def __post_init__(self) -> None:
        treebank = (self.treebank,) if isinstance(self.treebank, str) else tuple(self.treebank)
        object.__setattr__(self, "treebank", treebank)
        archs = tuple(trainable_families())
        if self.arch not in archs:
            raise ConfigError(f"--arch: expected one of {', '.join(archs)}, found {_short(self.arch)}")
        self._check_size()
        self._check_training()
        if self._check_task():  # a task run reads no data files
            self._check_data()

    def _check_size(self) -> None:
        _whole("--layers", self.layers, 1, MAX_LAYERS)
        _whole("--heads", self.heads, 1, MAX_HEADS)
        _whole("--hidden", self.hidden, 1, MAX_HIDDEN)
        if self.hidden % self.heads:
            raise ConfigError(f"--heads: expected a divisor of --hidden {self.hidden} (head size = hidden / heads), "
                              f"found {self.heads}")
        if self.head_dim is not None:
            _whole("--head-dim", self.head_dim, 1, MAX_HIDDEN)
            if self.hidden != self.heads * self.head_dim:
                raise ConfigError(f"--hidden, --head-dim: expected --hidden = --heads x --head-dim = "
                                  f"{self.heads * self.head_dim} (give one of them), found --hidden {self.hidden}")
        if not isinstance(self.attention_only, bool):
            raise ConfigError(f"--attention-only: expected true or false, found {_short(self.attention_only)}")
        if self.intermediate is not None:
            _whole("--intermediate", self.intermediate, 1, MAX_INTERMEDIATE)
            if self.attention_only:
                raise ConfigError(f"--intermediate: expected none with --attention-only (no MLP), found "
                                  f"{self.intermediate}")
        if self.attention_only and not self.family.mlp_output:
            raise ConfigError(f"--attention-only: expected an --arch whose families row names its MLP, found "
                              f"{self.arch}")
        if self.kv_heads is not None:
            if not self.family.grouped_query:
                grouped = ", ".join(name for name, row in trainable_families().items() if row.grouped_query)
                raise ConfigError(f"--kv-heads: expected none for --arch {self.arch} (only {grouped} has "
                                  f"grouped-query attention), found {self.kv_heads!r}")
            _whole("--kv-heads", self.kv_heads, 1, MAX_HEADS)
            if self.heads % self.kv_heads:
                raise ConfigError(f"--kv-heads: expected a divisor of --heads {self.heads}, found {self.kv_heads}")
        object.__setattr__(self, "init", parse_init(self.init))  # parsed here, once
        _number("--attention-dropout", self.attention_dropout, 0.0, 1.0)
        _number("--hidden-dropout", self.hidden_dropout, 0.0, 1.0)
        if not self.family.hidden_dropout and self.hidden_dropout:
            raise ConfigError(f"--hidden-dropout: expected 0 for --arch {self.arch} (it has no hidden dropout), "
                              f"found {self.hidden_dropout!r}")

    def _check_training(self) -> None:
        _whole("--seed", self.seed, 0, 2**32 - 1)
        _whole("--data-seed", self.data_seed, 0, 2**32 - 1)
        _whole("--steps", self.steps, 1, MAX_STEPS)
        _whole("--batch-size", self.batch_size, 1, MAX_BATCH_SIZE)
        _whole("--seq-len", self.seq_len, 4, MAX_SEQ_LEN)
        _number("--learning-rate", self.learning_rate, 0.0, None, low_open=True)
        _whole("--warmup", self.warmup, 0, self.steps)
        _number("--weight-decay", self.weight_decay, 0.0, None)
        checkpoint_steps(self.checkpoints, self.steps)
        if self.max_minutes is not None:
            _number("--max-minutes", self.max_minutes, 0.0, None, low_open=True)

    def _check_task(self) -> bool:
        """Check ``task`` and its options; True for natural text (whose data files are checked next)."""
        if self.task not in TASKS:
            raise ConfigError(f"--task: expected one of {', '.join(TASKS)}, found {_short(self.task)}")
        if self.task == TEXT:
            for name, default in TASK_OPTIONS.items():
                if name != "task" and getattr(self, name) != default:
                    raise ConfigError(f"--{name.replace('_', '-')}: expected {default!r} for --task text (an option "
                                      f"of the induction and roles tasks), found {_short(getattr(self, name))}")
            return True
        if self.masked_lm:
            causal = ", ".join(name for name, row in trainable_families().items() if not row.masked_lm)
            raise ConfigError(f"--arch: expected a causal LM ({causal}) for --task {self.task} (the loss is on the "
                              f"positions the sequence so far predicts), found {self.arch}")
        if self.treebank or self.select_on is not None:
            flag, found = ("--treebank", list(self.treebank)) if self.treebank else ("--select-on", self.select_on)
            raise ConfigError(f"{flag}: expected none for --task {self.task} (the task draws its own sequences), "
                              f"found {_short(found)}")
        if self.tokenizer == "train:4000":  # the default of --tokenizer: the task's own vocabulary instead
            object.__setattr__(self, "tokenizer", TASK_TOKENIZER)
        if self.tokenizer != TASK_TOKENIZER:
            raise ConfigError(f"--tokenizer: expected none for --task {self.task} (its own vocabulary), found "
                              f"{_short(self.tokenizer)}")
        return self.task_spec is None  # False; TaskSpec checks the task's options, each ConfigError naming one

    @property
    def task_spec(self) -> TaskSpec | None:
        """The synthetic task the run trains on (its options); None for natural text."""
        if self.task == TEXT:
            return None
        return TaskSpec(self.task, vocab=self.task_vocab, seq_len=self.seq_len, period_min=self.period_min,
                        period_max=self.period_max, roles=self.task_roles)

    def _check_data(self) -> None:
        if not self.treebank or not all(isinstance(t, str) and t.strip() for t in self.treebank):
            raise ConfigError(f"--treebank: expected one or more data specs (sample:, ud:, files), "
                              f"found {list(self.treebank)!r}")
        if self.select_on is not None and (not isinstance(self.select_on, str) or not self.select_on.strip()):
            raise ConfigError(f"--select-on: expected a data spec (sample:, ud:, a file), found {self.select_on!r}")
        if not isinstance(self.tokenizer, str) or not self.tokenizer.strip():
            raise ConfigError(f"--tokenizer: expected train:VOCAB or a base model, found {self.tokenizer!r}")
        vocab = self.train_vocab
        if self.tokenizer.startswith(TRAIN_TOKENIZER) and vocab is None:
            raise ConfigError(f"--tokenizer: expected train:VOCAB with VOCAB a whole number, found "
                              f"{_short(self.tokenizer)}")
        if vocab is not None:
            if vocab > MAX_VOCAB:
                raise ConfigError(f"--tokenizer: expected train:VOCAB with VOCAB <= {MAX_VOCAB}, found {vocab}")
            specials, byte_level = len(self.family.special_tokens), self.family.byte_level
            least = specials + (BYTE_ALPHABET if byte_level else 1)
            if vocab < least:
                kind = f"{BYTE_ALPHABET} bytes" if byte_level else "one piece"
                raise ConfigError(f"--tokenizer: expected train:VOCAB with VOCAB >= {least} for --arch {self.arch} "
                                  f"({kind} and {specials} special tokens), found {vocab}")

    # ------------------------------------------------------------------------------------------ derived
    @property
    def family(self) -> Trainable:
        """How the architecture is built and trained: its row of :data:`probes.extraction.families.FAMILIES`."""
        return trainable_families()[self.arch]

    @property
    def head_size(self) -> int:
        """``hidden / heads``."""
        return self.hidden // self.heads

    @property
    def intermediate_size(self) -> int:
        """The MLP's width: :data:`ATTENTION_ONLY_INTERMEDIATE` when ``attention_only``, else ``intermediate``,
        else ``4 * hidden``."""
        if self.attention_only:
            return ATTENTION_ONLY_INTERMEDIATE
        return self.intermediate if self.intermediate is not None else 4 * self.hidden

    @property
    def masked_lm(self) -> bool:
        """Whether the objective is masked-LM (``bert``) rather than causal-LM."""
        return self.family.masked_lm

    def sizes(self, vocab: int) -> Sizes:
        """The model's sizes over a vocabulary of ``vocab`` entries (key/value heads: one per head unless given)."""
        return Sizes(layers=self.layers, heads=self.heads, hidden=self.hidden, intermediate=self.intermediate_size,
                     kv_heads=self.kv_heads or self.heads, positions=self.seq_len, vocab=vocab,
                     attention_dropout=self.attention_dropout, hidden_dropout=self.hidden_dropout)

    @property
    def train_vocab(self) -> int | None:
        """VOCAB of ``train:VOCAB``; None for a base model's tokenizer."""
        if not self.tokenizer.startswith(TRAIN_TOKENIZER):
            return None
        text = self.tokenizer[len(TRAIN_TOKENIZER):].strip()
        # ASCII digits only ('²'.isdigit() holds, int() refuses it), and few of them (int() refuses 4300+)
        return int(text) if text.isascii() and text.isdigit() and len(text) <= 12 else None

    def checkpoint_steps(self) -> list[int]:
        """The steps a checkpoint is written at."""
        return checkpoint_steps(self.checkpoints, self.steps)

    # ------------------------------------------------------------------------------------------ records
    def to_dict(self) -> dict[str, Any]:
        """Every option, JSON-ready (``treebank`` as a list, ``init`` as its text; an option of
        :data:`LATER_OPTIONS` only when it is not its default)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in LATER_OPTIONS or getattr(self, f.name) != LATER_OPTIONS[f.name]}
        out["treebank"] = list(self.treebank)
        out["init"] = self.init.text
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """The config :meth:`to_dict` wrote; a ConfigError naming an unknown key."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"training config: expected keys among {', '.join(sorted(known))}, found {unknown}")
        values: dict[str, Any] = {k: tuple(v) if k == "treebank" else v for k, v in data.items()}
        return cls(**values)

    def resume_key(self) -> dict[str, Any]:
        """The options a resumed run must share with the run it continues (all but ``max_minutes``; those of
        :data:`LATER_OPTIONS` too, at their defaults)."""
        full = {**self.to_dict(), **{k: getattr(self, k) for k in LATER_OPTIONS}}
        return {k: v for k, v in full.items() if k not in RESUME_EXEMPT}

    def differences(self, other: TrainConfig) -> list[str]:
        """``--name: A -> B`` for every option of :meth:`resume_key` that differs between ``self`` and ``other``."""
        mine, theirs = self.resume_key(), other.resume_key()
        return [f"--{k.replace('_', '-')}: {mine[k]!r} -> {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]
