"""The shared inference pieces (issue 10): the paired ratio test, Holm, near ties, the hash split."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from probes.analysis.split import HALVES, SPLIT_SALT, Half, half_of, split_key
from probes.errors import ConfigError
from probes.heads.inference import _critical, correct_rows, holm, near_ties, p_from_z, paired_z


# ------------------------------------------------------------------------------ the paired ratio test
def test_paired_z_matches_a_hand_computation() -> None:
    diff = np.array([1.0, -1.0, 2.0, 0.0])  # head minus baseline hits, per sentence
    total = np.array([2.0, 3.0, 4.0, 1.0])
    margin = diff.sum() / total.sum()  # 2 / 10
    resid = diff - margin * total
    se = math.sqrt(4 / 3 * float((resid ** 2).sum())) / total.sum()
    assert paired_z(diff[:, None], total)[0] == pytest.approx(margin / se)


def test_paired_z_edge_cases() -> None:
    total = np.array([3, 3, 3])
    assert paired_z(np.zeros((3, 1)), total)[0] == 0.0  # no difference at all
    assert paired_z(np.array([[3], [3], [3]]), total)[0] == math.inf  # every unit agrees exactly
    assert np.isnan(paired_z(np.array([[1]]), np.array([2]))[0])  # one unit: no variance estimate
    assert np.isnan(paired_z(np.zeros((2, 1)), np.zeros(2))[0])  # no items
    # one unit with items among empty ones is still one cluster: no test (it used to give z = inf)
    assert np.isnan(paired_z(np.array([[1], [0], [0], [0]]), np.array([2, 0, 0, 0]))[0])
    # empty units do not change z
    with_empty = paired_z(np.array([[1], [-1], [2], [0], [0]]), np.array([2, 3, 4, 0, 0]))[0]
    assert with_empty == pytest.approx(paired_z(np.array([[1], [-1], [2]]), np.array([2, 3, 4]))[0])


def test_paired_test_holds_its_level_and_finds_a_real_difference() -> None:
    """Simulated sentences (1-19 words) where head and baseline are right with the same probability:
    about 5% of two-sided tests reject; with a 6-point true margin nearly all do."""
    rng = np.random.default_rng(1)
    n = rng.integers(1, 20, size=(300, 4000))
    null = p_from_z(paired_z(rng.binomial(n, 0.5) - rng.binomial(n, 0.5), n))
    assert 0.04 <= float(np.mean(null < 0.05)) <= 0.06
    strong = p_from_z(paired_z(rng.binomial(n[:, :200], 0.56) - rng.binomial(n[:, :200], 0.5), n[:, :200]))
    assert float(np.mean(strong < 0.05)) > 0.95


def test_p_from_z_is_the_normal_two_sided_p() -> None:
    p = p_from_z([0.0, 1.959963984540054, -1.959963984540054, math.inf, math.nan])
    assert p[:4] == pytest.approx([1.0, 0.05, 0.05, 0.0])
    assert math.isnan(p[4])
    z = np.random.default_rng(0).normal(size=(50, 4)) * 4  # against erfc(|z| / sqrt 2), the textbook form
    np.testing.assert_allclose(p_from_z(z), np.vectorize(lambda v: math.erfc(abs(v) / math.sqrt(2.0)))(z),
                               rtol=1e-12)
    assert p_from_z(z).shape == (50, 4) and p_from_z(2.0).shape == ()


def test_near_ties_critical_value_is_the_normal_quantile() -> None:
    assert _critical(0.05) == pytest.approx(1.959963984540054, abs=1e-14)  # tables of the normal distribution
    assert _critical(0.01) == pytest.approx(2.5758293035489004, abs=1e-14)
    for alpha in (0.2, 0.05, 0.001):
        assert math.erfc(_critical(alpha) / math.sqrt(2.0)) == pytest.approx(alpha, rel=1e-12)


# ------------------------------------------------------------------------------------------- Holm
def test_holm_by_hand() -> None:
    # sorted 0.01, 0.03, 0.04 with m = 3: 3*0.01, max(., 2*0.03), max(., 1*0.04)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    out = holm([0.5, math.nan, 0.001])  # NaN is not a test: m = 2
    assert out[0] == pytest.approx(0.5) and out[2] == pytest.approx(0.002) and math.isnan(out[1])
    assert holm([0.6, 0.9]).tolist() == [1.0, 1.0]  # 2*0.6 capped at 1; monotone
    # rows along the last axis, each its own family: (0.01, 0.04) -> 0.02, 0.04; (NaN, 0.2) -> m = 1
    np.testing.assert_allclose(holm([[0.01, 0.04], [math.nan, 0.2]]), [[0.02, 0.04], [math.nan, 0.2]])
    assert holm([]).shape == (0,)


def test_correct_rows_controls_the_family_and_skips_untestable_rows() -> None:
    rng = np.random.default_rng(2)
    flagged = 0
    for _ in range(400):  # 20 null rows per table: Holm keeps "any row flagged" near or below 5%
        p = rng.uniform(size=20)
        _, sig, corr = correct_rows(np.ones(20), p)
        flagged += bool(sig.any())
        assert corr.n_tests == 20 and corr.method == "holm"
    assert flagged / 400 <= 0.08
    adjusted, sig, corr = correct_rows([0.1, -0.1, 0.1], [1e-6, 1e-6, 1e-6], testable=[True, True, False])
    assert sig.tolist() == [True, False, False]  # a negative margin is never "beats"; untestable never flagged
    assert corr.n_tests == 2 and math.isnan(adjusted[2])
    assert "2 tests" in corr.footer()


# ------------------------------------------------------------------------------------------ near ties
def test_near_ties_lists_indistinguishable_candidates_only() -> None:
    rng = np.random.default_rng(4)
    total = np.full(400, 10)
    best = rng.binomial(total, 0.8)
    twin = np.clip(best + rng.integers(-1, 2, size=400), 0, 10)  # same accuracy up to noise
    weak = rng.binomial(total, 0.3)
    correct = np.stack([weak, best, twin], axis=1)
    assert near_ties(correct, total, chosen=1).tolist() == [2]
    assert near_ties(correct, total, chosen=2).tolist() == [1]
    # candidates better than the chosen one are "not worse" and listed too, best first
    assert near_ties(correct, total, chosen=0).tolist() == sorted([1, 2], key=lambda c: -correct[:, c].sum())


# ------------------------------------------------------------------------------------- the hash split
def test_half_of_is_the_documented_hash() -> None:
    for key in ["weblog-0001", "GUM_academic_art-3", "s1", ""]:
        first = hashlib.sha256(f"{SPLIT_SALT}:{key}".encode()).digest()[0]
        assert half_of(key) == HALVES[first & 1]


def test_half_of_splits_about_evenly_and_ignores_order() -> None:
    keys = [f"sent-{i}" for i in range(10000)]
    share = sum(half_of(k) == "select" for k in keys) / len(keys)
    assert 0.48 < share < 0.52  # binomial sd 0.005
    assert [half_of(k) for k in reversed(keys)] == [half_of(k) for k in keys][::-1]


class _Item:
    def __init__(self, **kw: str) -> None:
        self.__dict__.update(kw)


def test_split_key_uses_sentence_then_document_ids() -> None:
    assert split_key(_Item(sent_id="s1", doc_id="d1")) == "s1"  # a sentence: its own id, not its document's
    assert split_key(_Item(doc_id="d1")) == "d1"  # a document or a window
    with pytest.raises(ConfigError, match="no sent_id or doc_id"):
        split_key(_Item())


class _Count:
    """A minimal analysis: counts the ids it sees."""

    items = "sentences"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def update(self, item: _Item, word_attention: object) -> None:
        self.seen.append(item.sent_id)

    def compute(self) -> list[str]:
        return list(self.seen)

    def merge(self, other: _Count) -> None:
        self.seen += other.seen

    def reset(self) -> None:
        self.seen = []


def test_half_wrappers_partition_the_items() -> None:
    items = [_Item(sent_id=f"s{i}") for i in range(200)]
    select, report = Half(_Count(), "select"), Half(_Count(), "report")
    for item in items:
        select.update(item, None)
        report.update(item, None)
    a, b = select.compute(), report.compute()
    assert sorted(a + b) == sorted(i.sent_id for i in items) and not set(a) & set(b)
    assert all(half_of(k) == "select" for k in a) and select.n_seen == len(a)
    other = Half(_Count(), "select")
    for item in items[:10]:
        other.update(item, None)
    select.merge(other)
    assert select.n_seen == len(a) + other.n_seen and len(select.compute()) == select.n_seen
    with pytest.raises(ConfigError):
        select.merge(report)
    with pytest.raises(ConfigError, match="half"):
        Half(_Count(), "train")
