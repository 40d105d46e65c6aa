"""One forward pass of a batch, its attention captured layer by layer and pooled to words on the device.

A forward hook on each kept layer's attention module pools that layer's ``(B, H, T, T)`` weights to words as
soon as the model computes them (on the layer's own device) and lets them go, so at most one layer of token
attention is alive at a time; the pass stops after the last kept layer. Models whose attention modules hand no
weights to a hook fall back to ``output_attentions=True`` (every layer at once). A batch whose every input
names the word rows it needs runs rows-only (:mod:`probes.extraction.rows`) where the model allows it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from probes.errors import ModelOutputError
from probes.extraction import rows as row_attention
from probes.extraction.align import Alignment, BatchPooler, pool_batch
from probes.extraction.sources import SourceHooks, row_normalise

__all__ = ["Capture", "Forward", "attention_modules", "force_eager"]

log = logging.getLogger("probes")

#: What one forward pass gives: the pooled maps of the batch, each input's token maps (or None) and, for a batch
#: run rows-only, each input's positions whose rows the maps hold (else None).
Forward = tuple[npt.NDArray[np.float32], list[npt.NDArray[np.float32] | None], list[npt.NDArray[np.intp]] | None]


class _Captured(Exception):
    """Raised by the forward hook of the last kept layer: the attention wanted is pooled, the pass can stop."""


def attention_modules(model: Any, n_layers: int) -> tuple[list[Any], int] | None:
    """Per layer the module whose output holds the attention weights, and their index in that output.

    Read from what transformers itself records as ``attentions`` (``model._can_record_outputs``: a module
    class, a class-name suffix or an ``OutputRecorder`` with a layer name and index); None when the model
    declares none or the modules found are not one per layer (the caller then uses ``output_attentions``).
    """
    spec = (getattr(model, "_can_record_outputs", None) or {}).get("attentions")
    if spec is None or isinstance(spec, (list, tuple)):
        return None
    target = spec if isinstance(spec, type) else getattr(spec, "target_class", None)
    suffix = spec if isinstance(spec, str) else getattr(spec, "class_name", None)
    layer_name = None if isinstance(spec, (type, str)) else getattr(spec, "layer_name", None)
    index = 1 if isinstance(spec, (type, str)) else int(getattr(spec, "index", 1))
    found = []
    for name, module in model.named_modules():
        if not ((target is not None and isinstance(module, target)) or (suffix and name.endswith(suffix))):
            continue
        if layer_name and f".{layer_name.strip('.')}." not in f"{name}.":
            continue
        found.append(module)
    return (found, index) if len(found) == n_layers else None


def force_eager(model: Any) -> None:
    """Switch ``model`` to the eager attention implementation, the only one that returns weights.

    Raises:
        ModelOutputError: the model uses another implementation and cannot be switched.
    """
    impl = getattr(model.config, "_attn_implementation", None)
    if impl in (None, "eager"):
        return
    setter = getattr(model, "set_attn_implementation", None)
    if setter is None:
        raise ModelOutputError(
            f"{type(model).__name__} uses the {impl!r} attention implementation, which returns no "
            "attention weights, and cannot be switched; load it with attn_implementation='eager'")
    try:
        setter("eager")
    except Exception as exc:  # transformers raises ValueError/NotImplementedError variants
        raise ModelOutputError(
            f"{type(model).__name__} cannot switch from {impl!r} to eager attention ({exc}); "
            "load it with attn_implementation='eager'") from exc


class Capture:
    """Runs right-padded batches through a placed model and pools the kept layers and heads to words.

    Args:
        model: the model, in eval mode, switched to eager attention and placed.
        tokenizer: its tokenizer (for the padding id).
        device: the device inputs go to (the model's input embeddings').
        layers, heads: the 0-based layers and heads kept; ``n_layers``, ``n_heads``: the model's counts.
        from_pool: how a word's tokens are pooled (``mean``, ``first`` or ``max``).
        is_decoder: whether the model is a decoder (run without a cache).
        selective: whether a batch that asks for rows may run rows-only.
        source: the attention source (:mod:`probes.extraction.sources`): ``weights`` pools the weights; ``norm``
            and ``contribution`` turn each layer's weights into their maps in the same hook; ``value-zeroing``
            runs each layer again per head and token (:mod:`probes.extraction.value_zeroing`). Other sources than
            the weights never run rows-only.

    It remembers what it learnt about the model: ``sites`` (the attention modules and the index of the
    weights in their output; False: hooks get none) and ``rows_ok`` (whether rows-only attention works;
    None: not tried). ``keep_tokens`` is an argument of :meth:`forward`, since the extractor's may change.
    """

    def __init__(self, model: Any, tokenizer: Any, device: torch.device, *, layers: tuple[int, ...],
                 heads: tuple[int, ...], n_layers: int, n_heads: int, from_pool: str, is_decoder: bool,
                 selective: bool, source: str = "weights") -> None:
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.source = source
        self._sources: SourceHooks | None = None  # made on the first pass that needs it, then re-entered per pass
        self.layers, self.heads, self.n_layers, self.n_heads = layers, heads, n_layers, n_heads
        self.from_pool, self.is_decoder, self.selective = from_pool, is_decoder, selective
        self.sites: tuple[list[Any], int] | bool | None = None  # attention modules and output index; False: none
        self.rows_ok: bool | None = None  # whether rows-only attention works for this model (None: not tried)
        self._head_index = torch.tensor(heads, device=device)

    def forward(self, alignments: list[Alignment], rows: Sequence[npt.NDArray[np.intp] | None] | None = None, *,
                keep_tokens: bool = False) -> Forward:
        """Run one right-padded batch and pool it to word level: ``(B, L', H', n_max, n_max)``.

        Also the token maps ``(L', H', T_b, T_b)`` of each input when ``keep_tokens`` (else Nones), and None,
        or, for a batch run rows-only, the maps ``(B, L', H', P, n_max)`` of the rows computed and, per input,
        the positions ``(P_b,)`` those rows belong to.
        Layer by layer through forward hooks when the model's attention modules allow it, else with
        ``output_attentions=True`` (said once in a debug log). ``rows``: per input the words whose rows
        alone are wanted (None: every row); when every input of the batch names them and the model allows
        it, only those rows are computed (:meth:`_forward_rows`).
        """
        ids, mask = self.inputs(alignments)
        if self.source == "value-zeroing":
            return self._forward_value_zeroing(ids, mask, alignments, keep_tokens)
        sites = self.attention_sites()
        if sites is not None:
            asked = self._asked_tokens(alignments, rows, keep_tokens)
            if asked is not None:
                got = self._forward_rows(ids, mask, alignments, asked, *sites)
                if got is not None:
                    return got
            got = self._forward_hooked(ids, mask, alignments, *sites, keep_tokens)
            if got is not None:
                return got
            log.debug("%s: its attention modules hand no weights to a forward hook; using output_attentions=True "
                      "(every layer's token attention at once)", type(self.model).__name__)
            self.sites = False
        return self._forward_all_layers(ids, mask, alignments, keep_tokens)

    def inputs(self, alignments: list[Alignment]) -> tuple[torch.Tensor, torch.Tensor]:
        """``input_ids`` and ``attention_mask`` ``(B, T)`` of a right-padded batch, on the model's input device
        (through pinned memory, without blocking, to a CUDA device)."""
        n_tok = max(al.n_tokens for al in alignments)
        pad_id = self.tokenizer.pad_token_id
        pad_id = 0 if pad_id is None else pad_id
        ids = np.full((len(alignments), n_tok), pad_id, dtype=np.int64)  # (B, T)
        mask = np.zeros((len(alignments), n_tok), dtype=np.int64)  # (B, T)
        for b, al in enumerate(alignments):
            ids[b, : al.n_tokens] = al.input_ids
            mask[b, : al.n_tokens] = 1
        pin = self.device.type == "cuda"

        def move(array: npt.NDArray[np.int64]) -> torch.Tensor:
            tensor = torch.from_numpy(array)
            return (tensor.pin_memory() if pin else tensor).to(self.device, non_blocking=pin)

        return move(ids), move(mask)

    def model_kwargs(self, rows: torch.Tensor | None = None) -> dict[str, Any]:
        """Keyword arguments of a forward pass: a dict output, no cache for a decoder, and the token rows
        ``(B, R)`` that rows-only attention computes (``probes_rows``, handed on to it by transformers)."""
        kwargs: dict[str, Any] = {"return_dict": True}
        if self.is_decoder:
            kwargs["use_cache"] = False
        if rows is not None:
            kwargs["probes_rows"] = rows
        return kwargs

    def attention_sites(self) -> tuple[list[Any], int] | None:
        """Per layer the attention module, and where its output holds the weights; None when unknown."""
        if self.sites is None:
            self.sites = attention_modules(self.model, self.n_layers) or False
        return self.sites if isinstance(self.sites, tuple) else None

    def pinned(self) -> bool:
        """Whether batch results on the CPU are pinned: layers run on a CUDA device and copy into them."""
        return self.device.type == "cuda" or bool(getattr(self.model, "hf_device_map", None)) and \
            torch.cuda.is_available()

    def switch(self, implementation: str) -> bool:
        """Run the model with ``implementation`` (``eager`` or rows-only attention) from now on; False when it
        cannot (rows-only attention is then never tried again)."""
        if getattr(self.model.config, "_attn_implementation", None) == implementation:
            return True
        if implementation == row_attention.IMPLEMENTATION:
            if not (getattr(self.model, "_supports_sdpa", False) and self.model._can_set_attn_implementation()):
                self.rows_ok = False
                return False
            row_attention.register()
        try:
            self.model.set_attn_implementation(implementation)
        except Exception:  # transformers raises ValueError/NotImplementedError variants
            if implementation == "eager":
                raise
            self.rows_ok = False
            return False
        if getattr(self.model.config, "_attn_implementation", None) != implementation:
            self.rows_ok = False
            return False
        return True

    def _source_hooks(self) -> SourceHooks | None:
        """The hooks that turn weights into the source's maps (their output slices and Gram matrices made once, the
        hooks registered per pass by ``with``); None for the weights themselves and for value zeroing."""
        if self.source in ("weights", "value-zeroing"):
            return None
        if self._sources is None:
            self._sources = SourceHooks(self.model, self.source, self.layers)
        return self._sources

    def _forward_value_zeroing(self, ids: torch.Tensor, mask: torch.Tensor, alignments: list[Alignment],
                               keep_tokens: bool) -> Forward:
        """One batch under ``value-zeroing``: every kept layer run again per head and token
        (:func:`probes.extraction.value_zeroing.value_zeroing`), row-normalised, then pooled to words."""
        from probes.extraction.value_zeroing import value_zeroing

        batch, n_tok = ids.shape
        scores = value_zeroing(self.model, ids, mask, self.layers)  # (B, L', H, T, T)
        maps = row_normalise(scores)[0]
        if len(self.heads) != self.n_heads:
            maps = maps.index_select(2, self._head_index.to(maps.device))  # (B, L', H', T, T)
        pooler = BatchPooler(alignments, n_tok, self.from_pool)
        out = torch.empty((batch, len(self.layers), len(self.heads), pooler.n_pos, pooler.n_pos),
                          dtype=torch.float32)  # (B, L', H', n, n)
        for k in range(len(self.layers)):
            pooler.pool(maps[:, k], out=out[:, k])
        layers = [maps[:, k].float().cpu().numpy() for k in range(len(self.layers))]
        return out.numpy(), _token_maps(layers, alignments, keep_tokens), None

    # ------------------------------------------------------------------ the three ways to run a batch
    def _run_hooked(self, ids: torch.Tensor, mask: torch.Tensor, modules: list[Any], index: int,
                    shape: tuple[int, ...], take: Callable[[int, torch.Tensor], None],
                    rows: torch.Tensor | None = None) -> bool:
        """Run the model on one batch (asking rows-only attention for the token ``rows`` ``(B, R)`` when given) with
        a forward hook on each kept layer's attention module that hands the layer's weights of ``shape``
        ``(B, H, R, T)`` (kept heads selected) to ``take(k, weights)`` and stops the pass after the last kept
        layer. False when a hook got no such weights."""
        captured: set[int] = set()
        sources = self._source_hooks()

        def hook_for(k: int) -> Callable[..., None]:
            def hook(module: Any, args: Any, output: Any) -> None:
                weights = output[index] if isinstance(output, (tuple, list)) and len(output) > index else None
                if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != shape:
                    return
                if sources is not None:
                    weights = sources.transform(self.layers[k], weights)[0]  # (B, H, T, T), rows sum to 1
                if len(self.heads) != self.n_heads:
                    weights = weights.index_select(1, self._head_index.to(weights.device))  # (B, H', R, T)
                take(k, weights)
                captured.add(k)
                self._stop_after(k)
            return hook

        handles = [modules[layer].register_forward_hook(hook_for(k)) for k, layer in enumerate(self.layers)]
        try:
            with sources or contextlib.nullcontext(), torch.inference_mode():
                self.model(input_ids=ids, attention_mask=mask, **self.model_kwargs(rows))
        except _Captured:
            pass  # every kept layer is pooled: the rest of the model is not run
        finally:
            for handle in handles:
                handle.remove()
        if len(captured) != len(self.layers):
            return False
        if self.pinned():
            torch.cuda.synchronize()  # the non-blocking copies into the pinned results are done
        return True

    def _stop_after(self, k: int) -> None:
        """Stop the forward pass (:class:`_Captured`) once the hook of kept layer ``k`` has pooled it, if it is the
        last kept layer the model runs: nothing after its attention is needed (the rest of that layer, the layers
        above, the pooler). Not for a model dispatched by accelerate, whose hooks must see each module finish."""
        if self.layers[k] == max(self.layers) and not getattr(self.model, "hf_device_map", None):
            raise _Captured

    def _forward_hooked(self, ids: torch.Tensor, mask: torch.Tensor, alignments: list[Alignment],
                        modules: list[Any], index: int, keep_tokens: bool) -> Forward | None:
        """One batch, each kept layer pooled by a hook as the model computes it; None when a hook got no weights."""
        batch, n_tok = ids.shape
        pooler = BatchPooler(alignments, n_tok, self.from_pool)
        out = torch.empty((batch, len(self.layers), len(self.heads), pooler.n_pos, pooler.n_pos),
                          dtype=torch.float32, pin_memory=self.pinned())  # (B, L', H', n, n) on the CPU
        tokens: dict[int, npt.NDArray[np.float32]] = {}  # kept layer -> (B, H', T, T), when keep_tokens

        def take(k: int, weights: torch.Tensor) -> None:
            pooler.pool(weights, out=out[:, k])  # on the layer's device, then to the CPU
            if keep_tokens:
                tokens[k] = weights.float().cpu().numpy()

        if not self._run_hooked(ids, mask, modules, index, (batch, self.n_heads, n_tok, n_tok), take):
            return None
        return out.numpy(), _token_maps([tokens[k] for k in sorted(tokens)], alignments, keep_tokens), None

    def _asked_tokens(self, alignments: list[Alignment], rows: Sequence[npt.NDArray[np.intp] | None] | None,
                      keep_tokens: bool) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """The token rows to compute for the words asked for and their positions
        (:func:`probes.extraction.rows.token_rows`); None when the batch needs full maps."""
        if rows is None or not self.selective or self.rows_ok is False or keep_tokens or self.from_pool == "max" \
                or self.source != "weights":
            return None
        asked = [r for r in rows if r is not None]
        if len(asked) < len(rows):  # an input asks for every row
            return None
        return row_attention.token_rows(alignments, asked, self.from_pool)

    def _forward_rows(self, ids: torch.Tensor, mask: torch.Tensor, alignments: list[Alignment],
                      asked: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]], modules: list[Any], index: int
                      ) -> Forward | None:
        """One batch with rows-only attention (:mod:`probes.extraction.rows`): each kept layer's rows asked for
        pooled by a hook into ``(B, L', H', P, n)``. None (and full maps from here on) when the model cannot."""
        if not self.switch(row_attention.IMPLEMENTATION):
            return None
        batch, n_tok = ids.shape
        tokens = torch.from_numpy(asked[0]).to(ids.device)  # (B, R)
        targets = torch.from_numpy(asked[1])  # (B, R)
        pooler = BatchPooler(alignments, n_tok, self.from_pool)
        held = pooler.row_positions(targets)  # B x (P_b,)
        width = max(1, max(len(p) for p in held))
        out = torch.empty((batch, len(self.layers), len(self.heads), width, pooler.n_pos),
                          dtype=torch.float32, pin_memory=self.pinned())  # (B, L', H', P, n) on the CPU

        def take(k: int, weights: torch.Tensor) -> None:
            pooler.pool_rows(weights, targets, out=out[:, k])

        try:
            done = self._run_hooked(ids, mask, modules, index, (batch, self.n_heads, tokens.shape[1], n_tok), take,
                                    tokens)
        except row_attention.RowsUnsupported as exc:
            log.debug("rows-only attention: %s; computing full maps with eager attention", exc)
            self.rows_ok = False
            return None
        finally:
            self.switch("eager")  # whoever uses the model next (gradients, interventions) finds it as loaded
        if not done:
            log.debug("rows-only attention: the hooks got no rows; computing full maps with eager attention")
            self.rows_ok = False
            return None
        self.rows_ok = True
        return out.numpy(), [None] * len(alignments), held

    def _forward_all_layers(self, ids: torch.Tensor, mask: torch.Tensor, alignments: list[Alignment],
                            keep_tokens: bool) -> Forward:
        """One batch with ``output_attentions=True``: every layer's token attention at once (the fallback)."""
        sources = self._source_hooks()
        with sources or contextlib.nullcontext(), torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, output_attentions=True, **self.model_kwargs())
            maps = getattr(out, "attentions", None)
            if maps is None or len(maps) != self.n_layers or any(m is None for m in maps):
                found = "None" if maps is None else f"{len(maps)} layers"
                raise ModelOutputError(
                    f"{type(self.model).__name__} returned no attention weights (expected {self.n_layers} "
                    f"layers, found {found}); load the model with attn_implementation='eager' (SDPA and "
                    "flash attention kernels never return weights)")
            selected = [maps[layer] if sources is None else sources.transform(layer, maps[layer])[0]
                        for layer in self.layers]  # L' x (B, H, T, T)
            if len(self.heads) != self.n_heads:
                selected = [attn.index_select(1, self._head_index.to(attn.device)) for attn in selected]
            pooled = pool_batch(selected, alignments, self.from_pool).cpu().numpy()  # (B, L', H', n, n)
            if not keep_tokens:
                return pooled, [None] * len(alignments), None
            layers = [attn.float().cpu().numpy() for attn in selected]  # L' x (B, H', T, T), on the CPU
            return pooled, _token_maps(layers, alignments, keep_tokens), None


def _token_maps(layers: Sequence[npt.NDArray[np.float32]], alignments: list[Alignment], keep_tokens: bool
                ) -> list[npt.NDArray[np.float32] | None]:
    """Each input's token maps ``(L', H', T_b, T_b)`` from the batch's ``L' x (B, H', T, T)`` (Nones if not
    kept)."""
    if not keep_tokens:
        return [None] * len(alignments)
    return [np.stack([maps[b, :, : al.n_tokens, : al.n_tokens] for maps in layers]) for b, al in enumerate(alignments)]
