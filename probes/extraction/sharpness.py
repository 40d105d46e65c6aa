"""Sharpness-matched random-init twins: query and key projections scaled until a twin attends as sharply as a model.

A twin drawn by the architecture's own initialisation attends almost uniformly (all-MiniLM-L6-v2's twins: mean
largest weight of a row 0.049, against 0.461 trained), so "trained versus random" first answers "is training
sharper?", and only then "is it structured?". The sharpness-matched control (``seed_methods.md`` §g) multiplies
the query and key projections of every layer, weights and biases, by ``s``: the attention logits are bilinear in
queries and keys, so each scales by ``s**2`` (rotary positions are linear in the queries and keys, and the
families of :func:`probes.extraction.families.query_key_sites` put no norm after the projections). ``s`` is found
by bisection on a log scale so that the twin's mean confidence is within a tolerance of a target.

**Confidence** is the atlas's (:mod:`probes.analysis.roles`, Voita et al.), at token level: over every non-special
token row of the sentences (tokenized as pre-split words, specials added, as the extractor runs them), the row's
largest weight, the end specials ([SEP], ``</s>``) never chosen (the start special, [CLS] or BOS, may be); pooled
over rows, then averaged over every head of every layer (every head has the same rows, so this is the mean of
the atlas's ``confidence`` column). Sentences over the model's length limit are left out, as the atlas's
token-level measures leave out inputs run in windows or truncated.

This module runs the model directly (``output_attentions``; eager attention) rather than through the extractor,
which sits above :mod:`probes.extraction.loading` and so cannot be imported from the twins' writer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from probes.errors import ConfigError
from probes.extraction.families import is_decoder, n_heads, n_layers, position_limits, query_key_sites

__all__ = ["CONFIDENCE_RULE", "QK_RULE", "TOLERANCE", "BOUNDS", "MAX_ITERATIONS", "Match", "QueryKeyScale",
           "mean_confidence", "match_scale"]

#: How the twin's weights are changed.
QK_RULE = ("W_Q, W_K and their biases multiplied by s in every attention layer (a fused q/k/v projection: its "
           "query and key parts); the attention logits scale by s^2")
#: How confidence is measured (the atlas's definition).
CONFIDENCE_RULE = ("token level, as the atlas (probes.analysis.roles): mean over every non-special token row of "
                   "its largest weight, end specials never chosen (start special kept as a column), pooled over "
                   "rows and averaged over every head of every layer; sentences over the length limit left out")
#: Relative tolerance: ``|confidence - target| <= TOLERANCE * target``.
TOLERANCE = 0.05
#: The range of ``s`` searched.
BOUNDS = (1.0, 64.0)
#: Most bisection steps (after the trial at ``s = BOUNDS[0]``).
MAX_ITERATIONS = 12
#: Sentences per forward pass.
_BATCH = 16


@dataclass(frozen=True)
class Match:
    """The outcome of :func:`match_scale`.

    Attributes:
        scale: the ``s`` chosen.
        confidence: the twin's confidence at ``scale``.
        default_confidence: its confidence at ``s = BOUNDS[0]`` (1: the twin as drawn).
        iterations: bisection steps taken (0 when the twin as drawn was already within the tolerance).
        trials: every ``(s, confidence)`` tried, in order.
        rows: the token rows the confidence pools (the same for every ``s``).
    """

    scale: float
    confidence: float
    default_confidence: float
    iterations: int
    trials: tuple[tuple[float, float], ...]
    rows: int


class QueryKeyScale:
    """Sets the query and key projections of ``model`` (weights and biases) to ``s`` times their values when made.

    Raises:
        ConfigError: a model family whose queries and keys :func:`query_key_sites` does not know.
    """

    def __init__(self, model: Any) -> None:
        views = []
        for site in query_key_sites(model):
            views.append(site.outputs(site.module.weight.data))
            if getattr(site.module, "bias", None) is not None:
                views.append(site.outputs(site.module.bias.data, bias=True))
        self._tensors = [(view, view.clone()) for view in views]  # (in-place view, value at s = 1)

    def set(self, scale: float) -> None:
        """Make every query and key weight and bias ``scale`` times its original value."""
        for view, original in self._tensors:
            view.copy_(original * scale)


def mean_confidence(model: Any, tokenizer: Any, sentences: Sequence[Sequence[str]]) -> tuple[float, int]:
    """``(confidence, rows)``: the mean confidence of every head of ``model`` on ``sentences`` (module docstring)
    and the token rows it pools (NaN and 0 when no sentence has a row).

    ``model`` must run eager attention (it returns the weights); it is put in eval mode.
    """
    import torch

    model.eval()
    limit = min(position_limits(tokenizer, model), default=512)
    encoded = [tokenizer(list(words), is_split_into_words=True) for words in sentences]
    encoded = [e for e in encoded if 0 < len(e["input_ids"]) <= limit]
    total, rows = 0.0, 0
    extra = {"use_cache": False} if is_decoder(model) else {}
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for start in range(0, len(encoded), _BATCH):
        batch = encoded[start: start + _BATCH]
        longest = max(len(e["input_ids"]) for e in batch)
        ids = torch.full((len(batch), longest), pad, dtype=torch.long)  # (B, T) right-padded
        mask = torch.zeros((len(batch), longest), dtype=torch.long)  # (B, T)
        for b, e in enumerate(batch):
            ids[b, : len(e["input_ids"])] = torch.tensor(e["input_ids"])
            mask[b, : len(e["input_ids"])] = 1
        with torch.no_grad():
            out = model(input_ids=ids.to(device), attention_mask=mask.to(device), output_attentions=True, **extra)
        maps = torch.stack(tuple(out.attentions), 1).float().cpu().numpy()  # (B, L, H, T, T)
        for b, e in enumerate(batch):
            top, n_rows = _row_maxima(maps[b], e.word_ids())
            total, rows = total + top, rows + n_rows
    if not rows:
        return float("nan"), 0
    return total / (rows * n_layers(model) * n_heads(model)), rows


def _row_maxima(maps: np.ndarray, word_ids: Sequence[int | None]) -> tuple[float, int]:
    """Sum over the non-special rows (and every head) of each row's largest weight, end specials never chosen, and
    the number of rows; ``maps`` ``(L, H, T', T')`` with ``T' >= T = len(word_ids)`` (padding after)."""
    n = len(word_ids)
    special = np.array([w is None for w in word_ids], dtype=bool)  # (T,)
    first_word = int(np.argmax(~special)) if (~special).any() else n
    end = special & (np.arange(n) >= first_word)  # (T,) specials after the first word
    if special.all() or end.all():
        return 0.0, 0
    rows = maps[:, :, :n, :n][:, :, ~special].astype(np.float64)  # (L, H, R, T)
    rows[..., end] = -np.inf
    return float(rows.max(-1).sum()), int((~special).sum())


def match_scale(model: Any, tokenizer: Any, sentences: Sequence[Sequence[str]], target: float, *,
                what: str = "model", tolerance: float = TOLERANCE, bounds: tuple[float, float] = BOUNDS,
                max_iterations: int = MAX_ITERATIONS) -> Match:
    """Find ``s`` in ``bounds`` (bisection on ``log s``) whose query/key scaling brings ``model``'s mean confidence
    on ``sentences`` within ``tolerance * target`` of ``target``, and leave ``model`` scaled by it.

    Confidence grows with ``s`` (sharper logits), so the step keeps the half where the target lies.

    Raises:
        ConfigError: naming ``what``: no sentence with a token row, or no ``s`` in ``bounds`` reaching the target
            within ``max_iterations`` steps (a target below the twin's confidence at ``bounds[0]``, or above it at
            ``bounds[1]``).
    """
    import torch

    scaler = QueryKeyScale(model)
    trials: list[tuple[float, float]] = []

    def trial(scale: float) -> tuple[float, int]:
        with torch.no_grad():
            scaler.set(scale)
        conf, rows = mean_confidence(model, tokenizer, sentences)
        trials.append((scale, conf))
        return conf, rows

    low, high = bounds
    default, rows = trial(low)
    if not rows:
        raise ConfigError(f"{what}: expected sentences with at least one non-special token under the length limit, "
                          f"found none of {len(sentences)}")
    conf, scale, step = default, low, 0
    while abs(conf - target) > tolerance * target:
        if step == 0 and conf > target:
            break  # already sharper than the target at the lower bound
        if step == max_iterations:
            break
        step += 1
        scale = math.sqrt(low * high)
        conf, _ = trial(scale)
        if conf < target:
            low = scale
        else:
            high = scale
    if abs(conf - target) > tolerance * target:
        with torch.no_grad():
            scaler.set(1.0)
        shown = ", ".join(f"s={s:.4g}: {c:.4f}" for s, c in trials)
        raise ConfigError(f"{what}: expected a query/key scale s in [{bounds[0]:g}, {bounds[1]:g}] bringing the mean "
                          f"confidence within {tolerance:.0%} of the target {target:.4f}, found none in {step} "
                          f"bisection steps ({shown})")
    return Match(scale, conf, default, step, tuple(trials), rows)
