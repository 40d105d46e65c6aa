"""``heads.csv``: one row per head with every atlas measure, pattern, role and group.

The table is made from an :class:`~probes.runs.atlas.Atlas` (never the reverse). Layers and heads
are 1-based. The role rules are stated in :data:`ROLE_RULES` and printed with every atlas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.heads.roles import RARE_FACTOR, rare_word_heads
from probes.results import require_pandas

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["heads_table", "rare_word_heads", "ROLE_RULES", "RARE_FACTOR"]

ROLE_RULES = {
    "confidence": "mean over token rows of the largest weight, end special excluded (Voita et al.)",
    "positional": "the argmax (end special excluded) falls at one relative offset for at least 90% of token rows "
                  "(Voita et al.); the column holds that offset, 0 = none",
    "rare_word": f"in sentences whose rarest word is outside the 500 most frequent, the word argmax hits the rarest "
                 f"word at least {RARE_FACTOR:g} times as often as a random argmax would and as the median head",
    "syntactic": "the head is the leaderboard's reported head of a relation and beats the best baseline under "
                 "the paired test, Holm-corrected, with heads chosen on the selection half (held out)",
}


def _flat(values: npt.ArrayLike) -> npt.NDArray[Any]:
    return np.asarray(values).reshape(-1)


def _columns(atlas: Any) -> dict[str, Any]:
    """Every column after ``layer, head, head_name``, in order, flattened over ``layer * H + head``."""
    from probes.analysis.patterns import PATTERN_COLUMNS
    from probes.heads.profile import syntactic_heads

    surface, roles, patterns = atlas.surface, atlas.roles, atlas.patterns
    out: dict[str, Any] = {key: _flat(surface.mean(key)) for key in surface.keys}
    out["confidence"] = _flat(roles.confidence())
    out["positional"] = _flat(roles.positional()).astype(np.int64)
    out["positional_share"] = _flat(roles.positional_share())
    rate, chance = roles.rare_rate(), roles.rare_chance()
    out.update({"rare_rate": _flat(rate), "rare_chance": _flat(chance), "rare2_rate": _flat(roles.rare2_rate()),
                "rare2_chance": _flat(roles.rare2_chance()), "rare_word": _flat(rare_word_heads(rate, chance))})
    fractions = patterns.fractions()  # (L, H, 5)
    for k, name in enumerate(PATTERN_COLUMNS):
        out[name] = _flat(fractions[..., k])
    out["pattern"] = _flat(patterns.majority())
    relations = syntactic_heads(atlas.board.rows, atlas.layers, atlas.heads)
    out["syntactic"] = np.array([bool(r) for r in relations])
    out["syntactic_relations"] = list(relations)
    profile = atlas.profile
    n = len(out["confidence"])
    out.update({"best_relation": list(profile.relation) if profile else [""] * n,  # none listed: empty
                "best_direction": list(profile.direction) if profile else [""] * n,
                "best_accuracy": _flat(profile.accuracy) if profile else np.full(n, np.nan),
                "best_margin": _flat(profile.margin) if profile else np.full(n, np.nan)})
    out.update({"cluster": _flat(atlas.clusters), "mds_x": atlas.layout[:, 0], "mds_y": atlas.layout[:, 1]})
    if atlas.gradients is not None:
        for kind in atlas.gradients.key_types:
            out[f"grad_{kind}"] = _flat(atlas.gradients.of(kind))
    if atlas.coref_accuracy is not None:
        out["coref_accuracy"] = _flat(atlas.coref_accuracy)
    if atlas.surface_words is not None:
        out.update({f"word_{key}": _flat(atlas.surface_words.mean(key)) for key in atlas.surface_words.keys})
    types = getattr(atlas, "head_types", None)  # None: not computed, or an atlas saved before head types
    if types is not None:
        out.update(head_type_columns(types))
    sinks = getattr(atlas, "sinks", None)  # None: an atlas saved before attention sinks were measured
    if sinks is not None:
        out.update({"to_first": _flat(sinks.to_first), "sink_share": _flat(sinks.sink_share)})
    return out


def head_type_columns(types: Any) -> dict[str, Any]:
    """``<type>_score`` per head type scored, and ``head_types``: the types a head is (``none``), strongest first."""
    out: dict[str, Any] = {f"{name}_score": _flat(types.score(name)) for name in types.types}
    index = {(a, b): k for k, (a, b) in enumerate((a, b) for a in types.layers for b in types.heads)}
    names: list[list[str]] = [[] for _ in index]
    for name in types.types:
        for head in types.found(name):
            names[index[head]].append(name)
    out["head_types"] = [", ".join(n) or "none" for n in names]
    return out


def heads_table(atlas: Any) -> pd.DataFrame:
    """One row per head: 1-based ``layer``, ``head``, ``head_name``, then every measure (see :data:`ROLE_RULES`)."""
    pandas = require_pandas()
    n_heads = len(atlas.heads)
    layer = np.repeat(np.asarray(atlas.layers) + 1, n_heads)
    head = np.tile(np.asarray(atlas.heads) + 1, len(atlas.layers))
    table = pandas.DataFrame({"layer": layer, "head": head, "head_name": [f"{a}-{b}" for a, b in zip(layer, head)]})
    for name, values in _columns(atlas).items():
        table[name] = values
    return table
