"""Figures of head importance and pruning (Michel et al. 2019 Figs. 2-3; Voita et al. 2019 Fig. 6 in spirit).

Every function takes a result and writes one figure, returning its path:

- :func:`write_importance_heatmaps`: two ``layers x heads`` panels, gradient importance and the
  leave-one-out effect (diverging colours centred on 0), values written in the cells up to 16 x 16;
- :func:`write_importance_scatter`: importance against leave-one-out effect (its interval as error bars),
  Spearman's rho and its interval in the title;
- :func:`write_pruning_curves`: one panel per metric, x = % of heads pruned; the random orders as a
  shaded min-max band and a median line, importance and every score order as lines with markers, a
  dashed line at the unpruned value;
- :func:`write_one_per_layer`: Michel §3.3, the loss change of each layer reduced to one head, with its
  interval, the kept head named.

The format is the path's suffix (``.png``, ``.svg``, ``.pdf``: :data:`probes.reports.writer.FIGURE_FORMATS`);
every figure is saved at :data:`probes.reports.figures.DPI` with a tight bounding box (nothing clipped).
Titles get the objective and the data appended to the caller's ``title`` (which should name the model).
Every label a person reads is 1-based (``layer-head``), as everywhere in ``probes``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError, InputError
from probes.reports.figures import DPI, _new_figure, _wrap, save_figure, series_styles

if TYPE_CHECKING:  # pragma: no cover
    from probes.importance.pruning import OnePerLayer, PruningResult
    from probes.importance.scores import ImportanceResult

__all__ = ["write_importance_heatmaps", "write_importance_scatter", "write_pruning_curves", "write_one_per_layer",
           "ANNOTATE_MAX", "DPI"]


def criterion_label(result: Any) -> str:
    """How the importance of ``result`` was made, in a few words (criterion and normalisation)."""
    kind = "Gauss-Newton |de/dg|^2/2" if getattr(result, "criterion", "gradient") == "gauss-newton" else "|dL/dg|"
    return f"{kind}, {result.normalization}"

#: Cells get their value written in them when both layers and heads are at most this many.
ANNOTATE_MAX = 16


def _checked_path(path: str | Path) -> Path:
    """``path`` as a Path, its suffix one of the figure formats (ConfigError naming them otherwise)."""
    from probes.reports.writer import FIGURE_FORMATS

    path = Path(path)
    if path.suffix.lower().lstrip(".") not in FIGURE_FORMATS:
        raise ConfigError(f"figure file: expected a suffix among {', '.join('.' + f for f in FIGURE_FORMATS)}, "
                          f"found {path.name!r}")
    return path


def _full_title(title: str, *lines: str) -> str:
    return "\n".join([title, *[line for line in lines if line]])


def _interval_text(confidence: float, n_resamples: int) -> str:
    return f"{100 * confidence:.0f}% percentile bootstrap over sentences, {n_resamples} resamples"


def _annotate(ax: Any, image: Any, values: npt.NDArray[np.float64], fmt: str) -> None:
    """Write each finite value in its cell, black or white by the cell colour's luminance."""
    colours = image.cmap(image.norm(values))  # (L, H, 4)
    luminance = colours[..., :3] @ np.array([0.299, 0.587, 0.114])
    for (layer, head), value in np.ndenumerate(values):
        if np.isfinite(value):
            ax.text(head, layer, format(value, fmt), ha="center", va="center", fontsize=5.5,
                    color="white" if luminance[layer, head] < 0.5 else "black")


def _head_axes(ax: Any, n_layers: int, n_heads: int) -> None:
    """1-based tick labels on a ``layers x heads`` image (every one up to 16, else spaced)."""
    for axis, n, setter, label in ((0, n_heads, ax.set_xticks, "head (1-based)"),
                                   (1, n_layers, ax.set_yticks, "layer (1-based)")):
        step = max(1, int(np.ceil(n / 16)))
        ticks = list(range(0, n, step))
        setter(ticks, [str(t + 1) for t in ticks], fontsize=7)
        (ax.set_xlabel if axis == 0 else ax.set_ylabel)(label, fontsize=8)


def _heatmap_panel(fig: Any, ax: Any, values: npt.NDArray[np.float64], *, title: str, label: str,
                   diverging: bool) -> None:
    """One ``layers x heads`` panel with its colour bar; diverging panels are centred on 0."""
    from matplotlib import colormaps

    n_layers, n_heads = values.shape
    finite = values[np.isfinite(values)]
    if diverging:
        span = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
        cmap, vmin, vmax = colormaps["RdBu_r"].with_extremes(bad="0.85"), -span, span
    else:
        top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
        cmap, vmin, vmax = colormaps["viridis"].with_extremes(bad="0.85"), 0.0, top
    image = ax.imshow(np.where(np.isfinite(values), values, np.nan), aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax,
                      origin="lower", interpolation="nearest")
    _head_axes(ax, n_layers, n_heads)
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, label=label, shrink=0.9)
    if not finite.size:
        ax.text((n_heads - 1) / 2, (n_layers - 1) / 2, "not run", ha="center", va="center", fontsize=9)
    elif n_layers <= ANNOTATE_MAX and n_heads <= ANNOTATE_MAX:
        _annotate(ax, image, values, ".2f" if not diverging else ".2g")


def write_importance_heatmaps(result: ImportanceResult, path: str | Path, *, title: str) -> Path:
    """Two ``layers x heads`` panels: normalised gradient importance and the leave-one-out loss change.

    The leave-one-out panel uses a diverging colour map centred on 0 (red: the loss rises without the head);
    it reads "not run" when the result has no leave-one-out effects. Values are written in the cells when
    the model has at most :data:`ANNOTATE_MAX` layers and heads.
    """
    path = _checked_path(path)
    importance = np.asarray(result.importance, dtype=float)
    loo = np.asarray(result.loo_effect, dtype=float)
    n_layers, n_heads = importance.shape
    cell = 1.0 if n_layers <= ANNOTATE_MAX and n_heads <= ANNOTATE_MAX else 0.5  # room for the written values
    panel_w = max(3.6, 1.3 + 0.42 * cell * n_heads)
    height = max(3.0, 1.6 + 0.36 * cell * n_layers)
    fig = _new_figure((2 * panel_w, height), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2)
    _heatmap_panel(fig, left, importance, title=f"importance: {criterion_label(result)}", label="importance",
                   diverging=False)
    _heatmap_panel(fig, right, loo, title=f"leave-one-out: loss change ({result.ablation} ablation)",
                   label="loss change", diverging=True)
    fig.suptitle(_wrap(_full_title(title, f"{result.objective} objective on {result.data} "
                                   f"({result.n_sentences} sentences); layers and heads 1-based"),
                       2 * panel_w, 9), fontsize=9)
    return save_figure(fig, path)


def _top_heads(result: ImportanceResult, k: int = 5) -> set[tuple[int, int]]:
    """``(layer, head)`` positions of the ``k`` most important heads and the ``k`` largest leave-one-out effects."""
    out: set[tuple[int, int]] = set()
    for values in (np.asarray(result.importance, float), np.asarray(result.loo_effect, float)):
        flat = np.where(np.isfinite(values), values, -np.inf).ravel()
        for index in np.argsort(-flat, kind="stable")[:k]:
            if np.isfinite(flat[index]):
                layer, head = np.unravel_index(index, values.shape)
                out.add((int(layer), int(head)))
    return out


def write_importance_scatter(result: ImportanceResult, path: str | Path, *, title: str) -> Path:
    """Importance (x) against the leave-one-out effect (y) of every head, the effect's interval as error bars;
    Spearman's rho with its interval in the title; the 5 heads highest on either measure named (1-based)."""
    path = _checked_path(path)
    x = np.asarray(result.importance, float)
    y, low, high = (np.asarray(a, float) for a in (result.loo_effect, result.loo_low, result.loo_high))
    if not np.isfinite(y).any():
        raise InputError("the importance scatter needs leave-one-out effects; found none (run with loo=True)")
    fig = _new_figure((6.4, 4.8), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    errors = np.stack([np.clip(y - low, 0, None), np.clip(high - y, 0, None)]).reshape(2, -1)
    ax.errorbar(x.ravel(), y.ravel(), yerr=np.nan_to_num(errors), fmt="o", markersize=3.5, color="#0072B2",
                ecolor="0.6", elinewidth=0.8, capsize=1.5,
                label=f"one head: {result.ablation}-ablation effect, "
                      f"{_interval_text(result.confidence, result.n_resamples)}")
    for layer, head in sorted(_top_heads(result)):
        ax.annotate(f"{result.layers[layer] + 1}-{result.heads[head] + 1}", (x[layer, head], y[layer, head]),
                    xytext=(3, 3), textcoords="offset points", fontsize=7)
    ax.axhline(0.0, color="0.3", linewidth=0.8, linestyle=":")
    ax.set_xlabel(f"importance: {criterion_label(result)}", fontsize=8)
    ax.set_ylabel("leave-one-out loss change", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    rho = (f"Spearman rho = {result.rank_correlation:.2f} [{result.rank_low:.2f}, {result.rank_high:.2f}] "
           f"({_interval_text(result.confidence, result.n_resamples)})")
    ax.set_title(_wrap(_full_title(title, f"{result.objective} objective on {result.data} ({result.n_sentences} "
                                   f"sentences), {x.size} heads; heads named layer-head, 1-based", rho), 6.4, 9),
                 fontsize=9)
    return save_figure(fig, path)


def _curve_label(result: PruningResult, name: str) -> str:
    """The legend text of one non-random curve, naming where its order was chosen."""
    if name == "importance":
        return f"importance ({result.importance}, chosen on {result.selection})"
    return f"{name} (order from {result.selection})"


def _pruning_panel(ax: Any, result: PruningResult, metric: str, index: int) -> None:
    """One metric's curves on ``ax``: the random band and median, the other curves, the unpruned line."""
    x = 100 * np.asarray(result.fractions, dtype=float)
    values = np.asarray(result.values, dtype=float)[:, :, index]  # (C, S)
    randoms = [c for c in result.curves if c.startswith("random:")]
    if randoms:
        low, median, high = result.random_band(metric)
        ax.fill_between(x, low, high, color="0.7", alpha=0.45, linewidth=0,
                        label=f"random orders: min-max band of {len(randoms)}")
        ax.plot(x, median, color="0.35", linewidth=1.2, label="random orders: median")
    others = [c for c in result.curves if not c.startswith("random:")]
    styles = series_styles(others)  # every order its own colour, marker and line style
    for name in others:
        ax.plot(x, result.curve(name, metric), **styles[name].line(), markersize=4, linewidth=1.4,
                label=_curve_label(result, name))
    ax.axhline(values[0, 0], color="0.2", linestyle="--", linewidth=0.9, label=f"unpruned: {values[0, 0]:.4g}")
    better = "higher" if result.higher_is_better[index] else "lower"
    ax.set_title(f"{'loss (the objective)' if metric == 'loss' else metric}: {better} is better", fontsize=9)
    ax.set_xlabel("% of heads pruned", fontsize=8)
    ax.set_ylabel(metric, fontsize=8)
    ax.set_xlim(-2, 102)
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=7)


def write_pruning_curves(result: PruningResult, path: str | Path, *, title: str) -> Path:
    """One panel per metric: the metric on ``result.data`` as heads are pruned (x = % of all heads).

    Random orders are a shaded min-max band with a median line; importance and every score order are lines
    with markers; a dashed line marks the unpruned value. The legend names where orders were chosen.
    """
    path = _checked_path(path)
    n_metrics = len(result.metrics)
    if n_metrics == 0 or len(result.curves) == 0:
        raise InputError(f"pruning curves need at least one curve and metric; found {len(result.curves)} curves, "
                         f"{n_metrics} metrics")
    width = 5.2 * min(n_metrics, 3)
    rows = -(-n_metrics // 3)
    fig = _new_figure((width, 3.9 * rows + 1.2), dpi=DPI, layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, min(n_metrics, 3), squeeze=False)).ravel()
    for index, metric in enumerate(result.metrics):
        _pruning_panel(axes[index], result, metric, index)
    for ax in axes[n_metrics:]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=7)
    n_heads = len(result.layers) * len(result.heads)
    fig.suptitle(_wrap(_full_title(title, f"{result.objective} objective measured on {result.data}; orders chosen "
                                   f"on {result.selection}; {n_heads} heads, {100 * result.step:.0f}% per step, "
                                   f"{result.ablation} ablation"), width, 9), fontsize=9)
    return save_figure(fig, path)


def write_one_per_layer(result: OnePerLayer, path: str | Path, *, title: str, data: str = "") -> Path:
    """Michel §3.3: one bar per layer, the mean loss change with that layer reduced to its kept head (named,
    1-based ``layer-head``), the interval as an error bar. ``data`` (where it was measured) joins the title."""
    path = _checked_path(path)
    delta, low, high = (np.asarray(a, float) for a in (result.loss_delta, result.loss_low, result.loss_high))
    n_layers = len(delta)
    width = max(5.0, 1.4 + 0.6 * n_layers)
    fig = _new_figure((width, 4.2), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    x = np.arange(n_layers)
    errors = np.nan_to_num(np.stack([np.clip(delta - low, 0, None), np.clip(high - delta, 0, None)]))
    ax.bar(x, delta, color="#0072B2", yerr=errors, capsize=3, ecolor="0.3", error_kw={"elinewidth": 0.9})
    kept = np.asarray(result.kept, dtype=int)
    labels = [f"{result.layers[l] + 1}\nkept {result.layers[l] + 1}-{result.heads[kept[l]] + 1}"
              for l in range(n_layers)]
    ax.set_xticks(x, labels, fontsize=7)
    ax.axhline(0.0, color="0.2", linewidth=0.8)
    ax.set_xlabel("layer reduced to one head (1-based; kept head as layer-head)", fontsize=8)
    ax.set_ylabel("loss change (mean over sentences)", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    note = ("each layer alone reduced to its most important head, every other layer intact; "
            "bars: interval over sentences")
    ax.set_title(_wrap(_full_title(title, f"measured on {data}" if data else "", note), width, 9), fontsize=9)
    return save_figure(fig, path)

