"""Figures: layers x heads heatmaps, the way people would rather look than read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["head_heatmap", "overview_figure"]


def _pyplot():  # imported lazily: matplotlib is slow to import and needs a headless backend
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw(ax, values: npt.NDArray[np.floating], title: str, vmin: float | None, vmax: float | None, mark_best: bool):
    n_layers, n_heads = values.shape
    im = ax.imshow(values, aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax, origin="lower")
    ax.set_xticks(range(n_heads), [str(h + 1) for h in range(n_heads)], fontsize=7)
    ax.set_yticks(range(n_layers), [str(l + 1) for l in range(n_layers)], fontsize=7)
    ax.set_xlabel("head (1-based)")
    ax.set_ylabel("layer (1-based)")
    ax.set_title(title, fontsize=9)
    if mark_best and np.isfinite(values).any():
        layer, head = np.unravel_index(np.nanargmax(values), values.shape)
        ax.scatter([head], [layer], marker="s", s=60, facecolors="none", edgecolors="red", linewidths=1.5)
    return im


def head_heatmap(
    values: npt.ArrayLike,
    path: str | Path,
    *,
    title: str,
    label: str = "accuracy",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    baseline: float | None = None,
) -> Path:
    """Save a ``(n_layers, n_heads)`` heatmap as PNG, best head boxed in red.

    Args:
        values: ``(n_layers, n_heads)`` scores (NaN for heads not scored).
        path: output PNG path.
        title: figure title (say what was scored, on what data).
        label: colour bar label.
        baseline: if given, written in the title for comparison.
    """
    plt = _pyplot()
    values = np.asarray(values, dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 + 0.42 * values.shape[1], 1.2 + 0.36 * values.shape[0]))
    full_title = title if baseline is None else f"{title}\n(best baseline {baseline:.3f})"
    im = _draw(ax, values, full_title, vmin, vmax, mark_best=True)
    fig.colorbar(im, ax=ax, label=label)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def overview_figure(
    panels: Mapping[str, npt.ArrayLike],
    path: str | Path,
    *,
    suptitle: str,
    ncols: int = 4,
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    subtitles: Sequence[str] | None = None,
) -> Path:
    """Save one figure with a small heatmap per panel (e.g. one per relation)."""
    plt = _pyplot()
    names = list(panels)
    n = max(len(names), 1)
    ncols = min(ncols, n)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols, 2.8 * nrows), squeeze=False)
    im = None
    for k, ax in enumerate(axes.flat):
        if k >= len(names):
            ax.axis("off")
            continue
        sub = subtitles[k] if subtitles else names[k]
        im = _draw(ax, np.asarray(panels[names[k]], dtype=float), sub, vmin, vmax, mark_best=True)
        ax.set_xlabel("")
        ax.set_ylabel("")
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.6)
    fig.suptitle(suptitle + "  (rows: layer, columns: head; 1-based)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
