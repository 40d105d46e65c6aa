"""(c) and (h): redundancy or division of labour, from the tests of function (issue 39, point 4).

For one model and layer, the **relative interaction** is the sum over the layer's measured pairs of their
interaction (joint effect minus the sum of the two single effects,
:attr:`probes.importance.interactions.PairInteractions.interaction`) over the sum of their single effects:

* above 0: **redundancy** (the pair's joint removal costs more than the singles add up to: each head backs the other
  up, as an ensemble's members do; the single effects are sub-additive);
* about 0: **additive** (each head does a job of its own: a division of labour);
* below 0: **saturating** (one removal already does most of the pair's damage: heads needed together, in series).

Across seeds (c) or across the layers of one pretrained model (h), a sign-flip permutation test
(:func:`probes.compare.role_lab_stats.sign_flip_test`) asks whether its mean is 0; Holm over the table's tests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from probes.compare.role_lab_stats import SIGN_FLIP, sign_flip_test
from probes.compare.role_lab_types import (
    ALPHA,
    EFFECT_MIN,
    INDUCTION,
    TOP_HEADS,
    FunctionRow,
    PretrainedEffectRow,
    PretrainedFunctionRow,
)
from probes.heads.inference import holm
from probes.importance.function import FunctionTests
from probes.importance.lab_types import LabModelAnalysis

__all__ = ["layer_effects", "relative_interaction", "layer_correlation", "function_table", "pretrained_effects",
           "pretrained_function", "verdict", "RULE", "PRETRAINED_RULE"]

#: How table (c) is made.
RULE = ("per model and layer, from its single and within-layer pair ablations at the last step (mean loss increase "
        "over the scored held-out tokens): interaction = joint - sum of singles per pair; relative interaction = sum "
        "of the layer's pair interactions / sum of their single effects (above 0: redundancy, the heads back each "
        "other up, ensemble-like; about 0: additive, a division of labour; below 0: saturating, one removal does "
        "most of the pair's damage); damage correlation = mean over the layer's pairs of the Pearson correlation of "
        "per-token damage. Test per cell and layer: the one-sample t test over the seeds' relative interactions "
        "(p_t; Holm over the table's tests gives p_holm and the verdict), beside the distribution-free "
        + SIGN_FLIP + " (p; its floor with 6 seeds, 0.031, cannot survive Holm over a table). A p above 0.05 does "
        "not show additivity: it fails to reject it.")
#: How table (h)'s function rows are made.
PRETRAINED_RULE = ("one pretrained model: heads with effect are those whose single ablation costs at least "
                   f"{EFFECT_MIN} nats per scored token; per layer with a measured pair of them, the relative "
                   "interaction of those pairs; the same test as table (c), " + SIGN_FLIP + ", over these layers "
                   "instead of seeds (layers are not exchangeable draws of one population as seeds are: read it "
                   "as a description of this model)")


def layer_effects(function: FunctionTests, n_layers: int, n_heads: int) -> npt.NDArray[np.float64]:
    """``(n_layers, n_heads)`` single-ablation effects placed at their model layers and heads (NaN where not
    measured)."""
    out = np.full((n_layers, n_heads), np.nan)
    effect = function.effect
    for i, layer in enumerate(function.layers):
        out[layer, list(function.heads)] = effect[i]
    return out


def _pair_layers(function: FunctionTests) -> npt.NDArray[np.int64]:
    """``(P,)`` the model layer of each measured pair, -1 for a pair across layers."""
    per = len(function.heads)
    first, second = function.pairs[:, 0] // per, function.pairs[:, 1] // per
    layers = np.asarray(function.layers, dtype=np.int64)
    return np.where(first == second, layers[first] if len(first) else first, -1)


def relative_interaction(function: FunctionTests, layer: int, min_effect: float | None = None
                         ) -> tuple[float, float, int]:
    """``(mean interaction, relative interaction, pairs)`` of the measured pairs of ``layer`` (model index), only
    pairs whose two single effects reach ``min_effect`` when given; NaN without pairs or with a sum of singles
    <= 0."""
    if not len(function.pairs):
        return float("nan"), float("nan"), 0
    inter = function.interactions()
    mask = _pair_layers(function) == layer
    if min_effect is not None:
        mask &= (inter.single[inter.pairs] >= min_effect).all(axis=1)
    if not mask.any():
        return float("nan"), float("nan"), 0
    singles = float(inter.single[inter.pairs[mask]].sum())
    total = float(inter.interaction[mask].sum())
    relative = total / singles if singles > 0 else float("nan")
    return float(inter.interaction[mask].mean()), relative, int(mask.sum())


def layer_correlation(function: FunctionTests, layer: int) -> float:
    """Mean over the layer's pairs of heads of the correlation of their per-token damage (NaN pairs left out)."""
    if layer not in function.layers:
        return float("nan")
    per = len(function.heads)
    start = function.layers.index(layer) * per
    block = function.correlation()[start:start + per, start:start + per]
    upper = block[np.triu_indices(per, k=1)]
    upper = upper[np.isfinite(upper)]
    return float(upper.mean()) if upper.size else float("nan")


def t_test_p(values: npt.ArrayLike) -> float:
    """Two-sided one-sample t test of mean 0 (scipy; NaN values left out; NaN with fewer than 2; values without
    spread give the limit: 0 when their mean is not 0, 1 when it is)."""
    from scipy.stats import ttest_1samp

    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) < 2:
        return float("nan")
    if float(np.ptp(x)) == 0.0:
        return 1.0 if float(x[0]) == 0.0 else 0.0
    return float(ttest_1samp(x, 0.0).pvalue)


def verdict(relative: float, p: float) -> str:
    """The reading of a relative interaction and its (Holm) p at :data:`ALPHA`."""
    if not np.isfinite(p):
        return "no test (fewer than 2 values)"
    if p >= ALPHA:
        return f"not distinguishable from additive (p = {p:.3g} >= {ALPHA}; a division of labour is not rejected)"
    if relative > 0:
        return f"redundancy: heads back each other up (relative interaction > 0, p = {p:.3g})"
    return f"saturating: one removal does most of a pair's damage (relative interaction < 0, p = {p:.3g})"


def _cell_layer(cell: str, layer: int, models: Sequence[LabModelAnalysis], n_permutations: int, seed: int
                ) -> FunctionRow | None:
    tested = [(m, m.function) for m in models if m.function is not None]
    if not tested:
        return None
    heads = tested[0][0].n_heads
    effects = np.array([layer_effects(f, m.n_layers, heads)[layer] for m, f in tested])  # (S, H)
    measured = [relative_interaction(f, layer) for _, f in tested]
    relative = np.array([r for _, r, _ in measured])
    correlation = [layer_correlation(f, layer) for _, f in tested]
    test = sign_flip_test(relative, n_permutations=n_permutations, seed=seed)
    with np.errstate(all="ignore"):
        return FunctionRow(
            cell=cell, layer=layer, heads=heads, n_seeds=len(tested),
            effects=tuple(float(v) for v in np.nanmean(effects, axis=0)), n_pairs=max(n for _, _, n in measured),
            interaction=float(np.nanmean([i for i, _, _ in measured])), relative=float(np.nanmean(relative)),
            relative_per_seed=tuple(float(v) for v in relative), correlation=float(np.nanmean(correlation)),
            p=test.p, n_flips=test.n, exact=test.exact, p_holm=float("nan"), verdict="", p_t=t_test_p(relative))


def function_table(by_cell: dict[str, list[LabModelAnalysis]], *, n_permutations: int, seed: int
                   ) -> list[FunctionRow]:
    """Table (c): one row per cell and layer with tests of function, Holm over the table."""
    rows = [row for cell, models in by_cell.items() for layer in range(models[0].n_layers)
            if (row := _cell_layer(cell, layer, models, n_permutations, seed)) is not None]
    adjusted = holm([r.p_t for r in rows])
    return [_with_holm(r, float(q)) for r, q in zip(rows, adjusted)]


def _with_holm(row: FunctionRow, p_holm: float) -> FunctionRow:
    from dataclasses import replace

    return replace(row, p_holm=p_holm, verdict=verdict(row.relative, p_holm))


def pretrained_effects(model: LabModelAnalysis) -> list[PretrainedEffectRow]:
    """Table (h): the single effects of the model's :data:`TOP_HEADS` heads by induction score (none without tests
    of function)."""
    if model.function is None or INDUCTION not in model.role_names:
        return []
    scores = model.scores(INDUCTION)
    effects = layer_effects(model.function, model.n_layers, model.n_heads)
    order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), axis=None, kind="stable")[:TOP_HEADS]
    out = []
    for flat in order:
        layer, head = divmod(int(flat), model.n_heads)
        out.append(PretrainedEffectRow(model.cell, layer, head, f"{layer + 1}-{head + 1}", float(scores[layer, head]),
                                       float(effects[layer, head])))
    return out


def pretrained_function(model: LabModelAnalysis, *, n_permutations: int, seed: int) -> PretrainedFunctionRow | None:
    """Table (h): redundancy or division among the model's heads with effect, tested over its layers."""
    if model.function is None:
        return None
    effects = layer_effects(model.function, model.n_layers, model.n_heads)
    layers, relative = [], []
    for layer in range(model.n_layers):
        _, value, pairs = relative_interaction(model.function, layer, EFFECT_MIN)
        if pairs and np.isfinite(value):
            layers.append(layer)
            relative.append(value)
    test = sign_flip_test(relative, n_permutations=n_permutations, seed=seed)
    strong = np.nan_to_num(effects, nan=-np.inf) >= EFFECT_MIN
    return PretrainedFunctionRow(model.cell, int(strong.sum()), tuple(layers), tuple(relative),
                                 float(np.mean(relative)) if relative else float("nan"), test.p, test.n, test.exact,
                                 verdict(float(np.mean(relative)) if relative else float("nan"), test.p))
