"""Run analyses in a child process, so that they do not compete with the model for Python's interpreter lock.

:func:`~probes.analysis.driver.stream` overlaps analysis with extraction in two threads of one process.
That works while the analyses are light; token-level analyses (the head atlas: surface statistics,
roles, patterns, head distances) do several milliseconds of small numpy operations per sentence, and
in one process every one of them waits for, and holds up, the interpreter lock the model's own Python
code needs. :class:`Offloaded` is one analysis that holds others and runs them in a child process
(``spawn``: a fresh interpreter, safe beside torch's threads on every platform): ``update`` sends the
pairs in chunks through a bounded queue, ``compute`` sends the end mark and receives the analyses
back with their state, and merges that state into its own copies (the contract's ``merge``), so
``compute()`` returns each analysis' result as if it had run here.

Failures: an exception in the child comes back and is raised by ``compute`` (or by the next ``update``
that finds it), with the child's traceback text; when the parent stops early (an error elsewhere,
Ctrl-C), :meth:`Offloaded.close` (also called on garbage collection) ends the child.
"""

from __future__ import annotations

import contextlib
import copy
import multiprocessing
import queue
import sys
import traceback
import types
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

from probes.analysis.base import Analysis
from probes.errors import ConfigError, ProbesError
from probes.extraction.attention import WordAttention

__all__ = ["Offloaded", "OffloadError", "CHUNK_PAIRS"]

#: Pairs sent to the child per message (fewer messages, less locking) ...
CHUNK_PAIRS = 32
#: ... and chunks in flight (bounds the memory held in the pipe).
_QUEUE_CHUNKS = 8
#: Seconds between checks that the child is still alive while waiting for it.
_POLL_S = 0.5


class OffloadError(ProbesError, RuntimeError):
    """An analysis failed in the child process (the message holds its traceback)."""


@contextlib.contextmanager
def _without_main() -> Iterator[None]:
    """Hide the parent's ``__main__`` while a spawned child starts, so the child does not import it.

    A spawned child normally re-imports the parent's main script; a script without an
    ``if __name__ == "__main__":`` guard (a user's analysis script) would then run again in the
    child. The child here needs nothing from it: its target and the analyses live in the package.
    """
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _child(analyses: dict[str, Analysis], inbox: Any, outbox: Any) -> None:
    """The child's loop: update ``analyses`` with every chunk until the end mark, then send them back."""
    try:
        while True:
            chunk = inbox.get()
            if chunk is None:
                break
            for item, attention in chunk:
                for analysis in analyses.values():
                    analysis.update(item, attention)
        outbox.put(("done", analyses))
    except BaseException as exc:  # sent to the parent, which raises it
        outbox.put(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


class Offloaded(Analysis[dict]):
    """Several analyses run in one child process; ``compute()`` gives their results by name.

    Args:
        analyses: the analyses by name (fresh, or holding other shards' state, which is kept here and
            merged with what the child adds).
    """

    items: ClassVar[str] = "any"

    def __init__(self, analyses: Mapping[str, Analysis]) -> None:
        super().__init__()
        self.analyses = dict(analyses)
        kinds = {analysis.items for analysis in self.analyses.values()} - {"any"}
        if len(kinds) > 1:
            raise ConfigError(f"offloaded analyses must take the same items, found {sorted(kinds)}")
        self.items = kinds.pop() if kinds else "any"  # type: ignore[misc]  # per instance: those of the analyses held
        self._chunk: list[tuple[Any, WordAttention]] = []
        self._process: Any = None
        self._inbox: Any = None
        self._outbox: Any = None

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._inbox, self._outbox = context.Queue(maxsize=_QUEUE_CHUNKS), context.Queue()
        fresh = {}
        for name, analysis in self.analyses.items():  # the child adds to empty state; options kept
            fresh[name] = copy.deepcopy(analysis)
            fresh[name].reset()
        self._process = context.Process(target=_child, args=(fresh, self._inbox, self._outbox),
                                        name="probes-analyses", daemon=True)
        with _without_main():
            self._process.start()

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Queue one pair for the child (sent with the next full chunk)."""
        if self._process is None:
            self._start()
        self._chunk.append((item, word_attention))
        if len(self._chunk) >= CHUNK_PAIRS:
            self._send(self._chunk)
            self._chunk = []

    def _send(self, message: Any) -> None:
        """Put ``message`` on the child's queue, raising its error if it failed meanwhile."""
        while True:
            self._raise_if_failed()
            try:
                self._inbox.put(message, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def _raise_if_failed(self) -> None:
        try:
            kind, payload = self._outbox.get_nowait()
        except queue.Empty:
            process = self._process
            if not process.is_alive():
                self.close()
                raise OffloadError(f"the analysis process ended unexpectedly (exit code {process.exitcode})") from None
            return
        self.close()
        raise OffloadError(f"an analysis failed in its process: {payload}" if kind == "error"
                           else "the analysis process answered before it was asked")

    def compute(self) -> dict[str, Any]:
        """Every analysis' result by name (the child's state merged into the copies held here)."""
        if self._process is not None:
            if self._chunk:
                self._send(self._chunk)
                self._chunk = []
            self._send(None)
            kind, payload = self._receive()
            self.close()
            if kind == "error":
                raise OffloadError(f"an analysis failed in its process: {payload}")
            for name, analysis in payload.items():
                self.analyses[name].merge(analysis)
        return {name: analysis.compute() for name, analysis in self.analyses.items()}

    def _receive(self) -> tuple[str, Any]:
        while True:
            try:
                return self._outbox.get(timeout=_POLL_S)
            except queue.Empty:
                process = self._process
                if not process.is_alive():
                    self.close()
                    raise OffloadError(f"the analysis process ended unexpectedly (exit code "
                                       f"{process.exitcode})") from None

    def merge(self, other: Any) -> None:
        """Merge another :class:`Offloaded` of the same analyses (after both computed)."""
        for name, analysis in self.analyses.items():
            analysis.merge(other.analyses[name])

    def reset(self) -> None:
        """Forget everything (and end a running child)."""
        self.close()
        self._chunk = []
        for analysis in self.analyses.values():
            analysis.reset()

    def close(self) -> None:
        """End the child process if it still runs."""
        process, self._process = self._process, None
        if process is not None and process.is_alive():
            process.terminate()
            process.join(timeout=5)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
