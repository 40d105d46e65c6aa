"""Attention rows on request: the model's own pass through SDPA, probability rows only where asked.

An analysis that reads the attention *from* a few words of each input (coreference reads the rows of
mention heads, bridging those of anaphor words) does not need the ``T x T`` probability map of every
head that eager attention materialises. In this mode the model runs with :data:`IMPLEMENTATION`, an
attention function registered with transformers' ``AttentionInterface``:

* the layer's output is ``torch.nn.functional.scaled_dot_product_attention`` over the same queries,
  keys, values, scaling and (eager, additive) mask that eager attention gets, so the model computes
  what it computes with eager attention, to float rounding;
* the probability rows asked for (``(B, R)`` token indices, given to the forward pass as the keyword
  argument ``probes_rows``, which transformers hands on to every layer's attention function) are
  recomputed as eager attention computes them, ``softmax(q_rows k^T * scaling + mask_rows)``, and
  returned as the layer's weights ``(B, H, R, T)``, which the extractor's forward hooks pool to words.

A model whose attention passes what this function does not model (a logit soft-cap, attention sinks, a
position bias) raises :class:`RowsUnsupported`; the extractor then goes back to eager attention and
full maps. :func:`token_rows` turns the words asked for into the token rows to compute. This module is only
imported with torch (by the extractor's :mod:`probes.extraction.capture`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from probes.extraction.align import Alignment

__all__ = ["IMPLEMENTATION", "RowsUnsupported", "register", "rows_attention", "token_rows"]

#: The name the function is registered under (``config._attn_implementation`` while rows are asked for).
IMPLEMENTATION = "probes_rows"

#: Keyword arguments that change the attention probabilities in ways this function does not reproduce.
_UNMODELLED = ("softcap", "s_aux", "sinks", "position_bias")


class RowsUnsupported(RuntimeError):
    """The model's attention passes something (named) that rows-only attention does not reproduce."""


def rows_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                   *, probes_rows: torch.Tensor | None = None, **kwargs: Any
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The layer's output ``(B, T, H, d)`` by SDPA, and its probability rows ``(B, H, R, T)`` asked for.

    ``query`` ``(B, H, T, d)``; ``key``, ``value`` ``(B, H_kv, T, d)`` (grouped-query heads are repeated);
    ``attention_mask``: eager's additive float mask ``(B or 1, 1, T, T)`` or None (no mask);
    ``probes_rows``: the ``(B, R)`` token rows to compute, a keyword argument of the model's forward pass that
    transformers hands on to the attention function (None: no weights returned).
    """
    found = [name for name in _UNMODELLED if kwargs.get(name) is not None]
    if found:
        raise RowsUnsupported(f"{type(module).__name__} passes {', '.join(found)} to its attention")
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # (B, H_kv, T, d) -> (B, H, T, d), as eager attention repeats them
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    mask = attention_mask[..., : key.shape[-2]] if attention_mask is not None else None
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout if module.training else 0.0, scale=scaling)
    output = output.transpose(1, 2).contiguous()  # (B, T, H, d), as eager attention returns it
    if probes_rows is None:
        return output, None
    rows = probes_rows.to(query.device)  # a no-op but where a device map puts layers on several devices
    batch, heads, _, dim = query.shape
    n_rows, n_keys = rows.shape[1], key.shape[-2]
    picked = query.gather(2, rows[:, None, :, None].expand(batch, heads, n_rows, dim))  # (B, H, R, d)
    scores = torch.matmul(picked, key.transpose(2, 3)) * scaling  # (B, H, R, T), eager's order of operations
    if mask is not None:
        full = mask.expand(batch, mask.shape[1], mask.shape[2], n_keys)
        scores = scores + full.gather(2, rows[:, None, :, None].expand(batch, mask.shape[1], n_rows, n_keys))
    return output, torch.nn.functional.softmax(scores, dim=-1)


def register() -> None:
    """Register :func:`rows_attention` (with eager attention's mask) under :data:`IMPLEMENTATION`; idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, eager_mask

    if IMPLEMENTATION not in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping:
        AttentionInterface.register(IMPLEMENTATION, rows_attention)
        AttentionMaskInterface.register(IMPLEMENTATION, eager_mask)


def token_rows(alignments: Sequence[Alignment], words: Sequence[npt.NDArray[np.intp]], from_pool: str
               ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(tokens, targets)``, each ``(B, R)``: the token rows to compute for each input's ``words`` asked for (all
    of a word's tokens for ``mean``, its first for ``first``) and the position each belongs to (padding: token 0
    into the dump position ``n``, one past the batch's widest input)."""
    n_pos = max(al.n_positions for al in alignments)
    chosen: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]] = []
    for al, asked in zip(alignments, words):
        wanted = np.zeros(al.n_positions, dtype=bool)
        wanted[np.flatnonzero(~al.is_special)[asked]] = True
        position = al.token_position  # (T_b,)
        keep = wanted[position]
        if from_pool == "first":
            keep[1:] &= position[1:] != position[:-1]
        tokens = np.flatnonzero(keep)
        chosen.append((tokens, position[tokens]))
    width = max(1, max(t.shape[0] for t, _ in chosen))
    tokens = np.zeros((len(alignments), width), dtype=np.int64)  # (B, R)
    targets = np.full((len(alignments), width), n_pos, dtype=np.int64)  # (B, R)
    for b, (tok, pos) in enumerate(chosen):
        tokens[b, : tok.shape[0]], targets[b, : pos.shape[0]] = tok, pos
    return tokens, targets
