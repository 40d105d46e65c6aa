"""The training lab's tables (probes.compare.lab, lab_roles) on synthetic units with known answers, and one small
real lab (tiny models trained from scratch, their atlases and a match between seeds) through the report section.

Synthetic: identical heads planted at distance exactly 0 (and a hair above), an excess distance growing
exponentially at known rates (a slow warm-up, a fast linear regime, saturation) at every step and at log-spaced
checkpoints, planted models whose heads play distinct recurring roles under shuffled indices (division of labour),
copies of one head per seed (seed-specific) and unrelated roles per seed, atlases with planted relation and
previous-token heads. Every (b) verdict is checked against its test's p-value, never an interval.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from probes.compare.fair_tests import PermutationTest, within_cross_test
from probes.compare.lab import CHECKPOINT_WINDOW, lab_tables, seed_growth
from probes.compare.lab_roles import (
    NO_DISTANCES,
    NO_DRAWS,
    combine_pairs,
    division_rows,
    division_verdict,
    layer_cross_tests,
    layer_verdict,
)
from probes.compare.lab_types import NOT_WITHIN, Division, GrowthRate, LabTables
from probes.compare.role_lab_symmetry import GROWTH_WINDOW
from probes.compare.types import Unit
from probes.training.symmetry import HeadSymmetry
from tests.compare import lab_fakes as F

STEPS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]


def _tables(units: list[Unit], models: dict[str, Any]) -> LabTables:
    tables = lab_tables(units, models, n_resamples=50, seed=0)
    assert tables is not None
    return tables


def _symmetry_cell(cell: str, init: str, dropout: float, values: dict[int, np.ndarray], heads: int = 2):
    units = [F.train_unit(cell, s, F.train_result(STEPS, F.symmetric(v, heads)), heads, init, dropout)
             for s, v in values.items()]
    models = {f"{cell}-s{s}": F.lab_model(cell, s, heads, init, dropout, last_step=STEPS[-1]) for s in values}
    return units, models


def test_identical_heads_stay_identical_exactly_and_dropout_breaks_it():
    zeros = np.zeros((len(STEPS), 2))
    hair = zeros.copy()
    hair[5, 1] = 1e-15  # one pair of one layer at one checkpoint of one seed, a rounding error above 0
    broken = np.linspace(0, 0.04, len(STEPS))[:, None] * np.ones((1, 2))
    units, models = [], {}
    for cell, init, dropout, values in (("identical", "identical", 0.0, {1: zeros, 2: zeros}),
                                        ("identical-hair", "identical", 0.0, {1: zeros, 2: hair}),
                                        ("identical-dropout", "identical", 0.1, {1: broken})):
        u, m = _symmetry_cell(cell, init, dropout, values)
        units += u
        models.update(m)
    verdicts = {v.cell: v for v in _tables(units, models).verdicts}
    assert verdicts["identical"].stays_identical and verdicts["identical"].expected
    assert verdicts["identical"].max_param == verdicts["identical"].max_attention == 0.0
    assert verdicts["identical"].n_seeds == 2 and verdicts["identical"].n_checkpoints == len(STEPS)
    assert "permuting" in verdicts["identical"].reason and "equal updates" in verdicts["identical"].reason
    assert not verdicts["identical-hair"].stays_identical  # exactly 0 means exactly 0
    assert verdicts["identical-hair"].max_attention == 1e-15
    dropout = verdicts["identical-dropout"]
    assert not dropout.stays_identical and not dropout.expected and "dropout" in dropout.reason
    assert dropout.max_attention == pytest.approx(0.04)


def _excess(steps: np.ndarray, fast: float, slow: float = 0.01, start: int = 5, knee: int = 25, until: int = 60,
            eps: float = 1e-6, base: float = 0.0) -> np.ndarray:
    """``base`` (excess 0) before ``start``, then ``base + eps * exp(g(step))``: ln(excess) grows at ``slow`` per step
    up to ``knee``, at ``fast`` from there to ``until``, then stays flat (saturation)."""
    s = np.asarray(steps, dtype=float)
    t = np.clip(s, start, until) - start
    log_excess = slow * np.minimum(t, knee - start) + fast * np.maximum(t - (knee - start), 0)
    return np.where(s < start, base, base + eps * np.exp(log_excess))


def _stepped(steps: np.ndarray, fast: dict[str, tuple[float, float]], heads: int = 2) -> HeadSymmetry:
    """A head symmetry at ``steps`` whose layers' distances follow :func:`_excess` (``fast``: distance -> the two
    layers' fast rates)."""
    param = F.symmetric(np.stack([_excess(steps, r) for r in fast["param"]], 1), heads)
    attention = F.symmetric(np.stack([_excess(steps, r) for r in fast["attention"]], 1), heads)
    return HeadSymmetry(np.asarray(steps, dtype=np.int64), param, attention, 4)


def test_peak_growth_rate_is_the_local_rate_at_every_step_not_a_fit_across_warm_up_and_saturation():
    every = np.arange(0, 101)
    units, models = [], {}
    for seed, fast in ((1, {"param": (0.2, 0.1), "attention": (0.3, 0.15)}),
                       (2, {"param": (0.4, 0.1), "attention": (0.3, 0.15)})):
        result = F.train_result(STEPS, F.symmetric(np.full((len(STEPS), 2), 0.3), 2))  # checkpoints: no rise
        result.step_symmetry = _stepped(every, fast)  # preferred over the checkpoints
        units.append(F.train_unit("noise", seed, result, 2, "identical+noise:0.01"))
        models[f"noise-s{seed}"] = F.lab_model("noise", seed, 2, "identical+noise:0.01", last_step=STEPS[-1])
    rows = {(g.layer, g.distance): g for g in _tables(units, models).growth}
    assert set(rows) == {(layer, d) for layer in (0, 1) for d in ("param", "attention")}
    param = rows[(0, "param")]
    assert (param.rate, param.low, param.high) == (pytest.approx(0.3), pytest.approx(0.2), pytest.approx(0.4))
    assert param.doubling == pytest.approx(math.log(2) / 0.3)
    assert (param.source, param.window, param.n_seeds) == ("every step", GROWTH_WINDOW, 2)
    assert param.r2 == pytest.approx(1.0)
    first, last = (int(x) for x in param.windows["1"].split(".."))
    assert 25 <= first and last <= 60 and last - first == GROWTH_WINDOW - 1  # inside the fast regime
    assert rows[(1, "attention")].rate == pytest.approx(0.15)
    # a single least-squares line over the whole rise, warm-up to saturation, is far slower than the local rate
    rise = every[(every >= 5) & (every <= 100)]
    assert np.polyfit(rise, np.log(_excess(rise, 0.2)), 1)[0] < 0.6 * 0.2


def test_growth_on_log_spaced_checkpoints_says_so_and_a_run_without_a_rise_has_no_rate():
    checkpoints = np.asarray(STEPS)
    units = [F.train_unit("noise", 1, F.train_result(STEPS, _stepped(checkpoints, {"param": (0.05, 0.05),
                                                                                    "attention": (0.05, 0.05)},
                                                                     ).attention_distance), 2,
                          "identical+noise:0.01"),
             F.train_unit("noise", 2, F.train_result(STEPS, F.symmetric(np.zeros((len(STEPS), 2)), 2)), 2,
                          "identical+noise:0.01")]
    rows = {(g.layer, g.distance): g for g in _tables(units, {}).growth}
    row = rows[(0, "attention")]
    assert (row.source, row.window, row.n_seeds) == ("checkpoints", CHECKPOINT_WINDOW, 2)
    assert row.windows["2"] == "no window of positive excess"  # flat: no rate, and said so
    # the fastest window of 3 checkpoints, (16, 32, 64), straddles the knee at step 25 and the saturation at 60:
    # its slope (a least-squares line through the three points) is well below the local rate 0.05
    at = np.array([16.0, 32.0, 64.0])
    assert row.windows["1"] == "16..64"
    assert row.rate == pytest.approx(np.polyfit(at, np.log(_excess(at, 0.05)), 1)[0]) and row.rate < 0.05
    assert row.low == row.high == row.rate  # one seed with a rate
    fit, text = seed_growth(HeadSymmetry(np.array([1, 2, 4]), np.zeros((3, 1, 2, 2)), np.zeros((3, 1, 2, 2)), 1),
                            "param", 0, 3)
    assert fit is None and "step 0" in text  # the excess is over step 0


def test_symmetry_and_final_loss_are_means_over_seeds_with_their_ranges():
    heads = 3
    one = np.full((len(STEPS), 2), 0.1)
    two = np.full((len(STEPS), 2), 0.3)
    units = [F.train_unit("independent", 1, F.train_result(STEPS, F.symmetric(one, heads), losses=[9.0] * 11 + [5.0]),
                          heads),
             F.train_unit("independent", 2, F.train_result(STEPS, F.symmetric(two, heads), losses=[9.0] * 11 + [6.0]),
                          heads)]
    tables = _tables(units, {})
    row = next(r for r in tables.symmetry if r.layer == 1 and r.step == 64)
    assert (row.attention, row.attention_low, row.attention_high, row.n_seeds) == pytest.approx((0.2, 0.1, 0.3, 2))
    assert len(tables.symmetry) == 2 * len(STEPS)
    loss = tables.final_loss[0]
    assert (loss.loss, loss.low, loss.high, loss.last_step, loss.heads) == (5.5, 5.0, 6.0, 1000, heads)
    assert loss.unigram == 7.0


def _planted_cell(cell: str, roles: dict[int, list[list[int]]], **noise: float) -> tuple[list[Unit], dict[str, Any]]:
    maps = {s: F.planted(r, s, **noise) for s, r in roles.items()}
    models = {f"{cell}-s{s}": F.lab_model(cell, s, len(r[0])) for s, r in roles.items()}
    seeds = sorted(maps)
    units = [Unit("match-seeds", "match", f"{cell}-s{a}~{cell}-s{b}", "sample", F.match_run(maps[a], maps[b]))
             for k, a in enumerate(seeds) for b in seeds[k + 1:]]
    return units, models


def test_division_verdicts_come_from_permutation_tests_with_their_p_values():
    division = {1: [[0, 1, 2, 3], [4, 5, 6, 7]], 2: [[2, 0, 3, 1], [7, 4, 6, 5]], 3: [[1, 3, 0, 2], [5, 7, 4, 6]]}
    copies = {1: [[0, 0, 0, 0], [4, 4, 4, 4]], 2: [[1, 1, 1, 1], [5, 5, 5, 5]], 3: [[2, 2, 2, 2], [6, 6, 6, 6]]}
    unrelated = {1: [[0, 1, 2, 3], [4, 5, 6, 7]], 2: [[4, 5, 6, 7], [0, 1, 2, 3]], 3: [[5, 7, 0, 2], [1, 3, 4, 6]]}
    units, models = [], {}
    for cell, roles in (("roles", division), ("copies", copies), ("unrelated", unrelated)):
        u, m = _planted_cell(cell, roles)
        units += u
        models.update(m)
    why: dict[str, list[str]] = {}
    rows = {r.cell: r for r in division_rows(units, models, why)}
    # copies of one head per seed: in every pair and layer the observed grouping is the one most extreme of the
    # C(8, 4) / 2 = 35 regroupings, so the intersection-union p is exactly 1/35
    copied = rows["copies"]
    assert copied.verdict == "seed-specific" and copied.layer_verdicts == ("seed-specific", "seed-specific")
    assert copied.p_cross == (pytest.approx(1 / 35), pytest.approx(1 / 35)) and copied.n_regroupings == 35
    assert all(d > 0 for d in copied.cross_minus_within) and copied.d_cross > copied.d_within
    # distinct roles recurring under shuffled indices: a head and its counterpart can change seeds without changing
    # the statistic (8 of the 35 regroupings), so 4 heads cannot reject exchangeability; D_match is far below the
    # shuffled-layers null (no permutation reaches it: p = 1 / 201) and head numbers are not kept
    roles = rows["roles"]
    assert roles.verdict == "no difference found" and all(p >= 8 / 35 for p in roles.p_cross)
    assert roles.p_match == pytest.approx(1 / 201) and roles.n_null_draws == 200
    assert (roles.identity_kept, roles.identity_pairs) == (1, 24)  # head 3 of layer 2, seeds 1 and 2
    assert roles.p_identity == pytest.approx(1 - 0.75 ** 24)  # P(X >= 1), X ~ Binomial(24, 1/4)
    assert "binomial p" in roles.why and "not shown to keep" in roles.why
    assert rows["unrelated"].p_match > 0.05 and "not shown below" in rows["unrelated"].why
    assert roles.d_self == 0.0 and "shuffled" in roles.null and roles.tested


def test_layers_that_differ_get_a_verdict_each():
    """Layer 1 holds copies of one head per seed, layer 2 distinct roles that recur: the verdict says each."""
    roles = {1: [[0, 0, 0, 0], [4, 5, 6, 7]], 2: [[1, 1, 1, 1], [6, 4, 7, 5]], 3: [[2, 2, 2, 2], [5, 7, 4, 6]]}
    units, models = _planted_cell("mixed", roles)
    row = division_rows(units, models, {})[0]
    assert row.layer_verdicts == ("seed-specific", "no difference found")
    assert row.verdict == "layers differ: layer 1 seed-specific, layer 2 no difference found"
    assert row.p_cross[0] == pytest.approx(1 / 35) and row.p_cross[1] >= 8 / 35
    assert row.why.startswith("layer 1: D_cross - D_within +") and "layer 2: D_cross - D_within -" in row.why


def test_a_match_saved_without_the_null_draws_still_loads_and_says_untested():
    maps = {s: F.planted(r, s, n_sentences=12) for s, r in {1: [[0, 0, 0, 0]], 2: [[1, 1, 1, 1]]}.items()}
    models = {f"old-s{s}": F.lab_model("old", s, 4, layers=1) for s in (1, 2)}
    old = F.match_run(maps[1], maps[2], 20, draws=False)
    row = division_rows([Unit("match-seeds", "match", "old-s1~old-s2", "sample", old)], models, {})[0]
    assert math.isnan(row.p_match) and row.match_test == NO_DRAWS and NO_DRAWS in row.why
    assert row.verdict == "seed-specific"  # the D_cross test needs only the distances the match keeps
    bare = SimpleNamespace(matching=old.matching, summary=old.summary, distances=None)
    row = division_rows([Unit("match-seeds", "match", "old-s1~old-s2", "sample", bare)], models, {})[0]
    assert row.verdict == "untested" and row.cross_test == NO_DISTANCES


def test_layer_cross_tests_are_the_fair_test_on_each_layers_block_of_the_match_distances():
    """A slow reference: each layer's (2H, 2H) matrix built entry by entry from hand-made distances."""
    rng = np.random.default_rng(3)
    n = 2 * 4  # 2 layers x 4 heads
    cross = rng.random((n, n))
    own = {m: rng.random((n, n)) for m in "ab"}
    for m in own:
        own[m] = own[m] + own[m].T
        np.fill_diagonal(own[m], 0.0)
    distances = SimpleNamespace(shape_a=(2, 4), shape_b=(2, 4), within_a=np.ones(28), per_row=lambda: cross,
                                within=lambda m: own[m])
    tests = layer_cross_tests(SimpleNamespace(distances=distances))
    assert not isinstance(tests, str) and len(tests) == 2
    for layer, test in enumerate(tests):
        heads = [layer * 4 + h for h in range(4)]
        slow = np.zeros((8, 8))
        for i in range(8):
            for j in range(8):
                a, b = heads[i % 4], heads[j % 4]
                slow[i, j] = (own["a"][a, b] if i < 4 and j < 4 else own["b"][a, b] if i >= 4 and j >= 4
                              else cross[a, b] if i < 4 else cross[b, a])
        expected = within_cross_test(slow, 4)
        assert (test.statistic, test.p_value, test.n_permutations) == (pytest.approx(expected.statistic),
                                                                       expected.p_value, 35)


def test_layer_verdicts_and_their_combination_follow_the_rule():
    assert layer_verdict(-0.1, 0.01, 1 / 35) == "division of labour"
    assert layer_verdict(0.1, 0.01, 1 / 35) == "seed-specific"
    assert layer_verdict(-0.1, 0.3, 1 / 35) == "no difference found"
    assert layer_verdict(0.5, 1 / 3, 1 / 3) == "untested"  # 2 heads: 3 regroupings, no p below 0.05 possible
    assert layer_verdict(math.nan, math.nan, 1 / 35) == "untested"
    assert division_verdict(("seed-specific", "seed-specific")) == "seed-specific"
    assert division_verdict(("seed-specific", "no difference found")) == (
        "layers differ: layer 1 seed-specific, layer 2 no difference found")

    def test(stat: float, p: float) -> PermutationTest:
        return PermutationTest(stat, p, 35, True, 0.1, 0.1 + stat)

    assert combine_pairs([test(0.2, 0.01), test(0.1, 0.03)]) == (pytest.approx(0.15), 0.03)  # the largest p
    assert combine_pairs([test(0.2, 0.01), test(-0.1, 0.03)])[1] == 1.0  # one pair goes the other way


def test_the_lab_answer_gives_each_verdict_with_its_p_value_and_an_old_row_says_untested():
    from probes.reports.experiment.columns import Table
    from probes.reports.experiment.lab import OLD_GROWTH, UNTESTED_OLD, lab_answers, lab_table

    copies = {1: [[0, 0, 0, 0], [4, 4, 4, 4]], 2: [[1, 1, 1, 1], [5, 5, 5, 5]]}
    units, models = _planted_cell("copies", copies)
    lab = _tables(units, models)
    answer = lab_answers(lab)["b"]
    assert "Cell copies: seed-specific (D_cross - D_within layer 1 +" in answer
    assert answer.count("(p 0.029)") == 2  # 1/35 in each layer, 1 pair of seeds
    assert "binomial p" in answer and "shuffled-layers null (p " in answer
    for text in (answer, " ".join(lab.rules.values())):
        assert "intervals compared" not in text and "overlap" not in text
    row = lab.division[0]
    names = [f.name for f in dataclasses.fields(Division)]
    saved = {n: getattr(row, n) for n in names[:names.index("d_cross")]}  # the fields a row held before the tests
    old = Division(**{**saved, "verdict": "ensemble"})  # a verdict read off overlapping intervals
    assert not old.tested and math.isnan(old.p_match)
    answer = lab_answers(dataclasses.replace(lab, division=(old,)))["b"]
    assert f"Cell copies: {UNTESTED_OLD}." in answer and "ensemble" not in answer
    table = lab_table("division", dataclasses.replace(lab, division=(old,)), Table)
    assert table.cells[0][table.headers.index("verdict")] == UNTESTED_OLD
    # a growth row saved before the peak rate (a fit across the whole rise) is not reported as a rate
    fitted = GrowthRate("noise", 0, "attention", 3, 0.0146, 0.01, 0.02, 47.4, 0.52, {"1": "8..256"})
    old_lab = dataclasses.replace(lab, growth=(fitted,))
    assert OLD_GROWTH in lab_answers(old_lab)["a"] and "47.4" not in lab_answers(old_lab)["a"]
    table = lab_table("growth", old_lab, Table)
    assert "saved before the peak rate" in table.cells[0][table.headers.index("measured on")]


class _Roles:
    """An atlas's roles with the positional offsets planted."""

    def __init__(self, real: Any, offsets: np.ndarray) -> None:
        self.real, self.offsets = real, offsets

    def positional(self, share: float = 0.9) -> np.ndarray:
        return self.offsets

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _atlas(shape: tuple[int, int], perfect: frozenset[int], previous: tuple[int, ...] = (), seed: int = 0) -> Any:
    from tests.compare.fakes import fake_atlas

    atlas = fake_atlas(shape, perfect, seed=seed)
    offsets = np.zeros(shape, dtype=np.int64)
    for flat in previous:
        offsets.flat[flat] = -1
    offsets.flat[shape[0] * shape[1] - 1] = 3  # positional, but not previous/next token
    return dataclasses.replace(atlas, roles=_Roles(atlas.roles, offsets))


def test_capacity_and_formation_count_planted_relation_and_previous_token_heads():
    units, models = [], {}
    for heads, perfect in ((2, frozenset({1})), (4, frozenset({1, 5}))):
        cell = f"heads-{heads}"
        units.append(F.train_unit(cell, 1, F.train_result(STEPS, None, losses=[8.0] * 11 + [6.0 - heads / 10]), heads))
        models[f"{cell}-s1"] = F.lab_model(cell, 1, heads, last_step=STEPS[-1])
        units.append(Unit("atlas", "atlas", f"{cell}-s1", "sample", _atlas((2, heads), perfect, previous=(0,))))
    curve = np.full((len(STEPS), 2), 0.001)
    curve[STEPS.index(16):, 1] = 0.05  # layer 2 comes apart at step 16 (50 x its step-0 value)
    units.append(F.train_unit("noise", 1, F.train_result(STEPS, F.symmetric(curve, 4)), 4, "identical+noise:0.01"))
    for step, perfect, previous in ((0, frozenset(), ()), (64, frozenset(), (2,)), (None, frozenset({3}), (2,))):
        name = "noise-s1" + ("" if step is None else f"-step{step}")
        models[name] = F.lab_model("noise", 1, 4, "identical+noise:0.01", step=step, last_step=STEPS[-1])
        units.append(Unit("atlas", "atlas", name, "sample", _atlas((2, 4), perfect, previous)))
    tables = _tables(units, models)
    capacity = {c.heads: c for c in tables.capacity}
    assert sorted(capacity) == [2, 4] and capacity[2].n_heads == 4 and capacity[4].n_heads == 8
    assert (capacity[2].specialised, capacity[4].specialised) == (1, 2)
    assert (capacity[2].prev_next, capacity[2].positional) == (1, 2)
    assert capacity[4].loss == pytest.approx(5.6)
    formation = tables.formation[0]
    assert (formation.cell, formation.apart_step, formation.apart_layer) == ("noise", 16, 1)
    assert (formation.positional_step, formation.relation_step) == (64, STEPS[-1])
    assert formation.steps_checked == (0, 64, STEPS[-1])
    assert NOT_WITHIN == -1


def test_compare_puts_the_lab_on_the_comparison_and_it_round_trips(tmp_path: Path):
    from probes import load
    from probes.compare import compare
    from probes.results import equal

    units, models = _symmetry_cell("identical", "identical", 0.0, {1: np.zeros((len(STEPS), 2))})
    comparison = compare(units, models, seed_questions=False, n_resamples=20)
    assert comparison.lab is not None and comparison.lab.verdicts[0].stays_identical
    assert "division" in comparison.lab.missing  # no match unit, and said so
    loaded = load(comparison.save(tmp_path / "comparison"))
    assert equal(loaded, comparison)
    assert compare([], {}, seed_questions=False).lab is None  # no lab, no lab tables


# ---------------------------------------------------------------- a real lab, end to end (tiny, on sample:dev)

TINY = dict(arch="gpt2", layers=2, heads=2, hidden=32, treebank=("sample:dev",), tokenizer="train:300", steps=8,
            batch_size=4, seq_len=64)


@pytest.fixture(scope="module")
def real_lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Unit], dict[str, Any]]:
    """Two seeds of an independent cell and one of an identical one, trained 8 steps; atlases on the final models
    and on one checkpoint (relations chosen on sample:test, so that one has the words to be listed); the two
    independent seeds matched within layers."""
    torch = pytest.importorskip("torch")
    from probes.runs.atlas import atlas
    from probes.runs.match import match_models
    from probes.runs.train import train_model
    from probes.training.config import TrainConfig

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("lab")
    units, models = [], {}
    for cell, init, seed in (("independent", "independent", 1), ("independent", "independent", 2),
                             ("identical", "identical", 1)):
        config = TrainConfig(init=init, seed=seed, **TINY)
        out = root / "train" / cell / f"seed-{seed}"
        report = train_model(config, out, progress=False, symmetry_sentences=4)
        units.append(Unit("train", "train", f"{cell}-s{seed}", cell, report,
                          {"cell": cell, "seed": seed, "config": config.to_dict()}))
        for step in (None, 2):
            name = f"{cell}-s{seed}" + ("" if step is None else f"-step{step}")
            models[name] = F.lab_model(cell, seed, 2, init, last_step=8, step=step)
            spec = f"trained:{out}@{'last' if step is None else step}"
            if cell == "independent" and (seed == 1 or step is None):
                units.append(Unit("atlas", "atlas", name, "sample", atlas(spec, "sample:dev", select_on="sample:test", js_sentences=5,
                                                                          grad_sentences=0, head_type_sequences=0)))
    run = match_models(f"trained:{root}/train/independent/seed-1@last", f"trained:{root}/train/independent/seed-2@last",
                       "sample:dev", within_layers=True, limit=20, n_resamples=20)
    units.append(Unit("match-seeds", "match", "independent-s1~independent-s2", "sample", run))
    torch.set_num_threads(before)
    return units, models


def test_real_lab_tables_and_report_section_with_one_based_heads(real_lab, tmp_path: Path):
    from probes.compare.types import Comparison
    from probes.reports.experiment.report import write_experiment_report

    units, models = real_lab
    lab = _tables(units, models)
    verdict = next(v for v in lab.verdicts if v.cell == "identical")
    assert verdict.stays_identical and verdict.max_attention == 0.0  # AdamW, no attention dropout: exactly equal
    assert {r.cell for r in lab.final_loss} == {"independent", "identical"}
    assert [d.cell for d in lab.division] == ["independent"] and lab.division[0].n_pairs == 1
    division = lab.division[0]
    assert division.verdict == "untested" and "smallest p it can give is 0.333" in division.cross_test  # 2 heads
    assert division.n_null_draws == 20 and 1 / 21 <= division.p_match <= 1  # match_models keeps the null's draws
    assert lab.capacity[0].n_atlas == 2 and lab.capacity[0].n_heads == 4
    assert math.isfinite(lab.capacity[0].specialised) and "capacity" not in lab.missing  # decided, held out
    formation = next(r for r in lab.formation if r.cell == "independent" and r.seed == 1)
    assert formation.steps_checked == (2, 8)
    comparison = Comparison(models={k: {"kind": v["kind"], "spec": v["spec"]} | v for k, v in models.items()}, lab=lab)
    paths = write_experiment_report(comparison, {"command": "probes run", "experiment": {"name": "lab"}}, tmp_path)
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## Training lab" in text and "Cell independent: untested (" in text
    for stem in ("lab_symmetry", "lab_loss", "lab_capacity", "lab_division"):
        assert f"figures/{stem}.png" in paths
    assert "tables/lab_division.csv" in paths
    # layers 1-based: the symmetry table lists layers 1 and 2, never 0
    table = text.split("Lab (a): distance between the heads of a layer per step")[1].split("####")[0]
    layers = {line.split("|")[2].strip() for line in table.splitlines() if line.startswith("| independent")}
    assert layers == {"1", "2"}
    assert "numbered from 1" in table


def test_lab_models_enter_only_the_lab_section(real_lab):
    """The seed-question tables hold the [models] models alone; the lab's models (final and checkpoint) only its
    own section, and a note says how many there are."""
    from probes.compare import compare

    units, models = real_lab
    units = [u for u in units if u.kind != "match"]  # its model is a pair of names here
    comparison = compare(units, models, seed_questions=True, n_resamples=20)
    assert comparison.lab is not None and comparison.lab.final_loss
    rows = [*comparison.best_heads, *comparison.head_kinds, *comparison.spread, *comparison.specialisation,
            *comparison.layers, *comparison.consistency]
    assert not [r for r in rows if getattr(r, "model", None) in models]
    assert comparison.models == {}
    assert any(n.startswith(f"The lab's {len(models)} models") for n in comparison.notes)
