"""Per-unit (per-sentence) counts behind bootstrap intervals, stored like a CSR matrix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from probes.errors import InputError
from probes.results import Result

__all__ = ["UnitCounts"]


@dataclass(frozen=True)
class UnitCounts(Result):
    """Per-unit (per-sentence) counts, kept so that intervals can resample units.

    Stored sparsely, like a CSR matrix: unit ``u`` owns rows ``indptr[u]:indptr[u+1]``,
    one row per relation present in that unit.

    Attributes:
        indptr: ``(n_units + 1,)`` int64 row offsets.
        relation: ``(nnz,)`` int32 relation index of each row.
        total: ``(nnz,)`` int32 number of words of that relation in the unit.
        correct: ``(nnz, *k)`` uint16 correct counts of each scored predictor
            (``(nnz, D, L, H)`` for heads, ``(nnz, n_offsets)`` for offsets).
        documents: the document id of each unit (``""``: none), so that intervals can resample documents
            (:func:`probes.heads.intervals.resampling_units`); empty when no unit has one (and in results saved
            before documents were kept).
    """

    indptr: npt.NDArray[np.int64]
    relation: npt.NDArray[np.int32]
    total: npt.NDArray[np.int32]
    correct: npt.NDArray[np.uint16]
    documents: tuple[str, ...] = ()

    def _check_loaded(self) -> None:
        """A loaded copy must be a valid CSR layout (offsets from 0 to ``nnz``, never decreasing, one per row)."""
        nnz = self.relation.shape[:1]
        if self.relation.ndim != 1 or self.total.shape != nnz or self.correct.shape[:1] != nnz:
            raise ValueError(f"field 'relation', 'total' and 'correct': expected the same number of rows, found "
                             f"shapes {self.relation.shape}, {self.total.shape} and {self.correct.shape}")
        indptr = self.indptr
        if indptr.ndim != 1 or not indptr.size or indptr[0] != 0 or indptr[-1] != nnz[0] or (np.diff(indptr) < 0).any():
            raise ValueError(f"field 'indptr': expected offsets rising from 0 to {nnz[0]}, found {indptr[:8]}...")
        if self.documents and len(self.documents) != self.n_units:
            raise ValueError(f"field 'documents': expected one id per unit ({self.n_units}), found "
                             f"{len(self.documents)}")

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
        return UnitCounts(self.indptr, mapping[self.relation].astype(np.int32), self.total, self.correct,
                          self.documents)

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
            (self.documents or ("",) * self.n_units) + (other.documents or ("",) * other.n_units)
            if self.documents or other.documents else (),
        )
