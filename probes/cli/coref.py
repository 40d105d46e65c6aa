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
from probes.cli._app import command
from probes.progress import stage

_SELECT_HELP = ("Choose heads on this corpus (held out), report on --treebank. Default: one half of --treebank's "
                "documents; 'same': the same data (optimistic).")
_STRIDE_HELP = "Tokens between window starts (default: half a window)."
_WINDOW_HELP = "Tokens per window, specials included (default: the model's maximum)."
_LIMIT_HELP = "Read at most N documents of each corpus (default: all)."
_ON_LONG_HELP = "Windows still longer than the model's maximum: skip, truncate or window (each one is named)."
#: The choices of the analysis options (those of probes.analysis.coreference / bridging / mentions, repeated here so
#: that parsing imports no analysis; tests/cli/test_cli_contradictions.py keeps them equal).
CANDIDATES = ("all", "earlier", "mentions")
DIRECTIONS = ("anaphor_to_antecedent", "antecedent_to_anaphor")
ANTECEDENTS = ("window", "document")
SINGLETONS = ("keep", "drop")
SPLIT_ANTECEDENTS = ("any-part", "ignore")
CREDITS = ("any", "nearest")


def _revision_option() -> Any:
    return typer.Option(None, "--revision", metavar="REV", help="Model revision (hub models).",
                        rich_help_panel=options.MODEL_PANEL, parser=options.text_parser("--revision", "a model revision"))


def _window_option() -> Any:
    return typer.Option(None, "--window", **options.rule_bounds(options.option_rules.TOKENS), metavar="N",
                        rich_help_panel=options.ANALYSIS_PANEL, help=_WINDOW_HELP)


def _stride_option() -> Any:
    return typer.Option(None, "--stride", **options.rule_bounds(options.option_rules.TOKENS), metavar="N",
                        rich_help_panel=options.ANALYSIS_PANEL, help=_STRIDE_HELP)


def _direction_option() -> Any:
    return options.choice_option("anaphor_to_antecedent", "--direction", DIRECTIONS, metavar="DIRECTION",
                                 help="anaphor_to_antecedent (the anaphor's row) or antecedent_to_anaphor.")


def _out_dir(out: Path | None, command: str, model: str, treebank: str, overwrite: bool) -> Path:
    """``out`` (default ``runs/COMMAND-MODEL-DATA``), checked before any work: never other files overwritten."""
    from probes.reports.writer import check_out_dir

    out_dir = out or options.default_out(model, treebank, prefix=f"{command}-")
    check_out_dir(out_dir, command, overwrite=overwrite)
    return out_dir


def _report(run: Any, out_dir: Path, progress: bool = False, **write: Any) -> None:
    """Print the leaderboard, write every file to ``out_dir`` (saying so on stderr with ``progress``), say where."""
    stage(f"writing report to {out_dir}", progress)
    paths = run.write(out_dir, **write)
    typer.echo(run.format())
    typer.echo(run.notes())
    report = next((p for name, p in paths.items() if str(name).endswith("leaderboard.md")), None)
    typer.echo(f"Report: {report or out_dir}  (all files in {Path(out_dir)})")


@command("coref")
def coref(
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(
        ..., help="GUM/CorefUD CoNLL-U with Entity= annotation: a file or `ud:en_gum:SPLIT`."),
    select_on: str | None = options.select_on_option(help=_SELECT_HELP),
    limit: int | None = options.limit_option(help=_LIMIT_HELP),
    device: str | None = options.device_option(),
    revision: str | None = _revision_option(),
    out: Path | None = options.out_option(help="Output folder (default `runs/coref-MODEL-DATA`)."),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    window: int | None = _window_option(),
    stride: int | None = _stride_option(),
    candidates: str = options.choice_option("all", "--candidates", CANDIDATES,
                                            help="Words the argmax runs over."),
    direction: str = _direction_option(),
    antecedents: str = options.choice_option("window", "--antecedents", ANTECEDENTS,
                                             help="Antecedents outside the window: not scorable, or wrong."),
    singletons: str = options.choice_option("keep", "--singletons", SINGLETONS,
                                            help="Drop mentions of once-mentioned entities (OntoNotes-style)?"),
    split_antecedents: str = options.choice_option("any-part", "--split-antecedents", SPLIT_ANTECEDENTS,
                                                   help="Score a plural against its parts' mentions (GUM "
                                                        "SplitAnte=), or not."),
    n_resamples: int = options.n_resamples_option(),
    batch_size: int = options.batch_size_option(4, help="Windows per forward pass."),
    on_long: str = options.on_long_option(help=_ON_LONG_HELP),
    dtype: str = options.dtype_option(),
    max_batch_tokens: int | None = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: str | None = options.device_map_option(),
    attention_source: str = options.attention_source_option(),
    config: Path | None = options.config_option(),
) -> None:
    """Antecedent-selection accuracy of every head, with nearest / head-match / rule-based baselines."""
    from probes.runs.coreference import coreference

    out_dir = _out_dir(out, "coref", model, treebank, overwrite)
    run = coreference(model, treebank, select_on=select_on, window=window, stride=stride, candidates=candidates,
                      direction=direction, antecedents=antecedents, singletons=singletons,
                      split_antecedents=split_antecedents, batch_size=batch_size, device=device,
                      revision=revision, on_long=on_long, limit=limit, n_resamples=n_resamples, progress=progress,
                      extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map,
                                                    attention_source))
    _report(run, out_dir, progress, figures=figures, figure_format=figure_format, overwrite=overwrite)


@command("bridging")
def bridging(
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(
        ..., help="GUM CoNLL-U with Bridge= annotation: a file or `ud:en_gum:SPLIT`."),
    select_on: str | None = options.select_on_option(help=_SELECT_HELP),
    limit: int | None = options.limit_option(help=_LIMIT_HELP),
    device: str | None = options.device_option(),
    revision: str | None = _revision_option(),
    out: Path | None = options.out_option(help="Output folder (default `runs/bridging-MODEL-DATA`)."),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    window: int | None = _window_option(),
    stride: int | None = _stride_option(),
    direction: str = _direction_option(),
    credit: str = options.choice_option("any", "--credit", CREDITS,
                                        help="Right on any earlier mention of the antecedent, or the nearest only."),
    min_links: int = typer.Option(30, "--min-links", min=1, max=options.MAX_COUNT, metavar="N",
                                  rich_help_panel=options.ANALYSIS_PANEL,
                                  help="Distance bands are merged until each holds this many links."),
    n_resamples: int = options.n_resamples_option(),
    batch_size: int = options.batch_size_option(4, help="Windows per forward pass."),
    on_long: str = options.on_long_option(help=_ON_LONG_HELP),
    dtype: str = options.dtype_option(),
    max_batch_tokens: int | None = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: str | None = options.device_map_option(),
    attention_source: str = options.attention_source_option(),
    config: Path | None = options.config_option(),
) -> None:
    """Bridging: argmax accuracy and Pandit & Hou attention-mass ratio of every head, by sentence distance."""
    from probes.runs.coreference import bridging as run_bridging

    out_dir = _out_dir(out, "bridging", model, treebank, overwrite)
    run = run_bridging(model, treebank, select_on=select_on, window=window, stride=stride, direction=direction,
                       credit=credit, min_links=min_links, batch_size=batch_size, device=device,
                       revision=revision, on_long=on_long, limit=limit, n_resamples=n_resamples, progress=progress,
                       extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map,
                                                    attention_source))
    _report(run, out_dir, progress, figures=figures, figure_format=figure_format,
            overwrite=overwrite)
