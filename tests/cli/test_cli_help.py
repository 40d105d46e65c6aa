"""The command line a researcher meets first (issue 38): ``probes --version``, and ``--help`` grouped so that the
common options come first and each group fits on one screen.

Every command's ``--help`` is rendered as a terminal of 80 columns without colour would show it (``COLUMNS=80``,
``TERM=dumb``, ``NO_COLOR``) and cut into its panels (``╭─ Title ─╮`` ... ``╰─╯``).
"""

from __future__ import annotations

import re

import pytest
import typer.main

from probes._version import DISTRIBUTION, __version__
from probes.cli import app, main, options
from probes.cli._app import COMMAND_PANELS, GENERAL_PANEL

#: Every command line whose ``--help`` is checked: each command, the ``data`` group and its commands.
_GROUP = typer.main.get_command(app)
HELPS = sorted([[name] for name in _GROUP.commands]  # type: ignore[attr-defined]  # a group: it has commands
               + [["data", name] for name in _GROUP.commands["data"].commands])  # type: ignore[attr-defined]  # as above
#: The most lines a panel may take: one screen.
SCREEN = 40


def _help(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    for name, value in (("COLUMNS", "80"), ("TERM", "dumb"), ("NO_COLOR", "1")):
        monkeypatch.setenv(name, value)
    assert main([*args, "--help"]) == 0
    return capsys.readouterr().out


def _panels(text: str) -> list[tuple[str, list[str]]]:
    """``(title, lines)`` of each panel, in order; ``lines`` from its top border to its bottom border."""
    panels: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        top = re.match(r"^╭─ (.+?) ─", line)
        if top:
            current = [line]
            panels.append((top.group(1), current))
        elif current is not None:
            current.append(line)
            if line.startswith("╰"):
                current = None
    return panels


def test_version_prints_the_distribution_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"{DISTRIBUTION} {__version__}\n"
    assert main(["--version", "leaderboard"]) == 0  # eager: nothing else runs
    assert capsys.readouterr().out.startswith(DISTRIBUTION)


@pytest.mark.parametrize("args", HELPS, ids=" ".join)
def test_help_puts_the_common_options_first_and_fits_one_screen_per_panel(
        args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(args, monkeypatch, capsys)
    assert "\x1b[" not in text  # no colour
    assert all(len(line) <= 80 for line in text.splitlines())
    panels = _panels(text)
    titles = [title for title, _ in panels]
    for title, lines in panels:
        assert len(lines) <= SCREEN, f"{' '.join(args)}: panel {title!r} runs to {len(lines)} lines"
    if args == ["data"]:  # a group: its own options, then its commands
        assert titles == ["Options", "Commands"]
        return
    option_panels = [t for t in titles if t != "Arguments"]
    assert "Options" not in option_panels  # typer's catch-all panel: every option has its own
    assert option_panels[-1] == GENERAL_PANEL and "--help" in "".join(dict(panels)[GENERAL_PANEL])
    assert option_panels == sorted(option_panels, key=options.PANELS.index)  # one order on every command
    if titles[0] != "Arguments":  # the first panel is the common one: the model and the data, where there are any
        first = "".join(panels[0][1])
        assert titles[0] in (options.MODEL_PANEL, options.DATA_PANEL, options.OUTPUT_PANEL, GENERAL_PANEL)
        assert "--model" in first or not any("--model" in "".join(lines) for _, lines in panels)


def test_the_commands_are_grouped_in_the_top_help(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    text = _help([], monkeypatch, capsys)
    panels = _panels(text)
    assert [title for title, _ in panels] == ["Options", *COMMAND_PANELS]  # no catch-all "Commands" panel
    for title, lines in panels[1:]:
        listed = [m.group(1) for line in lines if (m := re.match(r"^│ (\w+)\s", line))]
        assert listed == list(COMMAND_PANELS[title]), title
        assert len(lines) <= SCREEN
    assert "--version" in "".join(panels[0][1])
    registered = set(_GROUP.commands)  # type: ignore[attr-defined]  # a group: it has commands
    assert registered == {name for names in COMMAND_PANELS.values() for name in names}


@pytest.mark.parametrize("command", ["leaderboard", "atlas", "match", "probe", "importance"])
def test_model_and_data_come_first(command: str, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    title, lines = _panels(_help([command], monkeypatch, capsys))[0]
    body = "".join(lines)
    assert title == options.MODEL_PANEL and "--model" in body and ("--treebank" in body or "--train" in body)
    assert "--max-attention-mb" not in body  # the advanced options come last


def test_the_choices_the_cli_repeats_are_the_library_s() -> None:
    from probes.cli.extract import FROM_POOL
    from probes.extraction.align import FROM_POOLS

    assert FROM_POOL == FROM_POOLS
