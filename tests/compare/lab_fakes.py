"""Synthetic lab units with known answers: train results (loss curves and head symmetries built by hand) and match
runs between planted models (word-level attention maps whose heads play chosen roles, on the sample sentences).

A *role* is a row-stochastic word map: previous word, next word, self, first word, last word, two back, two
forward, uniform. A planted model gives each head of each layer a role, mixes in noise shared by the whole model
(``seed_noise``: what differs between two seeds) and noise of its own (``head_noise``), and the match run is
computed as :func:`probes.runs.match.match_models` computes it from the cross distances (matching within layers,
intervals over sentences, the shuffle null, D_within), with the library's own functions.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from probes.compare.types import Unit
from probes.extraction.attention import WordAttention
from probes.training.curves import TrainingCurves
from probes.training.symmetry import HeadSymmetry
from tests.compare.fakes import sentences

N_ROLES = 8


def role_map(role: int, n: int) -> np.ndarray:
    """``(n, n)`` the word map of ``role`` (see the module docstring)."""
    out = np.zeros((n, n))
    rows = np.arange(n)
    target = {0: np.maximum(rows - 1, 0), 1: np.minimum(rows + 1, n - 1), 2: rows, 3: np.zeros(n, int),
              4: np.full(n, n - 1), 5: np.maximum(rows - 2, 0), 6: np.minimum(rows + 2, n - 1)}
    if role == 7:
        return np.full((n, n), 1.0 / n)
    out[rows, target[role]] = 1.0
    return out


def planted(roles: list[list[int]], seed: int, *, seed_noise: float = 0.05, head_noise: float = 0.02,
            n_sentences: int = 40) -> list[tuple[Any, WordAttention]]:
    """``(sentence, WordAttention)`` of a model whose head ``(l, h)`` plays ``roles[l][h]``, with noise."""
    rng = np.random.default_rng(seed)
    out = []
    n_layers, n_heads = len(roles), len(roles[0])
    for s in sentences("dev")[:n_sentences]:
        n = len(s.words)
        shared = rng.random((n, n)) ** 4
        shared /= shared.sum(-1, keepdims=True)
        w = np.empty((n_layers, n_heads, n, n))
        for layer in range(n_layers):
            for head in range(n_heads):
                own = rng.random((n, n)) ** 4
                own /= own.sum(-1, keepdims=True)
                w[layer, head] = ((1 - seed_noise - head_noise) * role_map(roles[layer][head], n)
                                  + seed_noise * shared + head_noise * own)
        out.append((s, WordAttention(w.astype(np.float32), np.zeros(n, dtype=bool), tuple(range(n_layers)),
                                     tuple(range(n_heads)))))
    return out


def match_run(a: list[tuple[Any, WordAttention]], b: list[tuple[Any, WordAttention]], n_resamples: int = 200,
              draws: bool = True) -> Any:
    """A match run of model A against model B (within layers, shuffle null) with the summary match_models makes
    (``draws=False``: as a match saved before the null's draws were kept)."""
    from probes.analysis.cross_distances import CrossDistances
    from probes.compare.matching import (
        bootstrap_pairs,
        label_permutation_null,
        match_heads,
        with_intervals,
        within_layer_distance,
    )

    analysis = CrossDistances(keep_items=True)
    for (sentence, maps_a), (_, maps_b) in zip(a, b):
        analysis.update(sentence, maps_a, maps_b)
    cross = analysis.compute()
    matching = match_heads(cross.per_row(), within_layers=True, shape_a=cross.shape_a, shape_b=cross.shape_b)
    _, sums, rows = cross.unit_sums("item")
    low, high, means = bootstrap_pairs(sums, rows, matching, n_resamples=n_resamples)
    null_low, null_high, null_means = label_permutation_null(cross.per_row(), matching, n_permutations=n_resamples)
    matching = with_intervals(matching, distance_low=low, distance_high=high, null_low=null_low, null_high=null_high,
                              null="shuffle")
    summary = {"D_match": matching.mean_distance, "D_match_interval": list(np.quantile(means, [0.025, 0.975])),
               "D_permuted": float(null_means.mean()),
               "D_permuted_interval": list(np.quantile(null_means, [0.025, 0.975])),
               "identity_share": matching.identity_share(), "D_self": 0.0, "D_self_note": "0 by construction",
               "D_within_a": within_layer_distance(cross.within("a"), cross.shape_a).tolist(),
               "D_within_b": within_layer_distance(cross.within("b"), cross.shape_b).tolist()}
    if draws:
        summary["D_permuted_draws"] = [float(v) for v in null_means]
    return SimpleNamespace(matching=matching, distances=cross, summary=summary)


def lab_model(cell: str, seed: int, heads: int, init: str = "independent", dropout: float = 0.0, layers: int = 2,
              step: int | None = None, last_step: int = 64) -> dict[str, Any]:
    """A lab model's info as the experiment gives it to compare()."""
    return {"kind": "trained", "spec": f"trained:runs/x/train/{cell}/seed-{seed}@{'last' if step is None else step}",
            "lab": {"cell": cell, "seed": seed, "step": step, "last_step": last_step, "heads": heads, "layers": layers,
                    "init": init, "attention_dropout": dropout}}


def train_result(steps: list[int], attention: np.ndarray | None, param: np.ndarray | None = None,
                 losses: list[float] | None = None) -> Any:
    """A train unit's result: curves over ``steps`` and, unless ``attention`` is None, a head symmetry."""
    c = len(steps)
    loss = np.asarray(losses if losses is not None else np.linspace(8.0, 5.0, c), dtype=np.float64)
    curves = TrainingCurves(np.asarray(steps, dtype=np.int64), np.asarray(steps, dtype=np.int64) * 100,
                            np.full(c, np.nan), loss, 7.0, objective="causal-LM")
    symmetry = None if attention is None else HeadSymmetry(
        np.asarray(steps, dtype=np.int64), np.asarray(param if param is not None else attention, dtype=np.float64),
        np.asarray(attention, dtype=np.float64), 4)
    return SimpleNamespace(curves=curves, symmetry=symmetry, seconds=1.0)


def train_unit(cell: str, seed: int, result: Any, heads: int, init: str = "independent",
               dropout: float = 0.0) -> Unit:
    """A train unit as the contract names it."""
    config = {"arch": "gpt2", "layers": 2, "heads": heads, "init": init, "attention_dropout": dropout, "seed": seed}
    return Unit("train", "train", f"{cell}-s{seed}", cell, result, {"cell": cell, "seed": seed, "config": config})


def symmetric(values: np.ndarray, heads: int) -> np.ndarray:
    """``(C, L, H, H)`` with every pair of distinct heads of a layer at ``values`` ``(C, L)`` (0 diagonal)."""
    out = np.repeat(np.repeat(values[:, :, None, None], heads, 2), heads, 3).astype(np.float64)
    out[:, :, np.arange(heads), np.arange(heads)] = 0.0
    return out
