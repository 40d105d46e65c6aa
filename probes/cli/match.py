"""``probes match``: which head of model B does each head of model A's job?

A thin command over :func:`probes.runs.match.match_models`: parse the options, run, write ``matching.csv``,
``matching.md``, the figure and ``run.json`` to ``--out``, print the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import command
from probes.progress import stage

_HELP = """Match the heads of two models read on the same sentences (word level, so tokenizers may differ).

Give --model twice: model A, then model B. Heads are matched one to one by the Jensen-Shannon divergence of
their word-level maps, across layers (default) or --within-layers, each pair with a 95% interval and a null
interval (--null-model, or B's heads shuffled across layers). Writes matching.csv, profile_matching.csv,
matching.md, figures/, match/ and run.json to --out. Layers and heads are 1-based. More in the docs:
docs/commands/match.md.
"""


@command("match", help=_HELP)
def match_cli(
    ctx: typer.Context,
    models: list[str] = options.model_option(...),  # twice: -m A -m B (the help above says so)
    treebank: str = options.treebank_option(..., help=f"Data both models read: {options.DATA_HELP}."),
    limit: Optional[int] = options.limit_option(),
    device: Optional[str] = options.device_option(),
    out: Optional[Path] = options.out_option(help="Output folder (default `runs/match-A-B`)."),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    within_layers: bool = typer.Option(False, "--within-layers", metavar="", rich_help_panel=options.ANALYSIS_PANEL,
                                       help="Match within each layer (the models need the same layers x heads)."),
    across_layers: bool = typer.Option(False, "--across-layers", metavar="", rich_help_panel=options.ANALYSIS_PANEL,
                                       help="Match across layers (the default)."),
    null_model: Optional[str] = typer.Option(
        None, "--null-model", metavar="MODEL", parser=options.text_parser("--null-model", "a model folder or name"),
        rich_help_panel=options.ANALYSIS_PANEL, help="Model to match A against as the null, e.g. random-init:A@1."),
    n_resamples: int = options.n_resamples_option(200, help="Bootstrap resamples (and permutations) of the "
                                                            "intervals."),
    min_count: int = typer.Option(20, "--min-count", min=1, max=options.MAX_COUNT, metavar="N",
                                  rich_help_panel=options.ANALYSIS_PANEL,
                                  help="Least words of a relation, in each half, for the head profiles."),
    batch_size: int = options.batch_size_option(),
    on_long: str = options.on_long_option(),
    dtype: str = options.dtype_option(),
    max_batch_tokens: Optional[int] = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: Optional[str] = options.device_map_option(),
    attention_source: str = options.attention_source_option(),
    config: Optional[Path] = options.config_option(),
) -> None:
    options.refuse_together(ctx, ("within_layers", "across_layers"))
    from probes.errors import ConfigError
    from probes.reports.writer import check_out_dir
    from probes.runs.match import match_models

    if len(models) != 2:
        raise ConfigError(f"--model: give exactly two models (-m A -m B), found {len(models)}")
    model_a, model_b = models
    out_dir = out or options.default_out(model_a, model_b, prefix="match-")
    check_out_dir(out_dir, "probes match", overwrite=overwrite)  # before the models run
    run = match_models(model_a, model_b, treebank, within_layers=within_layers, null_model=null_model, limit=limit,
                       n_resamples=n_resamples, min_count=min_count, batch_size=batch_size, device=device,
                       on_long=on_long, progress=progress,
                       record={"options": {"config": str(config) if config else None}},
                       extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map,
                                                    attention_source))
    stage(f"writing report to {out_dir}", progress)
    paths = run.write(out_dir, figures=figures, figure_format=figure_format, overwrite=overwrite)
    typer.echo(run.format(), nl=False)
    typer.echo(f"Report: {paths['matching.md']}  (all files in {Path(out_dir)})")
