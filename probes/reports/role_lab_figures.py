"""Figures of the role lab (issue 39): what the report and the docs page show, one function per figure, each taking
typed results and a target path, drawing one matplotlib figure on its own Agg canvas and writing it through
:func:`~probes.reports.figures.save_figure` (PNG, SVG or PDF by the suffix), returning the path.

- :func:`loss_curves`: held-out loss against the step per seed, the unigram baseline, each seed's phase change;
- :func:`role_scores_over_steps`: one panel per role, one line per head (``layer-head``), the carrier threshold;
- :func:`ablation_matrix`: per layer, heads x heads: single-head loss increases on the diagonal, pair interactions
  (joint minus the sum of the singles) off it, on a diverging scale centred at 0;
- :func:`step_distances`: the mean attention distance between a layer's heads at every step, one colour per cell;
- :func:`carriers_grid`: per cell (rows) and seed (columns) how many heads of each layer carry a role;
- :func:`capacity`: the final held-out loss against the head count, each seed a point;
- :func:`pretrained_roles`: per pretrained model, each layer's best score for each role over the relative depth.

Layers and heads are 0-based in the inputs and 1-based in every label. Each ``*_figure`` function builds the
figure without saving it (what tests inspect); the function of the same name without the suffix saves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.errors import InputError
from probes.importance.function import FunctionTests
from probes.importance.lab_types import LabModelAnalysis
from probes.reports.experiment.lab_figures import STEP_ZERO_AT
from probes.reports.figures import DPI, _new_figure, _wrap, save_figure, series_styles
from probes.training.curves import TrainingCurves
from probes.training.symmetry import HeadSymmetry

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["loss_curves", "role_scores_over_steps", "ablation_matrix", "step_distances", "carriers_grid",
           "capacity", "loss_curves_figure", "role_scores_figure", "ablation_matrix_figure",
           "step_distances_figure", "carriers_grid_figure", "capacity_figure", "ROLE_THRESHOLD",
           "ANNOTATE_MAX_HEADS", "layer_pair_means", "pretrained_roles", "pretrained_roles_figure"]

#: The default score at which a head is drawn as carrying a role (mean attention on the role's ideal key).
ROLE_THRESHOLD = 0.5
#: Matrices of at most this many heads per layer have their values written in the cells.
ANNOTATE_MAX_HEADS = 8
#: Grey of baselines and references (apart from every series colour).
_GREY = "0.45"
_STEP_LABEL = "training step (log scale; step 0 at the left)"


def _save(fig: Figure, path: str | Path) -> Path:
    """The one way this module writes a figure."""
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})


def _log_steps(ax: Axes, steps: npt.ArrayLike) -> None:
    """A log step axis, labelled: step 0 drawn (and ticked ``0``) at :data:`STEP_ZERO_AT`, powers of ten beyond."""
    from matplotlib.ticker import NullFormatter, NullLocator

    values = np.asarray(steps, dtype=np.float64)
    ax.set_xscale("log")
    top = int(np.ceil(np.log10(max(float(values.max()), 1.0)))) if values.size else 0
    zero = bool(values.size) and float(values.min()) <= 0
    ticks = ([STEP_ZERO_AT] if zero else []) + [10.0 ** k for k in range(1 if zero else 0, max(top, 1) + 1)]
    ax.set_xticks(ticks, ["0" if t == STEP_ZERO_AT else f"{t:,.0f}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(_STEP_LABEL, fontsize=8)


def _step_x(steps: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Steps as drawn on a log axis: step 0 at :data:`STEP_ZERO_AT`."""
    return np.maximum(np.asarray(steps, dtype=np.float64), STEP_ZERO_AT)


def _finish(fig: Figure, title: str, width: float) -> None:
    """Small tick labels and the title, wrapped to the figure's width."""
    for ax in fig.axes:
        ax.tick_params(labelsize=7)
    fig.suptitle(_wrap(title, width, 9), fontsize=9)


# --- 1. loss curves ------------------------------------------------------------------------------------------


def loss_curves_figure(curves_by_seed: Mapping[int, TrainingCurves], *, title: str,
                       phase_steps: Mapping[int, int] | None = None) -> Figure:
    """The figure of :func:`loss_curves`, not saved."""
    if not curves_by_seed:
        raise InputError("loss curves: expected the curves of at least one seed, found none")
    phases = dict(phase_steps or {})
    unknown = sorted(set(phases) - set(curves_by_seed))
    if unknown:
        raise InputError(f"loss curves: expected phase-change steps for seeds among {sorted(curves_by_seed)}, "
                         f"found seeds {unknown}")
    seeds = sorted(curves_by_seed)
    styles = series_styles(f"seed {s}" for s in seeds)
    width = 6.4
    fig = _new_figure((width, 3.8), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    for seed in seeds:
        curves, style = curves_by_seed[seed], styles[f"seed {seed}"]
        label = f"seed {seed}" if seed not in phases else f"seed {seed} (phase change at step {phases[seed]:,})"
        ax.plot(_step_x(curves.steps), curves.dev_loss, **style.line(), markersize=3, linewidth=1.2, label=label)
        if seed in phases:
            ax.axvline(max(float(phases[seed]), STEP_ZERO_AT), color=style.color, linestyle=":", linewidth=1.0)
    for k, value in enumerate(sorted({float(c.unigram_dev_loss) for c in curves_by_seed.values()})):
        ax.axhline(value, color=_GREY, linestyle="--", linewidth=1.0,
                   label="unigram baseline (held out)" if k == 0 else "_baseline")
    if phases:
        ax.plot([], [], color=_GREY, linestyle=":", linewidth=1.0, label="phase change (dotted, the seed's colour)")
    _log_steps(ax, np.concatenate([np.asarray(c.steps) for c in curves_by_seed.values()]))
    ax.set_ylabel("held-out loss (nats per scored token)", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    _finish(fig, title, width)
    return fig


def loss_curves(curves_by_seed: Mapping[int, TrainingCurves], path: str | Path, *, title: str,
                phase_steps: Mapping[int, int] | None = None) -> Path:
    """Held-out loss over steps (log x, step 0 shown) per seed, the unigram baseline dashed, and each seed's
    phase-change step (``phase_steps``: seed -> step) as a dotted line in the seed's colour; ``path``."""
    return _save(loss_curves_figure(curves_by_seed, title=title, phase_steps=phase_steps), path)


# --- 2. role scores over steps -------------------------------------------------------------------------------


def role_scores_figure(analysis: LabModelAnalysis, roles: Sequence[str], *, threshold: float = ROLE_THRESHOLD,
                       title: str | None = None) -> Figure:
    """The figure of :func:`role_scores_over_steps`, not saved."""
    missing = [r for r in roles if r not in analysis.role_names]
    if not roles or missing:
        raise InputError(f"role scores of {analysis.name}: expected roles among {', '.join(analysis.role_names)}, "
                         f"found {', '.join(missing) if missing else 'none'}")
    heads = [(layer, head) for layer in range(analysis.n_layers) for head in range(analysis.n_heads)]
    styles = series_styles(f"{layer + 1}-{head + 1}" for layer, head in heads)
    ncols = min(len(roles), 3)
    nrows = -(-len(roles) // ncols)
    width = 3.3 * ncols + 1.2
    fig = _new_figure((width, 2.8 * nrows + 0.9), dpi=DPI, layout="constrained")
    axes = np.asarray(fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)).reshape(-1)
    x = _step_x(analysis.steps)
    for ax, role in zip(axes, roles):
        r = analysis.role_names.index(role)
        for layer, head in heads:
            name = f"{layer + 1}-{head + 1}"
            ax.plot(x, analysis.role_scores[:, r, layer, head], **styles[name].line(), markersize=3, linewidth=1.1,
                    label=name)
        ax.axhline(threshold, color=_GREY, linestyle="--", linewidth=1.0, label=f"threshold {threshold:g}")
        ax.set_title(f"role: {role}", fontsize=8)
        _log_steps(ax, analysis.steps)
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    for ax in axes[len(roles):]:
        ax.set_visible(False)
    for ax in axes[::ncols]:
        ax.set_ylabel("role score (mean attention\non the role's ideal key)", fontsize=8)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=7, title="head (layer-head)", title_fontsize=7)
    default = f"Role scores of every head over training: {analysis.name} ({analysis.task} task)"
    _finish(fig, title or default, width)
    return fig


def role_scores_over_steps(analysis: LabModelAnalysis, roles: Sequence[str], path: str | Path, *,
                           threshold: float = ROLE_THRESHOLD, title: str | None = None) -> Path:
    """One panel per role of ``roles``, one line per head (``layer-head``, 1-based): its score at every checkpoint
    of ``analysis`` (log x), the carrier ``threshold`` dashed; ``path``."""
    return _save(role_scores_figure(analysis, roles, threshold=threshold, title=title), path)


# --- 3. ablation matrix --------------------------------------------------------------------------------------


def _layer_matrices(function: FunctionTests) -> npt.NDArray[np.float64]:
    """``(L, H, H)``: per layer of ``function``, single effects on the diagonal, pair interactions off it (NaN for
    pairs not measured; pairs across layers are not drawn)."""
    n_layers, n_heads = len(function.layers), len(function.heads)
    interaction = function.interactions().matrix()  # (L*H, L*H), NaN on the diagonal and where not measured
    effect = function.effect  # (L, H)
    out = np.empty((n_layers, n_heads, n_heads))
    for k in range(n_layers):
        block = interaction[k * n_heads:(k + 1) * n_heads, k * n_heads:(k + 1) * n_heads].copy()
        np.fill_diagonal(block, effect[k])
        out[k] = block
    return out


def _annotate(ax: Axes, values: npt.NDArray[np.float64], scale: float, fmt: str) -> None:
    """Each finite value written in its cell, white on dark cells."""
    for (i, j), value in np.ndenumerate(values):
        if np.isfinite(value):
            ax.text(j, i, format(value, fmt), ha="center", va="center", fontsize=6,
                    color="white" if abs(value) > 0.6 * scale else "black")


def ablation_matrix_figure(function: FunctionTests, *, title: str) -> Figure:
    """The figure of :func:`ablation_matrix`, not saved."""
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    matrices = _layer_matrices(function)
    n_layers, n_heads = len(function.layers), len(function.heads)
    side = 1.0 + 0.38 * n_heads
    width = (side + 1.1) * n_layers + 0.4
    fig = _new_figure((width, side + 1.4), dpi=DPI, layout="constrained")
    axes = np.asarray(fig.subplots(1, n_layers, squeeze=False)).reshape(-1)
    cmap = colormaps["RdBu_r"].with_extremes(bad="0.88")
    ticks = [str(h + 1) for h in function.heads]
    for ax, layer, values in zip(axes, function.layers, matrices):
        scale = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0
        scale = max(scale, 1e-9)
        image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=Normalize(-scale, scale),
                          interpolation="nearest")
        ax.set_xticks(range(n_heads), ticks)
        ax.set_yticks(range(n_heads), ticks)
        ax.set_xlabel("head (1-based)", fontsize=8)
        ax.set_ylabel("head (1-based)", fontsize=8)
        ax.set_title(f"layer {layer + 1}", fontsize=8)
        if n_heads <= ANNOTATE_MAX_HEADS:
            _annotate(ax, values, scale, "+.2f")
        fig.colorbar(image, ax=ax, shrink=0.85, label="nats (scale of this layer)")
    note = (f"diagonal: loss increase with the head ablated alone; off the diagonal: the pair's joint increase minus "
            f"the sum of its singles (> 0 redundant, ~0 additive, < 0 saturating); {function.ablation} ablation, "
            f"{function.n_tokens:,} scored tokens; grey: not measured")
    _finish(fig, f"{title}\n{note}", width)
    return fig


def ablation_matrix(function: FunctionTests, path: str | Path, *, title: str) -> Path:
    """Per layer a heads x heads matrix (1-based): the single-head loss increase on the diagonal, each pair's
    interaction (joint minus the sum of the single effects) off it, on a diverging colour scale centred at 0 (one
    per layer), values written when a layer has at most :data:`ANNOTATE_MAX_HEADS` heads; ``path``."""
    return _save(ablation_matrix_figure(function, title=title), path)


# --- 4. distances at every step ------------------------------------------------------------------------------


def layer_pair_means(symmetry: HeadSymmetry) -> npt.NDArray[np.float64]:
    """``(C, L)`` the attention distance averaged over each layer's pairs of heads ``a < b`` (NaN with one head)."""
    n_heads = symmetry.attention_distance.shape[-1]
    a, b = np.triu_indices(n_heads, k=1)
    if not len(a):
        return np.full(symmetry.attention_distance.shape[:2], np.nan)
    return symmetry.attention_distance[:, :, a, b].mean(axis=-1)


def _seeds(n: int) -> str:
    """``1 seed`` or ``N seeds, a line each``."""
    return "1 seed" if n == 1 else f"{n} seeds, a line each"


def _thin(color: str, linestyle: str) -> dict[str, Any]:
    """A line without markers in a series' colour and line style (a step's every value: markers would crowd)."""
    return {"color": color, "linestyle": linestyle, "marker": ""}


def step_distances_figure(symmetry_by_cell: Mapping[str, Mapping[int, HeadSymmetry]], *,
                          layer_names: Sequence[str] | None = None, title: str | None = None) -> Figure:
    """The figure of :func:`step_distances`, not saved."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    runs = [(cell, seed, layer_pair_means(s)) for cell, seeds in symmetry_by_cell.items()
            for seed, s in sorted(seeds.items())]
    if not runs:
        raise InputError("step distances: expected the head symmetry of at least one seed, found none")
    n_layers = max(means.shape[1] for _, _, means in runs)
    names = list(layer_names) if layer_names is not None else [f"layer {k + 1}" for k in range(n_layers)]
    if len(names) != n_layers:
        raise InputError(f"step distances: expected {n_layers} layer names, found {len(names)}")
    styles = series_styles(symmetry_by_cell)
    width = 3.4 * n_layers + 0.6
    fig = _new_figure((width, 3.6), dpi=DPI, layout="constrained")
    axes = np.asarray(fig.subplots(1, n_layers, squeeze=False, sharey=True)).reshape(-1)
    drawn: dict[str, bool] = dict.fromkeys(symmetry_by_cell, False)
    steps_of = {(cell, seed): s.steps for cell, seeds in symmetry_by_cell.items() for seed, s in seeds.items()}
    for cell, seed, means in runs:
        positive = np.where(means > 0, means, np.nan)  # a log axis cannot show 0: exact zeros are left out
        drawn[cell] |= bool(np.isfinite(positive).any())
        for layer in range(means.shape[1]):
            axes[layer].plot(steps_of[cell, seed], positive[:, layer], **_thin(styles[cell].color,
                                                                              styles[cell].linestyle),
                             linewidth=0.8, alpha=0.7)
    for ax, name in zip(axes, names):
        if any(drawn.values()):
            ax.set_yscale("log")
        ax.set_title(name, fontsize=8)
        ax.set_xlabel("training step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean attention distance between\nthe layer's heads (JS, nats per row; log)", fontsize=8)
    seeds = {cell: len(s) for cell, s in symmetry_by_cell.items()}
    handles = [Line2D([], [], **_thin(styles[cell].color, styles[cell].linestyle), linewidth=1.2,
                      label=f"{cell} ({_seeds(seeds[cell])})" + ("" if drawn[cell] else
                                                                          ": 0 at every step, not drawn"))
               for cell in symmetry_by_cell]
    fig.legend(handles=handles, loc="outside lower center", ncol=min(3, len(handles)), fontsize=7)
    _finish(fig, title or "Mean attention distance between the heads of each layer at every step", width)
    return fig


def step_distances(symmetry_by_cell: Mapping[str, Mapping[int, HeadSymmetry]], path: str | Path, *,
                   layer_names: Sequence[str] | None = None, title: str | None = None) -> Path:
    """One panel per layer (``layer_names``, default ``layer 1`` ...): the mean attention distance between its
    heads at every step (log y; exact zeros cannot be drawn and are left out), a thin line per seed in its cell's
    colour and line style (cell -> seed -> :class:`HeadSymmetry`), a legend of the cells; ``path``."""
    return _save(step_distances_figure(symmetry_by_cell, layer_names=layer_names, title=title), path)


# --- 5. carriers ---------------------------------------------------------------------------------------------


def _carrier_array(counts: Mapping[str, Sequence[Sequence[int]]]) -> npt.NDArray[np.float64]:
    """``(L, cells, seeds)`` counts, NaN where a cell has fewer seeds (or layers) than another."""
    if not counts or not any(len(seeds) for seeds in counts.values()):
        raise InputError("carriers: expected counts of at least one cell and seed, found none")
    n_seeds = max(len(seeds) for seeds in counts.values())
    n_layers = max(len(layers) for seeds in counts.values() for layers in seeds)
    out = np.full((n_layers, len(counts), n_seeds), np.nan)
    for row, seeds in enumerate(counts.values()):
        for column, layers in enumerate(seeds):
            for layer, count in enumerate(layers):
                out[layer, row, column] = count
    return out


def carriers_grid_figure(counts: Mapping[str, Sequence[Sequence[int]]], *, role: str = "the role",
                         seeds: Sequence[int] | None = None, heads: Mapping[str, int] | None = None,
                         title: str | None = None) -> Figure:
    """The figure of :func:`carriers_grid`, not saved."""
    from matplotlib import colormaps

    values = _carrier_array(counts)  # (L, cells, seeds)
    n_layers, n_cells, n_seeds = values.shape
    if seeds is not None and len(seeds) != n_seeds:
        raise InputError(f"carriers: expected {n_seeds} seed labels, found {len(seeds)}")
    columns = [f"seed {s}" for s in seeds] if seeds is not None else [f"seed {k + 1}" for k in range(n_seeds)]
    cells = list(counts)
    top = max(1.0, float(np.nanmax(values)) if np.isfinite(values).any() else 1.0,
              *(float(h) for h in (heads or {}).values()))
    width = n_layers * (0.5 * n_seeds + 1.6) + 1.4
    fig = _new_figure((width, 0.35 * n_cells + 1.7), dpi=DPI, layout="constrained")
    axes = np.asarray(fig.subplots(1, n_layers, squeeze=False, sharey=True)).reshape(-1)
    cmap = colormaps["Blues"].with_extremes(bad="0.85")  # grey: a seed the cell does not have
    images = []
    for layer, ax in enumerate(axes):
        image = ax.imshow(np.ma.masked_invalid(values[layer]), cmap=cmap, vmin=0, vmax=top, aspect="auto",
                          interpolation="nearest")
        images.append(image)
        for (i, j), value in np.ndenumerate(values[layer]):
            if np.isfinite(value):
                of = f"/{heads[cells[i]]}" if heads and cells[i] in heads else ""
                ax.text(j, i, f"{int(value)}{of}", ha="center", va="center", fontsize=7,
                        color="white" if value > 0.6 * top else "black")
        ax.set_xticks(range(n_seeds), columns, rotation=45, ha="right")
        ax.set_yticks(range(n_cells), cells)
        ax.set_title(f"layer {layer + 1}", fontsize=8)
    fig.colorbar(images[0], ax=list(axes), shrink=0.9, label="heads carrying the role (count)")
    of_note = " (written as count/heads of the layer)" if heads else ""
    _finish(fig, title or f"How many heads carry {role}, per cell and seed{of_note}", width)
    return fig


def carriers_grid(counts: Mapping[str, Sequence[Sequence[int]]], path: str | Path, *, role: str = "the role",
                  seeds: Sequence[int] | None = None, heads: Mapping[str, int] | None = None,
                  title: str | None = None) -> Path:
    """How many heads take a role: ``counts[cell][seed position][layer]`` heads of that layer carry it. One panel
    per layer (1-based), cells as rows, seeds (labelled by ``seeds``, else 1, 2 ...) as columns, each count
    written in its cell (as ``count/heads`` with ``heads[cell]``, the heads per layer); ``path``."""
    return _save(carriers_grid_figure(counts, role=role, seeds=seeds, heads=heads, title=title), path)


# --- 6. capacity ---------------------------------------------------------------------------------------------


def capacity_figure(losses: Mapping[int, Sequence[float]], *, unigram: float | None = None,
                    title: str | None = None) -> Figure:
    """The figure of :func:`capacity`, not saved."""
    counts = sorted(h for h in losses if len(losses[h]))
    if not counts:
        raise InputError("capacity: expected the final losses of at least one head count, found none")
    if counts[0] < 1:
        raise InputError(f"capacity: expected head counts of at least 1, found {counts[0]}")
    styles = series_styles(("seed", "mean"))
    width = 5.2
    fig = _new_figure((width, 3.4), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    xs: list[float] = []
    ys: list[float] = []
    for h in counts:
        values = np.asarray(losses[h], dtype=np.float64)
        spread = 0.06 * (np.arange(len(values)) - (len(values) - 1) / 2) / max(len(values), 1)
        xs.extend(h * 2.0 ** spread)  # a small spread, even on the log axis, so equal losses stay visible
        ys.extend(values)
    ax.scatter(xs, ys, s=16, color=styles["seed"].color, marker=styles["seed"].marker, alpha=0.8,
               label="one seed (final held-out loss)")
    ax.plot(counts, [float(np.nanmean(losses[h])) for h in counts], **styles["mean"].line(), markersize=5,
            label="mean over seeds")
    if unigram is not None:
        ax.axhline(unigram, color=_GREY, linestyle="--", linewidth=1.0, label="unigram baseline (held out)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(h) for h in counts])
    ax.minorticks_off()
    ax.set_xlabel("heads per layer", fontsize=8)
    ax.set_ylabel("final held-out loss (nats per scored token)", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    _finish(fig, title or "Final held-out loss against the number of heads", width)
    return fig


def capacity(losses: Mapping[int, Sequence[float]], path: str | Path, *, unigram: float | None = None,
             title: str | None = None) -> Path:
    """The final held-out loss per head count (``losses[heads]``: one value per seed, drawn as points, their mean
    joined), log-2 head axis, the unigram baseline dashed when given; ``path``."""
    return _save(capacity_figure(losses, unigram=unigram, title=title), path)


# --- 7. pretrained models -------------------------------------------------------------------------------------


def pretrained_roles_figure(analyses: Mapping[str, LabModelAnalysis], roles: Sequence[str], *,
                            threshold: float = ROLE_THRESHOLD, title: str | None = None) -> Figure:
    """The figure of :func:`pretrained_roles`, not saved."""
    if not analyses:
        raise InputError("pretrained roles: expected at least one model, found none")
    styles = series_styles(tuple(analyses))
    width = 3.0 * len(roles) + 1.0
    fig = _new_figure((width, 3.2), dpi=DPI, layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(roles), sharey=True))
    for ax, role in zip(axes, roles):
        for name, analysis in analyses.items():
            if role not in analysis.role_names:
                raise InputError(f"pretrained roles: {name} has no role {role!r} ({', '.join(analysis.role_names)})")
            best = np.nanmax(analysis.scores(role), axis=1)  # (L,): each layer's best head
            depth = np.arange(1, analysis.n_layers + 1) / analysis.n_layers
            ax.plot(depth, best, **styles[name].line(), markersize=3, label=f"{name} ({analysis.n_layers} layers)")
        ax.axhline(threshold, color=_GREY, linestyle="--", linewidth=1.0, label=f"threshold {threshold:g}")
        ax.set_title(role, fontsize=8)
        ax.set_xlabel("layer / layers (1-based layer over the depth)", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("best head's score in the layer", fontsize=8)
    axes[-1].legend(fontsize=7)
    _finish(fig, title or "Role scores of the induction probe per layer (best head of each layer)", width)
    return fig


def pretrained_roles(analyses: Mapping[str, LabModelAnalysis], roles: Sequence[str], path: str | Path, *,
                     threshold: float = ROLE_THRESHOLD, title: str | None = None) -> Path:
    """Per role a panel, per model a line: the best head's score in each layer over the relative depth (layer l of
    L at l / L), the carrier ``threshold`` dashed; ``path``."""
    return _save(pretrained_roles_figure(analyses, roles, threshold=threshold, title=title), path)
