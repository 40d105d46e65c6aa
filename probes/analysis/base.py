"""The accumulator contract shared by every streaming analysis.

An accumulator sees a corpus one item at a time through ``update``, holds only
sufficient statistics (counts, sums) so memory stays bounded whatever the corpus
size, can be ``merge``-d with another accumulator of the same kind that saw a
different shard, and turns its state into a result with ``compute``
(torchmetrics' update / compute / merge pattern).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar, runtime_checkable

from probes.extraction.attention import WordAttention

__all__ = ["Accumulator", "accumulate"]

R_co = TypeVar("R_co", covariant=True)


@runtime_checkable
class Accumulator(Protocol[R_co]):
    """Streaming analysis over ``(item, word_attention)`` pairs."""

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Add one item (a Sentence, a document window ...) and its word-level attention."""

    def compute(self) -> R_co:
        """The result for everything seen so far."""

    def merge(self, other: Any) -> None:
        """Add the state of ``other`` (same kind, same options, another shard) to this one."""

    def reset(self) -> None:
        """Forget everything seen."""


def accumulate(pairs: Iterable[tuple[Any, WordAttention]], *accumulators: Accumulator[Any]) -> None:
    """Feed every ``(item, word_attention)`` pair to every accumulator, in one pass."""
    for item, attention in pairs:
        for acc in accumulators:
            acc.update(item, attention)
