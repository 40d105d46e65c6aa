"""Helpers shared by the mention-level analyses (coreference, bridging): directions, distance bands, row gathers."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from probes.extraction.attention import WordAttention

__all__ = ["COREF_DIRECTIONS", "DISTANCE_BANDS", "distance_band", "word_rows"]

#: Which way a head links two mentions: the anaphor's row, or who attends to the anaphor.
COREF_DIRECTIONS: tuple[str, ...] = ("anaphor_to_antecedent", "antecedent_to_anaphor")
#: Sentence-distance bands between two mentions (Pandit & Hou's; their last band stops at 10).
DISTANCE_BANDS: tuple[str, ...] = ("0", "1", "2", "3-5", "6+")

_BAND_EDGES = np.array([1, 2, 3, 6])  # distance d -> band index = searchsorted(edges, d, "right")


def distance_band(distance: npt.ArrayLike) -> npt.NDArray[np.intp]:
    """Band index (0..4 for ``0, 1, 2, 3-5, 6+``) of sentence distances (absolute values taken)."""
    return np.searchsorted(_BAND_EDGES, np.abs(np.asarray(distance)), side="right")


def word_rows(word_attention: WordAttention, rows: npt.NDArray[np.intp]) -> npt.NDArray[Any]:
    """``(L, H, len(rows), n)``: the given word rows of ``word_attention``, word columns only (a new array):
    :meth:`WordAttention.word_rows`, which reads full maps and rows-only extractions alike and raises
    AlignmentError for a row that was not computed."""
    return word_attention.word_rows(rows)
