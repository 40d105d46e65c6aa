"""Figures: layers x heads heatmaps, the way people would rather look than read.

:class:`HeatmapWriter` writes many same-shaped heatmaps quickly (one figure drawn once;
per file only the image, the box and the title are redrawn and the pixels are PNG-encoded
with Pillow), which is what a leaderboard with dozens of relations needs.

Every figure is written at :data:`DPI` (150) or more, in the format of its file's suffix
(``.png``, ``.svg`` or ``.pdf``), with its whole title inside the image (long titles are
wrapped, and matplotlib figures are saved with a tight bounding box). :func:`save_figure` is the one place a
matplotlib figure is saved in `probes`: every file is written to a temporary name and renamed into place
(:mod:`probes.atomic_io`), so a stopped run never leaves a half-drawn figure under its final name.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
import numpy.typing as npt

from probes.atomic_io import atomic_file
from probes.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

__all__ = ["preload", "HeatmapWriter", "head_heatmap", "overview_figure", "save_figure", "figure_suffix", "DPI",
           "PALETTE", "MARKERS", "LINESTYLES", "SeriesStyle", "series_styles"]

#: Resolution of every raster figure (dots per inch).
DPI = 150

#: Series colours: Okabe & Ito's colour-blind-safe palette (2008), yellow left out (too pale on white).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
#: Series markers, in the order series get them.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
#: Series line styles, in the order series get them.
LINESTYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class SeriesStyle:
    """How one series of a figure is drawn: its colour, line style, marker and marker face (``fill``: the colour,
    or white for a hollow marker)."""

    color: str
    linestyle: str
    marker: str
    fill: str

    def line(self) -> dict[str, Any]:
        """Keyword arguments of ``ax.plot`` (and of a legend's ``Line2D``)."""
        return {"color": self.color, "linestyle": self.linestyle, "marker": self.marker,
                "markerfacecolor": self.fill}

    def points(self) -> dict[str, Any]:
        """Keyword arguments of ``ax.errorbar`` for markers without a joining line."""
        return {"fmt": self.marker, "color": self.color, "markerfacecolor": self.fill}


def series_styles(names: Iterable[str], *, hollow: Iterable[str] = (),
                  colours: Sequence[str] = PALETTE) -> dict[str, SeriesStyle]:
    """One :class:`SeriesStyle` per distinct name, in order: the k-th takes the k-th colour of ``colours``
    (:data:`PALETTE`), the k-th marker of :data:`MARKERS` and the k-th line style of :data:`LINESTYLES` (each list
    repeated as needed), so any two series of a figure differ in colour and marker (up to 7 series) and in the
    three together (up to 140); the names in ``hollow`` (e.g. random-init models) get hollow markers. The one
    place series are styled: every figure with more than one series in an axes takes its styles here."""
    hollow = set(hollow)
    out: dict[str, SeriesStyle] = {}
    for k, name in enumerate(dict.fromkeys(names)):
        colour = colours[k % len(colours)]
        out[name] = SeriesStyle(colour, LINESTYLES[k % len(LINESTYLES)], MARKERS[k % len(MARKERS)],
                                "white" if name in hollow else colour)
    return out


def _wrap(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points (each line on its own)."""
    chars = max(20, int(width_in * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, chars, break_on_hyphens=False) for line in text.split("\n"))


def save_figure(fig: Figure, path: str | Path, *, tight: bool = True, pad_inches: float | None = 0.08,
                text_as_text: bool = True, pil_kwargs: Mapping[str, Any] | None = None) -> Path:
    """Save ``fig`` to ``path`` at :data:`DPI` in the format of its suffix (``png``, ``svg``, ``pdf``), whole or not
    at all (a temporary file renamed into place); ``path``. SVG files carry no date, so they are reproducible.

    Args:
        tight: crop to the drawing with ``pad_inches`` around it (None: matplotlib's default); False keeps the
            figure's own size (its margins fixed when it was made).
        text_as_text: text stays text in SVG and PDF files (searchable, editable), else glyphs become paths.
        pil_kwargs: Pillow's options for a PNG file (e.g. ``{"compress_level": 1}``); ignored for other formats.
    """
    path = Path(path)
    fmt = figure_suffix(path)
    options: dict[str, Any] = {}
    if path.suffix.lower() == ".png" and pil_kwargs is not None:
        options["pil_kwargs"] = dict(pil_kwargs)
    if fmt == "svg":
        options["metadata"] = {"Date": None}  # reproducible files
    from matplotlib import rc_context

    fonts = rc_context({"svg.fonttype": "none", "pdf.fonttype": 42} if text_as_text  # whatever rcParams say
                       else {"svg.fonttype": "path", "pdf.fonttype": 3})
    bbox: Literal["tight"] | None = "tight" if tight else None
    with fonts, atomic_file(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=DPI, bbox_inches=bbox, pad_inches=pad_inches, **options)
    return path


def figure_suffix(path: str | Path) -> str:
    """The format of a figure file by its suffix (``png``, ``svg``, ``pdf`` ...), as matplotlib names it."""
    return Path(path).suffix.lower().lstrip(".") or "png"


def preload() -> None:
    """Import matplotlib now (it takes most of a second), e.g. in a background thread while a model runs."""
    import matplotlib.backends.backend_agg  # noqa: F401  (imported for its cost, not its names)
    import matplotlib.colorbar  # noqa: F401  (imported for its cost, not its names)
    import matplotlib.figure  # noqa: F401  (imported for its cost, not its names)


def _new_figure(figsize: tuple[float, float], dpi: float | None = None,
                layout: Literal["constrained", "compressed", "tight"] | None = None) -> Figure:
    """A matplotlib Figure on its own Agg canvas.

    No pyplot: its global figure registry is not thread-safe, and figures here are drawn from
    worker threads too.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi, layout=layout)
    FigureCanvasAgg(fig)
    return fig


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
    baseline_label: str = "best baseline",
    mark: tuple[int, int] | None = None,
) -> Path:
    """Save a ``(n_layers, n_heads)`` heatmap (PNG, SVG or PDF by the suffix of ``path``), best head boxed in red.

    Args:
        values: ``(n_layers, n_heads)`` scores (NaN for heads not scored).
        path: output path.
        title: figure title (say what was scored, on what data, by which model).
        label: colour bar label.
        baseline: if given, written in the title for comparison.
        baseline_label: what the baseline is (e.g. ``"position only"``).
        mark: ``(layer_pos, head_pos)`` to box instead of the best head.
    """
    values = np.asarray(values, dtype=float)
    width = max(4.0, 1.2 + 0.42 * values.shape[1])
    fig = _new_figure((width, 1.2 + 0.36 * values.shape[0]), dpi=DPI)
    ax = fig.subplots()
    full_title = title if baseline is None else f"{title}\n({baseline_label} {baseline:.3f})"
    im = _draw(ax, values, _wrap(full_title, width, 9), vmin, vmax, mark_best=mark is None)
    if mark is not None:
        ax.scatter([mark[1]], [mark[0]], marker="s", s=60, facecolors="none", edgecolors="red", linewidths=1.5)
    fig.colorbar(im, ax=ax, label=label)
    fig.tight_layout()
    return save_figure(fig, path)


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
    """Save one figure (PNG, SVG or PDF by the suffix of ``path``) with a small heatmap per panel (e.g. one
    per relation), best head of each boxed.

    The panels are drawn as one mosaic image on one axes (white gaps between panels), which
    is many times faster than one axes per panel and reads the same. Panels may differ in
    shape; each is ``(n_layers, n_heads)``, layer 1 at the bottom, head 1 on the left.
    """
    from matplotlib import colormaps

    names = list(panels)
    arrays = [np.asarray(panels[name], dtype=float) for name in names]
    n = max(len(names), 1)
    ncols = min(ncols, n)
    nrows = (n + ncols - 1) // ncols
    cell_h = max((a.shape[0] for a in arrays), default=1)
    cell_w = max((a.shape[1] for a in arrays), default=1)
    gap_w, gap_h = max(1, cell_w // 6), max(1, cell_h // 2) + 1  # room between panels (and for titles)
    height, width = nrows * (cell_h + gap_h) - gap_h + 1, ncols * (cell_w + gap_w) - gap_w
    mosaic = np.full((height, width), np.nan)  # NaN = background
    boxes_x, boxes_y, origins = [], [], []
    for k, values in enumerate(arrays):
        row, col = divmod(k, ncols)
        y0 = (nrows - 1 - row) * (cell_h + gap_h)  # first panel at the top; layer 1 at the bottom of a panel
        x0 = col * (cell_w + gap_w)
        mosaic[y0 : y0 + values.shape[0], x0 : x0 + values.shape[1]] = values
        origins.append((x0, y0, values.shape))
        if np.isfinite(values).any():
            layer, head = np.unravel_index(np.nanargmax(values), values.shape)
            boxes_x.append(x0 + head)
            boxes_y.append(y0 + layer)
    fig = _new_figure((0.15 * width + 1.8, 0.15 * height + 1.0))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.05, right=0.97, bottom=0.6 / (0.15 * height + 1.0), top=1 - 0.45 / (0.15 * height + 1.0))
    cmap = colormaps["viridis"].with_extremes(bad="white")
    im = ax.imshow(mosaic, aspect="equal", cmap=cmap, vmin=vmin, vmax=vmax, origin="lower", interpolation="nearest")
    ax.plot(boxes_x, boxes_y, marker="s", markersize=4.5, markerfacecolor="none", markeredgecolor="red",
            markeredgewidth=1.0, linestyle="none")
    for k, (x0, y0, shape) in enumerate(origins):
        ax.text(x0 + (shape[1] - 1) / 2, y0 + shape[0] - 0.4, subtitles[k] if subtitles else names[k],
                ha="center", va="bottom", fontsize=7)
    # 1-based ticks: first and last head under each column, first and last layer beside each row
    xt = [(x0 + j, str(j + 1)) for x0, y0, shape in origins if y0 == 0 for j in (0, shape[1] - 1)]
    yt = [(y0 + i, str(i + 1)) for x0, y0, shape in origins if x0 == 0 for i in (0, shape[0] - 1)]
    ax.set_xticks([t for t, _ in xt], [s for _, s in xt], fontsize=6)
    ax.set_yticks([t for t, _ in yt], [s for _, s in yt], fontsize=6)
    ax.tick_params(length=2, pad=1)
    ax.set_xlabel("head (1-based)", fontsize=8)
    ax.set_ylabel("layer (1-based)", fontsize=8)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xlim(-0.5, width - 0.5)
    ax.set_ylim(-0.5, height - 0.5)
    fig.colorbar(im, ax=ax, shrink=0.6, pad=0.01)
    legend = "per panel: rows layer, columns head; 1-based; best head boxed"
    fig.suptitle(_wrap(f"{suptitle}\n({legend})", fig.get_figwidth(), 9), fontsize=9)
    return save_figure(fig, path, pil_kwargs={"compress_level": 1})  # fast zlib level: ~2x quicker, ~30% larger


class HeatmapWriter:
    """Writes many ``(n_layers, n_heads)`` heatmaps of one shape and colour scale, fast.

    Matplotlib draws the parts every figure shares once (1-based ticks, axis labels,
    colour bar, ``note``); each :meth:`write` paints only what changes straight into a
    copy of those pixels (the cells through the colour map, the box around the marked
    head, the title in the same font) and saves them as PNG with Pillow. About 30x faster
    than a new figure per heatmap, which matters for a leaderboard with dozens of relations.

    Args:
        n_layers, n_heads: shape of every heatmap.
        label: colour bar label.
        vmin, vmax: fixed colour scale (the colour bar is drawn once).
        note: a static line under the title, the same on every figure (e.g. the model and data).
        dpi: resolution of the PNG files.

    Files whose suffix is ``.svg`` or ``.pdf`` are drawn by matplotlib instead (:func:`head_heatmap`, with
    the same title, note, colours and box).
    """

    def __init__(self, n_layers: int, n_heads: int, *, label: str = "accuracy", vmin: float = 0.0,
                 vmax: float = 1.0, note: str = "", dpi: int = DPI, title_size: float = 9.0) -> None:
        from matplotlib import colormaps
        from matplotlib.font_manager import FontProperties, findfont
        from PIL import ImageFont

        self.shape = (n_layers, n_heads)
        self.vmin, self.vmax = float(vmin), float(vmax)
        self.label, self.note, self.title_size, self.dpi = label, note, title_size, dpi
        width_in = max(4.0, 1.4 + 0.42 * n_heads)
        fig = _new_figure((width_in, 1.6 + 0.34 * n_layers), dpi=dpi, layout="constrained")
        ax = fig.subplots()
        image = ax.imshow(np.full(self.shape, np.nan), aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax,
                          origin="lower", interpolation="nearest")
        ax.set_xticks(range(n_heads), [str(h + 1) for h in range(n_heads)], fontsize=7)
        ax.set_yticks(range(n_layers), [str(l + 1) for l in range(n_layers)], fontsize=7)
        ax.tick_params(length=2)
        ax.set_xlabel("head (1-based)", fontsize=8)
        ax.set_ylabel("layer (1-based)", fontsize=8)
        for spine in ax.spines.values():
            spine.set_visible(False)
        fig.colorbar(image, ax=ax, label=label, pad=0.02)
        ax.set_title(_wrap(note, width_in - 0.3, 7), fontsize=7, color="0.3")
        room = fig.suptitle("Xg", fontsize=title_size, color="white")  # keeps a line free for the painted title
        canvas = cast("FigureCanvasAgg", fig.canvas)  # every figure here is on an Agg canvas (_new_figure)
        canvas.draw()
        self._background = np.array(canvas.buffer_rgba())[..., :3]  # (height, width, 3) uint8
        height = self._background.shape[0]
        box = ax.get_window_extent()  # display pixels, origin bottom-left
        # pixel rectangle of the cells, rows top to bottom
        self._x0, self._x1 = int(round(box.x0)), int(round(box.x1))
        self._y0, self._y1 = int(round(height - box.y1)), int(round(height - box.y0))
        line = room.get_window_extent()
        self._title_xy = (self._background.shape[1] / 2, height - (line.y0 + line.y1) / 2)
        px = np.arange(self._x0, self._x1) + 0.5 - box.x0
        py = box.y1 - (np.arange(self._y0, self._y1) + 0.5 - (height - box.y1)) - box.y0  # from the bottom
        self._col = np.clip((px / box.width * n_heads).astype(np.intp), 0, n_heads - 1)  # (w,) head of each pixel
        self._row = np.clip((py / box.height * n_layers).astype(np.intp), 0, n_layers - 1)  # (h,) layer
        self._lut = (colormaps["viridis"](np.linspace(0.0, 1.0, 256))[:, :3] * 255).round().astype(np.uint8)
        self._font_file = findfont(FontProperties(family=["sans-serif"]))
        self._font = ImageFont.truetype(self._font_file, round(title_size * dpi / 72))
        self._title_room = self._background.shape[1] - 12  # widest title that fits, centred, inside the image

    def _cell_box(self, layer: int, head: int) -> tuple[int, int, int, int]:
        """Pixel rectangle ``(left, top, right, bottom)`` of one cell."""
        cols = np.flatnonzero(self._col == head)
        rows = np.flatnonzero(self._row == layer)
        return (self._x0 + int(cols[0]), self._y0 + int(rows[0]), self._x0 + int(cols[-1]), self._y0 + int(rows[-1]))

    def _title_font(self, title: str) -> Any:
        """The title font, smaller when ``title`` would not fit the image at the normal size."""
        from PIL import ImageFont

        width = self._font.getlength(title)
        if width <= self._title_room:
            return self._font
        size = max(6, int(self._font.size * self._title_room / width))
        return ImageFont.truetype(self._font_file, size)

    def write(self, values: npt.ArrayLike, path: str | Path, *, title: str,
              mark: tuple[int, int] | None = None) -> Path:
        """Save ``values`` ``(n_layers, n_heads)``, the head at ``mark`` boxed (default: the best one).

        Args:
            values: ``(n_layers, n_heads)`` scores (NaN for heads not scored: drawn white).
            path: output path: ``.png`` (painted here, fast), ``.svg`` or ``.pdf`` (drawn by matplotlib).
            title: the changing title (relation, direction, count ...).
            mark: ``(layer_pos, head_pos)`` to box; ``None`` boxes the highest value.
        """
        from PIL import Image, ImageDraw

        values = np.asarray(values, dtype=float)
        if values.shape != self.shape:
            raise InputError(f"expected a {self.shape} heatmap, found {values.shape}")
        if Path(path).suffix.lower() != ".png":
            return head_heatmap(values, path, title=f"{title}\n{self.note}" if self.note else title, label=self.label,
                                vmin=self.vmin, vmax=self.vmax, mark=mark)
        if mark is None and np.isfinite(values).any():
            layer, head = np.unravel_index(np.nanargmax(values), values.shape)
            mark = (int(layer), int(head))
        scaled = (values - self.vmin) / max(self.vmax - self.vmin, 1e-12) * 256  # as Normalize + a 256-colour map
        colours = self._lut[np.clip(np.nan_to_num(scaled, nan=0.0), 0, 255).astype(np.intp)]  # (L, H, 3)
        colours[~np.isfinite(values)] = 255
        pixels = self._background.copy()  # (height, width, 3)
        pixels[self._y0 : self._y1, self._x0 : self._x1] = colours[self._row[:, None], self._col[None, :]]
        image = Image.fromarray(pixels)
        draw = ImageDraw.Draw(image)
        if mark is not None:
            draw.rectangle(self._cell_box(*mark), outline=(255, 0, 0), width=2)
        draw.text(self._title_xy, title, font=self._title_font(title), fill=(0, 0, 0), anchor="mm")
        path = Path(path)
        with atomic_file(path) as tmp:
            image.save(tmp, format="PNG", compress_level=1, dpi=(self.dpi, self.dpi))
        return path

    def close(self) -> None:
        """Nothing to free (kept for ``with`` blocks and symmetry with figure-holding writers)."""

    def __enter__(self) -> HeatmapWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
