"""CLI commands ``leaderboard``, ``baselines`` and ``demo``: thin wrappers over library calls."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Optional

import typer

from probes.cli import options
from probes.cli._app import app
from probes.errors import ConfigError

logger = logging.getLogger("probes")


_LEADERBOARD_HELP = """Which head best predicts each dependency relation (Clark et al. 2019 §4.2)?

Read attention either from a model (--model with --treebank, optionally --select-on) or
from attention stores written by `probes extract` (--store, optionally --select-store; a store
holds its sentences, so no treebank is needed). Heads and baselines are chosen on selection data
and reported and tested on other data: by default one half of the data (a fixed hash of sentence
ids) selects and the other half reports; --select-on DATA (--select-store) selects on a separate
split; --select-on same selects and reports on the same data, as Clark et al. did (optimistic,
never marked significant). sig.: paired test of the margin over the best baseline, Holm-corrected
over the table's rows; ties: heads not significantly worse than the reported one.

Writes leaderboard.{md,csv,json}, scores.csv (every head), run.json (model, data checksums,
options, timings) and figures/ (PNG, or --figure-format svg / pdf) to --out, and prints the
leaderboard. Layers and heads are printed 1-based (layer-head).

Options can also come from a TOML file (--config FILE; keys are the long option names,
e.g. select-on = "dev.conllu"); options on the command line win.
"""


_MODEL = "Data from a model"
_STORES = "Data from attention stores"


@app.command("leaderboard", help=_LEADERBOARD_HELP)
def leaderboard_cli(
    ctx: typer.Context,
    config: Optional[Path] = options.config_option(),
    model: Optional[str] = options.model_option(panel=_MODEL),
    treebank: Optional[str] = options.treebank_option(panel=_MODEL),
    select_on: Optional[str] = options.select_on_option(panel=_MODEL),
    batch_size: int = options.batch_size_option(panel=_MODEL),
    device: Optional[str] = options.device_option(panel=_MODEL),
    on_long: str = options.on_long_option(panel=_MODEL),
    dtype: str = options.dtype_option(panel=_MODEL),
    max_batch_tokens: Optional[int] = options.max_batch_tokens_option(panel=_MODEL),
    max_attention_mb: float = options.max_attention_mb_option(panel=_MODEL),
    device_map: Optional[str] = options.device_map_option(panel=_MODEL),
    limit: Optional[int] = options.limit_option(),
    store: Optional[Path] = options.path_option(
        None, "--store", "-s", what="a folder path", metavar="FOLDER", help="Attention store of the data to report on (instead of --model and --treebank).",
        rich_help_panel=_STORES),
    select_store: Optional[Path] = options.path_option(
        None, "--select-store", what="a folder path", metavar="FOLDER", help="Attention store of the selection data (the store version of --select-on).",
        rich_help_panel=_STORES),
    relations: Optional[list[str]] = typer.Option(
        None, "--relations", "-r", metavar="REL,...",
        help="Relations to list, comma-separated (default: all with >= --min-count words)."),
    min_count: int = options.min_count_option(),
    exclude: str = typer.Option("root,punct", "--exclude", help="Relations left out of the listing (ALL keeps them)."),
    analyses: Optional[list[str]] = typer.Option(
        None, "--analyses", "-a", metavar="NAME,...",
        help="More analyses to run in the same pass over the report data, saved under analyses/NAME/ "
             "(registered in probes.analysis.ANALYSES; e.g. specials: attention from words to special tokens)."),
    interval_unit: str = typer.Option(
        "auto", "--interval-unit", metavar="auto|documents|sentences",
        callback=options.one_of("--interval-unit", ("auto", "documents", "sentences")), help="What the 95% intervals and tests resample: auto = documents when every reported sentence has a "
             "'# newdoc id' and there are at least 10 documents, else sentences."),
    out: Optional[Path] = options.out_option(),
    poss_rule: bool = options.poss_rule_option(),
    figures: bool = options.figures_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
) -> None:
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
        extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map),
        interval_unit=interval_unit,
        record={"command": "probes leaderboard", "options": {"config": str(config) if config else None}})
    out_dir = out or options.default_out(str(board.record.details.model or store), board.reported_on)
    t0 = time.perf_counter()
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
    """The timings line: the run's extraction and scoring (its record) and the writing just done.

    Overhead is (scoring + writing) / extraction, as in ``run.json``. The writing timed here is the whole
    ``board.write``: a little more than ``run.json``'s ``writing_s``, which cannot hold preparing the folder
    or writing ``run.json`` itself.
    """
    extraction_s, scoring_s = timings.extraction_s, timings.scoring_s
    overhead = (scoring_s + writing_s) / max(extraction_s, 1e-9)
    return (f"Timings: {reading} {extraction_s:.1f} s, scoring {scoring_s:.2f} s, writing {writing_s:.2f} s "
            f"(overhead {100 * overhead:.1f}% of extraction).")


@app.command("baselines")
def baselines_cli(
    config: Optional[Path] = options.config_option(),
    treebank: str = options.treebank_option(..., help=f"Treebank: {options.DATA_HELP}."),
    limit: Optional[int] = options.limit_option(),
    format: str = typer.Option("text", "--format", "-f", help="text, markdown or json."),
    min_count: int = options.min_count_option(),
    all_relations: bool = typer.Option(False, "--all", help="List every relation, whatever its count."),
    poss_rule: bool = options.poss_rule_option(),
    clip_to_root: bool = typer.Option(
        False, "--clip-to-root", help="Clark et al.'s published clipping to [0, m]: early words may 'predict' "
        "ROOT, which no head can (reproduces the paper's table). Default: clip to [1, m], never ROOT."),
) -> None:
    """Best fixed-offset baseline per relation (Clark et al. 2019: offsets -3..+2, never ROOT by default).

    Also shows the most frequent relative position (Voita et al. 2019), among word positions. No model
    needed. The best offset and position are chosen on the data they are scored on (a description of
    the treebank, not a test). JSON output: a list of {relation, count, offset, accuracy} (accuracy as
    a fraction).
    """
    from probes.analysis.baselines import offset_baseline
    from probes.reports.baselines import baseline_rows, format_baselines
    from probes.runs.inputs import read_sentences

    if format not in ("text", "markdown", "json"):  # before the treebank is read
        raise ConfigError(f"--format must be text, markdown or json, found {format!r}")
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


@app.command("demo")
def demo_cli(
    config: Optional[Path] = options.config_option(),
    out: Path = options.out_option(Path("runs/demo"), help="Output folder."),
    on_long: str = options.on_long_option(),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(False),
) -> None:
    """Run the whole pipeline offline: all-MiniLM-L6-v2 on the shipped sample corpus (silver parses)."""
    from probes.reports.writer import check_out_dir
    from probes.runs.demo import demo

    check_out_dir(out, "probes demo", overwrite=overwrite)  # before the model runs
    board = demo(progress=progress, on_long=on_long)
    paths = board.write(out, figure_format=figure_format, overwrite=overwrite)
    counts = board.record.counts
    typer.echo(board.format("text"), nl=False)
    typer.echo(f"\nModel {board.record.details.model_name} on the probes sample corpus ({counts['report']['sentences']} "
               f"test sentences, heads selected on {counts['select']['sentences']} dev sentences). "
               "The parses are silver (spaCy en_core_web_sm), so labels follow spaCy's scheme, not UD.")
    typer.echo("Layers and heads are 1-based.")
    typer.echo(board.notes())
    typer.echo(f"Report: {paths['leaderboard.md']}  (all files in {out})")
