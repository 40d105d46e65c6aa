"""Word-level attention of every head of a Hugging Face model, as a stream.

:class:`AttentionExtractor` loads (or wraps) a model with the *eager* attention
implementation, the only one that returns weights (SDPA and flash kernels return
none), tokenizes each input's gold words as pre-split words, runs length-sorted,
right-padded batches under ``torch.inference_mode()``, pools token maps to word
maps on the device (:mod:`probes.extraction.align`) and yields ``(item, WordAttention)``
pairs in input order.

Over-long inputs are never dropped silently (``on_long``):

* ``skip``: the input is not yielded; counted, with its id, in :attr:`AttentionExtractor.report`.
* ``truncate``: the longest prefix of whole words that fits is kept;
  ``meta["truncated"]`` holds the number of words cut.
* ``window``: overlapping windows of whole words (each next window starts half-way
  through the previous one) are run separately and combined: each word's row comes
  from the window in which the word is most central (ties: the earlier window);
  its columns for words outside that window are 0. Leading special tokens take
  their rows from the first window, trailing ones from the last; a word's
  attention to its window's special tokens goes to the matching special
  columns, so every row still sums to 1. ``meta["windows"]`` lists the
  ``(start, end)`` word ranges (0-based, end exclusive).

Attention is captured layer by layer: a forward hook on each layer's attention module pools that
layer's ``(B, H, T, T)`` weights to words as soon as the model computes them (on the layer's own
device) and lets them go, so at most one layer of token attention is alive at a time. Models whose
attention modules hand no weights to a hook fall back to ``output_attentions=True`` (every layer at once).

Rows only: a stream that names, per item, the words whose rows its analyses read (``iter_words(rows=...)``)
gets only those rows where the model allows it (:mod:`probes.extraction.rows`): the model's attention runs
through SDPA, the rows asked for are recomputed as eager attention computes them, and each pair holds them
alone (``WordAttention.row_weights`` at ``row_positions``; ``weights`` is a read-only all-NaN view).

Memory budget (``max_attention_mb``, MB of float32, default :data:`DEFAULT_ATTENTION_MB`): half of it
bounds what the extractor holds at once (the token attention of the layer in flight, the batch's pooled
result, the finished results waiting in its buffer, a combined windowed input); the other half bounds the
pairs a consumer's queue holds (:attr:`max_queue_bytes` of the stream, read by
:func:`probes.analysis.driver.stream`). An input that cannot be run within the extractor's half is
handled by ``on_long`` like an over-long input (skipped, truncated or run in windows that fit; a windowed
input whose combined ``n x n`` result would not fit is skipped) and named in the report's
``over_budget``. ``max_batch_tokens`` bounds the padded tokens (B x T) of one forward pass; an input
longer than it runs alone.
"""

from __future__ import annotations

import contextlib
import logging
import math
import numbers
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch
from tqdm.auto import tqdm

from probes.extraction.align import (FROM_POOLS, Alignment, BatchPooler, alignment_from_word_ids, check_tokenizer,
                                     pool_batch)
from probes.extraction.attention import TokenAttention, WordAttention
from probes.extraction import families
from probes.extraction import rows as row_attention
from probes.extraction.loading import device_map_of, load_pretrained, place_model, weights_sha256
from probes.corpora.types import Sentence
from probes.errors import ConfigError, ModelOutputError
from probes.results import Result

__all__ = ["AttentionExtractor", "ExtractionReport", "PairStream", "ON_LONG", "DTYPES", "DEFAULT_ATTENTION_MB", "check_options",
           "check_device"]

log = logging.getLogger("probes")

T = TypeVar("T")

ON_LONG: tuple[str, ...] = ("skip", "truncate", "window")
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16,
                                  "bfloat16": torch.bfloat16}

#: Upper bound on the elements of the model's own attention output for one batch
#: (B x all layers x all heads x T x T); long inputs get smaller batches.
_BATCH_ELEMENTS = 2**25
#: The cost of one forward pass beyond its tokens, in token slots (used to choose batch cuts).
_BATCH_OVERHEAD_TOKENS = 128
#: Look-ahead of the length sort, in batches: more sorts better but holds more results.
_BUFFER_BATCHES = 16
#: ... and, once it holds a batch, at most this many word-level attention values (items x kept layers
#: x kept heads x n x n, n = words + 2; 128 MB of float32): 512-token document windows are then held
#: one batch at a time, not 16 batches (4.5 GB for MiniLM), while sentence buffers stay whole.
_BUFFER_ELEMENTS = 2**25
#: Default ``max_attention_mb``: 2 GB of float32 attention, half for the extractor (2**28 values), half for the
#: queue. Today's batches and windows of MiniLM (72 heads) and bert-base (144 heads) fit it unchanged: 4
#: bert-base windows of 512 tokens in a buffer hold 152M values plus 41M in flight; the longest input it runs
#: whole is 945 tokens for bert-base, 1,311 for MiniLM (359 for a 7B decoder's 1,024 heads).
DEFAULT_ATTENTION_MB = 2048.0
#: Bytes of float32 values.
_FLOAT = 4


@dataclass
class ExtractionReport(Result):
    """What happened to the inputs of an extractor, cumulative since creation or :meth:`reset`.

    Attributes:
        n_items: inputs seen.
        n_yielded: inputs yielded (all but the skipped ones).
        skipped, truncated, windowed: ids of the inputs over the maximum length, by what was done.
        max_tokens: the maximum length applied (special tokens included).
        over_budget: ids (also in ``skipped``, ``truncated`` or ``windowed``) of the inputs handled so because
            their attention did not fit ``max_attention_mb``, not because of their length.
        max_attention_mb: the attention budget applied (None: none).
        n_rows_only: inputs whose attention was computed only for the word rows their analyses read
            (:mod:`probes.extraction.rows`); their pairs hold those rows alone (``WordAttention.row_weights``).
    """

    max_tokens: int = 0
    n_items: int = 0
    n_yielded: int = 0
    skipped: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    windowed: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)
    max_attention_mb: float | None = None
    n_rows_only: int = 0

    def reset(self) -> None:
        """Forget every count."""
        self.n_items = self.n_yielded = self.n_rows_only = 0
        self.skipped.clear()
        self.truncated.clear()
        self.windowed.clear()
        self.over_budget.clear()

    def as_dict(self) -> dict[str, Any]:
        """Counts and ids, for JSON reports."""
        return {"max_tokens": self.max_tokens, "n_items": self.n_items, "n_yielded": self.n_yielded,
                "n_skipped": len(self.skipped), "n_truncated": len(self.truncated),
                "n_windowed": len(self.windowed), "skipped": list(self.skipped),
                "truncated": list(self.truncated), "windowed": list(self.windowed),
                "max_attention_mb": self.max_attention_mb, "n_over_budget": len(self.over_budget),
                "over_budget": list(self.over_budget), "n_rows_only": self.n_rows_only}

    def summary(self) -> str:
        """One human-readable line, e.g. for the end of a CLI run."""
        text = (f"{self.n_items} inputs read, {self.n_yielded} yielded; over {self.max_tokens} tokens: "
                f"{len(self.skipped)} skipped, {len(self.truncated)} truncated, {len(self.windowed)} windowed")
        budget = f"over the attention budget ({self.max_attention_mb:g} MB)" if self.over_budget else ""
        for name, ids in (("skipped", self.skipped), ("truncated", self.truncated), ("windowed", self.windowed),
                          (budget, self.over_budget)):
            if ids:
                shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
                text += f"\n  {name}: {shown}"
        return text


@dataclass
class _Job:
    """One model input: a whole item, a truncated item or one window of an item."""

    item: int  # index in the buffer
    alignment: Alignment
    start: int = 0  # first word of the item covered (windows)
    result: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))  # (L', H', n, n)
    tokens: npt.NDArray[np.float32] | None = None  # (L', H', T, T) when the extractor keeps token maps
    rows: npt.NDArray[np.intp] | None = None  # the job's words whose rows were asked for (None: every row)
    row_positions: npt.NDArray[np.intp] | None = None  # set when ``result`` holds only these positions' rows


#: What one forward pass gives: the pooled maps of the batch, each input's token maps (or None) and, for a batch
#: run rows-only, each input's positions whose rows the maps hold (else None).
_Forward = tuple[npt.NDArray[np.float32], list[npt.NDArray[np.float32] | None], list[npt.NDArray[np.intp]] | None]


class _Captured(Exception):
    """Raised by the forward hook of the last kept layer: the attention wanted is pooled, the pass can stop."""


def _quiet_length_warning(tokenizer: Any) -> None:
    """Silence transformers' "Token indices sequence length is longer than ..." warning for ``tokenizer``.

    Over-long inputs are counted and named by the extractor's report (and so in every run's summary);
    transformers' own warning, shown once and without an id, would only be a second, vaguer mention.
    """
    flags = getattr(tokenizer, "deprecation_warnings", None)
    if isinstance(flags, dict):
        flags["sequence-length-is-longer-than-the-specified-maximum"] = True


def _item_id(item: Any, index: int) -> str:
    for attr in ("sent_id", "doc_id", "id"):
        value = getattr(item, attr, None)
        if value is not None:
            return str(value)
    return f"#{index}"


class PairStream(Iterator[tuple[T, WordAttention]]):
    """A stream of ``(item, WordAttention)`` pairs with ``max_queue_bytes``: what a consumer's queue may hold
    of it (None: no budget), read by :func:`probes.analysis.driver.stream`. An extractor's streams are
    PairStreams; code that wraps one in a generator wraps the generator again (:meth:`like`) to keep the bound."""

    def __init__(self, pairs: Iterator[tuple[T, WordAttention]], max_queue_bytes: int | None) -> None:
        self._pairs = pairs
        self.max_queue_bytes = max_queue_bytes

    @classmethod
    def like(cls, pairs: Iterator[tuple[T, WordAttention]], source: Any) -> PairStream[T]:
        """``pairs`` with the queue bound of ``source`` (a PairStream, or anything else: no bound)."""
        return cls(pairs, getattr(source, "max_queue_bytes", None))

    def __iter__(self) -> PairStream[T]:
        return self

    def __next__(self) -> tuple[T, WordAttention]:
        return next(self._pairs)

    def close(self) -> None:
        """Stop the extraction (runs its clean-up: the progress bar)."""
        close = getattr(self._pairs, "close", None)
        if close is not None:
            close()


def _attention_modules(model: Any, n_layers: int) -> tuple[list[Any], int] | None:
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


#: The constructor options :func:`check_options` checks.
_CHECKED = ("device", "dtype", "batch_size", "from_pool", "max_length", "on_long", "max_batch_tokens",
            "max_attention_mb")


def check_device(device: str | torch.device | None) -> torch.device:
    """``device`` as a torch device (None: CUDA when available, else CPU), if this machine has it.

    Raises:
        ConfigError: not a device name, or a CUDA / MPS device this machine does not have.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"device: expected cpu, cuda, cuda:N or mps, found {device!r}") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device {device!r}: no CUDA GPU is available here (torch {torch.__version__}); "
                              "use device cpu")
        if dev.index is not None and dev.index >= count:
            raise ConfigError(f"device {device!r}: only {count} CUDA GPU(s) here (cuda:0..cuda:{count - 1})")
    elif dev.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError(f"device {device!r}: MPS is not available here; use device cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device: expected cpu, cuda, cuda:N or mps, found {device!r}")
    return dev


def check_options(*, device: str | torch.device | None = None, dtype: str = "float32", batch_size: int = 32,
                  from_pool: str = "mean", max_length: int | None = None, on_long: str = "skip",
                  max_batch_tokens: int | None = None,
                  max_attention_mb: float | None = DEFAULT_ATTENTION_MB) -> torch.device:
    """Check an extractor's options without loading anything; returns the device to use.

    :meth:`AttentionExtractor.from_pretrained` calls it before the model loads, so a bad option
    costs no loading time.

    Raises:
        ConfigError: the first bad option, named.
    """
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, found {dtype!r}")
    if from_pool not in FROM_POOLS:
        raise ConfigError(f"from_pool must be one of {', '.join(FROM_POOLS)}, found {from_pool!r}")
    if on_long not in ON_LONG:
        raise ConfigError(f"on_long must be one of {', '.join(ON_LONG)} (--on-long), found {on_long!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ConfigError(f"batch_size must be a whole number >= 1, found {batch_size!r}")
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, numbers.Integral)
                                   or max_length < 2):
        raise ConfigError(f"max_length must be a whole number >= 2 (tokens, specials included), found "
                          f"{max_length!r}")
    if max_batch_tokens is not None and (isinstance(max_batch_tokens, bool) or
                                         not isinstance(max_batch_tokens, numbers.Integral) or max_batch_tokens < 1):
        raise ConfigError(f"max_batch_tokens must be a whole number >= 1 (--max-batch-tokens), found "
                          f"{max_batch_tokens!r}")
    if max_attention_mb is not None and (isinstance(max_attention_mb, bool) or
                                         not isinstance(max_attention_mb, numbers.Real) or
                                         not math.isfinite(max_attention_mb) or max_attention_mb <= 0):
        raise ConfigError(f"max_attention_mb must be a number of MB > 0 (--max-attention-mb), found "
                          f"{max_attention_mb!r}")
    return check_device(device)


class AttentionExtractor:
    """Runs a Hugging Face model and yields word-level attention per input, in input order.

    Args:
        model: a transformers model (encoder or decoder); switched to eager attention.
        tokenizer: its fast tokenizer (byte-level BPE ones need ``add_prefix_space=True``,
            which :meth:`from_pretrained` sets).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"`` ...; default: CUDA when available.
        dtype: ``float32``, ``float16`` or ``bfloat16`` for the model; pooling is done in float32.
        batch_size: most inputs per forward pass (fewer for long inputs, to bound memory).
        layers, heads: 0-based layers / heads to keep (default: all).
        from_pool: ``mean`` (the paper), ``first`` (the released code) or ``max``.
        max_length: most tokens per input, special tokens included (default: the model's maximum).
        on_long: ``skip``, ``truncate`` or ``window`` for inputs over ``max_length``.
        progress: show a tqdm progress bar (stderr) with inputs/s.
        keep_tokens: also hand on each whole input's token-level maps (``WordAttention.tokens``,
            a :class:`~probes.extraction.attention.TokenAttention`) for token-level measures;
            windowed and truncated inputs get none.
        max_batch_tokens: most padded tokens (inputs x longest) per forward pass (default: no limit beyond
            ``batch_size``); an input longer than it runs alone.
        max_attention_mb: most attention held at once, in MB of float32 (see the module's notes; None: no
            budget). Inputs that do not fit are handled by ``on_long`` and named in ``report.over_budget``.
        selective: when a stream asks for some word rows only (``iter_words(rows=...)``), compute only those
            (:mod:`probes.extraction.rows`: the model's attention through SDPA, the rows asked for recomputed
            as eager attention computes them; the pair holds those rows alone) where the model's attention
            goes through transformers' attention interface. False: always full maps with eager attention.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        device: str | torch.device | None = None,
        dtype: str = "float32",
        batch_size: int = 32,
        layers: Sequence[int] | None = None,
        heads: Sequence[int] | None = None,
        from_pool: str = "mean",
        max_length: int | None = None,
        on_long: str = "skip",
        progress: bool = True,
        keep_tokens: bool = False,
        max_batch_tokens: int | None = None,
        max_attention_mb: float | None = DEFAULT_ATTENTION_MB,
        selective: bool = True,
    ) -> None:
        self.device = check_options(device=device, dtype=dtype, batch_size=batch_size, from_pool=from_pool,
                                    max_length=max_length, on_long=on_long, max_batch_tokens=max_batch_tokens,
                                    max_attention_mb=max_attention_mb)
        check_tokenizer(tokenizer)
        self.model = model
        self.tokenizer = tokenizer
        self.dtype = dtype
        self.batch_size = int(batch_size)
        self.from_pool = from_pool
        self.on_long = on_long
        self.progress = progress
        self.keep_tokens = bool(keep_tokens)
        self.max_batch_tokens: int | None = None if max_batch_tokens is None else int(max_batch_tokens)
        self.max_attention_mb: float | None = None if max_attention_mb is None else float(max_attention_mb)
        self._sites: tuple[list[Any], int] | bool | None = None  # attention modules and output index; False: none
        self.selective = bool(selective)
        self._rows_ok: bool | None = None  # whether rows-only attention works for this model (None: not tried)
        self.name_or_path: str = str(getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", ""))
        self.revision: str | None = getattr(model.config, "_commit_hash", None)
        self._weights_hash: str | None = None
        self._force_eager()
        model.eval()
        self.device = place_model(model, self.device, DTYPES[dtype])  # a device-mapped model stays put
        self.n_layers: int = families.n_layers(model)
        self.n_heads: int = families.n_heads(model)
        self.layers: tuple[int, ...] = self._check_index("layers", layers, self.n_layers)
        self.heads: tuple[int, ...] = self._check_index("heads", heads, self.n_heads)
        self._is_decoder = families.is_decoder(model)
        limits = families.position_limits(tokenizer, model)
        self.max_tokens: int = int(max_length) if max_length is not None else (min(limits) if limits else 512)
        if max_length is not None and limits and max_length > min(limits):
            raise ConfigError(f"max_length {max_length} is over the model's maximum of {min(limits)} tokens")
        n_special = len(tokenizer(["a"], is_split_into_words=True)["input_ids"]) - \
            len(tokenizer(["a"], is_split_into_words=True, add_special_tokens=False)["input_ids"])
        if self.max_tokens <= n_special:
            raise ConfigError(f"max_length must leave room for words after the {n_special} special tokens, "
                              f"found {self.max_tokens}")
        self.report = ExtractionReport(max_tokens=self.max_tokens, max_attention_mb=self.max_attention_mb)
        self._layer_index = torch.tensor(self.layers, device=self.device)
        self._head_index = torch.tensor(self.heads, device=self.device)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, *, revision: str | None = None,
                        device_map: str | dict[str, Any] | None = None, **options: Any) -> AttentionExtractor:
        """Load model and tokenizer from a hub name, a local folder or ``package:NAME``.

        Loading is :func:`probes.extraction.loading.load_pretrained`: eager attention, and
        ``add_prefix_space=True`` for byte-level BPE tokenizers (RoBERTa, GPT-2 ...) so pre-split
        words are tokenized as in running text.

        ``device_map`` (``"auto"``, ``"balanced"``, a dict of module name -> device; needs accelerate:
        ``pip install "probes[gpu]"``) spreads a model too large for one GPU over several (or the CPU, or
        ``"disk"``); it is placed once, at loading, and never moved: inputs go to the device of its input
        embeddings, and ``device`` must then be left out.

        Raises:
            ConfigError: a bad option, ``device`` given with ``device_map``, or accelerate missing.
        """
        check_options(**{k: v for k, v in options.items() if k in _CHECKED})  # before the model loads
        if device_map is not None and options.get("device") is not None:
            raise ConfigError(f"give device or device_map, not both (found device {options['device']!r} and "
                              f"device_map {device_map!r}): a device map places the model itself")
        model, tokenizer, name = load_pretrained(
            name_or_path, revision=revision, dtype=DTYPES.get(options.get("dtype", "float32"), torch.float32),
            progress=options.get("progress", True), device_map=device_map)
        extractor = cls(model, tokenizer, **options)
        extractor.name_or_path = name
        extractor.revision = revision or getattr(model.config, "_commit_hash", None)
        return extractor

    def _force_eager(self) -> None:
        impl = getattr(self.model.config, "_attn_implementation", None)
        if impl in (None, "eager"):
            return
        setter = getattr(self.model, "set_attn_implementation", None)
        if setter is None:
            raise ModelOutputError(
                f"{type(self.model).__name__} uses the {impl!r} attention implementation, which returns no "
                "attention weights, and cannot be switched; load it with attn_implementation='eager'")
        try:
            setter("eager")
        except Exception as exc:  # transformers raises ValueError/NotImplementedError variants
            raise ModelOutputError(
                f"{type(self.model).__name__} cannot switch from {impl!r} to eager attention ({exc}); "
                "load it with attn_implementation='eager'") from exc

    def _switch(self, implementation: str) -> bool:
        """Run the model with ``implementation`` (``eager`` or rows-only attention) from now on; False when it
        cannot (rows-only attention is then never tried again)."""
        if getattr(self.model.config, "_attn_implementation", None) == implementation:
            return True
        if implementation == row_attention.IMPLEMENTATION:
            if not (getattr(self.model, "_supports_sdpa", False) and self.model._can_set_attn_implementation()):
                self._rows_ok = False
                return False
            row_attention.register()
        try:
            self.model.set_attn_implementation(implementation)
        except Exception:  # transformers raises ValueError/NotImplementedError variants
            if implementation == "eager":
                raise
            self._rows_ok = False
            return False
        if getattr(self.model.config, "_attn_implementation", None) != implementation:
            self._rows_ok = False
            return False
        return True

    @staticmethod
    def _check_index(name: str, values: Sequence[int] | None, size: int) -> tuple[int, ...]:
        if values is None:
            return tuple(range(size))
        out = tuple(int(v) for v in values)
        if not out or any(v < 0 or v >= size for v in out) or len(set(out)) != len(out):
            raise ConfigError(
                f"{name}: expected distinct 0-based indices in 0..{size - 1} (the model has {size}; "
                f"{name} {', '.join(str(v + 1) for v in values)} counted from 1), found {list(values)}")
        return out

    # ------------------------------------------------------------------ facts
    def info(self) -> dict[str, Any]:
        """Model, revision or weights hash, tokenizer and options: what a store records."""
        import transformers

        from probes._version import __version__

        if self._weights_hash is None and self.name_or_path and Path(self.name_or_path).is_dir():
            self._weights_hash = weights_sha256(self.name_or_path)
        return {
            "model": self.name_or_path,
            "model_class": type(self.model).__name__,
            "model_type": getattr(self.model.config, "model_type", None),
            "revision": self.revision,
            "weights_sha256": self._weights_hash,
            "tokenizer": type(self.tokenizer).__name__,
            "tokenizer_name": getattr(self.tokenizer, "name_or_path", None),
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "layers": list(self.layers),
            "heads": list(self.heads),
            "dtype": self.dtype,
            "device": str(self.device),
            "device_map": device_map_of(self.model),  # Helper C (issue 15): where a device map put the modules
            "attn_implementation": "eager",
            "selective": self.selective,  # rows-only attention where a stream asks for rows (probes.extraction.rows)
            "from_pool": self.from_pool,
            "to_pool": "sum",
            "max_tokens": self.max_tokens,
            "on_long": self.on_long,
            "max_batch_tokens": self.max_batch_tokens,
            "max_attention_mb": self.max_attention_mb,
            "budget_tokens": self.budget_tokens(),
            "indexing": "layers and heads are 0-based here; outputs for people name heads 1-based (layer-head)",
            "probes_version": __version__,
            "transformers_version": transformers.__version__,
            "torch_version": str(torch.__version__),  # a plain str (TorchVersion subclasses it)
        }

    def count_tokens(self, words: Sequence[str]) -> int:
        """Number of tokens of ``words`` as the model sees them, special tokens included."""
        return len(self.tokenizer(list(words), is_split_into_words=True)["input_ids"])

    def count_tokens_many(self, word_lists: list[Sequence[str]]) -> list[int]:
        """:meth:`count_tokens` of each of ``word_lists``, in one tokenizer call."""
        if not word_lists:
            return []
        encoded = self.tokenizer([list(w) for w in word_lists], is_split_into_words=True)
        return [len(ids) for ids in encoded["input_ids"]]

    # ------------------------------------------------------------------ memory budget
    def _share(self) -> float:
        """The extractor's half of ``max_attention_mb``, in float32 values (inf without a budget)."""
        return math.inf if self.max_attention_mb is None else self.max_attention_mb * 2**20 / _FLOAT / 2

    def max_queue_bytes(self) -> int | None:
        """The other half of the budget, in bytes: what a consumer's queue may hold of this extractor's pairs."""
        return None if self.max_attention_mb is None else int(self.max_attention_mb * 2**20 / 2)

    def _held(self, n_tok: int, n_pos: int) -> int:
        """Values one finished input holds: its word maps ``(L', H', n, n)`` (and token maps when kept)."""
        return len(self.layers) * len(self.heads) * (n_pos * n_pos + (n_tok * n_tok if self.keep_tokens else 0))

    def _in_flight(self, batch: int, n_tok: int, n_pos: int) -> int:
        """Values of one forward pass beyond its results: the layer of token attention ``(B, H, T, T)`` being
        pooled and the batch's pooled result ``(B, L', H', n, n)``."""
        return batch * (self.n_heads * n_tok * n_tok + len(self.layers) * len(self.heads) * n_pos * n_pos)

    def _fits(self, n_tok: int, n_pos: int) -> bool:
        """Whether one input run alone stays within the extractor's share of the budget."""
        return self._held(n_tok, n_pos) + self._in_flight(1, n_tok, n_pos) <= self._share()

    def budget_tokens(self) -> int:
        """The longest input (tokens, specials included) this extractor runs whole: at most ``max_tokens``,
        and such that its attention fits the budget whatever its words (``n <= T`` positions)."""
        per_token2 = self.n_heads + len(self.layers) * len(self.heads) * (2 + self.keep_tokens)
        share = self._share()
        return self.max_tokens if math.isinf(share) else min(self.max_tokens, math.isqrt(int(share // per_token2)))

    # ------------------------------------------------------------------ streaming
    def iter_attention(self, sentences: Iterable[Sentence], *, desc: str = "attention",
                       total: int | None = None) -> Iterator[tuple[Sentence, WordAttention]]:
        """Yield ``(sentence, word_attention)`` for each sentence, in input order (skipped ones left out).

        ``desc`` labels the progress bar (the phase, e.g. ``"report split"``); ``total`` is the number of
        sentences when ``sentences`` has no length.
        """
        return self.iter_words(sentences, words=lambda s: s.words, desc=desc, total=total)

    def iter_words(self, items: Iterable[T], words: Callable[[T], Sequence[str]], *, desc: str = "attention",
                   total: int | None = None, unit: str = "sent", advance: Callable[[T], int] | None = None,
                   rows: Callable[[T], Sequence[int] | None] | None = None) -> Iterator[tuple[T, WordAttention]]:
        """Yield ``(item, word_attention)`` for any items whose words ``words(item)`` gives, in input order.

        Items are read through a bounded buffer (``_BUFFER_BATCHES x batch_size`` items and, past one
        batch, at most about ``_BUFFER_ELEMENTS`` word-level attention values), sorted by token length into batches
        inside it, and yielded in input order, so memory does not grow with the corpus nor with the
        length of the items; under a budget the buffer is run in consecutive groups that fit it.

        The progress bar (``progress=True``) is labelled ``desc`` and counts ``unit``s out of ``total``
        (default: ``len(items)``), so it shows an ETA from the start; ``advance(item)`` is how many units
        an item completes (default 1; e.g. 1 for the last window of a document, 0 for the others).

        ``rows(item)``: the 0-based words of ``item`` whose rows (attention *from* them) the consumer reads, or
        None for every row (the default for every item). With ``selective`` (the default) and a model that
        allows it, only those rows are computed and the pair holds them alone (:mod:`probes.extraction.rows`;
        counted in ``report.n_rows_only``). It is called on the extractor's thread: it must not touch state
        the consumer changes.

        The iterator returned has ``max_queue_bytes`` (:meth:`max_queue_bytes`), which bounds the queue of
        :func:`probes.analysis.driver.stream`.
        """
        return PairStream(self._iter_words(items, words, desc, total, unit, advance, rows), self.max_queue_bytes())

    def _iter_words(self, items: Iterable[T], words: Callable[[T], Sequence[str]], desc: str, total: int | None,
                    unit: str, advance: Callable[[T], int] | None,
                    rows: Callable[[T], Sequence[int] | None] | None = None) -> Iterator[tuple[T, WordAttention]]:
        _quiet_length_warning(self.tokenizer)  # over-long inputs are reported by ``self.report``, not transformers
        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]
        bar = tqdm(total=total, unit=unit, file=sys.stderr, disable=not self.progress, desc=desc,
                   dynamic_ncols=True, mininterval=0.5)
        bar.probes_advance = advance  # type: ignore[attr-defined]  # read by _run_buffer
        buffer: list[T] = []
        size, per_pair, held = _BUFFER_BATCHES * self.batch_size, len(self.layers) * len(self.heads), 0
        try:
            for item in items:
                buffer.append(item)
                held += per_pair * (len(words(item)) + 2) ** 2
                if len(buffer) >= size or (held >= _BUFFER_ELEMENTS and len(buffer) >= self.batch_size):
                    yield from self._run_buffer(buffer, words, bar, rows)
                    buffer, held = [], 0
            if buffer:
                yield from self._run_buffer(buffer, words, bar, rows)
        finally:
            bar.close()
            if self.report.skipped or self.report.truncated or self.report.windowed:
                log.info("attention extraction: %s", self.report.summary())

    def _run_buffer(self, buffer: list[T], words: Callable[[T], Sequence[str]], bar: Any,
                    rows: Callable[[T], Sequence[int] | None] | None = None) -> Iterator[tuple[T, WordAttention]]:
        word_lists = [list(words(item)) for item in buffer]
        jobs_of = self._plan(buffer, word_lists)
        if rows is not None and self.selective and self._rows_ok is not False:
            first = self.report.n_items - len(buffer)  # _plan has counted the buffer
            for index, item_jobs in enumerate(jobs_of):
                self._ask_rows(item_jobs, rows(buffer[index]), len(word_lists[index]),
                               _item_id(buffer[index], first + index))
        for group, held in self._groups(jobs_of):
            jobs = [job for index in group for job in jobs_of[index]]
            self._run_jobs(jobs, self._share() - held)
            del jobs  # each result is released once its item is yielded
            for index in group:
                item, item_jobs = buffer[index], jobs_of[index]
                if item_jobs:
                    self.report.n_yielded += 1
                    pair = item, self._assemble(item_jobs, len(word_lists[index]))
                    jobs_of[index] = []  # the consumer holds the result from here on: do not keep it
                    del item_jobs
                    yield pair
                    del pair
                bar.update(1 if bar.probes_advance is None else bar.probes_advance(item))

    @staticmethod
    def _ask_rows(jobs: list[_Job], asked: Sequence[int] | None, n_words: int, item_id: str) -> None:
        """Give each of an item's ``jobs`` the words (its own, 0-based) of ``asked`` it holds (None: every row)."""
        if asked is None:
            return
        words = np.unique(np.asarray(list(asked), dtype=np.intp))
        if words.size and (words[0] < 0 or words[-1] >= n_words):
            raise ConfigError(f"{item_id}: rows asked for must be "
                              f"word indices in 0..{n_words - 1}, found {words[0]}..{words[-1]}")
        for job in jobs:
            local = words - job.start
            job.rows = local[(local >= 0) & (local < job.alignment.n_words)]

    def _groups(self, jobs_of: list[list[_Job]]) -> Iterator[tuple[range, int]]:
        """Consecutive items of a buffer to run together, with the values their results hold.

        A group's results, plus the larger of its biggest single forward pass and its biggest combined
        windowed input, stay within the extractor's share (a group has at least one item; :meth:`_plan`
        has made every item fit alone). Without a budget: the whole buffer.
        """
        share, start, held, peak = self._share(), 0, 0, 0
        for index, item_jobs in enumerate(jobs_of):
            own = sum(self._held(j.alignment.n_tokens, j.alignment.n_positions) for j in item_jobs)
            top = self._peak(item_jobs)
            if index > start and held + own + max(peak, top) > share:
                yield range(start, index), held
                start, held, peak = index, 0, 0
            held, peak = held + own, max(peak, top)
        yield range(start, len(jobs_of)), held

    def _peak(self, jobs: list[_Job]) -> int:
        """Values beyond the finished results while ``jobs`` (one item's) run: the largest forward pass, or
        the combined ``(L', H', n, n)`` of a windowed item, whichever is larger."""
        if not jobs:
            return 0
        top = max(self._in_flight(1, j.alignment.n_tokens, j.alignment.n_positions) for j in jobs)
        if len(jobs) > 1:
            n = jobs[0].alignment.n_special_tokens + max(j.start + j.alignment.n_words for j in jobs)
            top = max(top, len(self.layers) * len(self.heads) * n * n)
        return top

    def _align(self, word_lists: list[list[str]], items: list[Any], offset: int = 0) -> list[Alignment]:
        enc = self.tokenizer(word_lists, is_split_into_words=True, add_special_tokens=True)
        out = []
        for i, (wl, item) in enumerate(zip(word_lists, items)):
            out.append(alignment_from_word_ids(
                enc["input_ids"][i], enc.word_ids(i), wl, item_id=_item_id(item, offset + i),
                path=getattr(item, "path", None), line=getattr(item, "line", None)))
        return out

    def _plan(self, buffer: list[Any], word_lists: list[list[str]]) -> list[list[_Job]]:
        """Align every item and decide, for the over-long and over-budget ones, what to run."""
        alignments = self._align(word_lists, buffer, self.report.n_items)
        plans: list[list[_Job]] = []
        for index, (item, wl, al) in enumerate(zip(buffer, word_lists, alignments)):
            item_id = _item_id(item, self.report.n_items + index)
            long = al.n_tokens > self.max_tokens
            if not long and self._fits(al.n_tokens, al.n_positions):
                plans.append([_Job(index, al)])
                continue
            if not long:
                self.report.over_budget.append(item_id)
            plans.append(self._plan_long(index, item, item_id, wl, al))
        self.report.n_items += len(buffer)
        return plans

    def _plan_long(self, index: int, item: Any, item_id: str, wl: list[str], al: Alignment) -> list[_Job]:
        """The jobs of an input over ``max_tokens`` or the budget, by ``on_long`` (its id goes to the report)."""
        budget = self.budget_tokens() - al.n_special_tokens  # tokens of words per job
        if self.on_long == "skip" or al.word_tokens.max(initial=0) > budget:
            self.report.skipped.append(item_id)
            return []
        if self.on_long == "truncate":
            keep = int(np.searchsorted(np.cumsum(al.word_tokens), budget, side="right"))
            self.report.truncated.append(item_id)
            return [_Job(index, self._align([wl[:keep]], [item])[0])]
        spans = self._windows(al.word_tokens, budget)
        sub = self._align([wl[s:e] for s, e in spans], [item] * len(spans))
        jobs = [_Job(index, a, start=s) for a, (s, _) in zip(sub, spans)]
        held = sum(self._held(j.alignment.n_tokens, j.alignment.n_positions) for j in jobs)
        if held + self._peak(jobs) > self._share():  # the combined n x n does not fit
            if item_id not in self.report.over_budget:
                self.report.over_budget.append(item_id)
            self.report.skipped.append(item_id)
            return []
        self.report.windowed.append(item_id)
        return jobs

    @staticmethod
    def _windows(word_tokens: npt.NDArray[np.intp], budget: int) -> list[tuple[int, int]]:
        """Overlapping ``(start, end)`` word ranges of at most ``budget`` tokens each."""
        ends = np.concatenate([[0], np.cumsum(word_tokens)])  # (n_words + 1,)
        n_words, spans, start = len(word_tokens), [], 0
        while True:
            end = int(np.searchsorted(ends, ends[start] + budget, side="right")) - 1
            spans.append((start, end))
            if end >= n_words:
                return spans
            start = max(start + 1, start + (end - start) // 2)

    def _batches(self, jobs: list[_Job], room: float = math.inf) -> Iterator[list[_Job]]:
        """Length-sorted batches that waste little compute on padding.

        The buffer's jobs are sorted by token length and cut into contiguous batches by dynamic
        programming: each batch costs its padded size (items x longest) plus a fixed overhead of
        ``_BATCH_OVERHEAD_TOKENS`` (the per-forward cost, in token slots), at most ``batch_size``
        items, at most ``_BATCH_ELEMENTS`` attention values (all layers), at most ``max_batch_tokens``
        padded tokens and at most ``room`` values in flight (:meth:`_in_flight`; a job alone always
        runs). Fixed-size batches over a sorted buffer of 256 sentences spend ~28% more than a globally
        sorted corpus on EWT; this spends ~4%.
        """
        order = sorted(jobs, key=lambda j: j.alignment.n_tokens)
        lengths = [job.alignment.n_tokens for job in order]
        positions = [job.alignment.n_positions for job in order]
        per_token2 = self.n_layers * self.n_heads
        most_tokens = math.inf if self.max_batch_tokens is None else self.max_batch_tokens
        n = len(order)
        best = [0.0] + [float("inf")] * n  # best[j]: cheapest cut of the first j jobs
        cut = [0] * (n + 1)
        for j in range(1, n + 1):
            longest, widest = lengths[j - 1], 0
            for i in range(j - 1, max(0, j - self.batch_size) - 1, -1):
                widest = max(widest, positions[i])
                if i < j - 1 and ((j - i) * per_token2 * longest * longest > _BATCH_ELEMENTS
                                  or (j - i) * longest > most_tokens
                                  or self._in_flight(j - i, longest, widest) > room):
                    break
                cost = best[i] + (j - i) * longest + _BATCH_OVERHEAD_TOKENS
                if cost < best[j]:
                    best[j], cut[j] = cost, i
        bounds, j = [], n
        while j > 0:
            bounds.append((cut[j], j))
            j = cut[j]
        for i, j in reversed(bounds):
            yield order[i:j]

    def _run_jobs(self, jobs: list[_Job], room: float = math.inf) -> None:
        """Run ``jobs`` in batches with at most ``room`` values in flight; each job gets its result."""
        for batch in self._batches(jobs, room):
            pooled, token_maps, held = self._forward([job.alignment for job in batch],
                                                     [job.rows for job in batch])  # (B, L', H', n or P, n)
            for b, (job, weights, maps) in enumerate(zip(batch, pooled, token_maps)):
                n = job.alignment.n_positions
                if held is None:
                    job.result = np.ascontiguousarray(weights[:, :, :n, :n])
                else:  # rows only: (L', H', P_b, n)
                    job.row_positions = held[b]
                    job.result = np.ascontiguousarray(weights[:, :, : len(held[b]), :n])
                job.tokens = maps

    # ------------------------------------------------------------------ forward passes
    def _forward(self, alignments: list[Alignment], rows: Sequence[npt.NDArray[np.intp] | None] | None = None
                 ) -> _Forward:
        """Run one right-padded batch and pool it to word level: ``(B, L', H', n_max, n_max)``.

        Also the token maps ``(L', H', T_b, T_b)`` of each input when ``keep_tokens`` (else Nones), and None,
        or, for a batch run rows-only, the maps ``(B, L', H', P, n_max)`` of the rows computed and, per input,
        the positions ``(P_b,)`` those rows belong to.
        Layer by layer through forward hooks when the model's attention modules allow it, else with
        ``output_attentions=True`` (said once in a debug log). ``rows``: per input the words whose rows
        alone are wanted (None: every row); when every input of the batch names them and the model allows
        it, only those rows are computed (:meth:`_forward_rows`).
        """
        ids, mask = self._inputs(alignments)
        sites = self._attention_sites()
        if sites is not None:
            asked = self._asked_tokens(alignments, rows)
            if asked is not None:
                got = self._forward_rows(ids, mask, alignments, asked, *sites)
                if got is not None:
                    self.report.n_rows_only += len(alignments)
                    return got
            got = self._forward_hooked(ids, mask, alignments, *sites)
            if got is not None:
                return got
            log.debug("%s: its attention modules hand no weights to a forward hook; using output_attentions=True "
                      "(every layer's token attention at once)", type(self.model).__name__)
            self._sites = False
        return self._forward_all_layers(ids, mask, alignments)

    def _inputs(self, alignments: list[Alignment]) -> tuple[torch.Tensor, torch.Tensor]:
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

    def _model_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"return_dict": True}
        if self._is_decoder:
            kwargs["use_cache"] = False
        return kwargs

    def _attention_sites(self) -> tuple[list[Any], int] | None:
        """Per layer the attention module, and where its output holds the weights; None when unknown."""
        if self._sites is None:
            self._sites = _attention_modules(self.model, self.n_layers) or False
        return self._sites or None  # type: ignore[return-value]

    def _pinned(self) -> bool:
        """Whether batch results on the CPU are pinned: layers run on a CUDA device and copy into them."""
        return self.device.type == "cuda" or bool(getattr(self.model, "hf_device_map", None)) and \
            torch.cuda.is_available()

    def _run_hooked(self, ids: torch.Tensor, mask: torch.Tensor, modules: list[Any], index: int,
                    shape: tuple[int, ...], take: Callable[[int, torch.Tensor], None],
                    context: Any = contextlib.nullcontext()) -> bool:
        """Run the model on one batch (inside ``context``) with a forward hook on each kept layer's attention module
        that hands the layer's weights of ``shape`` ``(B, H, R, T)`` (kept heads selected) to ``take(k, weights)``
        and stops the pass after the last kept layer. False when a hook got no such weights."""
        captured: set[int] = set()

        def hook_for(k: int) -> Callable[..., None]:
            def hook(module: Any, args: Any, output: Any) -> None:
                weights = output[index] if isinstance(output, (tuple, list)) and len(output) > index else None
                if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != shape:
                    return
                if len(self.heads) != self.n_heads:
                    weights = weights.index_select(1, self._head_index.to(weights.device))  # (B, H', R, T)
                take(k, weights)
                captured.add(k)
                self._stop_after(k)
            return hook

        handles = [modules[layer].register_forward_hook(hook_for(k)) for k, layer in enumerate(self.layers)]
        try:
            with torch.inference_mode(), context:
                self.model(input_ids=ids, attention_mask=mask, **self._model_kwargs())
        except _Captured:
            pass  # every kept layer is pooled: the rest of the model is not run
        finally:
            for handle in handles:
                handle.remove()
        if len(captured) != len(self.layers):
            return False
        if self._pinned():
            torch.cuda.synchronize()  # the non-blocking copies into the pinned results are done
        return True

    def _forward_hooked(self, ids: torch.Tensor, mask: torch.Tensor, alignments: list[Alignment],
                        modules: list[Any], index: int
                        ) -> _Forward | None:
        """One batch, each kept layer pooled by a hook as the model computes it; None when a hook got no weights."""
        batch, n_tok = ids.shape
        pooler = BatchPooler(alignments, n_tok, self.from_pool)
        out = torch.empty((batch, len(self.layers), len(self.heads), pooler.n_pos, pooler.n_pos),
                          dtype=torch.float32, pin_memory=self._pinned())  # (B, L', H', n, n) on the CPU
        tokens: list[npt.NDArray[np.float32] | None] = [None] * len(self.layers)  # L' x (B, H', T, T)

        def take(k: int, weights: torch.Tensor) -> None:
            pooler.pool(weights, out=out[:, k])  # on the layer's device, then to the CPU
            if self.keep_tokens:
                tokens[k] = weights.float().cpu().numpy()

        if not self._run_hooked(ids, mask, modules, index, (batch, self.n_heads, n_tok, n_tok), take):
            return None
        return out.numpy(), self._token_maps(tokens, alignments), None

    def _asked_tokens(self, alignments: list[Alignment], rows: Sequence[npt.NDArray[np.intp] | None] | None
                      ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """``(tokens, targets)``, each ``(B, R)``: the token rows to compute for the words asked for (all of a
        word's tokens for ``mean``, its first for ``first``) and the position each belongs to (padding: token 0
        into the dump position ``n``); None when the batch needs full maps."""
        if (rows is None or not self.selective or self._rows_ok is False or self.keep_tokens
                or self.from_pool == "max" or any(r is None for r in rows)):
            return None
        n_pos = max(al.n_positions for al in alignments)
        chosen: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]] = []
        for al, words in zip(alignments, rows):
            wanted = np.zeros(al.n_positions, dtype=bool)
            wanted[np.flatnonzero(~al.is_special)[words]] = True  # type: ignore[index]
            position = al.token_position  # (T_b,)
            keep = wanted[position]
            if self.from_pool == "first":
                keep[1:] &= position[1:] != position[:-1]
            tokens = np.flatnonzero(keep)
            chosen.append((tokens, position[tokens]))
        width = max(1, max(t.shape[0] for t, _ in chosen))
        tokens = np.zeros((len(alignments), width), dtype=np.int64)  # (B, R)
        targets = np.full((len(alignments), width), n_pos, dtype=np.int64)  # (B, R)
        for b, (tok, pos) in enumerate(chosen):
            tokens[b, : tok.shape[0]], targets[b, : pos.shape[0]] = tok, pos
        return tokens, targets

    def _stop_after(self, k: int) -> None:
        """Stop the forward pass (:class:`_Captured`) once the hook of kept layer ``k`` has pooled it, if it is the
        last kept layer the model runs: nothing after its attention is needed (the rest of that layer, the layers
        above, the pooler). Not for a model dispatched by accelerate, whose hooks must see each module finish."""
        if self.layers[k] == max(self.layers) and not getattr(self.model, "hf_device_map", None):
            raise _Captured

    def _forward_rows(self, ids: torch.Tensor, mask: torch.Tensor, alignments: list[Alignment],
                      asked: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]], modules: list[Any], index: int
                      ) -> _Forward | None:
        """One batch with rows-only attention (:mod:`probes.extraction.rows`): each kept layer's rows asked for
        pooled by a hook into ``(B, L', H', P, n)``. None (and full maps from here on) when the model cannot."""
        if not self._switch(row_attention.IMPLEMENTATION):
            return None
        batch, n_tok = ids.shape
        tokens = torch.from_numpy(asked[0]).to(ids.device)  # (B, R)
        targets = torch.from_numpy(asked[1])  # (B, R)
        pooler = BatchPooler(alignments, n_tok, self.from_pool)
        held = pooler.row_positions(targets)  # B x (P_b,)
        width = max(1, max(len(p) for p in held))
        out = torch.empty((batch, len(self.layers), len(self.heads), width, pooler.n_pos),
                          dtype=torch.float32, pin_memory=self._pinned())  # (B, L', H', P, n) on the CPU

        def take(k: int, weights: torch.Tensor) -> None:
            pooler.pool_rows(weights, targets, out=out[:, k])

        try:
            done = self._run_hooked(ids, mask, modules, index, (batch, self.n_heads, tokens.shape[1], n_tok), take,
                                    row_attention.asking(tokens))
        except row_attention.RowsUnsupported as exc:
            log.debug("rows-only attention: %s; computing full maps with eager attention", exc)
            self._rows_ok = False
            return None
        finally:
            self._switch("eager")  # whoever uses the model next (gradients, interventions) finds it as loaded
        if not done:
            log.debug("rows-only attention: the hooks got no rows; computing full maps with eager attention")
            self._rows_ok = False
            return None
        self._rows_ok = True
        return out.numpy(), [None] * len(alignments), held

    def _forward_all_layers(self, ids: torch.Tensor, mask: torch.Tensor, alignments: list[Alignment]
                            ) -> _Forward:
        """One batch with ``output_attentions=True``: every layer's token attention at once (the fallback)."""
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, output_attentions=True, **self._model_kwargs())
            maps = getattr(out, "attentions", None)
            if maps is None or len(maps) != self.n_layers or any(m is None for m in maps):
                found = "None" if maps is None else f"{len(maps)} layers"
                raise ModelOutputError(
                    f"{type(self.model).__name__} returned no attention weights (expected {self.n_layers} "
                    f"layers, found {found}); load the model with attn_implementation='eager' (SDPA and "
                    "flash attention kernels never return weights)")
            selected = [maps[layer] for layer in self.layers]  # L' x (B, H, T, T)
            if len(self.heads) != self.n_heads:
                selected = [attn.index_select(1, self._head_index.to(attn.device)) for attn in selected]
            pooled = pool_batch(selected, alignments, self.from_pool).cpu().numpy()  # (B, L', H', n, n)
            if not self.keep_tokens:
                return pooled, [None] * len(alignments), None
            layers = [attn.float().cpu().numpy() for attn in selected]  # L' x (B, H', T, T), on the CPU
            return pooled, self._token_maps(layers, alignments), None

    def _token_maps(self, layers: Sequence[npt.NDArray[np.float32] | None], alignments: list[Alignment]
                    ) -> list[npt.NDArray[np.float32] | None]:
        """Each input's token maps ``(L', H', T_b, T_b)`` from the batch's ``L' x (B, H', T, T)`` (Nones if not
        kept)."""
        if not self.keep_tokens:
            return [None] * len(alignments)
        return [np.stack([maps[b, :, : al.n_tokens, : al.n_tokens] for maps in layers])  # type: ignore[index]
                for b, al in enumerate(alignments)]

    def _assemble(self, jobs: list[_Job], n_words: int) -> WordAttention:
        """One item's WordAttention from its job (or from its windows, by the module's rule)."""
        first = jobs[0]
        if len(jobs) == 1 and first.start == 0 and first.alignment.n_words == n_words:
            meta = {"n_tokens": first.alignment.n_tokens, "truncated": 0}
            tokens = None if first.tokens is None else self._token_attention(first.alignment, first.tokens)
            return self._word_attention(first.result, first.row_positions, first.alignment.is_special, meta, tokens)
        if len(jobs) == 1:  # truncated
            meta = {"n_tokens": first.alignment.n_tokens, "truncated": n_words - first.alignment.n_words}
            return self._word_attention(first.result, first.row_positions, first.alignment.is_special, meta)
        return self._combine_windows(jobs, n_words)

    def _word_attention(self, maps: npt.NDArray[np.float32], positions: npt.NDArray[np.intp] | None,
                        is_special: npt.NDArray[np.bool_], meta: dict[str, Any],
                        tokens: TokenAttention | None = None) -> WordAttention:
        """A WordAttention of full maps, or (``positions`` given) of the rows of ``positions`` alone, its
        ``weights`` then a read-only all-NaN view (nothing computed there)."""
        if positions is None:
            return WordAttention(maps, is_special, self.layers, self.heads, meta, tokens)
        n = is_special.shape[0]
        nothing = np.broadcast_to(np.float32(np.nan), (len(self.layers), len(self.heads), n, n))
        return WordAttention(nothing, is_special, self.layers, self.heads, meta, tokens, maps, positions)

    def _token_attention(self, alignment: Alignment, maps: npt.NDArray[np.float32]) -> TokenAttention:
        """The token-level view of one whole input: its maps with token strings, words and specials."""
        special_position = alignment.is_special  # (n,)
        word_of_position = np.cumsum(~special_position) - 1  # (n,)
        position = alignment.token_position  # (T,)
        special = special_position[position]  # (T,)
        word_of = np.where(special, -1, word_of_position[position]).astype(np.intp)  # (T,)
        first_word = int(np.argmax(~special)) if (~special).any() else special.shape[0]
        start = special & (np.arange(special.shape[0]) < first_word)  # (T,)
        tokens = tuple(self.tokenizer.convert_ids_to_tokens(alignment.input_ids.tolist()))
        return TokenAttention(maps, tokens, word_of, start, special & ~start)

    def _combine_windows(self, jobs: list[_Job], n_words: int) -> WordAttention:
        lead = int(np.argmax(~jobs[0].alignment.is_special))  # leading specials
        trail = int(jobs[0].alignment.n_special_tokens) - lead
        n = lead + n_words + trail
        # rows only (some window ran so): each window's computed rows, as positions of its own (a window run
        # whole holds them all); the item keeps the rows it has, in position order, instead of full maps
        compact = any(job.row_positions is not None for job in jobs)
        jobs_rows = [np.arange(job.alignment.n_positions) if job.row_positions is None else job.row_positions
                     for job in jobs]
        taken: list[npt.NDArray[np.intp]] = []  # global positions of the rows kept, per window
        blocks: list[npt.NDArray[np.float32]] = []  # their rows (L', H', r, n)
        out = None if compact else np.zeros((len(self.layers), len(self.heads), n, n), dtype=np.float32)
        # Each word's row from the window where it is most central (ties: earlier window).
        best = np.full(n_words, -1)
        best_dist = np.full(n_words, np.inf)
        for k, job in enumerate(jobs):
            s, w = job.start, job.alignment.n_words
            dist = np.abs(np.arange(s, s + w) - (s + (w - 1) / 2))
            better = dist < best_dist[s : s + w]
            best[s : s + w][better] = k
            best_dist[s : s + w][better] = dist[better]
        for k, job in enumerate(jobs):
            s, w = job.start, job.alignment.n_words
            al = job.alignment
            if al.n_special_tokens != lead + trail or int(np.argmax(~al.is_special)) != lead:
                raise ModelOutputError("windows of one input got different special tokens; cannot combine them")
            local_to_global = np.concatenate([np.arange(lead), lead + s + np.arange(w),
                                              lead + n_words + np.arange(trail)])  # (n_k,)
            rows = np.flatnonzero(best[s : s + w] == k) + lead  # local word rows to take
            if k == 0:
                rows = np.concatenate([np.arange(lead), rows])
            if k == len(jobs) - 1:
                rows = np.concatenate([rows, lead + w + np.arange(trail)])
            if out is None:  # rows only: the rows this window computed, of those it is responsible for
                mine = jobs_rows[k]
                rows = rows[np.isin(rows, mine)]
                values = job.result[:, :, np.searchsorted(mine, rows), :]  # (L', H', r, n_k)
                if len(rows):
                    taken.append(local_to_global[rows])
                    block = np.zeros((*values.shape[:3], n), dtype=np.float32)  # (L', H', r, n)
                    block[..., local_to_global] = values
                    blocks.append(block)
                continue
            out[:, :, local_to_global[rows, None], local_to_global[None, :]] = job.result[:, :, rows, :]
        is_special = np.zeros(n, dtype=bool)
        is_special[:lead] = True
        is_special[lead + n_words :] = True
        meta = {"n_tokens": sum(j.alignment.n_tokens for j in jobs), "truncated": 0,
                "windows": [(j.start, j.start + j.alignment.n_words) for j in jobs]}
        if out is not None:
            return WordAttention(out, is_special, self.layers, self.heads, meta)
        positions = np.concatenate(taken) if taken else np.zeros(0, dtype=np.intp)
        order = np.argsort(positions, kind="stable")
        maps = np.concatenate(blocks, axis=2)[:, :, order] if blocks else \
            np.zeros((len(self.layers), len(self.heads), 0, n), dtype=np.float32)
        return self._word_attention(maps, positions[order].astype(np.intp), is_special, meta)
