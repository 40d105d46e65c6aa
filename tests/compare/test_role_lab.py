"""The role lab's comparison (probes.compare.role_lab*) on planted measurements whose answers are known: models built
by hand (:func:`analysis`, :func:`planted_function`), training units with hand-made curves and head distances.
"""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import scipy.stats

from probes.compare import fair_tests
from probes.compare.growth import onset_step, peak_growth, rate_difference_test
from probes.compare.role_lab import role_lab
from probes.compare.role_lab_answers import MAX_CHARS, answers
from probes.compare.role_lab_distances import distance_tables, js_matrix, rank_matrix
from probes.compare.role_lab_function import function_table, relative_interaction
from probes.compare.role_lab_roles import identity_table, role_rows
from probes.compare.role_lab_stats import same_index_p, sign_flip_test, two_sample_test
from probes.compare.role_lab_symmetry import ONSET, growth_tables, symmetry_table
from probes.compare.role_lab_tables import formation_tables, phase_change
from probes.compare.role_lab_types import (
    INDUCTION,
    NOT_WITHIN,
    PREVIOUS,
    TABLES,
    CapacityRow,
    EnsembleRow,
    FormationRow,
    FormationTestRow,
    FunctionRow,
    GrowthTestRow,
    LabCell,
    PretrainedEffectRow,
    PretrainedFunctionRow,
    PretrainedRoleRow,
    RoleCapacityRow,
    RoleLabComparison,
    RoleSeedRow,
    SymmetryRow,
)
from probes.importance.function import FunctionTests
from probes.importance.lab_types import LabModelAnalysis
from probes.results import equal, load
from probes.training.curves import TrainingCurves
from probes.training.symmetry import HeadSymmetry

ROLES = ("induction", PREVIOUS, INDUCTION)
STEPS = np.array([0, 64, 128, 256, 512, 1000])


# ----------------------------------------------------------------------------- planted measurements
def planted_function(single: np.ndarray, joint: Any, n_tokens: int = 6) -> FunctionTests:
    """FunctionTests with single effects ``(L, H)`` and every within-layer pair's joint effect ``joint(s_i, s_j)``:
    per-token damage is the effect times a pattern of mean 1, so the means are exactly the planted values."""
    n_layers, n_heads = single.shape
    pattern = np.linspace(0.5, 1.5, n_tokens)  # mean 1
    pairs = [(layer * n_heads + i, layer * n_heads + j) for layer in range(n_layers)
             for i, j in itertools.combinations(range(n_heads), 2)]
    flat = single.reshape(-1)
    joints = np.array([joint(flat[i], flat[j]) for i, j in pairs])
    return FunctionTests(tuple(range(n_layers)), tuple(range(n_heads)), "", "causal-lm", "mean", 0, "layer", 2,
                         n_tokens, np.full(2, -1, np.int64), np.ones(n_tokens), single[:, :, None] * pattern,
                         np.asarray(pairs, np.int64).reshape(-1, 2), joints[:, None] * pattern)


def causal_maps(rng: np.random.Generator, n_layers: int, n_heads: int, m: int = 2, t: int = 6) -> np.ndarray:
    """``(L, H, M, T, T)`` random causal attention maps (rows sum to 1 over keys 0..q)."""
    x = np.tril(rng.random((n_layers, n_heads, m, t, t)) + 0.01)
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


def analysis(cell: str, seed: int, scores: np.ndarray, *, function: FunctionTests | None = None,
             dev_loss: Any = None, maps: np.ndarray | None = None, steps: np.ndarray = STEPS,
             roles: tuple[str, ...] = ROLES, task: str = "induction", members: int = 1, params: int = 1000,
             role_loss: Any = None) -> LabModelAnalysis:
    """A LabModelAnalysis built by hand; ``scores`` ``(C, R, L, H)``, or ``(R, L, H)`` held at every step."""
    scores = np.asarray(scores, np.float64)
    if scores.ndim == 3:
        scores = np.broadcast_to(scores, (len(steps), *scores.shape)).copy()
    _, _, n_layers, n_heads = scores.shape
    rng = np.random.default_rng(seed)
    return LabModelAnalysis(
        f"{cell}-s{seed}", cell, seed, task, members, n_layers, n_heads, params, np.asarray(steps, np.int64),
        np.asarray(dev_loss if dev_loss is not None else np.linspace(4, 1, len(steps)), np.float64), roles, scores,
        np.asarray(role_loss if role_loss is not None else np.full(len(roles), np.nan), np.float64),
        maps if maps is not None else causal_maps(rng, n_layers, n_heads), function, "mean", 8)


def cell(name: str, heads: int = 4, *, task: str = "induction", members: int = 1, init: str = "independent",
         noise: float | None = None, dropout: float = 0.0, seeds: tuple[int, ...] = (1, 2, 3, 4, 5, 6),
         kind: str = "lab", layers: int = 2) -> LabCell:
    roles = ("previous", "two_back", "first", "induction") if task == "roles" else ("induction",)
    return LabCell(name, task, layers, heads, members, init, noise, dropout, seeds, roles, kind)


def carrier_scores(layer0_top: int, heads: int = 4) -> np.ndarray:
    """``(R, L, H)``: one previous-token head (``layer0_top``) in layer 1, every layer-2 head an induction head."""
    s = np.full((len(ROLES), 2, heads), 0.1)
    s[1, 0, layer0_top] = 0.9
    s[2, 1, :] = 0.7
    s[0, 1, :] = 0.6
    return s


# ----------------------------------------------------------------------------- (b) roles and identity
def test_carriers_at_one_index_in_every_seed_are_not_arbitrary_and_shuffled_ones_are():
    fixed = [analysis("fixed", s, carrier_scores(2)) for s in range(1, 7)]
    shuffled = [analysis("shuffled", s, carrier_scores(i)) for s, i in zip(range(1, 7), (0, 1, 2, 3, 0, 1))]
    rows = role_rows(fixed + shuffled, 0.5)
    first = next(r for r in rows if r.cell == "fixed" and r.seed == 1 and r.layer == 0 and r.role == PREVIOUS)
    assert (first.n_carriers, first.carriers, first.top, first.top_score) == (1, (2,), 2, 0.9)
    identity = {(r.cell, r.layer, r.role): r for r in identity_table(rows)}
    a = identity[("fixed", 0, PREVIOUS)]
    assert (a.pairs, a.kept, a.seeds_with_carrier) == (15, 15, 6)
    assert a.p == pytest.approx(0.25 ** 15)
    assert a.p_exact == pytest.approx(4.0 ** -5)  # every seed on the first seed's index
    assert a.p_holm < 0.05 and "more often than chance" in a.verdict
    b = identity[("shuffled", 0, PREVIOUS)]
    assert (b.pairs, b.kept) == (15, 2)  # indices 0, 1, 2, 3, 0, 1: two pairs share
    assert b.p_exact > 0.5 and "no more often" in b.verdict
    tied = identity[("fixed", 1, INDUCTION)]  # four heads tie at 0.7: no top carrier, no test
    assert tied.seeds_with_carrier == 0 and math.isnan(tied.p_exact)


def test_carriers_and_their_effects_are_printed_one_based():
    single = np.array([[0.05, 0.05, 3.5, 0.05], [0.2, 0.2, 0.2, 0.2]])
    model = analysis("c", 1, carrier_scores(2), function=planted_function(single, lambda a, b: a + b))
    comparison = RoleLabComparison(roles=tuple(role_rows([model], 0.5)))
    table = comparison.to_pandas("roles")
    row = table[(table.role == PREVIOUS) & (table.layer == 1)].iloc[0]
    assert row.carriers == (3,) and row.top == 3 and row.effects == (3.5,)
    assert set(table.layer) == {1, 2}


def test_same_index_p_equals_enumeration_of_every_assignment():
    for seeds, heads in ((4, 3), (5, 4), (3, 8)):
        counts = np.zeros(math.comb(seeds, 2) + 1)
        for tops in itertools.product(range(heads), repeat=seeds):
            counts[sum(a == b for a, b in itertools.combinations(tops, 2))] += 1
        tail = counts[::-1].cumsum()[::-1] / heads ** seeds
        for kept in range(len(counts)):
            assert same_index_p(kept, seeds, heads) == pytest.approx(tail[kept])


# ----------------------------------------------------------------------------- (c) function
def _cell_models(name: str, joint: Any, seeds: int = 8, base: float = 0.0) -> list[LabModelAnalysis]:
    out = []
    for s in range(seeds):
        rng = np.random.default_rng(100 + s)
        single = rng.uniform(0.1, 0.5, size=(1, 4))
        out.append(analysis(name, s, np.full((3, 1, 4), 0.1), function=planted_function(single, joint(s))))
    return out


def test_relative_interaction_of_redundant_additive_and_saturating_heads():
    backup = _cell_models("backup", lambda s: lambda a, b: a + b + 0.5)  # each covers for the other
    additive = _cell_models("additive", lambda s: lambda a, b: a + b + 0.01 * (-1) ** s)  # off by +-0.01 per seed
    saturating = _cell_models("saturating", lambda s: lambda a, b: max(a, b))
    rows = {r.cell: r for r in function_table({"backup": backup, "additive": additive, "saturating": saturating},
                                              n_permutations=1000, seed=0)}
    single = saturating[0].function.effect.reshape(-1)  # type: ignore[union-attr]  # planted with a function
    pairs = list(itertools.combinations(range(4), 2))
    by_hand = sum(max(single[i], single[j]) - single[i] - single[j] for i, j in pairs) / sum(
        single[i] + single[j] for i, j in pairs)
    assert rows["saturating"].relative_per_seed[0] == pytest.approx(by_hand)
    assert rows["saturating"].relative < 0 and rows["backup"].relative > 0
    for name in ("backup", "saturating"):  # every seed the same sign: 2 of the 2^8 sign patterns are as extreme
        assert rows[name].p == pytest.approx(2 / 256) and rows[name].exact and rows[name].n_flips == 256
        values = rows[name].relative_per_seed  # the verdict's test: a t test over seeds, Holm over the table
        assert rows[name].p_t == pytest.approx(scipy.stats.ttest_1samp(values, 0.0).pvalue)
        assert rows[name].p_t <= rows[name].p_holm <= min(1.0, 3 * rows[name].p_t) + 1e-12
    assert "redundancy" in rows["backup"].verdict and "saturating" in rows["saturating"].verdict
    assert abs(rows["additive"].relative) < 0.05 and rows["additive"].p > 0.5
    assert "not distinguishable from additive" in rows["additive"].verdict
    assert rows["backup"].n_pairs == 6 and len(rows["backup"].effects) == 4


def test_relative_interaction_keeps_only_pairs_of_heads_with_effect():
    single = np.array([[0.5, 0.4, 0.001, 0.3]])
    tests = planted_function(single, lambda a, b: a + b + 0.1)
    mean, relative, pairs = relative_interaction(tests, 0, 0.01)
    assert pairs == 3 and mean == pytest.approx(0.1)
    assert relative == pytest.approx(0.3 / (2 * (0.5 + 0.4 + 0.3)))


def test_sign_flip_and_two_sample_tests_equal_enumeration():
    x = np.array([0.3, -0.1, 0.5, 0.2, -0.4])
    flips = [abs(np.mean(np.array(s) * x)) >= abs(x.mean()) - 1e-12 for s in itertools.product((1, -1), repeat=5)]
    assert sign_flip_test(x).p == pytest.approx(np.mean(flips))
    a, b = np.array([1.0, 1.4, 0.9]), np.array([0.2, 0.5, 0.1, 0.4])
    pooled = np.concatenate([a, b])
    null = [abs(pooled[list(g)].mean() - np.delete(pooled, list(g)).mean())
            for g in itertools.combinations(range(7), 3)]
    test = two_sample_test(a, b)
    assert test.p == pytest.approx(np.mean(np.array(null) >= abs(a.mean() - b.mean()) - 1e-12))
    assert test.exact and test.n == 35
    monte = sign_flip_test(np.arange(1.0, 17.0), n_permutations=500)  # 2^16 > the exact limit
    assert not monte.exact and monte.p == pytest.approx(1 / 501)


# ----------------------------------------------------------------------------- (d) distances
def _slow_js(p: np.ndarray, q: np.ndarray) -> float:
    rows = []
    p, q = p.astype(np.float64), q.astype(np.float64)
    for a, b in zip(p.reshape(-1, p.shape[-1]), q.reshape(-1, q.shape[-1])):
        a = 0.999 * a + 0.001 / len(a)
        b = 0.999 * b + 0.001 / len(b)
        m = (a + b) / 2
        rows.append(0.5 * np.sum(a * np.log(a / m)) + 0.5 * np.sum(b * np.log(b / m)))
    return float(np.mean(rows))


def _slow_rank(p: np.ndarray, q: np.ndarray) -> float:
    """fair_tests.rank_distance on each causal row cut to its allowed keys, averaged over the rows (each kept)."""
    t = p.shape[-1]
    return float(np.mean([fair_tests.rank_distance(p[:, q_:q_ + 1, :q_ + 1], q[:, q_:q_ + 1, :q_ + 1])
                          for q_ in range(1, t)]))


def test_within_cross_rows_equal_fair_tests_on_hand_built_distance_matrices():
    rng = np.random.default_rng(3)
    a, b = (analysis("d", s, np.full((3, 2, 3), 0.1), maps=causal_maps(rng, 2, 3)) for s in (1, 2))
    rows, summary = distance_tables({"d": [a, b]}, n_permutations=100, seed=0)
    assert len(rows) == 4 and len(summary) == 4
    for row in rows:
        heads = np.concatenate([a.maps[row.layer], b.maps[row.layer]])
        slow = _slow_js if row.distance == "js" else _slow_rank
        matrix = np.array([[0.0 if i == j else slow(heads[i], heads[j]) for j in range(6)] for i in range(6)])
        fast = (js_matrix if row.distance == "js" else rank_matrix)(heads)
        np.testing.assert_allclose(fast, matrix, atol=1e-12)
        direct = fair_tests.within_cross_test(matrix, 3)
        assert (row.within, row.cross, row.statistic) == pytest.approx(
            (direct.within, direct.cross, direct.statistic), abs=1e-12)
        assert (row.p, row.n_permutations, row.exact) == (direct.p_value, 10, True)  # C(6, 3) / 2 regroupings
    js = next(s for s in summary if s.distance == "js" and s.layer == 0)
    assert js.n_pairs == 1 and js.smallest_p == pytest.approx(0.1)


def test_rank_distance_does_not_move_when_a_head_only_sharpens():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(1, 2, 6, 6))
    mask = np.tril(np.ones((6, 6), bool))

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.where(mask, np.exp(x - x.max(-1, keepdims=True)), 0.0)
        return e / e.sum(-1, keepdims=True)

    other = softmax(rng.normal(size=(1, 2, 6, 6)))
    flat, sharp = softmax(logits), softmax(logits * 4)
    assert rank_matrix(np.concatenate([flat, other]))[0, 1] == pytest.approx(
        rank_matrix(np.concatenate([sharp, other]))[0, 1])
    assert js_matrix(np.concatenate([flat, other]))[0, 1] != pytest.approx(
        js_matrix(np.concatenate([sharp, other]))[0, 1])


# ----------------------------------------------------------------------------- (a) symmetry and growth
def _symmetry(steps: np.ndarray, param: np.ndarray) -> HeadSymmetry:
    """HeadSymmetry of 2 layers x 2 heads whose pair distance is ``param`` ``(C, L)`` (attention a tenth of it)."""
    values = np.zeros((len(steps), 2, 2, 2))
    values[:, :, 0, 1] = values[:, :, 1, 0] = param
    return HeadSymmetry(np.asarray(steps, np.int64), values, values / 10, 4)


def _growth_run(name: str, seed: int, eps: float, rate: float) -> SimpleNamespace:
    steps = np.arange(0, 121)
    excess = np.minimum(eps * np.exp(rate * steps), 1.0)  # the distance from step 0 on: slope exactly `rate`
    param = np.stack([excess, excess * 0.5], axis=1)  # layer 2 half as far apart, the same rate
    return SimpleNamespace(cell=name, seed=seed, curves=None, symmetry=None, step_symmetry=_symmetry(steps, param))


def test_growth_rows_on_a_simulated_exponential_equal_the_growth_module():
    rates = {1: 0.10, 2: 0.12, 3: 0.11}
    runs = [_growth_run("noise-1e-2", s, 1e-2, r) for s, r in rates.items()]
    runs += [_growth_run("noise-1e-4", s, 1e-4, r + 0.005) for s, r in rates.items()]
    cells = {"noise-1e-2": cell("noise-1e-2", 2, init="identical+noise:0.01", noise=1e-2),
             "noise-1e-4": cell("noise-1e-4", 2, init="identical+noise:0.0001", noise=1e-4)}
    seeds, per_cell, tests = growth_tables(cells, runs)
    first = next(r for r in seeds if (r.cell, r.seed, r.layer, r.distance) == ("noise-1e-2", 2, 0, "param"))
    assert first.rate == pytest.approx(0.12) and first.r2 == pytest.approx(1.0)
    assert first.doubling == pytest.approx(math.log(2) / 0.12)
    steps = np.arange(121)
    curve = runs[1].step_symmetry.param_distance[:, 0, 0, 1]
    fit = peak_growth(steps, curve, window=10, ceiling=0.1)  # the linear regime, as the table fits it
    assert (first.window_start, first.window_end) == (fit.first, fit.last)
    assert first.onset == onset_step(steps, curve, ONSET["param"])
    assert first.onset == math.ceil(math.log(0.1 / 1e-2) / 0.12)  # excess 1e-2 e^{0.12 t} >= 0.1
    row = next(r for r in per_cell if (r.cell, r.layer, r.distance) == ("noise-1e-2", 0, "param"))
    assert (row.rate, row.rate_low, row.rate_high) == pytest.approx((0.11, 0.10, 0.12))
    test = next(t for t in tests if (t.layer, t.distance) == (0, "param"))
    assert (test.cell_a, test.cell_b) == ("noise-1e-2", "noise-1e-4")
    direct = rate_difference_test([0.10, 0.12, 0.11], [0.105, 0.125, 0.115])
    assert (test.difference, test.p) == pytest.approx((direct.difference, direct.p_value))
    assert test.onset_b > test.onset_a  # the smaller noise arrives later at the same rate
    assert len(tests) == 4 and all(t.p_holm >= t.p for t in tests)


def test_identical_heads_stay_identical_and_dropout_breaks_the_tie():
    steps = np.array([0, 1, 2, 4])
    runs = [SimpleNamespace(cell="identical", seed=s, symmetry=_symmetry(steps, np.zeros((4, 2))),
                            step_symmetry=_symmetry(np.arange(5), np.zeros((5, 2)))) for s in (1, 2)]
    runs += [SimpleNamespace(cell="dropout", seed=1, symmetry=_symmetry(steps, np.full((4, 2), 0.3)))]
    cells = {"identical": cell("identical", 2, init="identical"),
             "dropout": cell("dropout", 2, init="identical", dropout=0.1)}
    rows = {r.cell: r for r in symmetry_table(cells, runs)}
    assert rows["identical"].stays_identical and (rows["identical"].n_checkpoints, rows["identical"].n_steps) == (4, 5)
    assert not rows["dropout"].stays_identical and rows["dropout"].max_param == pytest.approx(0.3)
    assert rows["dropout"].max_attention == pytest.approx(0.03) and rows["dropout"].n_steps == 0


# ----------------------------------------------------------------------------- (g) formation
def test_phase_change_and_formation_order_on_hand_made_curves():
    steps = np.array([0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000])
    loss = np.array([4.2, 4.1, 4.0, 3.9, 3.7, 3.5, 3.45, 3.42, 3.41, 3.4, 1.8, 0.53])
    assert phase_change(steps, loss) == (256, 512, 3.4, 1.8)
    models, runs = [], {}
    for s in range(1, 7):
        scores = np.full((len(STEPS), 3, 2, 4), 0.1)
        scores[2:, 1, 0, s % 4] = 0.8  # previous-token head from step 128
        scores[3 if s < 6 else 2:, 2, 1, :2] = 0.6  # induction heads from step 256 (seed 6: 128, a tie)
        models.append(analysis("c", s, scores))
        runs[("c", s)] = [SimpleNamespace(cell="c", seed=s, curves=TrainingCurves(
            steps, steps * 64, np.full(len(steps), np.nan), loss, 3.3, "causal-LM"))]
    rows, tests = formation_tables({"c": models}, runs, 0.5)
    assert all((r.step, r.step_before, r.loss_before, r.loss_after) == (512, 256, 3.4, 1.8) for r in rows)
    assert rows[0].role_steps == (NOT_WITHIN, 128, 256) and rows[0].order == "previous-token first"
    assert rows[5].order == "same checkpoint"
    (test,) = tests
    assert (test.previous_first, test.induction_first, test.ties, test.never) == (5, 0, 1, 0)
    assert test.p == pytest.approx(2 / 32) and test.phase_step == 512


# ----------------------------------------------------------------------------- the whole comparison
def _experiment() -> tuple[list[LabModelAnalysis], list[Any], dict[str, LabCell]]:
    """A small planted lab: independent 4-head (division in layer 1, redundancy in layer 2), 2-head, the ensemble,
    an identical cell, and two pretrained models (one without tests of function)."""
    cells = {c.name: c for c in (cell("independent"), cell("heads-2", 2), cell("ensemble", members=4),
                                 cell("identical", init="identical"), cell("smollm2", 3, kind="pretrained",
                                                                           init="pretrained", seeds=(0,), layers=3),
                                 cell("minilm", 3, kind="pretrained", init="pretrained", seeds=(0,), layers=3))}
    analyses, runs = [], []
    for s in range(1, 7):
        single = np.array([[0.05, 0.05, 0.05, 0.05], [0.2, 0.2, 0.2, 0.2]])
        single[0, s % 4] = 3.5
        rng = np.random.default_rng(s)
        division = planted_function(single, lambda a, b, rng=rng: a + b + (0.6 if a == b == 0.2 else rng.normal(0, 0.01)))
        analyses.append(analysis("independent", s, carrier_scores(s % 4), function=division,
                                 dev_loss=np.linspace(4, 0.5 + 0.01 * s, len(STEPS))))
        analyses.append(analysis("heads-2", s, carrier_scores(s % 2, 2), dev_loss=np.linspace(4, 1.5 + 0.01 * s, 6)))
        analyses.append(analysis("ensemble", s, carrier_scores(s % 4), members=4, params=4000,
                                 function=planted_function(single, lambda a, b: a + b),
                                 dev_loss=np.linspace(4, 1.0 + 0.01 * s, len(STEPS))))
        analyses.append(analysis("identical", s, np.full((3, 2, 4), 0.6)))
        steps = np.array([0, 1, 2, 4])
        runs.append(SimpleNamespace(cell="identical", seed=s, curves=None,
                                    symmetry=_symmetry(steps, np.zeros((4, 2))), step_symmetry=None))
    smol = np.full((3, 3, 3), 0.1)
    smol[1, 0, 1], smol[2, 1, :2], smol[2, 2, 0] = 0.9, (0.8, 0.7), 0.55
    effects = np.array([[0.02, 0.3, 0.0], [0.5, 0.4, 0.001], [0.2, 0.015, 0.03]])
    analyses.append(analysis("smollm2", 0, smol, steps=np.array([0]), dev_loss=[1.0],
                             function=planted_function(effects, lambda a, b: a + b + 0.05)))
    analyses.append(analysis("minilm", 0, smol[:, :, ::-1], steps=np.array([0]), dev_loss=[np.nan]))
    return analyses, runs, cells


@pytest.fixture(scope="module")
def comparison() -> RoleLabComparison:
    analyses, runs, cells = _experiment()
    return role_lab(analyses, runs, cells, n_permutations=200, seed=0)


def test_the_comparison_reads_division_in_one_layer_and_redundancy_in_the_other(comparison: RoleLabComparison):
    rows = {r.layer: r for r in comparison.function if r.cell == "independent"}
    assert abs(rows[0].relative) < 0.05 and rows[1].relative == pytest.approx(0.6 / 0.4)
    assert rows[1].p == pytest.approx(2 / 64) and rows[0].p > 0.2
    (ensemble,) = comparison.ensemble
    assert (ensemble.reference, ensemble.params_ensemble, ensemble.params_reference) == ("independent", 4000, 1000)
    assert ensemble.difference == pytest.approx(0.5) and ensemble.p == pytest.approx(2 / 924) and ensemble.exact
    capacity = {r.cell: r for r in comparison.capacity}
    assert capacity["independent"].compared_with == "heads-2" and capacity["heads-2"].compared_with == ""
    assert capacity["independent"].difference == pytest.approx(-1.0)
    assert not comparison.identity or all(r.cell != "identical" or r.seeds_with_carrier == 0
                                          for r in comparison.identity)  # tied identical heads: no top carrier
    assert comparison.symmetry[0].stays_identical


def test_pretrained_rows(comparison: RoleLabComparison):
    roles = {(r.model, r.role): r for r in comparison.pretrained_roles}
    smol = roles[("smollm2", INDUCTION)]
    assert smol.carrier_names == ("2-1", "2-2", "3-1") and smol.layers == (1, 2) and smol.n_heads == 9
    assert roles[("smollm2", PREVIOUS)].carrier_names == ("1-2",)
    effects = [(e.name, e.effect) for e in comparison.pretrained_effects if e.model == "smollm2"]
    assert [n for n, _ in effects[:3]] == ["2-1", "2-2", "3-1"]
    assert [e for _, e in effects[:3]] == pytest.approx([0.5, 0.4, 0.2])
    (function,) = comparison.pretrained_function  # minilm has no tests of function
    assert function.heads_with_effect_layers == (0, 1, 2) and function.n_heads_with_effect == 7
    assert function.relative_per_layer[1] == pytest.approx(0.05 / 0.9)
    assert function.n_flips == 8 and function.p == pytest.approx(0.25)


def test_notes_say_how_many_tests_each_table_holds(comparison: RoleLabComparison):
    assert set(comparison.table_notes) == set(TABLES) and set(comparison.rules) == set(TABLES)
    # 2 cells x 2 layers with tests of function: independent and the ensemble
    assert "Tests: 4 tests (Holm over the table)" in comparison.table_notes["function"]
    assert "no tests" in comparison.table_notes["symmetry"]
    assert "D_match is never compared with D_within" in comparison.notes("distances")[1]
    assert comparison.notes("function")[0].startswith("Heads: every head and every within-layer pair")
    assert comparison.titles() == TABLES and comparison.answers == answers(comparison)
    assert comparison.why_empty("growth_tests").startswith("no rows: no two noise cells")
    assert comparison.to_pandas("growth_tests").empty


def test_save_load_round_trip(comparison: RoleLabComparison, tmp_path):
    folder = comparison.save(tmp_path / "lab")
    again = load(folder)
    assert isinstance(again, RoleLabComparison) and equal(again, comparison)
    for table in TABLES:
        frame = again.to_pandas(table)
        assert len(frame) == len(getattr(comparison, table))
    assert set(again.to_pandas("function").layer) == {1, 2}
    effects = again.to_pandas("pretrained_effects")
    assert (effects["layer"].astype(str) + "-" + effects["head"].astype(str) == effects["name"]).all()


def test_answers_quote_the_numbers_of_the_tables(comparison: RoleLabComparison):
    text = answers(comparison)
    assert len(text) == 5 and all(len(a) <= MAX_CHARS and not a.endswith("...") for a in text)
    assert "(identical: distance 0 at 4 checkpoints" in text[0]
    layer2 = next(r for r in comparison.function if r.cell == "independent" and r.layer == 1)
    from probes.compare.role_lab_answers import _p, _q

    assert f"layer 2 {layer2.relative:+.2f} ({_p(layer2.p_t)}, Holm {_q(layer2.p_holm)}" in text[1]
    assert "layer 1 +0.00" in text[1] and "4.0 induction carriers" in text[1]
    (ensemble,) = comparison.ensemble
    assert f"loss {ensemble.loss_ensemble:.3g}" in text[1] and f"p = {ensemble.p:.3g}" in text[1]
    heads4 = next(r for r in comparison.capacity if r.cell == "independent")
    assert f"4 heads {heads4.loss:.3g}" in text[2] and f"4 vs 2 p = {heads4.p_holm:.3g}" in text[2]
    assert f"median step {comparison.formation_tests[0].phase_step:.0f}" in text[3] and "no untied seed" in text[3]
    assert "smollm2 1 previous-token (layers 1) and 3 induction (layers 2, 3) carriers of 9 heads" in text[4]
    assert "interact by +0.17 relative" in text[4]
    assert "p = 0.25" in text[4] and "cannot tell" in text[4]


def test_answers_say_plainly_where_layers_differ_and_quote_the_growth_test():
    cells = (cell("independent"), cell("noise-1e-2", noise=1e-2), cell("noise-1e-4", noise=1e-4))
    function = tuple(FunctionRow("independent", layer, 4, 6, (0.1,) * 4, 6, 0.0, rel, (rel,) * 6, 0.2, p, 64, True,
                                 q, "", p_t=p) for layer, rel, p, q in ((0, 0.01, 0.9, 0.9), (1, 1.3, 0.0312, 0.0312)))
    growth = tuple(GrowthTestRow("noise-1e-2", "noise-1e-4", 1e-2, 1e-4, layer, "param", 6, 6, rate, rate + 0.001,
                                 -0.001, 0.7, 0.7, onset, onset + 40) for layer, rate, onset in ((0, 0.1, 30), (1, 0.06, 50)))
    symmetry = (SymmetryRow("identical", "induction", "identical", 0.0, 4, 6, 12, 401, 0.0, 0.0, True, True),
                SymmetryRow("noise-1e-2", "induction", "identical+noise:0.01", 0.0, 4, 6, 12, 401, 1.2, 0.3, False,
                            True))
    text = answers(RoleLabComparison(cells=cells, function=function, growth_tests=growth, symmetry=symmetry))
    assert "The layers differ: division of labour (additive) in layer 1, redundancy in layer 2." in text[1]
    assert "layer 2 +1.30 (p = 0.0312, Holm 0.0312: redundant" in text[1]
    assert "layer 1 0.1 vs 0.101 per step, p = 0.7" in text[0] and "layer 2 0.06 vs 0.061" in text[0]
    assert "onset steps layer 1 30 vs 70; layer 2 50 vs 90" in text[0] and "param distance up to 1.2" in text[0]
    assert "the unstable symmetric state decides" in text[0] and "does not prove equal rates" in text[0]
    assert all(len(a) <= MAX_CHARS and not a.endswith("...") for a in text)


def _grid_like() -> RoleLabComparison:
    """A comparison shaped like the lab's grid with long numbers: the answers must still fit, untruncated."""
    names = ("independent", "heads-1", "heads-2", "heads-8", "identical", "text-identical", "noise-1e-2", "noise-1e-4")
    cells = tuple(cell(n, {"heads-1": 1, "heads-2": 2, "heads-8": 8}.get(n, 4)) for n in names)
    symmetry = tuple(SymmetryRow(n, "induction", "identical", 0.0, 4, 6, 12, 401, 0.0, 0.0, True, True)
                     for n in ("identical", "text-identical")) + (
        SymmetryRow("noise-1e-2", "induction", "identical+noise:0.01", 0.0, 4, 6, 12, 401, 1.23456, 0.3, False, True),)
    growth = tuple(GrowthTestRow("noise-1e-2", "noise-1e-4", 1e-2, 1e-4, layer, "param", 6, 6, 0.0123456, 0.0119876,
                                 0.0003, 0.81234, 0.81234, 45.5, 139.8) for layer in (0, 1))
    function = tuple(FunctionRow("independent", layer, 4, 6, (0.1,) * 4, 6, 0.0, rel, (rel,) * 6, 0.2, 0.03125, 64,
                                 True, 0.9375, "", p_t=0.0123456) for layer, rel in ((0, -0.0123456), (1, 1.3456789)))
    roles = tuple(RoleSeedRow("independent", s, layer, role, 4, n, tuple(range(n)), 0, 0.9, ())
                  for s in range(6) for layer, role, n in ((0, PREVIOUS, 1), (1, INDUCTION, 4)))
    ensemble = (EnsembleRow("ensemble", "independent", 4, 4, 123456, 34567, 6, 6, 1.23456, 0.534567, 0.7, 0.00216,
                            924, True),)
    capacity = tuple(CapacityRow(n, "induction", h, 6, 2.3456 / h, 2.0 / h, 2.5 / h, ROLES, (1.0, 2.0, 3.0),
                                 prev, -0.123456, 0.00216, 924, True, 0.00648)
                     for n, h, prev in (("heads-1", 1, ""), ("heads-2", 2, "heads-1"), ("independent", 4, "heads-2"),
                                        ("heads-8", 8, "independent")))
    role_capacity = tuple(RoleCapacityRow(f"roles-{h}", h, 4, "fewer" if h < 4 else "as many" if h == 4 else "more",
                                          role, 3, 1.23456, 1.0, 1.5, 3 if k < h else 0, 1.0, (0, 1))
                          for h in (2, 4, 8) for k, role in enumerate(("previous", "two_back", "first", "induction")))
    formation = tuple(FormationRow("independent", s, 512, 256, 3.41234, 1.81234, ROLES, (-1, 128, 256),
                                   "previous-token first") for s in range(6))
    tests = (FormationTestRow("independent", 6, 5, 0, 1, 0, 0.0625, 0.0625, 512.0),)
    carriers = tuple(f"{layer}-{head}" for layer in range(1, 31) for head in range(1, 4))
    pretrained = tuple(PretrainedRoleRow(m, role, total, 90, carriers, tuple(range(30)), 0.99)
                       for m, total in (("smollm2", 270), ("minilm", 72)) for role in (PREVIOUS, INDUCTION))
    effects = tuple(PretrainedEffectRow("smollm2", 10, k, f"11-{k + 1}", 0.9, 0.123456) for k in range(5))
    function_h = (PretrainedFunctionRow("smollm2", 123, tuple(range(30)), (0.1,) * 30, 0.1234567, 0.00123, 10_000,
                                        False, ""),)
    return RoleLabComparison(cells=cells, symmetry=symmetry, growth_tests=growth, function=function, roles=roles,
                             ensemble=ensemble, capacity=capacity, role_capacity=role_capacity, formation=formation,
                             formation_tests=tests, pretrained_roles=pretrained, pretrained_effects=effects,
                             pretrained_function=function_h)


def test_answers_on_a_grid_like_comparison_fit_untruncated_with_their_tests():
    text = answers(_grid_like())
    assert all(len(a) <= MAX_CHARS and not a.endswith("...") for a in text)
    assert all(2 <= len([s for s in a.split(". ") if s]) <= 4 for a in text)
    assert "p = 0.812" in text[0] and "onset steps layer 1 46 vs 140" in text[0]
    assert "layer 2 +1.35 (p = 0.0123, Holm 0.938" in text[1] and "4.0 induction carriers" in text[1]
    assert "1 head 2.35, 2 heads 1.17, 4 heads 0.586, 8 heads 0.293" in text[2]
    assert "8 vs 4 p = 0.00648" in text[2] and "Roles task (4 roles), roles with a carrier in some seed: 2 heads (fewer): previous, two-back;" in text[2]
    assert "5 of 6 seeds" in text[3] and "p = 0.0625" in text[3]
    assert "smollm2 90 previous-token (layers 1, 2, 3, 4, ...)" in text[4] and "p = 0.00123" in text[4]
