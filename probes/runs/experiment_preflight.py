"""Before an experiment trains or loads anything: can every model, package and dataset it names be had here?

:func:`read_experiment` checks the file's keys, types, ranges and names; this module checks the world outside
the file, without loading a model or converting a GGUF file: each model name (``package:NAME`` installed, a folder
or ``.gguf`` file present, the packages a known model or a GGUF file needs importable, the base of every
random-init twin), each data file and registry name, and the packages the analyses and the training lab need.
Every problem is collected, so one run of ``probes run`` names them all, each with the command that fixes it;
then nothing has been trained (the seed-question experiment trains for about 40 minutes before its first
analysis loads a model).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from probes.errors import ConfigError
from probes.runs.experiment_spec import Experiment
from probes.runs.role_lab_spec import RoleLab

__all__ = ["Problem", "preflight", "problems", "role_lab_preflight", "role_lab_problems"]

_PACKAGE = "package:"
_TRAINED = "trained:"
_GGUF_NEEDS = ("gguf", "accelerate")
_GGUF_INSTALL = "pip install gguf accelerate"
#: What the training lab imports beyond the core dependencies (its tokenizers are trained with ``tokenizers``).
_LAB_NEEDS = ("tokenizers", "safetensors")


@dataclass(frozen=True)
class Problem:
    """One thing the experiment needs that is not here: ``where`` in the file, ``what`` is missing, ``fix``."""

    where: str
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what} ({self.fix})"


def preflight(experiment: Experiment) -> None:
    """Refuse an experiment that cannot finish here, before anything trains or loads.

    Raises:
        ConfigError: naming the file and every problem found, each with the command that fixes it.
    """
    found = list(problems(experiment))
    if found:
        listed = "; ".join(str(p) for p in found)
        raise ConfigError(f"{experiment.file}: cannot run here, nothing was trained or loaded: {listed}")


def problems(experiment: Experiment) -> Iterator[Problem]:
    """Every problem of ``experiment``'s models, data and packages, in file order."""
    for model in experiment.models:
        if model.lab is None:  # a lab model is trained by the run itself
            yield from _model(model.spec, f"[models] {model.name}")
    for data in experiment.data:
        for role, value in data.given().items():
            yield from _data(value, f"[data.{data.name}] {role}")
    for unit in experiment.train:
        where = f"[train.{unit.cell}]"
        for value in (*unit.config.treebank, *((unit.config.select_on,) if unit.config.select_on else ())):
            yield from _data(value, where)
    if experiment.train:
        yield from _packages(_LAB_NEEDS, "[train]", "pip install " + " ".join(_LAB_NEEDS))


def _installed(name: str) -> bool:
    """Whether the top-level package ``name`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _packages(names: Iterable[str], where: str, fix: str) -> Iterator[Problem]:
    missing = [n for n in names if not _installed(n)]
    if missing:
        yield Problem(where, f"needs the package{'s' if len(missing) > 1 else ''} {', '.join(missing)}", fix)


def _model(spec: str, where: str) -> Iterator[Problem]:
    """The problems of one model name (a random-init twin: of its base)."""
    from probes.extraction.random_init import is_random_init, parse_random_init

    if is_random_init(spec):
        base, _ = parse_random_init(spec)
        yield from _model(base, where)
    elif spec.startswith(_PACKAGE):
        yield from _package_model(spec[len(_PACKAGE):], where)
    elif spec.startswith(_TRAINED):
        return  # a training run's checkpoint: resolved (cheaply, without loading) when the unit runs
    elif spec.lower().endswith(".gguf"):
        if not Path(spec).expanduser().is_file():
            yield Problem(where, f"model {spec!r}: no such GGUF file", "give the path of a .gguf file")
        yield from _packages(_GGUF_NEEDS, where, f"{_GGUF_INSTALL}: GGUF files are read and dequantised with them")
    elif Path(spec).expanduser().exists() or spec.startswith((".", "/", "~")):
        folder = Path(spec).expanduser()
        if (folder / "config.json").is_file():
            return
        if folder.is_dir() and any(p.name.lower().endswith(".gguf") for p in folder.iterdir()):
            yield from _packages(_GGUF_NEEDS, where, f"{_GGUF_INSTALL}: GGUF files are read and dequantised with them")
        else:
            yield Problem(where, f"model {spec!r}: no model folder there (expected a folder holding config.json)",
                          "give the path of a model folder, package:NAME or a hub name")
    else:
        yield from _hub_model(spec, where)


def _package_model(name: str, where: str) -> Iterator[Problem]:
    from probes.extraction.known_models import KNOWN_MODELS

    known = next((m for m in KNOWN_MODELS if m.package == name), None)
    top = name.split(".")[0]
    if not _installed(top):
        fix = known.install if known else f"install the Python package that ships the model {name!r}"
        yield Problem(where, f"model 'package:{name}': the package {name!r} is not installed", fix)
    elif known is not None:
        yield from _packages(known.needs, where, known.install)


def _hub_model(name: str, where: str) -> Iterator[Problem]:
    """A hub name: fine when its files are in the local cache or the network may be used."""
    offline = any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
                  for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    if offline and not _cached(name):
        yield Problem(where, f"model {name!r}: a hub name not in the local cache, and HF_HUB_OFFLINE is set",
                      "download it once with network (huggingface-cli download NAME), or give a local folder")


def _cached(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except ValueError:  # not a repository id
        return False


def _data(value: str, where: str) -> Iterator[Problem]:
    """The problems of one data value (a file, ``sample:SPLIT`` or ``ud:NAME:SPLIT``)."""
    if value.startswith("sample:"):
        return
    if value.startswith("ud:"):
        from probes.corpora.registry import load_registry

        parts = value.split(":")
        try:
            registry = load_registry()
            treebank = registry["treebanks"].get(parts[1]) if len(parts) == 3 else None
        except ConfigError as exc:
            yield Problem(where, f"{value}: the treebank registry is unreadable ({exc.reason})", "reinstall probes")
            return
        if treebank is None or parts[2] not in treebank.get("files", {}):
            yield Problem(where, f"{value}: not a treebank and split the registry knows",
                          "see `probes data list` for the names")
        return
    path = Path(value).expanduser()
    if not path.is_file():
        found = "a folder" if path.is_dir() else "nothing"
        yield Problem(where, f"{value}: expected a data file, found {found} there",
                      "fix the path, or set PROBES_DATA to the folder holding the corpora")


def role_lab_problems(lab: RoleLab) -> Iterator[Problem]:
    """Every problem of a role-lab file (:class:`~probes.runs.role_lab_spec.RoleLab`): its text cells' data, its
    pretrained and family models, and the training lab's packages."""
    for cell in lab.cells:
        for unit in cell.units[:1]:
            for value in (*unit.config.treebank, *((unit.config.select_on,) if unit.config.select_on else ())):
                yield from _data(value, f"[train.{cell.name}]")
    for model in lab.pretrained:
        yield from _model(model.model, f"[pretrained.{model.name}]")
    for family in lab.families:
        for _, spec, _, _ in family.members():
            yield from _model(spec, f"[families.{family.name}]")
    yield from _packages(_LAB_NEEDS, "[train]", "pip install " + " ".join(_LAB_NEEDS))


def role_lab_preflight(lab: RoleLab) -> None:
    """Refuse a role-lab file that cannot finish here, before anything trains or loads (as :func:`preflight`)."""
    found = list(role_lab_problems(lab))
    if found:
        listed = "; ".join(str(p) for p in found)
        raise ConfigError(f"{lab.file}: cannot run here, nothing was trained or loaded: {listed}")
