"""Figures of the training lab (:class:`~probes.compare.lab_types.LabTables`), one function per figure, each
writing one file and returning its path (matplotlib on its own Agg canvas, as every figure of the package):

- :func:`write_lab_symmetry`: the mean distance between a layer's heads against the step (log x, step 0 drawn at
  0.5), one panel per layer (1-based), one line per cell with its range over seeds shaded;
- :func:`write_lab_loss`: the held-out loss at the last step per cell, range over seeds, unigram baseline dashed;
- :func:`write_lab_capacity`: held-out loss and the heads carrying a relation or a positional role against heads;
- :func:`write_lab_division`: D_within, D_self, D_match and D_null per cell with their intervals.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from probes.reports.figures import DPI, SeriesStyle, _new_figure, _wrap, save_figure, series_styles

__all__ = ["write_lab_symmetry", "write_lab_loss", "write_lab_capacity", "write_lab_division"]
#: Distances below this are drawn on a linear scale (0 exactly at the bottom), above it on a log scale.
SYMLOG_FLOOR = 1e-6
#: Where step 0 is drawn on a log axis.
STEP_ZERO_AT = 0.5


def _styles(names: Sequence[str]) -> dict[str, SeriesStyle]:
    """One style per cell, in the lab's order (:func:`~probes.reports.figures.series_styles`)."""
    return series_styles(names)


def _bars(values: Sequence[float], low: Sequence[float], high: Sequence[float]) -> np.ndarray:
    """``(2, n)`` error-bar lengths (0 where an end is missing)."""
    v, lo, hi = (np.asarray(a, dtype=float) for a in (values, low, high))
    return np.nan_to_num(np.stack([np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)]))


def write_lab_symmetry(rows: Sequence[Any], path: str | Path, *, title: str) -> Path:
    """Attention distance (top) and parameter distance (bottom) against the step, a column per layer."""
    from matplotlib.ticker import NullFormatter, SymmetricalLogLocator

    layers = sorted({r.layer for r in rows})
    styles = _styles([r.cell for r in rows])
    fig = _new_figure((3.2 * len(layers) + 0.8, 5.4), dpi=DPI, layout="constrained")
    axes = np.asarray(fig.subplots(2, len(layers), squeeze=False, sharex=True))
    for column, layer in enumerate(layers):
        for row_k, (name, label) in enumerate((("attention", "attention distance (JS per row)"),
                                               ("param", "parameter distance (relative L2)"))):
            ax = axes[row_k, column]
            for cell, style in styles.items():
                mine = sorted((r for r in rows if r.cell == cell and r.layer == layer), key=lambda r: r.step)
                if not mine:
                    continue
                x = [max(r.step, STEP_ZERO_AT) for r in mine]
                ax.plot(x, [getattr(r, name) for r in mine], **style.line(), markersize=3.5, label=cell)
                ax.fill_between(x, [getattr(r, f"{name}_low") for r in mine],
                                [getattr(r, f"{name}_high") for r in mine], color=style.color, alpha=0.18,
                                linewidth=0)
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_yscale("symlog", linthresh=SYMLOG_FLOOR)
            ax.yaxis.set_major_locator(SymmetricalLogLocator(base=10, linthresh=SYMLOG_FLOOR))
            ax.set_ylim(bottom=-0.3 * SYMLOG_FLOOR)  # distances are >= 0; a little room to show exact zeros
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
            if column == 0:
                ax.set_ylabel(label, fontsize=8)
            if row_k == 0:
                ax.set_title(f"layer {layer + 1}", fontsize=8)
            else:
                ax.set_xlabel(f"training step (log; step 0 at {STEP_ZERO_AT})", fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, max(len(labels), 1)), fontsize=7)
    fig.suptitle(_wrap(title, 3.2 * len(layers) + 0.8, 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})


def write_lab_loss(rows: Sequence[Any], path: str | Path, *, title: str) -> Path:
    """The held-out loss per cell (mean, range over seeds), the unigram baseline as a dashed tick."""
    styles = _styles([r.cell for r in rows])
    fig = _new_figure((6.5, max(2.4, 1.2 + 0.32 * len(rows))), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(rows))[::-1]
    for k, row in enumerate(rows):
        ax.errorbar([row.loss], [y[k]], xerr=_bars([row.loss], [row.low], [row.high]), **styles[row.cell].points(),
                    capsize=3)
        ax.plot([row.unigram] * 2, [y[k] - 0.3, y[k] + 0.3], color="0.5", linestyle="--")
    ax.set_yticks(y, [f"{r.cell} ({r.n_seeds} seeds)" for r in rows], fontsize=7)
    ax.set_xlabel("held-out loss at the last step (nats per token; bar: range over seeds; dashed: unigram)",
                  fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.suptitle(_wrap(title, 6.5, 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})


def write_lab_capacity(rows: Sequence[Any], path: str | Path, *, title: str) -> Path:
    """Left: held-out loss against heads; right: heads carrying a relation / a positional role against heads."""
    rows = sorted(rows, key=lambda r: r.heads)
    heads = [r.heads for r in rows]
    fig = _new_figure((8.0, 3.2), dpi=DPI, layout="constrained")
    left, right = fig.subplots(1, 2)
    left.errorbar(heads, [r.loss for r in rows], yerr=_bars([r.loss for r in rows], [r.loss_low for r in rows],
                                                            [r.loss_high for r in rows]), marker="o", capsize=3)
    left.set_ylabel("held-out loss (range over seeds)", fontsize=8)
    roles = series_styles(("specialised", "positional", "prev_next"))
    for name, label in (("specialised", "carry a relation"), ("positional", "positional"),
                        ("prev_next", "previous/next token")):
        values = [getattr(r, name) for r in rows]
        right.errorbar(heads, values, yerr=_bars(values, [getattr(r, f"{name}_low") for r in rows],
                                                 [getattr(r, f"{name}_high") for r in rows]),
                       **roles[name].line(), capsize=3, label=label)
    right.set_ylabel("heads (mean over seeds, range)", fontsize=8)
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(heads, [str(h) for h in heads])
        ax.minorticks_off()
        ax.set_xlabel("heads per layer (fixed hidden size)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    fig.suptitle(_wrap(title, 8.0, 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})


def write_lab_division(rows: Sequence[Any], path: str | Path, *, title: str) -> Path:
    """Per cell, D_within (range over seeds), D_self, D_match and D_null (widest interval over sentences)."""
    fig = _new_figure((6.5, max(2.6, 1.4 + 0.55 * len(rows))), dpi=DPI, layout="constrained")
    ax = fig.subplots()
    kinds = (("d_within", "D_within"), ("d_self", "D_self"), ("d_match", "D_match"), ("d_null", "D_null"))
    styles = series_styles(name for name, _ in kinds)
    base = np.arange(len(rows))[::-1].astype(float)
    for k, (name, label) in enumerate(kinds):
        y = base + 0.3 - 0.2 * k
        values = [getattr(r, name) for r in rows]
        low = [getattr(r, f"{name}_low", v) for r, v in zip(rows, values)]
        high = [getattr(r, f"{name}_high", v) for r, v in zip(rows, values)]
        ax.errorbar(values, y, xerr=_bars(values, low, high), **styles[name].points(), capsize=3, label=label)
    ax.set_yticks(base, [f"{r.cell}: {r.verdict}" for r in rows], fontsize=7)
    ax.set_xlabel("attention distance (mean JS per word row)", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.suptitle(_wrap(title, 6.5, 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})
