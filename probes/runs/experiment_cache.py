"""Saved units of an experiment, keyed by what they depend on, so a finished experiment re-reports in seconds and
an interrupted one resumes.

A unit is one analysis run on one model and one dataset. It is saved under
``RUN_DIR/results/<analysis>/<model>/<data>/`` as ``unit.json`` (its key, the inputs of the key, the time it took)
and ``result/`` (the result object, :meth:`probes.results.Result.save`), and, when asked, ``report/`` (the
result's own report, as its command writes it). The key is the sha256 of the analysis kind and options, the
model's spec and weights hash, each data file's sha256 and the package version: a unit is re-used only when all
of them are equal. A unit is written into a temporary folder and renamed into place when complete, so an
interrupt never leaves a half-written unit that looks finished.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probes.atomic_io import atomic_folder
from probes.errors import InputError
from probes.safe_read import inside_folder, load_json

__all__ = ["unit_key", "UnitStore", "SavedUnit", "UNIT_FILE"]

#: The file that marks a finished unit.
UNIT_FILE = "unit.json"


def _plain(value: Any) -> Any:
    """JSON-able form of an option value (tuples as lists, paths as text), for hashing and the record."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def unit_key(inputs: Mapping[str, Any]) -> str:
    """Hex sha256 of ``inputs`` (kind, options, model weights hash, data hashes ...) as canonical JSON."""
    text = json.dumps(_plain(inputs), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class SavedUnit:
    """A finished unit on disk: its folder (relative to the run folder), key, its unit file's entry (key, names,
    inputs, seconds, when it finished) and whether it was re-used."""

    folder: str
    key: str
    entry: dict[str, Any]
    reused: bool


class UnitStore:
    """The ``results/`` folder of one run folder."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)

    def folder(self, analysis: str, model: str, data: str) -> Path:
        return self.run_dir / "results" / analysis / model / data

    def relative(self, folder: Path) -> str:
        return folder.relative_to(self.run_dir).as_posix()

    def find(self, analysis: str, model: str, data: str, key: str) -> SavedUnit | None:
        """The saved unit if it is finished and its key is ``key``; None otherwise (missing, stale, unreadable)."""
        folder = self.folder(analysis, model, data)
        try:
            entry = load_json(folder / UNIT_FILE, what=f"a unit record ({UNIT_FILE})")
        except (InputError, OSError):  # missing, damaged, not a regular file: the unit is computed again
            return None
        if not isinstance(entry, dict) or entry.get("key") != key or not (folder / "result" / "result.json").is_file():
            return None
        return SavedUnit(self.relative(folder), key, entry, True)

    def load(self, folder: str) -> Any:
        """The result object saved in the unit ``folder`` (relative to the run folder, and inside it once links
        are followed: InputError otherwise)."""
        from probes.results import load

        return load(inside_folder(self.run_dir, f"{folder}/result", what="unit folder"))

    def save(self, analysis: str, model: str, data: str, key: str, inputs: Mapping[str, Any], result: Any,
             seconds: float, *, report: bool = False) -> SavedUnit:
        """Write a unit atomically: into a temporary folder beside it, then renamed over any stale one."""
        folder = self.folder(analysis, model, data)
        with atomic_folder(folder, replace=True) as tmp:
            result.save(tmp / "result")
            if report and hasattr(result, "write"):
                result.write(tmp / "report")
            entry = {"key": key, "analysis": analysis, "model": model, "data": data, "inputs": _plain(inputs),
                      "seconds": round(seconds, 3), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            (tmp / UNIT_FILE).write_text(json.dumps(entry, indent=2) + "\n", encoding="utf-8")
        return SavedUnit(self.relative(folder), key, entry, False)

    def clean(self) -> int:
        """Remove temporary folders left by an interrupted run; how many."""
        results = self.run_dir / "results"
        stale = [p for p in results.glob("*/*/.*-*") if p.is_dir()] if results.is_dir() else []
        root = results.resolve()
        stale = [p for p in stale if p.resolve().is_relative_to(root)]  # never through a link leading out
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
        return len(stale)
