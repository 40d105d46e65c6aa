"""Many ablations in few forward passes: leave-one-out without one pass over the data per head.

Leave-one-out runs the model once per head (270 for SmolLM2-135M). Two things make it cheaper, and neither
changes a number beyond float rounding:

* **Ablations as rows.** Each batch is repeated ``K`` times along the batch dimension and block ``j`` of the
  rows gets its own ablation (``intervene(ablate=(K, L, H))``, a per-row-block head mask at the output
  projection): ``K`` ablations in one forward pass. ``K`` is chosen so that ``K x rows x width`` stays within
  ``max_tokens`` padded tokens (:data:`DEFAULT_LOO_TOKENS`), the memory a pass may use.
* **Layers below the ablation are not run again.** An ablation whose lowest ablated layer is ``l`` leaves
  the output of layers ``0 .. l-1`` as in the unmodified model; that output is kept from one unmodified pass
  per batch (a forward hook on each layer) and layers ``< l`` return it instead of running (their
  ``forward`` is swapped for the block that runs). On average half of the layers are skipped. Only for an
  objective that reads nothing but the model's output (``final_states_only``: the language-model,
  representation and probe objectives): one that hooks an inner layer (a planted objective) would not see it
  run, so it gets the row batching alone.

The unmodified pass computes layers ``< l`` on the batch's rows exactly as a one-ablation pass does, so the
only difference to one pass per ablation is the float rounding of the layers ``>= l`` run on ``K`` times as
many rows (:func:`probes.importance.scores.leave_one_out` with ``method="one-at-a-time"`` is that reference).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.importance.batches import Batch, _as_batches, _in_index_order, _shape

__all__ = ["DEFAULT_LOO_TOKENS", "Intervention", "ablated_metrics", "repeat_batch", "ablation_groups",
           "skips_lower_layers"]

#: Another way of ablating than :func:`probes.extraction.interventions.intervene` (resample ablation, in
#: :mod:`probes.importance.function`): ``intervention(model, masks (K, L, H) bool tensor, batch)`` is a context
#: manager under which the ``K`` row blocks of the repeated ``batch`` (its rows ``K`` times) have their heads ablated.
Intervention = Callable[[Any, Any, Batch], AbstractContextManager[Any]]

#: Padded tokens of one batched ablation pass (K copies x rows x width): twice the default batch, so a full
#: batch runs 2 ablations at once and small batches run more.
DEFAULT_LOO_TOKENS = 8192


def repeat_batch(batch: Batch, k: int) -> Batch:
    """``batch`` with its rows repeated ``k`` times (block ``j`` = rows ``j*B .. (j+1)*B-1``).

    Every tensor of ``extras`` whose first dimension is the batch size is repeated the same way (the masked ids,
    labels, reference states and probe labels of the objectives); other extras are shared as they are.
    """
    import torch

    n = len(batch.sentences)

    def rep(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == n:
            return value.repeat(k, *([1] * (value.dim() - 1)))
        return value

    return Batch(batch.sentences * k, rep(batch.input_ids), rep(batch.attention_mask), rep(batch.word_index),
                 {name: rep(value) for name, value in batch.extras.items()})


def skips_lower_layers(objective: Any) -> bool:
    """Whether ``objective`` reads only the model's output (``final_states_only``), so layers below an ablation
    may return their kept unmodified output instead of running."""
    return bool(getattr(objective, "final_states_only", False))


def ablation_groups(masks: npt.NDArray[np.bool_], rows: int, width: int, max_tokens: int
                    ) -> list[tuple[int, list[int]]]:
    """``[(lowest ablated layer, mask indices)]``: the masks ``(M, L, H)`` in passes of at most ``max_tokens``
    padded tokens (``K x rows x width``, at least one mask a pass), masks of one lowest layer together.

    A mask with no head has lowest layer ``L`` (nothing to run again: the unmodified output). The groups of one
    lowest layer are of near-equal size (9 heads at K = 4 give 3, 3, 3, not 4, 4, 1).
    """
    n_layers = masks.shape[1]
    per_layer = np.asarray(masks.any(axis=2))  # (M, L); asarray: the stubs type a reduction as maybe a scalar
    lowest = np.where(per_layer.any(axis=1), per_layer.argmax(axis=1), n_layers)  # (M,)
    k = max(1, max_tokens // max(1, rows * width))
    groups: list[tuple[int, list[int]]] = []
    for layer in np.unique(lowest):
        members = np.flatnonzero(lowest == layer).tolist()
        n_groups = -(-len(members) // k)
        size = -(-len(members) // n_groups)
        groups.extend((int(layer), members[i:i + size]) for i in range(0, len(members), size))
    return groups


def _layers(model: Any) -> list[Any]:
    """The transformer layers of ``model`` (the blocks whose outputs are kept and replayed)."""
    from probes.extraction.families import family_of

    family = family_of(model)
    if family is None or not family.layers:
        raise ConfigError(f"batched ablation: expected a model family with known layers "
                          f"(probes.extraction.families), found {type(model).__name__}")
    base = getattr(model, "base_model", model)
    return list(base.get_submodule(family.layers))


def _map_rows(value: Any, fn: Any) -> Any:
    """``fn`` applied to every tensor in ``value`` (a tensor, or tuples/lists of them; others kept)."""
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map_rows(v, fn) for v in value)
    return value


@contextmanager
def _kept_outputs(layers: Sequence[Any], keep: int) -> Iterator[list[Any]]:
    """Record the outputs of ``layers[:keep]`` (detached) in the yielded list while the block runs."""
    outputs: list[Any] = [None] * keep

    def hook_for(i: int) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            outputs[i] = _map_rows(output, lambda t: t.detach())
        return hook

    handles = [layers[i].register_forward_hook(hook_for(i)) for i in range(keep)]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def _skipped(layers: Sequence[Any], below: int, output: Any) -> Iterator[None]:
    """Layers ``< below`` return ``output`` (the kept output of layer ``below - 1``, rows repeated) without
    running: what flows between them is overwritten by the next, so only the last one's value matters."""
    saved = []
    try:
        for layer in layers[:below]:
            saved.append((layer, layer.__dict__.get("forward")))
            layer.forward = lambda *args, **kwargs: output
        yield
    finally:
        for layer, own in saved:
            if own is None:
                del layer.forward
            else:
                layer.forward = own


def _batch_metrics(model: Any, batch: Batch, objective: Any, masks: npt.NDArray[np.bool_], ablation: str,
                   means: Any, max_tokens: int, skip: bool, bar: Any, intervention: Intervention | None = None
                   ) -> tuple[dict[str, npt.NDArray[np.float64]], ...]:
    """Per mask (in order), ``{metric: (B, ...)}`` of ``batch`` with that mask's heads ablated."""
    import torch

    from probes.extraction.interventions import intervene

    n_layers = masks.shape[1]
    layers = _layers(model) if skip else []
    rows, width = int(batch.input_ids.shape[0]), int(batch.input_ids.shape[1])
    groups = ablation_groups(masks, rows, width, max_tokens)
    lowest_needed = max((layer for layer, _ in groups if layer < n_layers), default=0) if skip else 0
    out: list[dict[str, npt.NDArray[np.float64]]] = [{} for _ in range(len(masks))]
    with torch.no_grad():
        with _kept_outputs(layers, lowest_needed) as kept:
            base = objective.evaluate(model, batch)
        for layer, members in groups:
            if layer >= n_layers:  # no head ablated: the unmodified pass
                for m in members:
                    out[m] = dict(base)
                bar.update(len(members))
                continue
            k = len(members)
            repeated = repeat_batch(batch, k)
            block = torch.from_numpy(np.ascontiguousarray(masks[members]))  # (K, L, H)
            replay = (_map_rows(kept[layer - 1], lambda t, k=k: t.repeat(k, *([1] * (t.dim() - 1))) if t.dim() >= 1
                                and t.shape[0] == rows else t) if skip and layer > 0 else None)
            with (intervene(model, ablate=block, ablation=ablation, means=means) if intervention is None
                  else intervention(model, block, batch)), \
                    (_skipped(layers, layer, replay) if replay is not None else _nothing()):
                metrics = objective.evaluate(model, repeated)
            for j, m in enumerate(members):
                out[m] = {name: np.asarray(values)[j * rows:(j + 1) * rows] for name, values in metrics.items()}
            bar.update(k)
    return tuple(out)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def ablated_metrics(model: Any, batches: Sequence[Batch], objective: Any, masks: npt.ArrayLike, *,
                    ablation: str = "zero", means: Any = None, max_tokens: int = DEFAULT_LOO_TOKENS,
                    skip_lower: bool | None = None, bar: Any = None, intervention: Intervention | None = None
                    ) -> dict[str, npt.NDArray[np.float64]]:
    """``{metric: (M, N, ...)}`` the objective's per-sentence metrics (``evaluate``: ``(B, ...)`` per batch, e.g.
    ``(B, T)`` per token; batches of one width then) with each mask's heads ablated.

    ``masks`` ``(M, L, H)`` bool; sentences in index order (``Batch.indices``). Several masks run as row blocks
    of one pass (at most ``max_tokens`` padded tokens a pass) and layers below a mask's lowest ablated layer
    are replayed from the unmodified pass when ``skip_lower`` (default: :func:`skips_lower_layers`).
    ``bar`` (a :func:`probes.progress.bar`) is advanced by one per mask and batch. ``intervention`` replaces
    ``intervene(ablate=..., ablation=ablation, means=means)`` by another way of ablating (:data:`Intervention`).
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ConfigError(f"max_tokens: expected a whole number >= 1, found {max_tokens!r}")
    batches = _as_batches(batches)
    shape = _shape(model)
    masks = np.asarray(masks)
    if masks.dtype != np.bool_ or masks.ndim != 3 or masks.shape[1:] != shape or masks.shape[0] < 1:
        raise ConfigError(f"masks: expected a bool array of shape (n_masks, n_layers, n_heads) with n_layers, n_heads "
                          f"= {shape}, found {masks.dtype} of shape {masks.shape}")
    skip = skips_lower_layers(objective) if skip_lower is None else bool(skip_lower)
    rows: dict[str, list[Any]] = {}
    for batch in batches:
        per_mask = _batch_metrics(model, batch, objective, masks, ablation, means, max_tokens, skip,
                                  bar if bar is not None else _NoBar(), intervention)
        for name in per_mask[0]:
            values = np.stack([np.asarray(p[name], dtype=np.float64) for p in per_mask], axis=1)  # (B, M)
            rows.setdefault(name, []).append((batch.indices, values))
    return {name: np.swapaxes(_in_index_order(values), 0, 1) for name, values in rows.items()}


class _NoBar:
    """A progress bar that shows nothing."""

    def update(self, n: int = 1) -> None:
        pass
