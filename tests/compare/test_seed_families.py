"""Seed families (issue 39, point 9): the Multi-Bootstrap against a slow loop and simulations with known answers,
role stability against exact enumeration and planted scores, family_roles on planted lab analyses."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import spearmanr

import probes.compare.fair_tests as fair
from probes.analysis.task_roles import role_scores
from probes.compare.families import (
    DIFFERENCE_RULE,
    PER_SEQUENCE,
    RULE,
    FamilyRoles,
    MultiBootstrap,
    MultiBootstrapDifference,
    family_roles,
    multi_bootstrap,
    multi_bootstrap_difference,
    over_checkpoints,
    role_stability,
)
from probes.errors import ConfigError
from probes.importance.interactions import role_carriers
from probes.importance.lab_types import LabModelAnalysis
from probes.results import Result, equal, load
from probes.training.tasks import TaskSpec

# ---------------------------------------------------------------------------------------------- Multi-Bootstrap


def _slow_draws(values: np.ndarray, n_draws: int, seed: int) -> np.ndarray:
    """The same generator calls as multi_bootstrap, then every draw summed cell by cell, seed by seed."""
    rng = np.random.default_rng(seed)
    s, e = values.shape
    seeds = rng.integers(0, s, size=(n_draws, s))
    examples = rng.integers(0, e, size=(n_draws, e))
    out = []
    for b in range(n_draws):
        total = 0.0
        for i in seeds[b]:
            for j in examples[b]:
                total += values[i, j]
        out.append(total / (s * e))
    return np.array(out)


def test_multi_bootstrap_equals_a_slow_loop_with_the_same_generator_calls():
    values = np.random.default_rng(1).normal(size=(4, 13))
    got = multi_bootstrap(values, n_draws=300, seed=7, level=0.9)
    slow = _slow_draws(values, 300, 7)
    np.testing.assert_allclose(got.draws, slow, rtol=0, atol=1e-12)
    assert got.estimate == pytest.approx(values.mean(), abs=1e-12)
    assert (got.low, got.high) == pytest.approx(tuple(np.quantile(slow, [0.05, 0.95])), abs=1e-12)
    assert (got.seeds, got.examples, got.n_draws, got.level, got.rule) == (4, 13, 300, 0.9, RULE)


def test_one_seed_is_the_ordinary_bootstrap_over_examples():
    values = np.random.default_rng(2).normal(size=(1, 20))
    got = multi_bootstrap(values, n_draws=200, seed=3)
    index = np.random.default_rng(3).integers(0, 20, size=(200, 20))  # a fresh generator: examples only
    np.testing.assert_allclose(got.draws, values[0, index].mean(axis=1), rtol=0, atol=1e-12)


def test_constant_values_give_a_point_interval():
    got = multi_bootstrap(np.full((3, 7), 0.25), n_draws=100)
    assert got.estimate == got.low == got.high == 0.25


def _family(rng: np.random.Generator, seeds: int, examples: int, mean: float) -> np.ndarray:
    """Cells with a seed effect (sd 0.5), an example effect (sd 1) and noise (sd 0.5) around ``mean``."""
    return (mean + rng.normal(0, 0.5, (seeds, 1)) + rng.normal(0, 1.0, (1, examples))
            + rng.normal(0, 0.5, (seeds, examples)))


def test_the_interval_covers_a_known_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(4)
    hits = naive = 0
    for rep in range(200):
        cells = _family(rng, 10, 40, 1.0)
        got = multi_bootstrap(cells, n_draws=400, seed=rep)
        hits += got.low <= 1.0 <= got.high
        pooled = multi_bootstrap(cells.mean(axis=0, keepdims=True), n_draws=400, seed=rep)  # examples only
        naive += pooled.low <= 1.0 <= pooled.high
    assert 0.85 <= hits / 200 <= 0.99
    assert naive / 200 < hits / 200 - 0.05  # leaving the seeds out of the draws covers less: seeds matter


def test_over_checkpoints_draws_the_same_seeds_and_examples_at_every_checkpoint():
    base = np.random.default_rng(5).normal(size=(3, 9))
    got = over_checkpoints(np.stack([base, base + 1.0]), n_draws=150, seed=2)
    assert len(got) == 2 and equal(got[0], multi_bootstrap(base, n_draws=150, seed=2))
    np.testing.assert_allclose(got[1].draws - got[0].draws, 1.0, atol=1e-12)


def _slow_difference(a: np.ndarray, b: np.ndarray, n_draws: int, seed: int, paired: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    sa = rng.integers(0, len(a), size=(n_draws, len(a)))
    sb = rng.integers(0, len(b), size=(n_draws, len(b)))
    ea = rng.integers(0, a.shape[1], size=(n_draws, a.shape[1]))
    eb = ea if paired else rng.integers(0, b.shape[1], size=(n_draws, b.shape[1]))
    out = []
    for k in range(n_draws):
        mean_a = sum(a[i, j] for i in sa[k] for j in ea[k]) / a.size
        mean_b = sum(b[i, j] for i in sb[k] for j in eb[k]) / b.size
        out.append(mean_a - mean_b)
    return np.array(out)


@pytest.mark.parametrize("paired", [True, False])
def test_the_difference_equals_a_slow_loop_and_its_p_is_counted_by_hand(paired):
    rng = np.random.default_rng(6)
    a, b = rng.normal(0.1, 1, size=(3, 8)), rng.normal(0, 1, size=(4, 8 if paired else 6))
    got = multi_bootstrap_difference(a, b, paired_examples=paired, n_draws=250, seed=9)
    slow = _slow_difference(a, b, 250, 9, paired)
    np.testing.assert_allclose(got.draws, slow, rtol=0, atol=1e-12)
    estimate = a.mean() - b.mean()
    other = (slow <= 0).mean() if estimate > 0 else (slow >= 0).mean()
    assert got.p_value == pytest.approx(max(min(1.0, 2 * other), 1 / 251), abs=1e-12)
    assert got.paired_examples is paired and got.rule == DIFFERENCE_RULE


def test_the_difference_test_rejects_about_5_percent_of_equal_families_and_finds_a_real_shift():
    rng = np.random.default_rng(7)
    rejected = 0
    for rep in range(150):
        examples = rng.normal(0, 1.0, (1, 30))  # the same examples for both families
        a = examples + rng.normal(0, 0.5, (8, 1)) + rng.normal(0, 0.5, (8, 30))
        b = examples + rng.normal(0, 0.5, (8, 1)) + rng.normal(0, 0.5, (8, 30))
        rejected += multi_bootstrap_difference(a, b, n_draws=300, seed=rep).p_value < 0.05
    assert rejected / 150 <= 0.12
    examples = rng.normal(0, 1.0, (1, 30))
    shifted = multi_bootstrap_difference(examples + 2.0 + rng.normal(0, 0.3, (8, 30)),
                                         examples + rng.normal(0, 0.3, (8, 30)), n_draws=300)
    assert shifted.p_value == pytest.approx(1 / 301) and shifted.low > 0


def test_bad_input_is_refused():
    with pytest.raises(ConfigError, match="finite"):
        multi_bootstrap([[1.0, np.nan]])
    with pytest.raises(ConfigError, match="n_draws"):
        multi_bootstrap([[1.0]], n_draws=0)
    with pytest.raises(ConfigError, match="same examples"):
        multi_bootstrap_difference(np.zeros((2, 3)), np.zeros((2, 4)))


def test_results_save_and_load(tmp_path):
    single = multi_bootstrap(np.arange(12.0).reshape(3, 4), n_draws=20)
    diff = multi_bootstrap_difference(np.ones((2, 3)), np.zeros((2, 3)), n_draws=20)
    for k, result in enumerate((single, diff)):
        assert equal(load(result.save(tmp_path / str(k))), result)
    assert isinstance(diff, MultiBootstrapDifference) and isinstance(single, MultiBootstrap)
    assert list(single.to_pandas()["examples"]) == [4]

# ------------------------------------------------------------------------------------------------ role stability


def _slow_null(scores: np.ndarray, top: np.ndarray) -> tuple[float, float, float, float]:
    """Every arrangement of every seed's heads ((H!)^S): observed and exact p of the mean pairwise Spearman rho
    (scipy) and of the pairs sharing a top index."""
    n_seeds, n_heads = scores.shape

    def stats(orders: tuple[tuple[int, ...], ...]) -> tuple[float, int]:
        rows = [scores[i][list(o)] for i, o in enumerate(orders)]
        rho = np.mean([spearmanr(rows[i], rows[j]).statistic for i, j in itertools.combinations(range(n_seeds), 2)])
        where = [list(o).index(top[i]) for i, o in enumerate(orders)]
        return float(rho), sum(where[i] == where[j] for i, j in itertools.combinations(range(n_seeds), 2))

    identity = tuple(tuple(range(n_heads)) for _ in range(n_seeds))
    rho0, same0 = stats(identity)
    perms = list(itertools.permutations(range(n_heads)))
    null = [stats(orders) for orders in itertools.product(perms, repeat=n_seeds)]
    return (rho0, float(np.mean([r >= rho0 - 1e-12 for r, _ in null])), float(same0),
            float(np.mean([s >= same0 for _, s in null])))


@pytest.mark.parametrize("n_seeds,n_heads", [(2, 4), (3, 3)])
def test_the_exact_null_equals_an_enumeration_of_every_arrangement(n_seeds, n_heads):
    rng = np.random.default_rng(n_seeds * 10 + n_heads)
    scores = rng.uniform(0, 1, size=(n_seeds, 1, n_heads))
    scores[:, 0, 1] += 0.4  # head 2 leans towards the role
    got = role_stability(scores, threshold=0.3)
    rho, p, same, p_same = _slow_null(scores[:, 0], got.top[:, 0])
    assert got.exact and got.n_permutations == math.factorial(n_heads) ** (n_seeds - 1)
    assert got.aligned_rho[0] == pytest.approx(rho, abs=1e-12)
    assert got.aligned_p[0] == pytest.approx(p, abs=1e-12)
    assert got.same_top[0] == same and got.identity_p_shuffled[0] == pytest.approx(p_same, abs=1e-12)


def test_monte_carlo_agrees_with_the_exact_null(monkeypatch):
    scores = np.random.default_rng(8).uniform(size=(3, 2, 4))
    scores[:, :, 0] += 0.3
    exact = role_stability(scores, threshold=0.4)
    monkeypatch.setattr(fair, "EXACT_LIMIT", 1)
    drawn = role_stability(scores, threshold=0.4, n_permutations=4000, seed=1)
    assert exact.exact and not drawn.exact and drawn.n_permutations == 4000
    np.testing.assert_allclose(drawn.aligned_p, exact.aligned_p, atol=0.03)
    np.testing.assert_allclose(drawn.identity_p_shuffled, exact.identity_p_shuffled, atol=0.03)
    assert "Monte Carlo, 4000 shuffles" in drawn.method and "exact, all 576" in exact.method


def test_the_same_head_in_every_seed_gives_correlation_1_and_the_known_p_values():
    base = np.array([0.1, 0.2, 0.9, 0.05])
    scores = np.stack([base * f for f in (1.0, 0.9, 0.95)])[:, None, :]  # one order in every seed
    got = role_stability(scores, threshold=0.5)
    assert got.aligned_rho[0] == pytest.approx(1.0) and got.matched_rho[0] == pytest.approx(1.0)
    assert got.aligned_p[0] == pytest.approx(1 / 576)  # only the arrangement that keeps every order
    assert got.top[:, 0].tolist() == [2, 2, 2] and (got.same_top[0], got.top_pairs[0]) == (3, 3)
    assert got.identity_p[0] == pytest.approx(0.25 ** 3)  # binomial: 3 of 3 pairs at chance 1/4
    assert got.identity_p_shuffled[0] == pytest.approx(1 / 16)  # seeds 2 and 3 must both land on seed 1's index


def test_carriers_at_arbitrary_indices_keep_chance_and_the_matching_sees_through_them():
    rng = np.random.default_rng(9)
    n_seeds, n_heads = 40, 4
    scores = rng.uniform(0, 0.2, size=(n_seeds, 2, n_heads))
    scores[np.arange(n_seeds), 0, rng.integers(0, n_heads, n_seeds)] = 0.9  # layer 1: anywhere
    scores[:, 1, 3] = 0.9  # layer 2: always head 4
    got = role_stability(scores, threshold=0.5, n_permutations=500)
    share = got.same_top / got.top_pairs
    assert abs(share[0] - 1 / n_heads) < 0.08 and share[1] == 1.0
    assert got.identity_p[0] > 0.05 and got.identity_p_shuffled[0] > 0.05
    assert got.identity_p_shuffled[1] == pytest.approx(1 / 501) and got.aligned_p[1] == pytest.approx(1 / 501)
    assert got.matched_distance[0] < 0.5 * got.aligned_distance[0]  # same division of labour, other indices
    assert [len(c[0]) for c in got.carriers] == [1] * n_seeds


def test_aligned_and_matched_numbers_equal_slow_references():
    rng = np.random.default_rng(10)
    scores = rng.uniform(size=(4, 1, 5))
    scores[3, 0] = 0.3  # a constant seed has no order: left out of the correlation
    got = role_stability(scores, threshold=0.6, n_permutations=50)
    pairs = list(itertools.combinations(range(3), 2))
    rho = np.mean([spearmanr(scores[i, 0], scores[j, 0]).statistic for i, j in pairs])
    assert got.aligned_rho[0] == pytest.approx(rho, abs=1e-12)
    all_pairs = list(itertools.combinations(range(4), 2))
    best = [min(np.abs(scores[i, 0] - scores[j, 0][list(p)]).mean() for p in itertools.permutations(range(5)))
            for i, j in all_pairs]
    assert got.matched_distance[0] == pytest.approx(np.mean(best), abs=1e-12)
    aligned = np.mean([np.abs(scores[i, 0] - scores[j, 0]).mean() for i, j in all_pairs])
    assert got.aligned_distance[0] == pytest.approx(aligned, abs=1e-12)
    expected = role_carriers(scores[:, 0], 0.6)
    assert [c[0] for c in got.carriers] == expected
    assert got.top[:, 0].tolist() == [max(c, key=lambda k, i=i: scores[i, 0, k]) if c else -1
                                      for i, c in enumerate(expected)]


def test_shuffling_heads_moves_the_aligned_numbers_but_not_the_matched_ones():
    rng = np.random.default_rng(11)
    scores = rng.uniform(size=(5, 1, 6))
    scores[:, 0, 2] += 1.0
    shuffled = np.stack([s[:, rng.permutation(6)] for s in scores])
    a, b = role_stability(scores, n_permutations=20), role_stability(shuffled, n_permutations=20)
    assert a.matched_rho[0] == b.matched_rho[0] == pytest.approx(1.0)
    assert a.matched_distance[0] == pytest.approx(b.matched_distance[0], abs=1e-12)
    assert a.aligned_rho[0] > b.aligned_rho[0] + 0.2


def test_stability_table_and_round_trip(tmp_path):
    scores = np.zeros((2, 2, 3))
    scores[0, 1, 2] = scores[1, 1, 0] = 0.8
    got = role_stability(scores, role="r", threshold=0.5)
    table = got.to_pandas()
    assert table["layer"].tolist() == [1, 2]
    assert table["carriers"].tolist() == ["- | -", "2-3 | 2-1"] and table["top_carriers"][1] == "2-3 2-1"
    assert np.isnan(got.aligned_rho[0]) and np.isnan(got.identity_p[0])  # constant scores: no order, no carrier
    assert equal(load(got.save(tmp_path / "s")), got)
    with pytest.raises(ConfigError, match="seeds >= 2"):
        role_stability(np.zeros((1, 2, 3)))

# ----------------------------------------------------------------------------------------------- family_roles


def _analysis(seed: int, maps: np.ndarray, batch, name: str = "cell") -> LabModelAnalysis:
    """A lab analysis whose role scores are role_scores' own on ``maps`` ``(M, L, H, T, T)``."""
    scored = role_scores(maps, batch)
    _, n_layers, n_heads = maps.shape[:3]
    return LabModelAnalysis(
        name=f"{name}-s{seed}", cell=name, seed=seed, task="induction", members=1, n_layers=n_layers,
        n_heads=n_heads, params=0, steps=np.array([1000], dtype=np.int64), dev_loss=np.array([1.0]),
        role_names=scored.names, role_scores=scored.scores[None], role_loss=np.full(len(scored.names), np.nan),
        maps=np.moveaxis(maps, 0, 2).astype(np.float32), function=None, ablation="mean", n_sequences=len(maps))


def _maps(rng: np.random.Generator, n: int, t: int, heads: int, carrier: int, strength: float) -> np.ndarray:
    """``(n, 2, heads, t, t)`` causal rows drawn at random; in layer 1, head ``carrier`` puts ``strength`` of each
    row (from query 2 on) on the previous key."""
    raw = rng.gamma(1.0, size=(n, 2, heads, t, t)) * np.tril(np.ones((t, t)))
    maps = raw / raw.sum(axis=-1, keepdims=True)
    q = np.arange(1, t)
    maps[:, 0, carrier] *= 1 - strength
    maps[:, 0, carrier, q, q - 1] += strength
    return maps


def test_family_roles_on_planted_seeds(tmp_path):
    rng = np.random.default_rng(12)
    batch = TaskSpec("induction", vocab=16, seq_len=12, period_min=3, period_max=6).generate(0, 6)
    carriers = [1, 3, 0, 1]
    analyses = [_analysis(s, _maps(rng, 6, 12, 4, c, 0.5 + 0.1 * s), batch) for s, c in enumerate(carriers)]
    got = family_roles(analyses, "std:previous_token", n_draws=200, n_permutations=200)
    assert got.best_head[:, 0].tolist() == carriers
    stored = [a.scores("std:previous_token")[0, c] for a, c in zip(analyses, carriers)]
    assert got.intervals[0].estimate == pytest.approx(np.mean(stored), abs=1e-6)  # maps kept as float32
    assert got.intervals[0].low < got.intervals[0].estimate < got.intervals[0].high
    assert got.intervals[0].seeds == 4 and got.intervals[0].examples == 6 and got.step == 1000
    direct = role_stability(np.stack([a.scores("std:previous_token") for a in analyses]), n_permutations=200,
                            role="std:previous_token")
    assert equal(got.stability, direct)
    assert got.stability.top[:, 0].tolist() == carriers and got.statistic.startswith("attention on key q - 1")
    assert got.to_pandas()["best_heads"][0] == "1-2 1-4 1-1 1-2"
    assert isinstance(load(got.save(tmp_path / "f")), FamilyRoles) and equal(load(tmp_path / "f"), got)


def test_a_full_previous_token_head_scores_its_hand_computed_value():
    t, rows = 8, np.arange(1, 8)
    maps = np.zeros((1, 2, 3, 5, t, t), dtype=np.float32)  # (seed, L, H, M, T, T)
    maps[..., 0, 0] = 1.0
    maps[..., rows, rows] = 1.0  # every head attends to itself ...
    maps[:, 0, 2, :, rows, rows] = 0.0
    maps[:, 0, 2, :, rows, rows - 1] = 1.0  # ... but head 1-3, on the previous key
    got = PER_SEQUENCE["std:previous_token"][1](maps[0])
    assert got[0, 2] == pytest.approx(np.full(5, (t - 1) / t)) and not got[1].any() and not got[0, :2].any()


def test_family_roles_says_what_it_cannot_bootstrap_and_refuses_mixed_families():
    rng = np.random.default_rng(13)
    batch = TaskSpec("induction", vocab=16, seq_len=12, period_min=3, period_max=6).generate(0, 3)
    analyses = [_analysis(s, _maps(rng, 3, 12, 4, 0, 0.5), batch) for s in range(2)]
    got = family_roles(analyses, "induction", n_draws=20, n_permutations=20)
    assert got.intervals == () and got.statistic == "" and "no interval" in got.note
    assert (got.best_head == -1).all() and "best_heads" not in got.to_pandas()
    other = _analysis(5, _maps(rng, 3, 12, 2, 0, 0.5), batch)
    with pytest.raises(ConfigError, match="heads"):
        family_roles([analyses[0], other], "induction")
    with pytest.raises(ConfigError, match="at least 2"):
        family_roles(analyses[:1], "induction")
    with pytest.raises(ConfigError, match="role 'nope'"):
        family_roles(analyses, "nope")


def case(name: str) -> Result:
    """A small real instance of each result type of probes.compare.families (tests/test_results.py CASES)."""
    values = np.random.default_rng(14).normal(size=(3, 5))
    if name == "MultiBootstrap":
        return multi_bootstrap(values, n_draws=20)
    if name == "MultiBootstrapDifference":
        return multi_bootstrap_difference(values, values[:2] + 1.0, n_draws=20)
    if name == "RoleStability":
        return role_stability(np.random.default_rng(15).uniform(size=(3, 2, 3)), role="r", n_permutations=20)
    batch = TaskSpec("induction", vocab=16, seq_len=10, period_min=3, period_max=6).generate(0, 2)
    rng = np.random.default_rng(16)
    analyses = [_analysis(s, _maps(rng, 2, 10, 3, s, 0.6), batch) for s in range(2)]
    return family_roles(analyses, "std:previous_token", n_draws=20, n_permutations=20)
