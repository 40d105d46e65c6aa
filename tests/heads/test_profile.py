"""Each head's best relation: chosen on the selection half, read on the report half (probes.heads.profile)."""

from __future__ import annotations

import numpy as np

from probes.heads.profile import best_relations, syntactic_heads
from probes.heads.selection import leaderboard_rows
from tests.heads.test_selection_stats import N_REL, _half


def test_planted_relation_is_each_planted_heads_best_and_read_on_the_report_half():
    rng = np.random.default_rng(3)
    planted = {5: 0.9}  # head (direction 0, layer 1, head 2) is right 90% of the time on relation r5
    report, report_base = _half(rng, 400, 0.3, 0.3, planted)
    select, select_base = _half(rng, 400, 0.3, 0.3, planted)
    names = [f"r{i}" for i in range(N_REL)]
    profile = best_relations(report, report_base, names, select=select, select_baselines=select_base)
    flat = 1 * 3 + 2  # layer 1, head 2
    assert profile.relation[flat] == "r5" and profile.direction[flat] == report.directions[0]
    r = report.index("r5")
    # accuracy and margin are the report half's, not the selection half's
    assert profile.accuracy[1, 2] == report.correct[0, 1, 2, r] / report.total[r]
    k, _ = select_base.best_offset("r5")  # the baseline was chosen on the selection half ...
    base = report_base.correct[report_base.offsets.index(k), report_base.index("r5")] / report_base.total[r]
    assert np.isclose(profile.margin[1, 2], profile.accuracy[1, 2] - base)  # ... and scored on the report half
    assert profile.margin[1, 2] > 0.4
    table = profile.to_pandas()
    assert list(table.columns[:5]) == ["layer", "head", "head_name", "relation", "direction"]
    assert table.loc[flat, "head_name"] == "2-3"


def test_syntactic_heads_only_the_significant_held_out_winners():
    rng = np.random.default_rng(4)
    report = _half(rng, 300, 0.3, 0.3, {7: 0.9})
    select = _half(rng, 300, 0.3, 0.3, {7: 0.9})
    rows = leaderboard_rows(*report, select=select[0], select_baselines=select[1], min_count=1, n_resamples=100)
    labels = syntactic_heads(rows, (0, 1), (0, 1, 2))
    assert labels[5] == "r7 d2h"
    assert all(label == "" for i, label in enumerate(labels) if i != 5) or \
        sum(bool(x) for x in labels) <= 2  # at most a chance winner beside the planted head (alpha after Holm)
    same = leaderboard_rows(*report, min_count=1, n_resamples=100)  # same-data selection: never syntactic
    assert syntactic_heads(same, (0, 1), (0, 1, 2)) == ("",) * 6


def test_null_heads_margins_are_unbiased_on_the_report_half():
    """A null head's selection margin is the largest of 80 noisy margins (biased upwards); the margin read on the
    report half is not (mean over 20 simulated tables of 6 null heads: within 3 standard errors of 0)."""
    names = [f"r{i}" for i in range(N_REL)]
    report_m, select_m = [], []
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        report, report_base = _half(rng, 200, 0.3, 0.3, {})
        select, select_base = _half(rng, 200, 0.3, 0.3, {})
        profile = best_relations(report, report_base, names, select=select, select_baselines=select_base)
        report_m += profile.margin.ravel().tolist()
        select_m += profile.selection_margin.ravel().tolist()
    report_m, select_m = np.array(report_m), np.array(select_m)
    se = report_m.std(ddof=1) / np.sqrt(len(report_m))
    assert abs(report_m.mean()) < 3 * se
    assert select_m.mean() > report_m.mean() + 10 * se
