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
from probes.cli._app import app

#: ``--objective`` and ``--ablation`` values (those of probes.importance / probes.extraction.interventions,
#: repeated here so that parsing imports no torch; a test keeps them equal).
OBJECTIVE_CHOICES = ("lm", "representation", "probe")
ABLATION_CHOICES = ("zero", "mean", "uniform")
_DATA = ("Where everything that is chosen comes from (the probe objective's fit, each head's mean for mean "
         "ablation, importance orders, specialisation and confidence). Default: the selection half of "
         "--treebank (fixed hash of sentence ids), the other half is reported on.")
_OBJECTIVE_HELP = ("What a change is measured on: representation (1 - cosine of the mean-pooled final states to the "
                   "unmodified model's; any model), probe (cross-entropy of a linear probe for each word's "
                   "dependency relation on the last layer, fitted on the selection data), lm (masked or next-token "
                   "language-model loss; needs a checkpoint with its LM head).")
_ABLATION_HELP = ("How a removed head is replaced before the output projection: zero (Michel et al.), mean (its mean "
                  "output on the selection data) or uniform (uniform attention over the keys it may attend).")

_IMPORTANCE_HELP = """Head importance (Michel et al. 2019): the gradient score I_h = E|dL/dg_h| (layer-wise l2
normalised) and the leave-one-out effect of ablating each head alone, with bootstrap intervals over
sentences, and the rank correlation of the two.

Writes importance.csv (one row per head), importance.md, figures/ (heatmaps, importance vs
leave-one-out) and run.json to --out. Layers and heads are 1-based (layer-head) in every output.
"""

_PRUNE_HELP = """Pruning curves (Michel et al. 2019 §4.2, Voita et al. 2019): heads removed in steps of --step,
least important first (importance re-estimated on the selection data after every step), against a
band of random orders and against specialised-last and confident-last orders from the leaderboard and
atlas; Michel's one-head-per-layer experiment; the leaderboard of the model pruned at --leaderboard-at.

Writes pruning.csv (order, fraction_pruned, objective ...), pruning.md, importance.csv (the unpruned
model's importance on the selection data), pruned_leaderboard.csv, figures/ and run.json to --out.
Layers and heads are 1-based (layer-head) in every output.
"""


def _objective_option() -> Any:
    return typer.Option("representation", "--objective", metavar="lm|representation|probe",
                        callback=options.one_of("--objective", OBJECTIVE_CHOICES), help=_OBJECTIVE_HELP)


def _ablation_option() -> Any:
    return typer.Option("zero", "--ablation", metavar="zero|mean|uniform",
                        callback=options.one_of("--ablation", ABLATION_CHOICES), help=_ABLATION_HELP)


def _select_limit_option() -> Any:
    return typer.Option(None, "--select-limit", min=1, max=options.MAX_COUNT, metavar="N",
                        help="Read at most N sentences of --select-on (default 1000; --limit caps it too).")


def _on_long_option() -> Any:
    return options.on_long_option(help="Sentences longer than the model's maximum: skip, or truncate to the leading "
                                       "words that fit ('window' is refused: importance scores whole sentences); "
                                       "each one is named in the summary, the report and run.json.")


def _max_batch_tokens_option() -> Any:
    return options.max_batch_tokens_option(4096)


@app.command("importance", help=_IMPORTANCE_HELP)
def importance_cli(
    config: Optional[Path] = options.config_option(),
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(...),
    select_on: Optional[str] = options.select_on_option(help=_DATA),
    select_limit: Optional[int] = _select_limit_option(),
    objective: str = _objective_option(),
    ablation: str = _ablation_option(),
    loo: bool = typer.Option(True, "--loo/--no-loo", help="Also ablate each head alone (batched: several heads' ablations as row blocks of one pass, equal to one pass per head)."),
    global_rescale: bool = typer.Option(False, "--global-rescale", help="Min-max rescale importance over all heads "
                                        "after the layer normalisation (HF bertology's default; not in the paper)."),
    n_resamples: int = options.n_resamples_option(help="Bootstrap resamples over sentences."),
    max_batch_tokens: int = _max_batch_tokens_option(),
    on_long: str = _on_long_option(),
    device: Optional[str] = options.device_option(),
    limit: Optional[int] = options.limit_option(),
    out: Optional[Path] = options.out_option(help="Output folder (default `runs/importance-MODEL-DATA`)."),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
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


@app.command("prune", help=_PRUNE_HELP)
def prune_cli(
    config: Optional[Path] = options.config_option(),
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(...),
    select_on: Optional[str] = options.select_on_option(help=_DATA),
    select_limit: Optional[int] = _select_limit_option(),
    objective: str = _objective_option(),
    ablation: str = _ablation_option(),
    step: float = typer.Option(0.1, "--step", min=0.01, max=0.5, help="Fraction of all heads removed per step."),
    once: bool = typer.Option(False, "--once", help="Rank heads once on the unpruned model (default: re-estimate "
                                                    "importance after every step)."),
    seeds: int = typer.Option(20, "--seeds", min=0, max=options.option_rules.MAX_SEEDS, metavar="N",
                              help="Random orders in the band (seeds 0..N-1)."),
    orders: Optional[str] = typer.Option("specialised-last,confident-last", "--orders", metavar="NAMES",
                                         help="Score orders to draw (comma-separated; '' for none)."),
    one_per_layer: bool = typer.Option(True, "--one-per-layer/--no-one-per-layer",
                                       help="Michel's experiment: each layer reduced to its most important head."),
    leaderboard_at: float = typer.Option(
        0.5, "--leaderboard-at", min=0.01, max=0.99, metavar="FRACTION",
        help="Compare the leaderboard of the unpruned model with that of the model with this fraction of heads "
             "pruned by importance."),
    no_leaderboard: bool = typer.Option(False, "--no-leaderboard", help="Skip the pruned leaderboard."),
    max_batch_tokens: int = _max_batch_tokens_option(),
    on_long: str = _on_long_option(),
    device: Optional[str] = options.device_option(),
    limit: Optional[int] = options.limit_option(),
    out: Optional[Path] = options.out_option(help="Output folder (default `runs/prune-MODEL-DATA`)."),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
) -> None:
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
