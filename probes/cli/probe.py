"""CLI command ``probe``: train attention probes on one split and score them on another.

A thin command over :func:`probes.runs.probing.probe`: parse the options, run, write to ``--out``, print.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from probes.cli._app import app
from probes.cli.options import (
    DATA_HELP,
    MAX_COUNT,
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
from probes.runs.option_rules import SEED, SEEDS


@app.command("probe")
def probe_cli(
    config: Optional[Path] = config_option(),
    model: Optional[str] = model_option(),
    train: Optional[str] = typer.Option(None, "--train", help=f"Training data: {DATA_HELP}.",
                                        parser=text_parser("--train", "a treebank file or name")),
    eval_: Optional[str] = typer.Option(None, "--eval", help=f"Evaluation data: {DATA_HELP}.",
                                        parser=text_parser("--eval", "a treebank file or name")),
    probe: Optional[list[str]] = typer.Option(
        None, "--probe", "-p", help="per-head, label, attn, attn+emb, distances+emb, right-branching or all "
        "(comma-separated or repeated; default all)."),
    store_train: Optional[Path] = path_option(None, "--store-train", what="a folder path", metavar="FOLDER",
                                              help="Attention store to train on."),
    store_eval: Optional[Path] = path_option(None, "--store-eval", what="a folder path", metavar="FOLDER",
                                             help="Attention store to evaluate on."),
    select_on: Optional[str] = select_on_option(help=(
        "Where the per-head and label probes choose their best head: DATA (a treebank run through the model), "
        "or 'same' (chosen and reported on --eval, as Clark et al.: optimistic, never marked significant). "
        "Default: --eval split in two halves by a fixed hash of sentence ids, chosen on one, reported on the other.")),
    store_select: Optional[Path] = path_option(None, "--store-select", what="a folder path", metavar="FOLDER",
                                               help="Attention store the per-head heads are chosen on."),
    vectors: Optional[Path] = path_option(
        None, "--vectors", what="a file path", metavar="FILE", help="GloVe-format word vectors for attn+emb / distances+emb "
        "(default: the model's input embeddings, mean-pooled over subwords)."),
    epochs: int = typer.Option(1, "--epochs", min=1, max=MAX_COUNT, help="Passes over the training data (Clark et al.: 1)."),
    control: bool = typer.Option(True, "--control/--no-control",
                                 help="Train control-task twins and report selectivity (Hewitt & Liang 2019)."),
    control_task: str = typer.Option("hewitt-liang", "--control-task",
                                     help="hewitt-liang (each word type attaches to itself, the first or the last "
                                     "word) or offset (each type attaches at a fixed offset drawn from the "
                                     "training set's gold offsets)."),
    random_init: bool = typer.Option(True, "--random-init/--no-random-init",
                                     help="Add Attn+Emb on a randomly initialised copy of the model (needs --model)."),
    max_train: Optional[int] = typer.Option(None, "--max-train", min=1, max=MAX_COUNT,
                                            help="Use only the first N training sentences."),
    max_eval: Optional[int] = typer.Option(None, "--max-eval", min=1, max=MAX_COUNT,
                                           help="Use only the first N evaluation sentences."),
    limit: Optional[int] = limit_option(help="Read at most N sentences of each split (default: all); "
                                        "--max-train / --max-eval set one split."),
    min_count: int = min_count_option(),
    out: Optional[Path] = out_option(help="Output folder (default runs/probe-MODEL)."),
    batch_size: int = batch_size_option(32, help="Sentences per forward pass of the model."),
    device: Optional[str] = device_option(help="cpu, cuda ... for the model and the probes."),
    on_long: str = on_long_option(),
    dtype: str = dtype_option(),
    max_batch_tokens: Optional[int] = max_batch_tokens_option(),
    max_attention_mb: float = max_attention_mb_option(),
    device_map: Optional[str] = device_map_option(),
    seed: int = typer.Option(0, "--seed", **rule_bounds(SEED),
                             help="First seed of probes, control task and random-init model."),
    seeds: int = typer.Option(3, "--seeds", **rule_bounds(SEEDS), help="Seeds (seed, seed+1, ...): each trains every probe again "
                              "(initialisation, training order, control mapping, random-init model); tables give "
                              "mean and sd. Training time grows with it."),
    figures: bool = figures_option(),
    figure_format: str = figure_format_option(),
    overwrite: bool = overwrite_option(),
    progress: bool = progress_option(),
) -> None:
    """Train probes that read attention on --train and score them on --eval (Clark et al. 2019 §5).

    Writes parsers.{md,csv,json} and comparisons.csv (UAS / UUAS of Attn, Attn+Emb, Distances+Emb,
    right-branching, random-init control; paired tests between them), per_head.{md,csv,json} and per_head_scores.csv (per-head relation probes),
    label.{md,csv} (per-head label probes), figures/ and run.json to --out. Layers and heads are 1-based.
    """
    from probes.reports.writer import check_out_dir
    from probes.runs.probing import probe as run_probe

    out_dir = out or Path("runs") / ("probe-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(model or store_train)).name))
    check_out_dir(out_dir, "probes probe", overwrite=overwrite)  # before any work
    run = run_probe(model, train, eval_, train_store=store_train, eval_store=store_eval, select_on=select_on,
                    select_store=store_select, kinds=split_list(probe) or ["all"], vectors=vectors, epochs=epochs,
                    control=control_task if control else False, random_init=random_init, max_train=max_train,
                    max_eval=max_eval, limit=limit, min_count=min_count, batch_size=batch_size, device=device,
                    on_long=on_long, seed=seed, seeds=seeds, progress=progress,
                    extraction=extraction(dtype, max_batch_tokens, max_attention_mb, device_map))
    paths = run.write(out_dir, figures=figures, figure_format=figure_format, overwrite=overwrite)
    typer.echo(run.format(), nl=False)
    typer.echo(run.notes())
    typer.echo(f"Report: {out_dir}  ({', '.join(sorted(p for p in paths if not p.startswith('figures')))})")
