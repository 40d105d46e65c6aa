"""The training lab's tables (probes.compare.lab, lab_roles) on synthetic units with known answers, and one small
real lab (tiny models trained from scratch, their atlases and a match between seeds) through the report section.

Synthetic: identical heads planted at distance exactly 0 (and a hair above), a distance growing geometrically at a
known rate, planted models whose heads play distinct recurring roles under shuffled indices (division of labour),
alike heads (ensemble) and unrelated roles per seed (idiosyncratic), atlases with planted relation and
previous-token heads.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.compare.lab import growth_rate, lab_tables
from probes.compare.lab_roles import division_rows, division_verdict
from probes.compare.lab_types import NOT_WITHIN, LabTables
from probes.compare.types import Unit
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


def _geometric(rate: float, d0: float = 1e-6, until: int = 256, dip: float | None = None) -> np.ndarray:
    """A distance d0 exp(rate step) up to ``until``, flat after; ``dip``: step 0 above the curve (an initial fall)."""
    steps = np.asarray(STEPS, dtype=float)
    d = d0 * np.exp(rate * np.minimum(steps, until))
    if dip is not None:
        d[0] = dip
    return d


def test_geometric_growth_rate_is_recovered_per_layer_with_its_range_over_seeds():
    curves = {1: np.stack([_geometric(0.04), _geometric(0.02)], 1),
              2: np.stack([_geometric(0.05, dip=1e-3), _geometric(0.03)], 1),  # seed 2 falls first, then grows
              3: np.stack([_geometric(0.06), _geometric(0.04)], 1)}
    units, models = _symmetry_cell("noise", "identical+noise:0.01", 0.0, curves)
    growth = {g.layer: g for g in _tables(units, models).growth}
    assert growth[0].rate == pytest.approx(0.05, rel=1e-9)
    assert (growth[0].low, growth[0].high) == (pytest.approx(0.04), pytest.approx(0.06))
    assert growth[0].doubling == pytest.approx(math.log(2) / 0.05)
    assert growth[1].rate == pytest.approx(0.03, rel=1e-9)
    assert growth[0].windows == {"1": "0..256", "2": "1..256", "3": "0..256"}  # the dip at step 0 is left out
    assert growth[0].r2 == pytest.approx(1.0)
    rate, _, window = growth_rate(STEPS, [0.0] * len(STEPS))
    assert math.isnan(rate) and window is None  # no rise, no rate


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


def test_division_of_labour_ensemble_and_idiosyncratic_heads_are_told_apart():
    division = {1: [[0, 1, 2, 3], [4, 5, 6, 7]], 2: [[2, 0, 3, 1], [7, 4, 6, 5]], 3: [[1, 3, 0, 2], [5, 7, 4, 6]]}
    alike = {s: [[0, 0, 0, 0], [4, 4, 4, 4]] for s in (1, 2, 3)}
    unrelated = {1: [[0, 1, 2, 3], [4, 5, 6, 7]], 2: [[4, 5, 6, 7], [0, 1, 2, 3]], 3: [[5, 7, 0, 2], [1, 3, 4, 6]]}
    units, models = [], {}
    for cell, roles, noise in (("roles", division, {}), ("alike", alike, {"seed_noise": 0.1, "head_noise": 0.01}),
                               ("unrelated", unrelated, {})):
        u, m = _planted_cell(cell, roles, **noise)
        units += u
        models.update(m)
    why: dict[str, list[str]] = {}
    rows = {r.cell: r for r in division_rows(units, models, why)}
    assert rows["roles"].verdict == "division of labour"
    assert rows["alike"].verdict == "ensemble"
    assert rows["unrelated"].verdict == "idiosyncratic"
    roles = rows["roles"]
    assert (roles.n_pairs, roles.n_models, roles.heads, roles.chance) == (3, 3, 4, 0.25)
    # shuffled indices: no head keeps its number except head 3 of layer 2 between seeds 1 and 2 (1 of 24 pairs)
    assert roles.identity_share == pytest.approx(np.mean([0, 1 / 8, 0]))
    assert "head numbers are arbitrary" in roles.why
    assert roles.d_match < roles.d_match_high < roles.d_null_low and roles.d_within_low > roles.d_match_high
    assert roles.d_self == 0.0 and "shuffled" in roles.null


def test_division_verdict_follows_its_rule_with_intervals():
    w, m, n = (0.5, 0.45, 0.55), (0.05, 0.04, 0.06), (0.3, 0.2, 0.4)
    assert division_verdict(w, m, n)[0] == "division of labour"
    assert division_verdict((0.05, 0.03, 0.07), m, n)[0] == "ensemble"  # D_within near D_match, below D_null
    assert division_verdict(w, (0.3, 0.25, 0.35), n)[0] == "idiosyncratic"  # D_match near D_null
    # overlapping, but D_match's value below D_null's interval: neither recurrence nor its absence is shown
    assert division_verdict(w, (0.18, 0.12, 0.22), n)[0] == "inconclusive"
    assert division_verdict((0.3, 0.1, 0.5), (0.3, 0.1, 0.5), (0.3, 0.1, 0.5))[0] == "inconclusive"  # all overlap
    assert division_verdict(w, (0.05, math.nan, math.nan), n)[0] == "inconclusive"  # an interval is missing


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
    assert lab.division[0].verdict in ("division of labour", "ensemble", "idiosyncratic", "inconclusive")
    assert lab.capacity[0].n_atlas == 2 and lab.capacity[0].n_heads == 4
    assert math.isfinite(lab.capacity[0].specialised) and "capacity" not in lab.missing  # decided, held out
    formation = next(r for r in lab.formation if r.cell == "independent" and r.seed == 1)
    assert formation.steps_checked == (2, 8)
    comparison = Comparison(models={k: {"kind": v["kind"], "spec": v["spec"]} | v for k, v in models.items()}, lab=lab)
    paths = write_experiment_report(comparison, {"command": "probes run", "experiment": {"name": "lab"}}, tmp_path)
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## Training lab" in text and "(b) independent: " in text
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
