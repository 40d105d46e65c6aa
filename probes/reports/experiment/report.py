"""Write an experiment's report: ``report.md``, a self-contained ``report.html``, ``figures/`` and ``tables/*.csv``.

Everything comes from a :class:`~probes.compare.types.Comparison` and the experiment's run record, so
``probes report RUN_DIR`` can redo it from saved results in seconds. The report is built once as a list of
blocks (:mod:`probes.reports.experiment.blocks`: the answers first, in short paragraphs, then what ran and the
evidence) and rendered twice, as Markdown and as HTML (:mod:`probes.reports.experiment.render`), so both hold the
same content. Its tables are :mod:`probes.reports.experiment.columns`'; its figures
:mod:`probes.reports.experiment.figures`' and :mod:`probes.reports.experiment.lab_figures`'. Numbers are formatted
by :func:`probes.reports.experiment.text.fmt` only; layers and heads are printed 1-based.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.compare.types import TABLES, Comparison
from probes.reports.experiment import lab as lab_section
from probes.reports.experiment.blocks import experiment_info, experiment_name, report_blocks
from probes.reports.experiment.columns import Table, csv_rows, table_cells
from probes.reports.experiment.render import report_html, report_markdown, slug
from probes.reports.tables import write_csv
from probes.reports.writer import OutputFolder, check_figure_format
from probes.run_record import RunRecord

__all__ = ["write_experiment", "write_experiment_report", "report_blocks", "report_markdown", "report_html",
           "table_cells", "csv_rows", "Table", "FIGURE_STEMS"]

log = logging.getLogger("probes")

#: Stems of the figure files this module writes (``best_heads_<data>`` has one per dataset).
FIGURE_STEMS = ("best_heads", "head_kinds", "q1_spread", "q2_specialisation", "q3_redundancy", "q4_consistency",
                "pruning", "q5_layers", "lab")


def _draw(comparison: Comparison, record: RunRecord, folder: Path, suffix: str) -> dict[str, tuple[str, Path]]:
    """Every figure the Comparison has rows for, as ``suffix`` files: ``stem -> (caption, path)``."""
    from probes.reports.experiment import figures as ef

    c, name, out = comparison, experiment_name(record), {}
    styles = ef.model_styles(c.models)
    from probes.reports.names import safe_names

    stems = safe_names((r.data for r in c.best_heads), usual=lambda d: f"best_heads_{slug(d)}")  # distinct names
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
    title = str(experiment_info(record).title or f"Experiment {experiment_name(record)}")
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
    folder.save("comparison", run.comparison)  # the run's main result: probes.load(run folder) reads it
    return run.record
