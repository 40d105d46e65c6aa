"""Figures of the head atlas (Clark et al. 2019 Figs. 1, 2, 4 and 6; Kovaleva et al. 2019 Fig. 2).

Every function takes plain inputs (a ``heads`` table with one row per head, arrays) and writes
one figure, returning its path:

- :func:`write_attention_targets`: Clark Fig. 2, per layer one dot per head and the layer mean,
  panels start special / end special / "." and "," and current / next / previous token;
- :func:`write_entropy`: Clark Fig. 4, entropy per layer with the uniform reference and the
  mean entropy of the first special's row;
- :func:`write_mds`: Clark Fig. 6, the MDS layout of the heads coloured by layer and by pattern;
- :func:`write_pattern_distribution`: Kovaleva Fig. 2, the patterns per layer as stacked bars;
- :func:`write_sentence_heads`: Clark Fig. 1, chosen heads on one sentence (lines from the
  tokens on the left to the tokens they attend on the right, opacity = weight) and the matrix.

The ``heads`` table has 1-based ``layer`` and ``head`` columns; every label a person reads is
1-based. matplotlib is imported lazily and drawn on Agg canvases (no pyplot), as in
:mod:`probes.reports.figures`; all five figures of one atlas take about 2 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.analysis.patterns import PATTERNS  # Kovaleva's five classes, in the order of every pattern array
from probes.errors import InputError
from probes.extraction.families import continuation_marks, word_start_marks
from probes.reports.figures import DPI, PALETTE, _new_figure, _wrap, save_figure, series_styles

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["PATTERNS", "PATTERN_COLOURS", "PATTERN_STYLES", "TARGET_PANELS", "head_grid", "example_heads", "pool_to_words",
           "write_attention_targets", "write_entropy", "write_mds", "write_pattern_distribution",
           "write_sentence_heads"]

#: One colour per pattern (colour-blind safe Okabe-Ito hues), grey for a head without one.
PATTERN_COLOURS = {"vertical": "#0072B2", "diagonal": "#E69F00", "vertical+diagonal": "#009E73",
                   "block": "#CC79A7", "heterogeneous": "#999999", "unknown": "#DDDDDD"}
#: Each pattern's style where patterns are points (its colour, and a marker of its own).
PATTERN_STYLES = series_styles(PATTERN_COLOURS, colours=tuple(PATTERN_COLOURS.values()))
#: The two lines of the entropy figure: every row, and the first special's row.
_ENTROPY_STYLES = series_styles(("all rows", "first special"))
#: Clark Fig. 2 panels: ``(column of heads, panel title)``, top row then bottom row.
TARGET_PANELS = (("to_cls", "to the start special ([CLS], <s>)"), ("to_sep", "to the end special ([SEP], </s>)"),
                 ("to_punct", 'to "." and ","'), ("to_self", "to the current token"),
                 ("to_next", "to the next token"), ("to_prev", "to the previous token"))


def _figure(width: float, height: float, *, left: float = 0.6, right: float = 0.2, top: float = 0.7,
            bottom: float = 0.5, wspace: float = 0.25, hspace: float = 0.35) -> Any:
    """A figure of ``width`` x ``height`` inches with fixed margins in inches (no layout engine).

    Fixed margins instead of constrained layout and a tight bounding box: the figure is drawn once,
    which keeps all atlas figures together at about 2 s (the layout engine drew each three times).
    """
    fig = _new_figure((width, height), dpi=DPI)
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height,
                        wspace=wspace, hspace=hspace)
    return fig


def head_grid(heads: pd.DataFrame, column: str) -> npt.NDArray[np.float64]:
    """``(n_layers, n_heads)`` values of ``column`` laid out by the table's 1-based ``layer`` and ``head``.

    Heads absent from the table are NaN. Raises InputError naming the columns found when one is missing.
    """
    for name in ("layer", "head", column):
        if name not in heads.columns:
            raise InputError(f"the heads table needs a {name!r} column; found {list(heads.columns)}")
    layer = heads["layer"].to_numpy(dtype=int)
    head = heads["head"].to_numpy(dtype=int)
    if len(layer) == 0 or layer.min() < 1 or head.min() < 1:
        raise InputError(f"the heads table needs 1-based layer and head numbers; found {len(layer)} rows, "
                         f"smallest layer {layer.min() if len(layer) else None}")
    grid = np.full((layer.max(), head.max()), np.nan)
    grid[layer - 1, head - 1] = heads[column].to_numpy(dtype=float)
    return grid


def _per_layer_dots(ax: Any, grid: npt.NDArray[np.float64], colour: str, label: str | None = None,
                    style: Any = None) -> None:
    """One dot per head at its layer (spread a little sideways so they do not hide each other), and the layer mean
    (as ``style``, a :class:`~probes.reports.figures.SeriesStyle`, when given)."""
    n_layers, n_heads = grid.shape
    spread = (np.arange(n_heads) - (n_heads - 1) / 2) / max(n_heads, 1) * 0.5
    x = np.arange(1, n_layers + 1)[:, None] + spread[None, :]
    ax.scatter(x.ravel(), grid.ravel(), s=9, color=colour, alpha=0.45, linewidths=0)
    with np.errstate(all="ignore"):
        mean = np.nanmean(np.where(np.isfinite(grid), grid, np.nan), axis=1) if np.isfinite(grid).any() else None
    if mean is not None:
        line = style.line() if style is not None else {"color": colour, "linestyle": "-", "marker": "o"}
        ax.plot(np.arange(1, n_layers + 1), mean, **line, markersize=3.5, linewidth=1.4, label=label)
    _layer_ticks(ax, n_layers)
    ax.tick_params(axis="y", labelsize=7)


def _layer_ticks(ax: Any, n_layers: int) -> None:
    """1-based layer numbers on the x axis, every one up to 16 layers, else every 2nd, 4th ... (they stay legible)."""
    step = max(1, int(np.ceil(n_layers / 16)))
    ticks = [1, *range(step, n_layers + 1, step)] if step > 1 else list(range(1, n_layers + 1))
    ax.set_xticks(ticks, [str(i) for i in ticks], fontsize=7)


def write_attention_targets(heads: pd.DataFrame, path: str | Path, *, title: str) -> Path:
    """Clark Fig. 2: the mean attention of each head to each kind of token, per layer (dots) with the layer mean (line).

    Columns used: :data:`TARGET_PANELS`. A column that is all NaN (``to_sep`` of a decoder without an end
    special) draws an empty panel that says so.
    """
    fig = _figure(10.0, 5.6, left=0.65, top=0.8, bottom=0.55, wspace=0.18, hspace=0.3)
    axes = fig.subplots(2, 3, sharex=True)
    for ax, (column, label) in zip(axes.ravel(), TARGET_PANELS):
        grid = head_grid(heads, column)
        ax.set_title(label, fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(axis="y", alpha=0.3)
        if not np.isfinite(grid).any():
            ax.text(0.5, 0.5, "empty: the model has no such token", ha="center", va="center", fontsize=8,
                    transform=ax.transAxes, color="0.4")
        _per_layer_dots(ax, grid, PALETTE[0])
    for ax in axes[1]:
        ax.set_xlabel("layer (1-based)", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("mean attention", fontsize=8)
    fig.suptitle(_wrap(title + "\none dot per head, line: mean of the layer", 10.0, 10), fontsize=10)
    return save_figure(fig, path, tight=False)  # margins fixed by _figure: drawn once


def write_entropy(heads: pd.DataFrame, uniform_entropy: float, path: str | Path, *, title: str) -> Path:
    """Clark Fig. 4: the mean entropy (nats) of each head per layer, the uniform reference and the first special's row.

    Columns used: ``entropy`` (every row) and ``entropy_first`` (row 0: [CLS] or a decoder's BOS).
    """
    entropy = head_grid(heads, "entropy")
    first = head_grid(heads, "entropy_first")
    fig = _figure(6.4, 4.2, top=0.55)
    ax = fig.subplots()
    rows, special = _ENTROPY_STYLES["all rows"], _ENTROPY_STYLES["first special"]
    _per_layer_dots(ax, entropy, rows.color, label="all rows: per head (dots), layer mean (line)", style=rows)
    with np.errstate(all="ignore"):
        first_mean = np.nanmean(first, axis=1) if np.isfinite(first).any() else None
    if first_mean is not None:
        ax.plot(np.arange(1, len(first_mean) + 1), first_mean, **special.line(), markersize=3.5,
                linewidth=1.2, label="row of the first special: layer mean")
    if np.isfinite(uniform_entropy):
        ax.axhline(uniform_entropy, color="0.3", linestyle=":", linewidth=1.2,
                   label=f"uniform attention: mean ln(n) = {uniform_entropy:.2f}")
    ax.set_xlabel("layer (1-based)", fontsize=8)
    ax.set_ylabel("entropy (nats)", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(_wrap(title, 6.4, 9), fontsize=9)
    return save_figure(fig, path, tight=False)  # margins fixed by _figure: drawn once


def _pattern_of(heads: pd.DataFrame) -> list[str]:
    """Each row's majority pattern (``unknown`` where absent or not one of :data:`PATTERNS`)."""
    if "pattern" not in heads.columns:
        return ["unknown"] * len(heads)
    return [p if isinstance(p, str) and p in PATTERNS else "unknown" for p in heads["pattern"]]


def write_mds(heads: pd.DataFrame, path: str | Path, *, title: str, label_heads: bool | None = None) -> Path:
    """Clark Fig. 6: the heads' 2-D MDS layout (``mds_x``, ``mds_y``), left coloured by layer, right by pattern.

    Args:
        label_heads: write ``layer-head`` next to each dot; by default only when there are at most 160 heads.
    """
    for name in ("mds_x", "mds_y", "layer", "head"):
        if name not in heads.columns:
            raise InputError(f"the MDS figure needs a {name!r} column; found {list(heads.columns)}")
    x, y = heads["mds_x"].to_numpy(dtype=float), heads["mds_y"].to_numpy(dtype=float)
    layer = heads["layer"].to_numpy(dtype=int)
    names = [f"{l}-{h}" for l, h in zip(layer, heads["head"].to_numpy(dtype=int))]
    label_heads = len(heads) <= 160 if label_heads is None else label_heads
    fig = _figure(11.0, 5.2, left=0.2, top=0.8, bottom=0.2, wspace=0.08)
    by_layer, by_pattern = fig.subplots(1, 2, sharex=True, sharey=True)
    points = by_layer.scatter(x, y, c=layer, cmap="viridis", s=22, vmin=1, vmax=max(layer.max(), 2),
                              edgecolors="white", linewidths=0.3)
    fig.colorbar(points, ax=by_layer, label="layer (1-based)", shrink=0.8)
    by_layer.set_title("coloured by layer", fontsize=9)
    patterns = _pattern_of(heads)
    for name in (*PATTERNS, "unknown"):
        keep = np.array([p == name for p in patterns])
        if keep.any():
            by_pattern.scatter(x[keep], y[keep], s=22, color=PATTERN_COLOURS[name], marker=PATTERN_STYLES[name].marker,
                               label=f"{name} ({keep.sum()})",
                               edgecolors="white", linewidths=0.3)
    by_pattern.legend(fontsize=7, title="majority pattern", title_fontsize=7, loc="best")
    by_pattern.set_title("coloured by majority pattern", fontsize=9)
    for ax in (by_layer, by_pattern):
        ax.set_xticks([])
        ax.set_yticks([])
        if label_heads:
            for xi, yi, name in zip(x, y, names):
                ax.annotate(name, (xi, yi), xytext=(2, 2), textcoords="offset points", fontsize=4.5, color="0.25")
    note = "labels: layer-head, 1-based; " if label_heads else ""
    fig.suptitle(_wrap(f"{title}\n{note}near = similar attention (Jensen-Shannon)", 11.0, 10), fontsize=10)
    return save_figure(fig, path, tight=False)  # margins fixed by _figure: drawn once


def write_pattern_distribution(distribution: npt.ArrayLike, path: str | Path, *, title: str,
                               patterns: Sequence[str] = PATTERNS) -> Path:
    """Kovaleva Fig. 2: per layer the share of maps of each pattern, as stacked bars.

    Args:
        distribution: ``(n_layers, len(patterns))`` counts or fractions; each layer is scaled to sum to 1.
    """
    counts = np.asarray(distribution, dtype=float)
    if counts.ndim != 2 or counts.shape[1] != len(patterns):
        raise InputError(f"pattern distribution: expected shape (n_layers, {len(patterns)}); found {counts.shape}")
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    fig = _figure(min(max(5.0, 3.2 + 0.35 * len(counts)), 10.0), 3.8, right=1.7, top=0.55)
    ax = fig.subplots()
    layers = np.arange(1, len(counts) + 1)
    bottom = np.zeros(len(counts))
    for k, name in enumerate(patterns):
        ax.bar(layers, shares[:, k], bottom=bottom, color=PATTERN_COLOURS.get(name, None), label=name, width=0.8)
        bottom += shares[:, k]
    _layer_ticks(ax, len(counts))
    ax.set_xlabel("layer (1-based)", fontsize=8)
    ax.set_ylabel("share of (sentence, head) maps", fontsize=8)
    ax.set_ylim(0, 1)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(_wrap(title, 6.0, 9), fontsize=9)
    return save_figure(fig, path, tight=False)  # margins fixed by _figure: drawn once


def pool_to_words(weights: npt.ArrayLike, word_of: npt.ArrayLike, tokens: Sequence[str],
                  words: Sequence[str] | None = None) -> tuple[npt.NDArray[np.float32], tuple[str, ...]]:
    """Token maps pooled to words as Clark et al. §4.1 do: columns summed over a word's tokens, rows averaged.

    Each special token (``word_of == -1``) stays a position of its own; positions keep the input order.

    Args:
        weights: ``(..., T, T)`` token maps.
        word_of: ``(T,)`` word index of each token, -1 for specials.
        tokens: ``(T,)`` token strings; a word's label joins its tokens (the families' marks removed:
            continuation ``##`` in front, word-start ``Ġ`` and ``▁`` anywhere) unless ``words`` is given.
        words: the sentence's words (labels of the word positions, by ``word_of``); specials keep their token.

    Returns:
        ``(..., n, n)`` float32 word maps and the ``n`` labels.
    """
    maps = np.asarray(weights, dtype=np.float32)
    word_of = np.asarray(word_of, dtype=np.intp)
    if word_of.shape != (maps.shape[-1],) or len(tokens) != maps.shape[-1]:
        raise InputError(f"pool_to_words: expected word_of and tokens of length {maps.shape[-1]}; "
                         f"found {word_of.shape} and {len(tokens)}")
    keys = [("w", int(w)) if w >= 0 else ("s", t) for t, w in enumerate(word_of)]
    order: dict[tuple[str, int], int] = {}
    group = np.array([order.setdefault(key, len(order)) for key in keys], dtype=np.intp)  # (T,)
    member = np.zeros((len(order), len(keys)), dtype=np.float32)  # (n, T)
    member[group, np.arange(len(keys))] = 1.0
    rows = member / member.sum(axis=1, keepdims=True)
    pooled = rows @ (maps @ member.T)  # (..., n, n)
    labels = [""] * len(order)
    marks = continuation_marks(), word_start_marks()
    for t, g in enumerate(group):
        piece = tokens[t]
        if word_of[t] >= 0 and words is not None:
            labels[g] = str(words[word_of[t]])
            continue
        if word_of[t] >= 0:
            piece = _unmarked(piece, *marks)
        labels[g] += piece
    return pooled.astype(np.float32), tuple(labels)


def _unmarked(piece: str, continuation: tuple[str, ...], word_start: tuple[str, ...]) -> str:
    """``piece`` without a continuation mark in front and without any word-start mark (a word's label)."""
    for mark in continuation:
        piece = piece.removeprefix(mark)
    for mark in word_start:
        piece = piece.replace(mark, "")
    return piece


def example_heads(heads: pd.DataFrame, n: int = 4) -> list[tuple[int, int]]:
    """Up to ``n`` distinct heads worth showing on one sentence, as Clark Fig. 1 chose them (0-based ``(layer, head)``).

    In order: the broadest head (largest ``entropy``), then the largest ``to_next``, ``to_sep`` (or ``to_cls`` when
    the model has no end special) and ``to_punct``, skipping a head already chosen and columns that are absent.
    """
    chosen: list[tuple[int, int]] = []
    for column in ("entropy", "to_next", "to_sep", "to_cls", "to_punct", "to_prev"):
        if len(chosen) >= n or column not in heads.columns:
            continue
        values = heads[column].to_numpy(dtype=float)
        for index in np.argsort(-np.nan_to_num(values, nan=-np.inf), kind="stable"):
            pick = (int(heads["layer"].iloc[index]) - 1, int(heads["head"].iloc[index]) - 1)
            if np.isfinite(values[index]) and pick not in chosen:
                chosen.append(pick)
                break
    return chosen


def _draw_lines(ax: Any, weights: npt.NDArray[np.float32], labels: Sequence[str], colour: str) -> None:
    """Clark Fig. 1: tokens on the left attend to tokens on the right, each line's opacity its weight."""
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgba

    n = len(labels)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    segments = np.stack([np.stack([np.zeros(n * n), -i.ravel()], 1), np.stack([np.ones(n * n), -j.ravel()], 1)], 1)
    rgba = np.tile(np.asarray(to_rgba(colour)), (n * n, 1))
    rgba[:, 3] = np.clip(weights.ravel(), 0.0, 1.0)
    ax.add_collection(LineCollection(list(segments), colors=rgba, linewidths=1.6))  # n*n lines (2, 2)
    size = min(8.0, max(4.0, 220.0 / max(n, 1)))
    for k, label in enumerate(labels):
        ax.text(-0.04, -k, label, ha="right", va="center", fontsize=size)
        ax.text(1.04, -k, label, ha="left", va="center", fontsize=size)
    ax.set_xlim(-0.75, 1.75)
    ax.set_ylim(-n + 0.5, 0.5)
    ax.axis("off")


def write_sentence_heads(weights: npt.ArrayLike, labels: Sequence[str], chosen: Sequence[tuple[int, int]],
                         path: str | Path, *, title: str, level: str = "token") -> Path:
    """Clark Fig. 1 and a matrix view: the chosen heads' attention on one sentence.

    Args:
        weights: ``(n_layers, n_heads, n, n)`` maps of one sentence (token maps, or word maps from
            :func:`pool_to_words`); rows attend from, columns to.
        labels: the ``n`` tokens or words.
        chosen: 0-based ``(layer, head)`` pairs (e.g. from :func:`example_heads`); labelled 1-based.
        level: ``"token"`` or ``"word"``, said in the title.
    """
    maps = np.asarray(weights, dtype=np.float32)
    if maps.ndim != 4 or maps.shape[2:] != (len(labels), len(labels)):
        raise InputError(f"sentence maps: expected shape (layers, heads, {len(labels)}, {len(labels)}); "
                         f"found {maps.shape}")
    bad = [(l, h) for l, h in chosen if not (0 <= l < maps.shape[0] and 0 <= h < maps.shape[1])]
    if not chosen or bad:
        raise InputError(f"chosen heads: expected 0-based (layer, head) pairs inside {maps.shape[:2]}; found {bad or 'none'}")
    n = len(labels)
    size = min(7.0, max(3.5, 200.0 / max(n, 1)))
    margin = 0.2 + 0.6 * size / 72 * max(len(label) for label in labels)  # inches for the longest tick label
    lines_height, matrix_height = min(max(0.16 * n, 2.0), 8.0), 2.5  # inches; a matrix panel is about square
    fig = _figure(3.1 * len(chosen) + margin + 1.0, lines_height + matrix_height + margin + 1.5, left=margin + 0.15,
                  right=0.9, top=0.75, bottom=margin + 0.25, wspace=0.35, hspace=0.12)
    axes = fig.subplots(2, len(chosen), squeeze=False, height_ratios=[lines_height, matrix_height])
    for k, (layer, head) in enumerate(chosen):
        colour = PALETTE[k % len(PALETTE)]
        _draw_lines(axes[0, k], maps[layer, head], labels, colour)
        axes[0, k].set_title(f"head {layer + 1}-{head + 1}", fontsize=9, color=colour)
        image = axes[1, k].imshow(maps[layer, head], cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
        axes[1, k].set_xticks(range(n), labels, rotation=90, fontsize=size)
        axes[1, k].set_xlabel("attends to", fontsize=7)
        if k == 0:  # the rows are the same tokens in every matrix: label them once
            axes[1, k].set_yticks(range(n), labels, fontsize=size)
            axes[1, k].set_ylabel("attends from", fontsize=7)
        else:
            axes[1, k].set_yticks([])
    fig.colorbar(image, cax=fig.add_axes((1 - 0.75 / fig.get_figwidth(), 0.1, 0.12 / fig.get_figwidth(), 0.3)),
                 label="weight")
    fig.suptitle(_wrap(f"{title}\n{level} level; heads layer-head, 1-based; line opacity = weight",
                       3.1 * len(chosen), 10), fontsize=10)
    return save_figure(fig, path, tight=False)  # margins fixed by _figure: drawn once
