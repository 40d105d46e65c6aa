"""A training run's checkpoints: ordinary model folders under ``RUN/checkpoints/step-NNNNNN/``, written whole.

Each checkpoint holds ``config.json``, the tokenizer's files, ``model.safetensors`` and ``training.json`` (a
:class:`~probes.training.record.CheckpointRecord`: the run's record with the step, tokens seen, train and
held-out loss). It is written into a temporary folder beside its place (``.step-NNNNNN.tmp-HOST-PID-N``,
:func:`probes.atomic_io.atomic_folder`) and renamed into place, so a checkpoint folder is complete or absent: a run
killed while writing one leaves at most that hidden folder, which the next run removes
(:func:`probes.training.runfolder.remove_stale`). A write that fails (a full disk, a read-only folder) is one
:class:`~probes.errors.WriteError` naming the folder, whichever library raised it (:func:`write_failure`).

Where the checkpoints are and what ``trained:RUN@STEP`` names is the extraction stage's
(:mod:`probes.extraction.trained_runs`), which reads them as models without importing this stage. No torch import.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from probes.atomic_io import atomic_folder
from probes.errors import InputError, WriteError
from probes.extraction.trained_runs import CHECKPOINTS_DIR, TRAINING_FILE, step_name
from probes.training.record import CheckpointRecord, record_text

__all__ = ["read_training", "write_checkpoint", "write_failure", "writing"]

#: How libraries word an operating system's write error: Rust's ``io::Error`` (safetensors, tokenizers).
_OS_ERROR = re.compile(r"\(os error (\d+)\)")
#: How torch's file writer says a write failed (it gives no errno): ``torch.save`` into a full disk.
_TORCH_WRITE = ("PytorchStreamWriter", "inline_container", "file write failed")


def read_training(folder: str | Path) -> CheckpointRecord:
    """The record (``training.json``) of a checkpoint folder.

    Raises:
        InputError: missing or unreadable, not JSON, or not a checkpoint's record (naming the field).
    """
    from probes.safe_read import load_json

    path = Path(folder) / TRAINING_FILE
    try:
        data = load_json(path, what="a checkpoint's record")
    except OSError as exc:
        raise InputError(f"cannot read the checkpoint's record ({exc.strerror or exc})", path=path) from None
    return CheckpointRecord.from_dict(data, path)


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


def write_checkpoint(run: str | Path, model: Any, tokenizer: Any, training: CheckpointRecord) -> Path:
    """Write the checkpoint at ``training.step`` (model, tokenizer, ``training.json``) whole or not at all; its
    folder.

    An existing checkpoint at ``step`` is replaced.

    Raises:
        WriteError: the disk is full, or the folder cannot be written (the checkpoint is then absent).
    """
    folder = Path(run) / CHECKPOINTS_DIR / step_name(training.step)
    with writing(folder), atomic_folder(folder, replace=True) as tmp:
        _save(tmp, model, tokenizer, training)
    return folder


def _save(tmp: Path, model: Any, tokenizer: Any, training: CheckpointRecord) -> None:
    """The checkpoint's files, into ``tmp``, without transformers' progress bars."""
    from probes.extraction.random_init import save_model_folder

    save_model_folder(tmp, model, tokenizer)
    (tmp / TRAINING_FILE).write_text(record_text(training), encoding="utf-8")
