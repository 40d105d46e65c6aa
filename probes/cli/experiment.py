"""``probes run`` and ``probes report``: scripted experiments and their reports.

Thin commands over :func:`probes.runs.experiment.run_experiment` and
:func:`probes.runs.experiment.report_experiment`: parse the options, run, print where the report is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import command

_RUN_HELP = """Run an experiment file: models x data x analyses, then a cross-model report.

The file (TOML; see experiments/README.md) names models, data, analyses and optionally models to train first;
everything is checked before anything trains or loads. Each finished unit is saved in OUT/results/, so the same
command resumes an interrupted run and re-reports a finished one in seconds. Writes OUT/report.md, a
self-contained OUT/report.html, figures/, tables/, comparison/ and run.json. Layers and heads are 1-based. More
in the docs: docs/commands/run.md.
"""

_REPORT_HELP = """Re-make the report of a finished experiment from its saved results alone (no model, no data).

Reads RUN_DIR/run.json and every unit it lists, recomputes the comparison and writes report.md,
report.html, figures/, tables/, comparison/ and run.json again (into RUN_DIR, or --out).
"""


@command("run", help=_RUN_HELP)
def run_cli(
    experiment: Path = typer.Argument(..., metavar="EXPERIMENT.toml", help="The experiment file.",
                                      parser=options.path_parser("EXPERIMENT.toml", "a file path")),
    limit: Optional[int] = options.limit_option(
        panel=options.DATA_PANEL, help="Read at most N sentences (documents) of each dataset in every unit (part "
                                       "of each unit's key)."),
    out: Optional[Path] = options.out_option(help="Run folder (default: the file's `out`, else runs/NAME)."),
    fresh: bool = typer.Option(False, "--fresh", metavar="", rich_help_panel=options.OUTPUT_PANEL,
                               help="Recompute every unit, even those saved with the same key."),
    progress: bool = options.progress_option(),
) -> None:
    from probes.runs.experiment import run_experiment

    run = run_experiment(experiment, out=out, progress=progress, fresh=fresh, limit=limit)
    if run is None:  # a torchrun rank other than 0 of a role-lab run: rank 0 writes and prints the report
        return
    typer.echo(run.format())
    folder = Path(run.info.out or ".")
    typer.echo(f"Report: {folder / 'report.md'} and {folder / 'report.html'}")


@command("report", help=_REPORT_HELP)
def report_cli(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A run folder written by `probes run`.",
                                   parser=options.path_parser("RUN_DIR", "a folder path")),
    out: Optional[Path] = options.out_option(help="Write the report here instead of into RUN_DIR (a copy: it "
                                                  "names the unit folders without linking them)."),
) -> None:
    from probes.runs.experiment import report_experiment

    run = report_experiment(run_dir, out=out)
    folder = run_dir if out is None else out
    typer.echo(run.format())
    typer.echo(f"Report: {folder / 'report.md'} and {folder / 'report.html'}")
