"""Attention rollout and attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers").

Both turn per-layer token maps into one model-level map: how much of each top-layer token comes from each input
token. They take ``(L, T, T)`` layer maps whose rows (queries) sum to 1: the head mean (:func:`head_mean`) of any
attention source's row-normalised maps (weights, norms, contributions, value zeroing), or a source's own
layer-level maps. The reference is the authors' ``attention_graph_util.py`` (samiraabnar/attention_flow):
``compute_joint_attention`` for rollout, ``get_adjmat`` and ``compute_flows`` for flow.

* The residual: each layer map becomes ``A_hat = identity * I + (1 - identity) * A``, rows renormalised to sum 1.
  ``identity = 0.5`` is the authors' ``(A + I) / rowsum``; ``identity = 0`` is for layer maps that already hold the
  residual (the contribution source's layer-level maps), so that nothing is added twice.
* Rollout: ``R_0 = A_hat_0``, ``R_l = A_hat_l @ R_{l-1}`` (:func:`rollout` returns every ``R_l``).
* Flow: the layer graph has ``(L + 1) T`` nodes, token ``j`` of layer ``l`` (``l = 0`` the input), and an edge from
  token ``i`` of layer ``l + 1`` down to token ``j`` of layer ``l`` with capacity ``A_hat_l[i, j]``. The flow from
  top-layer token ``i`` to input token ``j`` is the maximum flow between those two nodes, one max-flow problem per
  pair, as ``compute_flows`` solves it (no super-source or super-sink there, nor here); each row is then divided
  by its sum, as ``compute_flows`` does (``flow_values[u] /= flow_values[u].sum()``), so rows sum to 1. The graph
  and its max-flow solver are networkx's (a dependency of torch, so installed wherever probes runs; imported only
  when flow is asked for). ``compute_flows`` solves with ``edmonds_karp``; the maximum flow's value does not depend
  on the algorithm that finds it, and ``shortest_augmenting_path`` (used here, on one residual network built once)
  found it about 30 times faster on 12 layers x 32 tokens. ``T^2`` max-flow problems on ``(L + 1) T`` nodes are
  still slow (12 layers x 32 tokens: about 15 s on one CPU core), so inputs longer than :data:`FLOW_MAX_TOKENS`
  are refused.

Causal maps (decoders) need nothing special: their zeros above the diagonal stay zero through the product, and
are edges of capacity 0 (left out) in the graph. Zero rows: with ``identity > 0`` no row of ``A_hat`` is zero;
with ``identity = 0`` a zero row of a layer map (a token that received nothing, e.g. a source whose raw row
total was 0) stays zero: nothing is invented for it, so its rollout row is 0, and a top-layer token with no flow
to any input gets a zero flow row (the reference would divide 0 by 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError

__all__ = ["FLOW_MAX_TOKENS", "REFERENCE", "head_mean", "residual_maps", "rollout", "attention_flow"]

#: Longest input attention flow is computed for (``T^2`` max-flow problems on a graph of ``(L + 1) T`` nodes).
FLOW_MAX_TOKENS = 32
#: Where the definitions come from.
REFERENCE = ("Abnar & Zuidema 2020, samiraabnar/attention_flow attention_graph_util.py "
             "(compute_joint_attention, get_adjmat, compute_flows)")


def head_mean(maps: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(L, H, T, T)`` per-head maps -> ``(L, T, T)``: their mean over heads."""
    array = np.asarray(maps, dtype=np.float64)
    if array.ndim != 4 or array.shape[-1] != array.shape[-2]:
        raise ConfigError(f"head mean: expected maps of shape (layers, heads, T, T), found shape {array.shape}")
    return array.mean(axis=1)


def _layer_maps(layer_maps: npt.ArrayLike, identity: float, what: str) -> npt.NDArray[np.float64]:
    """The checked ``(L, T, T)`` maps as float64 (ConfigError naming what is wrong)."""
    maps = np.asarray(layer_maps, dtype=np.float64)
    if maps.ndim != 3 or maps.shape[-1] != maps.shape[-2] or maps.shape[0] == 0:
        raise ConfigError(f"{what}: expected layer maps of shape (layers >= 1, T, T), found shape {maps.shape} "
                          "(per-head maps: take their head_mean first)")
    if not np.isfinite(maps).all() or (maps < 0).any():
        raise ConfigError(f"{what}: expected finite, non-negative layer maps, found "
                          f"{'non-finite values' if not np.isfinite(maps).all() else 'negative values'}")
    if not 0.0 <= float(identity) <= 1.0:
        raise ConfigError(f"{what}: identity must lie in [0, 1], found {identity!r}")
    return maps


def residual_maps(layer_maps: npt.ArrayLike, *, identity: float = 0.5) -> npt.NDArray[np.float64]:
    """``(L, T, T)``: ``identity * I + (1 - identity) * A`` per layer, rows renormalised to sum 1 (a zero row,
    possible only with ``identity = 0``, stays zero)."""
    maps = _layer_maps(layer_maps, identity, "rollout")
    mixed = identity * np.eye(maps.shape[-1]) + (1.0 - identity) * maps  # (L, T, T)
    totals = mixed.sum(axis=-1, keepdims=True)  # (L, T, 1)
    return np.divide(mixed, totals, out=np.zeros_like(mixed), where=totals > 0)


def rollout(layer_maps: npt.ArrayLike, *, identity: float = 0.5) -> npt.NDArray[np.float64]:
    """Attention rollout: ``(L, T, T)`` layer maps -> ``(L, T, T)``, entry ``l`` the rollout through layers
    ``0..l`` (``R_0 = A_hat_0``, ``R_l = A_hat_l @ R_{l-1}``; see the module docstring). Row ``i`` of ``R_l`` is
    how much of token ``i`` after layer ``l`` comes from each input token; it sums to 1."""
    mixed = residual_maps(layer_maps, identity=identity)
    out = np.empty_like(mixed)
    out[0] = mixed[0]
    for layer in range(1, mixed.shape[0]):
        out[layer] = mixed[layer] @ out[layer - 1]
    return out


def _layer_graph(mixed: npt.NDArray[np.float64]) -> Any:
    """The networkx DiGraph of the layer graph (see the module docstring): node ``l * T + j``; zero edges left out."""
    import networkx as nx  # type: ignore[import-untyped]  # networkx ships no type hints

    n_layers, n, _ = mixed.shape
    graph = nx.DiGraph()
    graph.add_nodes_from(range((n_layers + 1) * n))
    for layer in range(n_layers):
        rows, cols = np.nonzero(mixed[layer])
        graph.add_edges_from(((layer + 1) * n + int(i), layer * n + int(j), {"capacity": float(mixed[layer, i, j])})
                             for i, j in zip(rows, cols))
    return graph


def attention_flow(layer_maps: npt.ArrayLike, *, identity: float = 0.5,
                   max_tokens: int = FLOW_MAX_TOKENS) -> npt.NDArray[np.float64]:
    """Attention flow: ``(L, T, T)`` layer maps -> ``(T, T)``, row ``i`` the max-flow from top-layer token ``i`` to
    each input token on the layer graph of ``A_hat`` (see the module docstring), divided by its sum.

    Raises:
        ConfigError: ``T > max_tokens`` (the cost: ``T^2`` max-flow problems on ``(L + 1) T`` nodes).
    """
    from networkx.algorithms.flow import (  # type: ignore[import-untyped]  # networkx ships no type hints
        build_residual_network,
        shortest_augmenting_path,
    )

    maps = _layer_maps(layer_maps, identity, "attention flow")
    n_layers, n, _ = maps.shape
    if n > max_tokens:
        raise ConfigError(f"attention flow: the input has {n} tokens, more than the limit of {max_tokens}: flow "
                          f"solves T^2 = {n * n} max-flow problems on a graph of (L + 1) T = {(n_layers + 1) * n} "
                          "nodes; use rollout for longer inputs")
    graph = _layer_graph(residual_maps(maps, identity=identity))
    residual = build_residual_network(graph, "capacity")  # built once, reset by every solve
    flows = np.zeros((n, n))  # (T top tokens, T input tokens)
    for i in range(n):
        for j in range(n):
            result = shortest_augmenting_path(graph, n_layers * n + i, j, residual=residual, value_only=True)
            flows[i, j] = result.graph["flow_value"]
    totals = flows.sum(axis=1, keepdims=True)
    return np.divide(flows, totals, out=np.zeros_like(flows), where=totals > 0)
