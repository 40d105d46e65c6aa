"""Writing result tables and run records: CSV, Markdown, JSON, and terminal text.

Every analysis (syntax leaderboard, coreference, bridging, probes) writes its
tables through these functions so that all outputs look alike.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.reports.escape import clean_text, md_cell, md_heading, md_text
from probes.run_record import json_ready

__all__ = ["write_csv", "write_json", "markdown_table", "text_table", "format_value", "format_p", "md_cell",
           "md_heading", "md_text"]


def format_value(value: Any, *, percent: bool = False) -> str:
    """A cell as text: floats with 4 decimals (or as a percentage with 1), NaN as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{100 * value:.1f}" if percent else f"{value:.4f}"
    return str(value)


def format_p(p: float) -> str:
    """A p-value for people: ``<0.001``, three decimals, or ``-`` when there was no test (NaN)."""
    if p != p:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def write_csv(rows: Sequence[Mapping[str, Any]], path: str | Path, columns: Sequence[str] | None = None) -> Path:
    """Write ``rows`` as CSV with a header; floats keep full precision.

    Default columns: every key of any row, in order of first appearance (rows of several kinds,
    e.g. baselines and tested heads, share one file; a key a row lacks is an empty cell).
    """
    from probes.reports.atomic import atomic_open

    path = Path(path)
    columns = list(columns or dict.fromkeys(k for row in rows for k in row))
    with atomic_open(path, "w", newline="", encoding="utf-8") as fh:  # whole or not at all
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows([_csv_cell(row.get(k)) for k in columns] for row in rows)
    return path


def _csv_cell(value: Any) -> Any:
    """NaN and None as empty cells; everything else as ``csv`` writes it."""
    if value is None or (value != value):  # NaN is the only value not equal to itself
        return ""
    return value


def write_json(obj: Any, path: str | Path) -> Path:
    """Write ``obj`` as indented JSON (NaN written as null)."""
    from probes.reports.atomic import write_text

    return write_text(Path(path), json.dumps(json_ready(obj), indent=2, ensure_ascii=False) + "\n")  # whole or not at all


def markdown_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, headers: Sequence[str] | None = None,
    percent: Sequence[str] = (), escape: bool = True,
) -> str:
    """A GitHub Markdown table of ``rows``; columns in ``percent`` are shown as percentages.

    Headers and cells are plain text, escaped by :func:`~probes.reports.escape.md_cell` (a ``|``, raw HTML or a
    line break in a word, id or label stays inside its cell as text; ordinary text is unchanged). With
    ``escape=False`` they are Markdown already made safe by the caller (e.g. a link built from data)."""
    cell = md_cell if escape else clean_text
    headers = [cell(h) for h in (headers or columns)]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        cells = [cell(format_value(row.get(c), percent=c in percent)) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def text_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, headers: Sequence[str] | None = None,
    percent: Sequence[str] = (),
) -> str:
    """A fixed-width table for the terminal; numbers right-aligned."""
    headers = list(headers or columns)
    cells = [[format_value(row.get(c), percent=c in percent) for c in columns] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(_looks_numeric(r[i]) for r in cells) and bool(cells) for i in range(len(headers))]

    def fmt(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([fmt(headers), "  ".join("-" * w for w in widths)] + [fmt(r) for r in cells]) + "\n"


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text == "-"
    return True


def flat_row(fields: Mapping[str, Any], one_based: Sequence[str] = ("layer", "head"),
             keep: Any = None) -> dict[str, Any]:
    """One CSV row of a table row's ``fields``: the 0-based ``one_based`` fields shifted to 1-based (a value equal
    to ``keep`` left as it is), dict fields flattened to ``field_key`` columns, tuples and lists joined by ``;``."""
    flat: dict[str, Any] = {}
    for key, value in fields.items():
        if key in one_based and not (keep is not None and value == keep):
            value = int(value) + 1
        if isinstance(value, dict):
            flat.update({f"{key}_{k}": v for k, v in value.items()})
        elif isinstance(value, (tuple, list)):
            flat[key] = ";".join(map(str, value))
        else:
            flat[key] = value
    return flat
