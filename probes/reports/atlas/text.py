"""The atlas in words: its findings side by side with Clark et al.'s BERT-base findings, and ``atlas.md``.

Every finding is computed from the atlas' numbers by a rule written next to it (:data:`RULES`), so
the same sentence can be checked for any model: what Clark et al. 2019 found for BERT-base (§3, §6),
what this model shows, and whether the finding holds here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.heads.naming import head_name
from probes.reports.atlas.undefined import NOT_FOR_DECODER, is_decoder_atlas

__all__ = ["Finding", "findings", "atlas_summary", "BROAD_SHARE", "POSITIONAL_SHARE", "RULES"]

#: A head is *broad* when its mean entropy is at least this share of the uniform reference (ln n).
BROAD_SHARE = 0.85
#: Clark et al.'s positional threshold: more than half the attention on the previous / next token.
POSITIONAL_SHARE = 0.5
#: Clark et al.'s threshold for "over half of the attention goes to [SEP]".
SEP_SHARE = 0.5

RULES = {
    "specials": "layer of the largest mean attention (over the layer's heads) to each kind of token; "
                "early = first third of the layers, deep = last third",
    "sep": f"largest layer mean of attention to the end special, against {SEP_SHARE:.0%}",
    "positional": f"heads with more than {POSITIONAL_SHARE:.0%} of their attention on the previous / next token "
                  "(Clark's rule; Voita's 90%-argmax rule is the `positional` column)",
    "broad": f"heads whose mean entropy is at least {BROAD_SHARE:.0%} of the uniform reference ln(n) (a decoder's "
             "row i sees i + 1 tokens: mean ln(i + 1))",
    "head types": "TransformerLens' head-detector scores on repeated random token sequences "
                  "(probes.analysis.head_types); a head is of a type at half an ideal head's score or more",
    "layers": "share of heads whose nearest head (JS distance) is in the same layer, against the share "
              "a random nearest head would reach, (H-1)/(N-1)",
}


@dataclass(frozen=True)
class Finding:
    """One finding: what Clark et al. saw in BERT-base, what this model shows, and whether it holds."""

    topic: str
    clark: str
    here: str
    holds: str  # "yes", "no", "partly" or "n/a"

    def as_dict(self) -> dict[str, str]:
        """The finding as a table row."""
        return {"topic": self.topic, "Clark et al. (BERT-base)": self.clark, "this model": self.here,
                "holds": self.holds}


def _layer_means(surface: Any, key: str) -> npt.NDArray[np.float64]:
    """``(L,)`` mean over each layer's heads of surface measure ``key`` (NaN when empty)."""
    values = surface.mean(key)
    if np.isnan(values).all():
        return np.full(values.shape[0], np.nan)
    return np.nanmean(values, axis=1)


def _third(layer: int, n_layers: int) -> str:
    """``early``, ``middle`` or ``deep``: which third of the layers a 0-based layer is in."""
    return ("early", "middle", "deep")[min(2, 3 * layer // max(n_layers, 1))]


def _none(key: str, decoder: bool) -> str:
    """What to say of a kind of special a model lacks."""
    if not decoder:
        return "none in this model"
    return f"{NOT_FOR_DECODER} (no end special)" if key == "to_sep" else f"{NOT_FOR_DECODER} without BOS"


def _specials_finding(surface: Any, n_layers: int, decoder: bool = False) -> Finding:
    parts, thirds = [], {}
    for key, label in (("to_cls", "start special"), ("to_sep", "end special"), ("to_punct", '"." and ","')):
        means = _layer_means(surface, key)
        if np.isnan(means).all():
            parts.append(f"{label}: {_none(key, decoder)}")
            continue
        peak = int(np.nanargmax(means))
        thirds[key] = _third(peak, n_layers)
        parts.append(f"{label}: peak in layer {peak + 1} ({means[peak]:.0%}, {thirds[key]})")
    expected = {"to_cls": "early", "to_sep": "middle", "to_punct": "deep"}
    agree = sum(thirds.get(k) == v for k, v in expected.items())
    if len(thirds) < len(expected):  # a kind the model lacks: the finding cannot hold or fail as a whole
        holds = "partly" if agree else "n/a"
    else:
        holds = "yes" if agree == len(expected) else "partly" if agree else "no"
    return Finding("which layers attend to the specials",
                   "early layers attend to [CLS], middle layers to [SEP], deep layers (11-12) to \".\" and \",\"",
                   "; ".join(parts), holds)


def _sep_finding(surface: Any, decoder: bool = False) -> Finding:
    means = _layer_means(surface, "to_sep")
    if np.isnan(means).all():
        return Finding("attention to [SEP]", "over half of the attention in layers 6-10 goes to [SEP]",
                       f"{NOT_FOR_DECODER} (no end special)" if decoder else "the model has no end special", "n/a")
    over = [i + 1 for i, m in enumerate(means) if m > SEP_SHARE]
    here = (f"layers over {SEP_SHARE:.0%}: {', '.join(map(str, over))}" if over else
            f"no layer over {SEP_SHARE:.0%} (largest: {np.nanmax(means):.0%})")
    return Finding("attention to [SEP]", "over half of the attention in layers 6-10 goes to [SEP]", here,
                   "yes" if over else "no")


def _positional_finding(surface: Any) -> Finding:
    prev, nxt = surface.mean("to_prev"), surface.mean("to_next")
    n_layers = prev.shape[0]
    names = {}
    for label, values in (("previous", prev), ("next", nxt)):
        layer, head = np.nonzero(values > POSITIONAL_SHARE)
        names[label] = [head_name(int(a), int(b)) for a, b in zip(layer, head)]
    found = names["previous"] + names["next"]
    following = (f"next-token heads: {NOT_FOR_DECODER}" if np.isnan(nxt).all() else
                 f"{len(names['next'])} next-token heads ({', '.join(names['next']) or '-'})")
    here = f"{len(names['previous'])} previous-token heads ({', '.join(names['previous']) or '-'}), {following}"
    early = sum(int(n.split("-")[0]) - 1 < n_layers / 2 for n in found)
    holds = "no" if not found else ("yes" if early * 2 > len(found) else "partly")
    return Finding("positional heads", "4 heads put >50% on the previous token (layers 2, 4, 7, 8), 5 on the "
                   "next token (layers 1, 2, 2, 3, 6); mostly early layers", here, holds)


def _broad_finding(surface: Any) -> Finding:
    entropy = surface.mean("entropy")
    uniform = float(surface.uniform_entropy)
    layer, head = np.nonzero(entropy >= BROAD_SHARE * uniform)
    n_layers = entropy.shape[0]
    low = int((layer < n_layers / 2).sum())
    first = _layer_means(surface, "entropy_first")
    causal = bool(getattr(surface, "causal", False))
    reference = f"uniform reference {uniform:.2f} nats" + (" (causal rows: mean ln(i + 1))" if causal else "")
    if np.isnan(first[-1]):
        why = f"{NOT_FOR_DECODER} (row 0 sees only itself)" if causal else "no start special"
        from_first = f"entropy from the first special: {why}"
    else:
        from_first = f"entropy from the first special {first[-1]:.2f}"
    here = (f"{len(layer)} broad heads ({', '.join(head_name(int(a), int(b)) for a, b in zip(layer, head)) or '-'}; "
            f"{low} in the lower half); {reference}; last layer: {from_first}, all rows {np.nanmean(entropy[-1]):.2f}")
    holds = "no" if not len(layer) else ("yes" if low * 2 > len(layer) else "partly")
    return Finding("broad heads", "some heads, especially in low layers, attend broadly (about 10% at most on any "
                   "word); last-layer entropy from [CLS] 3.89 nats against about 4.8 uniform (128 tokens)", here, holds)


def _layers_finding(distance: npt.NDArray[np.float64], n_layers: int, n_heads: int,
                    clusters: npt.NDArray[np.int64] | None = None) -> Finding:
    """Same-layer nearest heads against chance; "yes" needs cluster structure too (Clark's "clear behavioural
    clusters"): the atlas's head groups with a silhouette >= :data:`~probes.compare.spread.STRUCTURE_SILHOUETTE`."""
    from probes.compare.spread import STRUCTURE_SILHOUETTE, silhouette

    n = distance.shape[0]
    masked = distance + np.diag(np.full(n, np.inf))
    nearest = masked.argmin(axis=1)
    same = float(np.mean(nearest // n_heads == np.arange(n) // n_heads))
    chance = (n_heads - 1) / (n - 1) if n > 1 else float("nan")
    score = silhouette(distance, clusters) if clusters is not None and len(clusters) == n else float("nan")
    structure = bool(np.isfinite(score) and score >= STRUCTURE_SILHOUETTE)
    groups = ("clusters: not measured" if not np.isfinite(score) else
              f"head groups' silhouette {score:.2f} ({'>=' if structure else '<'} {STRUCTURE_SILHOUETTE}: "
              f"{'' if structure else 'no '}substantial cluster structure)")
    here = f"{same:.0%} of heads have their nearest head in the same layer (chance {chance:.0%}); {groups}"
    holds = ("no" if not same > chance else "yes" if same > 2 * chance and structure else "partly")
    return Finding("heads of a layer behave alike", "heads in the same layer sit close together in the MDS of "
                   "JS distances; clear behavioural clusters", here, holds)


def _clusters(atlas: Any) -> npt.NDArray[np.int64] | None:
    """The atlas's head groups as ``(L*H,)`` labels in the order of its distance matrix, or None."""
    labels = getattr(atlas, "clusters", None)
    return None if labels is None else np.asarray(labels, dtype=np.int64).reshape(-1)


def findings(atlas: Any) -> list[Finding]:
    """The atlas' findings beside Clark et al.'s (see :data:`RULES` for each rule)."""
    surface, decoder = atlas.surface, is_decoder_atlas(atlas)
    n_layers, n_heads = len(surface.layers), len(surface.heads)
    out = [_specials_finding(surface, n_layers, decoder), _sep_finding(surface, decoder), _positional_finding(surface),
           _broad_finding(surface), _layers_finding(atlas.distances.distance, n_layers, n_heads, _clusters(atlas))]
    if atlas.gradients is None:
        out.append(Finding("gradients of attention to [SEP]", "from layer 5 on, the gradient of the masked-LM loss "
                           "for attention to [SEP] becomes very small (a no-op)", atlas.gradients_note or "not computed",
                           "n/a"))
    else:
        out.append(_gradient_finding(atlas.gradients, decoder))
    types, why_not = getattr(atlas, "head_types", None), getattr(atlas, "head_types_note", "")
    if types is not None or why_not:  # none asked for (--head-type-sequences 0): no finding to report
        out.append(_head_type_finding(types, why_not))
    return out


_TYPE_LABELS = {"previous_token": "previous-token", "duplicate_token": "duplicate-token", "induction": "induction",
                "next_token": "next-token", "duplicate_token_bidirectional": "duplicate-token (both ways)",
                "induction_bidirectional": "induction (both ways)"}


def _head_type_finding(types: Any, note: str) -> Finding:
    clark = ("not studied by Clark et al.; decoders are known for previous-token, duplicate-token and induction "
             "heads (TransformerLens' head detector; Olsson et al. 2022)")
    if types is None:
        return Finding("head types", clark, note, "n/a")
    parts = []
    for name in types.types:
        found = types.found(name)
        listed = ", ".join(f"{head_name(a, b)} ({types.score(name)[types.layers.index(a), types.heads.index(b)]:.2f})"
                           for a, b in found[:8]) or "none"
        more = f" and {len(found) - 8} more" if len(found) > 8 else ""
        ceiling = float(types.ceiling[types.types.index(name)])
        parts.append(f"{_TYPE_LABELS.get(name, name)} heads: {listed}{more} (ideal {ceiling:.2f})")
    return Finding("head types", clark, "; ".join(parts), "n/a")


def _gradient_finding(gradients: Any, decoder: bool = False) -> Finding:
    per_layer = gradients.per_layer()  # (L, K) mean |dL/dA| by key type
    kinds = list(gradients.key_types)
    sep, other = per_layer[:, kinds.index("sep")], per_layer[:, kinds.index("other")]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = sep / other
    if np.isnan(ratio).all():
        why = f"{NOT_FOR_DECODER} (no end special)" if decoder else "the model has no end special"
        return Finding("gradients of attention to [SEP]", "from layer 5 on, the gradient of the masked-LM loss for "
                       "attention to [SEP] becomes very small (a no-op)", why, "n/a")
    low = [i + 1 for i, r in enumerate(ratio) if r < 0.5]
    here = ("ratio of |gradient| to [SEP] against other tokens per layer: "
            + ", ".join(f"{i + 1}: {r:.2f}" for i, r in enumerate(ratio)))
    return Finding("gradients of attention to [SEP]", "from layer 5 on, the gradient of the masked-LM loss for "
                   "attention to [SEP] becomes very small (a no-op)", here, "yes" if low else "no")


def atlas_summary(atlas: Any) -> str:
    """A terminal summary: the findings, one paragraph each."""
    lines = [f"Head atlas of {atlas.record.model_name} on {(atlas.record.data or {}).get('name')} "
             "(layers and heads 1-based)."]
    for f in findings(atlas):  # a verdict only where there is one ("n/a": a finding Clark et al. did not make)
        verdict = "" if f.holds == "n/a" else f" [{f.holds}]"
        lines.append(f"- {f.topic}{verdict}: {f.here}  (Clark et al.: {f.clark})")
    return "\n".join(lines) + "\n"
