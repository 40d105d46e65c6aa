"""A training run for people: its ``report.md`` (the answers first: whether the held-out loss ends below the unigram
baseline, how far the heads of each layer came apart), its loss figure and the head-symmetry figure.

:func:`baseline_warning` is the sentence ``probes train`` prints, and the report opens with, when the held-out loss
ends above the unigram baseline: such a model has learned no more than word frequencies. Layers are 1-based.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.reports.escape import md_document, md_heading, md_text, path_href
from probes.reports.prose import opening, plural
from probes.reports.tables import markdown_table

if TYPE_CHECKING:  # pragma: no cover
    from probes.training.curves import TrainingCurves
    from probes.training.symmetry import HeadSymmetry

__all__ = ["draw_symmetry", "draw_loss", "baseline_warning", "baseline_sentence", "training_markdown"]


def _last(curves: TrainingCurves) -> tuple[float, float, int]:
    """The last held-out loss, the unigram baseline and the last step (NaN and 0 without checkpoints)."""
    if not len(curves.steps):
        return math.nan, float(curves.unigram_dev_loss), 0
    return float(curves.dev_loss[-1]), float(curves.unigram_dev_loss), int(curves.steps[-1])


def baseline_warning(curves: TrainingCurves) -> str:
    """The sentence saying that the held-out loss ends above the unigram baseline, or ``""`` when it does not (or
    either is not a number)."""
    dev, unigram, _ = _last(curves)
    if not (math.isfinite(dev) and math.isfinite(unigram)) or dev <= unigram:
        return ""
    return (f"held-out loss {dev:.3f} ends above the unigram baseline {unigram:.3f}: the model has not learned more "
            "than word frequencies; train longer or check the data")


def baseline_sentence(curves: TrainingCurves) -> str:
    """Where the last held-out loss ends against the unigram baseline, in one sentence (a report's first)."""
    warning = baseline_warning(curves)
    if warning:
        return warning[:1].upper() + warning[1:] + "."
    dev, unigram, step = _last(curves)
    if not (math.isfinite(dev) and math.isfinite(unigram)):
        return f"The held-out loss ({dev:.3f}) or the unigram baseline ({unigram:.3f}) is not a number."
    return (f"Held-out loss {dev:.3f} at step {step} ends below the unigram baseline {unigram:.3f} "
            f"({unigram - dev:.3f} nats lower): the model predicts better than word frequencies alone, from context.")


def _curve_sentence(curves: TrainingCurves) -> str:
    """How the held-out loss moved from the first checkpoint to the last."""
    if not len(curves.steps):
        return "The run has no checkpoints."
    return (f"The held-out {curves.objective} loss went from {curves.dev_loss[0]:.3f} at step {int(curves.steps[0])} "
            f"to {curves.dev_loss[-1]:.3f} at step {int(curves.steps[-1])} ({int(curves.tokens_seen[-1]):,} "
            f"training tokens seen), over {plural(len(curves.steps), 'checkpoint')}.")


def _symmetry_sentence(symmetry: HeadSymmetry | None) -> str:
    """The heads of each layer at the last checkpoint: how far apart, by parameters and by attention."""
    if symmetry is None:
        return ""
    means = symmetry.layer_means()
    last = means[means["step"] == means["step"].max()]
    parts = [f"layer {int(r.layer)}: parameters {r.param_distance:.4f}, attention {r.attention_distance:.4f}"
             for r in last.itertuples()]
    step = int(last["step"].iloc[0]) if len(last) else 0
    return (f"At step {step} the heads of each layer are this far apart (mean distance between its heads, on "
            f"{symmetry.n_sentences} held-out sentences): {'; '.join(parts)}.")


def _loss(value: float) -> str:
    """A loss as the summary prints it (3 decimals), ``-`` for NaN."""
    return "-" if not math.isfinite(float(value)) else f"{float(value):.3f}"


def training_markdown(report: Any, figures: dict[str, str] | None = None) -> str:
    """``report.md`` of a training run (a :class:`~probes.runs.train.TrainReport`): the answers first (the baseline
    sentence, the loss from first to last checkpoint, how far apart the heads are), then the loss table, the
    figures (``figures``: caption -> path relative to the report) and what the numbers are."""
    curves, run = report.curves, report.run
    config = run.config
    title = (f"Training run: {config.arch}, {plural(config.layers, 'layer')} x {plural(config.heads, 'head')}, "
             f"hidden {config.hidden}, init {config.init}")
    findings = [baseline_sentence(curves), _curve_sentence(curves),
                f"Training {run.stopped} at step {run.last_step} of {config.steps}. Layers are numbered from 1.",
                _symmetry_sentence(report.symmetry)]
    rows = [{"step": int(s), "tokens seen": f"{int(t):,}", "training loss": _loss(tr), "held-out loss": _loss(dev)}
            for s, t, tr, dev in zip(curves.steps, curves.tokens_seen, curves.train_loss, curves.dev_loss)]
    lines = [f"# {md_heading(title)}", "", *opening(md_text(f) for f in findings), "## Loss at every checkpoint", "",
             markdown_table(rows, ["step", "tokens seen", "training loss", "held-out loss"]),
             md_text(f"Unigram baseline on the same held-out targets: {curves.unigram_dev_loss:.3f} ({curves.rule})."),
             "", md_text("Training loss is that of the step (none at step 0); held-out loss is measured at each "
                         "checkpoint on the same held-out targets. Every number is also in curves.csv."), ""]
    for caption, path in (figures or {}).items():
        lines += [f"![{md_text(caption)}]({path_href(path)})", ""]
    return md_document("\n".join(lines))


def draw_loss(curves: TrainingCurves, path: Path) -> Path:
    """Held-out and training loss against tokens seen (log scale), the unigram baseline as a dashed grey line."""
    from probes.reports.figures import _new_figure, save_figure, series_styles

    fig = _new_figure((6.0, 3.6))
    ax = fig.add_subplot()
    styles = series_styles(("held-out", "training"))
    x = [max(int(t), 1) for t in curves.tokens_seen]
    ax.plot(x, curves.dev_loss, **styles["held-out"].line(), label="held-out loss")
    ax.plot(x[1:], curves.train_loss[1:], **styles["training"].line(), markersize=4, alpha=0.7,
            label="training loss (that step)")
    ax.axhline(curves.unigram_dev_loss, color="0.5", linestyle=":", label="unigram baseline (held out)")
    ax.set_xscale("log")
    ax.set_xlabel("training tokens seen (step 0 drawn at 1)")
    ax.set_ylabel(f"{curves.objective} loss (nats per token)")
    ax.legend(fontsize=8)
    return save_figure(fig, path, pad_inches=None, text_as_text=False)  # matplotlib's margin and fonts, as before


def draw_symmetry(symmetry: HeadSymmetry, path: Path) -> Path:
    """Per layer (from 1), the mean parameter and mean attention distance between its heads against the step.

    Two panels side by side; the step axis is logarithmic beyond 1 and linear below (``symlog``), so step 0 shows.
    Every layer has its own colour, marker and line style (:func:`~probes.reports.figures.series_styles`).
    """
    from probes.reports.figures import _new_figure, save_figure, series_styles

    means = symmetry.layer_means()
    fig = _new_figure((9.0, 3.6))
    axes = fig.subplots(1, 2)
    labels = (("param_distance", "mean parameter distance between heads"),
              ("attention_distance", "mean attention distance (JS per row)"))
    styles = series_styles(f"layer {layer}" for layer in sorted(set(means["layer"])))
    for ax, (column, label) in zip(axes, labels):
        for layer, rows in means.groupby("layer"):
            ax.plot(rows["step"], rows[column], **styles[f"layer {layer}"].line(), label=f"layer {layer}")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
        ax.set_xlabel("training step (log scale above 1)")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Heads of each layer at each checkpoint ({symmetry.n_sentences} held-out sentences)", fontsize=9)
    return save_figure(fig, path, pad_inches=None, text_as_text=False)  # matplotlib's margin and fonts, as before
