"""Value zeroing per head (Mohebbi et al. 2023): how much a layer's output at token i changes when head h no longer
receives token j's value.

For kept layer l, query head h, query i and key j the raw score is ``1 - cos(y_i, y_i^(h,j))``, y the output hidden
states of the layer's whole block (attention, MLP and norms, as the model runs it) and y^(h,j) the same block run
again with head h's value of token j set to zero. Values do not enter the attention weights, so zeroing one changes
only head h's output, by ``-alpha^h_ij v^h_j`` at every query i: the block is re-run from the inputs it got in one
ordinary forward pass, on a batch of copies (one per (h, j) pair), with a forward pre-hook on the head seam (the
attention output projection, whose input holds head h at ``[h*d, (h+1)*d)``) subtracting that term from head h's
slice. This is exact for every family, grouped-query attention included (query head h reads kv head
``h // (H / KV)``, and only head h's output changes, not the other heads of its group).

Cost: per input and kept layer, ``H x T`` block runs on ``T`` tokens, batched ``max_copies`` at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from probes.errors import ConfigError, ModelOutputError
from probes.extraction import families

__all__ = ["value_zeroing"]


@dataclass(frozen=True)
class _Layer:
    """What one kept layer got and gave in the forward pass of one input (``n`` tokens, batch 1).

    Attributes:
        args, kwargs: the block's inputs as its ``forward`` got them (hidden states ``(1, n, D)``, mask, positions).
        output: the block's output hidden states ``(1, n, D)``.
        weights: the attention weights ``(H, n, n)``.
        values: each query head's values ``(n, H, d)`` (grouped-query attention expanded).
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: torch.Tensor
    weights: torch.Tensor
    values: torch.Tensor


def _hidden(output: Any) -> torch.Tensor:
    """The hidden states of a block's output: the tensor itself, or the first element of a tuple or ModelOutput."""
    return output if isinstance(output, torch.Tensor) else output[0]


def _sites(model: Any, layers: Sequence[int]) -> tuple[Any, list[families.ValueSite], list[families.HeadSite]]:
    """The base model's blocks, value sites and head seams, after refusing a family without them or a bad layer.

    Raises:
        ConfigError: the family lacks layers, values or the output projection in
            :data:`probes.extraction.families.FAMILIES`; a layer out of range; a model in training mode.
    """
    family = families.family_of(model)
    model_type = getattr(families.text_config(model), "model_type", None)
    if family is None or not (family.layers and family.values and family.head_output):
        known = sorted(name for name, f in families.FAMILIES.items() if f.layers and f.values and f.head_output)
        raise ConfigError(f"value zeroing: {model_type!r} models are not supported (expected a model type in "
                          f"{known}): it needs the family's layers, value projection and attention output "
                          "projection, which probes.extraction.families does not know for this family")
    n_layers = families.n_layers(model)
    bad = [layer for layer in layers if not 0 <= int(layer) < n_layers]
    if bad:
        raise ConfigError(f"value zeroing: expected 0-based layers in [0, {n_layers}) for {model_type!r}, "
                          f"found {bad}")
    if getattr(model, "training", False):
        raise ConfigError(f"value zeroing: expected a model in eval mode, found {model_type!r} in training mode "
                          "(dropout would make the re-runs differ from the forward pass)")
    base = getattr(model, "base_model", model)
    return base.get_submodule(family.layers), families.value_sites(model), families.head_sites(model)


def _capture(model: Any, blocks: Any, sites: list[families.ValueSite], layers: Sequence[int],
             ids: torch.Tensor, mask: torch.Tensor) -> dict[int, _Layer]:
    """One forward pass of one input ``(1, n)`` with ``output_attentions=True`` and hooks: each kept layer's block
    inputs and output, attention weights and values.

    The weights come from the model's ``attentions`` (not from a hook on the attention modules:
    :func:`probes.extraction.capture.attention_modules` lives in a module that imports this one), so the pass runs
    to the end; one pass costs about ``1 / (H x n)`` of the re-runs.

    Raises:
        ModelOutputError: the model's attention gives no weights (not eager attention).
    """
    base = getattr(model, "base_model", model)
    got: dict[tuple[str, int], Any] = {}  # (what, layer) -> what the hooks saw

    def block_inputs(layer: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            got["args", layer], got["kwargs", layer] = args, dict(kwargs)
        return hook

    def block_output(layer: int) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            got["output", layer] = _hidden(output)
        return hook

    def values(layer: int) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            got["values", layer] = sites[layer].values(output)[0]  # (n, H, d)
        return hook

    handles = []
    kwargs: dict[str, Any] = {"return_dict": True, "output_attentions": True}
    if families.is_decoder(model):
        kwargs["use_cache"] = False
    try:
        for layer in layers:
            block = blocks[layer]
            handles.append(block.register_forward_pre_hook(block_inputs(layer), with_kwargs=True))
            handles.append(block.register_forward_hook(block_output(layer), prepend=True))
            handles.append(sites[layer].module.register_forward_hook(values(layer)))
        attentions = base(input_ids=ids, attention_mask=mask, **kwargs).attentions
    finally:
        for handle in handles:
            handle.remove()
    for layer in layers:
        held = attentions[layer] if attentions is not None and len(attentions) > layer else None
        if isinstance(held, torch.Tensor):
            got["weights", layer] = held[0]  # (H, n, n)
    fields = ("args", "kwargs", "output", "weights", "values")
    missing = [layer + 1 for layer in layers if any((field, layer) not in got for field in fields)]
    if missing:
        impl = getattr(model.config, "_attn_implementation", None)
        raise ModelOutputError(f"value zeroing: {type(model).__name__} gave no attention weights or values for "
                               f"layer(s) {missing} (attention implementation {impl!r}); load it with "
                               "attn_implementation='eager'")
    return {layer: _Layer(*(got[field, layer] for field in fields)) for layer in layers}


def _copies(args: tuple[Any, ...], kwargs: dict[str, Any], copies: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The block's inputs for ``copies`` copies of one input: the hidden states ``(1, n, D)`` repeated to
    ``(copies, n, D)``; everything else (masks, position embeddings, relative positions) left as it is, at batch 1,
    broadcast over the copies (DeBERTa's relative positions ``(1, n, n)`` must stay at batch 1)."""
    if args:
        hidden = args[0]
        return (hidden.expand(copies, *hidden.shape[1:]).contiguous(), *args[1:]), kwargs
    hidden = kwargs["hidden_states"]
    return args, {**kwargs, "hidden_states": hidden.expand(copies, *hidden.shape[1:]).contiguous()}


def _subtract(delta: torch.Tensor) -> Any:
    """A forward pre-hook taking ``delta`` ``(c, n, H*d)`` out of the head seam's input ``(c, n, H*d)``."""
    def hook(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (args[0] - delta.to(args[0]), *args[1:])
    return hook


def _layer_scores(block: Any, seam: families.HeadSite, got: _Layer, keys: torch.Tensor,
                  max_copies: int) -> torch.Tensor:
    """``(H, n, n)`` float64: 1 - cos(y_i, y_i^(h,j)) for every head h, query i and key j in ``keys`` (other keys 0),
    the block re-run on at most ``max_copies`` copies at a time with head h's term ``alpha^h_ij v^h_j`` taken out of
    the head seam's input in copy (h, j)."""
    weights, values = got.weights, got.values  # (H, n, n), (n, H, d)
    n_heads, n_tok, _ = weights.shape
    head_dim = values.shape[-1]
    heads = torch.arange(n_heads, device=weights.device).repeat_interleave(len(keys))  # (P,) pairs (h, j), h-major
    tokens = keys.to(weights.device).repeat(n_heads)  # (P,)
    y = got.output[0].double()  # (n, D)
    y_norm = y.norm(dim=-1)  # (n,)
    scores = torch.zeros((n_heads, n_tok, n_tok), dtype=torch.float64, device=y.device)
    for start in range(0, len(heads), max_copies):
        hs, js = heads[start:start + max_copies], tokens[start:start + max_copies]  # (c,)
        copies = len(hs)
        delta = torch.zeros((copies, n_tok, n_heads, head_dim), dtype=weights.dtype, device=weights.device)
        delta[torch.arange(copies, device=hs.device), :, hs, :] = \
            weights[hs, :, js].unsqueeze(-1) * values[js, hs].unsqueeze(1)  # (c, n, d): alpha^h_ij v^h_j
        handle = seam.module.register_forward_pre_hook(_subtract(delta.reshape(copies, n_tok, -1)), prepend=True)
        try:
            block_args, block_kwargs = _copies(got.args, got.kwargs, copies)
            zeroed = _hidden(block.forward(*block_args, **block_kwargs)).double()  # (c, n, D)
        finally:
            handle.remove()
        cos = (zeroed * y).sum(dim=-1) / (zeroed.norm(dim=-1) * y_norm).clamp_min(1e-300)  # (c, n)
        scores[hs.to(y.device), :, js.to(y.device)] = 1.0 - cos
    return scores


def value_zeroing(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, layers: Sequence[int], *,
                  max_copies: int = 256) -> torch.Tensor:
    """Value-zeroing scores ``(B, L', H, T, T)`` float32 on the CPU: for kept layer ``layers[k]`` (0-based), head
    h, query i and key j, ``1 - cos(y_i, y_i^(h,j))``, y the output hidden states of that layer's block and
    y^(h,j) the same block with head h's value of token j zeroed (not row-normalised: the caller row-normalises).
    Padding queries and keys (``attention_mask`` 0) score 0.

    One input at a time: one forward pass (``torch.inference_mode``, no cache for decoders, ``output_attentions``)
    with hooks capturing each kept block's inputs and output and its values; then
    each kept block re-run on ``H x n`` copies of the input (``n`` its tokens up to the last unmasked one), at
    most ``max_copies`` per run, head h's term ``alpha^h_ij v^h_j`` subtracted from its slice of the attention
    output projection's input in copy (h, j). The model must be in eval mode with eager attention.

    Every hook is removed on the way out. The blocks are re-run through ``forward`` (their own hooks do not
    run; hooks on their submodules do, as in the model's pass): a caller's hooks must not raise during the
    re-runs (e.g. to stop a pass early) and must not depend on being called once per forward pass.

    Raises:
        ConfigError: a family without layers, value or output projection in
            :data:`probes.extraction.families.FAMILIES`; a layer out of range; a model in training mode;
            ``max_copies`` below 1.
        ModelOutputError: the model's attention gives no weights (not eager attention).
    """
    layers = [int(layer) for layer in layers]
    blocks, sites, seams = _sites(model, layers)
    if max_copies < 1:
        raise ConfigError(f"value zeroing: expected max_copies >= 1, found {max_copies}")
    batch, n_tok = input_ids.shape
    n_heads = families.n_heads(model)
    scores = torch.zeros((batch, len(layers), n_heads, n_tok, n_tok), dtype=torch.float32)  # (B, L', H, T, T)
    if not layers:
        return scores
    device = model.get_input_embeddings().weight.device
    real = attention_mask.detach().to("cpu") != 0  # (B, T)
    with torch.inference_mode():
        for b in range(batch):
            where = torch.nonzero(real[b]).flatten()
            if len(where) == 0:
                continue
            n = int(where[-1]) + 1  # trailing padding dropped: masked keys take no part in the tokens kept
            ids = input_ids[b:b + 1, :n].to(device)
            mask = attention_mask[b:b + 1, :n].to(device)
            got = _capture(model, blocks, sites, layers, ids, mask)
            for k, layer in enumerate(layers):
                raw = _layer_scores(blocks[layer], seams[layer], got[layer], where, max_copies)
                scores[b, k, :, :n, :n] = raw.float().cpu()
            scores[b, :, :, ~real[b], :] = 0.0  # padding queries (inside the kept tokens: left padding)
    return scores
