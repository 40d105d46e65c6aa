"""Held-out selection, paired tests, Holm and near ties in the coreference and bridging reports (issue 10).

Simulated results with known answers (no model): every head and baseline at one true accuracy (nothing may be
flagged beyond the nominal level, margins unbiased), a planted strong head (found and flagged), same-data
selection (never tested), bridging bands merged or marked too few, and saved runs that keep the new fields.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from probes.analysis.bridging import OFFSETS, BridgingResult
from probes.analysis.coreference import BASELINES, COUNTS, DISTANCE_BANDS, MENTION_TYPES, CorefResult
from probes.reports.coreference import SelectionInfo, bridging_tables, coref_tables
from probes.results import equal

SEPARATE = SelectionInfo("separate", "sel.conllu", "rep.conllu")
SAME = SelectionInfo("same", "rep.conllu", "rep.conllu")


def fake_coref(rng: np.random.Generator, p_heads: np.ndarray, p_base: float = 0.5, n_units: int = 30,
               per_unit: int = 12, prefix: str = "d") -> CorefResult:
    """Pronoun mentions at distance 0, ``per_unit`` per document; head (l, h) right with chance p_heads[l, h]."""
    L, H = p_heads.shape
    nt, nb = len(MENTION_TYPES), len(DISTANCE_BANDS)
    correct = np.zeros((n_units, nt, nb, L, H), dtype=np.int64)
    total = np.zeros((n_units, nt, nb), dtype=np.int64)
    base = np.zeros((n_units, len(BASELINES), nt, nb), dtype=np.int64)
    total[:, 0, 0] = per_unit
    correct[:, 0, 0] = rng.binomial(per_unit, np.broadcast_to(p_heads, (n_units, L, H)))
    base[:, :, 0, 0] = rng.binomial(per_unit, p_base, size=(n_units, len(BASELINES)))
    counts = {t: {c: 0 for c in COUNTS} for t in MENTION_TYPES}
    return CorefResult(tuple(range(L)), tuple(range(H)), tuple(f"{prefix}{u}" for u in range(n_units)),
                       correct, total, base, counts)


def head_rows(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["kind"] == "head" and r["mention_type"] == "all"]


def test_null_heads_are_not_flagged_and_margins_are_unbiased() -> None:
    """Every head and baseline right half the time: held-out selection flags at most the nominal rate."""
    rng = np.random.default_rng(0)
    flagged_tables, margins = 0, []
    for _ in range(120):
        p = np.full((3, 4), 0.5)
        rep, sel = fake_coref(rng, p), fake_coref(rng, p, prefix="s")
        rows, md, _, correction = coref_tables(rep, sel, sel=SEPARATE, n_resamples=20)
        tested = [r for r in rows if r["kind"] == "head"]
        flagged_tables += any(r["significant"] for r in tested)
        margins.append(head_rows(rows)[0]["margin"])
        assert correction.n_tests == 3  # all and pronoun of the best-on-all row, pronoun per column (no other types)
    assert flagged_tables <= 12  # Holm keeps the family-wise rate at 5% (6 expected of 120)
    assert abs(np.mean(margins)) < 0.015  # unbiased: the mean margin within 1.5 points of 0 (sd of the mean ~0.5)


def test_same_data_selection_is_optimistic_and_never_tested() -> None:
    rng = np.random.default_rng(1)
    margins = []
    for _ in range(40):
        rep = fake_coref(rng, np.full((3, 4), 0.5))
        rows, md, _, correction = coref_tables(rep, None, sel=SAME, n_resamples=20)
        assert correction.n_tests == 0 and "0 tests in this table" in md and "optimistic" in md
        assert all(r["sig"] == "n/a (same data)" and not r["significant"] for r in rows if r["kind"] == "head")
        margins.append(head_rows(rows)[0]["accuracy"] - 0.5)
    assert np.mean(margins) > 0.02  # the best of 12 heads on the data it is reported on looks better than it is


def test_a_planted_head_is_found_flagged_and_its_twin_is_a_near_tie() -> None:
    rng = np.random.default_rng(2)
    p = np.full((3, 4), 0.5)
    p[1, 2] = 0.85
    rep, sel = fake_coref(rng, p), fake_coref(rng, p, prefix="s")
    twin = rep.correct.copy()
    twin[..., 2, 3] = twin[..., 1, 2]  # head 3-4 makes exactly the predictions of 2-3 on the report data
    rep = CorefResult(rep.layers, rep.heads, rep.units, twin, rep.total, rep.baseline_correct, rep.counts)
    rows, md, txt, correction = coref_tables(rep, sel, sel=SEPARATE, n_resamples=50)
    best = head_rows(rows)[0]
    assert best["head"] == "2-3" and best["significant"] and best["sig"] == "yes" and best["p_holm"] < 0.001
    assert best["near_ties"].split() == ["3-4"] and "1: 3-4" in txt
    assert best["margin"] == pytest.approx(best["accuracy"] - best["baseline_accuracy"])
    assert "Heads (and the baselines they are tested against) chosen on sel.conllu" in md
    assert f"bootstrap over {len(rep.units)} documents" in md and correction.footer() in md


# ---------------------------------------------------------------------------------- bridging
def fake_bridging(rng: np.random.Generator, links_per_band: list[int], p_best: float = 0.5,
                  prefix: str = "d", n_units: int = 20) -> BridgingResult:
    """Links spread over ``n_units`` documents; head 0-0 right with ``p_best``, others 0.2; nearest 0.2."""
    L, H, nb = 2, 2, len(DISTANCE_BANDS)
    total = np.zeros((n_units, nb), dtype=np.int64)
    for b, n in enumerate(links_per_band):
        total[:, b] = np.bincount(rng.integers(0, n_units, n), minlength=n_units)
    p = np.full((L, H), 0.2)
    p[0, 0] = p_best
    hits = rng.binomial(total[..., None, None], np.broadcast_to(p, (n_units, nb, L, H)))
    mass = total[..., None, None] * rng.uniform(0.05, 0.15, (n_units, nb, L, H))
    offsets = rng.binomial(total[..., None], 0.05, (n_units, nb, len(OFFSETS)))
    counts = {k: {b: 0 for b in DISTANCE_BANDS} for k in ("scored", "not_scorable", "same_head")}
    return BridgingResult((0, 1), (0, 1), tuple(f"{prefix}{u}" for u in range(n_units)), hits, mass, total,
                          0.1 * total, 0.02 * total, rng.binomial(total, 0.2), offsets, OFFSETS, counts)


def test_bridging_bands_are_merged_and_both_scores_share_one_holm_family() -> None:
    rng = np.random.default_rng(3)
    rep = fake_bridging(rng, [40, 20, 15, 5, 2], p_best=0.9)
    sel = fake_bridging(rng, [40, 20, 15, 5, 2], p_best=0.9, prefix="s")
    rows, md, txt, correction = bridging_tables(rep, sel, sel=SEPARATE, n_resamples=30, min_links=30)
    assert [(r["band"], r["scored"]) for r in rows] == [("all", 82), ("0", 40), ("1+", 42)]
    assert correction.n_tests == 6  # argmax and mass, three rows each
    assert rows[0]["accuracy_head"] == "1-1" and rows[0]["significant"]
    assert rows[0]["baseline"] in ("nearest mention",) or rows[0]["baseline"].startswith("offset")
    assert "Argmax accuracy" in md and "Attention-mass ratio" in md and "uniform floor" in md
    assert rows[0]["uniform_floor"] == pytest.approx(0.02)
    # too few links everywhere: one row, marked and not tested
    few = fake_bridging(rng, [5, 3, 0, 0, 1])
    rows, md, _, correction = bridging_tables(few, few, sel=SEPARATE, n_resamples=30, min_links=30)
    assert [r["band"] for r in rows] == ["all"] and correction.n_tests == 0
    assert rows[0]["sig"] == rows[0]["mass_sig"] == "too few links (< 30)"


def test_bridging_best_offset_is_chosen_on_the_selection_data() -> None:
    rng = np.random.default_rng(4)
    rep, sel = fake_bridging(rng, [60, 0, 0, 0, 0]), fake_bridging(rng, [60, 0, 0, 0, 0], prefix="s")
    planted = sel.offset_hits.copy()
    planted[:, 0, OFFSETS.index(-7)] = sel.total[:, 0]  # offset -7 always right on the selection data only
    sel = BridgingResult(**{**sel.__dict__, "offset_hits": planted})
    rows, *_ = bridging_tables(rep, sel, sel=SEPARATE, n_resamples=30)
    assert rows[0]["offset"] == -7 and rows[0]["baseline"] == "offset -7"
    assert rows[0]["offset_accuracy"] == pytest.approx(rep.offset_accuracy()[OFFSETS.index(-7)])


# ---------------------------------------------------------------------------------- saved runs
def test_split_runs_save_load_and_write_their_selection(tmp_path: Path) -> None:
    from probes.runs.coreference import BridgingRun, CoreferenceRun

    rng = np.random.default_rng(5)
    p = np.full((3, 4), 0.5)
    record = {"command": "coref", "options": {"corpus": "gum.conllu"},
              "selection": {"mode": "split", "selected_on": "gum.conllu, selection half (30 documents)",
                            "reported_on": "gum.conllu, report half (30 documents)"}}
    run = CoreferenceRun(fake_coref(rng, p), fake_coref(rng, p, prefix="s"), record, n_resamples=20)
    loaded = CoreferenceRun.load(run.save(tmp_path / "saved"))
    assert equal(loaded, run) and loaded.selection_info.mode == "split" and loaded.tables()[1] == run.tables()[1]
    assert len(run.whole.units) == 60 and run.whole.total.sum() == 720  # scores.csv: both halves
    paths = loaded.write(tmp_path / "out", figures=False)
    written = json.loads(paths["run.json"].read_text())
    assert written["selection"]["mode"] == "split" and "sha256" in written["selection"]["rule"]
    assert written["significance"]["method"] == "holm" and written["significance"]["n_tests"] == 3
    with (tmp_path / "out" / "coref_leaderboard.csv").open(encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))  # baselines and tested heads in one file: every column kept
    tested = [r for r in table if r["p_holm"] not in ("", "nan")]
    assert len(tested) == 3 and {"p_value", "near_ties", "margin", "significant"} <= set(table[0])
    assert not any(k.endswith("_cell") for k in table[0])
    bridging_record = {**record, "command": "bridging"}
    links = BridgingRun(fake_bridging(rng, [40, 0, 0, 0, 0]), fake_bridging(rng, [40, 0, 0, 0, 0], prefix="s"),
                        bridging_record, n_resamples=20, min_links=12)
    again = BridgingRun.load(links.save(tmp_path / "bridging"))
    assert again.min_links == 12 and equal(again, links)
    files = again.write(tmp_path / "bout")
    assert {"bridging_heatmaps.png", "bridging_mass_heatmaps.png"} <= set(files)  # one colour scale each
