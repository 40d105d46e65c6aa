"""``probes coref`` and ``probes bridging``: which heads find antecedents, on GUM-style corpora.

Thin commands over :func:`probes.runs.coreference.coreference` and
:func:`probes.runs.coreference.bridging`: parse the options, run, print the leaderboard and,
with ``--out``, write the tables, heatmaps and ``run.json``. Heads are printed 1-based (``layer-head``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from probes.cli._app import app
from probes.cli.options import batch_size_option, device_option, model_option, progress_option

_OUT_HELP = "Folder for tables, heatmaps and run.json."
_SELECT_HELP = "Choose the best heads on this corpus, report them on --corpus."
_STRIDE_HELP = "Tokens between window starts (default: half a window)."


def _report(run: Any, out: Path | None) -> None:
    """Print the leaderboard; with ``out``, write every file there."""
    print(run.format())
    if out is not None:
        run.write(out)
        print(f"wrote {out}", file=sys.stderr)


@app.command("coref")
def coref(
    model: str = model_option(..., help="Model folder, package:NAME or hub name (loaded with eager attention)."),
    corpus: Path = typer.Option(..., "--corpus", exists=True, dir_okay=False,
                                help="GUM/CorefUD CoNLL-U file with Entity= annotation (scored)."),
    select_on: Path | None = typer.Option(None, "--select-on", exists=True, dir_okay=False, help=_SELECT_HELP),
    out: Path | None = typer.Option(None, "--out", help=_OUT_HELP),
    window: int | None = typer.Option(None, "--window", help="Tokens per window, specials included "
                                      "(default: the model's maximum)."),
    stride: int | None = typer.Option(None, "--stride", help=_STRIDE_HELP),
    candidates: str = typer.Option("all", "--candidates", help="all | earlier | mentions: words the argmax runs over."),
    direction: str = typer.Option("anaphor_to_antecedent", "--direction",
                                  help="anaphor_to_antecedent (the anaphor's row) | antecedent_to_anaphor."),
    antecedents: str = typer.Option("window", "--antecedents",
                                    help="window: antecedents only outside the window are not scorable; "
                                         "document: they count as wrong."),
    singletons: str = typer.Option("keep", "--singletons",
                                   help="keep | drop: drop mentions of once-mentioned entities (OntoNotes-style)."),
    split_antecedents: str = typer.Option("any-part", "--split-antecedents",
                                          help="any-part: a plural with no earlier mention of its own in the window "
                                               "(GUM SplitAnte=) is scored against its parts' earlier mentions; "
                                               "ignore: it counts as no antecedent."),
    batch_size: int = batch_size_option(4, help="Windows per forward pass."),
    device: str | None = device_option(),
    revision: str | None = typer.Option(None, "--revision", help="Model revision (hub models)."),
    n_resamples: int = typer.Option(1000, "--n-resamples", help="Bootstrap resamples for the intervals."),
    progress: bool = progress_option(help="Progress bar on stderr."),
) -> None:
    """Antecedent-selection accuracy of every head, with nearest / head-match / rule-based baselines."""
    from probes.runs.coreference import coreference

    run = coreference(model, corpus, select_on=select_on, window=window, stride=stride, candidates=candidates,
                      direction=direction, antecedents=antecedents, singletons=singletons,
                      split_antecedents=split_antecedents, batch_size=batch_size, device=device, revision=revision,
                      n_resamples=n_resamples, progress=progress)
    _report(run, out)


@app.command("bridging")
def bridging(
    model: str = model_option(..., help="Model folder, package:NAME or hub name (loaded with eager attention)."),
    corpus: Path = typer.Option(..., "--corpus", exists=True, dir_okay=False,
                                help="GUM CoNLL-U file with Bridge= annotation (scored)."),
    select_on: Path | None = typer.Option(None, "--select-on", exists=True, dir_okay=False, help=_SELECT_HELP),
    out: Path | None = typer.Option(None, "--out", help=_OUT_HELP),
    window: int | None = typer.Option(None, "--window", help="Tokens per window, specials included."),
    stride: int | None = typer.Option(None, "--stride", help=_STRIDE_HELP),
    direction: str = typer.Option("anaphor_to_antecedent", "--direction",
                                  help="anaphor_to_antecedent | antecedent_to_anaphor."),
    batch_size: int = batch_size_option(4, help="Windows per forward pass."),
    device: str | None = device_option(),
    revision: str | None = typer.Option(None, "--revision", help="Model revision (hub models)."),
    n_resamples: int = typer.Option(1000, "--n-resamples", help="Bootstrap resamples for the intervals."),
    progress: bool = progress_option(help="Progress bar on stderr."),
) -> None:
    """Bridging: argmax accuracy and Pandit & Hou attention-mass ratio of every head, by sentence distance."""
    from probes.runs.coreference import bridging as run_bridging

    run = run_bridging(model, corpus, select_on=select_on, window=window, stride=stride, direction=direction,
                       batch_size=batch_size, device=device, revision=revision, n_resamples=n_resamples,
                       progress=progress)
    _report(run, out)
