"""Every documented library call stays reachable after ``import probes`` (issue 38): importing any submodule must not
replace a lazy name on ``probes`` (``probes.importance`` was the pipeline until ``probes.importance.scores`` was
imported, then the subpackage). Run in a fresh interpreter, so that what other tests imported does not count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CODE = """
import importlib, json, pkgutil
import probes

before = {name: getattr(probes, name) for name in sorted(set(probes.__all__) | set(probes._RESULT_TYPES)
                                                        | {n for ns in probes.COMMAND_CALLS.values() for n in ns})}
for info in pkgutil.walk_packages(probes.__path__, "probes."):
    if not info.name.endswith("__main__"):  # probes.__main__ runs the command line
        importlib.import_module(info.name)
bad = {}
homes = {**probes._LAZY, **probes._RESULT_TYPES, **probes._COMMAND_CALLS}
for name, value in before.items():
    now = getattr(probes, name)
    module, _, attr = homes.get(name, "probes").partition(":")
    home = getattr(importlib.import_module(module), attr or name)
    if now is not value or now is not home:
        bad[name] = f"{now!r} (first {value!r}, home {home!r})"
    elif type(now).__name__ == "module":
        bad[name] = f"a module: {now!r}"
for command, names in probes.COMMAND_CALLS.items():
    for name in names:
        if name != "KNOWN_MODELS" and not callable(getattr(probes, name)):
            bad[name] = f"probes {command}: not callable"
print(json.dumps({"bad": bad, "importance": type(probes.importance).__name__}))
"""


def test_every_public_name_survives_importing_every_submodule() -> None:
    proc = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["bad"] == {}
    assert found["importance"] == "module"  # probes.importance stays the subpackage; the call is head_importance


def test_the_importance_call_has_its_own_name() -> None:
    import probes
    import probes.importance.scores  # noqa: F401  (the import that used to replace the call)
    from probes.runs.importance import importance

    assert probes.head_importance is importance and probes.COMMAND_CALLS["importance"] == ("head_importance",)
    assert "head_importance" in probes.__all__ and "importance" not in probes.__all__
