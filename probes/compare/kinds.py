"""Which heads are positional, rare-word and broad (from an atlas), and the per-model counts of head kinds."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.types import HeadKinds

__all__ = ["head_masks", "head_kinds", "KIND_RULES", "BROAD"]

#: Clark et al.'s Fig. 6 label of a broad head (:data:`probes.heads.groups.BEHAVIOUR_RULES`).
BROAD = "attend broadly"

#: How each kind is decided (the ``rules`` of :class:`HeadKinds`).
KIND_RULES: dict[str, str] = {
    "specialised": "its best relation beats that relation's best baseline on held-out data, paired test, "
                   "Holm-corrected over every head (see the specialisation table)",
    "positional": "Voita et al.: the argmax falls at one relative offset for at least 90% of token rows",
    "broad": "Clark et al. Fig. 6: labelled 'attend broadly' (mean entropy above 3.8 nats scaled to the data's "
             "uniform entropy, no later rule matching)",
    "rare_word": "the argmax hits the sentence's rarest word at least twice as often as chance and as the median head",
}


def head_masks(atlas: Any) -> dict[str, npt.NDArray[np.bool_]]:
    """``{"positional", "broad", "rare_word"}`` -> ``(L, H)`` bool, from the atlas's roles and surface statistics."""
    from probes.heads.groups import behaviour_labels
    from probes.heads.roles import rare_word_heads

    roles = atlas.roles
    shape = roles.confidence().shape
    labels = behaviour_labels(atlas.surface).reshape(shape)
    return {"positional": np.asarray(roles.positional() != 0), "broad": labels == BROAD,
            "rare_word": rare_word_heads(roles.rare_rate(), roles.rare_chance())}


def head_kinds(atlas: Any, specialised: npt.NDArray[np.bool_] | None, model: str, data: str) -> HeadKinds:
    """The counts of each kind in one model (``specialised`` ``(L, H)`` from Q2; -1 when it is unknown)."""
    masks = head_masks(atlas)
    n = int(masks["positional"].size)
    return HeadKinds(model=model, data=data, n_heads=n,
                     specialised=-1 if specialised is None else int(np.count_nonzero(specialised)),
                     positional=int(np.count_nonzero(masks["positional"])), broad=int(np.count_nonzero(masks["broad"])),
                     rules={k: v for k, v in KIND_RULES.items() if k != "rare_word"})
