"""Write an experiment's report: ``report.md``, a self-contained ``report.html``, ``figures/`` and ``tables/*.csv``.

Everything comes from a :class:`~probes.compare.types.Comparison` and the experiment's run record, so
``probes report RUN_DIR`` can redo it from saved results in seconds. The report is built once as a list of
blocks (headings, paragraphs, figures, tables) and rendered twice, as Markdown and as HTML, so both hold the
same content. The HTML works offline: inline CSS and script (those of the atlas page), every figure embedded
as a ``data:image/png;base64`` URI, links only to files of the run.

Layout: title; what ran; with the seed questions, ``## Answers`` (Q1..Q5: one sentence, its rule, the figure,
the table, then the tests); ``## What this evidence cannot tell``; ``## Cross-model comparison`` (best head per
relation, head kinds, pruning curves, patterns per layer); ``## Units``; ``## Not computed``. Every table ends
with a footer line: where heads were selected, how intervals were made, how many tests it holds. Numbers are
formatted by :func:`probes.reports.experiment.text.fmt` only; layers and heads are printed 1-based.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from probes.compare.spread import STRUCTURE_SILHOUETTE
from probes.compare.tests import TWIN_KINDS, twin_labels, verdict_of
from probes.compare.types import TABLES, Comparison
from probes.heads.naming import head_name
from probes.reports.escape import (
    clean_text,
    html_text,
    md_code,
    md_document,
    md_heading,
    md_inline_html,
    md_label,
    md_literal,
    md_no_html,
    md_text,
    path_href,
)
from probes.reports.experiment import lab as lab_section
from probes.reports.experiment.text import (
    ANSWER_RULES,
    INDEXING_NOTE,
    QUESTIONS,
    TEST_KINDS,
    answers,
    fmt,
    footer,
    limits,
)
from probes.reports.tables import flat_row, markdown_table, write_csv
from probes.reports.writer import OutputFolder, check_figure_format
from probes.run_details import ExperimentInfo
from probes.run_record import RunRecord

__all__ = ["write_experiment", "write_experiment_report", "report_blocks", "report_markdown", "report_html", "table_cells", "csv_rows",
           "Table", "FIGURE_STEMS"]

log = logging.getLogger("probes")

#: Stems of the figure files this module writes (``best_heads_<data>`` has one per dataset).
FIGURE_STEMS = ("best_heads", "head_kinds", "q1_spread", "q2_specialisation", "q3_redundancy", "q4_consistency",
                "pruning", "q5_layers", "lab")


@dataclass(frozen=True)
class Table:
    """One table of the report: ``key`` (a :data:`~probes.compare.types.TABLES` name or ``units``), its title,
    column headers, the text of each cell, a sort key per cell (the raw number, for the HTML table) and the
    footer line (or, for an empty table, the reason it is empty)."""

    key: str
    title: str
    headers: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    sort: tuple[tuple[Any, ...], ...]
    footer: str = ""
    empty: str = ""


Block = tuple[str, Any]  # ("h2" | "h3" | "p" | "list", text) or ("figure", (caption, path)) or ("table", Table)

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
                           ("heads", _share("n_specialised")), ("tests", _num("count", "n_tests")),
                           ("per relation", _mapping("per_relation", "count"))],
        "redundancy": [("model", _text("model")), ("kind", kind), ("data", _text("data")),
                       ("objective", _text("objective")),
                       ("tolerance (of the loss range)", _num("fraction", "tolerance")),
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
                        ("capped", _num("count", "n_capped"))],
        "tests": [("question", lambda r: (r.question.upper(), r.question)), ("test", _text("name")),
                  ("against", lambda r: (r.twins or "-", r.twins)),
                  ("method", _text("method")), ("difference [95% CI]", _test_value), ("p", _num("p", "p_value")),
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
    pairs = [[fn(row) for _, fn in columns] for row in rows]
    empty = "" if rows else comparison.missing.get(table, "no rows were computed (no reason recorded)")
    return Table(table, TABLES[table], tuple(h for h, _ in columns), tuple(tuple(t for t, _ in p) for p in pairs),
                 tuple(tuple(s for _, s in p) for p in pairs), footer(table, comparison) if rows else "", empty)


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


def _slug(text: str) -> str:
    """``text`` as a file-name part (letters, digits, ``_ . -``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip("-") or "data"


def _name(record: RunRecord) -> str:
    """The experiment's name for titles."""
    return str(_info(record).name or "experiment")


def _info(record: RunRecord) -> ExperimentInfo:
    """The experiment's name, title, description and run folder, as the record holds them."""
    return record.details.run.experiment or ExperimentInfo()


def _draw(comparison: Comparison, record: RunRecord, folder: Path, suffix: str) -> dict[str, tuple[str, Path]]:
    """Every figure the Comparison has rows for, as ``suffix`` files: ``stem -> (caption, path)``."""
    from probes.reports.experiment import figures as ef

    c, name, out = comparison, _name(record), {}
    styles = ef.model_styles(c.models)
    from probes.reports.names import safe_names

    stems = safe_names((r.data for r in c.best_heads), usual=lambda d: f"best_heads_{_slug(d)}")  # distinct names
    for data in dict.fromkeys(r.data for r in c.best_heads):
        best = [r for r in c.best_heads if r.data == data]
        stem = stems[str(data)]
        caption = f"Best head per relation on {data}: accuracy with its interval, and the head's relative depth"
        out[stem] = (caption, ef.write_best_heads(best, folder / f"{stem}.{suffix}", styles=styles,
                                                  title=f"{name}: {caption}"))
    jobs: list[tuple[str, Sequence[Any], str, Callable[[Path, str], Path]]] = [
        ("head_kinds", c.head_kinds, "Specialised, positional and broad heads per model",
         lambda p, t: ef.write_head_kinds(c.head_kinds, p, styles=styles, title=t)),
        ("q1_spread", c.spread, "Q1: head-to-head JS distances (histograms overlaid) and their spread",
         lambda p, t: ef.write_spread(c.spread, c.histograms, p, styles=styles, title=t)),
        ("q2_specialisation", c.specialisation, "Q2: specialised heads per model (held out, Holm-corrected)",
         lambda p, t: ef.write_fractions(c.specialisation, p, styles=styles, title=t)),
        ("q3_redundancy", c.redundancy, "Q3: heads removable within the tolerance, and rho of importance",
         lambda p, t: ef.write_redundancy(c.redundancy, p, styles=styles, title=t)),
        ("pruning", c.curves, "Pruning curves per objective: importance order per model, random orders shaded",
         lambda p, t: ef.write_pruning(c.curves, p, styles=styles, title=t)),
        ("q4_consistency", c.consistency, "Q4: the same heads on two sides (Spearman rho of head accuracies)",
         lambda p, t: ef.write_consistency(c.consistency, p, styles=styles, title=t)),
        ("q5_layers", c.layers, "Q5: patterns and roles per layer on relative depth",
         lambda p, t: ef.write_layers(c.layers, p, title=t)),
    ]
    for stem, rows, caption, draw in jobs:
        if rows:
            out[stem] = (caption, draw(folder / f"{stem}.{suffix}", f"{name}: {caption}"))
    return {**out, **lab_section.draw_lab(c, folder, suffix, name)}


def _data_label(spec: Any) -> str:
    """A data spec as the report names it: registry and sample names whole, files by their name (with the sha256
    of every file in ``run.json``)."""
    text = str(spec)
    return text if text.startswith(("ud:", "sample:")) else Path(text).name


def _selected_on(spec: Mapping[str, Any]) -> str:
    """Where a dataset's heads were selected, as the paragraph of what ran says it."""
    return md_literal(_data_label(spec["select_on"])) if spec.get("select_on") else "a half of the same data"


def _what_ran(comparison: Comparison, record: RunRecord) -> str:
    """The paragraph of what ran: models, data, analyses, units, where heads were selected, intervals, tests."""
    models = record.details.models or {}
    described = []
    for model, info in comparison.models.items():
        facts = {**info, **models.get(model, {})}
        size = (f", {facts['n_layers']} layers x {facts['n_heads']} heads" if facts.get("n_layers") and
                facts.get("n_heads") else "")
        described.append(f"{md_literal(model)} ({md_literal(facts.get('kind', 'trained'))}, "
                         f"{md_code(facts.get('spec', model))}{size})")
    lab = sum(1 for info in models.values() if info.get("lab"))
    if lab:
        described.append(f"the lab's {lab} models (see the lab's section)")
    data = [f"{md_literal(name)} ({md_code(_data_label(spec.get('treebank', spec.get('corpus', '-'))))}, heads "
            f"selected on {_selected_on(spec)})" for name, spec in (record.data or {}).items()]
    units = list(record.details.run.units or ())
    analyses = dict.fromkeys(f"{md_literal(u.analysis)} ({md_literal(u.kind)})" for u in units)
    reused = sum(bool(u.reused) for u in units)
    where = sorted({(r.selected_on, r.reported_on) for r in comparison.best_heads}
                   | {(r.selected_on, r.reported_on) for r in comparison.specialisation})
    where_text = ("; ".join(f"selected on {md_literal(s)}, reported on {md_literal(r)}" for s, r in where)
                  or "not recorded")
    text = (f"Models: {', '.join(described) or '-'}. Data: {', '.join(data) or '-'}. Analyses: "
            f"{', '.join(analyses) or '-'}; {len(units)} units ({len(units) - reused} computed, {reused} re-used). "
            f"Heads: {where_text}. Intervals are 95% percentile bootstrap intervals (over sentences unless a table "
            f"says otherwise). Tests: {len(comparison.tests)} in the report's family, Holm-corrected together; every "
            f"table's footer says how many tests it holds. In everything a person reads here, {INDEXING_NOTE}.")
    description = _info(record).description
    return f"{str(description).strip()} {text}" if description else text


def _units_table(record: RunRecord, out: Path, run_dir: Path) -> Table:
    """The units: analysis, kind, model, data, re-used or computed, seconds, a link to the unit's folder."""
    cells, sort = [], []
    linked = out.resolve() == run_dir.resolve()
    units = record.details.run.units or ()
    for unit in units:
        folder = clean_text(unit.path)
        # a link only where the report sits in its run folder; a copy elsewhere names the folder as text
        href = path_href(Path(os.path.relpath(run_dir / folder, out))) if folder and linked else ""
        status = "re-used" if unit.reused else "computed"
        row: list[tuple[str, Any]] = [(md_literal(n), str(n)) for n in (unit.analysis, unit.kind, unit.model, unit.data)]
        row += [(status, status), (fmt(unit.seconds, "seconds"), unit.seconds),
                ((f"[{md_literal(folder)}]({href})" if href else md_code(folder)) if folder else "-", folder)]
        cells.append(tuple(t for t, _ in row))
        sort.append(tuple(s for _, s in row))
    n_reused = sum(bool(u.reused) for u in units)
    info = _info(record)
    where = info.out if "out" in info else "the run folder"
    note = (f"{len(cells)} units, {n_reused} re-used from earlier runs; no tests"
            + ("." if linked else f"; folders are inside the run folder ({where}), which this copy of the report "
               "does not hold.")) if cells else ""
    return Table("units", "Units", ("analysis", "kind", "model", "data", "status", "seconds", "folder"),
                 tuple(cells), tuple(sort), note, "" if cells else "the run record lists no units")


_ANSWER_PARTS = {"q1": ("spread", ("q1_spread",)), "q2": ("specialisation", ("q2_specialisation",)),
                 "q3": ("redundancy", ("q3_redundancy",)), "q4": ("consistency", ("q4_consistency",)),
                 "q5": ("layers", ("q5_layers",))}


def _figure_blocks(figures: Mapping[str, tuple[str, Path]], stems: Sequence[str]) -> list[Block]:
    """The figures of ``stems`` (a stem ending in ``_`` takes every figure it starts), those that were drawn."""
    keys = [k for s in stems for k in figures if (k.startswith(s) if s.endswith("_") else k == s)]
    return [("figure", figures[k]) for k in keys]


def _answer_blocks(comparison: Comparison, figures: Mapping[str, tuple[str, Path]]) -> list[Block]:
    """``## Answers``: per question its sentence, its rule, its figures and its table; then the tests."""
    said = answers(comparison)
    blocks: list[Block] = [("h2", "Answers")]
    for key, question in QUESTIONS.items():
        table, stems = _ANSWER_PARTS[key]
        blocks += [("h3", f"{key.upper()}. {question}"), ("p", said[key]), ("p", f"Rule: {ANSWER_RULES[key]}.")]
        blocks += _figure_blocks(figures, stems)
        blocks.append(("table", table_cells(table, comparison)))
    blocks += [("h3", "Tests"), ("table", table_cells("tests", comparison))]
    return blocks


def _cross_blocks(comparison: Comparison, figures: Mapping[str, tuple[str, Path]], answered: bool) -> list[Block]:
    """``## Cross-model comparison``: best head per relation, head kinds, pruning curves, patterns per layer."""
    blocks: list[Block] = [("h2", "Cross-model comparison"), ("h3", "Best head per relation"),
                           ("p", f"Each model's best head per relation, named `layer-head` ({INDEXING_NOTE}), with "
                                 "its accuracy, interval, margin over the best baseline and relative depth "
                                 "layer / (L - 1).")]
    blocks += _figure_blocks(figures, ["best_heads_"])
    blocks += [("table", table_cells("best_heads", comparison)), ("h3", "Head kinds")]
    blocks += _figure_blocks(figures, ["head_kinds"])
    blocks += [("table", table_cells("head_kinds", comparison)), ("h3", "Pruning curves")]
    if "pruning" in figures:
        blocks += _figure_blocks(figures, ["pruning"])
    else:
        reason = comparison.missing.get("curves", comparison.missing.get("redundancy", "no pruning curves"))
        blocks.append(("p", f"Not computed: {reason}"))
    blocks.append(("h3", "Patterns per layer"))
    if answered and comparison.layers:
        blocks.append(("p", "The patterns and roles per layer on relative depth are the figure and table of Q5 above."))
    else:
        blocks += _figure_blocks(figures, ["q5_layers"])
        blocks.append(("table", table_cells("layers", comparison)))
    return blocks


def report_blocks(comparison: Comparison, record: RunRecord | Mapping[str, Any], figures: Mapping[str, tuple[str, Path]],
                  out: Path, run_dir: Path | None = None) -> list[Block]:
    """The report's content in order, as blocks both renderers share (see the module docstring for the layout)."""
    record = RunRecord.of(record)  # a mapping as run.json holds it will do
    answered = bool(record.details.run.seed_questions) if record.has("seed_questions") else True
    blocks: list[Block] = [("p", _what_ran(comparison, record))]
    if answered:
        blocks += _answer_blocks(comparison, figures)
    blocks += [("h2", "What this evidence cannot tell"), ("list", limits(comparison, record))]
    blocks += _cross_blocks(comparison, figures, answered)
    blocks += lab_section.lab_blocks(comparison, figures, Table)
    blocks += [("h2", "Units"), ("table", _units_table(record, out, run_dir or out))]
    missing = dict(comparison.missing)
    for table in TABLES:
        if not getattr(comparison, table) and table not in missing and (answered or table not in _SEED_TABLES):
            missing[table] = "no rows were computed (no reason recorded)"
    blocks.append(("h2", "Not computed"))
    blocks.append(("list", [f"{key}: {reason}" for key, reason in missing.items()]) if missing else
                  ("p", "Everything the experiment asked for was computed."))
    return blocks


_SEED_TABLES = ("spread", "specialisation", "redundancy", "consistency", "tests")


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
    return (f"#### {md_heading(table.title)}\n\n{body}"
            f"\n_{md_no_html(table.footer)}_\n")


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
            sections.append((_slug(value).lower(), value, ""))
        else:
            anchor, heading, body = sections[-1]
            sections[-1] = (anchor, heading, body + _html_block(kind, value))
    return _page(title, sections, {"example": None})


def _clear_stale(out: Path) -> None:
    """Remove this module's figures and tables left by an earlier write (a table now empty must not linger)."""
    for path in [*(out / "figures").glob("*"), *(out / "tables").glob("*.csv")]:
        stem = path.stem
        if path.is_file() and (stem in TABLES or any(stem == s or stem.startswith(f"{s}_") for s in FIGURE_STEMS)):
            path.unlink()


def write_experiment_report(comparison: Comparison, record: RunRecord | Mapping[str, Any], out_dir: str | Path, *,
                            figure_format: str = "png", run_dir: str | Path | None = None) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``figures/`` and ``tables/*.csv`` of an experiment; the paths by name.

    Args:
        comparison: the cross-model comparison (every table may be empty; ``missing`` says why).
        record: the experiment's run record (``experiment``, ``models``, ``data``, ``units``, ``seed_questions``).
        out_dir: where to write (the run folder); earlier figures and tables of this module there are replaced.
        figure_format: ``png``, ``svg`` or ``pdf``; the figures are always PNG too (the HTML embeds them).
        run_dir: the folder the units' ``path`` is relative to (default ``out_dir``), for the links.
    """
    check_figure_format(figure_format)
    t0, record = time.perf_counter(), RunRecord.of(record)  # a mapping as run.json holds it will do
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _clear_stale(out)
    figures = _draw(comparison, record, out / "figures", "png")
    extra = {} if figure_format == "png" else _draw(comparison, record, out / "figures", figure_format)
    paths: dict[str, Path] = {}
    for table in TABLES:
        rows = csv_rows(table, comparison)
        if rows:
            paths[f"tables/{table}.csv"] = write_csv(rows, out / "tables" / f"{table}.csv")
    paths.update(lab_section.write_lab_csv(comparison, out))
    title = str(_info(record).title or f"Experiment {_name(record)}")
    blocks = report_blocks(comparison, record, figures, out, Path(run_dir) if run_dir is not None else None)
    from probes.reports.atomic import write_text  # whole or not at all

    paths["report.md"] = write_text(out / "report.md", report_markdown(title, blocks, out))
    paths["report.html"] = write_text(out / "report.html", report_html(title, blocks))
    for _, path in [*figures.values(), *extra.values()]:
        paths[f"figures/{path.name}"] = path
    log.info("experiment report written to %s in %.1f s", out, time.perf_counter() - t0)
    return paths


def write_experiment(folder: OutputFolder, run: Any, run_dir: str | Path | None = None) -> RunRecord:
    """Write an experiment run's report (:func:`write_experiment_report`) and its saved comparison
    (``comparison/``) into ``folder``; the run record to write last (``run_dir``: as there)."""
    folder.add_all(write_experiment_report(run.comparison, run.record, folder.root,
                                           figure_format=folder.figure_format,
                                           run_dir=folder.root if run_dir is None else run_dir).values())
    folder.add(run.comparison.save(folder.root / "comparison"))
    return run.record
