"""``probes importance`` and ``probes prune``: which heads matter for an objective, and how many can go.

Thin commands over :func:`probes.runs.importance.importance` and :func:`probes.runs.importance.prune`:
parse the options, run, write to ``--out`` (default ``runs/importance-MODEL-DATA`` /
``runs/prune-MODEL-DATA``), print a summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from probes.cli import options
from probes.cli._app import command

#: ``--objective`` and ``--ablation`` values (those of probes.importance / probes.extraction.interventions,
#: repeated here so that parsing imports no torch; a test keeps them equal).
OBJECTIVE_CHOICES = ("lm", "representation", "probe")
ABLATION_CHOICES = ("zero", "mean", "uniform")
_DATA = ("Choose on this data (held out), report on --treebank. Default: one half of --treebank; 'same': the same "
         "data (optimistic).")
_OBJECTIVE_HELP = "What a change is measured on: representation (any model), probe or lm (the LM loss)."
_ABLATION_HELP = "How a removed head is replaced: zero, mean (its mean output) or uniform attention."

_IMPORTANCE_HELP = """Head importance (Michel et al. 2019): the gradient score and the leave-one-out effect of each head.

The gradient score I_h = E|dL/dg_h| (layer-wise l2 normalised) and the effect of ablating each head alone, with
bootstrap intervals over sentences, and their rank correlation. Writes importance.csv, importance.md, figures/
and run.json to --out. Layers and heads are 1-based (layer-head). More in the docs: docs/commands/importance.md.
"""

_PRUNE_HELP = """Pruning curves (Michel et al. 2019 §4.2, Voita et al. 2019): how many heads can go.

Heads are removed in steps of --step, least important first, against random orders and specialised-last and
confident-last orders; Michel's one-head-per-layer experiment; the leaderboard of the pruned model. Writes
pruning.csv, pruning.md, importance.csv, pruned_leaderboard.csv, figures/ and run.json to --out. Layers and heads
are 1-based (layer-head). More in the docs: docs/commands/prune.md.
"""


def _objective_option() -> Any:
    return options.choice_option("representation", "--objective", OBJECTIVE_CHOICES, help=_OBJECTIVE_HELP,
                                 metavar="NAME")


def _ablation_option() -> Any:
    return options.choice_option("zero", "--ablation", ABLATION_CHOICES, help=_ABLATION_HELP, metavar="NAME")


def _select_limit_option() -> Any:
    return typer.Option(None, "--select-limit", min=1, max=options.MAX_COUNT, metavar="N",
                        rich_help_panel=options.MODEL_PANEL,
                        help="Read at most N sentences of --select-on (default 1000).")


def _on_long_option() -> Any:
    return options.on_long_option(help="Sentences longer than the model's maximum: skip or truncate ('window' is "
                                       "refused).")


def _max_batch_tokens_option() -> Any:
    return options.max_batch_tokens_option(4096)


@command("importance", help=_IMPORTANCE_HELP)
def importance_cli(
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(...),
    select_on: Optional[str] = options.select_on_option(help=_DATA),
    limit: Optional[int] = options.limit_option(),
    select_limit: Optional[int] = _select_limit_option(),
    device: Optional[str] = options.device_option(),
    out: Optional[Path] = options.out_option(help="Output folder (default `runs/importance-MODEL-DATA`)."),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    objective: str = _objective_option(),
    ablation: str = _ablation_option(),
    loo: bool = typer.Option(True, "--loo/--no-loo", metavar="", rich_help_panel=options.ANALYSIS_PANEL,
                             help="Also ablate each head alone (leave-one-out)."),
    global_rescale: bool = typer.Option(False, "--global-rescale", metavar="", rich_help_panel=options.ANALYSIS_PANEL,
                                        help="Min-max rescale importance over all heads (HF bertology's default)."),
    n_resamples: int = options.n_resamples_option(help="Bootstrap resamples over sentences."),
    max_batch_tokens: int = _max_batch_tokens_option(),
    on_long: str = _on_long_option(),
    config: Optional[Path] = options.config_option(),
) -> None:
    from probes.reports.writer import check_out_dir
    from probes.runs.importance import importance

    out_dir = out or options.default_out(model, treebank, prefix="importance-")
    check_out_dir(out_dir, "probes importance", overwrite=overwrite)  # before the model runs
    result = importance(model, treebank, select_on=select_on, objective=objective, ablation=ablation, loo=loo,
                        global_rescale=global_rescale, n_resamples=n_resamples, max_batch_tokens=max_batch_tokens, on_long=on_long,
                        device=device, limit=limit, select_limit=select_limit, progress=progress,
                        record={"options": {"config": str(config) if config else None}})
    paths = result.write(out_dir, figure_format=figure_format, overwrite=overwrite)
    typer.echo(result.format(), nl=False)
    typer.echo(f"Report: {paths['importance.md']}  (all files in {Path(out_dir)})")


@command("prune", help=_PRUNE_HELP)
def prune_cli(
    ctx: typer.Context,
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(...),
    select_on: Optional[str] = options.select_on_option(help=_DATA),
    limit: Optional[int] = options.limit_option(),
    select_limit: Optional[int] = _select_limit_option(),
    device: Optional[str] = options.device_option(),
    out: Optional[Path] = options.out_option(help="Output folder (default `runs/prune-MODEL-DATA`)."),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    one_per_layer: bool = typer.Option(True, "--one-per-layer/--no-one-per-layer", metavar="",
                                       rich_help_panel=options.OUTPUT_PANEL,
                                       help="Also run Michel's experiment: each layer reduced to its best head."),
    no_leaderboard: bool = typer.Option(False, "--no-leaderboard", metavar="", rich_help_panel=options.OUTPUT_PANEL,
                                        help="Skip the pruned leaderboard."),
    objective: str = _objective_option(),
    ablation: str = _ablation_option(),
    step: float = typer.Option(0.1, "--step", min=0.01, max=0.5, metavar="FRACTION",
                               rich_help_panel=options.ANALYSIS_PANEL, help="Fraction of all heads removed per step."),
    once: bool = typer.Option(False, "--once", metavar="", rich_help_panel=options.ANALYSIS_PANEL,
                              help="Rank heads once, on the unpruned model (default: after every step)."),
    seeds: int = typer.Option(20, "--seeds", min=0, max=options.option_rules.MAX_SEEDS, metavar="N",
                              rich_help_panel=options.ANALYSIS_PANEL, help="Random orders in the band."),
    orders: Optional[str] = typer.Option("specialised-last,confident-last", "--orders", metavar="NAMES",
                                         rich_help_panel=options.ANALYSIS_PANEL,
                                         help="Score orders to draw ('' for none)."),
    leaderboard_at: float = typer.Option(
        0.5, "--leaderboard-at", min=0.01, max=0.99, metavar="FRACTION", rich_help_panel=options.ANALYSIS_PANEL,
        help="Compare the leaderboards before and after pruning this fraction of heads."),
    max_batch_tokens: int = _max_batch_tokens_option(),
    on_long: str = _on_long_option(),
    config: Optional[Path] = options.config_option(),
) -> None:
    options.refuse_together(ctx, ("leaderboard_at", "no_leaderboard"))
    from probes.reports.writer import check_out_dir
    from probes.runs.importance import prune

    out_dir = out or options.default_out(model, treebank, prefix="prune-")
    check_out_dir(out_dir, "probes prune", overwrite=overwrite)  # before the model runs
    result = prune(model, treebank, select_on=select_on, objective=objective, ablation=ablation, step=step,
                   importance="once" if once else "iterative", random_seeds=tuple(range(seeds)),
                   orders=tuple(options.split_list([orders] if orders else [])), one_per_layer=one_per_layer,
                   leaderboard_at=None if no_leaderboard else leaderboard_at, max_batch_tokens=max_batch_tokens, on_long=on_long,
                   device=device, limit=limit, select_limit=select_limit, progress=progress,
                   record={"options": {"config": str(config) if config else None}})
    paths = result.write(out_dir, figure_format=figure_format, overwrite=overwrite)
    typer.echo(result.format(), nl=False)
    typer.echo(f"Report: {paths['pruning.md']}  (all files in {Path(out_dir)})")
