"""The experiment report's tables: :class:`Table`, the columns each table of a
:class:`~probes.compare.types.Comparison` is printed with (cells through :func:`~probes.reports.experiment.text.fmt`,
layers and heads 1-based), the CSV rows, and the tables that hold the numbers behind the short answers (each
question's tests, where each role peaks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from probes.compare.spread import STRUCTURE_SILHOUETTE
from probes.compare.tests import TWIN_KINDS, twin_labels, verdict_of
from probes.compare.types import TABLES, Comparison
from probes.heads.naming import head_name
from probes.reports.escape import md_literal
from probes.reports.experiment.text import ALPHA, TEST_KINDS, fmt, footer_notes, peaks
from probes.reports.tables import flat_row

__all__ = ["Table", "Block", "table_cells", "csv_rows", "question_tests", "peaks_table"]


@dataclass(frozen=True)
class Table:
    """One table of the report: ``key`` (a :data:`~probes.compare.types.TABLES` name or ``units``), its title,
    column headers, the text of each cell, a sort key per cell (the raw number, for the HTML table), the notes
    under it (where heads were selected, how intervals were made, how many tests it holds: a list in ``report.md``,
    one line in ``report.html``) and, for an empty table, the reason it is empty."""

    key: str
    title: str
    headers: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    sort: tuple[tuple[Any, ...], ...]
    notes: tuple[str, ...] = ()
    empty: str = ""

    @property
    def footer(self) -> str:
        """The notes in one line."""
        return "; ".join(n.rstrip(".") for n in self.notes) + "." if self.notes else ""


#: One block of the report: ("h2" | "h3" | "p" | "list", text) or ("figure", (caption, path)) or ("table", Table)
Block = tuple[str, Any]

Column = tuple[str, Callable[[Any], tuple[str, Any]]]


def _num(kind: str, name: str, low: str | None = None, high: str | None = None) -> Callable[[Any], tuple[str, Any]]:
    """A column of field ``name`` formatted by :func:`fmt` as ``kind`` (with the interval fields, if named)."""
    def cell(row: Any) -> tuple[str, Any]:
        value = getattr(row, name)
        if low is None or high is None:
            return fmt(value, kind), value
        return fmt(value, kind, getattr(row, low), getattr(row, high)), value
    return cell


def _text(name: str) -> Callable[[Any], tuple[str, Any]]:
    """A column of field ``name`` as text (``True``/``False`` as yes/no; data's Markdown characters escaped, as
    the cells are Markdown that :func:`_md_cell` and :func:`_inline` render)."""
    def cell(row: Any) -> tuple[str, Any]:
        value = getattr(row, name)
        if isinstance(value, bool):
            return ("yes" if value else "no"), int(value)
        return md_literal(value), str(value)
    return cell


def _share(name: str) -> Callable[[Any], tuple[str, Any]]:
    """A count with its share of the row's heads: ``33 (23%)``."""
    def cell(row: Any) -> tuple[str, Any]:
        count = getattr(row, name)
        return f"{fmt(count, 'count')} ({fmt(count / row.n_heads if row.n_heads else float('nan'), 'fraction')})", count
    return cell


def _of_heads(name: str) -> Callable[[Any], tuple[str, Any]]:
    """A count with the row's heads and its share of them: ``9 of 24 (38%)``."""
    def cell(row: Any) -> tuple[str, Any]:
        count = getattr(row, name)
        share = fmt(count / row.n_heads if row.n_heads else float("nan"), "fraction")
        return f"{fmt(count, 'count')} of {fmt(row.n_heads, 'count')} ({share})", count
    return cell


def _loss_range(row: Any) -> tuple[str, Any]:
    """What a redundancy row's tolerance is a share of: the loss range, full model to every head ablated."""
    if getattr(row, "rule", "range") != "range":
        return "of the unpruned loss", None
    full, ablated = float(getattr(row, "full_loss", float("nan"))), float(getattr(row, "ablated_loss", float("nan")))
    return f"{fmt(full)} to {fmt(ablated)}", full


def _mapping(name: str, kind: str, skip: Sequence[str] = ()) -> Callable[[Any], tuple[str, Any]]:
    """A dict field as ``key value, key value`` (values formatted as ``kind``; counts sorted largest first)."""
    def cell(row: Any) -> tuple[str, Any]:
        items = [(k, v) for k, v in getattr(row, name).items() if k not in skip]
        if kind == "count":
            items.sort(key=lambda kv: -kv[1])
        return ", ".join(f"{k} {fmt(v, kind)}" for k, v in items) or "-", len(items)
    return cell


def _head(row: Any) -> tuple[str, Any]:
    """The head as ``layer-head``, 1-based."""
    return head_name(row.layer, row.head), row.layer * 10_000 + row.head


def _layer(row: Any) -> tuple[str, Any]:
    """The layer, 1-based."""
    return str(row.layer + 1), row.layer + 1


def _kind(models: Mapping[str, Mapping[str, Any]]) -> Callable[[Any], tuple[str, Any]]:
    """The row's model kind (trained, random-init; a twin that is not a default one says which kind)."""
    labels = {m: label for m, label in twin_labels(models).items() if label != TWIN_KINDS["default"]}

    def cell(row: Any) -> tuple[str, Any]:
        kind = str(models.get(row.model, {}).get("kind", "-"))
        kind += f" ({labels[row.model]})" if row.model in labels else ""
        return kind, kind
    return cell


def _test_value(row: Any) -> tuple[str, Any]:
    """A test's difference and interval, formatted by its question's kind."""
    kind = TEST_KINDS.get(row.question, "value")
    return fmt(row.value, kind, row.low, row.high), row.value


def _columns(table: str, comparison: Comparison) -> list[Column]:
    """The report's columns of one table of the Comparison."""
    kind = _kind(comparison.models)
    columns: dict[str, list[Column]] = {
        "best_heads": [("model", _text("model")), ("data", _text("data")), ("relation", _text("relation")),
                       ("direction", _text("direction")), ("head (1-based)", _head), ("depth", _num("depth", "depth")),
                       ("accuracy [95% CI]", _num("value", "accuracy", "ci_low", "ci_high")),
                       ("best baseline", _num("value", "baseline_accuracy")),
                       ("margin [95% CI]", _num("value", "margin", "margin_ci_low", "margin_ci_high")),
                       ("Holm p", _num("p", "p_adjusted")), ("beats baseline", _text("beats_baseline")),
                       ("n", _num("count", "count"))],
        "head_kinds": [("model", _text("model")), ("kind", kind), ("data", _text("data")),
                       ("heads", _num("count", "n_heads")), ("specialised", _share("specialised")),
                       ("positional", _share("positional")), ("broad", _share("broad"))],
        "spread": [("model", _text("model")), ("kind", kind), ("data", _text("data")),
                   ("mean JS per row [95% CI]", _num("value", "value", "low", "high")),
                   ("sd of pairs", _num("value", "sd")),
                   ("clusters [95% CI]", _num("count", "n_clusters", "n_clusters_low", "n_clusters_high")),
                   ("silhouette", _num("value", "silhouette")),
                   (f"structure (silhouette >= {STRUCTURE_SILHOUETTE:g})", _text("structure")),
                   ("sentences", _num("count", "n_items")),
                   ("draws", _num("count", "n_resamples"))],
        "specialisation": [("model", _text("model")), ("kind", kind), ("data", _text("data")),
                           ("specialised [95% CI]", _num("fraction", "fraction", "low", "high")),
                           ("heads", _of_heads("n_specialised")), ("tests", _num("count", "n_tests")),
                           ("per relation", _mapping("per_relation", "count"))],
        "redundancy": [("model", _text("model")), ("kind", kind), ("data", _text("data")),
                       ("objective", _text("objective")),
                       ("tolerance (of the loss range)", _num("fraction", "tolerance")),
                       ("loss range (full, every head ablated)", _loss_range),
                       ("importance order", lambda r: (fmt(r.removable.get("importance"), "fraction"),
                                                       r.removable.get("importance"))),
                       ("other orders", _mapping("removable", "fraction", skip=("importance",))),
                       ("random median [min, max]", _num("fraction", "random_median", "random_low", "random_high")),
                       ("area: importance", lambda r: (fmt(r.area.get("importance")), r.area.get("importance"))),
                       ("area: random median [min, max]",
                        _num("value", "random_area_median", "random_area_low", "random_area_high")),
                       ("random orders", _num("count", "n_random")),
                       ("rho with margin [95% CI]", _num("value", "rho_margin", "rho_margin_low", "rho_margin_high")),
                       ("rho with confidence [95% CI]",
                        _num("value", "rho_confidence", "rho_confidence_low", "rho_confidence_high"))],
        "consistency": [("model", _text("model")), ("kind", kind), ("first", _text("first")),
                        ("second", _text("second")), ("relations", _num("count", "n_relations")),
                        ("same head", _num("fraction", "same_head")),
                        ("rho [95% CI]", _num("value", "rho", "low", "high")),
                        ("corrected rho [95% CI]", _num("value", "rho_corrected", "corrected_low", "corrected_high")),
                        ("reliability first, second",
                         lambda r: (f"{fmt(r.reliability_first)}, {fmt(r.reliability_second)}", r.reliability_first)),
                        ("capped", lambda r: (f"{fmt(r.n_capped, 'count')} of {fmt(r.n_corrected, 'count')}",
                                              r.n_capped))],
        "tests": [("question", lambda r: (r.question.upper(), r.question)), ("test", _text("name")),
                  ("against", lambda r: (r.twins or "-", r.twins)),
                  ("difference [95% CI]", _test_value), ("p", _num("p", "p_value")),
                  ("Holm p", _num("p", "p_adjusted")), ("significant", _text("significant")),
                  ("verdict", lambda r: (verdict_of(r), verdict_of(r)))],
    }
    return columns[table]


def _layer_columns(comparison: Comparison) -> list[Column]:
    """The columns of the per-layer table: every pattern's share, the roles' shares and the mean confidence."""
    depth: dict[tuple[str, str], int] = {}
    for row in comparison.layers:
        depth[(row.model, row.data)] = max(depth.get((row.model, row.data), 0), row.layer)
    names = list(dict.fromkeys(k for r in comparison.layers for k in r.patterns))

    def rel_depth(row: Any) -> tuple[str, Any]:
        last = depth[(row.model, row.data)]
        value = row.layer / last if last else 0.0
        return fmt(value, "depth"), value

    def pattern(name: str) -> Column:
        return (name, lambda r: (fmt(r.patterns.get(name), "fraction"), r.patterns.get(name)))

    return [("model", _text("model")), ("data", _text("data")), ("layer (1-based)", _layer), ("depth", rel_depth),
            ("heads", _num("count", "n_heads")), *[pattern(n) for n in names],
            ("positional", _num("fraction", "positional")), ("rare-word", _num("fraction", "rare_word")),
            ("specialised", _num("fraction", "specialised")), ("broad", _num("fraction", "broad")),
            ("confidence", _num("value", "confidence"))]


def table_cells(table: str, comparison: Comparison) -> Table:
    """One table of the Comparison as the report prints it (cells through :func:`fmt`), with its footer or,
    when it has no rows, the reason (``comparison.missing[table]``)."""
    columns = _layer_columns(comparison) if table == "layers" else _columns(table, comparison)
    rows = list(getattr(comparison, table))
    if table == "best_heads":
        order = {m: k for k, m in enumerate(comparison.models)}
        relations = {r: k for k, r in enumerate(dict.fromkeys(r.relation for r in rows))}
        rows.sort(key=lambda r: (r.data, relations[r.relation], order.get(r.model, len(order))))
    methods: tuple[str, ...] = ()
    if table == "tests":
        method, methods = _methods(rows)
        columns.insert(3, ("method", method))
    pairs = [[fn(row) for _, fn in columns] for row in rows]
    empty = "" if rows else comparison.missing.get(table, "no rows were computed (no reason recorded)")
    notes = (*footer_notes(table, comparison), *methods) if rows else ()
    return Table(table, TABLES[table], tuple(h for h, _ in columns), tuple(tuple(t for t, _ in p) for p in pairs),
                 tuple(tuple(s for _, s in p) for p in pairs), notes, empty)


def _methods(rows: Sequence[Any]) -> tuple[Callable[[Any], tuple[str, Any]], tuple[str, ...]]:
    """The tests' methods, each written once in the notes under the table: a column naming each row's
    (``method 1``, ``method 2`` ...) and the notes (``method 1: ...``)."""
    methods = list(dict.fromkeys(r.method for r in rows))
    names = {m: f"method {k + 1}" for k, m in enumerate(methods)}
    return (lambda r: (names[r.method], r.method)), tuple(f"{names[m]}: {md_literal(m)}" for m in methods)


def csv_rows(table: str, comparison: Comparison) -> list[dict[str, Any]]:
    """The rows of one table for ``tables/<table>.csv``: every field, full precision, layers and heads 1-based
    (``head`` also as ``head_name``), dict fields flattened to ``field_key`` columns, tuples joined by ``;``."""
    out = []
    for row in getattr(comparison, table):
        flat = flat_row(asdict(row))
        if table == "best_heads":
            flat["head_name"] = head_name(row.layer, row.head)
        out.append(flat)
    return out




def question_tests(question: str, comparison: Comparison) -> Table:
    """The report's tests of one seed question (trained minus random-init), as in the tests table."""
    columns = [c for c in _columns("tests", comparison) if c[0] != "question"]
    rows = [t for t in comparison.tests if t.question == question]
    method, methods = _methods(rows)
    if len(methods) > 1:
        columns.insert(2, ("method", method))
    pairs = [[fn(row) for _, fn in columns] for row in rows]
    n_sig = sum(t.significant for t in rows)
    notes = ("intervals: differences with 95% percentile bootstrap intervals",
             f"tests: {len(rows)} of the report's {len(comparison.tests)} tests ({question.upper()}), {n_sig} "
             f"significant at {ALPHA} after Holm over the report")
    if len(methods) == 1:
        methods = (f"method: {md_literal(rows[0].method)}",)
    return Table(f"tests_{question}", f"{question.upper()}. Its tests (trained minus random-init)",
                 tuple(h for h, _ in columns), tuple(tuple(t for t, _ in p) for p in pairs),
                 tuple(tuple(s for _, s in p) for p in pairs), (*notes, *methods) if rows else (),
                 "" if rows else "no test against a random-init model")


def peaks_table(comparison: Comparison) -> Table:
    """Q5's numbers: per model and data, the layer (1-based) and relative depth where each role and the commonest
    pattern peak, with the share of the layer's heads there."""
    cells, sort = [], []
    for p in peaks(comparison):
        found = p["layer"] is not None
        row = [(md_literal(p["model"]), p["model"]), (md_literal(p["data"]), p["data"]), (md_literal(p["role"]), p["role"]),
               (f"{p['layer'] + 1} of {p['n_layers']}" if found else "-", p["layer"] + 1 if found else None),
               (fmt(p["depth"], "depth"), p["depth"]), (fmt(p["share"], "fraction"), p["share"])]
        cells.append(tuple(t for t, _ in row))
        sort.append(tuple(s for _, s in row))
    notes = ("per model and data, the first layer where the share of heads of each role (and of the model's "
             "commonest pattern) is largest; depth = layer / (L - 1)", "intervals: none (shares of each layer's heads)",
             "tests: none (descriptive)")
    return Table("peaks", "Q5. Where each role and the commonest pattern peak",
                 ("model", "data", "role", "layer (1-based)", "depth", "share of the layer's heads"), tuple(cells),
                 tuple(sort), notes if cells else (), "" if cells else "no layer profiles")
