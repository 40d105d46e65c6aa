"""The typer application every command module registers on: its command panels, ``--version`` and ``--debug``.

``probes --help`` lists the commands in the panels of :data:`COMMAND_PANELS`, in that order; each command's
``--help`` lists its options in the panels of :data:`probes.cli.options.PANELS`, the common ones first, and
``--help`` itself in the last (:class:`ProbesCommand`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from probes._version import DISTRIBUTION, __version__

__all__ = ["app", "state", "command", "panel_of", "ProbesCommand", "ProbesGroup", "COMMAND_PANELS", "GENERAL_PANEL"]

#: The panels of ``probes --help`` and their commands, in the order shown (tests/cli/test_cli_help.py holds it
#: complete against the registered commands).
COMMAND_PANELS: dict[str, tuple[str, ...]] = {
    "Analyses": ("demo", "leaderboard", "atlas", "match", "coref", "bridging", "sources", "probe", "importance",
                 "prune", "baselines"),
    "Models and data": ("models", "data", "extract", "verify"),
    "Experiments": ("run", "report"),
    "Training": ("train",),
}
#: The last options panel of every command: ``--config`` and ``--help``.
GENERAL_PANEL = "General"

_F = TypeVar("_F", bound=Callable[..., Any])


class ProbesCommand(TyperCommand):
    """A command whose ``--help`` option sits in the last panel (:data:`GENERAL_PANEL`), beside ``--config``, so that
    the first panel ``--help`` prints is the command's common options, not typer's catch-all "Options"."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.rich_help_panel = GENERAL_PANEL
            option.metavar = ""  # a flag: no "<bool>" beside it
        return option


class ProbesGroup(TyperGroup):
    """A group of commands (``probes``, ``probes data``): listed in :data:`COMMAND_PANELS`' order (then any other,
    as registered); ``--help`` without a ``<bool>`` beside it."""

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    def list_commands(self, ctx: Any) -> list[str]:
        order = [name for names in COMMAND_PANELS.values() for name in names]
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: order.index(n) if n in order else len(order))


def panel_of(name: str) -> str:
    """The panel of command ``name`` (KeyError for a command missing from :data:`COMMAND_PANELS`)."""
    return next(panel for panel, names in COMMAND_PANELS.items() if name in names)


app = typer.Typer(
    name="probes",
    cls=ProbesGroup,
    help="What does each attention head do? Word-level attention, head leaderboards and probes "
    "for Hugging Face models (Clark et al. 2019). Layers and heads are printed 1-based (layer-head). "
    "Start with `probes demo`; `probes COMMAND --help` lists a command's options, common ones first.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)


def command(name: str, *, help: str | None = None, group: typer.Typer | None = None) -> Callable[[_F], _F]:
    """Register a command on ``app`` (or on ``group``, e.g. ``probes data``) in its panel of ``probes --help``, with
    ``--help`` in its last options panel."""
    if group is not None:
        return group.command(name, help=help, cls=ProbesCommand)
    return app.command(name, help=help, cls=ProbesCommand, rich_help_panel=panel_of(name))


#: Set by --debug (given before or after the command; main() moves it here): tracebacks instead of one line.
state = {"debug": False}


def _version(value: bool) -> None:
    """``--version``: the distribution's name and version, then exit 0."""
    if value:
        typer.echo(f"{DISTRIBUTION} {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", metavar="", help="Show full tracebacks on errors (also accepted after the "
                                                      "command)."),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_version, metavar="",
                                 help="Print the version and exit."),
) -> None:
    state["debug"] = debug  # --version has exited already (an eager option)
