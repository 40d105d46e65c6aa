"""A training run's checkpoints read as models: ``trained:RUN@STEP`` names and the folders they stand for.

A ``probes train --out RUN`` folder keeps its checkpoints as ordinary model folders under
``RUN/checkpoints/step-NNNNNN/``, each complete once its ``training.json`` is in place (the training stage,
:mod:`probes.training.checkpoints`, writes them whole). Every command names one ``trained:RUN@STEP`` (STEP a
step number or ``last``, the default); :func:`resolve_trained` turns the name into the folder, which loads like
any other (:func:`probes.extraction.loading.resolve_model`). Only the folder layout is read here: nothing of the
training stage is imported, so extraction sits below it. No torch import.
"""

from __future__ import annotations

import re
from pathlib import Path

from probes.errors import ConfigError

__all__ = ["CHECKPOINTS_DIR", "TRAINING_FILE", "TRAINED_PREFIX", "step_name", "list_checkpoints", "last_checkpoint",
           "is_trained", "parse_trained", "resolve_trained"]

#: The folder of a run that holds its checkpoints.
CHECKPOINTS_DIR = "checkpoints"
#: What a checkpoint records of its training, beside the model's own files (its presence marks it complete).
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


def is_trained(spec: str | Path) -> bool:
    """Whether ``spec`` names a checkpoint (``trained:RUN@STEP``)."""
    return str(spec).startswith(TRAINED_PREFIX)


def parse_trained(spec: str | Path) -> tuple[Path, int | None]:
    """``(run folder, step)`` of ``trained:RUN@STEP`` (step None for ``last`` or no ``@STEP``).

    Raises:
        ConfigError: not of that form, or STEP neither a whole number >= 0 nor ``last``.
    """
    match = _SPEC.match(str(spec))
    if match is None or not match.group("run"):
        raise ConfigError(f"model {str(spec)!r}: expected trained:RUN@STEP (RUN a `probes train --out` folder, STEP "
                          "a step number or last), e.g. trained:runs/train-bert@last")
    step = match.group("step")
    if step is None or step == "last":
        return Path(match.group("run")), None
    if not step.isdigit():
        raise ConfigError(f"model {str(spec)!r}: expected a step number or last after '@', found {step!r}")
    return Path(match.group("run")), int(step)


def resolve_trained(spec: str | Path) -> str:
    """The checkpoint folder ``trained:RUN@STEP`` names.

    Raises:
        ConfigError: a malformed name, a RUN that is no training run, or a STEP it has no checkpoint at (the
            message names the run folder and the steps it has).
    """
    run, step = parse_trained(spec)
    found = list_checkpoints(run)
    if not found:
        what = "no such folder" if not run.exists() else f"a folder without {CHECKPOINTS_DIR}/step-NNNNNN/"
        raise ConfigError(f"model {str(spec)!r}: expected a `probes train --out` folder with checkpoints, found "
                          f"{what}", path=run)
    if step is None:
        return str(next(reversed(found.values())))
    if step not in found:
        raise ConfigError(f"model {str(spec)!r}: no checkpoint at step {step}; the run has steps "
                          f"{', '.join(map(str, found))}", path=run)
    return str(found[step])
