"""Short views of results and run records: a few lines for a REPL, a compact summary and a table's head for a notebook.

A result's default dataclass repr prints every field, arrays and nested results included (50,000-180,000
characters for a real leaderboard or atlas); these views say what the object is (class, layers x heads, the
record's command, model and data), what it holds (each field in a few characters) and how to see more
(``.to_pandas()``, ``.format()``, ``.save(folder)``). Values come from files, so text is made printable and
shortened, and everything in HTML is escaped.

Nothing here imports :mod:`probes.results` or :mod:`probes.run_record` (they call in): objects are read by their
attributes.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["result_text", "result_html", "record_line", "record_html", "spec_names", "shorten", "described",
           "HTML_ROWS", "MORE_METHODS"]

#: Rows of the main table a notebook shows (all of them: ``.to_pandas()``).
HTML_ROWS = 10
#: Columns of the main table a notebook shows before eliding the middle ones.
HTML_COLUMNS = 14
#: The methods a view points to, with the argument each is shown with, in this order (those the object has).
MORE_METHODS: tuple[tuple[str, str], ...] = (
    ("to_pandas", ""), ("format", ""), ("write", "folder"), ("save", "folder"))
#: Characters of the fields' part of a text view (the rest is counted, not shown).
_FIELDS_WIDTH = 340
#: Width of a line of a text view.
_WIDTH = 100
#: Characters of a value in a run record's notebook table.
_CELL_WIDTH = 160


def shorten(value: object, width: int = 60) -> str:
    """``value`` as printable text of at most ``width`` characters (a repr where it has unprintable characters)."""
    text = str(value)
    if not text.isprintable():
        text = repr(text)
    return text if len(text) <= width else text[:width - 3] + "..."


def spec_names(value: Any, depth: int = 3) -> list[str]:
    """The names of data sets or models in a run record's mapping (``data``, ``models``): at each level the
    ``spec``, ``name`` or ``treebank`` string, else those of the values below, without repeats, in order."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Mapping) or depth == 0:
        return []
    for key in ("spec", "name", "treebank"):
        if isinstance(value.get(key), str):
            return [value[key]]
    found: list[str] = []
    for item in value.values():
        found.extend(n for n in spec_names(item, depth - 1) if n not in found)
    return found


def record_line(command: str | None, models: Sequence[str], data: Sequence[str], selection: tuple[Any, Any],
                n_fields: int) -> str:
    """One line about a run: ``probes leaderboard; model M; heads selected on S, reported on D; 21 fields``.

    ``selection``: the leaderboard's selection mode (``"separate"``, ``"split"``, ``"same"`` or None) and the name
    of the data heads were selected on (None: no selection recorded)."""
    parts = [shorten(command or "a run", 40)]
    if models:
        parts.append(("model " if len(models) == 1 else "models ") + _listed(models))
    if data:
        parts.append(_data_text(_listed(data), *selection, data))
    parts.append(_counted(n_fields, "field"))
    return "; ".join(parts)


def _data_text(names: str, mode: Any, selected_on: Any, data: Sequence[str]) -> str:
    """``data D``, or where heads were selected and reported (a leaderboard's selection mode)."""
    if mode == "same":
        return f"heads selected and reported on {names} (optimistic)"
    if mode == "split":
        return f"heads selected on one half of {names}, reported on the other"
    if selected_on and selected_on not in data:
        return f"heads selected on {shorten(selected_on, 60)}, reported on {names}"
    return f"data {names}"


def result_text(obj: Any) -> str:
    """A result's repr: its class and shape, its record, its fields in a few characters, how to see more."""
    lines = [type(obj).__name__ + _grid_text(obj)]
    records = _records(obj)
    lines += [f"  {name}: {text}" for name, text in records.items()]
    lines += _packed(_field_items(obj, skip=set(records)), "  fields: ")
    more = more_text(obj)
    if more:
        lines.append(f"  more: {more}")
    return "\n".join(lines)


def result_html(obj: Any, table: Any | None, summary: str) -> str:
    """A result's notebook view: the text view's facts, then the first :data:`HTML_ROWS` rows of ``table`` (its
    ``.to_pandas()``; None: pandas is missing, and ``summary`` is shown instead), everything escaped."""
    records = _records(obj)
    lines = list(records.items())
    lines += [(label, text) for label, text in (("fields", ", ".join(_field_items(obj, skip=set(records)))),
                                                ("more", more_text(obj))) if text]
    facts = "".join(f"<br>{html.escape(label)}: {html.escape(text)}" for label, text in lines)
    parts = [f'<div class="probes-result"><p><b>{html.escape(type(obj).__name__)}</b>'
             f'{html.escape(_grid_text(obj))}<small>{facts}</small></p>']
    if table is None:
        parts.append(f"<pre>{html.escape(summary)}</pre>")
    else:
        parts.append(f"<p>{_table_caption(table)}</p>")
        parts.append(table.head(HTML_ROWS).to_html(index=False, max_cols=HTML_COLUMNS, border=0, escape=True))
    parts.append("</div>")
    return "".join(parts)


def record_html(line: str, table: Any) -> str:
    """A run record's notebook view: its one ``line``, then ``table`` (``field``, ``value``) with every value
    shortened to :data:`_CELL_WIDTH` characters, escaped."""
    shortened = table.assign(value=[shorten(v, _CELL_WIDTH) for v in table["value"]])
    return (f'<div class="probes-record"><p>{html.escape(line)}</p>'
            f"{shortened.to_html(index=False, border=0, escape=True)}</div>")


def more_text(obj: Any) -> str:
    """The methods that show more of ``obj``: ``.to_pandas(), .format(), .save(folder)`` (those it has)."""
    return ", ".join(f".{name}({arg})" for name, arg in MORE_METHODS if callable(getattr(type(obj), name, None)))


# -- pieces ---------------------------------------------------------------------------------------


def _listed(names: Sequence[str], most: int = 3) -> str:
    shown = ", ".join(shorten(n, 60) for n in names[:most])
    return shown + (f" (+{len(names) - most} more)" if len(names) > most else "")


def _fields(obj: Any) -> Iterable[tuple[dataclasses.Field[Any], Any]]:
    return ((f, getattr(obj, f.name)) for f in dataclasses.fields(obj))


def _records(obj: Any) -> dict[str, str]:
    """``{field: its one-line repr}`` for the run records ``obj`` holds, each shown on a line of its own (without
    the repr's ``RunRecord: `` that the field's name replaces)."""
    return {f.name: shorten(repr(v).removeprefix("RunRecord: "), _WIDTH * 2) for f, v in _fields(obj)
            if type(v).__name__ == "RunRecord" and dataclasses.is_dataclass(v)}


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _grid_text(obj: Any) -> str:
    """``": 6 layers x 12 heads"`` when ``obj`` (or a result it holds) has 0-based ``layers`` and ``heads``."""
    for candidate in (obj, *(v for _, v in _fields(obj) if dataclasses.is_dataclass(v))):
        layers, heads = _attribute(candidate, "layers"), _attribute(candidate, "heads")
        if isinstance(layers, tuple) and isinstance(heads, tuple) and layers and heads:
            return f": {len(layers)} layers x {len(heads)} heads"
        shapes = [_attribute(candidate, name) for name in ("shape_a", "shape_b")]  # two models' heads, matched
        if all(isinstance(s, tuple) and len(s) == 2 for s in shapes):
            return ": " + ", ".join(f"{side} {s[0]} layers x {s[1]} heads" for side, s in zip("AB", shapes))
    return ""


def _attribute(obj: Any, name: str) -> Any:
    """``obj.name``, or None where a property of a partly built object cannot give it."""
    try:
        return getattr(obj, name, None)
    except (AttributeError, TypeError, ValueError):
        return None


def _field_items(obj: Any, skip: set[str]) -> list[str]:
    """``name: value`` for each field that holds something, up to :data:`_FIELDS_WIDTH` characters in all (then
    ``... (N more)``)."""
    shown = [f"{f.name}: {described(v)}" for f, v in _fields(obj) if f.name not in skip and not _empty(v)]
    used = 0
    for k, item in enumerate(shown):
        used += len(item) + 2
        if k and used > _FIELDS_WIDTH:
            return [*shown[:k], f"... ({len(shown) - k} more)"]
    return shown


def _packed(items: Sequence[str], first: str) -> list[str]:
    """``items`` joined by commas into lines of at most :data:`_WIDTH` characters (an item is never split), the
    first line starting with ``first``, the others indented."""
    lines: list[str] = []
    current: list[str] = []
    start = first
    for k, item in enumerate(items):
        piece = item + ("," if k < len(items) - 1 else "")
        if current and len(start) + len(" ".join([*current, piece])) > _WIDTH:
            lines.append(start + " ".join(current))
            current, start = [], "    "
        current.append(piece)
    if current:
        lines.append(start + " ".join(current))
    return lines


def _empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, np.ndarray):
        return False
    return isinstance(value, str | tuple | list | Mapping | set | frozenset) and not value


def described(value: Any) -> str:
    """A field's value in a few characters: ``float64 2x3x40``, ``12 LeaderboardRow``, ``HeadScores``, ``0.25``."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype} {'x'.join(map(str, value.shape)) or 'scalar'}"
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, float | np.floating):
        return f"{float(value):.4g}"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, str):
        return shorten(repr(value), 34)
    if dataclasses.is_dataclass(value):
        return type(value).__name__
    if isinstance(value, tuple | list | set | frozenset):
        kinds = {type(v).__name__ for v in value}
        return f"[{len(value)} {kinds.pop()}]" if len(kinds) == 1 else f"[{_counted(len(value), 'item')}]"
    if isinstance(value, Mapping):
        return "{" + _counted(len(value), "key") + "}"
    return type(value).__name__


def _table_caption(table: Any) -> str:
    """``"The table (.to_pandas()): 40 rows x 12 columns, the first 10 below; layers and heads 1-based."``"""
    rows, columns = table.shape
    first = f", the first {HTML_ROWS} below" if rows > HTML_ROWS else ""
    numbered = "; layers and heads 1-based" if any("layer" in str(c) or "head" in str(c) for c in table.columns) else ""
    return html.escape(f"The table (.to_pandas()): {rows} rows x {columns} columns{first}{numbered}.")
