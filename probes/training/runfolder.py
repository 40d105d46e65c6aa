"""A training run's folder: whose it is, what is left of a stopped run, and starting over.

A ``probes train --out OUT`` folder is recognised by its record, ``OUT/training.json`` (written whole before the
first step, :mod:`probes.training.trainer`): a folder holding one is a training run's, and the same command
resumes it. :func:`read_run` reads that record back as a :class:`~probes.training.record.TrainingRecord` (a
``training.json`` that is no such record is refused, never touched); :func:`run_differences` says which option
differs between it and a new config.

A run stopped at any moment (Ctrl-C, ``kill -9``, a full disk) can leave temporary names behind:
``checkpoints/.step-NNNNNN.tmp-HOST-PID-N/`` (a checkpoint being written, :mod:`probes.atomic_io`'s names;
``.step-NNNNNN.tmp-PID-N/`` and ``.step-NNNNNN-XXXXXXXX/`` from earlier versions), ``.training.json.tmp-HOST-PID-N``,
``.tokenizer.tmp-HOST-PID-N/`` (``.NAME.tmp-PID-N`` before), and a ``resume/checkpoint-N/`` whose
``trainer_state.json`` (the ``Trainer`` writes it last) is missing or cut short. :func:`remove_stale` removes
exactly those before a run resumes; :func:`remove_run` removes everything a run wrote (``--overwrite``: start
over), and nothing else. No torch import.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
from pathlib import Path

from probes.errors import ConfigError, InputError, WriteError
from probes.extraction.trained_runs import CHECKPOINTS_DIR, TRAINING_FILE
from probes.training.config import TrainConfig
from probes.training.record import TrainingRecord

__all__ = ["RUN_FILE", "TOKENIZER_DIR", "RESUME_DIR", "TRAINER_STATE", "read_run", "run_differences",
           "resume_state", "remove_stale", "remove_run"]

log = logging.getLogger("probes")

#: The run's record in ``OUT`` (same name as each checkpoint's own record).
RUN_FILE = TRAINING_FILE
#: Where the run keeps its tokenizer.
TOKENIZER_DIR = "tokenizer"
#: Where the ``Trainer`` keeps its resume state.
RESUME_DIR = "resume"
#: The file the ``Trainer`` writes last into a resume state.
TRAINER_STATE = "trainer_state.json"
_STEP = re.compile(r"^step-\d{6,}$")
#: A checkpoint being written by an earlier version: ``.step-NNNNNN.tmp-PID-N``, ``.step-NNNNNN-XXXXXXXX`` (``mkdtemp``);
#: today's names are :mod:`probes.atomic_io`'s (:func:`_is_temporary_of`).
_STEP_TMP = re.compile(r"^\.step-\d{6,}(\.tmp-\d+-\d+|-[A-Za-z0-9_]{8})$")
_TOP_TMP = re.compile(rf"^\.({re.escape(RUN_FILE)}|{TOKENIZER_DIR})\.tmp-\d+-\d+$")
_RESUME = re.compile(r"^checkpoint-(\d+)$")


def read_run(out: str | Path) -> TrainingRecord | None:
    """The record of the training run in ``out``; None when ``out`` holds no ``training.json``.

    Raises:
        ConfigError: ``out/training.json`` is not the record of a ``probes train`` run (unreadable, not JSON, a
            field missing or of the wrong type): the folder is someone else's.
    """
    from probes.safe_read import load_json

    path = Path(out) / RUN_FILE
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return TrainingRecord.from_dict(load_json(path, what="the record of a `probes train` run"), path)
    except InputError as exc:
        raise ConfigError(f"{out}: holds a {RUN_FILE} that is not the record of a `probes train` run ({exc.reason}); "
                          "choose another --out folder", path=None) from None


def run_differences(record: TrainingRecord, config: TrainConfig, processes: int) -> list[str]:
    """``--option: A -> B`` for every option of the run's identity that differs between the run's ``record`` and
    ``config``, and the processes."""
    changed = record.config.differences(config)
    if record.processes != processes:
        changed.append(f"processes: {record.processes!r} -> {processes}")
    return changed


def _trainer_state_ok(folder: Path) -> bool:
    """Whether ``folder`` holds a whole ``trainer_state.json`` (a JSON object)."""
    path = folder / TRAINER_STATE
    try:
        return path.is_file() and isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        return False


def resume_state(out: str | Path) -> tuple[int, Path] | None:
    """``(step, folder)`` of the ``Trainer``'s latest complete resume state in ``out``; None when it has none."""
    found = []
    root = Path(out) / RESUME_DIR
    if root.is_dir():
        for path in root.iterdir():
            match = _RESUME.match(path.name)
            if match and path.is_dir() and not path.is_symlink() and _trainer_state_ok(path):
                found.append((int(match.group(1)), path))
    return max(found) if found else None


def _remove(path: Path) -> None:
    """Remove ``path``: a folder with what it holds (never following a link), a file or a link itself.

    Raises:
        WriteError: it cannot be removed (permission denied, read-only file system).
    """
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        raise WriteError.from_oserror(exc, exc.filename or path) from exc


def _children(folder: Path, pattern: re.Pattern[str], temporary_of: re.Pattern[str] | None = None) -> list[Path]:
    """The entries of ``folder`` whose names match ``pattern``, or are :mod:`probes.atomic_io` temporary names of a
    name matching ``temporary_of`` (none when it is no folder)."""
    from probes.atomic_io import parse_temporary

    def wanted(name: str) -> bool:
        if pattern.match(name):
            return True
        temporary = parse_temporary(name)
        return temporary_of is not None and temporary is not None and bool(temporary_of.match(temporary.target))

    if not folder.is_dir() or folder.is_symlink():
        return []
    return sorted(p for p in folder.iterdir() if wanted(p.name))


def remove_stale(out: str | Path) -> list[Path]:
    """Remove what a stopped run left half-written in ``out`` (see the module); the paths removed."""
    out = Path(out)
    stale = [*_children(out / CHECKPOINTS_DIR, _STEP_TMP, _STEP),
             *_children(out, _TOP_TMP, re.compile(rf"^({re.escape(RUN_FILE)}|{TOKENIZER_DIR})$"))]
    stale += [p for p in _children(out / RESUME_DIR, _RESUME) if not _trainer_state_ok(p)]
    for path in stale:
        _remove(path)
    if stale:
        log.info("removed what a stopped run left half-written: %s", ", ".join(str(p) for p in stale))
    return stale


def remove_run(out: str | Path) -> list[Path]:
    """Remove what a training run wrote into ``out`` (record, tokenizer, checkpoints, resume state, temporaries),
    so that a run starts over; other files stay. Nothing is removed unless ``out`` holds a run's record.

    Raises:
        ConfigError: ``out/training.json`` is not a run's record (:func:`read_run`).
    """
    out = Path(out)
    if read_run(out) is None:
        return []
    gone = remove_stale(out)
    owned = [*_children(out / CHECKPOINTS_DIR, _STEP), *_children(out / RESUME_DIR, _RESUME)]
    owned += [p for p in (out / TOKENIZER_DIR, out / RUN_FILE) if p.exists() or p.is_symlink()]
    for path in owned:
        _remove(path)
    for folder in (out / CHECKPOINTS_DIR, out / RESUME_DIR):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when nothing else is in it
    return gone + owned
