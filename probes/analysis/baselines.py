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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.extraction.attention import WordAttention
from probes.corpora.types import Sentence
from probes.analysis.unit_counts import UnitCounts
from probes.errors import InputError
from probes.results import Result
from probes.analysis.relations import RelationColumns, merge_relations, widen

__all__ = ["CLARK_OFFSETS", "BaselineScores", "OffsetBaseline", "offset_baseline"]

#: Clark et al.'s offsets: -3..+2 (+3 is not included).
CLARK_OFFSETS: tuple[int, ...] = (-3, -2, -1, 0, 1, 2)

#: Sentences held before they are scored together (they are small: words and labels only).
_BUFFER = 512


@dataclass(frozen=True)
class BaselineScores(Result):
    """Counts of two attention-free baselines per relation.

    Attributes:
        offsets: the fixed offsets ``k`` of Clark et al. (predict ``clip(i + k, 0, m)``).
        correct: ``(n_offsets, n_relations)`` int64 correct counts of each fixed offset.
        total: ``(n_relations,)`` int64 words per relation.
        relations: relation names (same naming as :class:`HeadScores`).
        positions: ``{relation: {relative position: count}}``: how often the gold head
            lies at ``head - dependent`` (``0`` stands for ROOT, never a real offset).
            The most frequent one is Voita et al.'s positional baseline.
        n_units: sentences seen.
        units: per-sentence fixed-offset counts, ``correct`` of shape ``(nnz, n_offsets)``.
        unit_positions: per-sentence ``(unit, relation, position, count)`` rows, ``(n, 4)`` int64.
    """

    offsets: tuple[int, ...]
    correct: npt.NDArray[np.int64]
    total: npt.NDArray[np.int64]
    relations: tuple[str, ...]
    positions: Mapping[str, Mapping[int, int]]
    n_units: int = 0
    units: UnitCounts | None = None
    unit_positions: npt.NDArray[np.int64] | None = None

    def index(self, relation: str) -> int:
        """Position of ``relation``; InputError if it was never seen."""
        try:
            return self.relations.index(relation)
        except ValueError:
            raise InputError(f"relation {relation!r} does not occur in the baseline data") from None

    def accuracy(self) -> npt.NDArray[np.float64]:
        """``(n_offsets, n_relations)`` accuracy of each fixed offset."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.correct / np.where(self.total > 0, self.total, np.nan)

    def best_offset(self, relation: str) -> tuple[int, float]:
        """``(offset, accuracy)`` of the best fixed offset.

        Ties go to the offset nearest the word, then the left one (this reproduces
        the published EWT table, where ``obl`` on dev ties at -3 and -2).
        """
        r = self.index(relation)
        col = self.correct[:, r]
        k = min(np.flatnonzero(col == col.max()), key=lambda j: (abs(self.offsets[j]), self.offsets[j]))
        total = self.total[r]
        return self.offsets[k], (float(self.correct[k, r] / total) if total else float("nan"))

    def most_frequent_position(self, relation: str) -> tuple[int, float]:
        """Voita et al.'s baseline: ``(position, accuracy)`` of the most frequent relative position.

        Position ``0`` means ROOT. Ties go to the position closest to the word, then the left one.
        """
        hist = self.positions.get(relation)
        if not hist:
            return 0, float("nan")
        pos = min(hist, key=lambda p: (-hist[p], abs(p) if p else 10**9, p))
        return pos, hist[pos] / int(self.total[self.index(relation)])

    def position_accuracy(self, relation: str, position: int) -> float:
        """Accuracy of always predicting ``position`` (0 = ROOT) for ``relation``."""
        hist = self.positions.get(relation)
        if not hist:
            return float("nan")
        return hist.get(position, 0) / int(self.total[self.index(relation)])

    def __add__(self, other: BaselineScores) -> BaselineScores:
        """Counts of both (same offsets, different data)."""
        if self.offsets != other.offsets:
            raise InputError(f"cannot add baselines over offsets {self.offsets} and {other.offsets}")
        relations, mapping = merge_relations(self.relations, other.relations)
        n = len(relations)
        correct = widen(self.correct, n).copy()
        total = widen(self.total, n).copy()
        np.add.at(correct, (slice(None), mapping), other.correct)
        np.add.at(total, mapping, other.total)
        positions = {r: dict(h) for r, h in self.positions.items()}
        for rel, hist in other.positions.items():
            mine = positions.setdefault(rel, {})
            for p, c in hist.items():
                mine[p] = mine.get(p, 0) + c
        units = unit_positions = None
        if self.units is not None and other.units is not None:
            units = self.units.concat(other.units.remap(mapping))
        if self.unit_positions is not None and other.unit_positions is not None:
            shifted = other.unit_positions.copy()
            shifted[:, 0] += self.n_units
            shifted[:, 1] = mapping[shifted[:, 1]]
            unit_positions = np.concatenate([self.unit_positions, shifted])
        return BaselineScores(
            self.offsets, correct, total, relations, positions, self.n_units + other.n_units, units, unit_positions
        )


class OffsetBaseline(Analysis[BaselineScores]):
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

    items: ClassVar[str] = "sentences"

    def __init__(self, offsets: Sequence[int] = CLARK_OFFSETS, *, poss_rule: bool = True,
                 keep_units: bool = True) -> None:
        super().__init__()
        self.add_option("offsets", tuple(int(k) for k in offsets))
        self.add_option("poss_rule", poss_rule)
        self.add_option("keep_units", keep_units)
        self.add_state("_vocab", RelationColumns(), "vocab")
        self.add_state("_correct", np.zeros((len(self.offsets), 0), dtype=np.int64), "sum", vocab="_vocab")  # (K, R)
        self.add_state("_total", np.zeros(0, dtype=np.int64), "sum", vocab="_vocab")  # (R,)
        self.add_state("_n_units", 0, "sum")
        # relative positions, in chunks: (n, 3) rows (unit within the chunk, relation, position) ...
        self.add_state("_pos_rows", [], "extend", vocab="_vocab", axis=1)
        self.add_state("_pos_units", [], "extend")  # ... and the sentences of each chunk
        self.add_state("_unit_len", [], "extend")
        self.add_state("_unit_rel", [], "extend", vocab="_vocab")
        self.add_state("_unit_total", [], "extend")
        self.add_state("_unit_correct", [], "extend")
        self.add_state("_pending", [], "buffer")

    @property
    def n_units(self) -> int:
        """Sentences seen so far."""
        return self._n_units

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
        self._grow("_vocab", k)
        self._correct[:, :k] += inc.column_sums(pair_counts, k).T
        self._total[:k] += inc.total
        # Relative position of the gold head from the word whose prediction is checked
        # (the clitic under the possessive rule); 0 stands for ROOT.
        rel_pos = np.where(inc.target == 0, 0, inc.target - inc.position[inc.source])  # (E,)
        unit = np.repeat(inc.pair_unit, inc.pair_total)  # (E,) sentence within the chunk
        self._pos_rows.append(np.stack([unit, inc.column, rel_pos], axis=1))
        self._pos_units.append(len(self._pending))
        if self.keep_units:
            self._unit_len.append(np.bincount(inc.pair_unit, minlength=len(self._pending)).astype(np.int64))
            self._unit_rel.append(inc.pair_column.astype(np.int32))
            self._unit_total.append(inc.pair_total)
            self._unit_correct.append(pair_counts)
        self._pending = []

    def _positions(self) -> npt.NDArray[np.int64]:
        """``(n, 3)`` rows ``(unit, relation, relative position)``, units numbered over every chunk."""
        if not self._pos_rows:
            return np.zeros((0, 3), np.int64)
        rows = np.concatenate(self._pos_rows)
        first = np.concatenate([[0], np.cumsum(self._pos_units)[:-1]]).astype(np.int64)  # first unit of each chunk
        rows[:, 0] += np.repeat(first, [len(r) for r in self._pos_rows])
        return rows

    def compute(self) -> BaselineScores:
        """The counts so far as an immutable :class:`BaselineScores`."""
        self._flush()
        if not self._n_units:
            warnings.warn("OffsetBaseline.compute() called before any update()", UserWarning, stacklevel=2)
        names = tuple(self._vocab.index)
        r = len(names)
        k = len(self.offsets)
        rows = self._positions()
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
