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

Attention is captured layer by layer (:mod:`probes.extraction.capture`): a forward hook on each layer's
attention module pools that layer's ``(B, H, T, T)`` weights to words as soon as the model computes them (on
the layer's own device) and lets them go, so at most one layer of token attention is alive at a time. Models
whose attention modules hand no weights to a hook fall back to ``output_attentions=True`` (every layer at once).

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

The extractor is the stream; each job it delegates lives in its own module: the option checks
(:mod:`~probes.extraction.checks`: run once, at the boundary, into the :class:`ExtractorSettings` the extractor is
built from by :meth:`AttentionExtractor.from_settings` and :meth:`AttentionExtractor.load`), the memory budget
(:mod:`~probes.extraction.budget`), what to run for each input (:mod:`~probes.extraction.planning`: alignments,
skip / truncate / window), groups and batches (:mod:`~probes.extraction.batching`), forward passes and hooks (:mod:`~probes.extraction.capture`), rows-only
attention (:mod:`~probes.extraction.rows`), pooling to words (:mod:`~probes.extraction.align`), from results to
a WordAttention, windows put back together (:mod:`~probes.extraction.assemble`), and the pair stream and its
report (:mod:`~probes.extraction.outputs`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import torch

from probes.corpora.types import Sentence
from probes.errors import ConfigError
from probes.extraction import families
from probes.extraction.align import Alignment, check_tokenizer, words_as_text
from probes.extraction.assemble import combine_windows, single
from probes.extraction.attention import WordAttention
from probes.extraction.batching import batches, groups
from probes.extraction.budget import DEFAULT_ATTENTION_MB, Budget, out_of_memory
from probes.extraction.capture import Capture, Forward, force_eager
from probes.extraction.checks import DTYPES, ON_LONG, ExtractorSettings, check_device, check_index, check_options
from probes.extraction.gguf import gguf_source
from probes.extraction.loading import ResolvedModel, device_map_of, load_resolved, place_model, weights_sha256
from probes.extraction.outputs import ExtractionReport, PairStream
from probes.extraction.planning import Job, Planner, align, ask_rows, item_id
from probes.extraction.sources import check_source
from probes.progress import Bar
from probes.progress import bar as progress_bar

__all__ = ["AttentionExtractor", "ExtractionReport", "PairStream", "ExtractorSettings", "ON_LONG", "DTYPES",
           "DEFAULT_ATTENTION_MB", "check_options", "check_device"]

log = logging.getLogger("probes")

T = TypeVar("T")

#: What a forward pass raises when memory runs out: MemoryError on the CPU, torch's OutOfMemoryError on a GPU.
_OUT_OF_MEMORY = (MemoryError, getattr(torch, "OutOfMemoryError", getattr(torch.cuda, "OutOfMemoryError", MemoryError)))

#: Look-ahead of the length sort, in batches: more sorts better but holds more results.
_BUFFER_BATCHES = 16
#: ... and, once it holds a batch, at most this many word-level attention values (items x kept layers
#: x kept heads x n x n, n = words + 2; 128 MB of float32): 512-token document windows are then held
#: one batch at a time, not 16 batches (4.5 GB for MiniLM), while sentence buffers stay whole.
_BUFFER_ELEMENTS = 2**25


def _quiet_length_warning(tokenizer: Any) -> None:
    """Silence transformers' "Token indices sequence length is longer than ..." warning for ``tokenizer``.

    Over-long inputs are counted and named by the extractor's report (and so in every run's summary);
    transformers' own warning, shown once and without an id, would only be a second, vaguer mention.
    """
    flags = getattr(tokenizer, "deprecation_warnings", None)
    if isinstance(flags, dict):
        flags["sequence-length-is-longer-than-the-specified-maximum"] = True


def _progress(bar: Bar, advance: Callable[[Any], int] | None, buffer: Sequence[Any],
              jobs_of: Sequence[Sequence[Job]]) -> Callable[[Job], None]:
    """Move ``bar`` for ``buffer``'s items: the skipped ones (no job) now, each other one when its last job has
    run (the returned function, called per finished job); by ``advance(item)`` units (default 1)."""
    step = advance or (lambda item: 1)
    left = [len(jobs) for jobs in jobs_of]
    skipped = sum(step(item) for item, n in zip(buffer, left) if not n)
    if skipped:
        bar.update(skipped)

    def done(job: Job) -> None:
        left[job.item] -= 1
        if not left[job.item]:
            bar.update(step(buffer[job.item]))
    return done


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
        progress: show a progress bar on stderr (:mod:`probes.progress`: a bar in a terminal, plain lines in a log).
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
        source: what the maps hold (:data:`probes.extraction.sources.SOURCES`): ``weights`` (default), ``norm``,
            ``contribution`` or ``value-zeroing``, each row-normalised (:mod:`probes.extraction.sources`); a family
            whose block does not decompose is refused for the other sources.
    """

    #: Called with each job as its forward pass finishes (moves the progress bar); set while a group runs.
    _job_done: Callable[[Job], None] | None = None

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
        source: str = "weights",
    ) -> None:
        self._build(model, tokenizer, check_options(
            device=device, dtype=dtype, batch_size=batch_size, layers=layers, heads=heads, from_pool=from_pool,
            max_length=max_length, on_long=on_long, progress=progress, keep_tokens=keep_tokens,
            max_batch_tokens=max_batch_tokens, max_attention_mb=max_attention_mb, selective=selective,
            source=source))

    def _build(self, model: Any, tokenizer: Any, settings: ExtractorSettings) -> None:
        """Set the extractor up from checked ``settings``: the model placed, layers and heads checked against it."""
        check_tokenizer(tokenizer)
        words_as_text(tokenizer)  # a word spelling "[SEP]" or "<s>" is text, in every call below
        self.model = model
        self.tokenizer = tokenizer
        self.dtype = settings.dtype
        self.batch_size = settings.batch_size
        self.from_pool = settings.from_pool
        self.on_long = settings.on_long
        self.progress = settings.progress
        self.keep_tokens = settings.keep_tokens
        self.max_batch_tokens: int | None = settings.max_batch_tokens
        self.max_attention_mb: float | None = settings.max_attention_mb
        self.selective = settings.selective
        self.source = settings.source
        check_source(model, settings.source)
        self.name_or_path: str = str(getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", ""))
        self.revision: str | None = getattr(model.config, "_commit_hash", None)
        self._weights_hash: str | None = None
        force_eager(model)
        model.eval()
        self.device = place_model(model, settings.device, DTYPES[settings.dtype])  # a device-mapped model stays put
        self.n_layers: int = families.n_layers(model)
        self.n_heads: int = families.n_heads(model)
        self.layers: tuple[int, ...] = check_index("layers", settings.layers, self.n_layers)
        self.heads: tuple[int, ...] = check_index("heads", settings.heads, self.n_heads)
        self._is_decoder = families.is_decoder(model)
        self.max_tokens = self._max_tokens(tokenizer, model, settings.max_length)
        self.report = ExtractionReport(max_tokens=self.max_tokens, max_attention_mb=self.max_attention_mb)
        self._capture = Capture(model, tokenizer, self.device, layers=self.layers, heads=self.heads,
                                n_layers=self.n_layers, n_heads=self.n_heads, from_pool=settings.from_pool,
                                is_decoder=self._is_decoder, selective=self.selective, source=settings.source)

    @staticmethod
    def _max_tokens(tokenizer: Any, model: Any, max_length: int | None) -> int:
        """Most tokens per input: ``max_length``, else the model's maximum (512 when it names none).

        Raises:
            ConfigError: ``max_length`` over the model's maximum, or leaving no room for words after the specials.
        """
        limits = families.position_limits(tokenizer, model)
        max_tokens = max_length if max_length is not None else (min(limits) if limits else 512)
        if max_length is not None and limits and max_length > min(limits):
            raise ConfigError(f"max_length {max_length} is over the model's maximum of {min(limits)} tokens")
        n_special = len(tokenizer(["a"], is_split_into_words=True)["input_ids"]) - \
            len(tokenizer(["a"], is_split_into_words=True, add_special_tokens=False)["input_ids"])
        if max_tokens <= n_special:
            raise ConfigError(f"max_length must leave room for words after the {n_special} special tokens, "
                              f"found {max_tokens}")
        return max_tokens

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_settings(cls, model: Any, tokenizer: Any, settings: ExtractorSettings) -> AttentionExtractor:
        """An extractor of a loaded ``model`` and ``tokenizer`` with ``settings`` checked already
        (:func:`~probes.extraction.checks.check_options`): the constructor without its check."""
        extractor = cls.__new__(cls)
        extractor._build(model, tokenizer, settings)
        return extractor

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, *, revision: str | None = None,
                        device_map: str | dict[str, Any] | None = None, **options: Any) -> AttentionExtractor:
        """Load model and tokenizer from a hub name, a local folder or ``package:NAME``.

        Loading is :func:`probes.extraction.loading.load_pretrained`: eager attention, and
        ``add_prefix_space=True`` for byte-level BPE tokenizers (RoBERTa, GPT-2 ...) so pre-split
        words are tokenized as in running text.

        ``device_map`` (``"auto"``, ``"balanced"``, a dict of module name -> device; needs accelerate:
        ``pip install "probes-attention[gpu]"``) spreads a model too large for one GPU over several (or the CPU, or
        ``"disk"``); it is placed once, at loading, and never moved: inputs go to the device of its input
        embeddings, and ``device`` must then be left out.

        The options (the constructor's) are checked once, before the model loads, and the name resolved once;
        then :meth:`load`.

        Raises:
            ConfigError: a bad option, ``device`` given with ``device_map``, or accelerate missing.
        """
        settings = check_options(device_map=device_map, **options)  # before the model loads
        return cls.load(ResolvedModel.of(name_or_path, revision), settings, revision=revision)

    @classmethod
    def load(cls, model: ResolvedModel, settings: ExtractorSettings, *, revision: str | None = None
             ) -> AttentionExtractor:
        """Load a resolved ``model`` (:meth:`ResolvedModel.of`) and build its extractor with checked ``settings``;
        nothing is checked or resolved again."""
        net, tokenizer, name = load_resolved(model, revision=revision, dtype=DTYPES[settings.dtype],
                                             progress=settings.progress, device_map=settings.device_map)
        extractor = cls.from_settings(net, tokenizer, settings)
        extractor.name_or_path = name
        extractor.revision = revision or getattr(net.config, "_commit_hash", None)
        return extractor

    # ------------------------------------------------------------------ facts
    def info(self) -> dict[str, Any]:
        """Model, revision or weights hash, tokenizer and options: what a store records."""
        import transformers

        from probes._version import __version__

        if self._weights_hash is None and self.name_or_path and Path(self.name_or_path).is_dir():
            self._weights_hash = weights_sha256(self.name_or_path)
        source = gguf_source(self.name_or_path) if self.name_or_path else None  # a folder converted from a GGUF file
        return {
            "model": self.name_or_path,
            "model_class": type(self.model).__name__,
            "model_type": getattr(self.model.config, "model_type", None),
            "causal": self._is_decoder,  # a decoder: each token attends to itself and earlier tokens only
            "revision": self.revision,
            "weights_sha256": self._weights_hash,
            **({"weights_source": source} if source else {}),
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
            "attention_source": self.source,  # what the maps hold (probes.extraction.sources)
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
    def _budget(self) -> Budget:
        """The budget arithmetic of the options as they are now (``keep_tokens`` may change after construction)."""
        return Budget(n_heads=self.n_heads, n_kept=len(self.layers) * len(self.heads),
                      keep_tokens=self.keep_tokens, max_attention_mb=self.max_attention_mb)

    def max_queue_bytes(self) -> int | None:
        """The other half of the budget, in bytes: what a consumer's queue may hold of this extractor's pairs."""
        return self._budget().queue_bytes()

    def budget_tokens(self) -> int:
        """The longest input (tokens, specials included) this extractor runs whole: at most ``max_tokens``,
        and such that its attention fits the budget whatever its words (``n <= T`` positions)."""
        return self._budget().tokens(self.max_tokens)

    # ------------------------------------------------------------------ what the capture learnt of the model
    @property
    def _sites(self) -> tuple[list[Any], int] | bool | None:
        """The attention modules and the index of the weights in their output (False: hooks get none; None: not
        looked for yet); settable, e.g. to False for the ``output_attentions=True`` path."""
        return self._capture.sites

    @_sites.setter
    def _sites(self, value: tuple[list[Any], int] | bool | None) -> None:
        self._capture.sites = value

    @property
    def _rows_ok(self) -> bool | None:
        """Whether rows-only attention works for this model (None: not tried)."""
        return self._capture.rows_ok

    def _attention_sites(self) -> tuple[list[Any], int] | None:
        """Per layer the attention module, and where its output holds the weights; None when unknown."""
        return self._capture.attention_sites()

    # ------------------------------------------------------------------ token ids
    def token_maps(self, input_ids: Sequence[Sequence[int]]) -> list[npt.NDArray[np.float32]]:
        """The token maps ``(L', H', T, T)`` of each input given as token ids (specials included, as the model
        sees them), in ``batch_size`` batches: for synthetic inputs that are not words (head types on random
        token sequences, :mod:`probes.analysis.head_types`). Each token is its own position; nothing is pooled."""
        alignments = []
        for ids in input_ids:
            n = len(ids)
            if not 0 < n <= self.max_tokens:
                raise ConfigError(f"token ids: expected 1 to {self.max_tokens} tokens per input, found {n}")
            alignments.append(Alignment(input_ids=np.asarray(ids, dtype=np.int64), token_position=np.arange(n),
                                        is_special=np.zeros(n, dtype=bool), word_tokens=np.ones(n, dtype=np.intp)))
        out: list[npt.NDArray[np.float32]] = []
        for start in range(0, len(alignments), self.batch_size):
            _, maps, _ = self._capture.forward(alignments[start: start + self.batch_size], keep_tokens=True)
            out += [np.asarray(m, dtype=np.float32) for m in maps]
        return out

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
        """The generator behind :meth:`iter_words`: fill bounded buffers, run each, close the progress bar."""
        _quiet_length_warning(self.tokenizer)  # over-long inputs are reported by ``self.report``, not transformers
        if total is None and hasattr(items, "__len__"):
            total = len(items)  # type: ignore[arg-type]  # hasattr does not narrow an Iterable to Sized
        bar = progress_bar(desc, total=total, unit=unit, progress=self.progress)
        buffer: list[T] = []
        size, per_pair, held = _BUFFER_BATCHES * self.batch_size, len(self.layers) * len(self.heads), 0
        try:
            for item in items:
                buffer.append(item)
                held += per_pair * (len(words(item)) + 2) ** 2
                if len(buffer) >= size or (held >= _BUFFER_ELEMENTS and len(buffer) >= self.batch_size):
                    yield from self._run_buffer(buffer, words, bar, rows, advance)
                    buffer, held = [], 0
            if buffer:
                yield from self._run_buffer(buffer, words, bar, rows, advance)
        finally:
            bar.close()
            if self.report.skipped or self.report.truncated or self.report.windowed:
                log.info("attention extraction: %s", self.report.summary())

    def _run_buffer(self, buffer: list[T], words: Callable[[T], Sequence[str]], bar: Bar,
                    rows: Callable[[T], Sequence[int] | None] | None = None,
                    advance: Callable[[T], int] | None = None) -> Iterator[tuple[T, WordAttention]]:
        """Run one buffer (planned, then in groups that fit the budget) and yield its pairs in input order.

        The bar moves as each forward pass finishes items (:func:`_progress`), not when they are yielded: a buffer
        is many batches, and a bar still at 0 after them would show no rate, then a wild ETA."""
        word_lists = [list(words(item)) for item in buffer]
        budget = self._budget()
        jobs_of = Planner(self.tokenizer, self.max_tokens, self.on_long, budget, self.report).plan(buffer, word_lists)
        done = _progress(bar, advance, buffer, jobs_of)
        if rows is not None and self.selective and self._rows_ok is not False:
            first = self.report.n_items - len(buffer)  # the planner has counted the buffer
            for index, item_jobs in enumerate(jobs_of):
                ask_rows(item_jobs, rows(buffer[index]), len(word_lists[index]), item_id(buffer[index], first + index))
        for group, held in groups(jobs_of, budget):
            jobs = [job for index in group for job in jobs_of[index]]
            self._job_done = done
            try:
                self._run_jobs(jobs, budget.share() - held)
            finally:
                self._job_done = None
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

    def _run_jobs(self, jobs: list[Job], room: float = float("inf")) -> None:
        """Run ``jobs`` in batches with at most ``room`` values in flight; each job gets its result."""
        for batch in batches(jobs, self._budget(), batch_size=self.batch_size, n_layers=self.n_layers,
                             n_heads=self.n_heads, max_batch_tokens=self.max_batch_tokens, room=room):
            try:
                pooled, token_maps, held = self._forward([job.alignment for job in batch],
                                                         [job.rows for job in batch])  # (B, L', H', n or P, n)
            except _OUT_OF_MEMORY as exc:  # one line naming the inputs, not "internal error (MemoryError)"
                longest = sorted(batch, key=lambda job: -job.alignment.n_tokens)  # the likeliest cause first
                raise out_of_memory([job.name or f"#{job.item}" for job in longest], longest[0].alignment.n_tokens,
                                    self.max_attention_mb, exc) from exc
            for b, (job, weights, maps) in enumerate(zip(batch, pooled, token_maps)):
                n = job.alignment.n_positions
                if held is None:
                    job.result = np.ascontiguousarray(weights[:, :, :n, :n])
                else:  # rows only: (L', H', P_b, n)
                    job.row_positions = held[b]
                    job.result = np.ascontiguousarray(weights[:, :, : len(held[b]), :n])
                job.tokens = maps
                if self._job_done is not None:
                    self._job_done(job)

    def _forward(self, alignments: list[Alignment], rows: Sequence[npt.NDArray[np.intp] | None] | None = None
                 ) -> Forward:
        """One batch through :meth:`Capture.forward <probes.extraction.capture.Capture.forward>`; a batch run
        rows-only is counted in ``report.n_rows_only``."""
        got = self._capture.forward(alignments, rows, keep_tokens=self.keep_tokens)
        if got[2] is not None:
            self.report.n_rows_only += len(alignments)
        return got

    def _align(self, word_lists: list[list[str]], items: list[Any], offset: int = 0) -> list[Alignment]:
        """The alignments of ``word_lists`` (:func:`probes.extraction.planning.align`)."""
        return align(self.tokenizer, word_lists, items, offset)

    def _assemble(self, jobs: list[Job], n_words: int) -> WordAttention:
        """One item's WordAttention from its job (or from its windows, by the module's rule)."""
        if len(jobs) == 1:
            return single(jobs[0], n_words, self.layers, self.heads, self.tokenizer)
        return self._combine_windows(jobs, n_words)

    def _combine_windows(self, jobs: list[Job], n_words: int) -> WordAttention:
        """One windowed item's WordAttention (:func:`probes.extraction.assemble.combine_windows`)."""
        return combine_windows(jobs, n_words, self.layers, self.heads)
