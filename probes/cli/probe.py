"""CLI command ``probe``: train attention probes on one split and score them on another.

A thin command over :func:`probes.runs.probing.probe`: parse the options, run, write to ``--out``, print.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import typer

from probes.cli import options
from probes.cli._app import command
from probes.cli.options import (
    ANALYSIS_PANEL,
    DATA_HELP,
    MAX_COUNT,
    MODEL_PANEL,
    TRAINING_PANEL,
    attention_source_option,
    batch_size_option,
    config_option,
    device_map_option,
    device_option,
    dtype_option,
    extraction,
    figure_format_option,
    figures_option,
    limit_option,
    max_attention_mb_option,
    max_batch_tokens_option,
    min_count_option,
    model_option,
    on_long_option,
    out_option,
    overwrite_option,
    path_option,
    progress_option,
    rule_bounds,
    select_on_option,
    split_list,
    text_parser,
)
from probes.progress import stage
from probes.runs.option_rules import SEED, SEEDS

#: ``--control-task`` values (probes.probing.controls.CONTROL_KINDS, repeated so that parsing imports no torch;
#: tests/cli/test_cli_contradictions.py keeps them equal).
CONTROL_TASKS = ("hewitt-liang", "offset")


def _store_option(flag: str, help: str) -> Any:
    return path_option(None, flag, what="a folder path", metavar="FOLDER", rich_help_panel=MODEL_PANEL, help=help)


def _write(run: Any, out_dir: Path, progress: bool, **write: Any) -> dict[str, Path]:
    """Write ``run`` to ``out_dir``, saying so first on stderr (with ``progress``)."""
    stage(f"writing report to {out_dir}", progress)
    paths: dict[str, Path] = run.write(out_dir, **write)
    return paths


@command("probe")
def probe_cli(
    ctx: typer.Context,
    model: Optional[str] = model_option(),
    train: Optional[str] = typer.Option(None, "--train", metavar="DATA", help=f"Training data: {DATA_HELP}.",
                                        rich_help_panel=MODEL_PANEL,
                                        parser=text_parser("--train", "a treebank file or name")),
    eval_: Optional[str] = typer.Option(None, "--eval", metavar="DATA", help="Evaluation data (the same forms).",
                                        rich_help_panel=MODEL_PANEL,
                                        parser=text_parser("--eval", "a treebank file or name")),
    select_on: Optional[str] = select_on_option(help=(
        "Where per-head and label probes choose their head (held out). Default: one half of --eval; 'same': "
        "--eval itself (optimistic).")),
    store_train: Optional[Path] = _store_option("--store-train", "Attention store to train on, instead of --train."),
    store_eval: Optional[Path] = _store_option("--store-eval", "Attention store to evaluate on, instead of --eval."),
    store_select: Optional[Path] = _store_option("--store-select", "Attention store to choose heads on, instead of "
                                                                   "--select-on."),
    limit: Optional[int] = limit_option(help="Read at most N sentences of each split (default: all)."),
    max_train: Optional[int] = typer.Option(None, "--max-train", min=1, max=MAX_COUNT, metavar="N",
                                            rich_help_panel=MODEL_PANEL,
                                            help="Use only the first N training sentences."),
    max_eval: Optional[int] = typer.Option(None, "--max-eval", min=1, max=MAX_COUNT, metavar="N",
                                           rich_help_panel=MODEL_PANEL,
                                           help="Use only the first N evaluation sentences."),
    device: Optional[str] = device_option(help="cpu, cuda ... for the model and the probes."),
    out: Optional[Path] = out_option(help="Output folder (default runs/probe-MODEL)."),
    figures: bool = figures_option(),
    figure_format: str = figure_format_option(),
    overwrite: bool = overwrite_option(),
    progress: bool = progress_option(),
    probe: Optional[list[str]] = typer.Option(
        None, "--probe", "-p", metavar="KIND,...", rich_help_panel=ANALYSIS_PANEL,
        help="per-head, label, attn, attn+emb, distances+emb, right-branching or all (default all)."),
    vectors: Optional[Path] = path_option(
        None, "--vectors", what="a file path", metavar="FILE", rich_help_panel=ANALYSIS_PANEL,
        help="GloVe-format word vectors for +emb probes (default: the model's input embeddings)."),
    control: bool = typer.Option(True, "--control/--no-control", metavar="", rich_help_panel=ANALYSIS_PANEL,
                                 help="Train control-task twins; report selectivity (Hewitt & Liang 2019)."),
    control_task: str = options.choice_option("hewitt-liang", "--control-task", CONTROL_TASKS, metavar="TASK",
                                              help="hewitt-liang (Hewitt & Liang's) or offset (fixed offsets)."),
    random_init: bool = typer.Option(True, "--random-init/--no-random-init", metavar="", rich_help_panel=ANALYSIS_PANEL,
                                     help="Add Attn+Emb on a randomly initialised copy of the model."),
    min_count: int = min_count_option(),
    epochs: int = typer.Option(1, "--epochs", min=1, max=MAX_COUNT, metavar="N", rich_help_panel=TRAINING_PANEL,
                               help="Passes over the training data (Clark et al.: 1)."),
    seed: int = typer.Option(0, "--seed", **rule_bounds(SEED), metavar="S", rich_help_panel=TRAINING_PANEL,
                             help="First seed of probes, control task and random-init model."),
    seeds: int = typer.Option(3, "--seeds", **rule_bounds(SEEDS), metavar="N", rich_help_panel=TRAINING_PANEL,
                              help="Seeds (seed, seed+1, ...): tables give mean and sd."),
    batch_size: int = batch_size_option(32, help="Sentences per forward pass of the model."),
    on_long: str = on_long_option(),
    dtype: str = dtype_option(),
    max_batch_tokens: Optional[int] = max_batch_tokens_option(),
    max_attention_mb: float = max_attention_mb_option(),
    device_map: Optional[str] = device_map_option(),
    attention_source: str = attention_source_option(),
    config: Optional[Path] = config_option(),
) -> None:
    """Train probes that read attention on --train and score them on --eval (Clark et al. 2019 §5).

    Writes parsers, comparisons.csv (UAS / UUAS of Attn, Attn+Emb, Distances+Emb, right-branching, random-init
    control; paired tests), per_head, label, figures/ and run.json to --out. More: docs/commands/probe.md.
    """
    options.refuse_together(ctx, ("store_train", "train"), ("store_eval", "eval_"), ("store_select", "select_on"))
    if not control and options.given(ctx, "control_task"):
        raise options.Contradiction("--no-control and --control-task cannot be used together", ctx=ctx)
    from probes.reports.writer import check_out_dir
    from probes.runs.probing import probe as run_probe

    out_dir = out or Path("runs") / ("probe-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(model or store_train)).name))
    check_out_dir(out_dir, "probes probe", overwrite=overwrite)  # before any work
    run = run_probe(model, train, eval_, train_store=store_train, eval_store=store_eval, select_on=select_on,
                    select_store=store_select, kinds=split_list(probe) or ["all"], vectors=vectors, epochs=epochs,
                    control=control_task if control else False, random_init=random_init, max_train=max_train,
                    max_eval=max_eval, limit=limit, min_count=min_count, batch_size=batch_size, device=device,
                    on_long=on_long, seed=seed, seeds=seeds, progress=progress,
                    extraction=extraction(dtype, max_batch_tokens, max_attention_mb, device_map, attention_source))
    paths = _write(run, out_dir, progress, figures=figures, figure_format=figure_format, overwrite=overwrite)
    typer.echo(run.format(), nl=False)
    typer.echo(run.notes())
    typer.echo(f"Report: {out_dir}  ({', '.join(sorted(p for p in paths if not p.startswith('figures')))})")
