"""The analysis contract: one pass = separate passes, merge = one pass, reset, partial inputs, failures."""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import probes.corpora
from probes.analysis import ANALYSES
from probes.analysis.attention_to_specials import AttentionToSpecials, SpecialsResult
from probes.analysis.base import Analysis
from probes.analysis.baselines import OffsetBaseline
from probes.analysis.bridging import BridgingScores
from probes.analysis.coreference import AntecedentAccuracy
from probes.analysis.dependency import HeadAccuracy
from probes.analysis.driver import StreamResult, stream
from probes.analysis.unit_counts import UnitCounts
from probes.corpora import read_documents, read_treebank
from probes.corpora.types import Sentence
from probes.errors import AlignmentError, ConfigError, SkippedItemWarning
from probes.extraction.attention import WordAttention
from probes.extraction.windows import document_windows
from probes.probing.parser_scores import ParserScorer
from probes.results import equal, load

SAMPLE = Path(probes.corpora.__file__).resolve().parent / "sample" / "sample-dev.conllu"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
COREF_FILES = (FIXTURES / "coref" / "tiny_gum.conllu", FIXTURES / "coref" / "split_antecedents.conllu",
               FIXTURES / "corpora" / "coref.conllu")

Pair = tuple[Any, WordAttention]


def random_attention(rng: np.random.Generator, n_words: int, *, lead: int = 1, trail: int = 1,
                     meta: dict[str, Any] | None = None) -> WordAttention:
    """Rows summing to 1 over ``lead + n_words + trail`` positions, with ties (rounded values)."""
    n = lead + n_words + trail
    w = rng.random((2, 3, n, n))
    w[..., : n // 3] = np.round(w[..., : n // 3], 1)  # ties, broken left-most
    w = (w / w.sum(-1, keepdims=True)).astype(np.float32)
    special = np.zeros(n, dtype=bool)
    special[:lead], special[n - trail:] = True, True
    return WordAttention(w, special, (0, 1), (0, 1, 2), {"truncated": 0} if meta is None else meta)


@pytest.fixture(scope="module")
def sentence_pairs() -> list[Pair]:
    rng = np.random.default_rng(7)
    return [(s, random_attention(rng, s.n_words)) for s in read_treebank(SAMPLE)]


@pytest.fixture(scope="module")
def window_pairs() -> list[Pair]:
    rng = np.random.default_rng(8)
    docs = [d for path in COREF_FILES for d in read_documents(path)]
    windows = [w for d in docs for w in document_windows(d, lambda ws: len(ws) + 2, 14, stride=6)]
    return [(w, random_attention(rng, w.n_words)) for w in windows]


def sentence_analyses() -> dict[str, Analysis[Any]]:
    return {"dependency": HeadAccuracy(buffer=5), "baselines": OffsetBaseline(), "specials": AttentionToSpecials()}


def window_analyses() -> dict[str, Analysis[Any]]:
    return {"coreference": AntecedentAccuracy(), "bridging": BridgingScores()}


def one_pass(make: Callable[[], Analysis[Any]], pairs: list[Pair]) -> Any:
    analysis = make()
    for item, attention in pairs:
        analysis.update(item, attention)
    return analysis.compute()


def test_every_registered_analysis_is_an_analysis() -> None:
    assert set(ANALYSES) >= {"dependency", "baselines", "coreference", "bridging", "specials"}
    assert all(issubclass(cls, Analysis) for cls in ANALYSES.values())
    assert ANALYSES["dependency"] is HeadAccuracy and ANALYSES["specials"] is AttentionToSpecials


@pytest.mark.parametrize("overlap", [True, False])
def test_one_pass_equals_separate_passes(sentence_pairs: list[Pair], window_pairs: list[Pair],
                                         overlap: bool) -> None:
    for pairs, make in ((sentence_pairs, sentence_analyses), (window_pairs, window_analyses)):
        together = stream(iter(pairs), make(), overlap=overlap)
        assert together.n_items == len(pairs) and together.skipped == ()
        for name, analysis in make().items():
            alone = stream(pairs, {name: analysis})
            assert equal(together.results[name], alone.results[name]), name
            assert equal(together[name], one_pass(lambda a=analysis: type(a)(**a.options), pairs)), name
    heads = together_heads = stream(sentence_pairs, sentence_analyses())["dependency"]
    assert together_heads.n_units == len(sentence_pairs) and heads.correct.sum() > 0
    coref = stream(window_pairs, window_analyses())
    assert coref["coreference"].total.sum() > 0 and coref["bridging"].total.sum() > 0


def canonical(result: Any) -> Any:
    """``result`` with per-unit rows in relation order within each unit (a merge renumbers the
    second shard's relations, so its rows of one sentence may come in another order)."""
    units = getattr(result, "units", None)
    if not isinstance(units, UnitCounts):
        return result
    unit = units.unit_of_row()
    order = np.lexsort((units.relation, unit))
    sorted_units = UnitCounts(units.indptr, units.relation[order], units.total[order], units.correct[order])
    changes: dict[str, Any] = {"units": sorted_units}
    grid = getattr(result, "grid_units", None)
    if isinstance(grid, UnitCounts):  # same rows as ``units``: same order
        changes["grid_units"] = UnitCounts(grid.indptr, grid.relation[order], grid.total[order], grid.correct[order])
    if getattr(result, "unit_positions", None) is not None:
        rows = result.unit_positions
        changes["unit_positions"] = rows[np.lexsort(rows.T[::-1])]
    return dataclasses.replace(result, **changes)


def _shards(pairs: list[Pair]) -> tuple[list[Pair], list[Pair]]:
    """Two shards: the second holds every item with a label the first never sees."""
    def labels(item: Any) -> set[str]:
        return set(item.relations) if isinstance(item, Sentence) else {item.doc_id}
    counts: dict[str, int] = {}
    for item, _ in pairs:
        for lab in labels(item):
            counts[lab] = counts.get(lab, 0) + 1
    rare = min(counts, key=lambda k: (counts[k], k))
    second = [p for p in pairs if rare in labels(p[0])]
    return [p for p in pairs if rare not in labels(p[0])], second


@pytest.mark.parametrize("name", sorted(ANALYSES))  # every registered analysis, new ones included
def test_merge_of_shards_equals_one_pass(name: str, sentence_pairs: list[Pair], window_pairs: list[Pair]) -> None:
    pairs = window_pairs if ANALYSES[name].items == "windows" else sentence_pairs
    first, second = _shards(pairs)
    assert first and second
    make = ANALYSES[name]
    whole = one_pass(make, first + second)
    a, b = make(), make()
    for item, attention in first:
        a.update(item, attention)
    for item, attention in second:
        b.update(item, attention)
    a.merge(b)
    assert equal(canonical(a.compute()), canonical(whole))
    empty = make()  # merging into a fresh analysis, and merging a fresh one, change nothing
    empty.merge(a)
    empty.merge(make())
    assert equal(canonical(empty.compute()), canonical(whole))
    if name == "dependency":  # the second shard's relations come after the first's, as in one pass
        assert whole.relations[: len(one_pass(make, first).relations)] == one_pass(make, first).relations


def test_merge_checks_options_and_heads(sentence_pairs: list[Pair]) -> None:
    with pytest.raises(ConfigError, match=r"options: poss_rule=True vs False"):
        HeadAccuracy().merge(HeadAccuracy(poss_rule=False))
    with pytest.raises(ConfigError, match="offsets"):
        OffsetBaseline().merge(OffsetBaseline(offsets=(-1, 1)))
    with pytest.raises(ConfigError, match="direction"):
        BridgingScores().merge(BridgingScores(direction="antecedent_to_anaphor"))
    with pytest.raises(ConfigError, match="cannot merge OffsetBaseline into HeadAccuracy"):
        HeadAccuracy().merge(OffsetBaseline())  # type: ignore[arg-type]
    a, b = AttentionToSpecials(), AttentionToSpecials()
    s, att = sentence_pairs[0]
    a.update(s, att)
    b.update(s, WordAttention(att.weights[:1], att.is_special, (0,), att.heads))
    with pytest.raises(ConfigError, match=r"different layers: \(0, 1\) and \(0,\)"):
        a.merge(b)


@pytest.mark.parametrize("name", sorted(ANALYSES))  # every registered analysis, new ones included
def test_reset_gives_a_fresh_state(name: str, sentence_pairs: list[Pair], window_pairs: list[Pair]) -> None:
    pairs = window_pairs if ANALYSES[name].items == "windows" else sentence_pairs
    analysis = ANALYSES[name]()
    for item, attention in pairs[:7]:
        analysis.update(item, attention)
    analysis.reset()
    fresh = ANALYSES[name]()
    for state in analysis._states:
        mine, theirs = getattr(analysis, state), getattr(fresh, state)
        if hasattr(mine, "index") and isinstance(mine.index, dict):  # a vocabulary
            mine, theirs = mine.index, theirs.index
        assert equal(mine, theirs), state
    for item, attention in pairs:
        analysis.update(item, attention)
    assert equal(analysis.compute(), one_pass(ANALYSES[name], pairs))


def test_parser_scorer_merges_by_declared_state() -> None:
    class Fixed:
        def predict_log_proba_one(self, sentence: Sentence, attention: WordAttention) -> np.ndarray:
            m = sentence.n_words
            return np.log(np.full((m, m + 1), 1.0 / (m + 1)))  # ties: everything predicts ROOT

    rng = np.random.default_rng(3)
    pairs = [(s, random_attention(rng, s.n_words)) for s in list(read_treebank(SAMPLE))[:6]]
    parser = Fixed()
    a, b, whole = ParserScorer(parser), ParserScorer(parser), ParserScorer(parser)
    for k, (s, att) in enumerate(pairs):
        (a if k < 2 else b).update(s, att)
        whole.update(s, att)
    a.merge(b)
    assert a.counts == whole.counts and len(a.counts) == 6
    a.reset()
    assert a.counts == []
    with pytest.raises(ConfigError, match="parser"):
        a.merge(ParserScorer(Fixed()))


def _partial(pairs: list[Pair]) -> tuple[list[Pair], list[int]]:
    """A copy of ``pairs`` with items 2 and 5 truncated (2 and 1 words cut) and item 7 windowed (whole)."""
    rng = np.random.default_rng(5)
    out = list(pairs)
    s, _ = out[2]
    out[2] = (s, random_attention(rng, s.n_words - 2, meta={"truncated": 2}))
    s, _ = out[5]
    out[5] = (s, random_attention(rng, s.n_words - 1, meta={"truncated": 1}))
    s, _ = out[7]
    out[7] = (s, random_attention(rng, s.n_words, meta={"truncated": 0, "windows": [(0, 4), (2, s.n_words)]}))
    return out, [2, 5]


def test_driver_skips_partial_items_for_every_analysis(sentence_pairs: list[Pair]) -> None:
    pairs, bad = _partial(sentence_pairs[:12])
    whole = [p for k, p in enumerate(pairs) if k not in bad]
    with pytest.warns(SkippedItemWarning, match=r"2 of 12 items .* not analysed"):
        res = stream(pairs, sentence_analyses())
    assert res.n_items == 12
    assert res.skipped == ((pairs[2][0].sent_id, "truncated"), (pairs[5][0].sent_id, "truncated"))
    expected = stream(whole, sentence_analyses())
    for name in res.results:
        assert equal(res[name], expected[name]), name
    assert res["dependency"].n_units == res["baselines"].n_units == 10 == res["specials"].n_items


def test_stream_keeps_heads_and_baselines_paired(sentence_pairs: list[Pair]) -> None:
    pairs, bad = _partial(sentence_pairs[:12])
    heads, base = HeadAccuracy(), OffsetBaseline()
    with pytest.warns(SkippedItemWarning):
        skipped = stream(pairs, {"heads": heads, "baselines": base}, overlap=False).skipped
    assert [i for i, _ in skipped] == [pairs[k][0].sent_id for k in bad]
    assert heads.n_units == base.n_units == 10
    h, b = heads.compute(), base.compute()
    assert h.units.n_units == b.units.n_units == 10
    assert h.units.indptr.tolist()[:1] == [0] and set(h.relations) <= set(b.relations)
    with pytest.raises(AlignmentError, match="truncated by the extractor.*stream"):
        HeadAccuracy().update(*pairs[2])  # fed directly, a partial input is an error, not a silent skip


def test_producer_exception_propagates(sentence_pairs: list[Pair]) -> None:
    def broken() -> Iterator[Pair]:
        yield from sentence_pairs[:3]
        raise RuntimeError("model fell over")

    for overlap in (True, False):
        with pytest.raises(RuntimeError, match="model fell over"):
            stream(broken(), sentence_analyses(), overlap=overlap)


def test_consumer_failure_stops_the_producer(sentence_pairs: list[Pair]) -> None:
    produced: list[int] = []
    closed = threading.Event()

    def endless() -> Iterator[Pair]:
        try:
            for k in range(10**6):
                produced.append(k)
                yield sentence_pairs[k % len(sentence_pairs)]
        finally:
            closed.set()

    class Interrupting(AttentionToSpecials):
        def update(self, item: Any, word_attention: WordAttention) -> None:
            if self._n_items == 3:
                raise KeyboardInterrupt
            super().update(item, word_attention)

    before = {t.ident for t in threading.enumerate()}
    with pytest.raises(KeyboardInterrupt):
        stream(endless(), {"x": Interrupting()})
    assert closed.wait(5), "the producer's iterator was not closed"
    workers = [t for t in threading.enumerate() if t.ident not in before and t.name == "probes-extract"]
    for t in workers:
        t.join(5)
    assert not any(t.is_alive() for t in workers)
    n = len(produced)
    time.sleep(0.2)
    assert len(produced) == n < 10**6  # it stopped feeding


def test_attention_to_specials_against_hand_computation() -> None:
    # 2 words between [CLS] and [SEP]; one layer, two heads.
    w = np.zeros((1, 2, 4, 4))
    w[0, 0] = [[1, 0, 0, 0], [0.5, 0.25, 0.25, 0.0], [0.1, 0.2, 0.3, 0.4], [0, 0, 0, 1]]
    w[0, 1] = [[1, 0, 0, 0], [0.0, 0.0, 0.0, 1.0], [0.0, 0.5, 0.5, 0.0], [0, 0, 0, 1]]
    first = WordAttention(w, np.array([True, False, False, True]), (3,), (0, 5))
    # one word, no trailing special
    second = WordAttention(np.array([[[[0.0, 1.0], [0.2, 0.8]], [[0.0, 1.0], [0.6, 0.4]]]]),
                           np.array([True, False]), (3,), (0, 5))
    analysis = AttentionToSpecials()
    analysis.update("a", first)
    analysis.update("b", second)
    res = analysis.compute()
    # head 0: leading 0.5 + 0.1 + 0.2; trailing 0 + 0.4 ; head 1: leading 0 + 0 + 0.6; trailing 1 + 0
    np.testing.assert_allclose(res.leading, [[0.8, 0.6]])
    np.testing.assert_allclose(res.trailing, [[0.4, 1.0]])
    assert (res.n_words, res.n_items, res.layers, res.heads) == (3, 2, (3,), (0, 5))
    np.testing.assert_allclose(res.mean(), [[1.2 / 3, 1.6 / 3]])
    table = res.to_pandas()
    assert table["head_name"].tolist() == ["4-1", "4-6"]
    np.testing.assert_allclose(table["leading"], [0.8 / 3, 0.2])


def test_results_round_trip(sentence_pairs: list[Pair], tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = stream(sentence_pairs[:10], {"specials": AttentionToSpecials(), "baselines": OffsetBaseline()})
    assert isinstance(res["specials"], SpecialsResult)
    back = load(res.save(tmp_path / "run"))
    assert isinstance(back, StreamResult) and equal(back, res)
