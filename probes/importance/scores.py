"""Head importance: Michel et al. 2019's gradient score and leave-one-out effects, and how well they agree.

* Gradient importance (Michel §4.1): ``I_h = E_x |dL(x)/dg_h|`` with every gate ``g = 1``; the absolute
  value is taken per sentence before averaging (per-sentence gates ``(B, L, H)`` give every sentence's
  gradient in one backward pass: sentences do not interact in a batch). Then each layer is divided by
  its l2 norm (Michel; HF's bertology adds 1e-20), and optionally rescaled to [0, 1] over all heads
  (HF's default, not in the paper: off unless asked).
* An objective at its minimum on the unmodified model (the representation objective: ``1 - cos`` of the
  pooled states to the unmodified ones) has ``dL/dg_h = 0`` at every gate 1, so Michel's score is rounding
  noise there. For such a *stationary* objective the score is the Gauss-Newton term instead,
  ``E_x |de/dg_h|^2 / 2`` (``e`` the unit pooled state): the second-order estimate of the loss change when
  head h alone is removed (:data:`GAUSS_NEWTON_RULE`); ``ImportanceResult.criterion`` says which was used.
* Leave-one-out (Michel §3.2): each head ablated alone; the effect is the mean over sentences of the
  loss change, with a percentile bootstrap interval over sentences. Several heads' ablations run as row
  blocks of one pass and the layers below the ablated one are not run again
  (:mod:`probes.importance.ablations`); ``method="one-at-a-time"`` is the plain loop, equal to float rounding.
* Agreement: Spearman's rank correlation between importance and leave-one-out effect over heads
  (:func:`probes.heads.inference.spearman_rows`, scipy's), with an interval from the same bootstrap over
  sentences (both measures recomputed in every resample).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError, ModelOutputError
from probes.heads.inference import spearman_rows
from probes.heads.intervals import percentile_interval, resample_counts
from probes.importance.batches import _as_batches, _in_index_order, _shape
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["ImportanceResult", "gate_gradients", "sentence_metrics", "leave_one_out", "normalize_importance",
           "head_importance", "is_stationary", "IMPORTANCE_RULE", "GAUSS_NEWTON_RULE", "GAUSS_NEWTON_PROBES",
           "LOO_METHODS"]

#: Rademacher probes per batch of the Gauss-Newton estimate (each one backward pass); the estimate is
#: unbiased per sentence and its noise averages out over sentences (relative error about sqrt(2 / (k N))).
GAUSS_NEWTON_PROBES = 2
#: The criterion used for an objective at its minimum on the unmodified model (the representation objective).
GAUSS_NEWTON_RULE = ("importance of a stationary objective (its minimum is the unmodified model, so dL/dg_h = 0 "
                     "there): the Gauss-Newton term I_h = mean over sentences of |de/dg_h|^2 / 2, e the unit-length "
                     "pooled state, which is the second-order estimate of the loss change when head h alone is "
                     "removed (1 - cos = |e - e_ref|^2 / 2); estimated with 2 Rademacher probes per sentence "
                     "(Hutchinson), then layer-l2 normalised like Michel's score")
#: How importance is computed, printed with every table.
IMPORTANCE_RULE = ("importance: Michel et al. 2019's I_h = mean over sentences of |dL/dg_h| at all gates 1 "
                   "(absolute value per sentence), each layer divided by its l2 norm")


@dataclass(frozen=True)
class ImportanceResult(Result):
    """Per head: gradient importance and leave-one-out effect on one objective and one dataset.

    Attributes:
        layers, heads: 0-based model layers and heads.
        objective: the objective's name (``representation``, ``probe``, ``lm`` ...).
        data: the name of the data both were computed on.
        importance: ``(L, H)`` Michel's score after ``normalization``.
        raw_importance: ``(L, H)`` mean over sentences of ``|dL/dg_h|`` before normalisation.
        normalization: ``"layer-l2"``, ``"layer-l2+global"`` (min-max over all heads after) or ``"none"``.
        loo_effect, loo_low, loo_high: ``(L, H)`` mean loss change with the head ablated alone, and its
            interval (NaN when leave-one-out was not run).
        ablation: how a head is removed: ``"zero"``, ``"mean"`` or ``"uniform"``.
        base_loss: mean loss of the unmodified model on the data.
        rank_correlation, rank_low, rank_high: Spearman's rho of ``importance`` and ``loo_effect`` over
            heads, and its bootstrap interval (NaN without leave-one-out).
        n_sentences: sentences the scores average over.
        n_resamples, confidence: the bootstrap (over sentences, percentile intervals).
        abs_rank_correlation, abs_rank_low, abs_rank_high: the same with the *size* of the leave-one-out
            effect: Michel's score is unsigned, so a head whose removal helps (negative effect) can rank high.
        raw_rank_correlation, raw_rank_low, raw_rank_high: the same with ``raw_importance`` (before the layer
            normalisation, which makes scores comparable within a layer only).
        criterion: ``"gradient"`` (Michel's ``|dL/dg_h|``) or ``"gauss-newton"`` (``|de/dg_h|^2 / 2`` for a
            stationary objective, see :data:`GAUSS_NEWTON_RULE`).
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"importance": "layers heads", "raw_importance": "layers heads", "loo_effect": "layers heads",
               "loo_low": "layers heads", "loo_high": "layers heads"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    objective: str
    data: str
    importance: npt.NDArray[np.float64]
    raw_importance: npt.NDArray[np.float64]
    normalization: str
    loo_effect: npt.NDArray[np.float64]
    loo_low: npt.NDArray[np.float64]
    loo_high: npt.NDArray[np.float64]
    ablation: str
    base_loss: float
    rank_correlation: float
    rank_low: float
    rank_high: float
    n_sentences: int
    n_resamples: int
    confidence: float
    criterion: str = "gradient"
    abs_rank_correlation: float = float("nan")
    abs_rank_low: float = float("nan")
    abs_rank_high: float = float("nan")
    raw_rank_correlation: float = float("nan")
    raw_rank_low: float = float("nan")
    raw_rank_high: float = float("nan")

    def to_pandas(self) -> Any:
        """One row per head: ``layer, head`` (1-based), ``head_name, importance, raw_importance, loo_effect,
        loo_low, loo_high``."""
        table = long_table(head_axes(self.layers, self.heads),
                           {"importance": self.importance, "raw_importance": self.raw_importance,
                            "loo_effect": self.loo_effect, "loo_low": self.loo_low, "loo_high": self.loo_high})
        table.insert(2, "head_name", head_names(table))
        return table


# ----------------------------------------------------------------------------- shared helpers
def _bar(progress: bool, total: int, desc: str) -> Any:
    """A progress bar (:func:`probes.progress.bar`) with ``total`` steps labelled ``desc``; prints nothing unless
    ``progress``."""
    from probes.progress import bar

    return bar(desc, total=total, unit="step", progress=progress, leave=False)


def _pruned_mask(pruned: Any, shape: tuple[int, int]) -> npt.NDArray[np.bool_] | None:
    """``pruned`` as an ``(L, H)`` bool array, ``None`` when no head is pruned."""
    if pruned is None:
        return None
    mask = np.asarray(pruned)
    if mask.dtype != np.bool_ or mask.shape != shape:
        raise ConfigError(f"pruned: expected a bool mask of shape (n_layers, n_heads) = {shape}, found "
                          f"{mask.dtype} of shape {mask.shape}")
    return mask if mask.any() else None


@contextmanager
def _gates_only(model: Any) -> Iterator[None]:
    """Parameters stop requiring grad while the block runs: only the gates get gradients (less memory)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


# ----------------------------------------------------------------------------- passes over the data
def _gauss_newton(objective: Any, model: Any, batch: Any, gates: Any, n_probes: int,
                  vectors: Any = None) -> tuple[Any, Any]:
    """``((B, L, H) |de/dg_h|^2 / 2, (B,) losses)`` by Hutchinson's estimator: for Rademacher ``v``,
    ``E[(v . de/dg_h)^2] = |de/dg_h|^2``; ``n_probes`` backward passes of ``v . e`` give every head's
    ``v . de/dg_h`` at once. ``v`` is seeded by the batch's smallest sentence index (reproducible);
    ``vectors`` ``(K, D)`` replaces the random probes (``sqrt(D)`` times the identity gives the exact value)."""
    import torch

    embedding, reference = objective.embedding(model, batch)  # (B, D) each, unit length
    losses = 0.5 * (embedding - reference).pow(2).sum(dim=-1)  # (B,) == 1 - cos
    generator = torch.Generator().manual_seed(int(batch.indices.min()))
    n_probes = n_probes if vectors is None else len(vectors)
    score = torch.zeros_like(gates)
    for k in range(n_probes):
        v = (torch.randint(0, 2, embedding.shape, generator=generator).to(embedding) * 2 - 1 if vectors is None
             else vectors[k].to(embedding).expand_as(embedding))  # (B, D)
        (grad,) = torch.autograd.grad((embedding * v).sum(), gates, retain_graph=k < n_probes - 1)
        score += grad.pow(2)
    return 0.5 * score / n_probes, losses


def _gradients_and_losses(model: Any, batches: list[Any], objective: Any, pruned: Any, ablation: str, means: Any,
                          progress: bool) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``((N, L, H) per-sentence score, (N,) losses)`` at gates 1, sentences in index order: ``|dL_s/dg|``, or
    the Gauss-Newton term for a stationary objective (:data:`GAUSS_NEWTON_RULE`)."""
    import torch

    from probes.extraction.interventions import intervene

    shape = _shape(model)
    mask = _pruned_mask(pruned, shape)
    param = next(model.parameters())
    stationary = is_stationary(objective)
    grads, losses = [], []
    with _gates_only(model), torch.enable_grad(), _bar(progress, len(batches), "importance") as bar:
        for batch in batches:
            gates = torch.ones(len(batch.sentences), *shape, dtype=param.dtype, device=param.device,
                               requires_grad=True)  # (B, L, H): one row per sentence
            with intervene(model, gates=gates, ablate=mask, ablation=ablation, means=means):
                if stationary:
                    score, loss = _gauss_newton(objective, model, batch, gates, GAUSS_NEWTON_PROBES)
                else:
                    loss = objective.losses(model, batch)  # (B,)
                    (grad,) = torch.autograd.grad(loss.sum(), gates, allow_unused=True)
                    score = torch.zeros_like(gates) if grad is None else grad.abs()
            grads.append((batch.indices, score.double().cpu().numpy()))
            losses.append((batch.indices, loss.detach().double().cpu().numpy()))
            bar.update(1)
    return _in_index_order(grads), _in_index_order(losses)


def is_stationary(objective: Any) -> bool:
    """Whether ``objective`` is at its minimum on the unmodified model (and gives :meth:`embedding`)."""
    return bool(getattr(objective, "stationary", False)) and callable(getattr(objective, "embedding", None))


def gate_gradients(model: Any, batches: Any, objective: Any, *, pruned: Any = None, ablation: str = "zero",
                   means: Any = None, progress: bool = False) -> npt.NDArray[np.float64]:
    """``(N, L, H)`` each sentence's ``|dL_s/dg_h|`` at gates 1 (heads in ``pruned`` (L, H) bool ablated).

    Rows follow sentence index order (``Batch.indices``), N = number of sentences in ``batches``.
    Gates ``(B, L, H)`` (one row per sentence, all 1) require grad, the parameters do not; one backward
    pass of the summed per-sentence losses per batch gives every sentence's gradient. A pruned head's gate
    multiplies its replacement (0 for ``"zero"``, so its gradient is 0; not so for ``"mean"``/``"uniform"``:
    :func:`probes.importance.pruning.pruning_curves` sets pruned heads' importance to 0 itself).
    """
    return _gradients_and_losses(model, _as_batches(batches), objective, pruned, ablation, means, progress)[0]


def sentence_metrics(model: Any, batches: Any, objective: Any, *, pruned: Any = None, ablation: str = "zero",
                     means: Any = None) -> dict[str, npt.NDArray[np.float64]]:
    """``{metric: (N,)}`` the objective's per-sentence metrics with the heads in ``pruned`` ablated, no grad."""
    import torch

    from probes.extraction.interventions import intervene

    mask = _pruned_mask(pruned, _shape(model))
    rows: dict[str, list[Any]] = {}
    with torch.no_grad(), intervene(model, ablate=mask, ablation=ablation, means=means):
        for batch in _as_batches(batches):
            for name, values in objective.evaluate(model, batch).items():
                rows.setdefault(name, []).append((batch.indices, np.asarray(values, dtype=np.float64)))
    if "loss" not in rows:
        raise ModelOutputError(f"objective {getattr(objective, 'name', objective)!r}: expected 'loss' among the "
                               f"metrics of evaluate, found {', '.join(rows) or 'none'}")
    return {name: _in_index_order(values) for name, values in rows.items()}


#: How :func:`leave_one_out` runs: several heads' ablations as row blocks of one pass, layers below the ablated
#: layer replayed (:mod:`probes.importance.ablations`), or one pass over the data per head (the reference).
LOO_METHODS: tuple[str, ...] = ("batched", "one-at-a-time")


def leave_one_out(model: Any, batches: Any, objective: Any, *, ablation: str = "zero", means: Any = None,
                  progress: bool = False, method: str = "batched", max_tokens: int | None = None,
                  skip_lower: bool | None = None) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(base (N,), ablated (N, L, H))`` per-sentence losses, unmodified and with each head ablated alone.

    ``method="batched"`` (default) runs up to ``max_tokens`` padded tokens of ablations per pass (default
    :data:`probes.importance.ablations.DEFAULT_LOO_TOKENS`) and replays the layers below each ablated layer
    when ``skip_lower`` (default: the objective reads only the model's output); ``"one-at-a-time"`` is one
    pass over the data per head. Both give the same numbers up to float rounding.
    """
    from probes.importance.ablations import DEFAULT_LOO_TOKENS, ablated_metrics

    if method not in LOO_METHODS:
        raise ConfigError(f"leave-one-out method: expected one of {', '.join(LOO_METHODS)}, found {method!r}")
    batches = _as_batches(batches)
    n_layers, n_heads = _shape(model)
    desc = f"leave-one-out ({n_layers * n_heads} heads)"
    if method == "batched":
        masks = np.eye(n_layers * n_heads, dtype=bool).reshape(-1, n_layers, n_heads)  # (L*H, L, H): one head each
        masks = np.concatenate([np.zeros((1, n_layers, n_heads), dtype=bool), masks])  # row 0: nothing ablated
        with _bar(progress, len(masks) * len(batches), desc) as bar:
            metrics = ablated_metrics(model, batches, objective, masks, ablation=ablation, means=means,
                                      max_tokens=DEFAULT_LOO_TOKENS if max_tokens is None else max_tokens,
                                      skip_lower=skip_lower, bar=bar)
        if "loss" not in metrics:
            raise ModelOutputError(f"objective {getattr(objective, 'name', objective)!r}: expected 'loss' among the "
                                   f"metrics of evaluate, found {', '.join(metrics) or 'none'}")
        losses = metrics["loss"]  # (1 + L*H, N)
        return losses[0], losses[1:].T.reshape(-1, n_layers, n_heads)
    base = sentence_metrics(model, batches, objective)["loss"]
    ablated = np.empty((base.shape[0], n_layers, n_heads))
    with _bar(progress, n_layers * n_heads, desc) as bar:
        for layer in range(n_layers):
            for head in range(n_heads):
                mask = np.zeros((n_layers, n_heads), dtype=bool)
                mask[layer, head] = True
                ablated[:, layer, head] = sentence_metrics(model, batches, objective, pruned=mask, ablation=ablation,
                                                           means=means)["loss"]
                bar.update(1)
    return base, ablated


# ----------------------------------------------------------------------------- scores
def normalize_importance(raw: npt.ArrayLike, *, layer_norm: bool = True, global_rescale: bool = False
                         ) -> npt.NDArray[np.float64]:
    """``(..., L, H)``: each layer divided by its l2 norm (+1e-20), then optionally min-max rescaled over all heads.

    Leading axes (bootstrap resamples) are normalised one by one. A constant array rescales to 0.
    """
    values = np.array(raw, dtype=np.float64)
    if values.ndim < 2:
        raise ConfigError(f"importance: expected an (n_layers, n_heads) array, found shape {values.shape}")
    if layer_norm:
        values = values / (np.sqrt((values ** 2).sum(axis=-1, keepdims=True)) + 1e-20)
    if global_rescale:
        low = values.min(axis=(-2, -1), keepdims=True)
        span = values.max(axis=(-2, -1), keepdims=True) - low
        values = np.divide(values - low, span, out=np.zeros_like(values), where=span > 0)
    return values


def _check_bootstrap(n_resamples: int, confidence: float) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int) or n_resamples < 0:
        raise ConfigError(f"n_resamples: expected a whole number >= 0, found {n_resamples!r}")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence: expected a number in (0, 1), found {confidence!r}")


def _loo_scores(grads: npt.NDArray[np.float64], deltas: npt.NDArray[np.float64], importance: npt.NDArray[np.float64],
                global_rescale: bool, n_resamples: int, confidence: float, seed: int) -> dict[str, Any]:
    """Leave-one-out effect, its interval and the rank correlation with its interval, from the same draws.

    ``grads``, ``deltas``: ``(N, L, H)`` per-sentence |gradients| and loss changes.
    """
    n, n_layers, n_heads = deltas.shape
    effect = deltas.mean(axis=0)
    raw = grads.mean(axis=0)
    pairs = {"rank": (importance, effect), "abs_rank": (importance, np.abs(effect)), "raw_rank": (raw, effect)}
    out: dict[str, Any] = {"loo_effect": effect}
    for key, (a, b) in pairs.items():
        out[f"{key}_correlation"] = float(spearman_rows(a.ravel(), b.ravel()))
    if n_resamples == 0:
        nan = np.full((n_layers, n_heads), np.nan)
        return {**out, "loo_low": nan, "loo_high": nan.copy(), **{f"{k}_{end}": np.nan for k in pairs
                                                                  for end in ("low", "high")}}
    weights = resample_counts(n, n_resamples, seed) / n  # (R, N): each resample's mean as a weighted sum
    loo_draws = weights @ deltas.reshape(n, -1)  # (R, L*H)
    raw_draws = weights @ grads.reshape(n, -1)  # (R, L*H)
    imp_draws = normalize_importance(raw_draws.reshape(-1, n_layers, n_heads),
                                     global_rescale=global_rescale).reshape(n_resamples, -1)
    low, high = percentile_interval(loo_draws, confidence)
    out.update(loo_low=low.reshape(n_layers, n_heads), loo_high=high.reshape(n_layers, n_heads))
    for key, (a, b) in {"rank": (imp_draws, loo_draws), "abs_rank": (imp_draws, np.abs(loo_draws)),
                        "raw_rank": (raw_draws, loo_draws)}.items():
        rho_low, rho_high = percentile_interval(spearman_rows(a, b)[:, None], confidence)
        out.update({f"{key}_low": float(rho_low[0]), f"{key}_high": float(rho_high[0])})
    return out


def head_importance(model: Any, batches: Any, objective: Any, *, loo: bool = True, ablation: str = "zero",
                    means: Any = None, global_rescale: bool = False, n_resamples: int = 1000,
                    confidence: float = 0.95, seed: int = 0, data: str = "", progress: bool = False,
                    loo_method: str = "batched", loo_tokens: int | None = None) -> ImportanceResult:
    """Gradient importance, leave-one-out effects and their rank correlation on ``batches`` (one pass each).

    The bootstrap draws sentences with :func:`probes.heads.intervals.resample_counts` (``seed``); each
    resample recomputes both the importance (normalised as the point estimate) and the leave-one-out
    effects, so the interval of Spearman's rho covers both. The gradient pass runs with every head present
    (``ablation`` and ``means`` only say how leave-one-out removes a head); ``loo_method`` and ``loo_tokens``
    are :func:`leave_one_out`'s ``method`` and ``max_tokens``.
    """
    _check_bootstrap(n_resamples, confidence)
    batches = _as_batches(batches)
    n_layers, n_heads = _shape(model)
    grads, losses = _gradients_and_losses(model, batches, objective, None, ablation, means, progress)
    raw = grads.mean(axis=0)
    importance = normalize_importance(raw, global_rescale=global_rescale)
    if loo:
        base, ablated = leave_one_out(model, batches, objective, ablation=ablation, means=means, progress=progress,
                                      method=loo_method, max_tokens=loo_tokens)
        scores = _loo_scores(grads, ablated - base[:, None, None], importance, global_rescale, n_resamples,
                             confidence, seed)
        base_loss = float(base.mean())
    else:
        nan = np.full((n_layers, n_heads), np.nan)
        scores = {"loo_effect": nan, "loo_low": nan.copy(), "loo_high": nan.copy(), "rank_correlation": np.nan,
                  "rank_low": np.nan, "rank_high": np.nan, "abs_rank_correlation": np.nan, "abs_rank_low": np.nan,
                  "abs_rank_high": np.nan, "raw_rank_correlation": np.nan, "raw_rank_low": np.nan,
                  "raw_rank_high": np.nan}
        base_loss = float(losses.mean())
    return ImportanceResult(
        layers=tuple(range(n_layers)), heads=tuple(range(n_heads)), objective=str(getattr(objective, "name", "")),
        data=data, importance=importance, raw_importance=raw,
        normalization="layer-l2+global" if global_rescale else "layer-l2", ablation=ablation, base_loss=base_loss,
        n_sentences=int(grads.shape[0]), n_resamples=n_resamples, confidence=float(confidence),
        criterion="gauss-newton" if is_stationary(objective) else "gradient", **scores)
