"""CLI command ``extract``: word-level attention of a treebank into an attention store."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

import typer

from probes.cli import options
from probes.cli._app import command

logger = logging.getLogger("probes")


#: ``--from-pool`` values (the extractor's, repeated so that parsing imports no torch; tests/cli/test_cli_help.py keeps
#: them equal).
FROM_POOL = ("mean", "first", "max")


@command("extract")
def extract_cli(
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(..., help=f"Treebank: {options.DATA_HELP}."),
    limit: Optional[int] = options.limit_option(help="Read at most N sentences of the treebank (default: all)."),
    device: Optional[str] = options.device_option(),
    revision: Optional[str] = typer.Option(None, "--revision", metavar="REV", help="Model revision (hub models).",
                                           rich_help_panel=options.MODEL_PANEL,
                                           parser=options.text_parser("--revision", "a model revision")),
    store: Path = options.path_option(..., "--store", "-s", what="a folder path", metavar="FOLDER",
                                      rich_help_panel=options.OUTPUT_PANEL,
                                      help="Store folder to write (an interrupted run resumes)."),
    layers: Optional[str] = options.layers_option(),
    heads: Optional[str] = options.heads_option(),
    from_pool: str = options.choice_option("mean", "--from-pool", FROM_POOL, panel=options.OUTPUT_PANEL,
                                           help="A word's row from its tokens' rows: mean (paper), first, max."),
    shard_size: int = typer.Option(256, "--shard-size", min=1, max=options.MAX_COUNT, metavar="N",
                                   rich_help_panel=options.OUTPUT_PANEL, help="Sentences per store shard."),
    progress: bool = options.progress_option(),
    batch_size: int = options.batch_size_option(),
    on_long: str = options.on_long_option(),
    max_length: Optional[int] = typer.Option(None, "--max-length", min=2, max=options.option_rules.MAX_TOKENS,
                                             metavar="N", rich_help_panel=options.EXTRACTION_PANEL,
                                             help="Most tokens per sentence, specials included (default: model's)."),
    dtype: str = options.dtype_option(),
    max_batch_tokens: Optional[int] = options.max_batch_tokens_option(),
    max_attention_mb: float = options.max_attention_mb_option(),
    device_map: Optional[str] = options.device_map_option(),
    attention_source: str = options.attention_source_option(),
    config: Optional[Path] = options.config_option(),
) -> None:
    """Extract word-level attention of every head for a treebank into an attention store.

    Rows attend from, columns to; a word's column sums its tokens, its row is the mean of its
    tokens' rows (Clark et al. 2019 §4.1). Special tokens are kept and flagged. Layers and
    heads are given 1-based here and recorded 0-based in the store.

    Under ``torchrun`` each rank extracts its block of whole store shards into the same folder and
    rank 0 writes the manifest and prints: the store is the one a single process writes.

    One run per store: before the model loads, the store folder is created, checked writable and locked
    (rank 0 holds the lock), so a second run into it, or an unwritable folder, stops at once.
    """
    import contextlib

    from probes.corpora.registry import resolve_treebank
    from probes.locks import FolderLock
    from probes.world import World, launched

    keep_layers = options.parse_indices(layers, "--layers")  # before the model loads
    keep_heads = options.parse_indices(heads, "--heads")
    path = resolve_treebank(treebank)
    # joined by the CLI under torchrun; a world of one otherwise (without importing torch before the lock)
    world = World.current() if launched() else World()
    with FolderLock(store, what="probes extract") if world.is_main else contextlib.nullcontext():
        from probes.runs.inputs import load_extractor  # torch and transformers: after the lock, at once

        extractor = load_extractor(
            model, revision=revision, device=device, batch_size=batch_size,
            layers=keep_layers, heads=keep_heads, from_pool=from_pool,
            max_length=max_length, on_long=on_long, progress=progress and world.is_main,
            extraction=options.extraction(dtype, max_batch_tokens, max_attention_mb, device_map,
                                                    attention_source))
        _extract(extractor, model, Path(path), store, limit, shard_size, world)


def _extract(extractor: Any, model: str, path: Path, store: Path, limit: int | None, shard_size: int,
             world: Any) -> None:
    """Extract ``path`` into the (locked) store and print what was stored."""
    import itertools

    from probes.corpora import read_treebank
    from probes.extraction.store import extract_to_store

    sentences = itertools.islice(read_treebank(path), limit)
    result = extract_to_store(extractor, sentences, store, shard_size=shard_size, source=path, world=world)
    if not world.is_main:
        return
    report = result.report
    typer.echo(f"model:      {model} ({extractor.n_layers} layers x {extractor.n_heads} heads; "
               f"kept {len(extractor.layers)} x {len(extractor.heads)})")
    typer.echo(f"treebank:   {path}")
    typer.echo(f"sentences:  {result.info['n_sentences']} read, {len(result)} stored "
               f"(max {extractor.max_tokens} tokens: {report['n_skipped']} skipped, "
               f"{report['n_truncated']} truncated, {report['n_windowed']} windowed)")
    for key in ("skipped", "truncated", "windowed"):
        ids = report[key]
        if ids:
            more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
            typer.echo(f"  {key}: {', '.join(ids[:5])}{more}")
    typer.echo(f"store:      {result.path} (float16 shards; read with probes.open_store)"
               + (f"; written by {world.size} ranks" if world.distributed else ""))
