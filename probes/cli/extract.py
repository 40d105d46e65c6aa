"""CLI command ``extract``: word-level attention of a treebank into an attention store."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import app
from probes.errors import ConfigError

logger = logging.getLogger("probes")


def _indices(text: Optional[str], what: str) -> Optional[list[int]]:
    """``"1,2,5-6"`` (1-based, as people write them) -> ``[0, 1, 4, 5]`` (0-based)."""
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            lo, _, hi = part.partition("-")
            first, last = int(lo), int(hi or lo)
        except ValueError:
            raise ConfigError(f"--{what} expects 1-based numbers or ranges like 1,3,5-6; found {part!r}") from None
        if first < 1 or last < first:
            raise ConfigError(f"--{what} expects 1-based numbers or ranges like 1,3,5-6; found {part!r}")
        out += range(first - 1, last)
    return out


@app.command("extract")
def extract_cli(
    model: str = options.model_option(...),
    treebank: str = options.treebank_option(..., help=f"Treebank: {options.DATA_HELP}."),
    store: Path = typer.Option(..., "--store", "-s", help="Store folder to write (an interrupted run resumes)."),
    batch_size: int = options.batch_size_option(),
    device: Optional[str] = options.device_option(),
    dtype: str = typer.Option("float32", "--dtype", help="Model dtype: float32, float16 or bfloat16."),
    layers: Optional[str] = typer.Option(None, "--layers", help="Layers to keep, 1-based: e.g. 1,5-6 (default all)."),
    heads: Optional[str] = typer.Option(None, "--heads", help="Heads to keep, 1-based: e.g. 1-4 (default all)."),
    from_pool: str = typer.Option("mean", "--from-pool",
                                  help="A word's row from its tokens' rows: mean (paper), first (released code), max."),
    on_long: str = typer.Option("skip", "--on-long", help="Sentences over --max-length: skip, truncate or window."),
    max_length: Optional[int] = typer.Option(None, "--max-length", min=2,
                                             help="Most tokens per sentence, specials included (default: model's)."),
    shard_size: int = typer.Option(256, "--shard-size", min=1, help="Sentences per store shard."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Model revision (hub models)."),
    progress: bool = options.progress_option(help="Show a progress bar on stderr."),
) -> None:
    """Extract word-level attention of every head for a treebank into an attention store.

    Rows attend from, columns to; a word's column sums its tokens, its row is the mean of its
    tokens' rows (Clark et al. 2019 §4.1). Special tokens are kept and flagged. Layers and
    heads are given 1-based here and recorded 0-based in the store.
    """
    from probes.corpora import read_treebank
    from probes.corpora.registry import resolve_treebank
    from probes.extraction.store import extract_to_store
    from probes.runs.inputs import load_extractor

    path = resolve_treebank(treebank)
    extractor = load_extractor(
        model, revision=revision, device=device, dtype=dtype, batch_size=batch_size,
        layers=_indices(layers, "layers"), heads=_indices(heads, "heads"), from_pool=from_pool,
        max_length=max_length, on_long=on_long, progress=progress)
    result = extract_to_store(extractor, read_treebank(path), store, shard_size=shard_size, source=path)
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
    typer.echo(f"store:      {result.path} (float16 shards; read with probes.open_store)")
