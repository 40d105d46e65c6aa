"""The head atlas as one self-contained HTML file, and the one-sentence head view on its own.

``atlas.html`` works offline: the CSS and the JavaScript are inline, the figures are embedded
as base64 PNG, and the example sentence's maps are embedded as JSON (weights quantised to
bytes, base64) that inline JavaScript draws on canvases. Sections: a summary, the figures, a
sortable table of the heads, a card per head (its numbers and a mini map of the example
sentence) and an interactive head view of the example sentence modelled on bertviz's: pick a
layer and a head, lines go from each token on the left to the tokens it attends on the right
(opacity = weight), hovering over a token shows only its lines. Layers and heads are 1-based
in every label.

Drawing the per-head maps in the browser (instead of one matplotlib figure per head) keeps the
atlas cheap for 144 or 1,024 heads: the page is written in milliseconds.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.errors import InputError
from probes.extraction.attention import TokenAttention
from probes.reports.atlas.figures import pool_to_words
from probes.reports.escape import clean_text, html_text, script_json

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["ExampleMaps", "write_atlas_html", "write_head_view", "atlas_html", "head_view_html"]

@dataclass(frozen=True)
class ExampleMaps:
    """One sentence's maps for the head view and the cards.

    Attributes:
        weights: ``(n_layers, n_heads, n, n)`` attention, rows attend from, columns to (token or word level).
        labels: the ``n`` tokens or words.
        name: what the sentence is (e.g. its id), shown in the page.
        level: ``"token"`` or ``"word"``.
    """

    weights: npt.NDArray[np.floating[Any]]
    labels: tuple[str, ...]
    name: str = ""
    level: str = "token"

    @classmethod
    def from_tokens(cls, tokens: TokenAttention, *, name: str = "", level: str = "token",
                    words: Sequence[str] | None = None) -> ExampleMaps:
        """The example from the extractor's token maps: as they are, or pooled to words (``level="word"``,
        Clark §4.1 pooling by :func:`~probes.reports.atlas.figures.pool_to_words`, labelled by ``words`` if given)."""
        if level == "token":
            return cls(np.asarray(tokens.weights, dtype=np.float32), tuple(tokens.tokens), name=name, level=level)
        if level != "word":
            raise InputError(f"example level: expected 'token' or 'word'; found {level!r}")
        weights, labels = pool_to_words(tokens.weights, tokens.word_of, tokens.tokens, words)
        return cls(weights, labels, name=name, level=level)

    def __post_init__(self) -> None:
        shape = np.shape(self.weights)
        if len(shape) != 4 or shape[2:] != (len(self.labels), len(self.labels)):
            raise InputError(f"example maps: expected shape (layers, heads, {len(self.labels)}, {len(self.labels)}); "
                             f"found {shape}")


def _encode_maps(example: ExampleMaps) -> dict[str, Any]:
    """The maps as JSON-ready data: weights as bytes (round(255 * w), row-major L, H, n, n) in base64."""
    weights = np.clip(np.nan_to_num(np.asarray(example.weights, dtype=np.float32)), 0.0, 1.0)
    quantised = np.rint(weights * 255).astype(np.uint8)
    n_layers, n_heads, n, _ = quantised.shape
    return {"layers": n_layers, "heads": n_heads, "n": n, "labels": list(example.labels), "name": example.name,
            "level": example.level, "maps": base64.b64encode(quantised.tobytes()).decode("ascii")}


def _cell(value: Any) -> tuple[str, str]:
    """``(text shown, sort key)`` of one table value; missing values show a dash and sort last."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "\u2013", ""
    if isinstance(value, (bool, np.bool_)):
        return ("yes" if value else "no"), str(int(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value)), str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.3f}", repr(float(value))
    return html_text(value), html_text(value)


def _table(heads: pd.DataFrame) -> str:
    """The sortable table: one row per head, every column of ``heads``; numeric columns sort as numbers."""
    columns = list(heads.columns)
    numeric = [heads[c].dtype.kind in "biuf" for c in columns]
    head_row = "".join(f'<th data-numeric="{int(num)}" title="click to sort">{html_text(c)}</th>'
                       for c, num in zip(columns, numeric))
    rows = []
    for record in heads.itertuples(index=False, name=None):
        cells = "".join('<td data-sort="{1}">{0}</td>'.format(*_cell(v)) for v in record)
        rows.append(f"<tr>{cells}</tr>")
    return (f'<table id="heads-table" class="sortable"><thead><tr>{head_row}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def _fmt(row: Mapping[str, Any], column: str) -> str:
    """One value of a card, as the table shows it (a dash where the column is absent or empty)."""
    return _cell(row.get(column))[0]


def _card_facts(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` lines of one head's card; lines whose columns are all absent are left out."""
    facts = []
    if "pattern" in row:
        facts.append(("pattern", _fmt(row, "pattern")))
    for label, columns in (("to cls / sep / . ,", ("to_cls", "to_sep", "to_punct")),
                           ("to self / next / prev", ("to_self", "to_next", "to_prev")),
                           ("entropy / first row", ("entropy", "entropy_first")),
                           ("confidence", ("confidence",))):
        if any(c in row for c in columns):
            facts.append((label, " / ".join(_fmt(row, c) for c in columns)))
    roles = []
    positional = row.get("positional")
    if isinstance(positional, (int, np.integer)) and positional != 0:
        roles.append(f"positional {int(positional):+d}")
    roles += [name for name in ("rare_word", "syntactic") if row.get(name) is True or row.get(name) is np.True_]
    if any(c in row for c in ("positional", "rare_word", "syntactic")):
        facts.append(("roles", ", ".join(r.replace("_", "-") for r in roles) or "none"))
    scores = [c for c in ("previous_token_score", "duplicate_token_score", "induction_score") if c in row]
    if scores:
        facts.append(("prev / dup. / induction", " / ".join(_fmt(row, c) for c in scores)))
    if "head_types" in row:
        facts.append(("head types", _fmt(row, "head_types").replace("_", "-")))
    if "best_relation" in row:
        facts.append(("best relation", f"{_fmt(row, 'best_relation')} {_fmt(row, 'best_accuracy')} "
                                       f"(margin {_fmt(row, 'best_margin')})"))
    for column, label in (("coref_accuracy", "coref. accuracy"), ("cluster", "cluster")):
        if column in row:
            facts.append((label, _fmt(row, column)))
    return facts


def _cards(heads: pd.DataFrame, has_maps: bool) -> str:
    """A card per head: ``layer-head`` (1-based), its numbers, and a canvas for its mini map of the example."""
    cards = []
    for row in heads.to_dict("records"):
        layer, head = int(row["layer"]), int(row["head"])
        facts = "".join(f"<dt>{html_text(label)}</dt><dd>{text}</dd>" for label, text in _card_facts(row))
        canvas = (f'<canvas class="mini" data-layer="{layer - 1}" data-head="{head - 1}" '
                  f'title="attention of head {layer}-{head} on the example; click for the head view"></canvas>'
                  if has_maps else "")
        cards.append(f'<div class="card" id="head-{layer}-{head}"><h3>head {layer}-{head}</h3>'
                     f'<div class="card-body">{canvas}<dl>{facts}</dl></div></div>')
    return f'<div class="cards">{"".join(cards)}</div>'


def _figures(figures: Mapping[str, str | Path | bytes]) -> str:
    """Each figure as an embedded base64 PNG with its caption."""
    parts = []
    for caption, figure in figures.items():
        data = figure if isinstance(figure, bytes) else Path(figure).read_bytes()
        if not data.startswith(b"\x89PNG"):
            raise InputError(f"figure {caption!r}: expected PNG data; found {data[:8]!r}")
        encoded = base64.b64encode(data).decode("ascii")
        parts.append(f'<figure><img alt="{html_text(caption)}" src="data:image/png;base64,{encoded}">'
                     f"<figcaption>{html_text(caption)}</figcaption></figure>")
    return "".join(parts)


def _summary(summary: Mapping[str, Any] | Sequence[tuple[str, Any]]) -> str:
    """The summary as a definition list."""
    items = summary.items() if isinstance(summary, Mapping) else summary
    rows = "".join(f"<dt>{html_text(k)}</dt><dd>{html_text(v)}</dd>" for k, v in items)
    return f'<dl class="summary">{rows}</dl>'


def _head_view_section(example: ExampleMaps) -> str:
    """The interactive head view's controls and canvases (drawn by the inline script)."""
    name = html_text(example.name)
    return (f'<p>Example: <b>{name}</b> ({html_text(example.level)} level, {len(example.labels)} positions). '
            "Choose a layer and a head (both 1-based). Each token on the left attends to the tokens on the right; "
            "a line's opacity is the weight. Hover over a token to see only its lines.</p>"
            '<div class="controls"><label>layer <select id="hv-layer"></select></label> '
            '<label>head <select id="hv-head"></select></label> <span id="hv-status"></span></div>'
            '<div class="hv"><canvas id="hv-canvas"></canvas><figure class="hv-matrix"><canvas id="hv-matrix"></canvas>'
            "<figcaption>the same head as a matrix: rows attend from, columns to; darker = more "
            "(white 0, dark blue 1)</figcaption></figure></div>")


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:1250px;
 padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
nav a{margin-right:1em}
dl.summary{display:grid;grid-template-columns:max-content auto;gap:.2em 1.2em}dl.summary dt{font-weight:600}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eee}figcaption{color:#555;font-size:.9em}
.table-wrap{max-height:32em;overflow:auto;border:1px solid #ddd}
table.sortable{border-collapse:collapse;font-size:.8em;white-space:nowrap}
table.sortable th{position:sticky;top:0;background:#f3f3f3;cursor:pointer;padding:.3em .5em;text-align:left}
table.sortable th.asc::after{content:" \\25B2"}table.sortable th.desc::after{content:" \\25BC"}
table.sortable td{padding:.15em .5em;border-top:1px solid #eee}table.sortable tr:hover td{background:#f6f9ff}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(390px,1fr));gap:.7em}
.card{border:1px solid #ddd;border-radius:6px;padding:.4em .6em;font-size:.78em;min-width:0;overflow:hidden}
.card h3{margin:.1em 0 .3em;font-size:1.1em}.card-body{display:flex;gap:.6em;align-items:flex-start}
.card dl{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:0 .6em;margin:0}.card dt{color:#555}
.card dd{margin:0;overflow-wrap:normal;word-break:normal;min-width:0}
canvas.mini{width:110px;height:110px;image-rendering:pixelated;border:1px solid #ccc;cursor:pointer;flex:none}
.controls{margin:.5em 0}.hv{display:flex;gap:1.5em;align-items:flex-start;flex-wrap:wrap}
#hv-matrix{image-rendering:pixelated;border:1px solid #ccc}.hv-matrix{margin:0;max-width:420px}
"""

_SCRIPT = r"""
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("atlas-data").textContent);
  const ex = data.example;
  const atlas = {ready: false, drawn: 0};
  window.atlas = atlas;
  if (ex) {
    const raw = atob(ex.maps), bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    const n = ex.n, size = n * n;
    const offset = (l, h) => (l * ex.heads + h) * size;
    const weight = (l, h, i, j) => bytes[offset(l, h) + i * n + j] / 255;
    // a map as pixels: white (0) to dark blue (1)
    function paintMap(canvas, l, h) {
      canvas.width = n; canvas.height = n;
      const ctx = canvas.getContext("2d"), img = ctx.createImageData(n, n), base = offset(l, h);
      for (let k = 0; k < size; k++) {
        const w = bytes[base + k] / 255;
        img.data[4 * k] = Math.round(255 - 247 * w); img.data[4 * k + 1] = Math.round(255 - 207 * w);
        img.data[4 * k + 2] = Math.round(255 - 148 * w); img.data[4 * k + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
    }
    atlas.paintMap = paintMap;
    document.querySelectorAll("canvas.mini").forEach(function (canvas) {
      paintMap(canvas, +canvas.dataset.layer, +canvas.dataset.head);
      atlas.drawn++;
      canvas.addEventListener("click", function () { atlas.show(+canvas.dataset.layer, +canvas.dataset.head, true); });
    });
    const hv = document.getElementById("hv-canvas");
    if (hv) setUpHeadView(hv);
    function setUpHeadView(canvas) {
      const layerSel = document.getElementById("hv-layer"), headSel = document.getElementById("hv-head");
      const matrix = document.getElementById("hv-matrix"), status = document.getElementById("hv-status");
      for (let l = 0; l < ex.layers; l++) layerSel.add(new Option(String(l + 1), String(l)));
      for (let h = 0; h < ex.heads; h++) headSel.add(new Option(String(h + 1), String(h)));
      const rowH = 18, top = 24, colW = 150, gap = 180;
      const ctx = canvas.getContext("2d");
      ctx.font = "13px sans-serif";
      let textW = 40;
      ex.labels.forEach(function (t) { textW = Math.max(textW, ctx.measureText(t).width); });
      const leftX = textW + 12, rightX = leftX + gap, width = rightX + textW + 20;
      canvas.width = width; canvas.height = top + n * rowH + 10;
      let focus = null;  // {side: "left"|"right", index}
      function draw() {
        const l = +layerSel.value, h = +headSel.value;
        ctx.clearRect(0, 0, canvas.width, canvas.height);
        ctx.font = "13px sans-serif"; ctx.textBaseline = "middle";
        ctx.fillStyle = "#555"; ctx.textAlign = "center";
        ctx.fillText("layer " + (l + 1) + ", head " + (h + 1) + " (1-based)", (leftX + rightX) / 2, 10);
        let lines = 0;
        ctx.lineWidth = 2;
        for (let i = 0; i < n; i++) {
          for (let j = 0; j < n; j++) {
            const w = weight(l, h, i, j);
            if (w <= 0) continue;
            if (focus && !((focus.side === "left" && focus.index === i) || (focus.side === "right" && focus.index === j))) continue;
            ctx.strokeStyle = "rgba(31,119,180," + w.toFixed(3) + ")";
            ctx.beginPath(); ctx.moveTo(leftX + 4, top + i * rowH); ctx.lineTo(rightX - 4, top + j * rowH); ctx.stroke();
            lines++;
          }
        }
        for (let k = 0; k < n; k++) {
          const y = top + k * rowH;
          ctx.fillStyle = focus && focus.side === "left" && focus.index === k ? "#d62728" : "#222";
          ctx.textAlign = "right"; ctx.fillText(ex.labels[k], leftX, y);
          ctx.fillStyle = focus && focus.side === "right" && focus.index === k ? "#d62728" : "#222";
          ctx.textAlign = "left"; ctx.fillText(ex.labels[k], rightX, y);
        }
        paintMap(matrix, l, h);
        matrix.style.width = matrix.style.height = Math.min(400, Math.max(200, n * 12)) + "px";
        canvas.dataset.lines = String(lines);
        status.textContent = lines + " lines drawn";
        return lines;
      }
      canvas.addEventListener("mousemove", function (e) {
        const r = canvas.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
        const k = Math.round((y - top) / rowH);
        const next = k >= 0 && k < n ? {side: x < (leftX + rightX) / 2 ? "left" : "right", index: k} : null;
        if (JSON.stringify(next) !== JSON.stringify(focus)) { focus = next; draw(); }
      });
      canvas.addEventListener("mouseleave", function () { focus = null; draw(); });
      layerSel.addEventListener("change", draw); headSel.addEventListener("change", draw);
      atlas.show = function (l, h, scroll) {
        layerSel.value = String(l); headSel.value = String(h); focus = null;
        const lines = draw();
        if (scroll) canvas.scrollIntoView({behavior: "smooth", block: "center"});
        return lines;
      };
      atlas.focus = function (side, index) { focus = side ? {side: side, index: index} : null; return draw(); };
      draw();
    }
  }
  // sortable table: click a header, click again to reverse; numbers sort as numbers, blanks last
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, col) {
      th.addEventListener("click", function () {
        const asc = !th.classList.contains("asc"), numeric = th.dataset.numeric === "1";
        table.querySelectorAll("th").forEach(function (o) { o.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        const body = table.tBodies[0], rows = Array.from(body.rows);
        const key = function (r) { return r.cells[col].dataset.sort; };
        rows.sort(function (a, b) {
          const x = key(a), y = key(b);
          if (x === "" || y === "") return (x === "") - (y === "");
          const c = numeric ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  atlas.ready = true;
})();
"""


def _page(title: str, sections: Sequence[tuple[str, str, str]], data: Mapping[str, Any]) -> str:
    """A whole page: ``sections`` are ``(anchor, heading, body html)``; ``data`` is embedded as JSON for the script
    (through :func:`~probes.reports.escape.script_json`, so no text in it can end or open a script element)."""
    payload = script_json(data)
    nav = " ".join(f'<a href="#{html_text(a)}">{html_text(h)}</a>' for a, h, _ in sections) \
        if len(sections) > 1 else ""
    body = "".join(f'<section id="{html_text(a)}">' + (f"<h2>{html_text(h)}</h2>" if h else "")
                   + f"{content}</section>" for a, h, content in sections)
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>{html_text(title)}</title><style>{_CSS}</style></head>'
            f"<body><h1>{html_text(title)}</h1><nav>{nav}</nav>{body}"
            f'<script type="application/json" id="atlas-data">{payload}</script><script>{_SCRIPT}</script>'
            f"</body></html>")
    return clean_text(page)  # no hidden character from a caller's body html either (none in the page's own text)


def atlas_html(heads: pd.DataFrame, *, title: str, summary: Mapping[str, Any] | Sequence[tuple[str, Any]] = (),
               figures: Mapping[str, str | Path | bytes] | None = None, example: ExampleMaps | None = None,
               notes: Sequence[str] = ()) -> str:
    """The text of ``atlas.html`` (see :func:`write_atlas_html`)."""
    for name in ("layer", "head"):
        if name not in heads.columns:
            raise InputError(f"the heads table needs a 1-based {name!r} column; found {list(heads.columns)}")
    if example is not None:
        too_big = heads[(heads["layer"] > example.weights.shape[0]) | (heads["head"] > example.weights.shape[1])]
        if len(too_big):
            raise InputError(f"example maps cover {example.weights.shape[:2]} layers x heads; the table has head "
                             f"{int(too_big['layer'].iloc[0])}-{int(too_big['head'].iloc[0])}")
    note_html = "".join(f"<p>{html_text(n)}</p>" for n in notes)
    sections = [("summary", "Summary", _summary(summary) + note_html
                 + "<p>Layers and heads are numbered from 1 everywhere in this page (head <i>l-h</i> is head "
                   "<i>h</i> of layer <i>l</i>).</p>")]
    if figures:
        sections.append(("figures", "Figures", _figures(figures)))
    sections.append(("table", "Heads", '<p>Click a column header to sort.</p><div class="table-wrap">'
                     + _table(heads) + "</div>"))
    sections.append(("cards", "A card per head", ("<p>Each card's map is the head's attention on the example "
                     "sentence (rows attend from, columns to; darker = more). Click a map for the head view. "
                     "Attention to the start special ([CLS]), the end special ([SEP]) and "
                     "&quot;.&quot; &quot;,&quot;; to the token itself, the next and the previous one; "
                     "entropy in nats over all rows and over the first special's row.</p>"
                     if example is not None else "") + _cards(heads, example is not None)))
    if example is not None:
        sections.append(("head-view", "Head view", _head_view_section(example)))
    data = {"example": _encode_maps(example) if example is not None else None}
    return _page(title, sections, data)


def write_atlas_html(path: str | Path, heads: pd.DataFrame, *, title: str,
                     summary: Mapping[str, Any] | Sequence[tuple[str, Any]] = (),
                     figures: Mapping[str, str | Path | bytes] | None = None, example: ExampleMaps | None = None,
                     notes: Sequence[str] = ()) -> Path:
    """Write the self-contained ``atlas.html`` (no network: inline CSS/JS, PNG figures and maps embedded).

    Args:
        path: the file to write.
        heads: one row per head with 1-based ``layer`` and ``head`` and any other columns (all go in the table;
            the atlas's columns, as far as present, on the cards: see :func:`_card_facts`).
        title: page title (say which model on which data).
        summary: ``label -> value`` lines for the summary section.
        figures: ``caption -> PNG`` (a path or the bytes), embedded in order.
        example: one sentence's maps, for each card's mini map and the head view.
        notes: paragraphs added to the summary.
    """
    from probes.reports.atomic import write_text  # whole or not at all

    return write_text(Path(path), atlas_html(heads, title=title, summary=summary, figures=figures, example=example,
                                             notes=notes))


def head_view_html(weights: npt.ArrayLike, labels: Sequence[str], *, title: str = "Head view", name: str = "",
                   level: str = "token") -> str:
    """The text of the standalone head view (see :func:`write_head_view`)."""
    example = ExampleMaps(np.asarray(weights, dtype=np.float32), tuple(labels), name=name, level=level)
    return _page(title, [("head-view", "", _head_view_section(example))],
                 {"example": _encode_maps(example)})


def write_head_view(path: str | Path, weights: npt.ArrayLike, labels: Sequence[str], *, title: str = "Head view",
                    name: str = "", level: str = "token") -> Path:
    """Write one sentence's self-contained head view (bertviz's head view, offline): pick a layer and a head.

    Args:
        weights: ``(n_layers, n_heads, n, n)`` maps of the sentence (rows attend from, columns to).
        labels: the ``n`` tokens (or words, with ``level="word"``).
        name: what the sentence is (its id), shown above the view.
    """
    from probes.reports.atomic import write_text  # whole or not at all

    return write_text(Path(path), head_view_html(weights, labels, title=title, name=name, level=level))
