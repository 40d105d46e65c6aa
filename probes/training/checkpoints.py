"""A training run's checkpoints: ordinary model folders under ``RUN/checkpoints/step-NNNNNN/``, and their names.

Each checkpoint holds ``config.json``, the tokenizer's files, ``model.safetensors`` and ``training.json`` (scheme,
seeds, step, tokens seen, train and held-out loss, data sha256s, the whole config). It is written into a temporary
folder beside its place and renamed into place, so a checkpoint folder is complete or absent: a run killed while
writing one leaves no half checkpoint behind.

``trained:RUN@STEP`` names one in every command (:func:`resolve_trained`; RUN is a ``probes train --out``
folder, STEP a step number or ``last``, the default). No torch import; nothing here imports the extraction
stage (its model loading resolves ``trained:`` names through this module).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from probes.errors import ConfigError, InputError

__all__ = ["CHECKPOINTS_DIR", "TRAINING_FILE", "TRAINED_PREFIX", "step_name", "list_checkpoints", "last_checkpoint",
           "is_trained", "parse_trained", "resolve_trained", "read_training", "write_checkpoint"]

#: The folder of a run that holds its checkpoints.
CHECKPOINTS_DIR = "checkpoints"
#: What a checkpoint records of its training, beside the model's own files.
TRAINING_FILE = "training.json"
#: Prefix of checkpoint names in every command: ``trained:RUN@STEP``.
TRAINED_PREFIX = "trained:"
_STEP = re.compile(r"^step-(\d{6,})$")
_SPEC = re.compile(r"^trained:(?P<run>.+?)(?:@(?P<step>[^@/]*))?$")


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
    path = Path(folder) / TRAINING_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read the checkpoint's record ({exc.strerror or exc})", path=path) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"expected JSON, found a syntax error ({exc.msg})", path=path, line=exc.lineno) from None
    if not isinstance(data, dict):
        raise InputError(f"expected a JSON object, found {type(data).__name__}", path=path)
    return data


def write_checkpoint(run: str | Path, step: int, model: Any, tokenizer: Any, training: Mapping[str, Any]) -> Path:
    """Write the checkpoint at ``step`` (model, tokenizer, ``training.json``) whole or not at all; its folder.

    An existing checkpoint at ``step`` is replaced.
    """
    root = Path(run) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    folder = root / step_name(step)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
    try:
        from transformers.utils import logging as hf_logging

        quiet = hf_logging.is_progress_bar_enabled()
        if quiet:
            hf_logging.disable_progress_bar()
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        finally:
            if quiet:
                hf_logging.enable_progress_bar()
        (tmp / TRAINING_FILE).write_text(json.dumps(dict(training), indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
