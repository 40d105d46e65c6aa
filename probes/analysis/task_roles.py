"""Role scores per head on the sequences of a task (:mod:`probes.training.tasks`): :func:`role_scores`.

For each role a task knows (``induction``; ``previous``, ``two_back``, ``first``, ``induction`` of ``roles``), a
head's score is its mean attention on the role's ideal key: the role's ideal map (one-hot rows) times the head's
attention, summed over keys, averaged over every query where the role applies, over all sequences. Beside them
the atlas' standard head types, scored as :mod:`probes.analysis.head_types` scores them (TransformerLens' ``mul``
score of the ``previous_token`` and ``induction`` detection patterns of each sequence's ids, averaged over the
sequences): ``std:previous_token`` and ``std:induction``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from probes.analysis.head_types import PATTERNS, similarity_score
from probes.errors import ConfigError
from probes.training.tasks import TaskBatch

__all__ = ["RoleScores", "role_scores", "STANDARD_TYPES"]

#: The atlas' head types scored beside a task's roles (named ``std:TYPE``).
STANDARD_TYPES: tuple[str, ...] = ("previous_token", "induction")


@dataclass(frozen=True)
class RoleScores:
    """Scores of every head for every role.

    Attributes:
        names: the task's roles, then ``std:previous_token`` and ``std:induction``.
        scores: ``(R, L, H)`` per name, layer and head (0-based); NaN for a role that applies nowhere.
        queries: ``(R,)`` the queries each score averages over (the sequences, for the standard types).
    """

    names: tuple[str, ...]
    scores: npt.NDArray[np.float64]
    queries: npt.NDArray[np.int64]

    def of(self, name: str) -> npt.NDArray[np.float64]:
        """``(L, H)``: the scores of ``name``."""
        if name not in self.names:
            raise ConfigError(f"role scores: expected one of {', '.join(self.names)}, found {name!r}")
        return self.scores[self.names.index(name)]


def role_scores(attention: npt.ArrayLike, batch: TaskBatch) -> RoleScores:
    """The scores of ``attention`` ``(N, L, H, T, T)`` (each sequence's maps, query x key) on ``batch``'s ``N``
    sequences (see the module).

    Raises:
        ConfigError: attention of another shape than ``(N, L, H, T, T)`` for ``batch``'s ``(N, T)``.
    """
    maps = np.asarray(attention, dtype=np.float64)
    n, t = batch.ids.shape
    if maps.ndim != 5 or maps.shape[0] != n or maps.shape[3:] != (t, t):
        raise ConfigError(f"role scores: expected attention of shape (N={n}, layers, heads, {t}, {t}), found "
                          f"{maps.shape}")
    seq, query = np.nonzero(batch.role_of >= 0)
    on_key = maps[seq, :, :, query, batch.key_of[seq, query]]  # (Q, L, H): attention on each query's ideal key
    roles = batch.role_of[seq, query]
    out, counts = [], []
    for r in range(len(batch.role_names)):
        picked = on_key[roles == r]
        counts.append(len(picked))
        out.append(picked.mean(axis=0) if len(picked) else np.full(maps.shape[1:3], np.nan))
    for name in STANDARD_TYPES:
        per_sequence = np.stack([similarity_score(maps[k], PATTERNS[name](batch.ids[k])) for k in range(n)])
        out.append(np.nanmean(per_sequence, axis=0) if n else np.full(maps.shape[1:3], np.nan))
        counts.append(n)
    names = (*batch.role_names, *(f"std:{name}" for name in STANDARD_TYPES))
    return RoleScores(names=names, scores=np.stack(out), queries=np.asarray(counts, dtype=np.int64))
