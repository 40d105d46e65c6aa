"""Which heads are rare-word heads (Voita et al. 2019), from the role statistics of
:class:`~probes.analysis.roles.RolesResult`: one rule, shared by the atlas's table and the cross-model comparison."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["rare_word_heads", "RARE_FACTOR"]

#: A rare-word head's rate of pointing at the rarest word is at least this many times both the chance
#: rate and the median rate of all heads (the median controls for the subword bias of word maps:
#: a rare word has more tokens, so more summed column mass, whatever the head does).
RARE_FACTOR = 2.0


def rare_word_heads(rate: npt.NDArray[np.float64], chance: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """``(L, H)`` True where a head is a rare-word head: its ``rate`` at least :data:`RARE_FACTOR` times the
    ``chance`` rate and the median rate of all heads (False where rates are NaN)."""
    if np.isnan(rate).all():
        return np.zeros(rate.shape, dtype=bool)
    median = float(np.nanmedian(rate))
    with np.errstate(invalid="ignore"):
        return (rate >= RARE_FACTOR * chance) & (rate >= RARE_FACTOR * median) & np.isfinite(rate)
