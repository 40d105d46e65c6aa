"""Result types of head scoring and baselines: pure, frozen, mergeable counts.

These types hold integer counts only (never attention maps), so they are small,
exact, and can be added together when several shards were scored apart.
Layers and heads are 0-based here; :func:`probes.heads.naming.head_name` names them
1-based for people.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import InputError

__all__ = [
    "ALL",
    "ALL_NOPUNCT",
    "pooled_name",
    "UnitCounts",
    "HeadScores",
    "BaselineScores",
    "merge_relations",
    "redundant_pools",
]

#: Every word, punctuation and root included (Clark et al.'s "All").
ALL = "ALL"
#: Every word except those labelled ``punct``.
ALL_NOPUNCT = "ALL-nopunct"


def pooled_name(base: str) -> str:
    """Name of the pooled base relation: ``nmod:*`` = ``nmod`` plus every ``nmod:<subtype>``.

    The ``:*`` suffix cannot collide with a UD label (subtypes are letters only).
    """
    return f"{base}:*"


@dataclass(frozen=True)
class UnitCounts:
    """Per-unit (per-sentence) counts, kept so that intervals can resample units.

    Stored sparsely, like a CSR matrix: unit ``u`` owns rows ``indptr[u]:indptr[u+1]``,
    one row per relation present in that unit.

    Attributes:
        indptr: ``(n_units + 1,)`` int64 row offsets.
        relation: ``(nnz,)`` int32 relation index of each row.
        total: ``(nnz,)`` int32 number of words of that relation in the unit.
        correct: ``(nnz, *k)`` uint16 correct counts of each scored predictor
            (``(nnz, D, L, H)`` for heads, ``(nnz, n_offsets)`` for offsets).
    """

    indptr: npt.NDArray[np.int64]
    relation: npt.NDArray[np.int32]
    total: npt.NDArray[np.int32]
    correct: npt.NDArray[np.uint16]

    @property
    def n_units(self) -> int:
        """Number of units (sentences)."""
        return int(self.indptr.shape[0] - 1)

    @property
    def nbytes(self) -> int:
        """Memory held, in bytes."""
        return int(self.indptr.nbytes + self.relation.nbytes + self.total.nbytes + self.correct.nbytes)

    def unit_of_row(self) -> npt.NDArray[np.int64]:
        """``(nnz,)`` the unit each row belongs to."""
        return np.repeat(np.arange(self.n_units), np.diff(self.indptr))

    def columns(self, relations: npt.ArrayLike, picks: Sequence[tuple[int, ...]]) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64]
    ]:
        """Per-unit counts of one predictor per requested relation.

        Args:
            relations: ``(k,)`` relation indices.
            picks: ``k`` index tuples into the trailing axes of ``correct``
                (e.g. ``(direction, layer, head)``), one per relation.

        Returns:
            ``(correct, total)``, both ``(n_units, k)`` int64.
        """
        relations = np.asarray(relations, dtype=np.int64)
        k = relations.shape[0]
        out_c = np.zeros((self.n_units, k), dtype=np.int64)
        out_t = np.zeros((self.n_units, k), dtype=np.int64)
        units = self.unit_of_row()
        for col, (rel, pick) in enumerate(zip(relations, picks)):
            rows = np.flatnonzero(self.relation == rel)
            out_t[units[rows], col] = self.total[rows]
            out_c[units[rows], col] = self.correct[(rows, *pick)] if pick else self.correct[rows]
        return out_c, out_t

    def remap(self, mapping: npt.NDArray[np.int64]) -> UnitCounts:
        """The same counts with relation ``r`` renamed ``mapping[r]``."""
        return UnitCounts(self.indptr, mapping[self.relation].astype(np.int32), self.total, self.correct)

    def concat(self, other: UnitCounts) -> UnitCounts:
        """Units of ``self`` followed by units of ``other`` (same relation numbering)."""
        if self.correct.shape[1:] != other.correct.shape[1:]:
            raise InputError(
                f"cannot merge per-unit counts of shape {self.correct.shape[1:]} with {other.correct.shape[1:]}"
            )
        return UnitCounts(
            np.concatenate([self.indptr, other.indptr[1:] + self.indptr[-1]]),
            np.concatenate([self.relation, other.relation]),
            np.concatenate([self.total, other.total]),
            np.concatenate([self.correct, other.correct]),
        )


def redundant_pools(relations: Sequence[str]) -> set[str]:
    """Pooled ``base:*`` names whose base never occurs with a subtype (they repeat ``base``)."""
    subtyped = {r.split(":", 1)[0] for r in relations if ":" in r and not r.endswith(":*")}
    return {r for r in relations if r.endswith(":*") and r[:-2] not in subtyped}


def merge_relations(a: Sequence[str], b: Sequence[str]) -> tuple[tuple[str, ...], npt.NDArray[np.int64]]:
    """Union of two relation lists (``a``'s order first) and the index map of ``b`` into it."""
    merged = list(a)
    index = {r: i for i, r in enumerate(merged)}
    mapping = np.empty(len(b), dtype=np.int64)
    for j, rel in enumerate(b):
        if rel not in index:
            index[rel] = len(merged)
            merged.append(rel)
        mapping[j] = index[rel]
    return tuple(merged), mapping


def _widen(counts: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.int64]:
    """Pad the last axis of ``counts`` with zeros up to length ``n``."""
    pad = n - counts.shape[-1]
    if pad <= 0:
        return counts
    return np.concatenate([counts, np.zeros(counts.shape[:-1] + (pad,), dtype=counts.dtype)], axis=-1)


@dataclass(frozen=True)
class HeadScores:
    """How often each head's most-attended word is the gold head (Clark et al. 2019 §4.2).

    Attributes:
        correct: ``(n_directions, n_layers, n_heads, n_relations)`` int64 correct counts.
        total: ``(n_relations,)`` int64 number of scored words per relation.
        relations: relation names (full UD labels, ``base:*`` pools, ``ALL``, ``ALL-nopunct``).
        directions: names of axis 0 (see :data:`probes.heads.naming.DIRECTIONS`).
        layers: 0-based model layers of axis 1.
        heads: 0-based model heads of axis 2.
        n_units: number of sentences scored.
        n_skipped: number of sentences not scored (attention shorter than the sentence).
        units: per-sentence counts for bootstrap intervals, or None if not kept.
        metadata: free-form facts (options, model, data).
    """

    correct: npt.NDArray[np.int64]
    total: npt.NDArray[np.int64]
    relations: tuple[str, ...]
    directions: tuple[str, ...]
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    n_units: int = 0
    n_skipped: int = 0
    units: UnitCounts | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def index(self, relation: str) -> int:
        """Position of ``relation`` on the last axis; InputError if it was never seen."""
        try:
            return self.relations.index(relation)
        except ValueError:
            raise InputError(f"relation {relation!r} does not occur in the scored data") from None

    def count(self, relation: str) -> int:
        """Number of scored words of ``relation``."""
        return int(self.total[self.index(relation)])

    def accuracy(self) -> npt.NDArray[np.float64]:
        """``(n_directions, n_layers, n_heads, n_relations)`` accuracies; NaN where a relation has no words."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.correct / np.where(self.total > 0, self.total, np.nan)

    def best(self, relation: str) -> tuple[int, int, int, float]:
        """Best ``(direction, layer_pos, head_pos, accuracy)`` for ``relation``.

        Ties are broken deterministically: higher accuracy, then lower layer, head,
        and direction (Clark's notebook silently kept the last of equals).
        """
        r = self.index(relation)
        counts = self.correct[..., r]  # (D, L, H)
        # order: (layer, head, direction) ascending among the maxima
        flat = np.transpose(counts, (1, 2, 0)).reshape(-1)
        pos = int(np.argmax(flat))  # first maximum = lowest (layer, head, direction)
        n_h, n_d = counts.shape[2], counts.shape[0]
        layer, rest = divmod(pos, n_h * n_d)
        head, direction = divmod(rest, n_d)
        total = self.total[r]
        return direction, layer, head, (float(counts[direction, layer, head] / total) if total else float("nan"))

    def __add__(self, other: HeadScores) -> HeadScores:
        """Counts of both (scored on different data with the same heads and directions)."""
        if (self.directions, self.layers, self.heads) != (other.directions, other.layers, other.heads):
            raise InputError(
                "cannot add HeadScores over different heads: expected directions/layers/heads "
                f"{self.directions}/{self.layers}/{self.heads}, found {other.directions}/{other.layers}/{other.heads}"
            )
        relations, mapping = merge_relations(self.relations, other.relations)
        n = len(relations)
        correct = _widen(self.correct, n).copy()
        total = _widen(self.total, n).copy()
        np.add.at(correct, (..., mapping), other.correct)
        np.add.at(total, mapping, other.total)
        units = None
        if self.units is not None and other.units is not None:
            units = self.units.concat(other.units.remap(mapping))
        return HeadScores(
            correct, total, relations, self.directions, self.layers, self.heads,
            self.n_units + other.n_units, self.n_skipped + other.n_skipped, units, dict(self.metadata),
        )


@dataclass(frozen=True)
class BaselineScores:
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

    def offset_accuracy(self, relation: str, offset: int) -> float:
        """Accuracy of fixed ``offset`` on ``relation`` (NaN if the relation is absent)."""
        if relation not in self.relations:
            return float("nan")
        r = self.relations.index(relation)
        if offset not in self.offsets:
            raise InputError(f"offset {offset} was not scored; scored offsets are {list(self.offsets)}")
        total = self.total[r]
        return float(self.correct[self.offsets.index(offset), r] / total) if total else float("nan")

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
        correct = _widen(self.correct, n).copy()
        total = _widen(self.total, n).copy()
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
