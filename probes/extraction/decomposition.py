"""The attention block of one layer taken apart: each head's vector from each token, the residual and the biases.

For a layer with input x, head h's transformed value of token j is f_h(x_j) = W_O^h (W_V^h x_j + b_V^h)
(:func:`probes.extraction.sources.head_outputs`), and the attention output at i is sum_h sum_j alpha^h_ij f_h(x_j)
+ b_O. Post-LN families (BERT, RoBERTa, ELECTRA, DeBERTa-v2) add the residual x_i and normalise:
LN(x_i + attention_i) = sum_h sum_j T_i(alpha^h_ij f_h(x_j)) + T_i(x_i) + T_i(b_O) + beta with T_i(v) =
gamma * (v - mean v) / s_i and s_i the standard deviation LN divides by at i (its epsilon included): a sum of
per-head, per-token terms, exact because s_i is fixed by the input. Pre-LN families (GPT-2, Llama, ModernBERT) add
the attention output to the residual stream with no norm after it: x_i + sum_h sum_j alpha^h_ij f_h(x_j) + b_O.

:func:`block_terms` runs the model once and returns those terms with the output the model itself computed, so a
test (or a reader) can check that they add up; the ``contribution`` source scores exactly these per-head terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from probes.extraction import families
from probes.extraction.capture import attention_modules
from probes.extraction.sources import SourceHooks

__all__ = ["BlockTerms", "block_terms"]


@dataclass(frozen=True)
class BlockTerms:
    """One layer's attention block as a sum (tensors of one forward pass, float32).

    Attributes:
        heads: ``(B, H, T, T, D)``: head h's term from token j at query i (after the norm's linearisation in a
            post-LN family).
        residual: ``(B, T, D)``: token i's own vector through the skip connection (linearised likewise).
        bias: ``(B, T, D)``: what no token brings: b_O (post-LN: T_i(b_O) + beta).
        output: ``(B, T, D)``: what the model computed there (post-LN: the norm's output; pre-LN: the residual
            stream after the attention block).
    """

    heads: Any  # Any: a torch tensor (torch is imported lazily)
    residual: Any  # Any: a torch tensor
    bias: Any  # Any: a torch tensor
    output: Any  # Any: a torch tensor

    def total(self) -> Any:
        """``(B, T, D)``: the sum of every term (equals :attr:`output` to float tolerance)."""
        return self.heads.sum(dim=(1, 3)) + self.residual + self.bias


def block_terms(model: Any, input_ids: Any, attention_mask: Any, layer: int) -> BlockTerms:
    """Run ``model`` (eager attention) on a batch and take ``layer``'s attention block apart (:class:`BlockTerms`).

    Raises:
        ConfigError: the model's family does not decompose (:func:`probes.extraction.sources.check_source`).
    """
    import torch

    family = families.family_of(model)
    hooks = SourceHooks(model, "norm", [layer])  # the values and output slices; checks the family
    base = getattr(model, "base_model", model)
    block = base.get_submodule(family.layers if family is not None and family.layers else "")[layer]
    head_site = families.head_sites(model)[layer]
    sites = attention_modules(model, families.n_layers(model))  # None: the weights come from output_attentions
    seen: dict[str, Any] = {}
    handles = [
        block.register_forward_pre_hook(lambda m, a, k: seen.__setitem__("x", a[0] if a else k["hidden_states"]),
                                        with_kwargs=True),
        head_site.module.register_forward_hook(lambda m, a, o: seen.__setitem__("attention", o)),
    ]
    if sites is not None:
        handles.append(sites[0][layer].register_forward_hook(lambda m, a, o: seen.__setitem__("alpha", o[sites[1]])))
    norm = block.get_submodule(family.attention_norm) if family is not None and family.attention_norm else None
    if norm is not None:
        handles.append(norm.register_forward_hook(
            lambda m, a, o: seen.update(norm_in=a[0], norm_out=o)))
    try:
        with hooks, torch.inference_mode():
            out = model(input_ids=input_ids, attention_mask=attention_mask, output_attentions=sites is None,
                        **({"use_cache": False} if families.is_decoder(model) else {}))
            if sites is None:
                seen["alpha"] = out.attentions[layer]
            vectors = hooks.vectors(layer)  # (B, H, T, D): f_h(x_j), uncentred under "norm"
    finally:
        for handle in handles:
            handle.remove()
    alpha = seen["alpha"].float()  # (B, H, T, T)
    heads = alpha[..., None] * vectors[:, :, None, :, :]  # (B, H, T, T, D)
    x = seen["x"].float()
    bias_o = head_site.module.bias
    b_o = torch.zeros(x.shape[-1]) if bias_o is None else bias_o.detach().float()
    if norm is None:
        return BlockTerms(heads, x, b_o.expand_as(x).clone(), x + seen["attention"].float())
    inner = seen["norm_in"].float()  # x + attention (the norm's input)
    scale = torch.sqrt(inner.var(dim=-1, unbiased=False, keepdim=True) + norm.eps)  # (B, T, 1)
    gamma, beta = norm.weight.detach().float(), norm.bias.detach().float()

    def linear(v: Any, s: Any) -> Any:
        return gamma * (v - v.mean(dim=-1, keepdim=True)) / s

    return BlockTerms(linear(heads, scale[:, None, :, None, :]), linear(x, scale),
                      linear(b_o.expand_as(x), scale) + beta, seen["norm_out"].float())
