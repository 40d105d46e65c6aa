"""Attention-free baselines for per-relation head accuracy, as streaming accumulators.

* **Fixed offset** (Clark et al. 2019 §4.2): word ``i`` (1-based, of ``m``) predicts
  ``clip(i + k, 0, m)`` for each ``k`` in ``-3..+2``; the best ``k`` per relation is
  the baseline. Clipping lets early words predict ROOT, and the last word with
  ``k > 0`` predicts itself (always wrong).
* **Most frequent relative position** (Voita et al. 2019): always predict the
  relative position ``head - i`` seen most often for the relation (ROOT is its own
  position, written ``0``); learned on one split, it can be scored on another.

Both use the same relations as :class:`probes.analysis.dependency.HeadAccuracy` and the same
possessive rule (``nmod:poss`` scored through the following ``'s``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from probes.extraction.attention import WordAttention
from probes.corpora.types import Sentence
from probes.analysis.scores import BaselineScores, UnitCounts
from probes.errors import ConfigError
from probes.analysis.dependency import RelationColumns

__all__ = ["CLARK_OFFSETS", "OffsetBaseline", "offset_baseline"]

#: Clark et al.'s offsets: -3..+2 (+3 is not included).
CLARK_OFFSETS: tuple[int, ...] = (-3, -2, -1, 0, 1, 2)

#: Sentences held before they are scored together (they are small: words and labels only).
_BUFFER = 512


class OffsetBaseline:
    """Fixed-offset and most-frequent-position baselines over a treebank.

    ``update(sentence, word_attention=None)`` ignores the attention, so the
    baseline can run with or without a model. State: int64 ``(offsets, relations)``
    counts, one relative-position histogram per relation, and per-sentence counts
    (a few bytes per sentence and relation) for paired bootstrap intervals.

    Args:
        offsets: the fixed offsets to try.
        poss_rule: apply the possessive rule to ``nmod:poss`` (see :mod:`probes.analysis.dependency`).
        keep_units: keep per-sentence counts.
    """

    def __init__(self, offsets: Sequence[int] = CLARK_OFFSETS, *, poss_rule: bool = True,
                 keep_units: bool = True) -> None:
        self.offsets = tuple(int(k) for k in offsets)
        self.poss_rule = poss_rule
        self.keep_units = keep_units
        self.reset()

    def reset(self) -> None:
        """Forget everything seen."""
        self._vocab = RelationColumns()
        self._correct = np.zeros((len(self.offsets), 0), dtype=np.int64)  # (K, R)
        self._total = np.zeros(0, dtype=np.int64)  # (R,)
        self._n_units = 0
        self._n_scored = 0  # sentences already folded into the counts (the rest are pending)
        self._pending: list[Sentence] = []
        self._pos_rows: list[npt.NDArray[np.int64]] = []  # (n, 3): unit, relation, position
        self._unit_len: list[npt.NDArray[np.int64]] = []
        self._unit_rel: list[npt.NDArray[np.int32]] = []
        self._unit_total: list[npt.NDArray[np.int32]] = []
        self._unit_correct: list[npt.NDArray[np.uint16]] = []

    @property
    def n_units(self) -> int:
        """Sentences seen so far."""
        return self._n_units

    def _grow(self, n: int) -> None:
        if n > self._total.shape[0]:
            extra = max(n, 2 * self._total.shape[0]) - self._total.shape[0]
            self._correct = np.concatenate([self._correct, np.zeros((len(self.offsets), extra), np.int64)], axis=1)
            self._total = np.concatenate([self._total, np.zeros(extra, np.int64)])

    def update(self, item: Sentence, word_attention: WordAttention | None = None) -> None:
        """Add one sentence (the attention, if given, is not used). Sentences are scored in batches."""
        self._pending.append(item)
        self._n_units += 1
        if len(self._pending) >= _BUFFER:
            self._flush()

    def _flush(self) -> None:
        """Score the pending sentences together."""
        if not self._pending:
            return
        inc = self._vocab.batch_incidence(self._pending, poss_rule=self.poss_rule)
        offsets = np.asarray(self.offsets, dtype=np.int64)  # (K,)
        pred = np.clip(inc.position[:, None] + offsets[None, :], 0, inc.length[:, None])  # (W, K) 1-based
        hits = pred[inc.source] == inc.target[:, None]  # (E, K)
        pair_counts = inc.pair_sums(hits)  # (P, K)
        k = len(self._vocab)
        self._grow(k)
        self._correct[:, :k] += inc.column_sums(pair_counts, k).T
        self._total[:k] += inc.total
        # Relative position of the gold head from the word whose prediction is checked
        # (the clitic under the possessive rule); 0 stands for ROOT.
        rel_pos = np.where(inc.target == 0, 0, inc.target - inc.position[inc.source])  # (E,)
        unit = np.repeat(inc.pair_unit, inc.pair_total) + self._n_scored  # (E,)
        self._pos_rows.append(np.stack([unit, inc.column, rel_pos], axis=1))
        if self.keep_units:
            self._unit_len.append(np.bincount(inc.pair_unit, minlength=len(self._pending)).astype(np.int64))
            self._unit_rel.append(inc.pair_column.astype(np.int32))
            self._unit_total.append(inc.pair_total)
            self._unit_correct.append(pair_counts)
        self._n_scored += len(self._pending)
        self._pending = []

    def merge(self, other: OffsetBaseline) -> None:
        """Add ``other``'s state (another shard, same options) to this one."""
        if self.offsets != other.offsets:
            raise ConfigError(f"cannot merge baselines over offsets {self.offsets} and {other.offsets}")
        self._flush()
        other._flush()
        for name in other._vocab.index:
            self._vocab.index.setdefault(name, len(self._vocab.index))
        mapping = np.array([self._vocab.index[r] for r in other._vocab.index], dtype=np.int64)
        self._grow(len(self._vocab))
        n_other = len(other._vocab)
        np.add.at(self._correct, (slice(None), mapping), other._correct[:, :n_other])
        np.add.at(self._total, mapping, other._total[:n_other])
        for rows in other._pos_rows:
            shifted = rows.copy()
            shifted[:, 0] += self._n_units
            shifted[:, 1] = mapping[shifted[:, 1]]
            self._pos_rows.append(shifted)
        self._unit_len += list(other._unit_len)
        self._unit_rel += [mapping[r].astype(np.int32) for r in other._unit_rel]
        self._unit_total += list(other._unit_total)
        self._unit_correct += list(other._unit_correct)
        self._n_units += other._n_units
        self._n_scored += other._n_scored

    def compute(self) -> BaselineScores:
        """The counts so far as an immutable :class:`~probes.analysis.scores.BaselineScores`."""
        self._flush()
        if not self._n_units:
            warnings.warn("OffsetBaseline.compute() called before any update()", UserWarning, stacklevel=2)
        names = tuple(self._vocab.index)
        r = len(names)
        k = len(self.offsets)
        rows = np.concatenate(self._pos_rows) if self._pos_rows else np.zeros((0, 3), np.int64)
        span = int(np.abs(rows[:, 2]).max(initial=0)) * 2 + 1  # relative positions fit in [-span/2, span/2]
        keys, n = np.unique(rows[:, 1] * span + rows[:, 2] + span // 2, return_counts=True)  # (relation, position)
        positions: dict[str, dict[int, int]] = {}
        for key, c in zip(keys.tolist(), n.tolist()):
            rel, pos = divmod(key, span)
            positions.setdefault(names[rel], {})[pos - span // 2] = c
        units = unit_positions = None
        if self.keep_units:
            lens = np.concatenate(self._unit_len) if self._unit_len else np.zeros(0, np.int64)
            units = UnitCounts(
                np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
                np.concatenate(self._unit_rel) if self._unit_rel else np.zeros(0, np.int32),
                np.concatenate(self._unit_total) if self._unit_total else np.zeros(0, np.int32),
                np.concatenate(self._unit_correct) if self._unit_correct else np.zeros((0, k), np.uint16),
            )
            unit_positions = np.hstack([rows, np.ones((rows.shape[0], 1), np.int64)])  # unit, rel, pos, count
        return BaselineScores(self.offsets, self._correct[:, :r].copy(), self._total[:r].copy(), names, positions,
                              self._n_units, units, unit_positions)


def offset_baseline(sentences: Iterable[Sentence], *, offsets: Sequence[int] = CLARK_OFFSETS,
                    poss_rule: bool = True, keep_units: bool = False) -> BaselineScores:
    """Functional twin of :class:`OffsetBaseline`: the baselines of a whole treebank."""
    acc = OffsetBaseline(offsets, poss_rule=poss_rule, keep_units=keep_units)
    for sentence in sentences:
        acc.update(sentence)
    return acc.compute()
