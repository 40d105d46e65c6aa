"""What the extractor runs for each input: its alignment, and for an over-long one what ``on_long`` says.

Every input becomes a list of :class:`Job` (one model input each): one job for an input that fits, none for a
skipped one, one shorter job for a truncated one, or the overlapping windows of whole words of a windowed one
(each next window starts half-way through the previous one; :func:`word_spans`). An input that fits
``max_tokens`` but not the memory budget (:class:`~probes.extraction.budget.Budget`) is handled the same way and
named in the report's ``over_budget``. The windows' results are put back together by
:func:`probes.extraction.assemble.combine_windows`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.extraction.align import Alignment, alignment_from_word_ids
from probes.extraction.budget import Budget
from probes.extraction.outputs import ExtractionReport

log = logging.getLogger("probes")

__all__ = ["Job", "Planner", "align", "ask_rows", "held", "item_id", "peak", "word_spans"]


@dataclass
class Job:
    """One model input: a whole item, a truncated item or one window of an item."""

    item: int  # index in the buffer
    alignment: Alignment
    start: int = 0  # first word of the item covered (windows)
    result: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))  # (L', H', n, n)
    tokens: npt.NDArray[np.float32] | None = None  # (L', H', T, T) when the extractor keeps token maps
    rows: npt.NDArray[np.intp] | None = None  # the job's words whose rows were asked for (None: every row)
    row_positions: npt.NDArray[np.intp] | None = None  # set when ``result`` holds only these positions' rows
    name: str = ""  # the item's id (:func:`item_id`), for messages


def item_id(item: Any, index: int) -> str:
    """The id an input is named by in the report: its ``sent_id``, ``doc_id`` or ``id``, else ``#index``."""
    for attr in ("sent_id", "doc_id", "id"):
        value = getattr(item, attr, None)
        if value is not None:
            return str(value)
    return f"#{index}"


def align(tokenizer: Any, word_lists: list[list[str]], items: list[Any], offset: int = 0) -> list[Alignment]:
    """Tokenize ``word_lists`` (pre-split words, special tokens added) in one call and align each to its words;
    ``offset`` is the number of inputs before these (for the ids of items that have none)."""
    enc = tokenizer(word_lists, is_split_into_words=True, add_special_tokens=True)
    out = []
    for i, (wl, item) in enumerate(zip(word_lists, items)):
        out.append(alignment_from_word_ids(
            enc["input_ids"][i], enc.word_ids(i), wl, item_id=item_id(item, offset + i),
            path=getattr(item, "path", None), line=getattr(item, "line", None)))
    return out


def word_spans(word_tokens: npt.NDArray[np.intp], budget: int) -> list[tuple[int, int]]:
    """Overlapping ``(start, end)`` word ranges of at most ``budget`` tokens each (each next one starts half-way
    through the previous one)."""
    ends = np.concatenate([[0], np.cumsum(word_tokens)])  # (n_words + 1,)
    n_words, spans, start = len(word_tokens), [], 0
    while True:
        end = int(np.searchsorted(ends, ends[start] + budget, side="right")) - 1
        spans.append((start, end))
        if end >= n_words:
            return spans
        start = max(start + 1, start + (end - start) // 2)


def held(jobs: Sequence[Job], budget: Budget) -> int:
    """Values the finished results of ``jobs`` hold."""
    return sum(budget.held(j.alignment.n_tokens, j.alignment.n_positions) for j in jobs)


def peak(jobs: Sequence[Job], budget: Budget) -> int:
    """Values beyond the finished results while ``jobs`` (one item's) run: the largest forward pass, or
    the combined ``(L', H', n, n)`` of a windowed item, whichever is larger."""
    if not jobs:
        return 0
    top = max(budget.in_flight(1, j.alignment.n_tokens, j.alignment.n_positions) for j in jobs)
    if len(jobs) > 1:
        n = jobs[0].alignment.n_special_tokens + max(j.start + j.alignment.n_words for j in jobs)
        top = max(top, budget.n_kept * n * n)
    return top


def ask_rows(jobs: Sequence[Job], asked: Sequence[int] | None, n_words: int, name: str) -> None:
    """Give each of an item's ``jobs`` the words (its own, 0-based) of ``asked`` it holds (None: every row).

    Raises:
        ConfigError: a word index outside the item (``name`` is its id).
    """
    if asked is None:
        return
    words = np.unique(np.asarray(list(asked), dtype=np.intp))
    if words.size and (words[0] < 0 or words[-1] >= n_words):
        raise ConfigError(f"{name}: rows asked for must be "
                          f"word indices in 0..{n_words - 1}, found {words[0]}..{words[-1]}")
    for job in jobs:
        local = words - job.start
        job.rows = local[(local >= 0) & (local < job.alignment.n_words)]


@dataclass
class Planner:
    """Turns a buffer of inputs into jobs, counting and naming the over-long and over-budget ones in ``report``.

    Attributes:
        tokenizer: the model's fast tokenizer.
        max_tokens: most tokens per input, special tokens included.
        on_long: ``skip``, ``truncate`` or ``window``.
        budget: the extractor's memory budget.
        report: the extractor's report (updated in place).
    """

    tokenizer: Any
    max_tokens: int
    on_long: str
    budget: Budget
    report: ExtractionReport

    def plan(self, buffer: list[Any], word_lists: list[list[str]]) -> list[list[Job]]:
        """Align every item and decide, for the over-long and over-budget ones, what to run."""
        alignments = align(self.tokenizer, word_lists, buffer, self.report.n_items)
        plans: list[list[Job]] = []
        for index, (item, wl, al) in enumerate(zip(buffer, word_lists, alignments)):
            name = item_id(item, self.report.n_items + index)
            long = al.n_tokens > self.max_tokens
            if not long and self.budget.fits(al.n_tokens, al.n_positions):
                plans.append([Job(index, al, name=name)])
                continue
            if not long:
                self.report.over_budget.append(name)
            plans.append(self._plan_long(index, item, name, wl, al))
            if not long:
                log.warning("%s", self._over_budget_note(name, al, plans[-1]))
        self.report.n_items += len(buffer)
        return plans

    def _mb(self, values: float) -> str:
        """``values`` float32 values in MB, as messages say it."""
        return f"{values * 4 / 2**20:,.1f} MB"

    def _over_budget_note(self, name: str, al: Alignment, jobs: Sequence[Job]) -> str:
        """Why an input within ``max_tokens`` was not run whole (the attention budget, with the numbers) and
        what was done instead (``on_long``)."""
        need = self.budget.held(al.n_tokens, al.n_positions) + self.budget.in_flight(1, al.n_tokens, al.n_positions)
        mb = self.budget.max_attention_mb
        text = (f"{name}: {al.n_tokens:,} tokens ({al.n_words:,} words) need {self._mb(need)} of attention at once, "
                f"over the extractor's {self._mb(self.budget.share())} (half of --max-attention-mb {mb:g}), "
                f"not over the model's {self.max_tokens} tokens")
        if not jobs:
            windows = "; even its windows' combined maps do not fit" if self.on_long == "window" else ""
            return f"{text}: skipped{windows} (raise --max-attention-mb to run it)"
        if self.on_long == "truncate":
            return f"{text}: truncated to its first {jobs[0].alignment.n_words:,} words"
        return f"{text}: run in {len(jobs)} windows of at most {self.budget.tokens(self.max_tokens)} tokens"

    def _plan_long(self, index: int, item: Any, name: str, wl: list[str], al: Alignment) -> list[Job]:
        """The jobs of an input over ``max_tokens`` or the budget, by ``on_long`` (its id goes to the report)."""
        budget = self.budget.tokens(self.max_tokens) - al.n_special_tokens  # tokens of words per job
        if self.on_long == "skip" or al.word_tokens.max(initial=0) > budget:
            self.report.skipped.append(name)
            return []
        if self.on_long == "truncate":
            keep = int(np.searchsorted(np.cumsum(al.word_tokens), budget, side="right"))
            self.report.truncated.append(name)
            return [Job(index, align(self.tokenizer, [wl[:keep]], [item])[0], name=name)]
        spans = word_spans(al.word_tokens, budget)
        sub = align(self.tokenizer, [wl[s:e] for s, e in spans], [item] * len(spans))
        jobs = [Job(index, a, start=s, name=name) for a, (s, _) in zip(sub, spans)]
        if held(jobs, self.budget) + peak(jobs, self.budget) > self.budget.share():  # the combined n x n does not fit
            if name not in self.report.over_budget:
                self.report.over_budget.append(name)
            self.report.skipped.append(name)
            return []
        self.report.windowed.append(name)
        return jobs
