"""Attention rollout and flow (probes.analysis.rollout) against loop references and hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from probes.analysis.rollout import FLOW_MAX_TOKENS, attention_flow, head_mean, rollout
from probes.errors import ConfigError


def random_maps(rng: np.random.Generator, layers: int, n: int, *, causal: bool = False,
                heads: int | None = None) -> np.ndarray:
    """Row-stochastic maps ``(L, T, T)`` (or ``(L, H, T, T)``), peaked like attention, causal when asked."""
    shape = (layers, n, n) if heads is None else (layers, heads, n, n)
    maps = rng.random(shape) ** 3
    if causal:
        maps = maps * np.tril(np.ones((n, n)))
    return maps / maps.sum(axis=-1, keepdims=True)


def rollout_loop(maps: np.ndarray, identity: float) -> np.ndarray:
    """Rollout written out element by element: A_hat = identity I + (1 - identity) A, rows renormalised, then
    R_0 = A_hat_0 and R_l[i, j] = sum_k A_hat_l[i, k] R_{l-1}[k, j]."""
    n_layers, n, _ = maps.shape
    mixed = np.zeros_like(maps)
    for layer in range(n_layers):
        for i in range(n):
            row = [identity * (i == j) + (1 - identity) * maps[layer, i, j] for j in range(n)]
            mixed[layer, i] = [v / sum(row) for v in row]
    out = np.zeros_like(maps)
    out[0] = mixed[0]
    for layer in range(1, n_layers):
        for i in range(n):
            for j in range(n):
                out[layer, i, j] = sum(mixed[layer, i, k] * out[layer - 1, k, j] for k in range(n))
    return out


def test_head_mean_is_the_mean_over_heads() -> None:
    maps = random_maps(np.random.default_rng(0), 3, 4, heads=5)
    mean = head_mean(maps)
    assert mean.shape == (3, 4, 4)
    np.testing.assert_allclose(mean[1, 2, 3], sum(maps[1, h, 2, 3] for h in range(5)) / 5, rtol=1e-12)
    with pytest.raises(ConfigError, match=r"\(layers, heads, T, T\), found shape \(3, 4, 4\)"):
        head_mean(mean)


@pytest.mark.parametrize("identity", [0.5, 0.3, 0.0])
@pytest.mark.parametrize("causal", [False, True])
def test_rollout_equals_the_loop_reference(identity: float, causal: bool) -> None:
    maps = random_maps(np.random.default_rng(1), 4, 5, causal=causal)
    got = rollout(maps, identity=identity)
    np.testing.assert_allclose(got, rollout_loop(maps, identity), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-12)  # every row of every R_l sums to 1
    if causal:  # a decoder's zeros above the diagonal stay zero
        assert np.all(np.triu(got, k=1) == 0)


def test_rollout_by_hand_two_layers_two_tokens() -> None:
    a0 = [[1.0, 0.0], [0.5, 0.5]]
    a1 = [[0.0, 1.0], [1.0, 0.0]]
    got = rollout(np.array([a0, a1]))  # identity 0.5: A_hat_0 = [[1, 0], [.25, .75]], A_hat_1 = [[.5, .5], [.5, .5]]
    np.testing.assert_allclose(got[0], [[1.0, 0.0], [0.25, 0.75]], rtol=1e-15)
    np.testing.assert_allclose(got[1], [[0.625, 0.375], [0.625, 0.375]], rtol=1e-15)


def test_identity_zero_is_the_plain_matrix_product() -> None:
    maps = random_maps(np.random.default_rng(2), 3, 6)
    got = rollout(maps, identity=0.0)
    np.testing.assert_allclose(got[2], maps[2] @ maps[1] @ maps[0], rtol=1e-12)
    np.testing.assert_allclose(got[0], maps[0], rtol=1e-15)


def test_zero_rows() -> None:
    maps = random_maps(np.random.default_rng(3), 2, 3)
    maps[0, 1] = 0.0  # token 1 received nothing in layer 0
    kept = rollout(maps, identity=0.5)  # the identity gives the row a self-loop: token 1 keeps itself
    np.testing.assert_allclose(kept[0, 1], [0.0, 1.0, 0.0])
    np.testing.assert_allclose(kept.sum(axis=-1), 1.0, rtol=1e-12)
    bare = rollout(maps, identity=0.0)  # nothing invented: the row stays 0, and so does what flows through it
    np.testing.assert_array_equal(bare[0, 1], 0.0)
    np.testing.assert_allclose(bare[1], maps[1] @ np.where(np.arange(3)[:, None] == 1, 0.0, maps[0]), rtol=1e-12)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"\(layers >= 1, T, T\).*head_mean"):
        rollout(np.ones((2, 3, 3, 3)) / 3)
    with pytest.raises(ConfigError, match="non-negative"):
        rollout(-np.ones((1, 2, 2)))
    with pytest.raises(ConfigError, match=r"identity must lie in \[0, 1\], found 1.5"):
        rollout(np.ones((1, 2, 2)) / 2, identity=1.5)


# ----------------------------------------------------------------------------- flow
def test_flow_by_hand() -> None:
    # input x0 x1 <- layer 1 m0 m1 <- layer 2 (top) t0 t1; identity 0: the maps are the capacities
    a0 = [[1.0, 0.0], [0.5, 0.5]]  # m0 -> x0: 1; m1 -> x0: .5, m1 -> x1: .5
    a1 = [[0.5, 0.5], [0.0, 1.0]]  # t0 -> m0: .5, t0 -> m1: .5; t1 -> m1: 1
    got = attention_flow(np.array([a0, a1]), identity=0.0)
    # t0 -> x0: .5 via m0 and .5 via m1 = 1; t0 -> x1: .5 via m1; t1 -> x0 and x1: .5 each (m1's edges)
    np.testing.assert_allclose(got, [[2 / 3, 1 / 3], [0.5, 0.5]], rtol=1e-12)
    # rollout of the same maps differs: [[.75, .25], [.5, .5]] (flow is not the product)
    np.testing.assert_allclose(rollout(np.array([a0, a1]), identity=0.0)[1], [[0.75, 0.25], [0.5, 0.5]])


def flow_reference(maps: np.ndarray, identity: float, scale: float = 1e8) -> np.ndarray:
    """Independent reference: scipy's maximum_flow on the layer graph built from scratch, capacities
    rounded to integers after scaling (1e8: rounding errors below 1e-8 per cut edge, well under the test's
    tolerance), one solve per (top token, input token), rows divided by their sums."""
    n_layers, n, _ = maps.shape
    size = (n_layers + 1) * n
    capacity = np.zeros((size, size), dtype=np.int64)
    for layer in range(n_layers):
        mixed = identity * np.eye(n) + (1 - identity) * maps[layer]
        mixed = mixed / mixed.sum(axis=1, keepdims=True)
        for i in range(n):
            for j in range(n):
                capacity[(layer + 1) * n + i, layer * n + j] = round(mixed[i, j] * scale)
    graph = csr_matrix(capacity.astype(np.int32))
    flows = np.array([[maximum_flow(graph, n_layers * n + i, j).flow_value for j in range(n)] for i in range(n)],
                     dtype=np.float64)
    return flows / flows.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("causal", [False, True])
def test_flow_equals_scipy_maximum_flow(causal: bool) -> None:
    maps = random_maps(np.random.default_rng(4), 3, 5, causal=causal)
    got = attention_flow(maps)
    np.testing.assert_allclose(got, flow_reference(maps, 0.5), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-12)
    if causal:
        assert np.all(np.triu(got, k=1) == 0)  # a later input token cannot reach an earlier top token


def test_flow_refuses_long_inputs() -> None:
    n = FLOW_MAX_TOKENS + 1
    with pytest.raises(ConfigError, match=rf"{n} tokens, more than the limit of {FLOW_MAX_TOKENS}.*max-flow"):
        attention_flow(np.full((2, n, n), 1.0 / n))
    with pytest.raises(ConfigError, match="5 tokens, more than the limit of 4"):
        attention_flow(random_maps(np.random.default_rng(5), 2, 5), max_tokens=4)


def test_flow_with_no_path_is_a_zero_row() -> None:
    maps = np.array([[[1.0, 0.0], [0.0, 0.0]]])  # identity 0: token 1 of the top layer reaches nothing
    np.testing.assert_array_equal(attention_flow(maps, identity=0.0), [[1.0, 0.0], [0.0, 0.0]])
