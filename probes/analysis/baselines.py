"""Attention-free baselines for per-relation head accuracy, as streaming accumulators.

* **Fixed offset** (Clark et al. 2019 §4.2): word ``i`` (1-based, of ``m``) predicts
  ``clip(i + k, 1, m)`` for each ``k`` in ``-3..+2``; the best ``k`` per relation is
  the baseline. **ROOT rule**: like a head (which attends to other words only), a baseline never
  predicts ROOT: a position before the first word is clipped to the first word and one after
  the last word to the last word (the nearest word); where that is the word itself (``k != 0``
  from the first or last word) it predicts the nearest *other* word instead (the second, or the
  second-to-last), as a head never predicts the word itself either. (Offset ``0`` always predicts
  the word itself and is always wrong, as in the paper's list.) Under a null where every other word is
  equally likely to be the head, each offset ``k != 0`` is then exactly at chance, as every head is.
  ``clip_to_root=True`` keeps Clark et al.'s published rule,
  ``clip(i + k, 0, m)``, under which early words "predict ROOT" (it reproduces the paper's
  table, e.g. ``root``: offset -3 at 60.5% on EWT dev, which no head can match).
* **Most frequent relative position** (Voita et al. 2019): always predict the
  relative position ``head - i`` seen most often for the relation among the *word* positions
  (ROOT, written ``0`` in the histogram, is counted but never chosen, unless ``clip_to_root``);
  learned on one split, it can be scored on another. A relation whose words all attach to ROOT
  has no such position: no head or baseline can predict it. **Edges**: the position is scored with
  the offset rule above (a position past the sentence's edge predicts the nearest other word),
  for every position in :data:`POSITION_GRID`; otherwise a word whose ``i + p`` falls outside
  the sentence could never be right, and the baseline would sit below chance where heads do not
  (under ``clip_to_root``, and for positions beyond the grid, the unclipped histogram is used).

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
from probes.analysis.relations import RelationColumns, merge_relations, widen
from probes.analysis.unit_counts import UnitCounts
from probes.corpora.types import Sentence
from probes.errors import InputError
from probes.extraction.attention import WordAttention
from probes.results import Result

__all__ = ["CLARK_OFFSETS", "POSITION_GRID", "BaselineScores", "OffsetBaseline", "offset_baseline"]

#: Clark et al.'s offsets: -3..+2 (+3 is not included).
CLARK_OFFSETS: tuple[int, ...] = (-3, -2, -1, 0, 1, 2)

#: Relative positions scored with the edge rule for Voita's baseline (0, ROOT, excluded).
POSITION_GRID: tuple[int, ...] = tuple(k for k in range(-32, 33) if k != 0)

#: Sentences held before they are scored together (they are small: words and labels only).
_BUFFER = 512


@dataclass(frozen=True)
class BaselineScores(Result):
    """Counts of two attention-free baselines per relation.

    Attributes:
        offsets: the fixed offsets ``k`` of Clark et al. (predict ``clip(i + k, 1, m)``, or
            ``clip(i + k, 0, m)`` with ``clip_to_root``).
        correct: ``(n_offsets, n_relations)`` int64 correct counts of each fixed offset.
        total: ``(n_relations,)`` int64 words per relation.
        relations: relation names (same naming as :class:`HeadScores`).
        positions: ``{relation: {relative position: count}}``: how often the gold head
            lies at ``head - dependent`` (``0`` stands for ROOT, never a real offset).
            The most frequent one is Voita et al.'s positional baseline.
        n_units: sentences seen.
        units: per-sentence fixed-offset counts, ``correct`` of shape ``(nnz, n_offsets)``.
        unit_positions: per-sentence ``(unit, relation, position, count)`` rows, ``(n, 4)`` int64.
        clip_to_root: the baselines may predict ROOT (Clark et al.'s published clipping; see the module).
        grid: relative positions scored with the edge rule (:data:`POSITION_GRID`; empty under ``clip_to_root``).
        grid_correct: ``(n_grid, n_relations)`` int64 correct counts of always predicting each grid position.
        grid_units: per-sentence counts of the grid positions, ``correct`` of shape ``(nnz, n_grid)``.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"correct": "offsets relations", "total": "relations", "grid_correct": "grid relations",
               "unit_positions": "_ 4", "units.indptr": "n_units+1", "units.correct": "_ offsets",
               "grid_units.indptr": "n_units+1", "grid_units.correct": "_ grid"}

    offsets: tuple[int, ...]
    correct: npt.NDArray[np.int64]
    total: npt.NDArray[np.int64]
    relations: tuple[str, ...]
    positions: Mapping[str, Mapping[int, int]]
    n_units: int = 0
    units: UnitCounts | None = None
    unit_positions: npt.NDArray[np.int64] | None = None
    clip_to_root: bool = False
    grid: tuple[int, ...] = ()
    grid_correct: npt.NDArray[np.int64] | None = None
    grid_units: UnitCounts | None = None

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

        Position ``0`` means ROOT; it is only a candidate with ``clip_to_root`` (heads cannot predict
        ROOT). Ties go to the position closest to the word, then the left one. A relation with no
        candidate (every word attaches to ROOT) gives ``(0, 0.0)``: always wrong.
        """
        hist = {p: c for p, c in (self.positions.get(relation) or {}).items() if p or self.clip_to_root}
        if not hist:
            return 0, (0.0 if relation in self.positions else float("nan"))
        pos = min(hist, key=lambda p: (-hist[p], abs(p) if p else 10**9, p))
        return pos, self.position_accuracy(relation, pos)

    def position_accuracy(self, relation: str, position: int) -> float:
        """Accuracy of always predicting ``position`` (0 = ROOT, never right unless ``clip_to_root``)."""
        hist = self.positions.get(relation)
        if not hist:
            return float("nan")
        if position == 0 and not self.clip_to_root:
            return 0.0
        if position in self.grid and self.grid_correct is not None:
            return int(self.grid_correct[self.grid.index(position), self.index(relation)]) / int(
                self.total[self.index(relation)])
        return hist.get(position, 0) / int(self.total[self.index(relation)])

    def root_only(self, relation: str) -> bool:
        """Whether every word of ``relation`` attaches to ROOT (no head can predict any of them)."""
        hist = self.positions.get(relation) or {}
        return bool(hist) and set(hist) == {0}

    def __add__(self, other: BaselineScores) -> BaselineScores:
        """Counts of both (same offsets, same ROOT rule, different data)."""
        if (self.offsets, self.clip_to_root, self.grid) != (other.offsets, other.clip_to_root, other.grid):
            raise InputError(f"cannot add baselines over offsets {self.offsets} (clip_to_root {self.clip_to_root}) "
                             f"and {other.offsets} (clip_to_root {other.clip_to_root})")
        relations, mapping = merge_relations(self.relations, other.relations)
        n = len(relations)
        correct = widen(self.correct, n).copy()
        total = widen(self.total, n).copy()
        np.add.at(correct, (slice(None), mapping), other.correct)  # type: ignore[arg-type]  # numpy stubs: ufunc.at takes tuple indices (slices, Ellipsis)
        np.add.at(total, mapping, other.total)
        positions = {r: dict(h) for r, h in self.positions.items()}
        for rel, hist in other.positions.items():
            mine = positions.setdefault(rel, {})
            for p, c in hist.items():
                mine[p] = mine.get(p, 0) + c
        units = unit_positions = grid_units = grid_correct = None
        if self.units is not None and other.units is not None:
            units = self.units.concat(other.units.remap(mapping))
        if self.grid_units is not None and other.grid_units is not None:
            grid_units = self.grid_units.concat(other.grid_units.remap(mapping))
        if self.grid_correct is not None and other.grid_correct is not None:
            grid_correct = widen(self.grid_correct, n).copy()
            np.add.at(grid_correct, (slice(None), mapping), other.grid_correct)  # type: ignore[arg-type]  # numpy stubs: ufunc.at takes tuple indices (slices, Ellipsis)
        if self.unit_positions is not None and other.unit_positions is not None:
            shifted = other.unit_positions.copy()
            shifted[:, 0] += self.n_units
            shifted[:, 1] = mapping[shifted[:, 1]]
            unit_positions = np.concatenate([self.unit_positions, shifted])
        return BaselineScores(
            self.offsets, correct, total, relations, positions, self.n_units + other.n_units, units, unit_positions,
            self.clip_to_root, self.grid, grid_correct, grid_units,
        )


def _predict(position: npt.NDArray[np.int64], length: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64],
             clip_to_root: bool) -> npt.NDArray[np.int64]:
    """``(W, K)`` 1-based predictions of each word (``position`` of a sentence of ``length``) for each offset.

    ``clip_to_root``: Clark et al.'s ``clip(i + k, 0, m)``; else ``clip(i + k, 1, m)``, a clipped prediction
    of the word itself moved to the nearest other word (module docstring).
    """
    i, m = position[:, None], length[:, None]
    if clip_to_root:
        return np.clip(i + offsets[None, :], 0, m)
    pred = np.clip(i + offsets[None, :], 1, m)
    itself = (pred == i) & (offsets[None, :] != 0)  # clipped back onto the word: first or last word
    return np.where(itself, np.where(i == 1, 2, i - 1), pred)


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
        clip_to_root: Clark et al.'s published clipping ``clip(i + k, 0, m)``, under which a baseline can
            predict ROOT; default False: ``clip(i + k, 1, m)``, never ROOT (module docstring).
        sided: the words split by the side of their gold word, as :class:`~probes.analysis.dependency.HeadAccuracy`
            scores them for a decoder, so that a decoder's heads and the baseline are scored on the same words;
            an offset or position then counts only on its own side (the edge rule never crosses to the other).
    """

    items: ClassVar[str] = "sentences"

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    offsets: tuple[int, ...]
    clip_to_root: bool
    poss_rule: bool
    keep_units: bool
    sided: bool
    _vocab: RelationColumns
    _correct: npt.NDArray[np.int64]
    _total: npt.NDArray[np.int64]
    _n_units: int
    _pos_rows: list[npt.NDArray[np.int64]]
    _pos_units: list[int]
    _unit_len: list[npt.NDArray[np.int64]]
    _unit_rel: list[npt.NDArray[np.int32]]
    _unit_total: list[npt.NDArray[np.int32]]
    _unit_correct: list[npt.NDArray[np.uint16]]
    _grid_correct: npt.NDArray[np.int64]
    _unit_grid: list[npt.NDArray[np.uint16]]
    _pending: list[Sentence]

    def __init__(self, offsets: Sequence[int] = CLARK_OFFSETS, *, poss_rule: bool = True,
                 keep_units: bool = True, clip_to_root: bool = False, sided: bool = False) -> None:
        super().__init__()
        self.add_option("offsets", tuple(int(k) for k in offsets))
        self.add_option("clip_to_root", bool(clip_to_root))
        self.add_option("poss_rule", poss_rule)
        self.add_option("keep_units", keep_units)
        self.add_option("sided", bool(sided))
        self.add_state("_vocab", RelationColumns(sided=sided), "vocab")
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
        self.grid = () if clip_to_root else POSITION_GRID
        self.add_state("_grid_correct", np.zeros((len(self.grid), 0), dtype=np.int64), "sum", vocab="_vocab")  # (G, R)
        self.add_state("_unit_grid", [], "extend")  # per pair (P, G) counts, aligned with _unit_correct
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
        pred = _predict(inc.position, inc.length, offsets, self.clip_to_root)  # (W, K) 1-based, 0 = ROOT
        hits = pred[inc.source] == inc.target[:, None]  # (E, K)
        right = inc.target > inc.position[inc.source] if self.sided else None  # (E,) gold word on the right
        if right is not None:  # a decoder's baseline looks one way too: the edge rule must not cross sides
            hits &= np.where(right[:, None], offsets[None, :] > 0, offsets[None, :] < 0)
        pair_counts = inc.pair_sums(hits)  # (P, K)
        k = len(self._vocab)
        self._grow("_vocab", k)
        self._correct[:, :k] += inc.column_sums(pair_counts, k).T
        self._total[:k] += inc.total
        grid_counts = None
        if self.grid:  # Voita's positions, scored with the same edge rule as the offsets
            grid = np.asarray(self.grid, dtype=np.int64)
            grid_hits = _predict(inc.position, inc.length, grid, False)[inc.source] == inc.target[:, None]  # (E, G)
            if right is not None:
                grid_hits &= np.where(right[:, None], grid[None, :] > 0, grid[None, :] < 0)
            grid_counts = inc.pair_sums(grid_hits)  # (P, G)
            self._grid_correct[:, :k] += inc.column_sums(grid_counts, k).T
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
            if grid_counts is not None:
                self._unit_grid.append(grid_counts)
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
        grid_units = None
        if units is not None and self.grid:  # units kept (keep_units)
            grid_units = UnitCounts(units.indptr, units.relation, units.total,
                                    np.concatenate(self._unit_grid) if self._unit_grid
                                    else np.zeros((0, len(self.grid)), np.uint16))
        return BaselineScores(self.offsets, self._correct[:, :r].copy(), self._total[:r].copy(), names, positions,
                              self._n_units, units, unit_positions, self.clip_to_root, self.grid,
                              self._grid_correct[:, :r].copy() if self.grid else None, grid_units)


def offset_baseline(sentences: Iterable[Sentence], *, offsets: Sequence[int] = CLARK_OFFSETS,
                    poss_rule: bool = True, keep_units: bool = False, clip_to_root: bool = False,
                    sided: bool = False) -> BaselineScores:
    """Functional twin of :class:`OffsetBaseline`: the baselines of a whole treebank."""
    acc = OffsetBaseline(offsets, poss_rule=poss_rule, keep_units=keep_units, clip_to_root=clip_to_root,
                         sided=sided)
    for sentence in sentences:
        acc.update(sentence)
    return acc.compute()
