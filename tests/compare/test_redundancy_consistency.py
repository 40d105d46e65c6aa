"""Q3 (pruning) and Q4 (consistency) against hand-computed values, and the Holm family of the report."""

from __future__ import annotations

import numpy as np
import pytest

from probes.analysis.dependency import HeadScores
from probes.compare.consistency import consistency
from probes.compare.redundancy import rank_rho, redundancy
from probes.compare.tests import family, partners, q4_tests, raw_test
from probes.runs.importance import Pruning
from tests.importance.cases import importance_result, pruning_result


def test_removable_fractions_random_band_and_q3_test_by_hand() -> None:
    start = importance_result()
    margin = start.importance * 2 + 1  # same order as importance: rho 1
    found = redundancy(Pruning(model="m", curves=pruning_result(), start=start), "m", "sample", margin=margin,
                       confidence=-start.importance, tolerance=0.05, n_resamples=200)
    row = found.row
    # loss curves (base 1.0, tolerance 5%): importance 1.02 then 1.3 -> 1/3; specialised-last 1.04, 1.06 -> 1/3;
    # random:0 1.2 and random:1 1.1 -> 0
    assert row.removable == pytest.approx({"importance": 1 / 3, "specialised-last": 1 / 3})
    assert (row.random_low, row.random_median, row.random_high) == (0.0, 0.0, 0.0)
    assert (row.rho_margin, row.rho_margin_low, row.rho_margin_high) == pytest.approx((1.0, 1.0, 1.0))
    assert row.rho_confidence == pytest.approx(-1.0)
    assert (row.selected_on, row.reported_on) == ("sample:train", "sample:dev")
    np.testing.assert_allclose(found.curve.importance, [1.0, 1.02, 1.3, 3.0])
    np.testing.assert_allclose(found.curve.random_median, [1.0, 1.15, 2.25, 3.0])
    assert list(found.curve.orders) == ["specialised-last"]


def test_redundancy_without_margin_or_start_says_so() -> None:
    found = redundancy(Pruning(model="m", curves=pruning_result(), start=None), "m", "d")
    assert np.isnan(found.row.rho_margin) and np.isnan(found.row.rho_confidence)
    assert len(found.missing) == 3


def test_rank_rho_drops_heads_without_values() -> None:
    rho, low, high = rank_rho([1, 2, 3, 4, np.nan], [2, 4, 6, 8, 1], n_resamples=50)
    assert rho == pytest.approx(1.0)
    assert np.isnan(rank_rho([1, 2], None)[0])


def scores(accuracy: np.ndarray, relations: tuple[str, ...]) -> HeadScores:
    """HeadScores with these accuracies ``(D, L, H, R)`` out of 100 words per relation."""
    return HeadScores((accuracy * 100).round().astype(np.int64), np.full(len(relations), 100), relations,
                      ("dep_to_head", "head_to_dep"), (0, 1), (0, 1, 2))


def test_consistency_same_order_and_reversed_order_by_hand() -> None:
    rng = np.random.default_rng(0)
    acc = rng.permutation(24).reshape(2, 2, 3, 2) / 100 + 0.1  # distinct accuracies, (D, L, H, R)
    other = acc.copy()
    other[..., 1] = 0.5 - acc[..., 1]  # relation b: ranks reversed
    found = consistency("m", ("dev", scores(acc, ("a", "b"))), ("test", scores(other, ("a", "b"))), ["a", "b"],
                        n_resamples=200)
    assert found.rhos == pytest.approx({"a": 1.0, "b": -1.0})
    assert found.row.rho == pytest.approx(0.0) and found.row.same_head == 0.5
    assert (found.row.low, found.row.high) == (-1.0, 1.0)  # two relations resampled: means -1, 0 or 1
    assert found.row.relations == ("a", "b") and found.row.n_relations == 2


def test_q4_difference_of_rho_between_a_trained_and_a_random_model() -> None:
    acc = np.arange(24).reshape(2, 2, 3, 2) / 100 + 0.1
    same = consistency("t", ("dev", scores(acc, ("a", "b"))), ("test", scores(acc, ("a", "b"))), ["a", "b"])
    flipped = acc.copy()
    flipped[..., 0] = 0.5 - acc[..., 0]
    half = consistency("r", ("dev", scores(acc, ("a", "b"))), ("test", scores(flipped, ("a", "b"))), ["a", "b"])
    models = {"t": {"kind": "trained", "spec": "s"}, "r": {"kind": "random-init", "base": "s"}}
    (test,) = q4_tests({"t": [same], "r": [half]}, models, n_resamples=300, seed=0)
    # rho differences per relation: a: 1 - (-1) = 2, b: 1 - 1 = 0 -> mean 1; draws are means of two of {2, 0}
    assert test.value == pytest.approx(1.0) and (test.low, test.high) == (0.0, 2.0)


def test_partners_match_the_base_else_every_trained_model() -> None:
    models = {"a": {"kind": "trained", "spec": "package:a"}, "b": {"kind": "trained", "spec": "package:b"},
              "ra": {"kind": "random-init", "base": "package:a"}, "rx": {"kind": "random-init", "base": "other"}}
    assert partners(models) == [("a", "ra"), ("a", "rx"), ("b", "rx")]


def test_family_is_holm_over_every_test() -> None:
    raw = [raw_test("q1", "x", "m", 0.1, 0.0, 0.2, 0.01), raw_test("q2", "y", "m", 0.1, 0.0, 0.2, 0.04),
           raw_test("q3", "z", "m", 0.1, 0.0, 0.2, 0.03), raw_test("q4", "w", "m", 0.1, 0.0, 0.2, float("nan"))]
    tests = family(raw)
    assert [t.p_adjusted for t in tests[:3]] == pytest.approx([0.03, 0.06, 0.06])
    assert [t.significant for t in tests] == [True, False, False, False]
    assert np.isnan(tests[3].p_adjusted)
