"""``probes run`` and ``probes report``: scripted experiments and their reports.

Thin commands over :func:`probes.runs.experiment.run_experiment` and
:func:`probes.runs.experiment.report_experiment`: parse the options, run, print where the report is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import app

_RUN_HELP = """Run an experiment file: models x data x analyses, then a cross-model report.

The file (TOML; see experiments/README.md) names models (folders, package:NAME, hub names, and
random-init:BASE@SEED twins: the same architecture with freshly initialised weights), data
(treebanks, coreference corpora, selection splits), optionally models trained from scratch first
([train] tables: OUT/train/CELL/seed-S/, re-used when their config is unchanged) and analyses
(leaderboard, baselines, atlas, coreference, bridging, probe, importance, prune, match) with their
options. Every unit (one analysis, one
model, one dataset) is saved in OUT/results/ as soon as it finishes, keyed by the model's weights
hash, the data's hashes and the options: running the same file again re-uses finished units (an
interrupted run resumes), and a finished experiment re-reports in seconds.

Writes OUT/report.md and a self-contained OUT/report.html (figures embedded, works offline),
figures/, tables/, comparison/ and run.json. Layers and heads are 1-based (layer-head) in every output.
"""

_REPORT_HELP = """Re-make the report of a finished experiment from its saved results alone (no model, no data).

Reads RUN_DIR/run.json and every unit it lists, recomputes the comparison and writes report.md,
report.html, figures/, tables/, comparison/ and run.json again (into RUN_DIR, or --out).
"""


@app.command("run", help=_RUN_HELP)
def run_cli(
    experiment: Path = typer.Argument(..., metavar="EXPERIMENT.toml", help="The experiment file.",
                                      parser=options.path_parser("EXPERIMENT.toml", "a file path")),
    out: Optional[Path] = options.out_option(help="Run folder (default: the file's `out`, else runs/NAME)."),
    fresh: bool = typer.Option(False, "--fresh", help="Recompute every unit, even those saved with the same key."),
    limit: Optional[int] = options.limit_option(
        help="Read at most N sentences (documents) of each dataset in every unit (default: all); part of each "
             "unit's key, so a limited run and a full run never share saved units."),
    progress: bool = options.progress_option(),
) -> None:
    from probes.runs.experiment import run_experiment

    run = run_experiment(experiment, out=out, progress=progress, fresh=fresh, limit=limit)
    typer.echo(run.format())
    folder = Path(run.info.out or ".")
    typer.echo(f"Report: {folder / 'report.md'} and {folder / 'report.html'}")


@app.command("report", help=_REPORT_HELP)
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
