"""Intervals resample documents where the corpus has them (seed_methods §g), sentences otherwise."""

from __future__ import annotations

import json

import numpy as np
import pytest

from probes.corpora import read_treebank
from probes.corpora.types import Sentence
from probes.errors import ConfigError
from probes.extraction.attention import WordAttention
from probes.heads.intervals import MIN_DOCUMENTS, bootstrap_ci, resample_counts, resampling_units
from probes.heads.selection import interval_units, leaderboard_rows
from probes.reports.leaderboard import interval_note
from probes.run_record import RunRecord
from probes.runs.leaderboard import Leaderboard, leaderboard_from_pairs, score_split


def _counts(seed: int, n_docs: int, effect: float) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Documents of 3-30 sentences; each sentence's 2-14 words are right with its document's probability
    (``0.6`` plus a per-document shift of sd ``effect``): ``(doc id per sentence, correct (S,), total (S,))``."""
    rng = np.random.default_rng(seed)
    docs, correct, total = [], [], []
    for d in range(n_docs):
        p = float(np.clip(0.6 + effect * rng.standard_normal(), 0.02, 0.98))
        for _ in range(int(rng.integers(3, 31))):
            n = int(rng.integers(2, 15))
            docs.append(f"doc{d}")
            total.append(n)
            correct.append(int(rng.binomial(n, p)))
    return docs, np.array(correct), np.array(total)


def _slow_draws(docs: list[str], correct: np.ndarray, total: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Reference: per resample, the documents drawn (the same rng draws), then every drawn document's sentences
    summed one by one, and the ratio of the sums."""
    order: list[str] = []
    for d in docs:  # documents in order of first appearance
        if d not in order:
            order.append(d)
    draws = resample_counts(len(order), n_resamples, seed)  # (R, n_docs) times each document is drawn
    out = []
    for row in draws:
        drawn = [order[j] for j in range(len(order)) for _ in range(int(row[j]))]
        num = den = 0
        for doc in drawn:
            for s in range(len(docs)):
                if docs[s] == doc:
                    num += int(correct[s])
                    den += int(total[s])
        out.append(num / den)
    return np.array(out)


def test_document_bootstrap_equals_a_slow_reference():
    docs, correct, total = _counts(0, 14, 0.1)
    units = resampling_units(docs, len(docs))
    assert (units.unit, units.n_units) == ("documents", 14)
    weights = resample_counts(units.n_units, 200, 7)  # (R, n_docs)
    fast = (weights @ units.sum(correct)) / (weights @ units.sum(total))  # (R,)
    slow = _slow_draws(docs, correct, total, 200, 7)
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)
    low, high = bootstrap_ci(units.sum(correct), units.sum(total), n_resamples=200, random_state=7)
    assert (float(low), float(high)) == pytest.approx(tuple(np.quantile(slow, [0.025, 0.975])), abs=1e-12)


def test_unit_rule():
    docs = [f"d{k // 2}" for k in range(2 * MIN_DOCUMENTS)]
    assert resampling_units(docs, len(docs)).unit == "documents"
    few = docs[:2 * (MIN_DOCUMENTS - 1)]
    assert resampling_units(few, len(few)).as_dict() == {
        "unit": "sentences", "n_units": len(few), "rule": f"sentences: {MIN_DOCUMENTS - 1} documents, fewer than "
                                                          f"{MIN_DOCUMENTS}"}
    assert resampling_units(few, len(few), unit="documents").n_units == MIN_DOCUMENTS - 1
    assert resampling_units(docs, len(docs), unit="sentences").unit == "sentences"
    gap = docs[:-1] + [""]  # one sentence without a document: sentences
    assert resampling_units(gap, len(gap)).unit == "sentences"
    assert resampling_units((), 5).n_units == 5  # unknown (scores saved before documents were kept)
    with pytest.raises(ConfigError, match="needs a document id on every sentence"):
        resampling_units(gap, len(gap), unit="documents")
    with pytest.raises(ConfigError, match="expected one of auto, documents, sentences"):
        resampling_units(docs, len(docs), unit="paragraphs")
    summed = resampling_units(["b", "a", "b"], 3, unit="documents").sum(np.array([[1, 2], [3, 4], [5, 6]], np.uint16))
    assert summed.dtype == np.int64 and summed.tolist() == [[6, 8], [3, 4]]  # first appearance order


def test_document_ids_read_from_newdoc_lines(tmp_path):
    rows = "1\tA\ta\tX\tX\t_\t0\troot\t_\t_\n2\tb\tb\tX\tX\t_\t1\tdep\t_\t_\n"
    text = (f"# newdoc id = GUM_academic_art\n# sent_id = GUM_academic_art-1\n{rows}\n"
            f"# sent_id = GUM_academic_art-2\n{rows}\n"
            f"# newdoc id = GUM_bio_byron\n# sent_id = GUM_bio_byron-1\n{rows}\n"
            f"# newdoc\n# sent_id = x-1\n{rows}\n")
    path = tmp_path / "t.conllu"
    path.write_text(text, encoding="utf-8")
    sents = list(read_treebank(path))
    assert [s.doc_id for s in sents] == ["GUM_academic_art", "GUM_academic_art", "GUM_bio_byron", "t.conllu#doc3"]
    units = resampling_units([s.doc_id for s in sents], len(sents), unit="documents")
    assert units.index.tolist() == [0, 0, 1, 2]
    plain = tmp_path / "p.conllu"
    plain.write_text(f"# sent_id = a\n{rows}\n# sent_id = b\n{rows}\n", encoding="utf-8")
    assert [s.doc_id for s in read_treebank(plain)] == [None, None]


def _widths(docs: list[str], correct: np.ndarray, total: np.ndarray) -> tuple[float, float]:
    """95% interval widths over documents and over sentences."""
    out = []
    for unit in ("documents", "sentences"):
        units = resampling_units(docs, len(docs), unit=unit)
        low, high = bootstrap_ci(units.sum(correct), units.sum(total))
        out.append(float(high - low))
    return out[0], out[1]


def test_simulation_shared_document_effect_widens_document_intervals():
    by_doc, by_sent = _widths(*_counts(1, 40, 0.15))  # documents differ: words of one document are not independent
    assert by_doc > 1.8 * by_sent
    by_doc, by_sent = _widths(*_counts(2, 40, 0.0))  # no document effect: both units agree
    assert 0.75 < by_doc / by_sent < 1.3


def _pairs(n_docs: int, seed: int = 0, n_sent: int = 48) -> list[tuple[Sentence, WordAttention]]:
    """Sentences of ``n_docs`` documents (round robin) whose head 2-3 attends from most words to their head."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_sent):
        n = int(rng.integers(3, 9))
        heads = [0] + [int(rng.integers(1, i + 1)) for i in range(1, n)]
        rels = ["root"] + [str(rng.choice(["nsubj", "obj", "det"])) for _ in range(n - 1)]
        w = rng.random((2, 3, n, n)).astype(np.float32)
        for i, h in enumerate(heads):
            if h and rng.random() < 0.7:
                w[1, 2, i, h - 1] = 5.0
        out.append((Sentence(f"s{k}", tuple("w" * n), tuple(heads), tuple(rels), doc_id=f"doc{k % n_docs}"),
                    WordAttention(w, np.zeros(n, bool), (0, 1), (0, 1, 2))))
    return out


def test_leaderboard_intervals_resample_documents(tmp_path):
    board = leaderboard_from_pairs(_pairs(2), select_pairs=_pairs(2, seed=1), min_count=1,
                                   interval_unit="documents")
    assert board.record.options["bootstrap"]["unit"] == "documents"
    assert board.record.options["bootstrap"]["n_units"] == 2
    assert "bootstrap over 2 documents" in board.format()
    auto = leaderboard_from_pairs(_pairs(2), select_pairs=_pairs(2, seed=1), min_count=1)  # 2 < 10 documents
    assert "bootstrap over 48 sentences" in auto.format()

    board = leaderboard_from_pairs(_pairs(12), select_pairs=_pairs(12, seed=1), min_count=1)
    assert board.record.options["bootstrap"]["unit"] == "documents"
    row = next(r for r in board.rows if r.relation == "ALL")
    heads = board.report
    units = interval_units(heads)
    c, t = heads.units.columns([heads.index("ALL")], [(heads.directions.index(row.direction), row.layer, row.head)])
    low, high = bootstrap_ci(units.sum(c), units.sum(t))  # the interval of the 12 documents' summed counts
    assert (row.ci_low, row.ci_high) == pytest.approx((low[0], high[0]))
    by_sentence = bootstrap_ci(c, t)
    assert (row.ci_low, row.ci_high) != pytest.approx((by_sentence[0][0], by_sentence[1][0]))

    board.write(tmp_path / "out", figures=False)
    assert "bootstrap over 12 documents" in (tmp_path / "out" / "leaderboard.md").read_text(encoding="utf-8")
    run = json.loads((tmp_path / "out" / "run.json").read_text(encoding="utf-8"))
    assert run["options"]["bootstrap"]["unit"] == "documents" and run["options"]["bootstrap"]["n_units"] == 12
    loaded = Leaderboard.load(board.save(tmp_path / "saved"))
    assert loaded.report.units.documents == board.report.units.documents
    assert interval_units(loaded.report).n_units == 12


def test_old_results_resample_sentences():
    res = score_split(_pairs(12))
    heads = res["heads"]
    old = type(heads.units)(heads.units.indptr, heads.units.relation, heads.units.total, heads.units.correct)
    assert old.documents == () and interval_units(type(heads)(**{**heads.__dict__, "units": old})).unit == "sentences"
    rows = leaderboard_rows(heads, res["baselines"], min_count=1, unit="sentences")
    row = next(r for r in rows if r.relation == "ALL")
    c, t = heads.units.columns([heads.index("ALL")], [(heads.directions.index(row.direction), row.layer, row.head)])
    assert (row.ci_low, row.ci_high) == pytest.approx(tuple(v[0] for v in bootstrap_ci(c, t)))
    record = RunRecord.of({"options": {"bootstrap": {"n_resamples": 1000, "unit": "sentence"}}})
    assert "bootstrap over sentences" in interval_note(record)  # a run.json written before n_units was recorded


def test_merged_shards_keep_each_sentence_document_in_order():
    from probes.analysis.dependency import HeadAccuracy

    pairs = _pairs(5, n_sent=30)
    first, second = HeadAccuracy(buffer=4), HeadAccuracy(buffer=7)
    for k, (sentence, attention) in enumerate(pairs):
        (first if k < 13 else second).update(sentence, attention)
    first.merge(second)
    assert first.compute().units.documents == tuple(s.doc_id for s, _ in pairs)
