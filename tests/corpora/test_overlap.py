"""Held-out selection: two datasets compared by content and by sentence and document ids."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from probes.corpora.overlap import MAX_SHARED_SHARE, MIN_WORDS, measure_overlap, refuse_overlap
from probes.corpora.types import Sentence
from probes.errors import ConfigError


def _sentence(i: int, n_words: int = 10, *, prefix: str = "s", doc: str | None = None, salt: str = "") -> Sentence:
    words = tuple(f"w{salt}{i}-{k}" for k in range(n_words))
    return Sentence(sent_id=f"{prefix}{i}", words=words, heads=(0,) + (1,) * (n_words - 1),
                    relations=("root",) + ("dep",) * (n_words - 1), doc_id=doc)


def _corpus(n: int, **kwargs: object) -> list[Sentence]:
    return [_sentence(i, **kwargs) for i in range(n)]  # type: ignore[arg-type]  # kwargs are _sentence's keywords


def test_the_same_data_is_identical_and_refused_with_how_to_ask_for_it():
    data = _corpus(20)
    overlap = measure_overlap(data, list(reversed(data)))
    assert overlap.identical and overlap.overlapping
    with pytest.raises(ConfigError) as info:
        refuse_overlap(overlap, "A.conllu", "A.conllu")
    message = str(info.value)
    assert "A.conllu" in message and "same 20 sentences" in message and "--select-on same" in message


def test_a_subset_of_the_report_data_is_refused_and_counted():
    report = _corpus(50)
    overlap = measure_overlap(report[:10], report)
    assert not overlap.identical and overlap.overlapping
    assert overlap.shared_sentences == 10 and overlap.n_shared_sentence_ids == 10
    assert overlap.to_dict()["shared_sentences"] == 10


def test_shared_sentence_ids_alone_are_refused():
    select = _corpus(5, salt="a")
    report = _corpus(5, salt="b")  # other words, the same ids
    overlap = measure_overlap(select, report)
    assert overlap.shared_sentences == 0 and overlap.n_shared_sentence_ids == 5 and overlap.overlapping
    assert "s0, s1, s2, ..." in overlap.describe()


def test_shared_documents_alone_are_refused():
    select = [_sentence(i, prefix="a", doc="doc-1", salt="a") for i in range(3)]
    report = [_sentence(i, prefix="b", doc="doc-1", salt="b") for i in range(3)]
    overlap = measure_overlap(select, report)
    assert overlap.shared_documents == ("doc-1",) and overlap.overlapping


def test_disjoint_data_pass_and_short_common_sentences_do_not_count():
    select = _corpus(200, prefix="a", salt="a") + [_sentence(0, n_words=MIN_WORDS - 1, prefix="x", salt="c")]
    report = _corpus(200, prefix="b", salt="b") + [_sentence(0, n_words=MIN_WORDS - 1, prefix="y", salt="c")]
    overlap = measure_overlap(select, report)
    assert overlap.shared_sentences == 0 and not overlap.overlapping
    refuse_overlap(overlap, "dev", "test")  # no error


def test_a_few_repeated_long_sentences_are_recorded_but_not_refused():
    n = 400
    allowed = int(MAX_SHARED_SHARE * n)  # 4 of 400
    select = _corpus(n, prefix="a", salt="a")
    report = _corpus(n, prefix="b", salt="b")
    report[:allowed] = [Sentence(sent_id=f"b{i}", words=select[i].words, heads=select[i].heads,
                                 relations=select[i].relations) for i in range(allowed)]
    overlap = measure_overlap(select, report)
    assert overlap.shared_sentences == allowed and not overlap.overlapping
    report[allowed] = Sentence(sent_id=f"b{allowed}", words=select[allowed].words, heads=select[allowed].heads,
                               relations=select[allowed].relations)
    assert measure_overlap(select, report).overlapping  # one more is over the share


def _shared_data() -> Path:
    return Path(os.environ.get("PROBES_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))


def test_real_treebanks_dev_and_test_are_held_out_and_a_split_against_itself_is_not():
    ewt = _shared_data() / "ud-english-ewt"
    if not (ewt / "en_ewt-ud-dev.conllu").is_file():
        pytest.skip("UD English EWT not found (set PROBES_DATA to the folder holding ud-english-ewt)")
    from probes.corpora import read_treebank

    dev = list(read_treebank(ewt / "en_ewt-ud-dev.conllu"))
    test = list(read_treebank(ewt / "en_ewt-ud-test.conllu"))
    overlap = measure_overlap(dev, test)
    assert not overlap.overlapping, overlap.describe()  # genuinely held out: a few common short sentences only
    assert measure_overlap(dev[:500], dev).overlapping
