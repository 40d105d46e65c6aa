"""The public API (issue 37, item 7): every command of ``probes --help`` has a named library call on ``probes``,
and each call path the documentation names resolves after a plain ``import probes``."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import probes

REPO = Path(__file__).resolve().parents[1]

#: Documented call paths that resolve only after an explicit import of their module: ``probes.analysis`` imports
#: its modules eagerly and has no lazy ``__getattr__`` (probes/analysis/__init__.py).
_NEEDS_IMPORT = {"probes.analysis.head_types.head_types"}


def _cli_commands() -> set[str]:
    from probes.cli import app

    commands = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback is not None}
    return commands | {g.name for g in app.registered_groups if g.name}


def test_every_command_has_a_library_call() -> None:
    """The table is complete against the CLI: a new command without a library call fails here."""
    assert set(probes.COMMAND_CALLS) == _cli_commands()
    for command, names in probes.COMMAND_CALLS.items():
        assert names, command
        for name in names:
            assert name in dir(probes), f"probes.{name} ({command}) is not listed by dir(probes)"
            assert getattr(probes, name) is not None, f"probes.{name} ({command})"


def test_command_calls_are_the_functions_the_cli_calls() -> None:
    from probes.runs.experiment import report_experiment, run_experiment
    from probes.runs.match import match_models
    from probes.runs.train import train_model

    assert probes.match is match_models and probes.train is train_model
    assert probes.run_experiment is run_experiment and probes.report_experiment is report_experiment
    # read from each name's home too: the name on ``probes`` is that object (tests/test_public_names.py)
    homes = {**probes._LAZY, **probes._COMMAND_CALLS}
    for command, names in probes.COMMAND_CALLS.items():
        for name in names:
            module, _, attr = homes[name].partition(":")
            call = getattr(importlib.import_module(module), attr or name)
            assert name == "KNOWN_MODELS" or callable(call), f"probes.{name} ({command})"
            assert getattr(probes, name) is call, f"probes.{name} ({command})"


def _documented_paths() -> list[str]:
    pages = [REPO / "README.md", *(p for p in (REPO / "docs").rglob("*.md") if "notes" not in p.parts)]
    found = {m for page in pages for m in re.findall(r"\b(probes(?:\.[A-Za-z_]\w*)+)\(", page.read_text("utf-8"))}
    return sorted(found - _NEEDS_IMPORT)


def test_documented_call_paths_resolve_after_import_probes() -> None:
    """In a fresh interpreter: ``import probes`` alone, then each path by attribute access."""
    paths = _documented_paths()
    calls = sorted({f"probes.{n}" for names in probes.COMMAND_CALLS.values() for n in names})
    assert "probes.runs.match.match_models" in paths  # docs/commands/match.md
    code = ("import functools, json, sys, probes\n"
            "bad = {}\n"
            "for p in json.loads(sys.argv[1]):\n"
            "    try:\n"
            "        functools.reduce(getattr, p.split('.')[1:], probes)\n"
            "    except AttributeError as e:\n"
            "        bad[p] = str(e)\n"
            "print(json.dumps(bad))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(paths + calls)], capture_output=True, text=True,
                          timeout=300, cwd=REPO)  # the timeout only guards against a hang
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {}


def test_subpackages_load_lazily() -> None:
    code = ("import sys, probes\n"
            "assert 'probes.runs.match' not in sys.modules\n"
            "assert probes.runs.match.match_models is probes.match\n"
            "assert not hasattr(probes.runs, 'no_such_module')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
