"""The run record: a typed, read-only account of one run (what ran, on what, how, where the time went).

Every command writes one as ``run.json`` and every result keeps its own (``result.record``). The parts that
every command shares are typed fields (:class:`RunRecord`: ``command``, ``invocation`` with the git
``commit``, ``versions``, ``options``, ``data``, ``inputs``, ``world``, ``timings``); what one command adds
(the leaderboard's ``selection`` and ``counts``, the experiment's ``units`` ...) is read with
:meth:`RunRecord.detail`. The builders live in :mod:`probes.runs.record`; this module is the only one that
reads a record by key, so a field renamed here is renamed everywhere.

A record keeps the order its fields were given in, so ``run.json`` and a saved result's ``result.json`` are
written exactly as the plain dictionaries they replace were.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from probes.atomic_io import write_json_atomic
from probes.errors import FormatError, InputError
from probes.safe_read import inside_folder, load_json

__all__ = ["RunRecord", "Invocation", "Commit", "RUN_FILE"]

#: The file a run's record is written to, in its output folder.
RUN_FILE = "run.json"

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Commit:
    """The git commit of the checkout that ran (``dirty``: it had uncommitted changes)."""

    commit: str
    dirty: bool

    def to_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "dirty": self.dirty}


@dataclass(frozen=True)
class Invocation:
    """How a run was started: working directory, command line, probes version and git commit (if any)."""

    cwd: str | None = None
    argv: tuple[str, ...] = ()
    probes_version: str | None = None
    git: Commit | None = None

    @classmethod
    def of(cls, value: Invocation | Mapping[str, Any] | None) -> Invocation | None:
        """``value`` as an Invocation (a mapping as :func:`probes.runs.record.invocation` builds it)."""
        if value is None or isinstance(value, Invocation):
            return value
        problem = _invocation_problem(value)
        if problem is not None:
            raise InputError(f"a run record's {problem}")
        git = value.get("git")
        return cls(cwd=value.get("cwd"), argv=tuple(value.get("argv") or ()), probes_version=value.get("probes_version"),
                   git=None if git is None else git if isinstance(git, Commit) else Commit(git["commit"], git["dirty"]))

    def to_dict(self) -> dict[str, Any]:
        return {"cwd": self.cwd, "argv": list(self.argv), "probes_version": self.probes_version,
                "git": None if self.git is None else self.git.to_dict()}


#: The typed fields of a record, by their key in ``run.json``.
_TYPED = ("command", "invocation", "versions", "options", "data", "inputs", "world", "timings")


@dataclass(frozen=True)
class RunRecord:
    """One run's record. Fields absent from a run are None (mappings: empty); ``details`` holds the rest.

    The record is frozen; its mappings are its own copies, to be read, not changed in place.

    Build one with :func:`probes.runs.record.run_record` (or :meth:`of` from a mapping, as read from
    ``run.json``); derive a changed copy with :meth:`updated` or :meth:`with_timings` (records are frozen).
    """

    command: str | None = None
    invocation: Invocation | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    data: Any = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    world: Mapping[str, Any] | None = None
    timings: Mapping[str, Any] = field(default_factory=dict)
    #: What this command adds to the shared fields (selection, counts, definitions, units ...).
    details: Mapping[str, Any] = field(default_factory=dict)
    #: The keys given, in order: ``run.json`` is written in this order, and only these keys.
    order: tuple[str, ...] = field(default=(), repr=False, compare=False)

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def of(cls, value: RunRecord | Mapping[str, Any] | None) -> RunRecord:
        """``value`` as a record: a record is returned as it is; a mapping (``run.json``) is split into fields."""
        if isinstance(value, RunRecord):
            return value
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise InputError(f"a run record: expected a mapping of fields, found {type(value).__name__}")
        given = dict(value)
        problem = typed_problem(given)
        if problem is not None:
            raise InputError(f"a run record's {problem}")
        typed: dict[str, Any] = {k: given[k] for k in _TYPED if k in given}
        for key in ("versions", "options", "inputs", "timings"):
            if typed.get(key) is not None:  # None is kept as it was given
                typed[key] = dict(typed[key])  # the record's own copy
        if "invocation" in typed:
            typed["invocation"] = Invocation.of(typed["invocation"])
        details = {k: v for k, v in given.items() if k not in _TYPED}
        return cls(**typed, details=details, order=tuple(given))

    def updated(self, fields: Mapping[str, Any] = _EMPTY, /, **more: Any) -> RunRecord:
        """A copy with ``fields`` (and ``more``) set: a key already there keeps its place, a new one goes last."""
        return RunRecord.of({**self.to_dict(), **fields, **more})

    def with_timings(self, **timings: Any) -> RunRecord:
        """A copy whose ``timings`` holds ``timings`` as well (replacing those of the same name)."""
        return self.updated(timings={**self.timings, **timings})

    def with_options(self, options: Mapping[str, Any]) -> RunRecord:
        """A copy whose ``options`` holds ``options`` as well (replacing those of the same name)."""
        return self.updated(options={**self.options, **options})

    # -- reading ----------------------------------------------------------------------------
    def detail(self, name: str, default: Any = None) -> Any:
        """A field this command adds (``selection``, ``counts``, ``units`` ...), else ``default``."""
        return self.details.get(name, default)

    def has(self, name: str) -> bool:
        """Whether the run recorded the field ``name`` (typed or not)."""
        return name in self.order

    @property
    def commit(self) -> str | None:
        """The git commit that ran, None outside a checkout."""
        return None if self.invocation is None or self.invocation.git is None else self.invocation.git.commit

    @property
    def model_name(self) -> str:
        """The model's name as a person reads it: ``model_name``, else ``model`` (or the extractor's model)."""
        model = self.detail("model")
        if isinstance(model, Mapping):
            model = model.get("model")
        return str(self.detail("model_name") or self.options.get("model") or model or "model")

    @property
    def weights_source(self) -> Mapping[str, Any] | None:
        """Where the model's weights came from when not from a model folder of their own: the GGUF file they were
        dequantised from (``gguf_source.json`` of the converted folder), as the run or its extractor recorded it."""
        found = self.detail("weights_source")
        for key in ("extractor", "model"):
            if found is None and isinstance(self.detail(key), Mapping):
                found = self.detail(key).get("weights_source")
        return found if isinstance(found, Mapping) else None

    @property
    def selection(self) -> Mapping[str, Any]:
        """How heads were selected (``mode`` and where); empty when the run selected none."""
        return self.detail("selection") or {}

    @property
    def reported_on(self) -> str | None:
        """The name of the data the run reports on (leaderboards)."""
        return self.detail("reported_on")

    @property
    def selected_on(self) -> str | None:
        """The name of the data heads were selected on (leaderboards); the report data when it is the same."""
        return self.detail("selected_on", self.reported_on)

    @property
    def counts(self) -> Mapping[str, Any]:
        """What the run counted (sentences, tokens, relations ...), by split."""
        return self.detail("counts") or {}

    @property
    def seconds(self) -> float | None:
        """The run's wall time in seconds, where it recorded one."""
        return self.detail("seconds")

    @property
    def extractor(self) -> Mapping[str, Any]:
        """What the extractor recorded about itself (model, device, dtype ...); empty when not recorded."""
        return self.detail("extractor") or {}

    # -- saving -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The record as ``run.json`` holds it: the given keys, in the given order."""
        out: dict[str, Any] = {}
        for key in self.order:
            if key in _TYPED:
                value = getattr(self, key)
                out[key] = value.to_dict() if isinstance(value, Invocation) else value
            else:
                out[key] = self.details[key]
        return out

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the record as JSON to ``path`` (a folder: its ``run.json``), whole or not at all."""
        target = Path(path)
        target = target / RUN_FILE if target.is_dir() else target
        return write_json_atomic(target, self.to_dict(), indent=2, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunRecord:
        """Read a record written by a run (a ``run.json`` file, or the folder holding one: then its ``run.json``
        must not be a link leading out of the folder).

        Raises:
            InputError: no such file, not JSON, or not a JSON object.
        """
        file = Path(path)
        folder = file if file.is_dir() else None
        file = file / RUN_FILE if folder is not None else file
        if not file.exists() and not file.is_symlink():
            raise InputError(f"expected a run record ({RUN_FILE}), found none", path=file)
        try:
            if folder is not None:  # a folder's run.json that links out of it is not followed
                inside_folder(folder, RUN_FILE, what="run record")
            doc = load_json(file, what=f"a run record ({RUN_FILE})")
        except FormatError as exc:  # bad JSON or UTF-8, nested too deeply, too large
            raise InputError(f"expected a JSON run record, found unreadable text: {exc.reason}", path=file,
                             line=exc.line) from None
        if not isinstance(doc, dict):
            raise InputError(f"expected a JSON object of fields, found {type(doc).__name__}", path=file)
        problem = typed_problem(doc)
        if problem is not None:
            raise InputError(problem, path=file)
        return cls.of(doc)

    def to_pandas(self) -> Any:
        """The record as a two-column table (``field``, ``value``), nested fields flattened to dotted names."""
        import pandas as pd

        rows = list(_flatten(self.to_dict(), ""))
        return pd.DataFrame(rows, columns=["field", "value"])

    def _repr_html_(self) -> str:
        return str(self.to_pandas().to_html(index=False))

    def __iter__(self) -> Any:  # a record is not a mapping: say so rather than iterate its fields
        raise TypeError("a RunRecord is not a mapping: read its fields, .detail(name), or .to_dict()")


def shown(value: Any, width: int = 60) -> str:
    """``value`` as an error message shows what was found (``17``, ``'units'``, ``[1, 2]``), shortened."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def typed_problem(given: Mapping[str, Any]) -> str | None:
    """What is wrong with the shared fields of a record given as a mapping (``run.json``), as ``field: expected
    ..., found ...``; None when they have the types :class:`RunRecord` reads them as."""
    command = given.get("command")
    if command is not None and not isinstance(command, str):
        return f"command: expected a string, found {shown(command)}"
    for key in ("versions", "options", "inputs", "timings", "world"):
        value = given.get(key)
        if value is not None and not isinstance(value, Mapping):
            return f"{key}: expected a mapping, found {shown(value)}"
    invocation = given.get("invocation")
    if invocation is None or isinstance(invocation, Invocation):
        return None
    return _invocation_problem(invocation)


def _invocation_problem(value: Any) -> str | None:
    """What is wrong with an ``invocation`` mapping (None: nothing)."""
    if not isinstance(value, Mapping):
        return f"invocation: expected a mapping, found {shown(value)}"
    for key in ("cwd", "probes_version"):
        if value.get(key) is not None and not isinstance(value[key], str):
            return f"invocation.{key}: expected a string, found {shown(value[key])}"
    argv = value.get("argv")
    if argv is not None and not (isinstance(argv, list | tuple) and all(isinstance(a, str) for a in argv)):
        return f"invocation.argv: expected a list of strings, found {shown(argv)}"
    git = value.get("git")
    if git is None or isinstance(git, Commit):
        return None
    if not isinstance(git, Mapping) or not isinstance(git.get("commit"), str) or not isinstance(git.get("dirty"), bool):
        return f"invocation.git: expected {{\"commit\": a string, \"dirty\": true or false}}, found {shown(git)}"
    return None


def _flatten(value: Any, prefix: str) -> Iterable[tuple[str, Any]]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value

