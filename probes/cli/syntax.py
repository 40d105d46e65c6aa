"""CLI commands ``leaderboard``, ``baselines`` and ``demo``: thin wrappers over library calls."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional

import typer

from probes.cli import options
from probes.cli._app import command
from probes.progress import stage

logger = logging.getLogger("probes")


_LEADERBOARD_HELP = """Which head best predicts each dependency relation (Clark et al. 2019 §4.2)?

Attention comes from a model run on --treebank, or from attention stores written by `probes extract`
(--store). Heads are chosen on held-out data (--select-on, or one half of --treebank) and reported and tested
on --treebank. Writes leaderboard.{md,csv,json}, scores.csv, figures/ and run.json to --out and prints the
leaderboard. Layers and heads are 1-based (layer-head). More in the docs: docs/commands/leaderboard.md.
"""

#: What only a model run uses: refused beside --store, whose attention is extracted already.
_MODEL_RUN = ("model", "treebank", "device", "batch_size", "on_long", "dtype", "max_batch_tokens", "max_attention_mb",
              "device_map")


@command("leaderboard", help=_LEADERBOARD_HELP)
def leaderboard_cli(
    ctx: typer.Context,
    model: Optional[str] = options.model_option(),
    treebank: Optional[str] = options.treebank_option(),
    select_on: Optional[str] = options.select_on_option(),
    limit: Optional[int] = options.limit_option(),
    device: Optional[str] = options.device_option(),
    store: Optional[Path] = options.path_option(
        None, "--store", "-s", what="a folder path", metavar="FOLDER", rich_help_panel=options.MODEL_PANEL,
        help="Attention store to report on, instead of --model and --treebank."),
    select_store: Optional[Path] = options.path_option(
        None, "--select-store", what="a folder path", metavar="FOLDER", rich_help_panel=options.MODEL_PANEL,
        help="Attention store to choose heads on (the store version of --select-on)."),
    out: Optional[Path] = options.out_option(),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    relations: Optional[list[str]] = typer.Option(
        None, "--relations", "-r", metavar="REL,...", rich_help_panel=options.ANALYSIS_PANEL,
        help="Relations to list (default: all with at least --min-count words)."),
    min_count: int = options.min_count_option(),
    exclude: str = typer.Option("root,punct", "--exclude", metavar="REL,...", rich_help_panel=options.ANALYSIS_PANEL,
                                help="Relations left out of the listing (ALL keeps them)."),
    analyses: Optional[list[str]] = typer.Option(
        None, "--analyses", "-a", metavar="NAME,...", rich_help_panel=options.ANALYSIS_PANEL,
        help="More analyses in the same pass, saved under analyses/NAME/ (e.g. specials)."),
    interval_unit: str = options.choice_option(
        "auto", "--interval-unit", ("auto", "documents", "sentences"),
        help="What the intervals and tests resample (auto: documents when there are enough)."),
    poss_rule: bool = options.poss_rule_option(),
    batch_size: int = options.batch_size_option(),
    on_long: str = options.on_long_option(),
    dtype: str = options.dtype_option(),
    max_batch_tokens: Optional[int] = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: Optional[str] = options.device_map_option(),
    attention_source: str = options.attention_source_option(),
    config: Optional[Path] = options.config_option(),
) -> None:
    options.refuse_together(ctx, *(("store", name) for name in _MODEL_RUN), ("select_store", "select_on"),
                            ("select_store", "model"))
    if store is not None and select_on is not None and select_on != "same":  # 'same' is a store's choice too
        raise options.Contradiction("--store and --select-on DATA cannot be used together (a store's selection "
                                    "data is --select-store)", ctx=ctx)
    from probes.reports.writer import check_out_dir
    from probes.runs.leaderboard import leaderboard

    if out is not None:  # refuse a folder holding other files now, not after the model ran
        check_out_dir(out, "probes leaderboard", overwrite=overwrite)
    # the sources, the analyses and the extractor options are checked once, by the library, before any work
    board = leaderboard(
        model, treebank, select_on=select_on, store=store, select_store=select_store,
        relations=options.split_list(relations) or None, min_count=min_count,
        exclude=[e for e in exclude.split(",") if e], poss_rule=poss_rule, batch_size=batch_size, device=device,
        on_long=on_long, limit=limit, progress=progress, preload_figures=figures, analyses=options.split_list(analyses),
        extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map, attention_source),
        interval_unit=interval_unit,
        record={"command": "probes leaderboard", "options": {"config": str(config) if config else None}})
    out_dir = out or options.default_out(str(board.record.details.model or store), board.reported_on)
    t0 = time.perf_counter()
    stage(f"writing report to {out_dir}", progress)
    paths = board.write(out_dir, figures=figures, figure_format=figure_format, overwrite=overwrite)
    writing_s = time.perf_counter() - t0
    typer.echo(board.format("text"), nl=False)
    typer.echo("Layers and heads are 1-based.")
    typer.echo(board.notes())
    typer.echo(_timings(board.record.timings, writing_s, "reading the store" if store is not None else "extraction"))
    for name in board.analyses:
        typer.echo(f"Analysis {name}: saved in {paths[f'analyses/{name}']} (probes.load(path) reads it back)")
    typer.echo(f"Report: {paths['leaderboard.md']}  (all files in {Path(out_dir)})")


def _timings(timings: Any, writing_s: float, reading: str) -> str:
    """The times of the run in plain words: ``reading`` (extraction, or reading the store) and scoring from the run's
    record, and the writing just done (the whole ``board.write``: a little more than ``run.json``'s ``writing_s``,
    which cannot hold preparing the folder or writing ``run.json`` itself). No ratio: against a near-zero time
    (a small store read in milliseconds) a percentage says nothing."""
    steps = ((reading, timings.extraction_s), ("scoring", timings.scoring_s), ("writing", writing_s))
    return "Time: " + ", ".join(f"{name} {_seconds(s)}" for name, s in steps if s is not None) + "."


def _seconds(seconds: float) -> str:
    """``under 0.1 s``, ``0.4 s``, ``31 s``, ``2 min 05 s``: a duration as a person reads it."""
    if seconds < 0.05:
        return "under 0.1 s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


@command("baselines")
def baselines_cli(
    treebank: str = options.treebank_option(..., help=f"Treebank: {options.DATA_HELP}.", panel=options.DATA_PANEL),
    limit: Optional[int] = options.limit_option(panel=options.DATA_PANEL),
    format: str = options.choice_option("text", "--format", ("text", "markdown", "json"), panel=options.OUTPUT_PANEL,
                                        help="How to print the table."),
    min_count: int = options.min_count_option(),
    all_relations: bool = typer.Option(False, "--all", metavar="", rich_help_panel=options.ANALYSIS_PANEL,
                                       help="List every relation, whatever its count."),
    poss_rule: bool = options.poss_rule_option(),
    clip_to_root: bool = typer.Option(False, "--clip-to-root", metavar="", rich_help_panel=options.ANALYSIS_PANEL,
                                      help="Clip offsets to [0, m] as Clark et al. did (early words may 'predict' "
                                           "ROOT; default [1, m])."),
    config: Optional[Path] = options.config_option(),
) -> None:
    """Best fixed-offset baseline per relation (Clark et al. 2019: offsets -3..+2, never ROOT by default).

    Also shows the most frequent relative position (Voita et al. 2019). No model needed. The best offset and
    position are chosen on the data they are scored on (a description of the treebank, not a test). JSON output:
    a list of {relation, count, offset, accuracy} (accuracy as a fraction).
    """
    from probes.analysis.baselines import offset_baseline
    from probes.reports.baselines import baseline_rows, format_baselines
    from probes.runs.inputs import read_sentences

    _, sentences = read_sentences(treebank, limit)
    rows = baseline_rows(offset_baseline(sentences, poss_rule=poss_rule, clip_to_root=clip_to_root),
                         min_count=min_count, all_relations=all_relations)
    typer.echo(format_baselines(rows, format), nl=False)
    if format == "text":
        clip = ("[0, m] (Clark et al.'s rule: early words may predict ROOT)" if clip_to_root
                else "[1, m] (never ROOT, like a head)")
        typer.echo(f"{len(sentences)} sentences; offsets -3..+2 clipped to {clip}; ties go to the offset nearest "
                   f"the word; best offset and position chosen on this same data (descriptive, not tested); "
                   f"possessive rule {'on' if poss_rule else 'off'} (nmod:poss only).")


@command("demo")
def demo_cli(
    out: Path = options.out_option(Path("runs/demo"), help="Output folder."),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    on_long: str = options.on_long_option(),
    config: Optional[Path] = options.config_option(),
) -> None:
    """Run the whole pipeline offline: all-MiniLM-L6-v2 on the shipped sample corpus (silver parses)."""
    from probes.reports.writer import check_out_dir
    from probes.runs.demo import demo

    check_out_dir(out, "probes demo", overwrite=overwrite)  # before the model runs
    board = demo(progress=progress, on_long=on_long)
    stage(f"writing report to {out}", progress)
    paths = board.write(out, figure_format=figure_format, overwrite=overwrite)
    counts = board.record.counts
    typer.echo(board.format("text"), nl=False)
    typer.echo(f"\nModel {board.record.details.model_name} on the probes sample corpus ({counts['report']['sentences']} "
               f"test sentences, heads selected on {counts['select']['sentences']} dev sentences). "
               "The parses are silver (spaCy en_core_web_sm), so labels follow spaCy's scheme, not UD.")
    typer.echo("Layers and heads are 1-based.")
    typer.echo(board.notes())
    typer.echo(f"Report: {paths['leaderboard.md']}  (all files in {out})")
