"""``probes sources``: does attention by weights tell the same story as attention by what heads move?

A thin command over :func:`probes.runs.sources.compare_sources`: parse the options, run, write ``sources.md``, the
tables, the figure and ``run.json`` to ``--out``, print the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import command
from probes.progress import stage

_HELP = """Test Kobayashi et al. 2020's finding on one model: the share of each layer's attention on [CLS], [SEP]
(a decoder: its first token) and "." / "," by weights against by norms (and other --sources), paired over documents
with a sign-flip test and Holm; the dependency leaderboard under each source (each with its own held-out selection on
--select-on and its own tests: which heads keep their place); with --corpus, coreference heads per source. Writes
sources.md, shares.csv, leaderboards.csv, boards/, figures/ and run.json to --out. Layers and heads are 1-based.
"""


@command("sources", help=_HELP)
def sources_cli(
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(..., help=f"Data to report on (and measure the shares on): "
                                                      f"{options.DATA_HELP}."),
    select_on: str = options.select_on_option(..., help="Held-out data each source's board chooses its heads on."),
    limit: Optional[int] = options.limit_option(),
    device: Optional[str] = options.device_option(),
    corpus: Optional[str] = typer.Option(
        None, "--corpus", metavar="DATA", parser=options.text_parser("--corpus", "a corpus file or name"),
        rich_help_panel=options.DATA_PANEL,
        help="GUM-style CoNLL-U with Entity= annotation: coreference heads per source (default: none)."),
    corpus_select_on: Optional[str] = typer.Option(
        None, "--corpus-select-on", metavar="DATA|same",
        parser=options.text_parser("--corpus-select-on", "a corpus file or name"), rich_help_panel=options.DATA_PANEL,
        help="Choose the coreference heads on this corpus (default: one half of --corpus's documents)."),
    corpus_limit: Optional[int] = typer.Option(
        None, "--corpus-limit", min=1, metavar="N", rich_help_panel=options.DATA_PANEL,
        help="Read at most N documents of --corpus (default: all)."),
    out: Optional[Path] = options.out_option(help="Output folder (default `runs/sources-MODEL-DATA`)."),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    sources: str = typer.Option(
        "weights,norm", "--sources", metavar="SOURCE,...", rich_help_panel=options.ANALYSIS_PANEL,
        help="Attention sources to compare: weights, norm and maybe contribution."),
    min_count: int = options.min_count_option(),
    n_resamples: int = options.n_resamples_option(),
    n_permutations: int = typer.Option(
        10_000, "--n-permutations", min=1, max=10_000_000, metavar="N", rich_help_panel=options.ANALYSIS_PANEL,
        help="Sign patterns of each paired test of the shares (all of them when fewer)."),
    interval_unit: str = options.choice_option(
        "auto", "--interval-unit", ("auto", "documents", "sentences"),
        help="The independent unit of intervals and tests (auto: documents when there are enough)."),
    batch_size: int = options.batch_size_option(),
    on_long: str = options.on_long_option(),
    dtype: str = options.dtype_option(),
    max_batch_tokens: Optional[int] = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: Optional[str] = options.device_map_option(),
    config: Optional[Path] = options.config_option(),
) -> None:
    from probes.reports.writer import check_out_dir
    from probes.runs.sources import COMMAND, compare_sources

    out_dir = out or options.default_out(model, treebank, prefix="sources-")
    check_out_dir(out_dir, COMMAND, overwrite=overwrite)  # before the model runs
    run = compare_sources(
        model, treebank, select_on=select_on, corpus=corpus, corpus_select_on=corpus_select_on,
        sources=sources, limit=limit, corpus_limit=corpus_limit,
        min_count=min_count, batch_size=batch_size, device=device, on_long=on_long, n_resamples=n_resamples,
        n_permutations=n_permutations, interval_unit=interval_unit, progress=progress,
        extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map),
        record={"options": {"config": str(config) if config else None}})
    stage(f"writing report to {out_dir}", progress)
    paths = run.write(out_dir, figures=figures, figure_format=figure_format, overwrite=overwrite)
    typer.echo(run.format(), nl=False)
    typer.echo(f"Report: {paths['sources.md']}  (all files in {Path(out_dir)})")
