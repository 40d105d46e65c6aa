"""Issue 10, item 6: Hewitt & Liang's control task, selectivity intervals, seeds, disjoint per-head selection."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from probes.analysis.split import half_of
from probes.corpora.types import Sentence
from probes.heads.intervals import resample_counts
from probes.probing import ControlTask, OffsetControlTask
from probes.probing.controls import BEHAVIOURS, make_control
from probes.probing.per_head import PerHeadScores
from probes.probing.stats import mean_sd, paired_difference
from probes.probing.summaries import per_head_rows
from probes.probing.synthetic import planted_pairs
from probes.probing.train import ShuffleBuffer, fit_together


def _sentence(words: list[str], sent_id: str = "s") -> Sentence:
    m = len(words)
    return Sentence(sent_id, tuple(words), tuple([0] + [1] * (m - 1)), tuple(["root"] + ["dep"] * (m - 1)))


# ----------------------------------------------------------------------------- control task definition
def test_hewitt_liang_control_by_hand():
    """Each type's behaviour is one of self / first / last, fixed across occurrences, and gives those heads."""
    ctl = ControlTask(random_state=0)
    a = _sentence(["the", "cat", "saw", "the", "dog", "."], "a")
    b = _sentence(["dog", "the", "ran"], "b")
    for sent in (a, b):
        heads = ctl.heads(sent)
        m = sent.n_words
        for i, (word, head) in enumerate(zip(sent.words, heads), start=1):
            expected = {"self": i, "first": 1, "last": m}[ctl.behaviour(word)]
            assert head == expected, (word, i)
        assert all(1 <= h <= m for h in heads)  # never ROOT
    # "the" at positions 1 and 4 of a, and 2 of b: one behaviour for the type
    assert len({ctl.behaviour("the") for _ in range(3)}) == 1
    rel = ctl.relabel(a)
    assert rel.relations == a.relations and rel.words == a.words and rel.heads == ctl.heads(a)


def test_hewitt_liang_control_three_behaviours_uniform_and_seeded():
    types = [f"type{k}" for k in range(9000)]
    ctl = ControlTask(random_state=3)
    draws = np.array([BEHAVIOURS.index(ctl.behaviour(t)) for t in types])
    assert set(draws) == {0, 1, 2}
    assert np.allclose(np.bincount(draws) / len(types), 1 / 3, atol=0.02)  # uniform, as their code
    # seeded: the same seed gives the same mapping, another seed a different one (about 2/3 of types change)
    same = ControlTask(random_state=3)
    other = ControlTask(random_state=4)
    assert all(same.behaviour(t) == ctl.behaviour(t) for t in types[:500])
    changed = np.mean([other.behaviour(t) != ctl.behaviour(t) for t in types[:3000]])
    assert 0.6 < changed < 0.73
    assert ctl.with_seed(4).behaviour("type7") == other.behaviour("type7")
    # exact word forms are the types (their code does not lowercase)
    assert any(ctl.behaviour(t) != ctl.behaviour(t.upper()) for t in types[:50])


def test_make_control_and_offset_option():
    sents = [s for s, _ in planted_pairs(30, random_state=0)]
    assert isinstance(make_control("hewitt-liang", 1), ControlTask)
    off = make_control("offset", 1, sents)
    assert isinstance(off, OffsetControlTask) and off.offsets_.size > 0
    again = off.with_seed(2)
    assert np.array_equal(again.offsets_, off.offsets_) and again.random_state == 2
    with pytest.raises(ValueError):
        make_control("bogus")


# ----------------------------------------------------------------------------- selectivity interval
def test_paired_difference_by_hand():
    a = np.array([3, 1, 2, 4])
    b = np.array([1, 1, 2, 2])
    n = np.array([4, 2, 3, 5])
    out = paired_difference(a, b, n, n_resamples=500, random_state=7)
    assert out["difference"] == pytest.approx((10 - 6) / 14)
    draws = resample_counts(4, 500, 7)
    diff = (draws @ (a - b)) / (draws @ n)
    assert out["ci_low"] == pytest.approx(np.quantile(diff, 0.025))
    assert out["ci_high"] == pytest.approx(np.quantile(diff, 0.975))
    # averaged over seeds first: two seeds (a, b) and (a + 1, b) have difference of the mean counts
    two = paired_difference(np.stack([a, a + 1]), np.stack([b, b]), n)
    assert two["difference"] == pytest.approx((10 + 2 - 6) / 14)


def test_paired_selectivity_interval_covers_truth_in_simulation():
    """Task and control correct per word with probabilities 0.7 and 0.6: the paired 95% interval covers 0.1."""
    rng = np.random.default_rng(0)
    covered, widths = 0, []
    for _ in range(200):
        n = rng.integers(5, 20, size=80)
        shared = rng.random(80)  # sentence difficulty shared by task and control: pairing narrows the interval
        a = rng.binomial(n, np.clip(0.7 + 0.2 * (shared - 0.5), 0, 1))
        b = rng.binomial(n, np.clip(0.6 + 0.2 * (shared - 0.5), 0, 1))
        out = paired_difference(a, b, n, n_resamples=300, random_state=1)
        covered += out["ci_low"] <= 0.1 <= out["ci_high"]
        widths.append(out["ci_high"] - out["ci_low"])
    assert 0.9 <= covered / 200 <= 0.99


def test_mean_sd():
    assert mean_sd([0.5, 0.7, 0.9]) == pytest.approx((0.7, 0.2))
    assert mean_sd([0.4]) == (0.4, 0.0)


# ----------------------------------------------------------------------------- seeds
def test_shuffle_buffer_orders_differ_by_seed_and_keep_every_item():
    def order(seed: int) -> list[int]:
        buf, out = ShuffleBuffer(seed, size=8), []
        for k in range(50):
            out += buf.push(k)
        return out + buf.drain()

    assert sorted(order(0)) == list(range(50))
    assert order(0) == order(0) and order(0) != order(1)


def test_seeds_change_probe_init_and_order():
    from probes.probing import AttnParser

    train = list(planted_pairs(30, random_state=0))
    probes = [AttnParser(progress=False, random_state=s) for s in (0, 0, 1)]
    fit_together(probes, train, orders=[0, 0, 1], progress=False)
    t = [p.module_.theta.detach().numpy() for p in probes]
    assert np.array_equal(t[0], t[1]) and not np.allclose(t[0], t[2])
    # same init, different order: different fits
    same_init = [AttnParser(progress=False, random_state=0) for _ in range(2)]
    fit_together(same_init, train, orders=[0, 1], progress=False)
    assert not np.allclose(same_init[0].module_.theta.detach().numpy(), same_init[1].module_.theta.detach().numpy())


@pytest.fixture(scope="module")
def seeded_run():
    from probes.runs.probing import run_probes

    train, test = list(planted_pairs(50, random_state=0)), list(planted_pairs(40, random_state=1))
    return run_probes(train, test, kinds=["per-head", "attn", "right-branching"], control=ControlTask(0), seeds=3,
                      random_state=5, min_count=1, progress=False)


def test_seeds_mean_sd_and_control_mapping(seeded_run):
    run = seeded_run
    assert run.seeds == (5, 6, 7)
    assert [c["random_state"] for c in run.facts["options"]["control_task"]] == [0, 1, 2]  # control seed + k
    rb = next(r for r in run.parsers if r.probe == "right-branching")
    assert rb.uas_sd == pytest.approx(0.0, abs=1e-12) and rb.n_seeds == 3  # no parameters: the same UAS for every seed ...
    assert rb.control_uas != rb.control_uas  # a fixed rule learns nothing: no control (NaN), no comparison
    assert not any(c["a"] == "right-branching" for c in run.comparisons)
    # per seed UAS from the per-head scores' own counts: the table's mean and sd are theirs
    accs = [s.correct[s.relations.index("ALL")] / s.counts[s.relations.index("ALL")] for s in run.per_head]
    assert not np.allclose(accs[0], accs[1])  # different training orders
    listed = run.per_head_rows()[0][0]
    layer, head = (int(x) - 1 for x in listed["head"].split("-"))
    values = [a[layer, head] for a in accs]
    assert listed["accuracy"] == pytest.approx(np.mean(values))
    assert listed["accuracy_sd"] == pytest.approx(np.std(values, ddof=1))
    attn = next(r for r in run.parsers if r.probe == "Attn")
    assert attn.selectivity_ci_low <= attn.selectivity <= attn.selectivity_ci_high
    comp = {(c["a"], c["b"]) for c in run.comparisons}
    assert ("Attn", "right-branching") in comp and ("Attn", "Attn [control task]") in comp


def test_selection_is_recorded_and_written(seeded_run, tmp_path):
    import json

    run = seeded_run
    assert run.selection["mode"] == "split" and "sha256" in run.selection["rule"]
    paths = run.write(tmp_path / "out", figures=False)
    record = json.loads(paths["run.json"].read_text())
    assert record["selection"]["mode"] == "split"
    assert record["significance"]["per_head"]["method"] == "holm"
    assert record["significance"]["comparisons"]["n_tests"] == len(run.comparisons)
    md = paths["per_head.md"].read_text()
    assert "held out" not in md and "selection half" in md and "tests in this table" in md
    assert "Holm" in paths["parsers.md"].read_text()


# ----------------------------------------------------------------------------- disjoint selection
def _scores(ids: list[str], hits: dict[str, np.ndarray]) -> PerHeadScores:
    """One relation (ALL), 1 layer x 3 heads + floor; ``hits[id]`` = correct of (head0, head1, head2, floor)
    out of 10 words per sentence."""
    units = [(np.array([0]), hits[i][None, :].astype(np.int64), np.array([10])) for i in ids]
    correct = np.sum([hits[i] for i in ids], axis=0).astype(np.int64)
    return PerHeadScores(relations=["ALL"], counts=np.array([10 * len(ids)]),
                         correct=correct[None, None, :3], floor_correct=correct[None, 3],
                         argmax_correct=np.zeros((1, 2, 1, 3), dtype=np.int64), unit_correct=units)


def test_per_head_head_is_chosen_on_the_selection_half_only():
    """Head 1 is perfect on the report half only; head 0 is good on the selection half: head 0 is reported."""
    ids = [f"sent-{k}" for k in range(200)]
    sel_ids = [i for i in ids if half_of(i) == "select"]
    rep_ids = [i for i in ids if half_of(i) == "report"]
    assert sel_ids and rep_ids and not set(sel_ids) & set(rep_ids)
    hits = {i: np.array([7, 2, 1, 3]) if i in sel_ids else np.array([6, 10, 1, 3]) for i in ids}
    select, report = _scores(sel_ids, hits), _scores(rep_ids, hits)
    rows, correction = per_head_rows([select], [report], None, min_count=1, same_data=False)
    assert rows[0]["head"] == "1-1"  # chosen on the selection half, not by its report score
    assert rows[0]["accuracy"] == pytest.approx(0.6) and rows[0]["select_accuracy"] == pytest.approx(0.7)
    assert rows[0]["near_ties"] == ["1-2"]  # head 1 is better on the report data: listed, not hidden
    assert rows[0]["significant"] == "yes" and correction.n_tests == 1
    # same-data selection picks the report-half winner and is never tested
    same, corr = per_head_rows([report], [report], None, min_count=1, same_data=True)
    assert same[0]["head"] == "1-2" and same[0]["significant"] == "n/a (same data)" and corr.n_tests == 0


def test_run_chooses_per_head_heads_on_selection_half(seeded_run):
    run = seeded_run
    sel, rep = run.per_head_select[0], run.per_head[0]
    assert len(sel.unit_correct) + len(rep.unit_correct) == 40
    ids_rep = [f"synthetic-{k}" for k in range(40) if half_of(f"synthetic-{k}") == "report"]
    assert len(rep.unit_correct) == len(ids_rep)  # report scores are over the report half only
    same = dataclasses.replace(run, per_head_select=(), selection={"mode": "same"})
    assert all(r["significant"] == "n/a (same data)" for r in same.per_head_rows()[0])


@pytest.mark.parametrize("mode", ["same", "separate"])
def test_run_selection_modes_same_and_separate(mode):
    from probes.runs.probing import run_probes

    train, test = list(planted_pairs(40, random_state=0)), list(planted_pairs(20, random_state=1))
    other = list(planted_pairs(12, random_state=2))
    run = run_probes(train, test, kinds=["per-head", "label"], seeds=1, min_count=1, progress=False,
                     select_on="same" if mode == "same" else other, select_name="other data")
    assert run.selection["mode"] == mode
    assert len(run.per_head[0].unit_correct) == 20 and len(run.label.correct) == 20  # each sentence scored once
    if mode == "same":
        assert run.per_head_select == () and len(run.label.select_correct) == 20
        assert all(r["significant"] == "n/a (same data)" for r in run.per_head_rows()[0])
    else:
        assert len(run.per_head_select[0].unit_correct) == 12 and len(run.label.select_correct) == 12
        assert run.selection["selected_on"] == "other data"
