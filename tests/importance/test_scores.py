"""Michel importance, leave-one-out and their rank correlation, against finite differences and hand loops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from probes.errors import ConfigError
from probes.heads.intervals import percentile_interval, resample_counts
from probes.importance.scores import (
    ImportanceResult,
    gate_gradients,
    head_importance,
    leave_one_out,
    normalize_importance,
    sentence_metrics,
)
from probes.results import equal
from tests.importance.cases import (
    SENTENCES,
    OneHeadObjective,
    ProjectionObjective,
    batches_of,
    importance_result,
    per_sentence_losses,
    tiny_bert,
)


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    return tiny_bert(tmp_path_factory.mktemp("models"))


def test_gate_gradients_equal_finite_differences(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    batches = batches_of(tok)
    assert len(batches) > 2  # several padded batches
    objective = ProjectionObjective(model.config.hidden_size)
    grads = gate_gradients(model, batches, objective)
    assert grads.shape == (len(SENTENCES), 2, 4)
    eps = 1e-5
    for layer, head in [(0, 0), (0, 3), (1, 2)]:
        plus, minus = torch.ones(2, 4, dtype=torch.float64), torch.ones(2, 4, dtype=torch.float64)
        plus[layer, head] += eps
        minus[layer, head] -= eps
        fd = (per_sentence_losses(model, batches, objective, plus)
              - per_sentence_losses(model, batches, objective, minus)) / (2 * eps)  # (N,)
        np.testing.assert_allclose(grads[:, layer, head], np.abs(fd), rtol=1e-4, atol=1e-9)
    assert all(p.requires_grad for p in model.parameters())  # parameters restored
    assert all(p.grad is None for p in model.parameters())  # gradients only for the gates
    # One sentence per batch gives the same rows: sentences do not interact in a batch.
    np.testing.assert_allclose(gate_gradients(model, batches_of(tok, budget=1), objective), grads, rtol=1e-9)


def test_normalize_importance_by_hand() -> None:
    raw = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 1.0]])
    layer = normalize_importance(raw)
    np.testing.assert_allclose(layer, [[0.6, 0.8], [0.0, 0.0], [2 ** -0.5, 2 ** -0.5]])
    np.testing.assert_allclose(normalize_importance(raw, global_rescale=True),
                               [[0.75, 1.0], [0, 0], [0.5 ** 0.5 / 0.8] * 2])
    np.testing.assert_allclose(normalize_importance(raw, layer_norm=False, global_rescale=True), raw / 4)
    np.testing.assert_array_equal(normalize_importance(np.ones((2, 2)), global_rescale=True), np.zeros((2, 2)))
    stacked = normalize_importance(np.stack([raw, 2 * raw]))  # leading axis: one array each
    np.testing.assert_allclose(stacked, np.stack([layer, layer]))
    with pytest.raises(ConfigError, match="n_layers, n_heads"):
        normalize_importance([1.0, 2.0])


def test_leave_one_out_equals_a_hand_loop(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    batches = batches_of(tok)
    objective = ProjectionObjective(model.config.hidden_size)
    base, ablated = leave_one_out(model, batches, objective)
    ones = torch.ones(2, 4, dtype=torch.float64)
    np.testing.assert_allclose(base, per_sentence_losses(model, batches, objective, ones), rtol=1e-12)
    for layer in range(2):
        for head in range(4):
            gates = torch.ones(2, 4, dtype=torch.float64)
            gates[layer, head] = 0
            np.testing.assert_allclose(ablated[:, layer, head], per_sentence_losses(model, batches, objective, gates),
                                       rtol=1e-10)
    assert not np.allclose(ablated, base[:, None, None])  # removing a head changes something
    metrics = sentence_metrics(model, batches, objective, pruned=np.eye(2, 4, dtype=bool))
    assert set(metrics) == {"loss", "accuracy"}
    np.testing.assert_allclose(metrics["loss"], per_sentence_losses(
        model, batches, objective, torch.tensor(1 - np.eye(2, 4))), rtol=1e-10)


def test_head_importance_fields_and_bootstrap(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    batches = batches_of(tok)
    objective = ProjectionObjective(model.config.hidden_size)
    result = head_importance(model, batches, objective, n_resamples=50, seed=7, data="tiny")
    grads = gate_gradients(model, batches, objective)
    base, ablated = leave_one_out(model, batches, objective)
    deltas = ablated - base[:, None, None]
    np.testing.assert_allclose(result.raw_importance, grads.mean(0), rtol=1e-12)
    np.testing.assert_allclose(result.importance, normalize_importance(grads.mean(0)), rtol=1e-12)
    np.testing.assert_allclose(result.loo_effect, deltas.mean(0), rtol=1e-12)
    assert result.base_loss == pytest.approx(base.mean())
    assert (result.n_sentences, result.n_resamples, result.objective, result.data) == (12, 50, "projection", "tiny")
    rho = spearmanr(result.importance.ravel(), result.loo_effect.ravel()).statistic
    assert result.rank_correlation == pytest.approx(rho)
    # The interval by hand: the same draws for both measures, scipy's rho per resample.
    counts = resample_counts(12, 50, 7)
    draws = []
    for row in counts:
        imp = normalize_importance(np.tensordot(row, grads, axes=1) / 12)
        draws.append(spearmanr(imp.ravel(), (np.tensordot(row, deltas, axes=1) / 12).ravel()).statistic)
    low, high = percentile_interval(np.array(draws)[:, None])
    assert (result.rank_low, result.rank_high) == pytest.approx((low[0], high[0]))
    assert result.rank_low <= result.rank_correlation <= result.rank_high
    abs_draws = [spearmanr(normalize_importance(np.tensordot(row, grads, axes=1) / 12).ravel(),
                           np.abs(np.tensordot(row, deltas, axes=1) / 12).ravel()).statistic for row in counts]
    assert result.abs_rank_correlation == pytest.approx(spearmanr(result.importance.ravel(),
                                                                  np.abs(result.loo_effect).ravel()).statistic)
    low, high = percentile_interval(np.array(abs_draws)[:, None])
    assert (result.abs_rank_low, result.abs_rank_high) == pytest.approx((low[0], high[0]))
    raw_draws = [spearmanr(np.tensordot(row, grads, axes=1).ravel(), np.tensordot(row, deltas, axes=1).ravel()).statistic
                 for row in counts]
    assert result.raw_rank_correlation == pytest.approx(spearmanr(grads.mean(0).ravel(), deltas.mean(0).ravel()).statistic)
    low, high = percentile_interval(np.array(raw_draws)[:, None])
    assert (result.raw_rank_low, result.raw_rank_high) == pytest.approx((low[0], high[0]))
    loo_draws = counts @ deltas.reshape(12, -1) / 12
    np.testing.assert_allclose(result.loo_low.ravel(), np.quantile(loo_draws, 0.025, axis=0), rtol=1e-10)
    assert (result.loo_low <= result.loo_effect).all() and (result.loo_effect <= result.loo_high).all()


def test_planted_head_ranks_first_in_both_measures(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    result = head_importance(model, batches_of(tok), OneHeadObjective(0, 1), n_resamples=20)
    flat = 0 * 4 + 1
    assert int(np.argmax(result.importance)) == flat and int(np.argmax(result.loo_effect)) == flat
    others = np.delete(result.raw_importance.ravel(), flat)
    np.testing.assert_allclose(others, 0, atol=1e-12)  # nothing else moves the loss
    assert result.importance[0, 1] == pytest.approx(1.0)  # the only non-zero head of its layer
    assert result.loo_effect[0, 1] > 0.01


def test_without_loo_and_table(bert: tuple[Any, Any], capsys: pytest.CaptureFixture[str]) -> None:
    model, tok = bert
    batches = batches_of(tok)
    objective = ProjectionObjective(model.config.hidden_size)
    result = head_importance(model, batches, objective, loo=False, global_rescale=True)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""  # silent without progress
    assert np.isnan(result.loo_effect).all() and np.isnan(result.rank_correlation)
    assert result.normalization == "layer-l2+global" and result.importance.max() == pytest.approx(1.0)
    assert result.base_loss == pytest.approx(sentence_metrics(model, batches, objective)["loss"].mean())
    table = importance_result().to_pandas()
    assert list(table.columns) == ["layer", "head", "head_name", "importance", "raw_importance", "loo_effect",
                                   "loo_low", "loo_high"]
    assert table["head_name"].tolist() == ["1-1", "1-2", "1-3", "2-1", "2-2", "2-3"]  # 1-based
    assert table.loc[5, "loo_effect"] == importance_result().loo_effect[1, 2]


def test_progress_bars_are_labelled(bert: tuple[Any, Any], capsys: pytest.CaptureFixture[str]) -> None:
    model, tok = bert
    head_importance(model, batches_of(tok), OneHeadObjective(), n_resamples=0, progress=True)
    err = capsys.readouterr().err
    assert "importance" in err and "leave-one-out (8 heads)" in err


def test_input_checks(bert: tuple[Any, Any]) -> None:
    model, tok = bert
    objective = ProjectionObjective(model.config.hidden_size)
    with pytest.raises(ConfigError, match=r"expected a bool mask of shape \(n_layers, n_heads\) = \(2, 4\)"):
        gate_gradients(model, batches_of(tok), objective, pruned=np.zeros((4, 2), dtype=bool))
    with pytest.raises(ConfigError, match="n_resamples"):
        head_importance(model, batches_of(tok), objective, n_resamples=-1)
    with pytest.raises(Exception, match="at least one batch"):
        gate_gradients(model, [], objective)


def test_round_trip(tmp_path: Path) -> None:
    original = importance_result()
    assert equal(ImportanceResult.load(original.save(tmp_path / "imp")), original)
