"""The experiment report's content, in order, as blocks both renderers share (:mod:`.render`).

Layout: title; ``## Answers`` with the seed questions (``## In short`` without them): each finding in a few
sentences with its number and its test, no paragraph over :data:`~probes.reports.prose.MAX_PARAGRAPH` characters,
and the one line saying layers and heads are 1-based; ``## What ran``; with the seed questions
``## Evidence per question`` (Q1..Q5: how the answer is decided, the figure, the tables of its numbers and of its
tests; then every test); ``## What this evidence cannot tell``; ``## Cross-model comparison`` (best head per
relation, head kinds, pruning curves, patterns per layer); ``## Training lab``; ``## Units``; ``## Not computed``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.compare.types import TABLES, Comparison
from probes.heads.naming import head_name
from probes.reports.escape import clean_text, md_code, md_literal, path_href
from probes.reports.experiment import lab as lab_section
from probes.reports.experiment.columns import Block, Table, peaks_table, question_tests, table_cells
from probes.reports.experiment.text import (
    ANSWER_RULES,
    INDEXING_NOTE,
    QUESTIONS,
    answers,
    fmt,
    limits,
)
from probes.reports.prose import ANSWERS, IN_SHORT, clauses, pack
from probes.run_details import ExperimentInfo
from probes.run_record import RunRecord

__all__ = ["report_blocks", "opening_blocks", "experiment_name", "experiment_info"]


def experiment_info(record: RunRecord) -> ExperimentInfo:
    """The experiment's name, title, description and run folder, as the record holds them."""
    return record.details.run.experiment or ExperimentInfo()


def experiment_name(record: RunRecord) -> str:
    """The experiment's name for titles."""
    return str(experiment_info(record).name or "experiment")


def _data_label(spec: Any) -> str:
    """A data spec as the report names it: registry and sample names whole, files by their name (with the sha256
    of every file in ``run.json``)."""
    text = str(spec)
    return text if text.startswith(("ud:", "sample:")) else Path(text).name


def _selected_on(spec: Mapping[str, Any]) -> str:
    """Where a dataset's heads were selected, as the description of what ran says it."""
    return md_literal(_data_label(spec["select_on"])) if spec.get("select_on") else "a half of the same data"


def _what_ran(comparison: Comparison, record: RunRecord) -> list[Block]:
    """``## What ran``: the description, the models and the data (lists), analyses and units, where heads were
    selected, how intervals and tests were made."""
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
    blocks: list[Block] = [("h2", "What ran")]
    description = experiment_info(record).description
    if description:
        blocks += [("p", paragraph) for paragraph in pack(str(description))]
    blocks += [("p", "Models:"), ("list", described or ["-"]), ("p", "Data:"), ("list", data or ["-"]),
               ("p", f"Analyses: {', '.join(analyses) or '-'}; {len(units)} units ({len(units) - reused} computed, "
                     f"{reused} re-used).")]
    if where:
        blocks += [("p", "Where heads were chosen and reported:"),
                   ("list", [f"selected on {md_literal(s)}, reported on {md_literal(r)}" for s, r in where])]
    blocks.append(("p", f"Intervals are 95% percentile bootstrap intervals (over sentences unless a table says "
                        f"otherwise). Tests: {len(comparison.tests)} in the report's family, Holm-corrected together; "
                        "every table's notes say how many tests it holds."))
    return blocks


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
    info = experiment_info(record)
    where = info.out if "out" in info else "the run folder"
    notes = (f"{len(cells)} units, {n_reused} re-used from earlier runs", "no tests",
             *(() if linked else (f"folders are inside the run folder ({where}), which this copy of the report does "
                                  "not hold",)))
    return Table("units", "Units", ("analysis", "kind", "model", "data", "status", "seconds", "folder"),
                 tuple(cells), tuple(sort), notes if cells else (), "" if cells else "the run record lists no units")


_ANSWER_PARTS = {"q1": ("spread", ("q1_spread",)), "q2": ("specialisation", ("q2_specialisation",)),
                 "q3": ("redundancy", ("q3_redundancy",)), "q4": ("consistency", ("q4_consistency",)),
                 "q5": ("layers", ("q5_layers",))}


def _figure_blocks(figures: Mapping[str, tuple[str, Path]], stems: Sequence[str]) -> list[Block]:
    """The figures of ``stems`` (a stem ending in ``_`` takes every figure it starts), those that were drawn."""
    keys = [k for s in stems for k in figures if (k.startswith(s) if s.endswith("_") else k == s)]
    return [("figure", figures[k]) for k in keys]


def _best_heads_finding(rows: Sequence[Any], kinds: Sequence[Any]) -> str:
    """One model on one dataset in short: how many relations' best heads beat their baseline, the largest margin,
    and the head kinds."""
    row = rows[0]
    n_beat = sum(bool(r.beats_baseline) for r in rows)
    best = max(rows, key=lambda r: -math.inf if math.isnan(r.margin) else r.margin)
    text = (f"{md_literal(row.model)} on {md_literal(row.data)}: the best head of {n_beat} of {len(rows)} relations "
            "beats its best baseline (paired test, Holm within the model's leaderboard). The largest margin is "
            f"{md_literal(best.relation)} ({md_literal(best.direction)}) at head {head_name(best.layer, best.head)}: "
            f"accuracy {fmt(best.accuracy, 'value', best.ci_low, best.ci_high)} against "
            f"{fmt(best.baseline_accuracy)}, Holm p {fmt(best.p_adjusted, 'p')}.")
    for k in kinds:
        text += (f" Of its {fmt(k.n_heads, 'count')} heads, {fmt(k.specialised, 'count')} are specialised, "
                 f"{fmt(k.positional, 'count')} positional and {fmt(k.broad, 'count')} broad.")
    return text


def opening_blocks(comparison: Comparison, answered: bool) -> list[Block]:
    """The report's first section: ``## Answers`` (Q1..Q5 in short) or ``## In short`` (each model's best heads and
    head kinds), then the lab's answers in short, then the one line on how layers and heads are numbered."""
    findings: list[str] = []
    if answered:
        findings += [f"{key.upper()}. {text}" for key, text in answers(comparison).items()]
    else:
        pairs = dict.fromkeys((r.model, r.data) for r in comparison.best_heads)
        for model, data in pairs:
            mine = [r for r in comparison.best_heads if (r.model, r.data) == (model, data)]
            kinds = [k for k in comparison.head_kinds if (k.model, k.data) == (model, data)]
            findings.append(_best_heads_finding(mine, kinds))
        if not pairs and not comparison.lab:
            findings.append("No model has a leaderboard here: "
                            f"{comparison.missing.get('best_heads', 'no best heads were computed')}.")
    findings += [f"Lab {text}" for text in lab_section.lab_answers(comparison.lab).values()] if comparison.lab else []
    blocks: list[Block] = [("h2", ANSWERS if answered else IN_SHORT)]
    blocks += [("p", paragraph) for finding in findings for paragraph in pack(finding)]
    where = ("the rule, figure and tables of each answer are under Evidence per question" if answered else
             "the tables follow the description of what ran")
    blocks.append(("p", f"In everything a person reads here, {INDEXING_NOTE}; {where}."))
    return blocks


def _evidence_blocks(comparison: Comparison, figures: Mapping[str, tuple[str, Path]]) -> list[Block]:
    """``## Evidence per question``: per question how its answer is decided, its figures, its tables and its
    tests; then every test of the report."""
    blocks: list[Block] = [("h2", "Evidence per question")]
    for key, question in QUESTIONS.items():
        table, stems = _ANSWER_PARTS[key]
        blocks += [("h3", f"{key.upper()}. {question}"), ("p", "How the answer is decided:"),
                   ("list", clauses(ANSWER_RULES[key]))]
        blocks += _figure_blocks(figures, stems)
        blocks.append(("table", table_cells(table, comparison)))
        blocks.append(("table", peaks_table(comparison) if key == "q5" else question_tests(key, comparison)))
    blocks += [("h3", "Tests"), ("table", table_cells("tests", comparison))]
    return blocks


def _cross_blocks(comparison: Comparison, figures: Mapping[str, tuple[str, Path]], answered: bool) -> list[Block]:
    """``## Cross-model comparison``: best head per relation, head kinds, pruning curves, patterns per layer."""
    blocks: list[Block] = [("h2", "Cross-model comparison"), ("h3", "Best head per relation"),
                           ("p", "Each model's best head per relation, named `layer-head`, with its accuracy, "
                                 "interval, margin over the best baseline and relative depth layer / (L - 1).")]
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


_SEED_TABLES = ("spread", "specialisation", "redundancy", "consistency", "tests")


def report_blocks(comparison: Comparison, record: RunRecord | Mapping[str, Any], figures: Mapping[str, tuple[str, Path]],
                  out: Path, run_dir: Path | None = None) -> list[Block]:
    """The report's content in order, as blocks both renderers share (see the module docstring for the layout)."""
    record = RunRecord.of(record)  # a mapping as run.json holds it will do
    answered = bool(record.details.run.seed_questions) if record.has("seed_questions") else True
    blocks = opening_blocks(comparison, answered) + _what_ran(comparison, record)
    if answered:
        blocks += _evidence_blocks(comparison, figures)
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

