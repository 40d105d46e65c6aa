"""The extractor's memory budget: how many float32 attention values an input or a batch holds.

``max_attention_mb`` (MB of float32) is split in two halves: one bounds what the extractor holds at once
(the token attention of the layer in flight, the batch's pooled result, the finished results waiting in its
buffer, a combined windowed input), the other the pairs a consumer's queue holds
(:func:`probes.analysis.driver.stream`). :class:`Budget` is that arithmetic, on plain numbers, so the
planner, the batcher and the extractor's :meth:`~probes.extraction.extractor.AttentionExtractor.budget_tokens`
share one formula.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from probes.errors import OutOfMemoryError

__all__ = ["Budget", "DEFAULT_ATTENTION_MB", "out_of_memory"]

#: Default ``max_attention_mb``: 2 GB of float32 attention, half for the extractor (2**28 values), half for the
#: queue. Today's batches and windows of MiniLM (72 heads) and bert-base (144 heads) fit it unchanged: 4
#: bert-base windows of 512 tokens in a buffer hold 152M values plus 41M in flight; the longest input it runs
#: whole is 945 tokens for bert-base, 1,311 for MiniLM (359 for a 7B decoder's 1,024 heads).
DEFAULT_ATTENTION_MB = 2048.0
#: Bytes of float32 values.
_FLOAT = 4


@dataclass(frozen=True)
class Budget:
    """The attention budget of one extractor, in float32 values.

    Attributes:
        n_heads: heads per layer of the model (a layer's token attention in flight holds all of them).
        n_kept: kept layers x kept heads (``L' x H'``): the maps of each finished input.
        keep_tokens: whether finished inputs also hold their token maps.
        max_attention_mb: the budget in MB of float32 (None: none).
    """

    n_heads: int
    n_kept: int
    keep_tokens: bool
    max_attention_mb: float | None

    def share(self) -> float:
        """The extractor's half of ``max_attention_mb``, in float32 values (inf without a budget)."""
        return math.inf if self.max_attention_mb is None else self.max_attention_mb * 2**20 / _FLOAT / 2

    def queue_bytes(self) -> int | None:
        """The other half, in bytes: what a consumer's queue may hold of the extractor's pairs."""
        return None if self.max_attention_mb is None else int(self.max_attention_mb * 2**20 / 2)

    def held(self, n_tok: int, n_pos: int) -> int:
        """Values one finished input holds: its word maps ``(L', H', n, n)`` (and token maps when kept)."""
        return self.n_kept * (n_pos * n_pos + (n_tok * n_tok if self.keep_tokens else 0))

    def in_flight(self, batch: int, n_tok: int, n_pos: int) -> int:
        """Values of one forward pass beyond its results: the layer of token attention ``(B, H, T, T)`` being
        pooled and the batch's pooled result ``(B, L', H', n, n)``."""
        return batch * (self.n_heads * n_tok * n_tok + self.n_kept * n_pos * n_pos)

    def fits(self, n_tok: int, n_pos: int) -> bool:
        """Whether one input run alone stays within the extractor's share."""
        return self.held(n_tok, n_pos) + self.in_flight(1, n_tok, n_pos) <= self.share()

    def tokens(self, max_tokens: int) -> int:
        """The longest input (tokens, specials included) run whole: at most ``max_tokens``, and such that its
        attention fits the share whatever its words (``n <= T`` positions)."""
        per_token2 = self.n_heads + self.n_kept * (2 + self.keep_tokens)
        share = self.share()
        return max_tokens if math.isinf(share) else min(max_tokens, math.isqrt(int(share // per_token2)))


def out_of_memory(names: Sequence[str], n_tokens: int, max_attention_mb: float | None,
                  exc: BaseException) -> OutOfMemoryError:
    """The error for a forward pass that ran out of memory (``exc``): the inputs of its batch (``names``), its
    longest input in tokens, and the options that bound the memory it needs."""
    shown = ", ".join(repr(n) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    why = " ".join(str(exc).split())[-160:] or "no detail"
    bound = (f"--max-attention-mb is {max_attention_mb:g} MB: lower it, and such inputs are handled by --on-long"
             if max_attention_mb is not None else
             "set --max-attention-mb (max_attention_mb) to bound the attention held at once")
    return OutOfMemoryError(f"sentence {shown} ({n_tokens:,} tokens, batch of {len(names)}): the model ran out of "
                            f"memory ({type(exc).__name__}: {why}); {bound}, or lower --batch-size / "
                            "--max-batch-tokens")
