"""The typer application every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="probes",
    help="What does each attention head do? Word-level attention, head leaderboards and probes "
    "for Hugging Face models (Clark et al. 2019). Layers and heads are printed 1-based (layer-head).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

#: Set by --debug (given before or after the command; main() moves it here): tracebacks instead of one line.
state = {"debug": False}


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors (also accepted after the command).")) -> None:
    state["debug"] = debug
