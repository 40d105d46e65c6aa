"""Additivity, damage correlation and role carriers against hand-computed values on planted models."""

from __future__ import annotations

import numpy as np
import pytest

from probes.importance.interactions import damage_correlation, pair_interactions, role_carriers


def _planted_loss(ablated: set[int], tokens: np.ndarray) -> np.ndarray:
    """A planted model of 3 heads: heads 0 and 1 are redundant copies (either one does the job at the tokens they
    serve; both gone costs 2 nats there), head 2 alone serves the other tokens (1 nat there)."""
    loss = np.zeros(len(tokens))
    serve_a, serve_b = tokens == 0, tokens == 1
    loss[serve_a] += 2.0 if {0, 1} <= ablated else 0.25 * len({0, 1} & ablated)
    loss[serve_b] += 1.0 if 2 in ablated else 0.0
    return loss


def test_redundant_copies_are_sub_additive_and_separate_jobs_additive():
    tokens = np.array([0, 0, 1, 1, 0, 1])
    single = [float(_planted_loss({h}, tokens).mean()) for h in range(3)]
    pairs = [(0, 1), (0, 2), (1, 2)]
    joint = [float(_planted_loss(set(p), tokens).mean()) for p in pairs]
    result = pair_interactions(single, pairs, joint)
    # by hand: singles 0.125, 0.125, 0.5; joint (0,1) = 1.0 -> interaction 0.75 (the copies back each other up);
    # (0,2) = 0.625 = 0.125 + 0.5 -> 0
    assert result.single.tolist() == pytest.approx([0.125, 0.125, 0.5])
    assert result.interaction.tolist() == pytest.approx([0.75, 0.0, 0.0])
    assert result.additivity.tolist() == pytest.approx([4.0, 1.0, 1.0])
    matrix = result.matrix()
    assert matrix[1, 0] == matrix[0, 1] == pytest.approx(0.75) and np.isnan(matrix[0, 0])


def test_damage_correlation_equals_numpy_and_marks_heads_that_do_nothing():
    rng = np.random.default_rng(0)
    damage = rng.normal(size=(4, 50))
    damage[1] = 2 * damage[0] + 1  # the same job
    damage[3] = 0.0  # ablating it changes nothing
    corr = damage_correlation(damage)
    assert corr[0, 1] == pytest.approx(1.0)
    assert corr[0, 2] == pytest.approx(np.corrcoef(damage[0], damage[2])[0, 1])
    assert np.isnan(corr[3]).all() and np.isnan(corr[:, 3]).all()


def test_role_carriers_per_seed_and_bad_input():
    scores = [[0.9, 0.1, 0.2, 0.05], [0.1, 0.1, 0.95, 0.8]]
    assert role_carriers(scores, 0.5) == [(0,), (2, 3)]
    with pytest.raises(ValueError):
        pair_interactions([0.1, 0.2], [(0, 0)], [0.3])
    with pytest.raises(ValueError):
        damage_correlation(np.zeros(5))
