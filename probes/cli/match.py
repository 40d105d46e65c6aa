"""``probes match``: which head of model B does each head of model A's job?

A thin command over :func:`probes.runs.match.match_models`: parse the options, run, write ``matching.csv``,
``matching.md``, the figure and ``run.json`` to ``--out``, print the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import app

_HELP = """Match the heads of two models read on the same sentences (word level, so tokenizers may differ).

Give --model twice: first model A, then model B.

The distance between a head of A and a head of B is the mean over word rows of the Jensen-Shannon divergence of
their word-level maps; the optimal one-to-one matching (scipy's linear_sum_assignment) is made within layers
(--within-layers: the models need the same layers x heads) or across layers. Each matched pair gets a 95%
interval over documents (sentences where the treebank has fewer than 10) and a null interval: A matched to --null-model (a sharpness-matched random-init twin,
another seed), re-matched in each resample, or, within layers without a null model, B's heads shuffled across
layers. The summary gives D_match, D_random, D_null, D_within, the agreement of two halves, the profile distance
and the role recurrence (Clark's behaviours on word maps).

Writes matching.csv (1-based layer_a, head_a, layer_b, head_b, distance, intervals, roles), profile_matching.csv,
matching.md, figures/matching.png, match/ (the saved result) and run.json to --out.
"""


@app.command("match", help=_HELP)
def match_cli(
    config: Optional[Path] = options.config_option(),
    models: list[str] = options.model_option(...),
    treebank: str = options.treebank_option(..., help=f"Data both models read: {options.DATA_HELP}."),
    within_layers: bool = typer.Option(False, "--within-layers/--across-layers",
                                       help="Match within layers (one problem per layer) or across layers (default)."),
    null_model: Optional[str] = typer.Option(
        None, "--null-model", metavar="MODEL", parser=options.text_parser("--null-model", "a model folder or name"),
        help="A model to match A against as the null, e.g. "
        "random-init:MODEL@1 (any --model spec)."),
    n_resamples: int = options.n_resamples_option(200, metavar="N", help="Bootstrap resamples (and label "
                                                                        "permutations) of the intervals."),
    min_count: int = typer.Option(20, "--min-count", min=1, max=options.MAX_COUNT, metavar="N",
                                  help="Least words of a relation, in each half, for its accuracies to enter the "
                                       "head profiles."),
    batch_size: int = options.batch_size_option(),
    device: Optional[str] = options.device_option(),
    on_long: str = options.on_long_option(),
    dtype: str = options.dtype_option(),
    max_batch_tokens: Optional[int] = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: Optional[str] = options.device_map_option(),
    limit: Optional[int] = options.limit_option(),
    out: Optional[Path] = options.out_option(help="Output folder (default `runs/match-A-B`)."),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
) -> None:
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
                       extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map))
    paths = run.write(out_dir, figures=figures, figure_format=figure_format, overwrite=overwrite)
    typer.echo(run.format(), nl=False)
    typer.echo(f"Report: {paths['matching.md']}  (all files in {Path(out_dir)})")
