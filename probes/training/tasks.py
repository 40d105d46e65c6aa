"""Tasks whose attention roles are known, as data sources of ``probes train`` beside natural text.

Each task draws sequences of token ids in its own small vocabulary (``0 .. vocab - 1`` ordinary tokens, then a
marker token per role for ``roles``), deterministically from a seed: :meth:`TaskSpec.generate` of the same seed
gives the same arrays. A run draws training example ``i`` from the seed ``(data_seed, TRAIN_STREAM, i)`` and its
held-out examples from ``(data_seed, DEV_STREAM, i)`` (:meth:`TaskSpec.example`), so the data need no storage and a
resumed run sees exactly the examples it would have seen. Pure numpy, no torch.

Every sequence comes with its loss mask (the positions a causal model can predict from what it has seen) and,
for each predicted position ``t``, the query ``t - 1`` (the position whose output predicts it), the role that
predicts it and the role's ideal key: the position whose token the target copies (``ids[t] == ids[key]``).
:meth:`TaskBatch.role_maps` turns them into each role's ideal attention map (query x key, one-hot rows where the
role applies).

* ``induction``: ``vocab`` ordinary tokens drawn uniformly (with replacement) form a block of a random period
  ``P`` drawn per sequence from ``[period_min, period_max]``; the block repeats to ``seq_len``. Position ``t >= P``
  copies ``t - P``; it is predictable once the period is revealed, i.e. for ``t >= P + 1`` (at ``t = P`` the first
  repeat has not been seen yet, so the mask leaves it out). One role, ``induction``: query ``t - 1`` attends to
  key ``t - P``, the token after the earlier copy of the query's token. A fixed period would let a positional
  shortcut solve the task, which is why it is drawn per sequence.
* ``roles``: random ordinary tokens, with marker tokens spaced through them; a marker names a role and the token
  after it (the answer, the masked position) is the token that role points to, seen from the marker's position
  ``q``: ``previous`` (``q - 1``), ``two_back`` (``q - 2``), ``first`` (position 0), ``induction`` (the token after
  the last earlier copy of ``ids[q - 1]``, the token before the marker). The first ``roles`` of :data:`ROLES` are
  used, each drawn uniformly per marker. Layout: the first marker at position 3 to 5; after each answer at least
  two plain tokens before the next marker (gap drawn from 2 to 4), so ``q - 1`` and ``q - 2`` are never a marker
  or an answer. For ``induction`` the token before the marker is re-drawn as a copy of an earlier ordinary token
  when the sequence holds no usable earlier copy (none, one right before it, or one followed by a marker); when
  eight tries find none, that marker names ``previous`` instead. Every role is a copy from one key, so an
  attention-only transformer can solve it (``induction`` needs a previous-token head in an earlier layer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError

__all__ = ["TASKS", "TEXT", "ROLES", "INDUCTION_ROLES", "TaskSpec", "TaskBatch", "TRAIN_STREAM", "DEV_STREAM",
           "MAX_TASK_VOCAB", "task_token_names", "LOSS_RULES", "DATA_RULE"]

#: ``--task`` values: natural text (the default) and the two synthetic tasks.
TEXT = "text"
TASKS: tuple[str, ...] = (TEXT, "induction", "roles")
#: The roles of the ``roles`` task, in order (``--task-roles K`` uses the first K).
ROLES: tuple[str, ...] = ("previous", "two_back", "first", "induction")
#: The one role of the ``induction`` task.
INDUCTION_ROLES: tuple[str, ...] = ("induction",)
#: Seed streams of a run's training and held-out examples.
TRAIN_STREAM, DEV_STREAM = 0, 1
#: Most ``--task-vocab``.
MAX_TASK_VOCAB = 1 << 16
_PLANT_TRIES = 8
#: What the loss of each task is measured on (recorded in ``training.json``).
LOSS_RULES: dict[str, str] = {
    "induction": "mean cross-entropy on the predictable positions only: t >= P + 1 (copies of t - P once the "
                 "period P has been seen)",
    "roles": "mean cross-entropy on the answers only (the token after each marker)"}
#: How a run draws its sequences (recorded in ``training.json``).
DATA_RULE = ("example i of a run: TaskSpec.generate((data_seed, stream, i), 1), stream 0 for training (one fresh "
             "sequence per example), 1 for the held-out sequences")


def task_token_names(vocab: int, markers: int) -> list[str]:
    """The tokens of a task vocabulary as a tokenizer spells them: ``t0 .. t{vocab-1}``, then a marker per role."""
    return [f"t{k}" for k in range(vocab)] + [f"<{name}>" for name in ROLES[:markers]]


@dataclass(frozen=True)
class TaskBatch:
    """Sequences of a task with what is known about them.

    Attributes:
        ids: ``(N, T)`` token ids in the task's vocabulary.
        loss_mask: ``(N, T)`` the predicted positions (a causal model can infer the token from the ones before).
        role_of: ``(N, T)`` at query ``q`` (predicting ``q + 1``): the index of the role that predicts it in
            :attr:`role_names`, ``-1`` where none does.
        key_of: ``(N, T)`` at query ``q``: the role's ideal key (``ids[q + 1] == ids[key]``), ``-1`` where none.
        role_names: the task's roles.
        periods: ``(N,)`` each sequence's period (``induction``); None for the other tasks.
    """

    ids: npt.NDArray[np.int64]
    loss_mask: npt.NDArray[np.bool_]
    role_of: npt.NDArray[np.int64]
    key_of: npt.NDArray[np.int64]
    role_names: tuple[str, ...]
    periods: npt.NDArray[np.int64] | None = None

    def role_maps(self) -> npt.NDArray[np.float64]:
        """``(N, R, T, T)``: each role's ideal attention map (query x key), one-hot rows where the role applies,
        zero rows elsewhere."""
        n, t = self.ids.shape
        out = np.zeros((n, len(self.role_names), t, t), dtype=np.float64)
        seq, query = np.nonzero(self.role_of >= 0)
        out[seq, self.role_of[seq, query], query, self.key_of[seq, query]] = 1.0
        return out


def _whole(flag: str, value: object, least: int, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not least <= int(value) <= most:
        raise ConfigError(f"{flag}: expected a whole number from {least} to {most}, found {value!r}")
    return int(value)


@dataclass(frozen=True)
class TaskSpec:
    """One synthetic task and its options, checked on construction (each bad value a ConfigError naming the
    ``probes train`` option).

    Attributes:
        name: ``induction`` or ``roles``.
        vocab: ordinary tokens (``--task-vocab``).
        seq_len: tokens per sequence (``--seq-len``).
        period_min, period_max: the range of the period (``induction``; ``--period-min``, ``--period-max``).
        roles: how many of :data:`ROLES` the ``roles`` task uses (``--task-roles``).
    """

    name: str
    vocab: int = 64
    seq_len: int = 64
    period_min: int = 8
    period_max: int = 32
    roles: int = len(ROLES)

    def __post_init__(self) -> None:
        if self.name not in TASKS[1:]:
            raise ConfigError(f"--task: expected one of {', '.join(TASKS[1:])} for a task's data, found {self.name!r}")
        _whole("--task-vocab", self.vocab, 2, MAX_TASK_VOCAB)
        _whole("--period-min", self.period_min, 1, MAX_TASK_VOCAB)
        _whole("--period-max", self.period_max, self.period_min, MAX_TASK_VOCAB)
        _whole("--task-roles", self.roles, 1, len(ROLES))
        least = self.period_max + 2 if self.name == "induction" else 6
        why = (f"--period-max {self.period_max} + 2, so every sequence has a predicted position"
               if self.name == "induction" else "room for a marker and its answer")
        if not isinstance(self.seq_len, int) or self.seq_len < least:
            raise ConfigError(f"--seq-len: expected at least {least} for --task {self.name} ({why}), "
                              f"found {self.seq_len!r}")

    def describe(self) -> dict[str, Any]:
        """JSON-ready, for ``training.json``: the options, the roles, what the loss is measured on and how the
        sequences are drawn."""
        out: dict[str, Any] = {"name": self.name, "vocab": self.vocab, "markers": self.markers,
                               "seq_len": self.seq_len, "roles": list(self.role_names), "loss_rule": LOSS_RULES[self.name],
                               "data_rule": DATA_RULE}
        if self.name == "induction":
            out.update(period_min=self.period_min, period_max=self.period_max)
        return out

    @property
    def role_names(self) -> tuple[str, ...]:
        """The task's roles, in the order of :attr:`TaskBatch.role_of`."""
        return INDUCTION_ROLES if self.name == "induction" else ROLES[:self.roles]

    @property
    def markers(self) -> int:
        """Marker tokens after the ordinary ones (one per role of ``roles``; none for ``induction``)."""
        return self.roles if self.name == "roles" else 0

    @property
    def size(self) -> int:
        """The task's vocabulary: ordinary tokens and markers."""
        return self.vocab + self.markers

    def generate(self, seed: int | tuple[int, ...], n: int) -> TaskBatch:
        """``n`` sequences drawn from ``numpy.random.default_rng(seed)``: the same seed, the same arrays."""
        rng = np.random.default_rng(seed)
        draw = self._induction if self.name == "induction" else self._roles
        parts = [draw(rng) for _ in range(n)]
        empty = np.zeros((0, self.seq_len), dtype=np.int64)
        stack = [np.stack([p[k] for p in parts]) if parts else empty for k in range(4)]
        periods = np.asarray([p[4][0] for p in parts], dtype=np.int64) if self.name == "induction" else None
        return TaskBatch(ids=stack[0], loss_mask=stack[1].astype(bool), role_of=stack[2], key_of=stack[3],
                         role_names=self.role_names, periods=periods)

    def example(self, data_seed: int, stream: int, index: int) -> TaskBatch:
        """The one sequence ``index`` of a run's stream (:data:`TRAIN_STREAM`, :data:`DEV_STREAM`)."""
        return self.generate((int(data_seed), int(stream), int(index)), 1)

    # ----------------------------------------------------------------------------------- generators
    def _blank(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        t = self.seq_len
        return np.zeros(t, dtype=np.int64), np.full(t, -1, dtype=np.int64), np.full(t, -1, dtype=np.int64)

    def _induction(self, rng: np.random.Generator) -> tuple[npt.NDArray[np.int64], ...]:
        period = int(rng.integers(self.period_min, self.period_max + 1))
        ids = np.resize(rng.integers(0, self.vocab, period), self.seq_len).astype(np.int64)
        mask, role_of, key_of = self._blank()
        targets = np.arange(period + 1, self.seq_len)
        mask[targets] = 1
        role_of[targets - 1] = 0
        key_of[targets - 1] = targets - period
        return ids, mask, role_of, key_of, np.asarray([period])

    def _roles(self, rng: np.random.Generator) -> tuple[npt.NDArray[np.int64], ...]:
        t_len = self.seq_len
        ids = rng.integers(0, self.vocab, t_len).astype(np.int64)
        mask, role_of, key_of = self._blank()
        marker = np.zeros(t_len, dtype=bool)
        q = 3 + int(rng.integers(0, 3))
        while q + 1 < t_len:
            role = int(rng.integers(0, self.roles))
            key = self._key(ROLES[role], q, ids, marker, rng)
            if key is None:
                role, key = 0, q - 1  # no usable earlier copy after the tries: the marker names `previous`
            ids[q], marker[q] = self.vocab + role, True
            ids[q + 1], mask[q + 1] = ids[key], 1
            role_of[q], key_of[q] = role, key
            q += 4 + int(rng.integers(0, 3))
        return ids, mask, role_of, key_of

    @staticmethod
    def _last_copy(ids: npt.NDArray[np.int64], q: int, marker: npt.NDArray[np.bool_]) -> int | None:
        """The key of ``induction`` at the marker ``q``: after the last earlier copy of ``ids[q - 1]``, when that
        copy is usable (not right before ``q - 1``, not followed by a marker); else None."""
        earlier = np.nonzero(ids[:q - 1] == ids[q - 1])[0]
        if not len(earlier):
            return None
        key = int(earlier[-1]) + 1
        return key if key < q - 1 and not marker[key] else None

    def _key(self, role: str, q: int, ids: npt.NDArray[np.int64], marker: npt.NDArray[np.bool_],
             rng: np.random.Generator) -> int | None:
        if role == "previous":
            return q - 1
        if role == "two_back":
            return q - 2
        if role == "first":
            return 0
        key = self._last_copy(ids, q, marker)
        candidates = [j for j in range(q - 2) if not marker[j] and not marker[j + 1]]
        for _ in range(_PLANT_TRIES if key is None and candidates else 0):
            ids[q - 1] = ids[candidates[int(rng.integers(0, len(candidates)))]]
            key = self._last_copy(ids, q, marker)
            if key is not None:
                break
        return key
