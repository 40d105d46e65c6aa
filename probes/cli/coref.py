"""``probes coref`` and ``probes bridging``: which heads find antecedents, on GUM-style corpora.

Thin commands over :func:`probes.runs.coreference.coreference` and
:func:`probes.runs.coreference.bridging`: parse the options, run, print the leaderboard,
write the tables, heatmaps and ``run.json`` to ``--out`` (default ``runs/coref-MODEL-DATA``, printed).
Heads are printed 1-based (``layer-head``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from probes.cli import options
from probes.cli._app import app

_SELECT_HELP = ("Choose the best heads (and baseline offsets) on this corpus (same forms as --treebank), report them "
                "on --treebank. Default: choose on one half of --treebank's documents (fixed hash of document ids), "
                "report on the other. 'same': choose and report on the same data, as Clark et al. did "
                "(optimistic, never significant).")
_STRIDE_HELP = "Tokens between window starts (default: half a window)."
_LIMIT_HELP = "Read at most N documents of each corpus (default: all)."
_ON_LONG_HELP = ("Windows still longer than the model's maximum: skip, truncate or window; each one is counted "
                 "and named by id in the summary, the report and run.json.")


def _out_dir(out: Path | None, command: str, model: str, treebank: str, overwrite: bool) -> Path:
    """``out`` (default ``runs/COMMAND-MODEL-DATA``), checked before any work: never other files overwritten."""
    from probes.reports.writer import check_out_dir

    out_dir = out or options.default_out(model, treebank, prefix=f"{command}-")
    check_out_dir(out_dir, command, overwrite=overwrite)
    return out_dir


def _report(run: Any, out_dir: Path, **write: Any) -> None:
    """Print the leaderboard, write every file to ``out_dir``, say where."""
    paths = run.write(out_dir, **write)
    typer.echo(run.format())
    typer.echo(run.notes())
    report = next((p for name, p in paths.items() if str(name).endswith("leaderboard.md")), None)
    typer.echo(f"Report: {report or out_dir}  (all files in {Path(out_dir)})")


@app.command("coref")
def coref(
    config: Path | None = options.config_option(),
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(
        ..., help="GUM/CorefUD CoNLL-U with Entity= annotation (scored): a file or `ud:en_gum:SPLIT`."),
    select_on: str | None = options.select_on_option(help=_SELECT_HELP),
    limit: int | None = options.limit_option(help=_LIMIT_HELP),
    out: Path | None = options.out_option(help="Output folder (default `runs/coref-MODEL-DATA`)."),
    window: int | None = typer.Option(None, "--window", **options.rule_bounds(options.option_rules.TOKENS),
                                      help="Tokens per window, specials included "
                                      "(default: the model's maximum)."),
    stride: int | None = typer.Option(None, "--stride", **options.rule_bounds(options.option_rules.TOKENS),
                                      help=_STRIDE_HELP),
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
    batch_size: int = options.batch_size_option(4, help="Windows per forward pass."),
    device: str | None = options.device_option(),
    on_long: str = options.on_long_option(help=_ON_LONG_HELP),
    dtype: str = options.dtype_option(),
    max_batch_tokens: int | None = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: str | None = options.device_map_option(),
    revision: str | None = typer.Option(None, "--revision", help="Model revision (hub models).",
                                        parser=options.text_parser("--revision", "a model revision")),
    n_resamples: int = options.n_resamples_option(),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
) -> None:
    """Antecedent-selection accuracy of every head, with nearest / head-match / rule-based baselines."""
    from probes.runs.coreference import coreference

    out_dir = _out_dir(out, "coref", model, treebank, overwrite)
    run = coreference(model, treebank, select_on=select_on, window=window, stride=stride, candidates=candidates,
                      direction=direction, antecedents=antecedents, singletons=singletons,
                      split_antecedents=split_antecedents, batch_size=batch_size, device=device,
                      revision=revision, on_long=on_long, limit=limit, n_resamples=n_resamples, progress=progress,
                      extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map))
    _report(run, out_dir, figures=figures, figure_format=figure_format, overwrite=overwrite)


@app.command("bridging")
def bridging(
    config: Path | None = options.config_option(),
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(
        ..., help="GUM CoNLL-U with Bridge= annotation (scored): a file or `ud:en_gum:SPLIT`."),
    select_on: str | None = options.select_on_option(help=_SELECT_HELP),
    limit: int | None = options.limit_option(help=_LIMIT_HELP),
    out: Path | None = options.out_option(help="Output folder (default `runs/bridging-MODEL-DATA`)."),
    window: int | None = typer.Option(None, "--window", **options.rule_bounds(options.option_rules.TOKENS),
                                      help="Tokens per window, specials included "
                                      "(default: the model's maximum)."),
    stride: int | None = typer.Option(None, "--stride", **options.rule_bounds(options.option_rules.TOKENS),
                                      help=_STRIDE_HELP),
    direction: str = typer.Option("anaphor_to_antecedent", "--direction",
                                  help="anaphor_to_antecedent (the anaphor's row) | antecedent_to_anaphor."),
    credit: str = typer.Option("any", "--credit",
                               help="any: the argmax is right on the head of any preceding mention of the antecedent "
                                    "entity; nearest: only on the reader's nearest antecedent mention."),
    min_links: int = typer.Option(30, "--min-links", min=1, max=options.MAX_COUNT,
                                  help="Distance bands are merged until each row holds this many links."),
    batch_size: int = options.batch_size_option(4, help="Windows per forward pass."),
    device: str | None = options.device_option(),
    on_long: str = options.on_long_option(help=_ON_LONG_HELP),
    dtype: str = options.dtype_option(),
    max_batch_tokens: int | None = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: str | None = options.device_map_option(),
    revision: str | None = typer.Option(None, "--revision", help="Model revision (hub models).",
                                        parser=options.text_parser("--revision", "a model revision")),
    n_resamples: int = options.n_resamples_option(),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
) -> None:
    """Bridging: argmax accuracy and Pandit & Hou attention-mass ratio of every head, by sentence distance."""
    from probes.runs.coreference import bridging as run_bridging

    out_dir = _out_dir(out, "bridging", model, treebank, overwrite)
    run = run_bridging(model, treebank, select_on=select_on, window=window, stride=stride, direction=direction,
                       credit=credit, min_links=min_links, batch_size=batch_size, device=device,
                       revision=revision, on_long=on_long, limit=limit, n_resamples=n_resamples, progress=progress,
                       extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map))
    _report(run, out_dir, figures=figures, figure_format=figure_format,
            overwrite=overwrite)
