"""Tests of function from ablations: do heads each do the whole job (an ensemble) or complement each other?

An ensemble's members are redundant: each backs the others up, so removing one costs little and the single
costs add up to less than removing them together (sub-additive single effects), and they damage the same tokens. A division of labour gives heads whose removals add up (additive) and damage
different tokens, each role carried by few heads. These are the numbers that tell them apart (issue 39, point 4),
computed from ablation effects measured elsewhere (:func:`probes.importance.ablations.ablated_metrics` with mean or
resample ablation): the interaction of every pair, the correlation of per-token damage, and each role's carriers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["PairInteractions", "pair_interactions", "damage_correlation", "role_carriers"]


@dataclass(frozen=True)
class PairInteractions:
    """Single and pair ablation effects (loss increases, in nats) and what they say about additivity.

    Attributes:
        single: ``(N,)`` the effect of ablating each head alone.
        pairs: ``(P, 2)`` the heads ablated together, by index into ``single``.
        joint: ``(P,)`` the effect of ablating each pair.
    """

    single: npt.NDArray[np.float64]
    pairs: npt.NDArray[np.int64]
    joint: npt.NDArray[np.float64]

    @property
    def interaction(self) -> npt.NDArray[np.float64]:
        """``(P,)`` joint effect minus the sum of the single effects: above 0 redundant (the two back each other
        up: their single effects are sub-additive), about 0 additive (separate jobs), below 0 saturating (one
        removal already does most of the damage the pair does)."""
        return self.joint - self.single[self.pairs].sum(axis=1)

    @property
    def additivity(self) -> npt.NDArray[np.float64]:
        """``(P,)`` joint effect over the sum of the single effects (1: additive; NaN where that sum is 0)."""
        total = self.single[self.pairs].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(total != 0, self.joint / np.where(total != 0, total, 1.0), np.nan)

    def matrix(self) -> npt.NDArray[np.float64]:
        """``(N, N)`` interaction of every pair measured (NaN elsewhere and on the diagonal), symmetric."""
        n = len(self.single)
        out = np.full((n, n), np.nan)
        i, j = self.pairs[:, 0], self.pairs[:, 1]
        out[i, j] = out[j, i] = self.interaction
        return out


def pair_interactions(single: npt.ArrayLike, pairs: Sequence[tuple[int, int]], joint: npt.ArrayLike
                      ) -> PairInteractions:
    """The :class:`PairInteractions` of single effects ``(N,)``, the pairs ``[(i, j), ...]`` and their joint
    effects ``(P,)``; ValueError on a pair out of range, a head paired with itself, or mismatched lengths."""
    s = np.asarray(single, dtype=np.float64).reshape(-1)
    p = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    j = np.asarray(joint, dtype=np.float64).reshape(-1)
    if len(p) != len(j):
        raise ValueError(f"expected one joint effect per pair, found {len(p)} pairs and {len(j)} effects")
    if len(p) and (p.min() < 0 or p.max() >= len(s) or (p[:, 0] == p[:, 1]).any()):
        raise ValueError(f"pairs: expected two different heads in 0..{len(s) - 1}, found {p.tolist()}")
    return PairInteractions(s, p, j)


def damage_correlation(damage: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(N, N)`` Pearson correlation, across tokens, of the damage each head's ablation does ``(N, T)`` (the loss
    increase at every predicted token): near 1 for heads that do the same job, near 0 for heads with separate
    jobs. A head whose ablation changes nothing (constant damage) has NaN correlations."""
    d = np.asarray(damage, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] < 2:
        raise ValueError(f"damage: expected (heads, tokens) with at least 2 tokens, found {d.shape}")
    centred = d - d.mean(axis=1, keepdims=True)
    norm = np.sqrt((centred ** 2).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (centred @ centred.T) / np.outer(norm, norm)
    out[norm == 0, :] = np.nan
    out[:, norm == 0] = np.nan
    return out


def role_carriers(scores: npt.ArrayLike, threshold: float) -> list[tuple[int, ...]]:
    """Per seed, the heads (0-based indices) whose score for a role reaches ``threshold``, from ``(S, N)`` role
    scores: how many heads take the role in each seed, and which index (the same index in every seed: fixed by
    something other than the seed; different ones: arbitrary)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"scores: expected (seeds, heads), found {s.shape}")
    return [tuple(int(k) for k in np.flatnonzero(row >= threshold)) for row in s]
