"""Helpers shared by the mention-level analyses (coreference, bridging): directions, distance bands, row gathers."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["COREF_DIRECTIONS", "DISTANCE_BANDS", "distance_band", "word_rows"]

#: Which way a head links two mentions: the anaphor's row, or who attends to the anaphor.
COREF_DIRECTIONS: tuple[str, ...] = ("anaphor_to_antecedent", "antecedent_to_anaphor")
#: Sentence-distance bands between two mentions (Pandit & Hou's; their last band stops at 10).
DISTANCE_BANDS: tuple[str, ...] = ("0", "1", "2", "3-5", "6+")

_BAND_EDGES = np.array([1, 2, 3, 6])  # distance d -> band index = searchsorted(edges, d, "right")


def distance_band(distance: npt.ArrayLike) -> npt.NDArray[np.intp]:
    """Band index (0..4 for ``0, 1, 2, 3-5, 6+``) of sentence distances (absolute values taken)."""
    return np.searchsorted(_BAND_EDGES, np.abs(np.asarray(distance)), side="right")


def word_rows(weights: npt.NDArray[Any], positions: npt.NDArray[np.intp], rows: npt.NDArray[np.intp]
              ) -> npt.NDArray[Any]:
    """``(L, H, len(rows), n)``: the given word rows of ``weights`` (L, H, n_pos, n_pos), word columns only.

    ``positions`` (n,) are the word positions among all positions; ``rows`` index words. Gathers
    only the rows needed instead of the whole words-only map (which copies L x H x n x n).
    """
    picked = weights[:, :, positions[rows], :]  # (L, H, R, n_pos)
    if len(positions) == weights.shape[-1]:
        return picked
    return picked[..., positions]
