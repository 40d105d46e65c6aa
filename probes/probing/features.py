"""Pair features for head selection: for a dependent word, one row per candidate head.

Candidates follow Clark et al. 2019 §5.1: ROOT first (index 0), then the ``m``
words (index ``1..m``, the CoNLL-U head numbering), the dependent itself
included. Attention is read in both directions (Clark's 288 maps for BERT-base:
the dependent's row, then the candidate's row), and ROOT is scored from the
attention to (and from) the special tokens: those before the first word
(``[CLS]``) and those after the last word (``[SEP]``), kept as two separate
channels so a probe can weight them with Clark's two ROOT scalars.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.corpora.types import Sentence
from probes.errors import AlignmentError
from probes.extraction.attention import WordAttention

__all__ = [
    "PairAttention",
    "PairBatch",
    "attention_features",
    "distance_features",
    "offset_features",
    "N_DISTANCE",
    "OFFSETS",
    "pair_features",
    "check_pair",
]

#: Relative offsets (candidate - dependent) with their own indicator in :func:`offset_features`.
OFFSETS: tuple[int, ...] = (-3, -2, -1, 0, 1, 2, 3)
#: Number of Clark's distance channels (§5.2 Distances+GloVe, without the all-zero dummy).
N_DISTANCE = 8


@dataclass(frozen=True)
class PairAttention:
    """Attention features of one sentence, both directions, every held head.

    Attributes:
        words: ``(K, m, m)`` float32, ``K = 2 * n_layers * n_heads``; ``words[k, i, c]``
            is ``alpha(i -> c)`` for the first ``K/2`` maps (dependent to head) and
            ``alpha(c -> i)`` for the last ``K/2`` (head to dependent).
        root: ``(K, m, 2)`` float32; for the first ``K/2`` maps the attention from word
            ``i`` to the leading / trailing special tokens, for the last ``K/2`` the
            attention from them to ``i`` (summed when a side holds several specials).
        n_layers, n_heads: shape of the head grid (map ``k < K/2`` is head
            ``divmod(k, n_heads)``; map ``k >= K/2`` is head ``divmod(k - K/2, n_heads)``).
    """

    words: npt.NDArray[np.float32]
    root: npt.NDArray[np.float32]
    n_layers: int
    n_heads: int

    @property
    def n_maps(self) -> int:
        """``K``, the number of feature maps (two per head)."""
        return int(self.words.shape[0])

    @property
    def n_words(self) -> int:
        """``m``, the number of words."""
        return int(self.words.shape[1])

    def candidates(self) -> npt.NDArray[np.float32]:
        """``(K, m, m + 1, 2)``: per candidate (ROOT first), the two ROOT channels for
        the ROOT column and ``(alpha, 0)`` for word columns; handy for per-head probes."""
        k, m = self.words.shape[:2]
        out = np.zeros((k, m, m + 1, 2), dtype=np.float32)
        out[:, :, 0, :] = self.root
        out[:, :, 1:, 0] = self.words
        return out


@dataclass(frozen=True)
class PairBatch:
    """Flat pair-feature rows of one or more sentences (the scikit-learn form).

    Attributes:
        X: ``(n_pairs, n_features)`` features of each (dependent, candidate) pair.
        y: ``(n_pairs,)`` 1 where the candidate is the dependent's gold head, else 0.
        groups: ``(n_pairs,)`` id of the dependent each row belongs to (one group per word).
        candidates: ``(n_pairs,)`` candidate index: 0 for ROOT, ``1..m`` for words.
    """

    X: npt.NDArray[np.float32]
    y: npt.NDArray[np.int64]
    groups: npt.NDArray[np.int64]
    candidates: npt.NDArray[np.int64]


def check_pair(sentence: Sentence, attention: WordAttention) -> None:
    """Raise :class:`AlignmentError` when the attention does not cover the sentence's words."""
    if attention.n_words != sentence.n_words:
        raise AlignmentError(
            f"sentence {sentence.sent_id!r}: expected attention over its {sentence.n_words} words, "
            f"found {attention.n_words} word positions (was it truncated or windowed?)",
            path=sentence.path,
            line=sentence.line,
        )


def attention_features(attention: WordAttention) -> PairAttention:
    """Both-direction attention features of one sentence (Clark et al. 2019 §5.1).

    Args:
        attention: word-level maps ``(n_layers, n_heads, n, n)`` with specials flagged.

    Returns:
        The :class:`PairAttention` of the sentence's ``m`` words.
    """
    weights = np.asarray(attention.weights, dtype=np.float32)  # (L, H, n, n)
    n_layers, n_heads, n = weights.shape[:3]
    flat = weights.reshape(n_layers * n_heads, n, n)  # (LH, n, n)
    words = attention.word_index  # (m,)
    m = len(words)
    special = np.flatnonzero(attention.is_special)
    first = words[0] if m else n
    last = words[-1] if m else -1
    start = special[special < first]  # leading specials ([CLS], BOS)
    end = special[special > last]  # trailing specials ([SEP], EOS)
    w2w = flat[:, words[:, None], words[None, :]]  # (LH, m, m): alpha(i -> c)
    out_words = np.concatenate([w2w, w2w.transpose(0, 2, 1)], axis=0)  # (K, m, m)
    root = np.zeros((2 * n_layers * n_heads, m, 2), dtype=np.float32)
    lh = n_layers * n_heads
    if len(start):
        root[:lh, :, 0] = flat[:, words][:, :, start].sum(-1)  # alpha(i -> start specials)
        root[lh:, :, 0] = flat[:, start][:, :, words].sum(1)  # alpha(start specials -> i)
    if len(end):
        root[:lh, :, 1] = flat[:, words][:, :, end].sum(-1)
        root[lh:, :, 1] = flat[:, end][:, :, words].sum(1)
    return PairAttention(np.ascontiguousarray(out_words), root, n_layers, n_heads)


def distance_features(m: int) -> npt.NDArray[np.float32]:
    """Clark's 8 distance channels (§5.2) for every (dependent, candidate) pair.

    Channels: distance ahead ``(c - i) / m``, distance behind ``(i - c) / m``,
    indicators ``c = i``, ``c = i - 1``, ``c = i + 1``, ``c = i - 2``, ``c = i + 2``, and
    ROOT (only the ROOT column is non-zero there; its other channels are 0).

    Args:
        m: number of words.

    Returns:
        ``(m, m + 1, 8)`` float32, candidate axis ROOT first.
    """
    i = np.arange(1, m + 1)[:, None]  # (m, 1) 1-based dependent
    c = np.arange(1, m + 1)[None, :]  # (1, m) 1-based candidate
    d = (c - i).astype(np.float32)  # (m, m)
    out = np.zeros((m, m + 1, N_DISTANCE), dtype=np.float32)
    out[:, 1:, 0] = np.where(d > 0, d / m, 0.0)
    out[:, 1:, 1] = np.where(d < 0, -d / m, 0.0)
    for ch, off in zip(range(2, 7), (0, -1, 1, -2, 2)):
        out[:, 1:, ch] = d == off
    out[:, 0, 7] = 1.0
    return out


def offset_features(m: int) -> npt.NDArray[np.float32]:
    """Positional control features for per-head probes.

    Channels: ROOT indicator, one indicator per offset in :data:`OFFSETS`
    (``c - i``), distance to the right ``(c - i) / m`` and to the left ``(i - c) / m``.

    Returns:
        ``(m, m + 1, 1 + len(OFFSETS) + 2)`` float32, candidate axis ROOT first.
    """
    i = np.arange(1, m + 1)[:, None]
    c = np.arange(1, m + 1)[None, :]
    d = c - i  # (m, m)
    out = np.zeros((m, m + 1, 1 + len(OFFSETS) + 2), dtype=np.float32)
    out[:, 0, 0] = 1.0
    for ch, off in enumerate(OFFSETS, start=1):
        out[:, 1:, ch] = d == off
    out[:, 1:, -2] = np.where(d > 0, d / m, 0.0)
    out[:, 1:, -1] = np.where(d < 0, -d / m, 0.0)
    return out


def pair_features(
    sentence: Sentence, attention: WordAttention, *, distances: bool = True, group_offset: int = 0
) -> PairBatch:
    """Flat rows for :class:`~probes.probing.classifier.HeadSelectionProbe` (one per pair).

    Row features: ``K`` attention maps for word candidates (0 for ROOT), then the
    ``2K`` ROOT channels (0 for words), then, if ``distances``, Clark's 8 distance
    channels.

    Args:
        sentence: the gold sentence (heads give ``y``).
        attention: its word-level attention.
        distances: append Clark's distance channels.
        group_offset: added to the word numbers in ``groups`` (to keep groups of
            several sentences apart).
    """
    check_pair(sentence, attention)
    pa = attention_features(attention)
    k, m = pa.words.shape[:2]
    word_part = np.zeros((m, m + 1, k), dtype=np.float32)
    word_part[:, 1:, :] = pa.words.transpose(1, 2, 0)
    root_part = np.zeros((m, m + 1, 2 * k), dtype=np.float32)
    root_part[:, 0, :] = pa.root.transpose(1, 0, 2).reshape(m, 2 * k)
    parts: list[Any] = [word_part, root_part]
    if distances:
        parts.append(distance_features(m))
    X = np.concatenate(parts, axis=-1).reshape(m * (m + 1), -1)
    gold = np.asarray(sentence.heads, dtype=np.int64)  # (m,) 0..m
    cand = np.tile(np.arange(m + 1), m)
    y = (cand == np.repeat(gold, m + 1)).astype(np.int64)
    groups = np.repeat(np.arange(m) + group_offset, m + 1)
    return PairBatch(X, y, groups, cand)
