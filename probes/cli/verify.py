"""CLI command ``verify``: is every file of an attention store what ``probes extract`` recorded?"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import command


@command("verify")
def verify_cli(
    store: Path = typer.Argument(..., metavar="STORE", help="Attention store folder (written by `probes extract`).",
                                 parser=options.path_parser("STORE", "a folder path")),
    config: Optional[Path] = options.config_option(),
) -> None:
    """Check every shard of an attention store against its manifest (file sizes and sha256).

    Prints one line per damaged file and exits 1 if there is any (with how to repair the store);
    exits 0 with a summary when every file is intact.
    """
    from probes.errors import DamagedStoreError
    from probes.extraction.store import verify_store
    from probes.extraction.store_verify import repair_hint
    from probes.runs.inputs import open_attention_store

    if not store.exists():
        open_attention_store(store, "probes verify")  # the usual one-line error for a missing folder
    found = verify_store(store)
    for damage in found.damage:
        typer.echo(f"damaged: {damage}")
    if found.damage:
        raise DamagedStoreError(f"{len(found.damage)} damaged file(s) in {len(found.damaged_shards)} of "
                                f"{found.n_shards} shard(s); {repair_hint(store, found.info)}", path=store)
    typer.echo(f"store {store}: {found.n_shards} shard(s), {found.n_sentences} sentences: every file intact "
               "(sizes and sha256 match the manifest)")
