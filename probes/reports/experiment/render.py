"""Render the experiment report's blocks twice: ``report.md`` (Markdown) and a self-contained ``report.html``.

Both hold the same content (:func:`~probes.reports.experiment.blocks.report_blocks`). The HTML works offline:
inline CSS and script (those of the atlas page), every figure embedded as a ``data:image/png;base64`` URI, links
only to files of the run. In ``report.md`` a table's footer is a list of its notes (where heads were selected,
how intervals were made, how many tests it holds), so no prose paragraph runs long.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from probes.reports.escape import (
    html_text,
    md_document,
    md_heading,
    md_inline_html,
    md_label,
    md_no_html,
    md_text,
    path_href,
)
from probes.reports.experiment.columns import Block, Table
from probes.reports.tables import markdown_table

__all__ = ["report_markdown", "report_html", "slug"]


def slug(text: str) -> str:
    """``text`` as a file-name part or anchor (letters, digits, ``_ . -``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-") or "data"


def _md_cell(text: str) -> str:
    """A Markdown table cell: pipes escaped, no line breaks, no raw HTML (its links and code kept)."""
    return md_no_html(text).replace("|", "\\|")


def _markdown_block(kind: str, value: Any, out: Path) -> str:
    """One block as Markdown."""
    if kind in ("h2", "h3"):
        return f"{'#' * int(kind[1])} {md_heading(value)}\n"
    if kind == "p":
        return f"{md_no_html(value)}\n"
    if kind == "list":
        return "\n".join(f"- {md_no_html(item)}" for item in value) + "\n"
    if kind == "figure":
        caption, path = value
        return f"![{md_label(caption)}]({path_href(Path(os.path.relpath(path, out)))})\n\n*{md_text(caption)}*\n"
    table: Table = value
    if not table.cells:
        return f"#### {md_heading(table.title)}\n\nNot computed: {md_no_html(table.empty)}\n"
    rows = [dict(zip(table.headers, map(_md_cell, cells))) for cells in table.cells]
    body = markdown_table(rows, list(table.headers), headers=[_md_cell(h) for h in table.headers], escape=False)
    notes = "".join(f"- {md_no_html(note)}\n" for note in table.notes)
    return f"#### {md_heading(table.title)}\n\n{body}\n{notes}"


def report_markdown(title: str, blocks: Sequence[Block], out: Path) -> str:
    """``report.md``: the title and every block (the whole through :func:`~probes.reports.escape.md_document`: no
    data can add a link, raw HTML or a hidden character that a block's own escaping missed)."""
    return md_document("\n".join([f"# {md_heading(title)}\n",
                                   *(_markdown_block(kind, value, out) for kind, value in blocks)]))


_STYLE = ("<style>p.footer{color:#555;font-size:.85em;margin-top:.3em}h4{margin:1.2em 0 .4em}"
          "table.sortable td{white-space:normal}</style>")


def _inline(text: str) -> str:
    """Text with Markdown's escapes, inline code and safe links as HTML (everything else escaped): the links that
    :func:`~probes.reports.escape.md_no_html` keeps in ``report.md``, and no other."""
    return md_inline_html(text)


def _sort_key(value: Any) -> str:
    """A cell's ``data-sort``: the number or text; empty for missing values (sorted last)."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return html_text(value)


def _html_table(table: Table) -> str:
    """One table as the atlas page's sortable table, its title above and its footer below."""
    if not table.cells:
        return f"<h4>{html_text(table.title)}</h4><p>Not computed: {_inline(table.empty)}</p>"
    numeric = [all(isinstance(row[k], (int, float)) or row[k] is None for row in table.sort)
               for k in range(len(table.headers))]
    head = "".join(f'<th data-numeric="{int(num)}" title="click to sort">{html_text(h)}</th>'
                   for h, num in zip(table.headers, numeric))
    body = "".join("<tr>" + "".join(f'<td data-sort="{_sort_key(s)}">{_inline(t)}</td>' for t, s in zip(cells, sort))
                   + "</tr>" for cells, sort in zip(table.cells, table.sort))
    return (f'<h4>{html_text(table.title)}</h4><div class="table-wrap"><table class="sortable" '
            f'id="table-{table.key}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
            f'<p class="footer">{_inline(table.footer)}</p>')


def _html_block(kind: str, value: Any) -> str:
    """One block (not a ``h2``) as HTML."""
    from probes.reports.atlas.html import _figures

    if kind == "h3":
        return f"<h3>{html_text(value)}</h3>"
    if kind == "p":
        return f"<p>{_inline(value)}</p>"
    if kind == "list":
        return "<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in value) + "</ul>"
    if kind == "figure":
        caption, path = value
        return _figures({caption: path})
    return _html_table(value)


def report_html(title: str, blocks: Sequence[Block]) -> str:
    """``report.html``: the atlas page's shell (inline CSS and script, no network), one section per ``h2``."""
    from probes.reports.atlas.html import _page

    sections: list[tuple[str, str, str]] = [("overview", "", _STYLE)]
    for kind, value in blocks:
        if kind == "h2":
            sections.append((slug(value).lower(), value, ""))
        else:
            anchor, heading, body = sections[-1]
            sections[-1] = (anchor, heading, body + _html_block(kind, value))
    return _page(title, sections, {"example": None})


