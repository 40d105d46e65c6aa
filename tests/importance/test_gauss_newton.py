"""The Gauss-Newton score of a stationary objective (representation): |de/dg_h|^2 / 2 per sentence.

At the unmodified model the representation loss L = |e - e_ref|^2 / 2 is at its minimum, so dL/dg_h = 0
and its second derivative is exactly |de/dg_h|^2: the score is checked against central second
differences of the loss (float64), and the Hutchinson estimate against the exact value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from probes.extraction.interventions import intervene
from probes.importance.objectives import RepresentationObjective
from probes.importance.scores import _gauss_newton, gate_gradients, head_importance, is_stationary
from tests.importance.cases import batches_of, tiny_bert


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, list[Any]]:
    model, tokenizer = tiny_bert(tmp_path_factory.mktemp("gn"))
    objective = RepresentationObjective()
    with torch.no_grad():
        batches = [objective.prepare(model, b) for b in batches_of(tokenizer)]
    return model, objective, batches


def _loss(model: Any, objective: Any, batch: Any, layer: int, head: int, value: float) -> np.ndarray:
    gates = torch.ones(len(batch.sentences), 2, 4, dtype=torch.float64)
    gates[:, layer, head] = value
    with torch.no_grad(), intervene(model, gates=gates):
        return objective.losses(model, batch).numpy()


def _exact(model: Any, objective: Any, batch: Any) -> np.ndarray:
    """``(B, L, H)`` the score with the identity (times sqrt(D)) as probes: exact, no randomness."""
    gates = torch.ones(len(batch.sentences), 2, 4, dtype=torch.float64, requires_grad=True)
    with torch.enable_grad(), intervene(model, gates=gates):
        dim = objective.embedding(model, batch)[0].shape[-1]
        score, _ = _gauss_newton(objective, model, batch, gates, 0, vectors=np.sqrt(dim) * torch.eye(dim))
    return score.detach().numpy()


def test_the_score_is_half_the_second_derivative_of_the_loss(setup: tuple[Any, Any, list[Any]]) -> None:
    model, objective, batches = setup
    batch, eps = batches[0], 1e-3
    exact = _exact(model, objective, batch)
    for layer, head in ((0, 0), (1, 3)):
        second = (_loss(model, objective, batch, layer, head, 1 + eps) - 2 * _loss(model, objective, batch, layer, head, 1)
                  + _loss(model, objective, batch, layer, head, 1 - eps)) / eps**2  # (B,)
        np.testing.assert_allclose(exact[:, layer, head], second / 2, rtol=1e-4)
    assert (exact > 0).all()


def test_the_estimate_is_unbiased_and_used_for_the_representation_objective(setup: tuple[Any, Any, list[Any]],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    model, objective, batches = setup
    assert is_stationary(objective)
    exact = np.concatenate([_exact(model, objective, b) for b in batches])  # batch order: only means are compared
    monkeypatch.setattr("probes.importance.scores.GAUSS_NEWTON_PROBES", 64)
    estimate = gate_gradients(model, batches, objective)  # 64 Rademacher probes per sentence
    ratio = estimate.mean(axis=0) / exact.mean(axis=0)
    assert np.all(np.abs(ratio - 1) < 0.25), ratio  # relative noise about sqrt(2 / (64 x 8)) = 6% per head
    np.testing.assert_array_equal(estimate, gate_gradients(model, batches, objective))  # seeded: reproducible
    monkeypatch.undo()
    result = head_importance(model, batches, objective, loo=False)
    assert result.criterion == "gauss-newton" and np.isfinite(result.importance).all()
