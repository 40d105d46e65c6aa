"""One streaming pass: every analysis sees every ``(item, WordAttention)`` pair once.

:func:`stream` is the only loop over attention in the package. It runs the producer
(the model, or a store) in a worker thread and the analyses in the calling thread,
through a bounded queue, so analysis overlaps extraction (torch and numpy release the
GIL in their kernels). Rules, stated once:

* **Partial inputs.** An item whose attention does not cover all its words (the extractor
  cut it: ``meta["truncated"] > 0``) is fed to no analysis. It is counted and named by id
  in :attr:`StreamResult.skipped`, and one :class:`~probes.errors.SkippedItemWarning` says
  how many. Every analysis therefore sees the same items (paired intervals between
  analyses stay paired). Items the extractor ran in windows (``--on-long window``) have a
  row for every word and are analysed; the extractor's report names them.
* **Failures.** An exception raised by the producer is re-raised in the caller with its
  traceback. When the caller fails (an analysis raises, or KeyboardInterrupt), the
  producer is told to stop feeding and closes its iterator; it is a daemon thread, so
  it never keeps the interpreter alive.
"""

from __future__ import annotations

import queue
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from probes.analysis.base import Analysis, item_id, partial_reason
from probes.analysis.offload import Offloaded
from probes.analysis.split import Half
from probes.errors import ConfigError, SkippedItemWarning
from probes.extraction.attention import WordAttention
from probes.results import Result
from probes.world import World, merge_analyses

__all__ = ["StreamResult", "stream", "partial_reason", "item_id", "QUEUE_PAIRS"]

#: Pairs in flight between the producer thread and the analyses (bounds memory).
QUEUE_PAIRS = 256
#: ... and at most this many bytes of their attention maps, unless the pairs say (``max_queue_bytes``).
QUEUE_BYTES = 2**28
#: Seconds the producer waits on a full queue before checking whether it should stop.
_POLL_S = 0.1

_DONE = object()


@dataclass(frozen=True)
class StreamResult(Result):
    """What one pass produced, and where the time went.

    Extraction and analysis overlap, so the times overlap too: ``analysis_s`` is only the
    time analysis added after the last pair arrived (the tail, plus every ``compute``).

    Attributes:
        results: each analysis' result, by the name it was given in ``analyses``.
        n_items: pairs received from the producer (skipped ones included).
        skipped: ``(item_id, reason)`` of each item fed to no analysis, in input order;
            reason: ``truncated``.
        extraction_s: wall time until the last pair arrived (model or store).
        analysis_s: wall time analysis added after that.
        analysis_busy_s: time spent inside the analyses (``update`` and ``compute``).
    """

    results: dict[str, Any]  # Any: each analysis' own result type (a user's analysis returns what it likes)
    n_items: int
    skipped: tuple[tuple[str, str], ...] = ()
    extraction_s: float = 0.0
    analysis_s: float = 0.0
    analysis_busy_s: float = 0.0

    def __getitem__(self, name: str) -> Any:
        """The result of the analysis called ``name``."""
        return self.results[name]


class _Producer:
    """Worker thread that puts every pair (then ``_DONE``, or the exception raised) on a bounded queue.

    The queue holds at most ``QUEUE_PAIRS`` pairs and at most ``max_bytes`` bytes of their attention maps:
    the pairs' own ``max_queue_bytes`` (an extractor's share of its ``max_attention_mb``), else
    ``QUEUE_BYTES``. A pair larger than the bound still goes through, alone, so nothing stalls.
    """

    def __init__(self, pairs: Iterable[tuple[Any, WordAttention]]) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_PAIRS)
        bound = getattr(pairs, "max_queue_bytes", None)
        self.max_bytes: int = QUEUE_BYTES if bound is None else int(bound)
        self.bytes = 0  # bytes of attention in the queue
        self.peak_bytes = 0  # the most it held
        self._room = threading.Condition()
        self.stop = threading.Event()
        self.finished: float | None = None
        self._pairs = pairs
        self.thread = threading.Thread(target=self._run, name="probes-extract", daemon=True)

    def _release(self, size: int) -> None:
        with self._room:
            self.bytes -= size
            self._room.notify_all()

    def _put(self, value: Any) -> bool:
        """Put ``value``, waiting while the queue is full (count or bytes); False when told to stop meanwhile."""
        size = _nbytes(value)
        while not self.stop.is_set():
            with self._room:
                if self.bytes and self.bytes + size > self.max_bytes:
                    self._room.wait(_POLL_S)
                    continue
                self.bytes += size
                self.peak_bytes = max(self.peak_bytes, self.bytes)
            try:
                self.queue.put((value, size), timeout=_POLL_S)
                return True
            except queue.Full:
                self._release(size)
        return False

    def _run(self) -> None:
        iterator = iter(self._pairs)
        try:
            for pair in iterator:
                if not self._put(pair):
                    break
        except BaseException as exc:  # handed to the consumer, which re-raises it
            self._put(exc)
        finally:
            self.finished = time.perf_counter()
            close = getattr(iterator, "close", None)
            if self.stop.is_set() and close is not None:
                close()  # runs the producer's own clean-up (progress bar, files)
            self._put(_DONE)

    def __iter__(self) -> Iterator[tuple[Any, WordAttention]]:
        self.thread.start()
        while True:
            value, size = self.queue.get()
            self._release(size)
            if value is _DONE:
                return
            if isinstance(value, BaseException):
                raise value
            yield value


def _nbytes(value: Any) -> int:
    """Bytes of the attention maps of a pair ``(item, WordAttention)`` (word maps, and token maps if kept); 0 else."""
    attention = value[1] if isinstance(value, tuple) and len(value) == 2 else None
    if not isinstance(attention, WordAttention):
        return 0
    tokens = attention.tokens
    maps = attention.weights if attention.row_weights is None else attention.row_weights  # rows only: the rows held
    return int(maps.nbytes) + (0 if tokens is None else int(tokens.weights.nbytes))


def stream(pairs: Iterable[tuple[Any, WordAttention]], analyses: Mapping[str, Analysis], *,
           overlap: bool = True, world: World | None = None) -> StreamResult:
    """Feed every ``(item, word_attention)`` pair to every analysis, in one pass, then compute them.

    Args:
        pairs: the stream, e.g. :meth:`AttentionExtractor.iter_sentences` or a store (in a distributed
            run: this rank's contiguous block of the inputs, see :meth:`probes.world.World.take`).
        analyses: the analyses by name (fresh or already holding other shards' state).
        overlap: run the producer in a worker thread (False: in this thread, for debugging).
        world: the ranks of a distributed run (None: this process alone). After the loop every rank's
            analyses are merged in rank order (:func:`~probes.world.merge_analyses`), ``skipped`` is
            concatenated and ``n_items`` summed, so every rank computes the results one process would have
            on the concatenated blocks, and the given analyses hold that merged state afterwards.

    Returns:
        A :class:`StreamResult` with each analysis' ``compute()`` by name.
    """
    if world is not None and world.distributed:
        _check_mergeable(analyses)  # before any work
    producer = _Producer(pairs) if overlap else None
    feed: Iterable[tuple[Any, WordAttention]] = pairs if producer is None else producer
    skipped: list[tuple[str, str]] = []
    busy, n_items = 0.0, 0
    start = time.perf_counter()
    try:
        for item, attention in feed:
            t0 = time.perf_counter()
            reason = partial_reason(attention)
            if reason is None:
                for analysis in analyses.values():
                    analysis.update(item, attention)
            else:
                skipped.append((item_id(item, n_items), reason))
            n_items += 1
            busy += time.perf_counter() - t0
    finally:
        if producer is not None:
            producer.stop.set()  # done, or failed (KeyboardInterrupt included): stop feeding
    arrived = time.perf_counter()
    finished = producer.finished if producer is not None and producer.finished is not None else arrived
    if world is not None and world.distributed:
        n_items, skipped = _merge_ranks(analyses, n_items, skipped, world)
    if skipped and (world is None or world.is_main):
        names = ", ".join(i for i, _ in skipped[:5]) + (" ..." if len(skipped) > 5 else "")
        warnings.warn(f"{len(skipped)} of {n_items} items only partly covered by attention "
                      f"(truncated by the extractor) were not analysed: {names}", SkippedItemWarning, stacklevel=2)
    results = {name: analysis.compute() for name, analysis in analyses.items()}
    end = time.perf_counter()
    busy += end - arrived
    return StreamResult(results, n_items, tuple(skipped), finished - start, end - finished, busy)


# ---------------------------------------------------------------------------------- distributed runs
def _portable(analyses: Mapping[str, Any]) -> dict[str, Any]:
    """The analyses as picklable, mergeable objects by name: buffers flushed, and an :class:`Offloaded`
    replaced by the analyses it holds (``NAME/INNER``), once its child process has handed their state back."""
    out: dict[str, Any] = {}
    for name, analysis in analyses.items():
        if isinstance(analysis, Offloaded):
            analysis.compute()  # ends the child; its state is merged into analysis.analyses
            analysis.close()
            out.update({f"{name}/{inner}": _flushed(a) for inner, a in analysis.analyses.items()})
        else:
            out[name] = _flushed(analysis)
    return out


def _check_mergeable(analyses: Mapping[str, Any]) -> None:
    """ConfigError for an :class:`Offloaded` wrapped in another analysis (its child's state cannot be fetched)."""
    for name, analysis in analyses.items():
        inner = getattr(analysis, "inner", None)
        if isinstance(inner, Offloaded) or (isinstance(analysis, Offloaded) and any(
                isinstance(getattr(a, "inner", a), Offloaded) for a in analysis.analyses.values())):
            raise ConfigError(f"analysis {name!r}: an Offloaded analysis cannot run inside another one in a "
                              "distributed run; give it to the pass by name instead")


def _flushed(analysis: Any) -> Any:
    """``analysis`` with its pending buffers folded into its state (``_flush``; the analysis a Half wraps too)."""
    target = analysis.inner if isinstance(analysis, Half) else analysis
    flush = getattr(target, "_flush", None)
    if flush is not None:
        flush()
    return analysis


def _adopt(local: Any, merged: Any) -> None:
    """Give ``local`` the merged state of every rank (in rank order), through the contract's reset and merge."""
    local.reset()
    local.merge(merged)


def _merge_ranks(analyses: Mapping[str, Any], n_items: int, skipped: list[tuple[str, str]], world: World
                 ) -> tuple[int, list[tuple[str, str]]]:
    """Merge every rank's analyses into ``analyses`` (rank order); the total of ``n_items`` and every rank's
    ``skipped`` in rank order (the input order, since ranks hold contiguous blocks)."""
    portable = _portable(analyses)
    merged = merge_analyses(portable, world)
    for name, analysis in analyses.items():
        if isinstance(analysis, Offloaded):
            for inner, local in analysis.analyses.items():
                _adopt(local, merged[f"{name}/{inner}"])
        else:
            _adopt(analysis, merged[name])
    counts = world.gather((n_items, skipped))
    return sum(n for n, _ in counts), [s for _, rank_skipped in counts for s in rank_skipped]
