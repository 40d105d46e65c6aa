"""A training run's checkpoints: ordinary model folders under ``RUN/checkpoints/step-NNNNNN/``, and their names.

Each checkpoint holds ``config.json``, the tokenizer's files, ``model.safetensors`` and ``training.json`` (scheme,
seeds, step, tokens seen, train and held-out loss, data sha256s, the whole config). It is written into a temporary
folder beside its place (``.step-NNNNNN.tmp-HOST-PID-N``, :func:`probes.atomic_io.atomic_folder`) and renamed into place, so a checkpoint folder is complete or
absent: a run killed while writing one leaves at most that hidden folder, which the next run removes
(:func:`probes.training.runfolder.remove_stale`). A write that fails (a full disk, a read-only folder) is one
:class:`~probes.errors.WriteError` naming the folder, whichever library raised it (:func:`write_failure`).

``trained:RUN@STEP`` names one in every command (:func:`resolve_trained`; RUN is a ``probes train --out``
folder, STEP a step number or ``last``, the default). No torch import; nothing here imports the extraction
stage (its model loading resolves ``trained:`` names through this module).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from probes.atomic_io import atomic_folder
from probes.errors import ConfigError, InputError, WriteError

__all__ = ["CHECKPOINTS_DIR", "TRAINING_FILE", "TRAINED_PREFIX", "step_name", "list_checkpoints", "last_checkpoint",
           "is_trained", "parse_trained", "resolve_trained", "read_training", "write_checkpoint", "write_failure",
           "writing"]

#: The folder of a run that holds its checkpoints.
CHECKPOINTS_DIR = "checkpoints"
#: What a checkpoint records of its training, beside the model's own files.
TRAINING_FILE = "training.json"
#: Prefix of checkpoint names in every command: ``trained:RUN@STEP``.
TRAINED_PREFIX = "trained:"
_STEP = re.compile(r"^step-(\d{6,})$")
_SPEC = re.compile(r"^trained:(?P<run>.+?)(?:@(?P<step>[^@/]*))?$")
#: How libraries word an operating system's write error: Rust's ``io::Error`` (safetensors, tokenizers).
_OS_ERROR = re.compile(r"\(os error (\d+)\)")
#: How torch's file writer says a write failed (it gives no errno): ``torch.save`` into a full disk.
_TORCH_WRITE = ("PytorchStreamWriter", "inline_container", "file write failed")


def step_name(step: int) -> str:
    """``step-000008``: the folder of the checkpoint at ``step`` (6 digits, more when needed)."""
    return f"step-{step:06d}"


def list_checkpoints(run: str | Path) -> dict[int, Path]:
    """Every complete checkpoint of the run folder ``run`` (with its ``training.json``), by step, in step order."""
    root = Path(run) / CHECKPOINTS_DIR
    if not root.is_dir():
        return {}
    found = {}
    for path in root.iterdir():
        match = _STEP.match(path.name)
        if match and (path / TRAINING_FILE).is_file():
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def last_checkpoint(run: str | Path) -> tuple[int, Path] | None:
    """``(step, folder)`` of the run's latest complete checkpoint; None when it has none."""
    found = list_checkpoints(run)
    return next(reversed(found.items())) if found else None


def is_trained(spec: str) -> bool:
    """Whether ``spec`` names a checkpoint (``trained:RUN@STEP``)."""
    return str(spec).startswith(TRAINED_PREFIX)


def parse_trained(spec: str) -> tuple[Path, int | None]:
    """``(run folder, step)`` of ``trained:RUN@STEP`` (step None for ``last`` or no ``@STEP``).

    Raises:
        ConfigError: not of that form, or STEP neither a whole number >= 0 nor ``last``.
    """
    match = _SPEC.match(str(spec))
    if match is None or not match.group("run"):
        raise ConfigError(f"model {spec!r}: expected trained:RUN@STEP (RUN a `probes train --out` folder, STEP a "
                          "step number or last), e.g. trained:runs/train-bert@last")
    step = match.group("step")
    if step is None or step == "last":
        return Path(match.group("run")), None
    if not step.isdigit():
        raise ConfigError(f"model {spec!r}: expected a step number or last after '@', found {step!r}")
    return Path(match.group("run")), int(step)


def resolve_trained(spec: str) -> str:
    """The checkpoint folder ``trained:RUN@STEP`` names.

    Raises:
        ConfigError: a malformed name, a RUN that is no training run, or a STEP it has no checkpoint at (the
            message names the run folder and the steps it has).
    """
    run, step = parse_trained(spec)
    found = list_checkpoints(run)
    if not found:
        what = "no such folder" if not run.exists() else f"a folder without {CHECKPOINTS_DIR}/step-NNNNNN/"
        raise ConfigError(f"model {spec!r}: expected a `probes train --out` folder with checkpoints, found {what}",
                          path=run)
    if step is None:
        return str(next(reversed(found.values())))
    if step not in found:
        raise ConfigError(f"model {spec!r}: no checkpoint at step {step}; the run has steps "
                          f"{', '.join(map(str, found))}", path=run)
    return str(found[step])


def read_training(folder: str | Path) -> dict[str, Any]:
    """The ``training.json`` of a checkpoint folder.

    Raises:
        InputError: missing, or not a JSON object.
    """
    from probes.safe_read import load_json

    path = Path(folder) / TRAINING_FILE
    try:
        data = load_json(path, what="a checkpoint's record")
    except OSError as exc:
        raise InputError(f"cannot read the checkpoint's record ({exc.strerror or exc})", path=path) from None
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, found {type(data).__name__}", path=path)
    return data


def write_failure(exc: BaseException, path: str | Path) -> WriteError | None:
    """``exc``, raised while writing ``path``, as one :class:`WriteError` when it is a failed write; else None.

    An ``OSError`` is one; so are the errors libraries raise for it without being one: safetensors' and
    tokenizers' (``... (os error 28)``) and torch's file writer (no errno: a full disk is told by the free space
    left). A WriteError is returned as it is.
    """
    if isinstance(exc, WriteError):
        return exc
    if isinstance(exc, OSError):
        return WriteError.from_oserror(exc, path)
    text = str(exc)
    match = _OS_ERROR.search(text)
    if match:
        code = int(match.group(1))
        return WriteError.from_oserror(OSError(code, os.strerror(code)), path)
    if isinstance(exc, RuntimeError) and any(mark in text for mark in _TORCH_WRITE):
        return WriteError.from_oserror(OSError(errno.ENOSPC if _disk_full(path) else errno.EIO,
                                               "torch could not write the file"), path)
    return None


def _disk_full(path: str | Path) -> bool:
    """Whether the file system of ``path`` (or its nearest existing folder) has no room left for a user."""
    place = Path(path)
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        stats = os.statvfs(place)
    except (OSError, AttributeError):
        return False
    return stats.f_bavail * stats.f_frsize < (1 << 20)


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Turn a failed write inside the block (see :func:`write_failure`) into one WriteError naming ``path``."""
    try:
        yield
    except Exception as exc:
        error = write_failure(exc, path)
        if error is None or error is exc:
            raise
        raise error from exc


def write_checkpoint(run: str | Path, step: int, model: Any, tokenizer: Any, training: Mapping[str, Any]) -> Path:
    """Write the checkpoint at ``step`` (model, tokenizer, ``training.json``) whole or not at all; its folder.

    An existing checkpoint at ``step`` is replaced.

    Raises:
        WriteError: the disk is full, or the folder cannot be written (the checkpoint is then absent).
    """
    folder = Path(run) / CHECKPOINTS_DIR / step_name(step)
    with writing(folder), atomic_folder(folder, replace=True) as tmp:
        _save(tmp, model, tokenizer, training)
    return folder


def _save(tmp: Path, model: Any, tokenizer: Any, training: Mapping[str, Any]) -> None:
    """The checkpoint's files, into ``tmp``, without transformers' progress bars."""
    from probes.extraction.random_init import save_model_folder

    save_model_folder(tmp, model, tokenizer)
    (tmp / TRAINING_FILE).write_text(json.dumps(dict(training), indent=2, sort_keys=True) + "\n", encoding="utf-8")
