"""What an extractor hands back: the stream of ``(item, WordAttention)`` pairs and the report of its inputs.

:class:`PairStream` carries the bound on what a consumer's queue may hold of it (half the attention budget);
:class:`ExtractionReport` counts and names the inputs skipped, truncated, windowed or over the budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from probes.extraction.attention import WordAttention
from probes.results import Result

__all__ = ["ExtractionReport", "PairStream"]

T = TypeVar("T")


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
        over = (f"over {self.max_tokens} tokens or the attention budget" if self.over_budget else
                f"over {self.max_tokens} tokens")
        text = (f"{self.n_items} inputs read, {self.n_yielded} yielded; {over}: "
                f"{len(self.skipped)} skipped, {len(self.truncated)} truncated, {len(self.windowed)} windowed")
        budget = f"over the attention budget ({self.max_attention_mb:g} MB)" if self.over_budget else ""
        for name, ids in (("skipped", self.skipped), ("truncated", self.truncated), ("windowed", self.windowed),
                          (budget, self.over_budget)):
            if ids:
                shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
                text += f"\n  {name}: {shown}"
        return text


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
