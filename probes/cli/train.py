"""``probes train``: train a small transformer from scratch under a named initialisation, with checkpoints.

A thin command over :func:`probes.runs.train.train_model`: parse the options into a
:class:`~probes.training.config.TrainConfig` (which checks them; ``--init`` is parsed into its
:class:`~probes.training.schemes.InitScheme` while the command line is read), train, write the curves, print the
summary. The architectures are the trainable rows of the families table (:data:`probes.training.config.ARCHS`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from probes.cli import options
from probes.cli._app import command
from probes.errors import ConfigError
from probes.training.config import (
    ARCHS,
    MAX_BATCH_SIZE,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_INTERMEDIATE,
    MAX_LAYERS,
    MAX_SEQ_LEN,
    MAX_STEPS,
    TASK_OPTIONS,
    TrainConfig,
    hidden_size,
    parse_init,
)
from probes.training.schemes import InitScheme
from probes.training.tasks import MAX_TASK_VOCAB, ROLES, TASKS, TEXT

_HELP = """Train a small model from scratch (a BERT-style masked-LM encoder, or a GPT-2 / Llama causal LM).

Built from --layers, --heads and --hidden, initialised by --seed and the --init scheme, trained on the words of
--treebank with held-out loss on --select-on at every checkpoint (steps 0, 1, 2, 4, 8 ... and the last; each a
model folder named trained:OUT@STEP in every command). Writes checkpoints/, curves.csv, figures/, symmetry/ and
run.json to --out. Run the same command again to resume; --overwrite starts over. More in the docs:
docs/commands/train.md.
"""

#: The largest seed: what numpy and torch both take.
MAX_SEED = 2**32 - 1


def _init_scheme(value: str | InitScheme) -> InitScheme:
    """``--init`` parsed into its scheme, once, while the command line is read (a usage error naming the option)."""
    try:
        return parse_init(value)
    except ConfigError as exc:
        raise typer.BadParameter(exc.reason.removeprefix("--init: "), param_hint="--init") from None


def _hidden_size(heads: int, hidden: int | None, head_dim: int | None) -> int:
    """The hidden size of either ``--hidden`` or ``--head-dim`` (both, or neither: a usage error naming both)."""
    try:
        return hidden_size(heads, hidden, head_dim)
    except ConfigError as exc:
        raise typer.BadParameter(exc.reason, param_hint="--hidden, --head-dim") from None


# The model's width: the heads at a fixed hidden size (--hidden) or at a fixed head size (--head-dim); its blocks.
_HIDDEN = typer.Option(None, "--hidden", min=1, max=MAX_HIDDEN, metavar="D", rich_help_panel=options.MODEL_PANEL,
                       help="Hidden size (or --head-dim).")
_HEAD_DIM = typer.Option(None, "--head-dim", min=1, max=MAX_HIDDEN, metavar="D", rich_help_panel=options.MODEL_PANEL,
                         help="Head size: hidden = heads x D.")
_ATTENTION_ONLY = typer.Option(False, "--attention-only", metavar="", rich_help_panel=options.MODEL_PANEL,
                               help="Blocks without an MLP.")


#: The options of ``--task`` (probes.training.tasks), defined here to keep the command's signature short.
_TASK: dict[str, Any] = {
    "task": typer.Option(TEXT, "--task", metavar="|".join(TASKS), callback=options.one_of("--task", TASKS),
                         rich_help_panel=options.DATA_PANEL,
                         help="text: --treebank; induction: random tokens repeated with a random period; roles: "
                              "markers naming a copy role (loss on the predictable positions only)."),
    "task_vocab": typer.Option(TASK_OPTIONS["task_vocab"], "--task-vocab", min=2, max=MAX_TASK_VOCAB, metavar="V",
                               rich_help_panel=options.DATA_PANEL, help="Ordinary tokens of a task."),
    "period_min": typer.Option(TASK_OPTIONS["period_min"], "--period-min", min=1, max=MAX_TASK_VOCAB, metavar="P",
                               rich_help_panel=options.DATA_PANEL, help="Shortest period (--task induction)."),
    "period_max": typer.Option(TASK_OPTIONS["period_max"], "--period-max", min=1, max=MAX_TASK_VOCAB, metavar="P",
                               rich_help_panel=options.DATA_PANEL, help="Longest period (--task induction)."),
    "task_roles": typer.Option(TASK_OPTIONS["task_roles"], "--task-roles", min=1, max=len(ROLES), metavar="K",
                               rich_help_panel=options.DATA_PANEL,
                               help=f"Roles of --task roles: the first K of {', '.join(ROLES)}."),
}


#: The options of the Training panel, defined here to keep the command's signature short.
_RUN: dict[str, Any] = {
    "init": typer.Option("independent", "--init", metavar="SCHEME", parser=_init_scheme,
                         rich_help_panel=options.TRAINING_PANEL, help="independent, identical or identical+noise:EPS."),
    "attention_dropout": typer.Option(0.0, "--attention-dropout", min=0.0, max=1.0, metavar="P",
                                      rich_help_panel=options.TRAINING_PANEL,
                                      help="Dropout on attention probabilities (0 keeps identical heads equal)."),
    "hidden_dropout": typer.Option(0.0, "--hidden-dropout", min=0.0, max=1.0, metavar="P",
                                   rich_help_panel=options.TRAINING_PANEL,
                                   help="Every other dropout (embeddings, residual, MLP); none in Llama."),
    "seed": typer.Option(0, "--seed", min=0, max=MAX_SEED, metavar="S", rich_help_panel=options.TRAINING_PANEL,
                         help="Seed of the initialisation and of dropout."),
    "data_seed": typer.Option(0, "--data-seed", min=0, max=MAX_SEED, metavar="S", rich_help_panel=options.TRAINING_PANEL,
                              help="Seed of the data order and masks."),
    "steps": typer.Option(1000, "--steps", min=1, max=MAX_STEPS, metavar="N", rich_help_panel=options.TRAINING_PANEL,
                          help="Optimizer steps."),
    "batch_size": typer.Option(32, "--batch-size", min=1, max=MAX_BATCH_SIZE, metavar="N",
                               rich_help_panel=options.TRAINING_PANEL, help="Blocks per step."),
    "seq_len": typer.Option(64, "--seq-len", min=4, max=MAX_SEQ_LEN, metavar="N", rich_help_panel=options.TRAINING_PANEL,
                            help="Tokens per block (and the model's largest position)."),
    "learning_rate": typer.Option(1e-3, "--learning-rate", min=0.0, metavar="LR", rich_help_panel=options.TRAINING_PANEL,
                                  help="Peak AdamW learning rate (linear decay to 0)."),
    "warmup": typer.Option(0, "--warmup", min=0, max=MAX_STEPS, metavar="N", rich_help_panel=options.TRAINING_PANEL,
                           help="Warm-up steps."),
    "weight_decay": typer.Option(0.0, "--weight-decay", min=0.0, metavar="W", rich_help_panel=options.TRAINING_PANEL,
                                 help="AdamW weight decay."),
    "max_minutes": typer.Option(None, "--max-minutes", min=0.0, metavar="M", rich_help_panel=options.TRAINING_PANEL,
                                help="Stop cleanly at a checkpoint after M minutes (resume later)."),
}
#: ``--symmetry-steps``: the head distances at every early step (probes.training.step_symmetry).
_SYMMETRY_STEPS = typer.Option(0, "--symmetry-steps", min=0, max=MAX_STEPS, metavar="K",
                               rich_help_panel=options.ANALYSIS_PANEL,
                               help="Also the distances at every step 0..K, in memory while training "
                                    "(symmetry-steps/; 0: off).")


@command("train", help=_HELP)
def train_cli(
    arch: str = typer.Option(..., "--arch", metavar="|".join(ARCHS), callback=options.one_of("--arch", ARCHS),
                             rich_help_panel=options.MODEL_PANEL, help="bert: masked-LM encoder; gpt2, llama: causal LMs."),
    layers: int = typer.Option(..., "--layers", min=1, max=MAX_LAYERS, metavar="L", rich_help_panel=options.MODEL_PANEL,
                               help="Layers."),
    heads: int = typer.Option(..., "--heads", min=1, max=MAX_HEADS, metavar="H", rich_help_panel=options.MODEL_PANEL,
                              help="Attention heads per layer (head size = hidden / heads)."),
    hidden: Optional[int] = _HIDDEN, head_dim: Optional[int] = _HEAD_DIM, attention_only: bool = _ATTENTION_ONLY,
    intermediate: Optional[int] = typer.Option(None, "--intermediate", min=1, max=MAX_INTERMEDIATE, metavar="N",
                                               rich_help_panel=options.MODEL_PANEL, help="MLP width (default 4 x hidden)."),
    kv_heads: Optional[int] = typer.Option(None, "--kv-heads", min=1, max=MAX_HEADS, metavar="N",
                                           rich_help_panel=options.MODEL_PANEL,
                                           help="Key/value heads of Llama's grouped-query attention."),
    tokenizer: str = typer.Option("train:4000", "--tokenizer", metavar="train:VOCAB|MODEL", rich_help_panel=options.DATA_PANEL,
                                  help="train:VOCAB trains one on the training text; else a base model's."),
    treebank: list[str] = typer.Option([], "--treebank", "-t", metavar="DATA", rich_help_panel=options.DATA_PANEL,
                                       help=f"Training data (repeat, or commas): {options.DATA_HELP}, or a .txt "
                                            "file (a sentence per line). Needed for --task text; none for a task."),
    select_on: Optional[str] = typer.Option(None, "--select-on", metavar="DEV", rich_help_panel=options.DATA_PANEL,
                                            help="Held-out data (default: a fixed tenth of --treebank)."),
    task: str = _TASK["task"], task_vocab: int = _TASK["task_vocab"], task_roles: int = _TASK["task_roles"], period_min: int = _TASK["period_min"], period_max: int = _TASK["period_max"],
    out: Path = options.out_option(..., help="Run folder (checkpoints/, curves, run.json)."),
    checkpoints: str = typer.Option("log2", "--checkpoints", metavar="log2|log2+50",
                                    rich_help_panel=options.OUTPUT_PANEL,
                                    help="Checkpoint steps: log2 = 0, 1, 2, 4, 8, ... and the last; log2+50 adds "
                                         "every 50th."),
    figure_format: str = options.figure_format_option(),
    overwrite: bool = options.overwrite_option(),
    progress: bool = options.progress_option(),
    symmetry_sentences: int = typer.Option(32, "--symmetry-sentences", min=0, max=options.MAX_COUNT, metavar="N",
                                           rich_help_panel=options.ANALYSIS_PANEL,
                                           help="Held-out sentences for the distances between each layer's heads "
                                                "(0: skip)."),
    symmetry_steps: int = _SYMMETRY_STEPS,
    init: InitScheme = _RUN["init"], attention_dropout: float = _RUN["attention_dropout"],
    hidden_dropout: float = _RUN["hidden_dropout"], seed: int = _RUN["seed"], data_seed: int = _RUN["data_seed"],
    steps: int = _RUN["steps"], batch_size: int = _RUN["batch_size"], seq_len: int = _RUN["seq_len"],
    learning_rate: float = _RUN["learning_rate"], warmup: int = _RUN["warmup"], weight_decay: float = _RUN["weight_decay"],
    max_minutes: Optional[float] = _RUN["max_minutes"],
    config: Optional[Path] = options.config_option(),
) -> None:
    from probes.runs.train import train_model

    settings = TrainConfig(
        arch=arch, layers=layers, heads=heads, hidden=_hidden_size(heads, hidden, head_dim), head_dim=head_dim,
        attention_only=attention_only, intermediate=intermediate, kv_heads=kv_heads,
        init=init, attention_dropout=attention_dropout, hidden_dropout=hidden_dropout, seed=seed,
        data_seed=data_seed, steps=steps, batch_size=batch_size, seq_len=seq_len, learning_rate=learning_rate,
        warmup=warmup, weight_decay=weight_decay, tokenizer=tokenizer, treebank=tuple(options.split_list(treebank)),
        select_on=select_on, checkpoints=checkpoints, max_minutes=max_minutes, task=task, task_vocab=task_vocab,
        period_min=period_min, period_max=period_max, task_roles=task_roles)
    report = train_model(settings, out, progress=progress, overwrite=overwrite,
                         record={"options": {"config": str(config) if config else None,
                                             "symmetry_sentences": symmetry_sentences,
                                             "symmetry_steps": symmetry_steps}},
                         symmetry_sentences=symmetry_sentences, symmetry_steps=symmetry_steps)
    paths = report.write(out, figure_format=figure_format, overwrite=overwrite)
    typer.echo(report.format(), nl=False)
    from probes.reports.training import baseline_warning

    if warning := baseline_warning(report.curves):  # said in words, not left to the numbers above
        typer.echo(warning)
    typer.echo(f"Curves: {paths['curves.csv']}  (checkpoints: trained:{out}@STEP or trained:{out}@last)")
