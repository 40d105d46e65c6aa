"""Figures of a training run that are about heads: how far apart the heads of each layer are, step by step."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from probes.training.symmetry import HeadSymmetry

__all__ = ["draw_symmetry"]


def draw_symmetry(symmetry: HeadSymmetry, path: Path) -> Path:
    """Per layer (from 1), the mean parameter and mean attention distance between its heads against the step.

    Two panels side by side; the step axis is logarithmic beyond 1 and linear below (``symlog``), so step 0 shows.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from probes.reports.figures import save_figure

    means = symmetry.layer_means()
    fig = Figure(figsize=(9.0, 3.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    labels = (("param_distance", "mean parameter distance between heads"),
              ("attention_distance", "mean attention distance (JS per row)"))
    for ax, (column, label) in zip(axes, labels):
        for layer, rows in means.groupby("layer"):
            ax.plot(rows["step"], rows[column], marker="o", label=f"layer {layer}")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
        ax.set_xlabel("training step (log scale above 1)")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Heads of each layer at each checkpoint ({symmetry.n_sentences} held-out sentences)", fontsize=9)
    return save_figure(fig, path, pad_inches=None, text_as_text=False)  # matplotlib's margin and fonts, as before
