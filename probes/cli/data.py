"""CLI commands ``data add`` and ``data list``: the registry's treebanks in the local cache."""

from __future__ import annotations

from pathlib import Path

import typer

from probes.cli._app import ProbesGroup, app, command, panel_of
from probes.cli.options import path_parser

data_app = typer.Typer(
    help="The registry's treebanks (`ud:TREEBANK:SPLIT`): list them, or add local copies to the cache.\n\n"
    "Local copies make `ud:` names work offline. Downloads go to the same cache, `$PROBES_CACHE` or the "
    "platform cache folder.",
    no_args_is_help=True,
    cls=ProbesGroup,
)
app.add_typer(data_app, name="data", rich_help_panel=panel_of("data"))


@command("add", group=data_app)
def add_cli(
    name: str = typer.Argument(..., metavar="NAME",
                               help="`ud:TREEBANK:SPLIT` (e.g. `ud:en_ewt:dev`), or `ud:TREEBANK` with a folder."),
    source: Path = typer.Argument(..., metavar="PATH", parser=path_parser("PATH", "a file or folder path"),
                                  help="The local file, or a folder holding the registry's file names "
                                  "(e.g. a clone of UD_English-EWT)."),
) -> None:
    """Put local copies of registry treebanks into the cache, so `ud:` names work with no network.

    Each file is checked against the sha256 the registry pins; where it pins none, the file's hash
    is recorded and every later use is checked against it (as for a first download).
    """
    from probes.corpora.registry import add_to_cache

    for done in add_to_cache(name, source):
        how = "sha256 matches the registry" if done.pinned else f"sha256 {done.sha256[:12]}... recorded"
        typer.echo(f"{done.name}: {done.path} ({how})")


@command("list", group=data_app)
def list_cli() -> None:
    """List the registry's treebank names and which of them are in the cache."""
    from probes.corpora.registry import cache_dir, cache_status

    typer.echo(f"cache: {cache_dir()}")
    for spec, path in cache_status():
        typer.echo(f"{spec:<18} {path if path is not None else 'not cached (downloaded on first use)'}")
