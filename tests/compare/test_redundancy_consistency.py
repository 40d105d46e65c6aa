"""Q3 (pruning) and Q4 (consistency) against hand-computed values, and the Holm family of the report."""

from __future__ import annotations

from dataclasses import replace

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
    # loss curves: full 1.0, every head ablated 3.0, so tau = 5% allows 0.05 x 2.0 = 0.1 (the relative rule; the
    # absolute 5% of 1.0 would allow 0.05 and give specialised-last and random:1 only 1/3 and 0):
    # importance 1.02 then 1.3 -> 1/3; specialised-last 1.04, 1.06, then 3.0 -> 2/3; random:0 1.2 -> 0;
    # random:1 1.1 (exactly at the edge) then 2.5 -> 1/3
    assert row.rule == "range" and (row.full_loss, row.ablated_loss) == (1.0, 3.0)
    assert row.removable == pytest.approx({"importance": 1 / 3, "specialised-last": 2 / 3})
    assert (row.random_low, row.random_median, row.random_high) == pytest.approx((0.0, 1 / 6, 1 / 3))
    # areas: trapezoids of width 1/3 over (loss - 1) / 2: importance [0, .01, .15, 1] -> 0.22, specialised-last
    # [0, .02, .03, 1] -> 0.55 / 3; random:0 [0, .1, .5, 1] -> 1.1 / 3, random:1 [0, .05, .75, 1] -> 1.3 / 3
    assert row.area == pytest.approx({"importance": 0.22, "specialised-last": 0.55 / 3})
    assert (row.random_area_low, row.random_area_median, row.random_area_high) == pytest.approx(
        (1.1 / 3, 1.2 / 3, 1.3 / 3))
    assert row.n_random == 2
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


def test_redundancy_of_a_curve_that_stops_short_says_why() -> None:
    short = replace(pruning_result(), n_pruned=np.array([0, 2, 4, 5]))  # 6 heads, the last step prunes 5
    found = redundancy(Pruning(model="m", curves=short, start=importance_result()), "m", "d")
    assert np.isnan(found.row.removable["importance"]) and np.isnan(found.row.ablated_loss)
    assert any("expected its last step to prune all 6 heads" in m for m in found.missing)


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


# --- Q4: nested relations and the reliability correction ------------------------------------------------------


def with_units(correct: np.ndarray, words: np.ndarray, documents: tuple[str, ...] = ()) -> HeadScores:
    """HeadScores of 2 directions x 1 layer x H heads kept per sentence: ``correct`` ``(N, R, 2, 1, H)`` of
    ``words`` ``(N, R)`` words (every relation in every sentence)."""
    from probes.analysis.unit_counts import UnitCounts

    n, r = words.shape
    units = UnitCounts(np.arange(0, n * r + 1, r, dtype=np.int64), np.tile(np.arange(r), n).astype(np.int32),
                       words.reshape(-1).astype(np.int32), correct.reshape(-1, *correct.shape[2:]).astype(np.uint16),
                       documents)
    return HeadScores(np.moveaxis(correct.sum(axis=0), 0, -1).astype(np.int64), words.sum(axis=0).astype(np.int64),
                      tuple(f"r{k}" for k in range(r)), ("dep_to_head", "head_to_dep"), (0,),
                      tuple(range(correct.shape[-1])), n, units)


def test_nested_relations_are_left_out() -> None:
    from probes.compare.consistency import unnested

    listed = ["nmod", "nmod:poss", "nmod:*", "obl:*", "det", "ALL", "ALL-nopunct", "amod (head left)",
              "amod:x (head left)", "amod:* (head left)", "amod:* (head right)"]
    # nmod:* holds nmod and nmod:poss; obl:* alone is kept (nothing of it listed); a sided pool only by its side
    assert unnested(listed) == ["nmod", "nmod:poss", "obl:*", "det", "amod (head left)", "amod:x (head left)",
                                "amod:* (head right)"]


def test_split_half_reliability_by_hand_and_by_documents() -> None:
    from scipy.stats import spearmanr

    from probes.compare.consistency import spearman_brown, split_half

    # 4 sentences, 6 predictors (2 directions x 3 heads), 10 words each; sentences 0, 2 are one half, 1, 3 the other
    half_a = np.array([[1, 2, 3, 4, 5, 6], [2, 2, 4, 4, 6, 6]])  # correct counts of sentences 0 and 2
    half_b = np.array([[2, 1, 4, 3, 6, 5], [2, 1, 3, 5, 4, 6]])  # of sentences 1 and 3
    correct = np.stack([half_a[0], half_b[0], half_a[1], half_b[1]]).reshape(4, 1, 2, 1, 3)
    kept = with_units(correct, np.full((4, 1), 10))
    rho = spearmanr(half_a.sum(axis=0), half_b.sum(axis=0)).statistic  # scipy on the two halves' accuracies
    assert split_half(kept, ["r0"])["r0"] == pytest.approx(2 * rho / (1 + rho))
    assert spearman_brown(0.5) == pytest.approx(2 / 3) and np.isnan(spearman_brown(-1.0))
    # with document ids the halves are alternate documents: sentences 0, 1 (doc a) against 2, 3 (doc b)
    by_doc = with_units(correct, np.full((4, 1), 10), documents=("a", "a", "b", "b"))
    rho_doc = spearmanr(correct[:2].sum(axis=0).reshape(-1), correct[2:].sum(axis=0).reshape(-1)).statistic
    assert split_half(by_doc, ["r0"])["r0"] == pytest.approx(2 * rho_doc / (1 + rho_doc))
    assert rho_doc != pytest.approx(rho)
    assert np.isnan(split_half(scores(np.full((2, 2, 3, 1), 0.5), ("r0",)), ["r0"])["r0"])  # no per-sentence counts


def test_corrected_rho_is_capped_and_flagged() -> None:
    from probes.compare.consistency import corrected_rho

    assert corrected_rho(0.4, 0.5, 0.8) == pytest.approx((0.4 / np.sqrt(0.4), False))
    assert corrected_rho(0.9, 0.6, 0.7) == (1.0, True)  # 0.9 / 0.648 > 1: capped and counted
    assert np.isnan(corrected_rho(0.4, -0.1, 0.8)[0]) and np.isnan(corrected_rho(0.4, np.nan, 0.8)[0])


def _simulated_side(p: np.ndarray, n_sentences: int, words: int, rng: np.random.Generator) -> HeadScores:
    """Per-sentence binomial counts of true accuracies ``p`` ``(R, 2, 1, H)``: ``words`` words per relation."""
    correct = rng.binomial(words, np.broadcast_to(p, (n_sentences, *p.shape)))  # (N, R, 2, 1, H)
    return with_units(correct, np.full((n_sentences, p.shape[0]), words))


def test_reliability_correction_recovers_a_known_correlation() -> None:
    """Two sides rank the same heads by true accuracies with a known rank correlation; each side sees them through
    binomial noise (20 sentences x 2 words per relation). The raw rho is attenuated, the corrected one is not."""
    from probes.heads.inference import spearman_rows

    errors_raw, errors_corrected = [], []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        z = rng.standard_normal((2, 8, 2, 1, 72))  # 8 relations, 144 predictors
        za, zb = z[0], 0.7 * z[0] + np.sqrt(1 - 0.7 ** 2) * z[1]
        pa, pb = 1 / (1 + np.exp(1 - 0.6 * za)), 1 / (1 + np.exp(1 - 0.6 * zb))
        true = np.mean([spearman_rows(pa[r].reshape(-1), pb[r].reshape(-1)) for r in range(8)])  # infinite data
        found = consistency("m", ("a", _simulated_side(pa, 20, 2, rng)), ("b", _simulated_side(pb, 20, 2, rng)),
                            [f"r{k}" for k in range(8)], n_resamples=200).row
        assert found.n_corrected == 8 and found.n_capped == 0 and 0.5 < found.reliability_first < 0.9
        assert found.corrected_low <= found.rho_corrected <= found.corrected_high
        errors_raw.append(found.rho - true)
        errors_corrected.append(found.rho_corrected - true)
    assert np.mean(errors_raw) < -0.15  # attenuated by about 0.2
    assert np.abs(errors_corrected).max() < 0.06  # recovered within 0.06 on every draw


# --- verdicts and the two kinds of random-init twin -----------------------------------------------------------


def test_verdict_is_inconclusive_when_the_interval_straddles_zero() -> None:
    from probes.compare.tests import verdict_of

    (t,) = family([raw_test("q1", "x", "m", 0.2, 0.1, 0.3, 1e-6)])
    assert t.significant and t.verdict == "yes" == verdict_of(t)
    (low,) = family([raw_test("q1", "x", "m", -0.2, -0.3, -0.1, 1e-6)])
    assert low.verdict == "no"  # the trained model lower: interval below 0 and Holm agrees
    (straddles,) = family([raw_test("q1", "x", "m", 0.2, -0.01, 0.3, 1e-6)])
    assert straddles.significant and straddles.verdict == "inconclusive"  # not "no", and not "yes" either
    # an interval above 0 whose Holm p (over 3 tests: 3 x 0.03) does not agree
    tests = family([raw_test("q1", n, "m", 0.2, 0.1, 0.3, 0.03) for n in "abc"])
    assert [t.verdict for t in tests] == ["inconclusive"] * 3 and not any(t.significant for t in tests)


MATCHED = "random-init:package:a@0?qk=match"


def test_trained_vs_random_tests_are_labelled_by_twin_kind() -> None:
    from probes.compare.tests import twin_kind, twin_labels

    models = {"t": {"kind": "trained", "spec": "package:a"},
              "rd": {"kind": "random-init", "spec": "random-init:package:a@0", "base": "package:a"},
              "rm": {"kind": "random-init", "spec": MATCHED, "base": "package:a",
                     "query_key": {"scale": 4.4583, "target_confidence": 0.461}},
              "rs": {"kind": "random-init", "spec": "random-init:package:a@0?qk=2", "base": "package:a"}}
    assert [twin_kind(models[m]) for m in ("t", "rd", "rm", "rs")] == ["default", "default", "matched", "scaled"]
    assert twin_labels(models) == {"rd": "default twins", "rm": "sharpness-matched twins (s = 4.46)",
                                   "rs": "twins with scaled queries and keys (s = 2)"}
    assert twin_labels({"r": {"kind": "random-init", "spec": MATCHED}}) == {
        "r": "sharpness-matched twins (s not recorded)"}
    acc = np.arange(24).reshape(2, 2, 3, 2) / 100 + 0.1
    flipped = acc.copy()
    flipped[..., 0] = 0.5 - acc[..., 0]
    side = ("dev", scores(acc, ("a", "b")))
    found = {"t": [consistency("t", side, ("test", scores(acc, ("a", "b"))), ["a", "b"])],
             "rd": [consistency("rd", side, ("test", scores(flipped, ("a", "b"))), ["a", "b"])],
             "rm": [consistency("rm", side, ("test", scores(acc, ("a", "b"))), ["a", "b"])]}
    tests = family(q4_tests(found, {m: models[m] for m in ("t", "rd", "rm")}, n_resamples=300, seed=0))
    by_twins = {t.twins: t for t in tests}
    assert set(by_twins) == {"default twins", "sharpness-matched twins (s = 4.46)"}
    assert by_twins["default twins"].value == pytest.approx(1.0)  # as in the q4 test above
    assert by_twins["sharpness-matched twins (s = 4.46)"].value == 0.0  # the same accuracies as the trained model
    assert by_twins["sharpness-matched twins (s = 4.46)"].verdict == "inconclusive"
