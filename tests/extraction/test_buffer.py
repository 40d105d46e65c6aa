"""The extractor's look-ahead buffer is bounded by attention size, not only by a count of batches.

Issue 11 item 12: 512-token document windows were held 16 batches at a time (4.5 GB for MiniLM on
GUM dev). A buffer now stops growing, once it holds a batch, at ``_BUFFER_ELEMENTS`` word-level
attention values, and a yielded item's maps are not kept by the extractor.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from probes.corpora.types import Sentence
from probes.extraction import extractor as extractor_module
from probes.extraction.extractor import AttentionExtractor
from tests.tiny_models import build


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("bert", tmp_path_factory.mktemp("models"))


def _sentences(n: int, n_words: int) -> list[Sentence]:
    words = tuple(("the cat sat on a mat " * n_words).split()[:n_words])
    return [Sentence(f"s{i}", words, tuple(range(len(words))), ("dep",) * len(words)) for i in range(n)]


def _buffer_sizes(extractor: AttentionExtractor, items: list[Sentence], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sizes: list[int] = []
    run = extractor._run_buffer

    def counting(buffer, words, bar, *rest):  # type: ignore[no-untyped-def]
        sizes.append(len(buffer))
        return run(buffer, words, bar, *rest)

    monkeypatch.setattr(extractor, "_run_buffer", counting)
    assert len(list(extractor.iter_attention(items))) == len(items)
    return sizes


def test_long_items_are_buffered_one_batch_at_a_time(bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extractor = AttentionExtractor.from_pretrained(bert, batch_size=2, device="cpu", progress=False)
    per_item = len(extractor.layers) * len(extractor.heads) * (40 + 2) ** 2
    monkeypatch.setattr(extractor_module, "_BUFFER_ELEMENTS", 2 * per_item)  # two long items' worth
    sizes = _buffer_sizes(extractor, _sentences(9, 40), monkeypatch)
    # Before: one buffer of all 9 (16 batches x 2 items fit); now: a batch (2 items) per buffer.
    assert sizes == [2, 2, 2, 2, 1]


def test_short_items_still_fill_the_buffer(bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extractor = AttentionExtractor.from_pretrained(bert, batch_size=2, device="cpu", progress=False)
    sizes = _buffer_sizes(extractor, _sentences(40, 5), monkeypatch)
    assert sizes == [32, 8]  # _BUFFER_BATCHES x batch_size: sentence-level sorting is unchanged


def test_yielded_maps_are_not_kept_by_the_extractor(bert: Path) -> None:
    extractor = AttentionExtractor.from_pretrained(bert, batch_size=2, device="cpu", progress=False)
    refs = []
    for _, wa in extractor.iter_attention(_sentences(6, 8)):
        refs.append(weakref.ref(wa.weights))
        del wa
        gc.collect()
        # every earlier item's maps are gone while the buffer (all 6 items) is still being yielded
        assert all(r() is None for r in refs[:-1])
    assert len(refs) == 6
