"""Q5: patterns and roles per layer of one model (from its atlas), on relative depth."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.kinds import head_masks
from probes.compare.types import LayerProfile

__all__ = ["layer_profiles"]


def layer_profiles(atlas: Any, specialised: npt.NDArray[np.bool_] | None, model: str, data: str
                   ) -> tuple[LayerProfile, ...]:
    """One :class:`LayerProfile` per layer: the share of the layer's heads whose majority Kovaleva pattern is each
    of :data:`probes.analysis.patterns.PATTERNS`, the shares of positional, rare-word, specialised (NaN when
    ``specialised`` ``(L, H)`` is None) and broad heads, and the mean confidence (NaN heads ignored)."""
    from probes.analysis.patterns import PATTERNS

    majority = np.asarray(atlas.patterns.majority())  # (L, H) names, "" without maps
    masks = head_masks(atlas)
    confidence = np.asarray(atlas.roles.confidence(), dtype=np.float64)  # (L, H)
    out = []
    for pos, layer in enumerate(atlas.roles.layers):
        n = int(majority.shape[1])
        with np.errstate(invalid="ignore"):
            mean_conf = float(np.nanmean(confidence[pos])) if np.isfinite(confidence[pos]).any() else float("nan")
        out.append(LayerProfile(
            model=model, data=data, layer=int(layer), n_heads=n,
            patterns={name: float(np.count_nonzero(majority[pos] == name) / n) for name in PATTERNS},
            positional=float(masks["positional"][pos].mean()), rare_word=float(masks["rare_word"][pos].mean()),
            specialised=float("nan") if specialised is None else float(np.asarray(specialised)[pos].mean()),
            broad=float(masks["broad"][pos].mean()), confidence=mean_conf))
    return tuple(out)
