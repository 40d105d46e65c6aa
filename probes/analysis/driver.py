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
from probes.errors import SkippedItemWarning
from probes.extraction.attention import WordAttention
from probes.results import Result

__all__ = ["StreamResult", "stream", "partial_reason", "item_id", "QUEUE_PAIRS"]

#: Pairs in flight between the producer thread and the analyses (bounds memory).
QUEUE_PAIRS = 256
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

    results: dict[str, Any]
    n_items: int
    skipped: tuple[tuple[str, str], ...] = ()
    extraction_s: float = 0.0
    analysis_s: float = 0.0
    analysis_busy_s: float = 0.0

    def __getitem__(self, name: str) -> Any:
        """The result of the analysis called ``name``."""
        return self.results[name]


class _Producer:
    """Worker thread that puts every pair (then ``_DONE``, or the exception raised) on a bounded queue."""

    def __init__(self, pairs: Iterable[tuple[Any, WordAttention]]) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_PAIRS)
        self.stop = threading.Event()
        self.finished: float | None = None
        self._pairs = pairs
        self.thread = threading.Thread(target=self._run, name="probes-extract", daemon=True)

    def _put(self, value: Any) -> bool:
        """Put ``value``, waiting while the queue is full; False when told to stop meanwhile."""
        while not self.stop.is_set():
            try:
                self.queue.put(value, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
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
            value = self.queue.get()
            if value is _DONE:
                return
            if isinstance(value, BaseException):
                raise value
            yield value


def stream(pairs: Iterable[tuple[Any, WordAttention]], analyses: Mapping[str, Analysis], *,
           overlap: bool = True) -> StreamResult:
    """Feed every ``(item, word_attention)`` pair to every analysis, in one pass, then compute them.

    Args:
        pairs: the stream, e.g. :meth:`AttentionExtractor.iter_sentences` or a store.
        analyses: the analyses by name (fresh or already holding other shards' state).
        overlap: run the producer in a worker thread (False: in this thread, for debugging).

    Returns:
        A :class:`StreamResult` with each analysis' ``compute()`` by name.
    """
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
    if skipped:
        names = ", ".join(i for i, _ in skipped[:5]) + (" ..." if len(skipped) > 5 else "")
        warnings.warn(f"{len(skipped)} of {n_items} items only partly covered by attention "
                      f"(truncated by the extractor) were not analysed: {names}", SkippedItemWarning, stacklevel=2)
    results = {name: analysis.compute() for name, analysis in analyses.items()}
    end = time.perf_counter()
    busy += end - arrived
    return StreamResult(results, n_items, tuple(skipped), finished - start, end - finished, busy)
