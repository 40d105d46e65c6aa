"""Figures of an experiment's cross-model comparison (one :class:`~probes.compare.types.Comparison`).

Every function takes rows of the Comparison and writes one figure, returning its path (PNG, SVG or PDF by the
suffix; matplotlib on its own Agg canvas, no pyplot, so nothing stays open):

- :func:`write_best_heads`: per relation, each model's best head accuracy with its interval (the best
  baseline as a grey tick) and, beside it, the relative depth of that head;
- :func:`write_head_kinds`: the share of specialised, positional and broad heads per model;
- :func:`write_spread`: Q1, the head-to-head distance histograms overlaid and the spread with intervals;
- :func:`write_fractions`: Q2, the specialised fraction per model with intervals;
- :func:`write_redundancy`: Q3, the removable fraction by order against the random orders, and rho;
- :func:`write_pruning`: pruning curves overlaid per objective (importance order per model, random band shaded);
- :func:`write_consistency`: Q4, rho between the two sides with intervals;
- :func:`write_layers`: Q5, per-layer pattern shares and role shares on relative depth, a small panel per model.

Styles follow :func:`model_styles` (:func:`probes.reports.figures.series_styles`): every model its own colour,
marker and line style, random-init models with hollow markers (hatched bars). Relative depth is
``layer / (L - 1)`` (0 first layer, 1 last).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.analysis.patterns import PATTERNS
from probes.compare.inputs import depth
from probes.reports.atlas.figures import PATTERN_COLOURS
from probes.reports.experiment.text import fmt
from probes.reports.figures import DPI, _new_figure, _wrap, save_figure, series_styles

if TYPE_CHECKING:
    from matplotlib.artist import Artist

__all__ = ["model_styles", "write_best_heads", "write_head_kinds", "write_spread", "write_fractions",
           "write_redundancy", "write_pruning", "write_consistency", "write_layers", "DPI"]

#: Bar hatches by dataset (the first plain), so one model's bars on two datasets differ.
_DATA_HATCHES = ("", "..", "xx", "oo", "++")
#: The role lines of the per-layer panels, over the pattern areas (their colours are none of the patterns').
_ROLES = series_styles(("specialised", "positional", "broad"), colours=("#000000", "#D55E00", "#7F3C8D"))

Styles = Mapping[str, Mapping[str, Any]]


def model_styles(models: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each model's ``color``, ``marker``, ``linestyle`` and ``fill`` (marker face), from
    :func:`~probes.reports.figures.series_styles`: no two models alike in colour and marker (up to 7 models), nor in
    the three together; random-init models with hollow markers."""
    randoms = [name for name, info in models.items() if info.get("kind") == "random-init"]
    return {name: {"color": s.color, "marker": s.marker, "linestyle": s.linestyle, "fill": s.fill}
            for name, s in series_styles(models, hollow=randoms).items()}


def _style(styles: Styles, model: str) -> Mapping[str, Any]:
    """The style of ``model``; black circles for a model the styles do not know."""
    return styles.get(model, {"color": "black", "marker": "o", "linestyle": "-", "fill": "black"})


def _label(row: Any, several_data: bool) -> str:
    """A row's name in a legend or on an axis: the model, and its data when the figure shows several."""
    return f"{row.model} ({row.data})" if several_data else str(row.model)


def _several(rows: Sequence[Any]) -> bool:
    """Whether the rows come from more than one dataset."""
    return len({getattr(r, "data", "") for r in rows}) > 1


def _errors(values: npt.ArrayLike, low: npt.ArrayLike, high: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(2, n)`` error-bar lengths below and above each value (0 where an end is missing or on the wrong side)."""
    v, lo, hi = (np.asarray(a, dtype=float) for a in (values, low, high))
    return np.nan_to_num(np.stack([np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)]))


def _points(ax: Any, rows: Sequence[Any], values: Sequence[float], low: Sequence[float], high: Sequence[float],
            styles: Styles, labels: Sequence[str], scale: float = 1.0) -> None:
    """One row of the axes per entry (first at the top): the value as a marker, its interval as a bar."""
    y = np.arange(len(rows))[::-1]
    for k, row in enumerate(rows):
        style = _style(styles, row.model)
        v, lo, hi = (scale * float(a) for a in (values[k], low[k], high[k]))
        ax.errorbar([v], [y[k]], xerr=_errors([v], [lo], [hi]), fmt=style["marker"], color=style["color"],
                    markerfacecolor=style["fill"], markersize=6, capsize=3, elinewidth=1.2)
    ax.set_yticks(y, list(labels), fontsize=7)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="x", labelsize=7)


def _handle(styles: Styles, model: str) -> Any:
    """A legend entry of ``model``: a line in its colour and line style, with its marker."""
    from matplotlib.lines import Line2D

    style = _style(styles, model)
    return Line2D([], [], color=style["color"], marker=style["marker"], markerfacecolor=style["fill"],
                  linestyle=style["linestyle"])


def _legend(fig: Any, styles: Styles, models: Sequence[str], extra: Sequence[tuple[Any, str]] = ()) -> None:
    """A legend under the figure: one entry per model (its marker and line), then ``extra`` handles."""
    handles = [_handle(styles, model) for model in models]
    labels = list(models)
    for handle, label in extra:
        handles.append(handle)
        labels.append(label)
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, max(len(labels), 1)), fontsize=7)


def _models(rows: Sequence[Any]) -> list[str]:
    """The models of ``rows`` in order of first appearance."""
    return list(dict.fromkeys(r.model for r in rows))


def write_best_heads(rows: Sequence[Any], path: str | Path, *, styles: Styles, title: str) -> Path:
    """Per relation (one row of the axes), each model's best head: accuracy with its interval on the left (the best
    baseline as a grey tick), the head's relative depth on the right. ``rows``: BestHead rows of one dataset."""
    from matplotlib.lines import Line2D

    relations = list(dict.fromkeys(r.relation for r in rows))
    models = _models(rows)
    n_rel, n_mod = len(relations), max(len(models), 1)
    height = min(max(3.0, 0.16 * n_rel * max(n_mod, 2) + 1.6), 40.0)
    fig = _new_figure((9.0, height), dpi=DPI, layout="constrained")
    acc_ax, depth_ax = fig.subplots(1, 2, sharey=True, width_ratios=(3, 1.3))
    step = 0.8 / n_mod
    for j, model in enumerate(models):
        mine = [r for r in rows if r.model == model]
        style = _style(styles, model)
        y = np.array([n_rel - 1 - relations.index(r.relation) + (j - (n_mod - 1) / 2) * -step for r in mine])
        acc = np.array([r.accuracy for r in mine], dtype=float)
        acc_ax.errorbar(acc, y, xerr=_errors(acc, [r.ci_low for r in mine], [r.ci_high for r in mine]),
                        fmt=style["marker"], color=style["color"], markerfacecolor=style["fill"], markersize=4,
                        capsize=2, elinewidth=1.0, linestyle="none")
        acc_ax.scatter([r.baseline_accuracy for r in mine], y, marker="|", color="0.45", s=40, zorder=3)
        depth_ax.scatter([r.depth for r in mine], y, marker=style["marker"], color=style["color"],
                         facecolors=style["fill"], s=18)
    acc_ax.set_yticks(np.arange(n_rel)[::-1], relations, fontsize=7)
    acc_ax.set_ylim(-0.6, n_rel - 0.4)
    acc_ax.set_xlabel("accuracy of the best head (interval: bootstrap over sentences)", fontsize=8)
    depth_ax.set_xlabel("relative depth of that head\n(layer / (L - 1))", fontsize=8)
    depth_ax.set_xlim(-0.05, 1.05)
    for ax in (acc_ax, depth_ax):
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
    tick = Line2D([], [], color="0.45", marker="|", linestyle="none", markersize=8)
    _legend(fig, styles, models, [(tick, "best baseline")])
    fig.suptitle(_wrap(title, 9.0, 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})  # fast zlib level


def write_head_kinds(rows: Sequence[Any], path: str | Path, *, styles: Styles, title: str) -> Path:
    """Grouped bars: per kind (specialised, positional, broad), each model's share of its heads, the count on top.
    Bars are in the model's colour, hatched by dataset (dots, crosses ...) and, for a random-init model, with
    slashes too, so no two bars of the legend look alike."""
    kinds = ("specialised", "positional", "broad")
    several = _several(rows)
    datas = list(dict.fromkeys(r.data for r in rows))
    n = max(len(rows), 1)
    width = 0.8 / n
    fig = _new_figure((max(5.0, 2.0 + 0.35 * n * len(kinds)), 3.8), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    for j, row in enumerate(rows):
        style = _style(styles, row.model)
        counts = np.array([getattr(row, k) for k in kinds], dtype=float)
        shares = counts / max(row.n_heads, 1)
        x = np.arange(len(kinds)) + (j - (n - 1) / 2) * width
        hatch = _DATA_HATCHES[datas.index(row.data) % len(_DATA_HATCHES)] + ("//" if style["fill"] == "white" else "")
        bars = ax.bar(x, 100 * shares, width=width, color=style["color"], edgecolor="0.2", linewidth=0.5,
                      hatch=hatch or None, label=_label(row, several))
        for bar, count in zip(bars, counts):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{int(count)}", ha="center",
                    va="bottom", fontsize=6)
    ax.set_xticks(np.arange(len(kinds)), list(kinds), fontsize=8)
    ax.set_ylabel("% of the model's heads (count on each bar)", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.legend(loc="outside lower center", ncol=min(4, n), fontsize=7)
    fig.suptitle(_wrap(title, fig.get_figwidth(), 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})  # fast zlib level


def _histogram_panel(ax: Any, histograms: Sequence[Any], styles: Styles, data: str) -> None:
    """One dataset's head-to-head distance distributions, one density line per model on shared edges (the model's
    marker on a few bin centres, so lines that cross stay told apart)."""
    for h in histograms:
        style = _style(styles, h.model)
        edges, counts = np.asarray(h.edges, dtype=float), np.asarray(h.counts, dtype=float)
        total = counts.sum() * np.diff(edges)
        density = np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)
        ax.stairs(density, edges, color=style["color"], linestyle=style["linestyle"], linewidth=1.4)
        centres = (edges[:-1] + edges[1:]) / 2
        filled = np.flatnonzero(density > 0)  # markers only on the line itself, not along the axis
        keep = filled[:: max(1, len(filled) // 5)]
        ax.plot(centres[keep], density[keep], linestyle="none", marker=style["marker"], color=style["color"],
                markerfacecolor=style["fill"], markersize=4)
    if histograms:
        ax.legend([_handle(styles, h.model) for h in histograms], [h.model for h in histograms], fontsize=7)
    else:
        ax.text(0.5, 0.5, "no per-pair distances kept", ha="center", va="center", transform=ax.transAxes, fontsize=8)
    ax.set_title(f"distances on {data}" if data else "distances", fontsize=9)
    ax.set_xlabel("JS divergence per query row, one pair of distinct heads", fontsize=8)
    ax.set_ylabel("density", fontsize=8)
    ax.tick_params(labelsize=7)


def write_spread(spread: Sequence[Any], histograms: Sequence[Any], path: str | Path, *, styles: Styles,
                 title: str) -> Path:
    """Q1: left, each model's distribution of head-to-head distances (densities on shared edges, overlaid; a panel
    per dataset); right, the spread statistic with its interval per model, the number of clusters beside it."""
    several = _several([*spread, *histograms])
    datas = list(dict.fromkeys(r.data for r in [*histograms, *spread])) or [""]
    width = 4.6 * len(datas) + 4.4
    fig = _new_figure((width, max(3.6, 1.6 + 0.3 * len(spread))), dpi=DPI, layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(datas) + 1, width_ratios=(*[1.1] * len(datas), 1)))
    for ax, data in zip(axes, datas):
        _histogram_panel(ax, [h for h in histograms if h.data == data or not data], styles, data)
    spread_ax = axes[-1]
    _points(spread_ax, spread, [r.value for r in spread], [r.low for r in spread], [r.high for r in spread],
            styles, [_label(r, several) for r in spread])
    for k, row in enumerate(spread):
        spread_ax.annotate(f"k={row.n_clusters}", (row.value, len(spread) - 1 - k), xytext=(4, 5),
                           textcoords="offset points", fontsize=6)
    spread_ax.set_title("spread (k: clusters)", fontsize=9)
    spread_ax.set_xlabel("mean JS per query row over all pairs (interval over sentences)", fontsize=8)
    fig.suptitle(_wrap(title, width, 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})  # fast zlib level


def write_fractions(rows: Sequence[Any], path: str | Path, *, styles: Styles, title: str,
                    xlabel: str = "% of heads specialised (interval over report sentences)") -> Path:
    """Q2: each model's specialised fraction (``fraction``, ``low``, ``high`` of the rows) in %, with intervals."""
    several = _several(rows)
    fig = _new_figure((6.5, max(2.6, 1.4 + 0.3 * len(rows))), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    _points(ax, rows, [r.fraction for r in rows], [r.low for r in rows], [r.high for r in rows], styles,
            [_label(r, several) for r in rows], scale=100.0)
    ax.set_xlim(-2, 102)
    ax.set_xlabel(xlabel, fontsize=8)
    fig.suptitle(_wrap(title, 6.5, 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})  # fast zlib level


def write_redundancy(rows: Sequence[Any], path: str | Path, *, styles: Styles, title: str) -> Path:
    """Q3: left, the fraction removable within the tolerance by importance (filled marker) and by each other order
    (open markers) against the random orders' range (grey bar, median tick); right, rho of importance with the
    specialisation margin and with confidence, with intervals."""
    from matplotlib.lines import Line2D

    several = _several(rows)
    labels = [f"{_label(r, several)}: {r.objective}" for r in rows]
    fig = _new_figure((10.0, max(3.0, 1.6 + 0.35 * len(rows))), dpi=DPI, layout="constrained")
    rem_ax, rho_ax = fig.subplots(1, 2, sharey=True)
    y = np.arange(len(rows))[::-1]
    others = list(dict.fromkeys(k for r in rows for k in r.removable if k != "importance"))
    markers = ("x", "+", "1", "2", "3")  # thin markers: none of a model's (probes.reports.figures.MARKERS)
    for k, row in enumerate(rows):
        style = _style(styles, row.model)
        rem_ax.plot([100 * row.random_low, 100 * row.random_high], [y[k], y[k]], color="0.7", linewidth=5,
                    solid_capstyle="butt")
        rem_ax.plot([100 * row.random_median], [y[k]], marker="|", color="0.25", markersize=10)
        rem_ax.plot([100 * row.removable.get("importance", np.nan)], [y[k]], marker=style["marker"],
                    color=style["color"], markerfacecolor=style["fill"], markersize=7)
        for m, name in enumerate(others):
            rem_ax.plot([100 * row.removable.get(name, np.nan)], [y[k] + 0.15], marker=markers[m % len(markers)],
                        color=style["color"], markerfacecolor="none", markersize=6)
        for offset, key, marker in ((0.12, "rho_margin", "o"), (-0.12, "rho_confidence", "s")):
            v, lo, hi = (getattr(row, key + s) for s in ("", "_low", "_high"))
            rho_ax.errorbar([v], [y[k] + offset], xerr=_errors([v], [lo], [hi]), fmt=marker, color=style["color"],
                            markerfacecolor=style["fill"] if key == "rho_margin" else "none", capsize=3)
    rem_ax.set_yticks(y, labels, fontsize=7)
    rem_ax.set_ylim(-0.7, len(rows) - 0.3)
    rem_ax.set_xlim(-2, 102)
    rem_ax.set_xlabel("% of heads removable within the tolerance", fontsize=8)
    rho_ax.axvline(0.0, color="0.3", linewidth=0.8, linestyle=":")
    rho_ax.set_xlabel("Spearman rho of importance with margin (o) and confidence (s)", fontsize=8)
    for ax in (rem_ax, rho_ax):
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
    extra = [(Line2D([], [], color="0.7", linewidth=5), "random orders: range (tick: median)")]
    extra += [(Line2D([], [], color="0.3", marker=markers[m % len(markers)], markerfacecolor="none",
                      linestyle="none"), f"order: {name}") for m, name in enumerate(others)]
    _legend(fig, styles, _models(rows), extra)
    fig.suptitle(_wrap(title, 10.0, 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})  # fast zlib level


def write_pruning(curves: Sequence[Any], path: str | Path, *, styles: Styles, title: str) -> Path:
    """Pruning curves overlaid, one panel per objective (and dataset): per model the objective's change from the
    unpruned value as heads are pruned in importance order (line), the random orders' range (shaded, same colour)
    and their median (dotted). Changes, not raw values, so models with different losses share one axis."""
    from matplotlib.patches import Patch

    panels = list(dict.fromkeys((c.objective, c.data) for c in curves))
    several = len({d for _, d in panels}) > 1
    ncols = min(len(panels), 3) or 1
    nrows = -(-len(panels) // ncols) or 1
    fig = _new_figure((4.6 * ncols, 3.4 * nrows + 0.9), dpi=DPI, layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    for ax, (objective, data) in zip(axes, panels):
        for curve in (c for c in curves if (c.objective, c.data) == (objective, data)):
            style = _style(styles, curve.model)
            x = 100 * np.asarray(curve.fractions, dtype=float)
            values = np.asarray(curve.importance, dtype=float)
            base = float(values[0]) if len(values) else 0.0
            low, med, high = (np.asarray(a, dtype=float) - base for a in
                              (curve.random_low, curve.random_median, curve.random_high))
            if low.size == x.size and np.isfinite(low).any():
                ax.fill_between(x, low, high, color=style["color"], alpha=0.15, linewidth=0)
                ax.plot(x, med, color=style["color"], linestyle=":", linewidth=1.0)
            ax.plot(x, values - base, color=style["color"], linestyle=style["linestyle"], marker=style["marker"],
                    markerfacecolor=style["fill"], markersize=3, linewidth=1.4)
        metric = curves[0].metric if curves else "loss"
        ax.axhline(0.0, color="0.2", linewidth=0.8, linestyle="--")
        ax.set_title(f"{objective}" + (f" on {data}" if several else ""), fontsize=9)
        ax.set_xlabel("% of heads pruned (importance order)", fontsize=8)
        ax.set_ylabel(f"{metric} change from unpruned", fontsize=8)
        ax.set_xlim(-2, 102)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D

    extra = [(Patch(color="0.5", alpha=0.3), "random orders: range"),
             (Line2D([], [], color="0.4", linestyle=":"), "random orders: median")]
    _legend(fig, styles, _models(curves), extra)
    fig.suptitle(_wrap(title, fig.get_figwidth(), 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})  # fast zlib level


def write_consistency(rows: Sequence[Any], path: str | Path, *, styles: Styles, title: str) -> Path:
    """Q4: per model and pair of sides, the mean Spearman rho of head accuracies with its interval over relations;
    the share of relations with the same best head written beside each point."""
    labels = [f"{r.model}: {r.first} vs {r.second}" for r in rows]
    fig = _new_figure((7.0, max(2.6, 1.4 + 0.3 * len(rows))), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    _points(ax, rows, [r.rho for r in rows], [r.low for r in rows], [r.high for r in rows], styles, labels)
    for k, row in enumerate(rows):
        ax.annotate(f"same head {fmt(row.same_head, 'fraction')}", (row.rho, len(rows) - 1 - k), xytext=(4, 5),
                    textcoords="offset points", fontsize=6)
    ax.axvline(0.0, color="0.3", linewidth=0.8, linestyle=":")
    ax.set_xlim(min(-0.05, ax.get_xlim()[0]), 1.05)
    ax.set_xlabel("mean Spearman rho of all heads' accuracies between the two sides (interval over relations)",
                  fontsize=8)
    fig.suptitle(_wrap(title, 7.0, 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})  # fast zlib level


def _layer_panel(ax: Any, rows: Sequence[Any]) -> None:
    """One model's layers: pattern shares stacked, role shares as lines, x = relative depth."""
    rows = sorted(rows, key=lambda r: r.layer)
    depths = np.array([depth(r.layer, len(rows)) for r in rows])
    names = [p for p in PATTERNS if any(p in r.patterns for r in rows)]
    names += [p for p in dict.fromkeys(k for r in rows for k in r.patterns) if p not in names]
    shares = np.array([[r.patterns.get(p, 0.0) for r in rows] for p in names], dtype=float).reshape(len(names), -1)
    if names:
        ax.stackplot(depths, np.nan_to_num(shares), colors=[PATTERN_COLOURS.get(p, "0.8") for p in names], alpha=0.55)
    for key, style in _ROLES.items():
        ax.plot(depths, [getattr(r, key) for r in rows], **style.line(), markersize=2.5, linewidth=1.3)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.25)
    ax.tick_params(labelsize=6)


def write_layers(rows: Sequence[Any], path: str | Path, *, title: str) -> Path:
    """Q5: a small panel per model (columns) and dataset (rows): per layer the share of heads of each majority
    pattern (stacked areas) and of specialised, positional and broad heads (lines), on relative depth."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    models = _models(rows)
    datas = list(dict.fromkeys(r.data for r in rows))
    fig = _new_figure((max(4.0, 2.4 * len(models) + 0.6), 2.2 * max(len(datas), 1) + 1.3), dpi=DPI,
                      layout="constrained")
    axes = fig.subplots(max(len(datas), 1), max(len(models), 1), squeeze=False, sharex=True, sharey=True)
    for i, data in enumerate(datas):
        for j, model in enumerate(models):
            ax = axes[i, j]
            mine = [r for r in rows if r.model == model and r.data == data]
            if mine:
                _layer_panel(ax, mine)
            else:
                ax.text(0.5, 0.5, "no atlas", ha="center", va="center", transform=ax.transAxes, fontsize=7)
            ax.set_title(f"{model} ({data})" if len(datas) > 1 else model, fontsize=8)
            if i == len(datas) - 1:
                ax.set_xlabel("relative depth", fontsize=7)
            if j == 0:
                ax.set_ylabel("share of the layer's heads", fontsize=7)
    names = [p for p in PATTERNS if any(p in r.patterns for r in rows)]
    handles: list[tuple[Artist, str]] = [(Patch(color=PATTERN_COLOURS.get(p, "0.8"), alpha=0.55), p) for p in names]
    handles += [(Line2D([], [], **s.line()), f"{k} heads") for k, s in _ROLES.items()]
    fig.legend([h for h, _ in handles], [t for _, t in handles], loc="outside lower center",
               ncol=min(4, len(handles)), fontsize=7)
    fig.suptitle(_wrap(title, fig.get_figwidth(), 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})  # fast zlib level
