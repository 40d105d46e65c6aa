"""Q2, specialised heads: the weighted test equals the package's test on the resampled sentences, and on a
fake model exactly the planted heads are specialised."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from probes.compare.inputs import profile_of
from probes.compare.specialisation import draw_fractions, head_counts, specialisation, weighted_z
from probes.compare.tests import q2_tests
from probes.heads.inference import paired_z
from tests.compare.fakes import fake_atlas

MODELS = {"trained": {"kind": "trained", "spec": "package:x", "base": "package:x", "seed": None},
          "random": {"kind": "random-init", "spec": "random-init:package:x@1", "base": "package:x", "seed": 1}}


def test_weighted_z_equals_paired_z_on_the_expanded_resample() -> None:
    rng = np.random.default_rng(0)
    total = rng.integers(0, 6, size=(15, 4))  # some sentences without words of a relation
    diff = rng.integers(-3, 4, size=(15, 4)).clip(-total, total)
    weights = rng.multinomial(15, np.full(15, 1 / 15), size=6).astype(float)  # (6, 15)
    z, margin = weighted_z(diff, total, weights)
    for r in range(6):
        take = np.repeat(np.arange(15), weights[r].astype(int))  # the resample written out
        np.testing.assert_allclose(z[r], paired_z(diff[take], total[take]), rtol=1e-9, equal_nan=True)
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(margin[r], diff[take].sum(0) / total[take].sum(0), equal_nan=True)


def test_exactly_the_planted_heads_are_specialised() -> None:
    planted = frozenset({1, 6})  # layer 1 head 2 and layer 2 head 3 (1-based) of 2 x 4
    atlas = fake_atlas((2, 4), perfect=planted, seed=0)
    found = specialisation(atlas.board, profile_of(atlas.board, atlas), "trained", "d", n_resamples=200)
    assert found.mask.reshape(-1).nonzero()[0].tolist() == sorted(planted)
    assert found.row.n_specialised == 2 and found.row.fraction == pytest.approx(2 / 8)
    assert found.row.n_tests == 8 and sum(found.row.per_relation.values()) == 2
    # a perfect head beats its baseline on every resample: the interval is the point
    assert (found.row.low, found.row.high) == (0.25, 0.25)
    assert found.row.selected_on.endswith("(second half)") and found.row.reported_on == "sample:dev"
    diff, total, testable = head_counts(atlas.board, atlas.profile)
    assert diff.shape == (atlas.board.report.n_units, 8) and testable.all()
    perfect_margin = diff[:, 1].sum() / total[:, 1].sum()
    assert perfect_margin == pytest.approx(atlas.profile.margin[0, 1])  # the profile's margin, per sentence


def test_no_planted_head_no_specialised_head_and_the_difference_is_tested() -> None:
    trained = fake_atlas((2, 4), perfect=frozenset({1, 6}), seed=0)
    random = fake_atlas((2, 4), seed=1)
    spec_t = specialisation(trained.board, trained.profile, "trained", "d", n_resamples=300, seed=0)
    spec_r = specialisation(random.board, random.profile, "random", "d", n_resamples=300, seed=0)
    assert spec_r.row.n_specialised == 0 and spec_r.row.n_tests == 8
    (test,) = q2_tests({("trained", "d"): spec_t, ("random", "d"): spec_r}, MODELS, n_resamples=300, seed=0)
    assert test.value == pytest.approx(0.25) and (test.low, test.high) == (0.25, 0.25)
    assert test.p_value < 1e-12 and "paired" in test.method  # every draw differs by 0.25: no spread


def test_draw_fractions_of_unweighted_draw_is_the_point_answer() -> None:
    atlas = fake_atlas((2, 4), perfect=frozenset({3}), seed=2)
    diff, total, testable = head_counts(atlas.board, atlas.profile)
    once = np.ones((1, diff.shape[0]))  # every sentence once: the data itself
    assert draw_fractions(diff, total, testable, once)[0] == pytest.approx(1 / 8)


def test_heads_chosen_on_the_reported_data_are_not_tested() -> None:
    atlas = fake_atlas((2, 4), perfect=frozenset({1}), seed=0)
    same = dataclasses.replace(atlas.board, select=None, select_baselines=None)
    assert "no held-out test" in specialisation(same, atlas.profile, "m", "d")
