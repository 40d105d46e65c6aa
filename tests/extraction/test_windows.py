"""Tests of probes.extraction.windows: whole-sentence windows, stride, splitting, ownership."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from probes.corpora.types import Document, Sentence
from probes.errors import ConfigError
from probes.extraction.windows import document_windows, iter_windows, owner_window


def one_token_per_word(words: Sequence[str]) -> int:
    """A toy tokenizer: one token per word plus [CLS] and [SEP]."""
    return len(words) + 2


def doc_of(lengths: Sequence[int], doc_id: str = "d") -> Document:
    sents = []
    for s, n in enumerate(lengths):
        words = tuple(f"w{s}_{k}" for k in range(n))
        sents.append(Sentence(f"{doc_id}-{s}", words, tuple([0] + [1] * (n - 1)), ("root",) + ("dep",) * (n - 1)))
    return Document(doc_id, tuple(sents))


def test_whole_document_fits_in_one_window() -> None:
    doc = doc_of([4, 5, 5])
    (w,) = document_windows(doc, one_token_per_word, 512)
    assert (w.start, w.end, w.prev_end, w.n_tokens, w.split) == (0, 14, 0, 16, False)
    assert w.words == doc.words and list(w.sentences()) == [0, 1, 2]


def test_windows_of_whole_sentences_with_default_stride() -> None:
    # sentence starts at token offsets 0, 4, 9, 14, 20, 24 (end 28); budget 10 content tokens
    doc = doc_of([4, 5, 5, 6, 4, 4])
    ws = document_windows(doc, one_token_per_word, 12)
    # stride 5: from offset 0 the next start is the first sentence at >= 5, i.e. sentence 2 (offset 9);
    # from sentence 3 (offset 14) it is sentence 4 (offset 20), so the last two windows overlap
    assert [(w.start, w.end) for w in ws] == [(0, 9), (9, 14), (14, 24), (20, 28)]
    assert [w.prev_end for w in ws] == [0, 9, 14, 24]
    assert all(w.n_tokens <= 12 for w in ws)


def test_small_stride_gives_overlapping_windows_and_every_word_covered() -> None:
    doc = doc_of([4, 5, 5, 6, 4, 4])
    ws = document_windows(doc, one_token_per_word, 12, stride=1)
    # each window starts one sentence later, and holds as many whole sentences as fit
    assert [(w.start, w.end) for w in ws] == [(0, 9), (4, 14), (9, 14), (14, 24), (20, 28)]
    covered = np.zeros(doc.n_words, bool)
    for w in ws:
        covered[w.start:w.end] = True
    assert covered.all()


def test_stride_larger_than_window_never_leaves_a_gap() -> None:
    doc = doc_of([3, 3, 3, 3])
    ws = document_windows(doc, one_token_per_word, 8, stride=1000)
    assert [(w.start, w.end) for w in ws] == [(0, 6), (6, 12)]


def test_sentence_longer_than_a_window_is_split_into_word_runs() -> None:
    doc = doc_of([2, 9, 2])
    ws = document_windows(doc, one_token_per_word, 6, stride=4)  # 4 content tokens
    # runs of 4, 4 and 1 words; the last run and the 2-word sentence after it share a window
    assert [(w.start, w.end, w.split) for w in ws] == [
        (0, 2, False), (2, 6, True), (6, 10, True), (10, 13, True)]


def test_non_additive_token_counts_are_checked_on_the_whole_window() -> None:
    # the counter charges one extra token for each sentence boundary inside the input
    doc = doc_of([3, 3, 3])

    def count(words: Sequence[str]) -> int:
        starts = {f"w{s}_0" for s in range(1, 3)}
        return len(words) + 2 + sum(1 for w in words[1:] if w in starts)

    ws = document_windows(doc, count, 8, stride=100)  # additive estimate says 6 words fit; really 5 tokens +1
    assert [(w.start, w.end) for w in ws] == [(0, 3), (3, 6), (6, 9)]
    assert all(count(w.words) <= 8 for w in ws)


@pytest.mark.parametrize("window, stride", [(2, None), (1, None), (10, 0), (10, -3)])
def test_bad_window_or_stride_is_a_config_error(window: int, stride: int | None) -> None:
    with pytest.raises(ConfigError, match="expected"):
        document_windows(doc_of([3]), one_token_per_word, window, stride=stride)


def test_empty_document_has_no_window() -> None:
    assert document_windows(Document("e", ()), one_token_per_word, 10) == []


def test_each_span_is_owned_by_exactly_the_earliest_window_holding_it() -> None:
    rng = np.random.default_rng(0)
    for trial in range(40):
        doc = doc_of(rng.integers(1, 8, size=rng.integers(1, 9)).tolist(), doc_id=f"d{trial}")
        ws = document_windows(doc, one_token_per_word, int(rng.integers(5, 14)), stride=int(rng.integers(1, 9)))
        for _ in range(30):
            a = int(rng.integers(0, doc.n_words))
            b = int(rng.integers(a + 1, min(doc.n_words, a + 6) + 1))
            holders = [k for k, w in enumerate(ws) if w.start <= a and b <= w.end]  # slow reference
            owners = [k for k, w in enumerate(ws) if w.owns(a, b)]
            assert owners == holders[:1]
            assert owner_window(ws, a, b) == (holders[0] if holders else None)


def test_iter_windows_streams_documents_in_order() -> None:
    docs = [doc_of([3, 3], "a"), doc_of([2], "b")]
    assert [(w.doc_id, w.index) for w in iter_windows(docs, one_token_per_word, 7, stride=3)] == [
        ("a", 0), ("a", 1), ("b", 0)]


def test_counting_many_word_lists_at_once_gives_the_same_windows(tmp_path: Path) -> None:
    """``count_many`` (one tokenizer call per document) gives the windows ``count_tokens`` alone gives,
    over a real WordPiece tokenizer and a sentence too long for one window."""
    from probes.extraction.extractor import AttentionExtractor
    from tests.tiny_models import build

    extractor = AttentionExtractor.from_pretrained(build("bert", tmp_path), device="cpu", progress=False)
    words = ("the quick brown fox jumps over the lazy dog , un-believ-able !").split()
    doc = Document("d", tuple(Sentence(f"d-{s}", tuple((words * 5)[s: s + n]), tuple(range(n)), ("dep",) * n)
                              for s, n in enumerate([5, 12, 40, 3, 9, 0, 7])))
    calls: list[int] = []

    def many(word_lists):  # type: ignore[no-untyped-def]
        calls.append(len(word_lists))
        return extractor.count_tokens_many(word_lists)

    assert extractor.count_tokens_many([list(s.words) for s in doc.sentences]) == \
        [extractor.count_tokens(s.words) for s in doc.sentences]
    for window, stride in ((24, None), (24, 5), (64, None)):
        alone = document_windows(doc, extractor.count_tokens, window, stride=stride)
        together = document_windows(doc, extractor.count_tokens, window, stride=stride, count_many=many)
        assert [(w.start, w.end, w.n_tokens, w.split) for w in together] == \
            [(w.start, w.end, w.n_tokens, w.split) for w in alone]
        assert any(w.split for w in alone) == (window == 24)
    assert calls[0] == 6  # the six sentences with words, in one call
