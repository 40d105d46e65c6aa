"""Interventions on attention heads: gate (scale) each head's output, or replace it (ablation).

A head's output enters the rest of the model only through the attention output projection
(:func:`probes.extraction.families.head_sites`), whose input concatenates the heads' outputs. A forward
pre-hook on that module rewrites head ``h``'s slice of its input: first the heads in ``ablate`` are
*replaced* (:data:`ABLATIONS`), then every head is *multiplied* by its gate (1 keeps a head, 0 removes it:
Michel et al. 2019's head mask, for every family; gates may require grad). This works with eager and SDPA
attention alike and needs no model class of our own.

Ablations:

* ``"zero"``: the head's output is 0 (the same as a 0 gate);
* ``"mean"``: the head's mean output over the non-padding tokens of a reference set (:func:`head_means`);
* ``"uniform"``: the output the head would give if it attended uniformly to every key the model lets the
  query see (non-padding keys; ``j <= i`` for decoders; the sliding window of local layers), i.e. the mean
  of the head's value vectors over those keys. The values are captured by a forward hook on the value
  projection (:func:`probes.extraction.families.value_sites`: separate or fused q/k/v, grouped-query
  heads) and the attention mask by a forward pre-hook on the base model, so that a model with a head
  (``...ForMaskedLM``) works too (all ones when no mask is passed; a 4-D mask is refused).
  A query that may see no key (a left-padding position of a decoder) gets 0.

What each family needed (details in :data:`probes.extraction.families.VALUE_MODULES`):

============== =================================== =====================================================
family         gates, zero and mean ablation hook  uniform attention: values, visible keys
============== =================================== =====================================================
bert, roberta, input of ``attention.output.dense`` ``attention.self.value``; non-padding keys
electra
deberta-v2     input of ``attention.output.dense`` ``attention.self.value_proj``; non-padding keys
modernbert     input of ``attn.Wo``                chunk 2 of 3 of the fused ``attn.Wqkv``; local layers
                                                   see ``|i - j| <= sliding_window``
gpt2           input of the Conv1D ``attn.c_proj`` chunk 2 of 3 of the fused Conv1D ``attn.c_attn``;
                                                   causal ``j <= i``
llama-style    input of ``self_attn.o_proj``       ``self_attn.v_proj``, KV heads: query head h reads
                                                   KV head ``h // (H / KV)``; causal, sliding layers
============== =================================== =====================================================

Per-row ablation: ``ablate`` may be ``(K, L, H)``: the batch is then ``K`` equal blocks of rows (the same
sentences repeated ``K`` times) and block ``j`` has the heads of ``ablate[j]`` removed, so that ``K`` different
ablations run as one forward pass (:mod:`probes.importance.ablations`). Each block's replacement is computed on
that block's rows alone, exactly as a pass of the block by itself would compute it.

Precision: Llama's RMSNorm and the eager softmax of Llama and ModernBERT run in float32 even in a float64
model, and float64 eager decoders (and ModernBERT's local layers) give NaN at a padding query that sees no
key; both are transformers' doing and show only in tests that compare at float64 precision.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from probes.errors import ConfigError, InputError
from probes.extraction.families import HeadSite, ValueSite, head_sites, value_sites

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

__all__ = ["ABLATIONS", "intervene", "head_gates", "head_means", "uniform_output"]

#: How an ablated head's output is replaced.
ABLATIONS: tuple[str, ...] = ("zero", "mean", "uniform")


def uniform_output(values: torch.Tensor, mask: torch.Tensor, before: int | None = None,
                   after: int | None = None) -> torch.Tensor:
    """``(B, T, H, d)`` each query's mean of ``values`` ``(B, T, H, d)`` over the keys it may see.

    Key ``j`` is seen from query ``i`` when ``mask[b, j]`` (``(B, T)``, non-padding) and
    ``i - before <= j <= i + after`` (``None``: no limit). A query that sees no key gets 0.
    """
    import torch

    length = values.shape[1]
    position = torch.arange(length, device=values.device)
    allowed = mask.to(device=values.device, dtype=torch.bool)[:, None, :].expand(-1, length, -1)  # (B, T, T)
    if before is not None:
        allowed = allowed & (position[None, :] >= position[:, None] - before)
    if after is not None:
        allowed = allowed & (position[None, :] <= position[:, None] + after)
    weights = allowed.to(values.dtype)  # (B, T_query, T_key)
    weights = weights / weights.sum(-1, keepdim=True).clamp(min=1)
    return torch.einsum("bij,bjhd->bihd", weights, values)


def _as_mask(ablate: Any, expected: tuple[int, int]) -> torch.Tensor | None:
    """``ablate`` as a ``(L, H)`` or per-row-block ``(K, L, H)`` bool tensor on the CPU, or ``None`` when no head
    is ablated."""
    import numpy as np
    import torch

    if ablate is None:
        return None
    mask = ablate.detach().cpu() if isinstance(ablate, torch.Tensor) else torch.from_numpy(np.asarray(ablate))
    if mask.dtype != torch.bool or mask.dim() not in (2, 3) or tuple(mask.shape[-2:]) != expected \
            or (mask.dim() == 3 and mask.shape[0] < 1):
        raise ConfigError(f"ablate: expected a bool mask of shape (n_layers, n_heads) = {expected}, found "
                          f"{mask.dtype} of shape {tuple(mask.shape)} (per-row blocks: (blocks, n_layers, n_heads))")
    return mask if bool(mask.any()) else None


def _check_gates(gates: torch.Tensor | None, expected: tuple[int, int]) -> None:
    if gates is None:
        return
    if gates.dim() not in (2, 3) or tuple(gates.shape[-2:]) != expected:
        raise ConfigError(f"gates: expected shape (n_layers, n_heads) = {expected} or (batch, n_layers, n_heads), "
                          f"found {tuple(gates.shape)}")


def _checked_means(means: torch.Tensor | None, sites: list[HeadSite]) -> torch.Tensor:
    """``means`` once checked to be ``(n_layers, n_heads, head_dim)`` for ``sites``."""
    expected = (len(sites), sites[0].n_heads, sites[0].head_dim)
    if means is None or tuple(means.shape) != expected:
        found = None if means is None else tuple(means.shape)
        raise ConfigError(f"means: mean ablation expects (n_layers, n_heads, head_dim) = {expected} "
                          f"(probes.extraction.interventions.head_means), found {found}")
    return means


def _gate_factor(gate: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """``gate`` ``(H,)`` or ``(B, H)`` shaped to multiply ``heads`` ``(B, T, H, d)`` (or ``(..., H, d)``)."""
    gate = gate.to(device=heads.device, dtype=heads.dtype)
    if gate.dim() == 1:
        return gate[:, None]
    if heads.dim() < 3 or heads.shape[0] != gate.shape[0]:
        raise ConfigError(f"gates: per-example gates expect one row per example, expected batch size "
                          f"{heads.shape[0] if heads.dim() >= 3 else None}, found {gate.shape[0]}")
    return gate.reshape(gate.shape[0], *([1] * (heads.dim() - 3)), gate.shape[1], 1)


#: What an ablated head's output becomes: ``replacement(heads (..., H, d), index (k,), rows)`` gives the
#: ``(..., k, d)`` outputs of heads ``index``, ``heads`` being the rows ``rows`` (a slice) of the batch.
Replacement = Callable[[Any, Any, slice], Any]


def _replace_heads(heads: torch.Tensor, ablated: torch.Tensor, replacement: Replacement, rows: slice) -> torch.Tensor:
    """``heads`` ``(..., H, d)`` with the ``ablated`` ``(H,)`` heads' slices replaced (only those are computed)."""
    chosen = ablated.nonzero().flatten().to(heads.device)  # (k,) the ablated heads
    return heads.index_copy(heads.dim() - 2, chosen, replacement(heads, chosen, rows))  # (..., k, d) put in


def _head_hook(site: HeadSite, gate: torch.Tensor | None, ablated: torch.Tensor | None,
               replacement: Replacement) -> Any:
    """A forward pre-hook: replace the ``ablated`` heads' slices, then scale all by ``gate``.

    ``ablated`` is ``(H,)`` for the whole batch, or ``(K, H)``: the batch's rows are ``K`` equal blocks, block
    ``j`` with heads ``ablated[j]`` replaced (each block's replacement computed on its own rows)."""
    import torch

    def hook(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        hidden = args[0]  # (..., n_heads * head_dim)
        shape = hidden.shape
        heads = hidden.reshape(*shape[:-1], site.n_heads, site.head_dim)  # (..., H, d)
        if ablated is not None and ablated.dim() == 1:
            heads = _replace_heads(heads, ablated, replacement, slice(None))
        elif ablated is not None:
            blocks = ablated.shape[0]
            if heads.dim() < 3 or heads.shape[0] % blocks:
                raise ConfigError(f"ablate: per-row blocks need a batch of {blocks} equal blocks of rows, found "
                                  f"{heads.shape[0] if heads.dim() >= 3 else 'no'} rows at {site.name}")
            size = heads.shape[0] // blocks
            parts = []
            for j in range(blocks):
                rows = slice(j * size, (j + 1) * size)
                part = heads[rows]  # (size, T, H, d)
                parts.append(_replace_heads(part, ablated[j], replacement, rows) if bool(ablated[j].any()) else part)
            heads = torch.cat(parts, dim=0)
        if gate is not None:
            heads = heads * _gate_factor(gate, heads)
        return (heads.reshape(shape), *args[1:])

    return hook


@dataclass
class _UniformState:
    """What the uniform ablation's hooks capture during a forward pass: the batch's attention mask (``None``
    when not passed) and each hooked layer's values ``(B, T, H, d)``."""

    mask: torch.Tensor | None = None
    values: dict[int, torch.Tensor] = field(default_factory=dict)

    def clear(self) -> None:
        self.mask = None
        self.values.clear()


def _mask_hook(module: Any, state: _UniformState) -> Any:
    """A forward pre-hook on ``module`` keeping the batch's attention mask (``None`` when not passed)."""
    names = list(inspect.signature(module.forward).parameters)
    position = names.index("attention_mask") if "attention_mask" in names else None

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        mask = kwargs.get("attention_mask")
        if mask is None and position is not None and position < len(args):
            mask = args[position]
        if mask is not None and mask.dim() != 2:
            raise ConfigError(f"uniform attention: expected a (batch, tokens) attention_mask, found shape "
                              f"{tuple(mask.shape)}")
        state.mask = mask

    return hook


def _uniform_replacement(site: ValueSite, state: _UniformState) -> Replacement:
    """The uniform-attention output ``(B, T, k, d)`` of heads ``index`` from the captured values and mask
    (their rows ``rows``)."""
    import torch

    def replacement(heads: torch.Tensor, index: torch.Tensor, rows: slice) -> torch.Tensor:
        values = state.values.get(site.layer)
        values = None if values is None else values[rows]
        if values is None or heads.dim() != 4 or values.shape[:2] != heads.shape[:2]:
            raise ConfigError(f"uniform attention: expected the values of layer {site.layer} "
                              f"({site.name}) for {tuple(heads.shape[:2])} tokens, found "
                              f"{None if values is None else tuple(values.shape[:2])}")
        mask = state.mask
        mask = torch.ones(heads.shape[:2], dtype=torch.bool, device=heads.device) if mask is None else mask[rows]
        return uniform_output(values.index_select(2, index.to(values.device)), mask, site.before,
                              site.after).to(heads.dtype)

    return replacement


def _value_hook(site: ValueSite, state: _UniformState) -> Any:
    def hook(module: Any, args: tuple[Any, ...], output: Any) -> None:
        state.values[site.layer] = site.values(output)  # (B, T, H, d)

    return hook


@contextmanager
def intervene(model: Any, *, gates: torch.Tensor | None = None, ablate: torch.Tensor | np.ndarray | None = None,
              ablation: str = "zero", means: torch.Tensor | None = None) -> Iterator[list[HeadSite]]:
    """Replace the heads in ``ablate`` and scale every head by ``gates`` while the block runs.

    Args:
        model: a Hugging Face model of a family in :data:`probes.extraction.families.HEAD_OUTPUT_MODULES`.
        gates: ``(L, H)``, or ``(B, L, H)`` one row per example of each batch; may require grad.
        ablate: ``(L, H)`` bool, the heads removed (``None``: none); or ``(K, L, H)``: each batch is ``K``
            equal blocks of rows, block ``j`` with the heads of ``ablate[j]`` removed.
        ablation: how they are replaced, one of :data:`ABLATIONS`.
        means: ``(L, H, head_dim)`` each head's mean output (:func:`head_means`), for ``"mean"``.

    Yields the hooked :class:`~probes.extraction.families.HeadSite` list; every hook is removed on exit,
    also after an error.

    Raises:
        ConfigError: a shape does not match the model, an unknown ablation, ``"mean"`` without ``means``,
            or a family without a known output (or, for ``"uniform"``, value) projection.
    """
    sites = head_sites(model)
    expected = (len(sites), sites[0].n_heads if sites else 0)
    if ablation not in ABLATIONS:
        raise ConfigError(f"ablation: expected one of {ABLATIONS}, found {ablation!r}")
    _check_gates(gates, expected)
    mask = _as_mask(ablate, expected)
    handles: list[Any] = []
    state = _UniformState()
    try:
        replacements = _replacements(model, sites, mask, ablation, means, state, handles)
        for site in sites:
            gate = None if gates is None else gates[..., site.layer, :]  # (H,) or (B, H)
            ablated = None if mask is None or not bool(mask[..., site.layer, :].any()) else mask[..., site.layer, :]
            if gate is not None or ablated is not None:
                hook = _head_hook(site, gate, ablated, replacements[site.layer])
                handles.append(site.module.register_forward_pre_hook(hook))
        yield sites
    finally:
        for handle in handles:
            handle.remove()
        state.clear()


def _replacements(model: Any, sites: list[HeadSite], mask: torch.Tensor | None, ablation: str,
                  means: torch.Tensor | None, state: _UniformState, handles: list[Any]
                  ) -> list[Replacement]:
    """Per layer, what the output ``(..., k, d)`` of ablated heads ``index`` ``(k,)`` becomes, given all heads'
    ``(..., H, d)`` (registering the hooks it needs)."""

    def shaped(heads: torch.Tensor, index: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``value`` ``(k, d)`` broadcast to ``(..., k, d)``: ``index_copy`` needs the exact shape."""
        return value.to(device=heads.device, dtype=heads.dtype).expand(*heads.shape[:-2], *value.shape)

    if mask is None or ablation == "zero":
        return [lambda heads, index, rows: heads.new_zeros(*heads.shape[:-2], index.shape[0], heads.shape[-1])
                ] * len(sites)
    if ablation == "mean":
        checked = _checked_means(means, sites)

        def mean_of(layer: int) -> Replacement:
            return lambda heads, index, rows: shaped(heads, index, checked[layer][index.to(checked.device)])

        return [mean_of(site.layer) for site in sites]
    base = getattr(model, "base_model", model)  # runs whatever head the model has, and gets the mask by name
    handles.append(base.register_forward_pre_hook(_mask_hook(base, state), with_kwargs=True))
    values = value_sites(model)
    for site in values:
        if bool(mask[..., site.layer, :].any()):
            handles.append(site.module.register_forward_hook(_value_hook(site, state)))
    return [_uniform_replacement(site, state) for site in values]


@contextmanager
def head_gates(model: Any, gates: torch.Tensor) -> Iterator[list[HeadSite]]:
    """Scale every head's output by ``gates`` ``(n_layers, n_heads)`` while the block runs.

    The same as ``intervene(model, gates=gates)``; ``gates`` may require grad (head-importance scores
    are its gradient, as in Michel et al. 2019).

    Raises:
        ConfigError: ``gates`` does not have one row per layer and one column per head, or the
            model family has no known output projection.
    """
    sites = head_sites(model)
    expected = (len(sites), sites[0].n_heads if sites else 0)
    if tuple(gates.shape) != expected:
        raise ConfigError(f"gates: expected shape (n_layers, n_heads) = {expected}, found {tuple(gates.shape)}")
    with intervene(model, gates=gates) as hooked:
        yield hooked


def head_means(model: Any, batches: Iterable[Mapping[str, torch.Tensor]]) -> torch.Tensor:
    """``(L, H, head_dim)`` float32: each head's mean output over the non-padding tokens of ``batches``.

    Runs ``model(**batch)`` without grad for each ``{"input_ids", "attention_mask"}`` dict (a missing
    mask counts every token); the result is on the model's device, ready for ``ablation="mean"``.

    Raises:
        InputError: the batches hold no non-padding token.
    """
    import torch

    sites = head_sites(model)
    device = next(model.parameters()).device
    sums = torch.zeros(len(sites), sites[0].n_heads * sites[0].head_dim, dtype=torch.float64, device=device)
    current: dict[str, torch.Tensor] = {}

    def hook_for(layer: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...]) -> None:
            weights = current["mask"].to(device=args[0].device, dtype=torch.float64)  # (B, T)
            sums[layer] += torch.einsum("bt,bte->e", weights, args[0].to(torch.float64))
        return hook

    handles = [site.module.register_forward_pre_hook(hook_for(site.layer)) for site in sites]
    count = 0.0
    try:
        with torch.no_grad():
            for batch in batches:
                ids = batch["input_ids"]
                mask = batch.get("attention_mask")
                current["mask"] = torch.ones(ids.shape[:2]) if mask is None else mask
                count += float(current["mask"].sum())
                model(**batch)
    finally:
        for handle in handles:
            handle.remove()
    if count == 0:
        raise InputError("head_means: expected at least one non-padding token in the batches, found none")
    return (sums / count).reshape(len(sites), sites[0].n_heads, sites[0].head_dim).to(torch.float32)
