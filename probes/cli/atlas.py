"""``probes atlas``: what every head attends to, how heads group, their patterns and roles.

A thin command over :func:`probes.runs.atlas.atlas`: parse the options, run, write the atlas to
``--out`` (default ``runs/atlas-MODEL-DATA``), print its findings beside Clark et al.'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import command
from probes.progress import stage

_HELP = """The head atlas: what every head attends to, how heads group, their patterns and roles.

One pass of the model over --treebank gives each head's surface statistics, roles (Voita et al.), patterns
(Kovaleva et al.), distances and groups, head types (previous-token, duplicate-token, induction), and with a
language-model head the gradient by key type (Clark et al. §3.2); --corpus adds coreference accuracy. Writes
heads.csv, atlas.md, a self-contained atlas.html, head_view.html, figures/, leaderboard/ and run.json to --out.
Layers and heads are 1-based (layer-head). More in the docs: docs/commands/atlas.md.
"""


@command("atlas", help=_HELP)
def atlas_cli(
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(...),
    select_on: Optional[str] = options.select_on_option(),
    corpus: Optional[str] = typer.Option(
        None, "--corpus", metavar="DATA", parser=options.text_parser("--corpus", "a corpus file or name"),
        rich_help_panel=options.MODEL_PANEL,
        help="A coreference corpus (GUM-style CoNLL-U or `ud:en_gum:SPLIT`): adds coreference accuracy."),
    limit: Optional[int] = options.limit_option(),
    device: Optional[str] = options.device_option(),
    out: Optional[Path] = options.out_option(help="Output folder (default `runs/atlas-MODEL-DATA`)."),
    example: Optional[str] = typer.Option(None, "--example", metavar="SENT_ID", rich_help_panel=options.OUTPUT_PANEL,
                                          help="Sentence of the figures and head view (default: the first of "
                                               "12-20 words)."),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    js_sentences: Optional[int] = typer.Option(
        None, "--js-sentences", min=2, max=options.MAX_COUNT, metavar="N", rich_help_panel=options.ANALYSIS_PANEL,
        help="Sentences for the distances between heads (default 100)."),
    clusters: Optional[int] = typer.Option(None, "--clusters", min=1, max=options.MAX_COUNT, metavar="K",
                                           rich_help_panel=options.ANALYSIS_PANEL,
                                           help="Head groups cut from the clustering (default 8)."),
    counts: Optional[Path] = options.path_option(
        None, "--counts", what="a file path", metavar="FILE", rich_help_panel=options.ANALYSIS_PANEL,
        help="Word counts (`word<TAB>count` lines) for rare-word heads (default: --treebank's)."),
    word_level: bool = typer.Option(False, "--word-level", metavar="", rich_help_panel=options.ANALYSIS_PANEL,
                                    help="Also compute the surface statistics on word maps."),
    grad_sentences: int = typer.Option(
        200, "--grad-sentences", min=0, max=options.MAX_COUNT, metavar="N", rich_help_panel=options.ANALYSIS_PANEL,
        help="Sentences of the gradient pass (needs a language-model head; 0 skips it)."),
    head_type_sequences: int = typer.Option(
        20, "--head-type-sequences", **options.rule_bounds(options.option_rules.SEQUENCES), metavar="N",
        rich_help_panel=options.ANALYSIS_PANEL, help="Random repeated sequences for the head types (0 skips them)."),
    batch_size: int = options.batch_size_option(),
    on_long: str = options.on_long_option(),
    dtype: str = options.dtype_option(),
    max_batch_tokens: Optional[int] = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: Optional[str] = options.device_map_option(),
    attention_source: str = options.attention_source_option(),
    config: Optional[Path] = options.config_option(),
) -> None:
    from probes.reports.writer import check_out_dir
    from probes.runs.atlas import atlas

    out_dir = out or options.default_out(model, treebank, prefix="atlas-")
    check_out_dir(out_dir, "probes atlas", overwrite=overwrite)  # before the model runs
    result = atlas(model, treebank, corpus=corpus, select_on=select_on, js_sentences=js_sentences,
                   clusters=clusters, counts=counts, word_level=word_level, grad_sentences=grad_sentences,
                   head_type_sequences=head_type_sequences, example=example, batch_size=batch_size, device=device,
                   on_long=on_long, limit=limit,
                   progress=progress, record={"options": {"config": str(config) if config else None}},
                   extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map,
                                                    attention_source))
    stage(f"writing report to {out_dir}", progress)
    paths = result.write(out_dir, figures=figures, figure_format=figure_format, overwrite=overwrite)
    typer.echo(result.format(), nl=False)
    typer.echo(f"Report: {paths['atlas.md']} and {paths['atlas.html']}  (all files in {Path(out_dir)})")
