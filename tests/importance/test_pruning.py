"""Pruning curves, score orders and one head per layer, against planted objectives and hand computations."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.errors import ConfigError, InputError
from probes.extraction.interventions import head_means, intervene
from probes.importance.pruning import (
    OnePerLayer,
    PruningResult,
    one_head_per_layer,
    pruning_curves,
    pruning_steps,
    score_order,
)
from probes.results import equal
from tests.importance.cases import (
    OneHeadObjective,
    ProjectionObjective,
    batches_of,
    one_per_layer,
    per_sentence_losses,
    pruning_result,
    tiny_bert,
)

SEEDS = tuple(range(8))


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    return tiny_bert(tmp_path_factory.mktemp("models"))


def test_steps_prune_rounded_fractions() -> None:
    assert pruning_steps(0.25, 8).tolist() == [0, 2, 4, 6, 8]
    assert pruning_steps(0.1, 72).tolist() == [0, 7, 14, 22, 29, 36, 43, 50, 58, 65, 72]
    assert pruning_steps(0.3, 10).tolist() == [0, 3, 6, 9, 10]  # the last step prunes all
    assert pruning_steps(0.25, 6).tolist() == [0, 2, 3, 5, 6]  # 1.5 and 4.5 round up
    assert pruning_steps(0.05, 8).tolist() == list(range(9))  # steps pruning no new head are dropped
    assert pruning_steps(1, 8).tolist() == [0, 8]
    for bad in (0, 1.5, -0.1):
        with pytest.raises(ConfigError, match=r"step: expected a fraction of the heads in \(0, 1\]"):
            pruning_steps(bad, 8)


def test_score_order_by_hand() -> None:
    scores = np.array([[0.5, np.nan, 0.2], [0.1, 0.5, -np.inf]])
    assert score_order(scores).tolist() == [1, 5, 3, 2, 0, 4]  # NaN first, then lowest; 0.5 tie by index
    assert score_order(np.zeros((2, 2))).tolist() == [0, 1, 2, 3]


def test_planted_head_goes_last_and_random_band_rises_earlier(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    batches = batches_of(tok, budget=64)
    objective = OneHeadObjective(0, 1)
    result = pruning_curves(model, batches, objective, random_seeds=SEEDS, step=0.25, one_per_layer=False,
                            data="tiny", selection="tiny")
    assert result.n_pruned.tolist() == [0, 2, 4, 6, 8]
    np.testing.assert_allclose(result.fractions, [0, 0.25, 0.5, 0.75, 1])
    assert result.curves == ("importance",) + tuple(f"random:{s}" for s in SEEDS)
    # Every other head has importance 0 (ties by index), recomputed at each step: head (0, 1) = flat 1 goes last.
    assert result.order[0].tolist() == [0, 2, 3, 4, 5, 6, 7, 1]
    base = per_sentence_losses(model, batches, objective, torch.ones(2, 4, dtype=torch.float64)).mean()
    importance = result.curve("importance")
    np.testing.assert_allclose(importance[:4], base, rtol=1e-12)
    assert importance[4] == pytest.approx(1.0)  # all heads gone: the planted head's output is 0
    for c, seed in enumerate(SEEDS, start=1):  # a random curve rises exactly when it has pruned head 1
        order = np.random.default_rng(seed).permutation(8)
        assert result.order[c].tolist() == order.tolist()
        expected = [1.0 if 1 in order[:n] else base for n in result.n_pruned]
        np.testing.assert_allclose(result.curve(f"random:{seed}"), expected, rtol=1e-12)
    low, median, high = result.random_band()
    assert high[1] > base + 0.01  # some random order prunes it in the first step
    assert (importance <= low + 1e-12).all()


def test_curves_start_unmodified_end_all_ablated(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    batches = batches_of(tok, budget=64)
    objective = ProjectionObjective(model.config.hidden_size)
    scores = np.arange(8.0).reshape(2, 4)[::-1]  # a score order: layer 2 first, then layer 1
    result = pruning_curves(model, batches, objective, select_batches=batches_of(tok, budget=16)[:2],
                            orders={"confident-last": scores}, random_seeds=(0, 1), step=0.5, importance="once",
                            data="tiny", selection="first sentences")
    assert result.metrics == ("loss", "accuracy") and result.higher_is_better == (False, True)
    assert result.curves == ("importance", "random:0", "random:1", "confident-last")
    assert result.order[3].tolist() == [4, 5, 6, 7, 0, 1, 2, 3]
    unmodified = per_sentence_losses(model, batches, objective, torch.ones(2, 4, dtype=torch.float64))
    ablated = per_sentence_losses(model, batches, objective, torch.zeros(2, 4, dtype=torch.float64))
    np.testing.assert_allclose(result.values[:, 0, 0], unmodified.mean(), rtol=1e-12)
    np.testing.assert_allclose(result.values[:, -1, 0], ablated.mean(), rtol=1e-12)
    np.testing.assert_allclose(result.values[:, 0, 1], (unmodified < 1).mean())
    half = np.ones(8)
    half[result.order[3, :4]] = 0  # the score order's middle step, by hand
    np.testing.assert_allclose(result.curve("confident-last")[1], per_sentence_losses(
        model, batches, objective, torch.tensor(half.reshape(2, 4))).mean(), rtol=1e-12)
    assert (result.data, result.selection, result.importance) == ("tiny", "first sentences", "once")
    assert isinstance(result.one_per_layer, OnePerLayer)
    table = result.to_pandas()
    assert list(table.columns) == ["order", "fraction_pruned", "n_pruned", "objective", "accuracy"]
    assert len(table) == 4 * 3 and table["objective"].iloc[-1] == pytest.approx(ablated.mean())


def test_mean_ablation_passes_through(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    batches = batches_of(tok, budget=64)
    objective = ProjectionObjective(model.config.hidden_size)
    means = head_means(model, (b.model_inputs() for b in batches))
    result = pruning_curves(model, batches, objective, random_seeds=(), step=1.0, ablation="mean", means=means,
                            one_per_layer=False)
    out: list[float] = []
    with torch.no_grad(), intervene(model, ablate=np.ones((2, 4), dtype=bool), ablation="mean", means=means):
        for b in batches:
            out += objective.losses(model, b).tolist()
    assert result.curve("importance")[-1] == pytest.approx(np.mean(out), rel=1e-12)


def test_one_head_per_layer_by_hand(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    batches = batches_of(tok, budget=64)
    objective = ProjectionObjective(model.config.hidden_size)
    importance = np.array([[0.1, 0.7, 0.7, 0.2], [0.9, 0.1, np.nan, 0.3]])
    reduced = one_head_per_layer(model, batches, objective, importance, n_resamples=200, seed=1)
    assert reduced.kept.tolist() == [1, 0]  # the largest; tie at 0.7 -> lower index; NaN never kept
    base = per_sentence_losses(model, batches, objective, torch.ones(2, 4, dtype=torch.float64))
    for layer, head in enumerate(reduced.kept):
        gates = torch.ones(2, 4, dtype=torch.float64)
        gates[layer] = 0
        gates[layer, head] = 1
        losses = per_sentence_losses(model, batches, objective, gates)
        assert reduced.values[layer, 0] == pytest.approx(losses.mean(), rel=1e-12)
        assert reduced.loss_delta[layer] == pytest.approx((losses - base).mean(), rel=1e-10)
        assert reduced.loss_low[layer] <= reduced.loss_delta[layer] <= reduced.loss_high[layer]
    assert reduced.base[0] == pytest.approx(base.mean())
    table = reduced.to_pandas()
    assert table["kept_name"].tolist() == ["1-2", "2-1"] and table["layer"].tolist() == [1, 2]
    assert list(table.columns) == ["layer", "kept_head", "kept_name", "loss_delta", "loss_low", "loss_high", "loss",
                                   "accuracy"]


def test_removable_base_rule_and_band_by_hand() -> None:
    """The older rule (``base``: tau x |unpruned loss|), still the importance report's."""
    result = pruning_result()
    # importance: 1.02 within 5% of 1.0, 1.3 not -> 1/3; specialised-last: 1.04, 1.06 -> 1.06 > 1.05 -> 1/3
    assert result.removable("importance", rule="base") == pytest.approx(1 / 3)
    assert result.removable("specialised-last", tolerance=0.06, rule="base") == pytest.approx(2 / 3)
    assert result.removable("random:0", rule="base") == 0.0
    # accuracy: higher is better; 0.79 and 0.75 within 0.05 * 0.8 = 0.04 of 0.8 ...
    assert result.removable("importance", "accuracy", rule="base") == pytest.approx(1 / 3)
    assert result.removable("random:1", "accuracy", rule="base") == 0.0  # 0.75: a drop of 0.05 > 0.04
    assert result.removable("specialised-last", "accuracy", tolerance=0.5, rule="base") == pytest.approx(2 / 3)
    negative = replace(result, values=result.values - 2.0)  # loss base -1: the tolerance is 5% of |base|
    assert negative.removable("importance", rule="base") == pytest.approx(1 / 3)
    zero = replace(result, values=result.values - result.values[:, :1])  # base 0: absolute tolerance
    assert zero.removable("importance", tolerance=0.05, rule="base") == pytest.approx(1 / 3)
    assert zero.removable("importance", tolerance=0.3, rule="base") == pytest.approx(2 / 3)
    rounded = replace(result, values=zero.values + 1e-8)  # a 0 base up to float rounding (1 - cos of equal vectors)
    assert rounded.removable("importance", tolerance=0.05, rule="base") == pytest.approx(1 / 3)
    low, median, high = result.random_band()
    np.testing.assert_allclose(low, [1.0, 1.1, 2.0, 3.0])
    np.testing.assert_allclose(median, [1.0, 1.15, 2.25, 3.0])
    np.testing.assert_allclose(high, [1.0, 1.2, 2.5, 3.0])
    np.testing.assert_allclose(result.curve("specialised-last", "accuracy"), [0.8, 0.8, 0.5, 0.1])
    with pytest.raises(ConfigError, match="expected one of importance, random:0"):
        result.curve("nope")
    with pytest.raises(ConfigError, match="random:SEED"):
        replace(result, curves=("a", "b", "c", "d")).random_band()


def _minilm_like() -> PruningResult:
    """Seed_methods.md §g's MiniLM numbers: full loss 1.746, every head ablated 2.208 (range 0.462), 4 steps of
    2 of 8 heads; ``importance`` rises slowly, ``bumpy`` leaves the tolerance at 25% and is back within at 50%."""
    loss = np.array([[1.746, 1.760, 1.800, 1.950, 2.208],    # importance
                     [1.746, 1.780, 1.750, 1.760, 2.208],    # bumpy
                     [1.746, 1.900, 2.000, 2.100, 2.208]])   # random:0
    return PruningResult(layers=(0, 1), heads=(0, 1, 2, 3), objective="probe", data="d", selection="s",
                         metrics=("loss",), higher_is_better=(False,), curves=("importance", "bumpy", "random:0"),
                         fractions=np.array([0.0, 0.25, 0.5, 0.75, 1.0]), n_pruned=np.array([0, 2, 4, 6, 8]),
                         values=loss[..., None], order=np.tile(np.arange(8), (3, 1)), step=0.25,
                         importance="iterative", ablation="zero")


def test_relative_tolerance_differs_from_the_absolute_one_by_hand() -> None:
    result = _minilm_like()
    # relative: allowed 0.05 x (2.208 - 1.746) = 0.0231: +0.014 at 25% within, +0.054 at 50% not -> 25%
    assert result.removable("importance") == pytest.approx(0.25)
    assert result.removable("importance", tolerance=0.05, rule="range") == pytest.approx(0.25)
    # absolute (5% of the full loss, 0.0873): +0.054 at 50% within, +0.204 at 75% not -> 50%; the rules differ
    assert result.removable("importance", rule="base") == pytest.approx(0.5)
    # every step up to the fraction must be within: bumpy's +0.034 at 25% > 0.0231 stops it at 0 though 50% is back
    assert result.removable("bumpy") == 0.0
    assert result.removable("bumpy", tolerance=0.1) == pytest.approx(0.75)  # 0.0462 allows +0.034, +0.004, +0.014
    assert result.removable("random:0", tolerance=1.0) == 1.0  # tau = 1: the whole range, every head
    with pytest.raises(ConfigError, match="rule: expected one of range, base"):
        result.removable("importance", rule="absolute")


def test_area_under_the_curve_by_hand() -> None:
    result = _minilm_like()
    span = 2.208 - 1.746
    # trapezoids of width 0.25 over (loss - 1.746) / span: 0.25 x (0/2 + a1 + a2 + a3 + 1/2)
    assert result.area("importance") == pytest.approx(0.25 * ((0.014 + 0.054 + 0.204) / span + 0.5))
    assert result.area("random:0") == pytest.approx(0.25 * ((0.154 + 0.254 + 0.354) / span + 0.5))
    flat = replace(result, values=np.full_like(result.values, 1.746))  # ablating every head costs nothing
    assert np.isnan(flat.area("importance")) and flat.removable("importance") == 1.0


def test_relative_tolerance_needs_the_every_head_ablated_step() -> None:
    result = _minilm_like()
    short = replace(result, fractions=result.fractions[:4], n_pruned=result.n_pruned[:4],
                    values=result.values[:, :4])  # stops at 6 of 8 heads
    with pytest.raises(InputError, match="expected its last step to prune all 8 heads"):
        short.removable("importance")
    assert short.removable("importance", rule="base") == pytest.approx(0.5)  # the old rule needs no such step


def test_option_checks(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    batches = batches_of(tok, budget=64)
    objective = ProjectionObjective(model.config.hidden_size)
    with pytest.raises(ConfigError, match=r"orders\['x'\]: expected \(n_layers, n_heads\) = \(2, 4\)"):
        pruning_curves(model, batches, objective, orders={"x": np.zeros(8)})
    with pytest.raises(ConfigError, match="importance: expected iterative or once"):
        pruning_curves(model, batches, objective, importance="twice")
    with pytest.raises(ConfigError, match="taken by the built-in curves"):
        pruning_curves(model, batches, objective, orders={"random:9": np.zeros((2, 4))})


def test_progress_bars_are_labelled(bert: tuple[Any, Any], capsys: pytest.CaptureFixture[str]) -> None:
    model, tok = bert
    pruning_curves(model, batches_of(tok, budget=64), OneHeadObjective(), random_seeds=(3,), step=0.5,
                   one_per_layer=False)
    assert capsys.readouterr().err == ""
    pruning_curves(model, batches_of(tok, budget=64), OneHeadObjective(), random_seeds=(3,), step=0.5,
                   one_per_layer=False, progress=True)
    err = capsys.readouterr().err
    assert "pruning curve: importance" in err and "pruning curve: random:3" in err


def test_round_trips(tmp_path: Path) -> None:
    for original in (pruning_result(), pruning_result(with_one_per_layer=False), one_per_layer()):
        loaded = type(original).load(original.save(tmp_path / type(original).__name__ / str(id(original))))
        assert equal(loaded, original)
    assert isinstance(PruningResult.load(pruning_result().save(tmp_path / "p")).one_per_layer, OnePerLayer)


def test_iterative_importance_order_by_hand(bert: tuple[Any, Any]) -> None:
    from probes.importance.scores import gate_gradients, normalize_importance

    model, tok = bert
    batches = batches_of(tok, budget=64)
    objective = ProjectionObjective(model.config.hidden_size)
    result = pruning_curves(model, batches, objective, random_seeds=(), step=0.125, one_per_layer=False)
    pruned = np.zeros(8, dtype=bool)
    order: list[int] = []
    for take in [1] * 8:  # re-estimated with the pruned heads ablated, pruned heads out of the norm
        if take < (~pruned).sum():  # the last step takes all that is left, in the previous estimate's order
            raw = gate_gradients(model, batches, objective,
                                 pruned=pruned.reshape(2, 4) if pruned.any() else None).mean(0)
            raw[pruned.reshape(2, 4)] = 0
            importance = normalize_importance(raw)
        ranked = [int(i) for i in np.argsort(importance.ravel(), kind="stable") if not pruned[i]]
        order += ranked[:take]
        pruned[ranked[:take]] = True
    assert result.order[0].tolist() == order
    once = pruning_curves(model, batches, objective, random_seeds=(), step=0.125, importance="once",
                          one_per_layer=False)
    first = normalize_importance(gate_gradients(model, batches, objective).mean(0))
    assert once.order[0].tolist() == np.argsort(first.ravel(), kind="stable").tolist()
    assert once.order[0].tolist() != order  # re-estimation changes the order on this objective
