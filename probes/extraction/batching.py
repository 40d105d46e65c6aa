"""How a buffer of jobs is run: consecutive groups of items that fit the budget, then length-sorted batches.

:func:`groups` cuts a buffer's items into runs whose results fit the extractor's share of the memory budget;
:func:`batches` cuts a group's jobs, sorted by token length, into forward passes by dynamic programming, so
little compute goes to padding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from probes.extraction.budget import Budget
from probes.extraction.planning import Job, held, peak

__all__ = ["groups", "batches"]

#: Upper bound on the elements of the model's own attention output for one batch
#: (B x all layers x all heads x T x T); long inputs get smaller batches.
_BATCH_ELEMENTS = 2**25
#: The cost of one forward pass beyond its tokens, in token slots (used to choose batch cuts).
_BATCH_OVERHEAD_TOKENS = 128


def groups(jobs_of: list[list[Job]], budget: Budget) -> Iterator[tuple[range, int]]:
    """Consecutive items of a buffer to run together, with the values their results hold.

    A group's results, plus the larger of its biggest single forward pass and its biggest combined
    windowed input, stay within the extractor's share of ``budget`` (a group has at least one item; the
    planner has made every item fit alone). Without a budget: the whole buffer.
    """
    share, start, total, top = budget.share(), 0, 0, 0
    for index, item_jobs in enumerate(jobs_of):
        own = held(item_jobs, budget)
        item_top = peak(item_jobs, budget)
        if index > start and total + own + max(top, item_top) > share:
            yield range(start, index), total
            start, total, top = index, 0, 0
        total, top = total + own, max(top, item_top)
    yield range(start, len(jobs_of)), total


def batches(jobs: list[Job], budget: Budget, *, batch_size: int, n_layers: int, n_heads: int,
            max_batch_tokens: int | None, room: float = math.inf) -> Iterator[list[Job]]:
    """Length-sorted batches that waste little compute on padding.

    The jobs are sorted by token length and cut into contiguous batches by dynamic programming: each
    batch costs its padded size (items x longest) plus a fixed overhead of ``_BATCH_OVERHEAD_TOKENS``
    (the per-forward cost, in token slots), at most ``batch_size`` items, at most ``_BATCH_ELEMENTS``
    attention values (all ``n_layers x n_heads``), at most ``max_batch_tokens`` padded tokens and at most
    ``room`` values in flight (:meth:`Budget.in_flight`; a job alone always runs). Fixed-size batches over
    a sorted buffer of 256 sentences spend ~28% more than a globally sorted corpus on EWT; this spends ~4%.
    """
    order = sorted(jobs, key=lambda j: j.alignment.n_tokens)
    lengths = [job.alignment.n_tokens for job in order]
    positions = [job.alignment.n_positions for job in order]
    per_token2 = n_layers * n_heads
    most_tokens = math.inf if max_batch_tokens is None else max_batch_tokens
    n = len(order)
    best = [0.0] + [float("inf")] * n  # best[j]: cheapest cut of the first j jobs
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        longest, widest = lengths[j - 1], 0
        for i in range(j - 1, max(0, j - batch_size) - 1, -1):
            widest = max(widest, positions[i])
            if i < j - 1 and ((j - i) * per_token2 * longest * longest > _BATCH_ELEMENTS
                              or (j - i) * longest > most_tokens
                              or budget.in_flight(j - i, longest, widest) > room):
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
