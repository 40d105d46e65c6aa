"""Pruning curves: heads removed in steps, by importance, at random and in annotation-based orders.

Michel et al. 2019 §4.2: heads are removed in steps of a fixed fraction of all heads, least important
first, and the objective is measured after each step; ``importance="iterative"`` recomputes importance
on the selection data after every step (HF's bertology), ``"once"`` keeps the first order. Random orders
(several seeds) give the band a meaningful order must beat. Orders given as scores (lowest pruned first,
e.g. each head's specialisation margin or its confidence: "specialised last", "confident last") answer
Voita et al. 2019's "do the specialised heads do the heavy lifting?". :func:`one_head_per_layer` is
Michel §3.3: each layer in turn reduced to its single most important head.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError, InputError
from probes.heads.intervals import percentile_interval, resample_counts
from probes.importance.scores import _as_batches, _bar, _shape, gate_gradients, normalize_importance, sentence_metrics
from probes.results import Result, require_pandas

__all__ = ["PruningResult", "OnePerLayer", "pruning_curves", "one_head_per_layer", "score_order", "pruning_steps",
           "DEFAULT_STEP", "DEFAULT_RANDOM_SEEDS", "PRUNING_RULE", "TOLERANCE_RULES", "DEFAULT_TOLERANCE", "AREA_RULE"]

#: Fraction of all heads removed per step (Michel et al.'s BERT sweep used 10%).
DEFAULT_STEP = 0.1
#: Random orders drawn for the band (seed_methods.md §g: at least 20, so that the importance order's rank among
#: them can reach p = 1 / 21).
DEFAULT_RANDOM_SEEDS: tuple[int, ...] = tuple(range(20))
#: tau of :meth:`PruningResult.removable` unless stated (seed_methods.md §g).
DEFAULT_TOLERANCE = 0.05
#: The rules of :meth:`PruningResult.removable`: ``range`` (seed_methods.md §g, the default) and ``base`` (the
#: older rule, still used by the importance report's pruning page).
TOLERANCE_RULES: dict[str, str] = {
    "range": "within tolerance when loss(pruned) - loss(full) <= tau x (loss(every head ablated) - loss(full)), "
             "the every-head-ablated loss being the curve's last step (all heads pruned); removable = the largest "
             "fraction pruned such that it and every smaller step are within tolerance (a step that is not stops the "
             "count even if a later one is back within)",
    "base": "within tolerance when loss(pruned) - loss(full) <= tau x |loss(full)| (tau itself when the full loss "
            "is 0); removable = the largest fraction pruned such that it and every smaller step are within",
}
#: How :meth:`PruningResult.area` is computed.
AREA_RULE = ("area under the curve: the trapezoid integral over the fraction pruned (0 to 1) of (loss(pruned) - "
             "loss(full)) / (loss(every head ablated) - loss(full)); 0 = as good as the full model at every step, "
             "1 = as bad as every head ablated at every step")
#: Metric names where higher is better (an objective may say otherwise with a ``higher_is_better`` mapping).
_HIGHER_IS_BETTER = frozenset({"accuracy", "f1", "precision", "recall"})
#: A base value below this (in absolute value) counts as 0 in :meth:`PruningResult.removable`.
_ZERO_BASE = 1e-6
#: How curves are made, printed with every table.
PRUNING_RULE = ("pruning: at step k, round(k * step * n_heads) heads removed (halves up, the last step removes all); "
                "importance ranks heads by the layer-l2-normalised score, recomputed on the selection data with the "
                "pruned heads ablated after each step (iterative) unless 'once'; random orders are uniform "
                "permutations (one per seed); score orders prune the lowest score first, ties broken by head index")


@dataclass(frozen=True)
class OnePerLayer(Result):
    """Michel §3.3: each layer alone reduced to its most important head (every other layer intact).

    Attributes:
        layers, heads: 0-based model layers and heads.
        kept: ``(L,)`` 0-based head kept in each layer (chosen by importance on the selection data).
        metrics: metric names, as in the objective's ``evaluate``.
        values: ``(L, M)`` mean metric with layer ``l`` reduced.
        base: ``(M,)`` mean metric of the unmodified model.
        loss_delta, loss_low, loss_high: ``(L,)`` mean loss change over sentences and its interval.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"kept": "layers", "values": "layers metrics", "base": "metrics", "loss_delta": "layers",
               "loss_low": "layers", "loss_high": "layers"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    kept: npt.NDArray[np.int64]
    metrics: tuple[str, ...]
    values: npt.NDArray[np.float64]
    base: npt.NDArray[np.float64]
    loss_delta: npt.NDArray[np.float64]
    loss_low: npt.NDArray[np.float64]
    loss_high: npt.NDArray[np.float64]

    def to_pandas(self) -> Any:
        """One row per layer: ``layer`` (1-based), ``kept_head`` (1-based), ``kept_name`` (``layer-head``),
        ``loss_delta, loss_low, loss_high`` and each metric."""
        pandas = require_pandas()
        layers = np.asarray(self.layers, dtype=np.int64)
        kept = np.asarray(self.heads, dtype=np.int64)[np.asarray(self.kept, dtype=np.int64)]
        table = pandas.DataFrame({"layer": layers + 1, "kept_head": kept + 1})
        table["kept_name"] = table["layer"].astype(str) + "-" + table["kept_head"].astype(str)
        for name in ("loss_delta", "loss_low", "loss_high"):
            table[name] = np.asarray(getattr(self, name), dtype=np.float64)
        for m, metric in enumerate(self.metrics):
            table[metric] = np.asarray(self.values, dtype=np.float64)[:, m]
        return table


@dataclass(frozen=True)
class PruningResult(Result):
    """Pruning curves of one objective.

    Attributes:
        layers, heads: 0-based model layers and heads.
        objective: the objective's name.
        data: where the curves are measured; selection: where importance and orders were chosen.
        metrics: metric names (``"loss"`` first); higher_is_better: per metric.
        curves: curve names: ``"importance"``, ``"random:SEED"`` ..., and one per score order
            (``"specialised-last"``, ``"confident-last"`` ...).
        fractions: ``(S,)`` fraction of all heads removed at each step (0 first, 1 last).
        n_pruned: ``(S,)`` heads removed at each step.
        values: ``(C, S, M)`` mean metric over the data sentences for each curve, step and metric.
        order: ``(C, L*H)`` flat head index (``layer * H + head``) in the order each curve removed them.
        step: the fraction per step; importance: ``"iterative"`` or ``"once"``; ablation: ``"zero"``,
            ``"mean"`` or ``"uniform"``.
        one_per_layer: Michel's one-head-per-layer experiment, when run.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"fractions": "S", "n_pruned": "S", "values": "curves S metrics", "order": "curves layers*heads"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    objective: str
    data: str
    selection: str
    metrics: tuple[str, ...]
    higher_is_better: tuple[bool, ...]
    curves: tuple[str, ...]
    fractions: npt.NDArray[np.float64]
    n_pruned: npt.NDArray[np.int64]
    values: npt.NDArray[np.float64]
    order: npt.NDArray[np.int64]
    step: float
    importance: str
    ablation: str
    one_per_layer: OnePerLayer | None = None

    def _metric(self, metric: str) -> int:
        if metric not in self.metrics:
            raise ConfigError(f"metric: expected one of {', '.join(self.metrics)}, found {metric!r}")
        return self.metrics.index(metric)

    def curve(self, name: str, metric: str = "loss") -> npt.NDArray[np.float64]:
        """``(S,)`` one curve's values of one metric."""
        if name not in self.curves:
            raise ConfigError(f"curve: expected one of {', '.join(self.curves)}, found {name!r}")
        return np.asarray(self.values, dtype=np.float64)[self.curves.index(name), :, self._metric(metric)]

    def random_band(self, metric: str = "loss") -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64],
                                                           npt.NDArray[np.float64]]:
        """``(low, median, high)`` each ``(S,)`` over the random curves (min, median, max)."""
        rows = [c for c, name in enumerate(self.curves) if name.startswith("random:")]
        if not rows:
            raise ConfigError(f"random band: expected curves named random:SEED, found {', '.join(self.curves)}")
        values = np.asarray(self.values, dtype=np.float64)[rows, :, self._metric(metric)]  # (R, S)
        return values.min(axis=0), np.median(values, axis=0), values.max(axis=0)

    def _worse(self, name: str, metric: str) -> npt.NDArray[np.float64]:
        """``(S,)`` how much worse than the unpruned value each step of one curve is (positive = worse)."""
        values = self.curve(name, metric)
        return -(values - values[0]) if self.higher_is_better[self._metric(metric)] else values - values[0]

    def ablated_worse(self, name: str, metric: str = "loss") -> float:
        """How much worse than the unpruned model the every-head-ablated model is (the curve's last step).

        Raises:
            InputError: the curve's last step does not prune every head (a curve made by :func:`pruning_curves`
                always ends there: :func:`pruning_steps`).
        """
        n_heads = len(self.layers) * len(self.heads)
        if not len(self.n_pruned) or int(self.n_pruned[-1]) != n_heads:
            last = int(self.n_pruned[-1]) if len(self.n_pruned) else 0
            raise InputError(f"pruning curve {name!r}: expected its last step to prune all {n_heads} heads (the "
                             f"every-head-ablated point of the relative tolerance), found {last}")
        return float(self._worse(name, metric)[-1])

    def removable(self, name: str, metric: str = "loss", tolerance: float = DEFAULT_TOLERANCE,
                  rule: str = "range") -> float:
        """The largest fraction pruned such that this and every smaller step are within tolerance
        (:data:`TOLERANCE_RULES`): ``range``, worse than the unpruned value by at most ``tolerance`` x (the
        every-head-ablated value - the unpruned one); ``base``, by at most ``tolerance`` x |unpruned|.

        A better value always qualifies (``higher_is_better`` says which way is worse); a NaN value does not.
        ``range`` allows nothing worse when ablating every head costs nothing (or helps). ``base``: an unpruned
        value with ``|base| < 1e-6`` counts as 0 (the float rounding of a loss that is 0 without pruning, e.g. the
        representation objective's ``1 - cos``) and the tolerance is then absolute.
        """
        if rule not in TOLERANCE_RULES:
            raise ConfigError(f"rule: expected one of {', '.join(TOLERANCE_RULES)}, found {rule!r}")
        base = float(self.curve(name, metric)[0])
        worse = self._worse(name, metric)  # (S,)
        if rule == "range":
            allowed = tolerance * max(self.ablated_worse(name, metric), 0.0)
        else:
            allowed = tolerance * abs(base) if abs(base) >= _ZERO_BASE else tolerance
        ok = np.isfinite(worse) & (worse <= allowed + 1e-12 * max(1.0, abs(base)))
        n_ok = int(np.argmin(ok)) if not ok.all() else len(ok)
        return float(np.asarray(self.fractions, dtype=np.float64)[max(n_ok - 1, 0)])

    def area(self, name: str, metric: str = "loss") -> float:
        """:data:`AREA_RULE`: the normalised area under one curve (NaN when ablating every head costs nothing
        or a step is missing)."""
        worse, span = self._worse(name, metric), self.ablated_worse(name, metric)
        if not np.isfinite(span) or span <= 0 or not np.isfinite(worse).all():
            return float("nan")
        return float(np.trapezoid(worse / span, np.asarray(self.fractions, dtype=np.float64)))

    def to_pandas(self) -> Any:
        """One row per curve and step: ``order, fraction_pruned, n_pruned, objective`` (the loss) and each
        other metric by name."""
        pandas = require_pandas()
        values = np.asarray(self.values, dtype=np.float64)  # (C, S, M)
        n_steps = len(self.fractions)
        table = pandas.DataFrame({
            "order": np.repeat(np.asarray(self.curves, dtype=object), n_steps),
            "fraction_pruned": np.tile(np.asarray(self.fractions, dtype=np.float64), len(self.curves)),
            "n_pruned": np.tile(np.asarray(self.n_pruned, dtype=np.int64), len(self.curves))})
        for m, metric in enumerate(self.metrics):
            table["objective" if metric == "loss" else metric] = values[:, :, m].reshape(-1)
        return table


def score_order(scores: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """``(L*H,)`` flat head indices, lowest score first, ties by head index (NaN scores first)."""
    flat = np.asarray(scores, dtype=np.float64).reshape(-1)
    missing = np.isnan(flat)
    return np.lexsort((np.arange(flat.size), np.where(missing, 0.0, flat), ~missing)).astype(np.int64)


def pruning_steps(step: float, n_heads: int) -> npt.NDArray[np.int64]:
    """``(S,)`` heads pruned at each step: ``round(k * step * n_heads)`` (halves up) for k = 0, 1, ... until all
    are pruned (the last step prunes every head); a step that would prune no new head is dropped."""
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0 < step <= 1:
        raise ConfigError(f"step: expected a fraction of the heads in (0, 1], found {step!r}")
    n_steps = int(math.ceil(1 / step - 1e-9))
    counts = [min(n_heads, int(math.floor(k * step * n_heads + 0.5 + 1e-9))) for k in range(n_steps)] + [n_heads]
    return np.array(sorted(set(counts)), dtype=np.int64)


def _check_scores(name: str, scores: npt.ArrayLike, shape: tuple[int, int]) -> npt.NDArray[np.float64]:
    values = np.asarray(scores, dtype=np.float64)
    if values.shape != shape:
        raise ConfigError(f"orders[{name!r}]: expected (n_layers, n_heads) = {shape} scores, found shape "
                          f"{values.shape}")
    return values


def _selection_importance(model: Any, select: Any, objective: Any, pruned: npt.NDArray[np.bool_] | None,
                          ablation: str, means: Any) -> npt.NDArray[np.float64]:
    """``(L, H)`` layer-l2 importance on ``select`` with ``pruned`` heads ablated; pruned heads score 0 and
    do not count in their layer's norm."""
    raw = gate_gradients(model, select, objective, pruned=pruned, ablation=ablation, means=means).mean(axis=0)
    if pruned is not None:
        raw[pruned] = 0.0
    return normalize_importance(raw)


def _importance_order(model: Any, select: Any, objective: Any, first: npt.NDArray[np.float64],
                      n_pruned: npt.NDArray[np.int64], mode: str, ablation: str, means: Any, bar: Any
                      ) -> npt.NDArray[np.int64]:
    """``(N,)`` heads in pruning order: least important remaining first, importance re-estimated on ``select``
    with the pruned heads ablated before each step (``iterative``) or kept from the start (``once``).

    A step that removes every remaining head takes them in the previous estimate's order (no new pass).
    """
    if mode == "once":
        return score_order(first)
    shape = first.shape
    pruned = np.zeros(first.size, dtype=bool)
    importance = first
    order: list[int] = []
    for k in range(1, len(n_pruned)):
        take = int(n_pruned[k] - n_pruned[k - 1])
        if pruned.any() and take < int((~pruned).sum()):  # all remaining go anyway: no need to rank them
            importance = _selection_importance(model, select, objective, pruned.reshape(shape), ablation, means)
        chosen = [int(i) for i in score_order(importance) if not pruned[i]][:take]
        pruned[chosen] = True
        order.extend(chosen)
        bar.update(1)
    return np.array(order, dtype=np.int64)


class _Evaluator:
    """Mean metrics of the data sentences with a set of heads pruned; each set is evaluated once."""

    def __init__(self, model: Any, batches: Any, objective: Any, shape: tuple[int, int], ablation: str,
                 means: Any) -> None:
        self.model, self.batches, self.objective, self.shape = model, batches, objective, shape
        self.ablation, self.means = ablation, means
        self.cache: dict[bytes, dict[str, float]] = {}

    def __call__(self, heads: npt.NDArray[np.int64]) -> dict[str, float]:
        mask = np.zeros(self.shape[0] * self.shape[1], dtype=bool)
        mask[heads] = True
        key = mask.tobytes()
        if key not in self.cache:
            metrics = sentence_metrics(self.model, self.batches, self.objective, pruned=mask.reshape(self.shape),
                                       ablation=self.ablation, means=self.means)
            self.cache[key] = {name: float(np.mean(v)) for name, v in metrics.items()}
        return self.cache[key]

    def curve(self, order: npt.NDArray[np.int64], n_pruned: npt.NDArray[np.int64], bar: Any) -> list[dict[str, float]]:
        out = []
        for n in n_pruned:
            out.append(self(order[:n]))
            bar.update(1)
        return out


def _higher_is_better(objective: Any, metrics: Sequence[str]) -> tuple[bool, ...]:
    """Per metric: the objective's own ``higher_is_better`` mapping, else True for accuracy-like names."""
    own = dict(getattr(objective, "higher_is_better", {}) or {})
    return tuple(bool(own.get(m, m in _HIGHER_IS_BETTER)) for m in metrics)


def _check_options(orders: Mapping[str, Any], random_seeds: Sequence[int], importance: str, ablation: str,
                   shape: tuple[int, int]) -> dict[str, npt.NDArray[np.float64]]:
    from probes.extraction.interventions import ABLATIONS

    if importance not in ("iterative", "once"):
        raise ConfigError(f"importance: expected iterative or once, found {importance!r}")
    if ablation not in ABLATIONS:
        raise ConfigError(f"ablation: expected one of {', '.join(ABLATIONS)}, found {ablation!r}")
    if len(set(random_seeds)) != len(random_seeds):
        raise ConfigError(f"random_seeds: expected distinct seeds, found {list(random_seeds)}")
    clash = [name for name in orders if name == "importance" or name.startswith("random:")]
    if clash:
        raise ConfigError(f"orders: names 'importance' and 'random:...' are taken by the built-in curves, found "
                          f"{', '.join(clash)}")
    return {name: _check_scores(name, scores, shape) for name, scores in orders.items()}


def pruning_curves(model: Any, batches: Any, objective: Any, *, select_batches: Any = None,
                   orders: Mapping[str, npt.ArrayLike] | None = None,
                   random_seeds: Sequence[int] = DEFAULT_RANDOM_SEEDS, step: float = DEFAULT_STEP,
                   importance: str = "iterative", ablation: str = "zero", means: Any = None,
                   one_per_layer: bool = True, data: str = "", selection: str = "", progress: bool = False,
                   start: npt.ArrayLike | None = None) -> PruningResult:
    """Curves for importance (chosen on ``select_batches``, default ``batches``), each random seed and each
    score order in ``orders`` (``{name: (L, H) scores}``, lowest pruned first), measured on ``batches``.
    ``start``: the unpruned model's layer-l2 importance on ``select_batches`` when the caller has it already
    (``ImportanceResult.importance`` without global rescale); computed here otherwise.

    Importance ranks heads by the layer-l2-normalised score (:func:`normalize_importance`), pruned heads
    excluded from the norm. Each step's value is the mean over the sentences of ``batches`` of the
    objective's metrics (no grad); the unpruned and the all-pruned model are evaluated once for all curves.
    """
    batches = _as_batches(batches)
    select = batches if select_batches is None else _as_batches(select_batches)
    shape = _shape(model)
    scores = _check_options(orders or {}, random_seeds, importance, ablation, shape)
    n_heads = shape[0] * shape[1]
    n_pruned = pruning_steps(step, n_heads)
    evaluate = _Evaluator(model, batches, objective, shape, ablation, means)
    first = _selection_importance(model, select, objective, None, ablation, means) if start is None \
        else _check_scores("start", start, shape)
    names, found, rows = ["importance"], [], []
    with _bar(progress, 2 * len(n_pruned) - 1, "pruning curve: importance") as bar:
        found.append(_importance_order(model, select, objective, first, n_pruned, importance, ablation, means, bar))
        rows.append(evaluate.curve(found[-1], n_pruned, bar))
    plans = [(f"random:{seed}", np.random.default_rng(seed).permutation(n_heads)) for seed in random_seeds]
    plans += [(name, score_order(values)) for name, values in scores.items()]
    for name, order in plans:
        with _bar(progress, len(n_pruned), f"pruning curve: {name}") as bar:
            names.append(name)
            found.append(np.asarray(order, dtype=np.int64))
            rows.append(evaluate.curve(found[-1], n_pruned, bar))
    metrics = tuple(sorted(rows[0][0], key=lambda m: (m != "loss", list(rows[0][0]).index(m))))
    values = np.array([[[step_values[m] for m in metrics] for step_values in row] for row in rows])  # (C, S, M)
    reduced = one_head_per_layer(model, batches, objective, first, ablation=ablation, means=means) \
        if one_per_layer else None
    return PruningResult(
        layers=tuple(range(shape[0])), heads=tuple(range(shape[1])), objective=str(getattr(objective, "name", "")),
        data=data, selection=selection or data, metrics=metrics,
        higher_is_better=_higher_is_better(objective, metrics), curves=tuple(names),
        fractions=n_pruned / n_heads, n_pruned=n_pruned, values=values, order=np.stack(found), step=float(step),
        importance=importance, ablation=ablation, one_per_layer=reduced)


def one_head_per_layer(model: Any, batches: Any, objective: Any, importance: npt.ArrayLike, *,
                       ablation: str = "zero", means: Any = None, n_resamples: int = 1000, seed: int = 0
                       ) -> OnePerLayer:
    """Each layer in turn keeps only its most important head (by ``importance`` (L, H)); measured on ``batches``.

    The kept head is the layer's largest importance (ties: the lowest head index); no gradients. The loss
    change is per sentence, its interval a percentile bootstrap over sentences (``resample_counts``, ``seed``).
    """
    batches = _as_batches(batches)
    shape = _shape(model)
    scores = _check_scores("importance", importance, shape)
    kept = np.nan_to_num(scores, nan=-np.inf).argmax(axis=1).astype(np.int64)  # (L,)
    base = sentence_metrics(model, batches, objective, ablation=ablation, means=means)
    metrics = tuple(sorted(base, key=lambda m: (m != "loss", list(base).index(m))))
    values = np.empty((shape[0], len(metrics)))
    deltas = np.empty((base["loss"].shape[0], shape[0]))  # (N, L)
    for layer in range(shape[0]):
        mask = np.zeros(shape, dtype=bool)
        mask[layer] = True
        mask[layer, kept[layer]] = False
        reduced = sentence_metrics(model, batches, objective, pruned=mask, ablation=ablation, means=means)
        values[layer] = [reduced[m].mean() for m in metrics]
        deltas[:, layer] = reduced["loss"] - base["loss"]
    if n_resamples > 0:
        draws = resample_counts(deltas.shape[0], n_resamples, seed) @ deltas / deltas.shape[0]  # (R, L)
        low, high = percentile_interval(draws)
    else:
        low, high = np.full(shape[0], np.nan), np.full(shape[0], np.nan)
    return OnePerLayer(layers=tuple(range(shape[0])), heads=tuple(range(shape[1])), kept=kept, metrics=metrics,
                       values=values, base=np.array([base[m].mean() for m in metrics]), loss_delta=deltas.mean(axis=0),
                       loss_low=low, loss_high=high)
