"""Cut documents into model-sized windows of whole sentences.

Coreference and bridging need attention *across* sentences, but a model reads at
most ``max_tokens`` tokens. A window is a run of whole sentences (a sentence too
long for any window on its own is split into runs of whole words) whose tokens,
special tokens included, fit in ``window`` tokens. Consecutive windows start
``stride`` tokens apart (rounded up to the next sentence start), so they overlap
when ``stride < window`` and every word is covered.

Ownership rule (so every span is scored exactly once): a span belongs to the
*earliest* window that holds all of it. Window starts and ends both grow, so
that window is also the one where the span has the most preceding context, and
hence the most antecedents. Spans held by no window (a mention crossing a cut)
are counted by the scorers as ``cut``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from probes.corpora.types import Document
from probes.errors import ConfigError

__all__ = ["Window", "document_windows", "iter_windows", "owner_window"]

TokenCounter = Callable[[Sequence[str]], int]
#: The same for many word lists at once (one tokenizer call: ``AttentionExtractor.count_tokens_many``).
ManyTokenCounter = Callable[[list[Sequence[str]]], list[int]]


@dataclass(frozen=True, slots=True)
class Window:
    """A run of consecutive words of one document, fed to the model as one input.

    Attributes:
        document: the document the window is cut from.
        index: 0-based number of the window in its document.
        start: document-level offset of the first word (inclusive).
        end: document-level offset after the last word (exclusive).
        prev_end: ``end`` of the previous window of the document (0 for the first):
            the window owns exactly the spans ending after it (see :meth:`owns`).
        n_tokens: model tokens of the window, special tokens included.
        split: True when the window cuts a sentence (a sentence longer than a window).
    """

    document: Document
    index: int
    start: int
    end: int
    prev_end: int = 0
    n_tokens: int = 0
    split: bool = False
    words: tuple[str, ...] = field(default=(), repr=False)

    @property
    def n_words(self) -> int:
        """Number of words in the window."""
        return self.end - self.start

    @property
    def doc_id(self) -> str:
        """Id of the document the window comes from."""
        return self.document.doc_id

    def holds(self, start: int, end: int) -> bool:
        """True when the span ``[start, end)`` (document offsets) lies inside the window."""
        return self.start <= start and end <= self.end

    def owns(self, start: int, end: int) -> bool:
        """True when this is the earliest window holding ``[start, end)``: the span is scored here."""
        return self.holds(start, end) and end > self.prev_end

    def sentences(self) -> range:
        """Indices of the sentences the window touches (whole or in part)."""
        doc = self.document
        return range(doc.sentence_of(self.start), doc.sentence_of(self.end - 1) + 1) if self.end > self.start \
            else range(0)


def owner_window(windows: Sequence[Window], start: int, end: int) -> int | None:
    """Position in ``windows`` (one document's, in order) of the earliest window holding ``[start, end)``."""
    ends = np.fromiter((w.end for w in windows), dtype=np.int64, count=len(windows))
    k = int(np.searchsorted(ends, end, side="left"))  # first window whose end reaches `end`
    if k < len(windows) and windows[k].start <= start:
        return k
    return None


def _special_count(count_tokens: TokenCounter) -> int:
    """Number of special tokens the model adds to any input ([CLS] + [SEP] = 2 for BERT)."""
    try:
        return int(count_tokens([]))
    except Exception:  # some tokenizers refuse empty inputs: "a" is one token in every vocabulary we know
        return int(count_tokens(["a"])) - 1


def _units(document: Document, count_tokens: TokenCounter, count_many: ManyTokenCounter | None, n_special: int,
           budget: int) -> list[tuple[int, int, int, bool]]:
    """``(start, end, content tokens, split)`` of the document's units: whole sentences, or runs of whole words
    for a sentence that cannot fit ``budget`` content tokens alone."""
    def many(word_lists: list[Sequence[str]]) -> list[int]:
        return list(count_many(word_lists)) if count_many is not None else [count_tokens(w) for w in word_lists]

    units: list[tuple[int, int, int, bool]] = []
    counted = iter(many([sent.words for sent in document.sentences if sent.words]))
    for s, sent in enumerate(document.sentences):
        first = document.sentence_starts[s]
        if not sent.words:
            continue
        n_tok = next(counted) - n_special
        if n_tok <= budget:
            units.append((first, first + len(sent.words), n_tok, False))
            continue
        per_word = [t - n_special for t in many([[w] for w in sent.words])]
        lo, acc = 0, 0
        for k, t in enumerate(per_word):
            if acc and acc + t > budget:
                units.append((first + lo, first + k, acc, True))
                lo, acc = k, 0
            acc += t  # a single word longer than the budget stays alone (the extractor truncates it)
        units.append((first + lo, first + len(per_word), acc, True))
    return units


def document_windows(
    document: Document,
    count_tokens: TokenCounter,
    window: int,
    *,
    stride: int | None = None,
    count_many: ManyTokenCounter | None = None,
) -> list[Window]:
    """Cut ``document`` into windows of whole sentences that fit ``window`` tokens.

    Args:
        document: the document.
        count_tokens: tokens the model gives a list of words, special tokens included
            (``AttentionExtractor.count_tokens``).
        window: the most tokens per window, specials included (``AttentionExtractor.max_tokens``
            at most).
        stride: tokens between the starts of consecutive windows (the next window starts at the
            first sentence at least ``stride`` tokens after the current start). ``None``: half
            the window. ``stride >= window`` gives windows that do not overlap.
        count_many: ``count_tokens`` of many word lists in one call (faster; the same counts), used
            for the sentences and the words of over-long sentences.

    Returns:
        The windows in order; together they cover every word of the document.

    Raises:
        ConfigError: ``window`` too small to hold one word, or ``stride < 1``.
    """
    n_special = _special_count(count_tokens)
    budget = window - n_special
    if budget < 1:
        raise ConfigError(f"window: expected more than {n_special} tokens (the special tokens), found {window}")
    if stride is None:
        stride = max(1, budget // 2)
    if stride < 1:
        raise ConfigError(f"stride: expected a positive number of tokens, found {stride}")

    all_words = document.words
    units = _units(document, count_tokens, count_many, n_special, budget)
    if not units:
        return []

    tok = np.cumsum([0] + [u[2] for u in units])  # (n_units + 1,) token offset of each unit start
    windows: list[Window] = []
    i, prev_end = 0, 0
    while True:
        j = i + 1
        while j < len(units) and tok[j + 1] - tok[i] <= budget:
            j += 1
        start, end = units[i][0], units[j - 1][1]
        n_tokens = count_tokens(all_words[start:end])
        while n_tokens > window and j > i + 1:  # token counts need not add up exactly (BPE merges)
            j -= 1
            end = units[j - 1][1]
            n_tokens = count_tokens(all_words[start:end])
        windows.append(Window(
            document=document, index=len(windows), start=start, end=end, prev_end=prev_end,
            n_tokens=int(n_tokens), split=any(u[3] for u in units[i:j]), words=all_words[start:end],
        ))
        if j >= len(units):
            return windows
        prev_end = end
        nxt = int(np.searchsorted(tok, tok[i] + stride, side="left"))
        i = min(max(nxt, i + 1), j)  # advance at least one unit, never leave a gap


def iter_windows(
    documents: Iterable[Document],
    count_tokens: TokenCounter,
    window: int,
    *,
    stride: int | None = None,
    count_many: ManyTokenCounter | None = None,
) -> Iterator[Window]:
    """Windows of every document, document after document (streaming); ``count_many`` as in
    :func:`document_windows`."""
    for doc in documents:
        yield from document_windows(doc, count_tokens, window, stride=stride, count_many=count_many)
