"""The run record: a typed, read-only account of one run (what ran, on what, how, where the time went).

Every command writes one as ``run.json`` and every result keeps its own (``result.record``). The parts that
every command shares are typed fields (:class:`RunRecord`: ``command``, ``invocation`` with the git
``commit``, ``versions``, ``options``, ``data``, ``inputs``, ``world``, ``timings``); what one command adds
(the leaderboard's ``selection`` and ``halves``, the experiment's ``units`` ...) is its ``details``, a
:class:`~probes.run_details.RunDetails` read by attribute (``record.details.leaderboard.halves``). The builders
live in :mod:`probes.runs.record`; this module and :mod:`probes.run_details` are the only ones that know the
keys of ``run.json``, so a field renamed there is renamed everywhere.

A record keeps the order its fields were given in, and every field it does not name, so ``run.json`` and a
saved result's ``result.json`` are written exactly as the plain dictionaries they replace were, and a
``run.json`` of another version is written back as it was read. :meth:`RunRecord.save` is the one writer of
``run.json``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from probes.atomic_io import write_json_atomic
from probes.errors import FormatError, InputError
from probes.run_details import ExtractorInfo, RunDetails, RunOptions, RunTimings, Selection, plain, shown
from probes.safe_read import inside_folder, load_json

__all__ = ["RunRecord", "Invocation", "Commit", "RUN_FILE", "read_run_json", "json_ready"]

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
#: The typed fields that hold a mapping (``null`` in ``run.json`` is kept as it was given).
_MAPPINGS = ("versions", "options", "inputs", "timings")


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
    options: RunOptions = field(default_factory=RunOptions)
    data: Any = None
    inputs: Mapping[str, Any] = field(default_factory=dict)
    world: Mapping[str, Any] | None = None
    timings: RunTimings = field(default_factory=RunTimings)
    #: What this command adds to the shared fields (selection, counts, definitions, units ...).
    details: RunDetails = field(default_factory=RunDetails)
    #: The keys given, in order: ``run.json`` is written in this order, and only these keys.
    order: tuple[str, ...] = field(default=(), repr=False, compare=False)
    #: The mapping fields given as ``null`` (read as empty, written back as ``null``).
    nulls: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    # -- building ---------------------------------------------------------------------------
    @classmethod
    def of(cls, value: RunRecord | Mapping[str, Any] | None) -> RunRecord:
        """``value`` as a record: a record is returned as it is; a mapping (``run.json``) is split into fields,
        each checked against its type.

        Raises:
            InputError: not a mapping, or a field of the wrong type (``a run record's options: expected ...``).
        """
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
        typed: dict[str, Any] = {k: given[k] for k in _TYPED if k in given and k not in _MAPPINGS}
        nulls = frozenset(k for k in _MAPPINGS if k in given and given[k] is None)
        for key in ("versions", "inputs"):
            if key in given and key not in nulls:
                typed[key] = dict(given[key])  # the record's own copy
        for key, part in (("options", RunOptions), ("timings", RunTimings)):
            if key in given and key not in nulls:
                try:
                    typed[key] = part.of(given[key], key)
                except InputError as exc:
                    raise InputError(f"a run record's {exc.reason}") from None
        if "invocation" in typed:
            typed["invocation"] = Invocation.of(typed["invocation"])
        details = RunDetails.of({k: v for k, v in given.items() if k not in _TYPED})
        return cls(**typed, details=details, order=tuple(given), nulls=nulls)

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
        model = self.details.model
        named = model.model if isinstance(model, ExtractorInfo) else model
        return str(self.details.model_name or self.options.model or named or "model")

    @property
    def weights_source(self) -> Mapping[str, Any] | None:
        """Where the model's weights came from when not from a model folder of their own: the GGUF file they were
        dequantised from (``gguf_source.json`` of the converted folder), as the run or its extractor recorded it."""
        found = self.details.weights_source
        for info in (self.details.extractor, self.details.model):
            if found is None and isinstance(info, ExtractorInfo):
                found = info.weights_source
        return found

    @property
    def selection(self) -> Selection:
        """How heads were selected (``mode`` and where); empty when the run selected none."""
        return self.details.selection or Selection()

    @property
    def reported_on(self) -> str | None:
        """The name of the data the run reports on (leaderboards)."""
        return self.details.leaderboard.reported_on

    @property
    def selected_on(self) -> str | None:
        """The name of the data heads were selected on (leaderboards); the report data when it is the same."""
        return self.details.leaderboard.selected_on if self.has("selected_on") else self.reported_on

    @property
    def counts(self) -> Mapping[str, Any]:
        """What the run counted (sentences, tokens, relations ...), by split."""
        return self.details.counts or {}

    @property
    def seconds(self) -> float | None:
        """The run's wall time in seconds, where it recorded one."""
        return self.details.seconds

    @property
    def extractor(self) -> ExtractorInfo:
        """What the extractor recorded about itself (model, device, dtype ...); empty when not recorded."""
        return self.details.extractor or ExtractorInfo()

    # -- saving -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The record as ``run.json`` holds it: the given keys, in the given order."""
        return {key: self._value(key) for key in self.order}

    def _value(self, key: str) -> Any:
        if key in self.nulls:
            return None
        if key not in _TYPED:
            return self.details.value(key)
        value = getattr(self, key)
        return value.to_dict() if isinstance(value, Invocation) else plain(value)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the record as JSON to ``path`` (a folder: its ``run.json``), whole or not at all: the one writer
        of ``run.json`` (NaN and infinities as ``null``, as every JSON output of a run)."""
        target = Path(path)
        target = target / RUN_FILE if target.is_dir() else target
        return write_json_atomic(target, json_ready(self.to_dict()), indent=2, ensure_ascii=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunRecord:
        """Read a record written by a run (a ``run.json`` file, or the folder holding one: then its ``run.json``
        must not be a link leading out of the folder).

        Raises:
            InputError: no such file, not JSON, not a JSON object, or a field of the wrong type.
        """
        doc = read_run_json(path)
        try:
            return cls.of(doc)
        except InputError as exc:
            raise InputError(exc.reason.removeprefix("a run record's "), path=_run_file(path)) from None

    def to_pandas(self) -> Any:
        """The record as a two-column table (``field``, ``value``), nested fields flattened to dotted names."""
        import pandas as pd

        rows = list(_flatten(self.to_dict(), ""))
        return pd.DataFrame(rows, columns=["field", "value"])

    def _repr_html_(self) -> str:
        """Notebook view: the record's one line, then every field (:meth:`to_pandas`), each value shortened."""
        from probes.reprs import record_html  # the views of results and records sit on this module

        return record_html(repr(self), self.to_pandas())

    def __iter__(self) -> Any:  # a record is not a mapping: say so rather than iterate its fields
        raise TypeError("a RunRecord is not a mapping: read its fields (.details for what a command adds), "
                        "or .to_dict()")

    def __repr__(self) -> str:
        """One line for a REPL, and for the record line of a result's repr: the command, its model(s), its data and
        the number of fields (every field: :meth:`to_pandas`, :meth:`to_dict`)."""
        from probes.reprs import record_line, spec_names  # the views of results and records sit on this module

        models = spec_names(self.details.models) or ([self.model_name] if self.model_name != "model" else [])
        data = [self.reported_on] if self.reported_on else spec_names(self.data)
        selection = (self.selection.mode, self.selected_on)
        return "RunRecord: " + record_line(self.command, models, data, selection, len(self.order))


def _run_file(path: str | os.PathLike[str]) -> Path:
    """The ``run.json`` that ``path`` names (a folder: its ``run.json``)."""
    file = Path(path)
    return file / RUN_FILE if file.is_dir() else file


def read_run_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object of a ``run.json`` (or of the folder holding one: then not followed out of it), its shared
    fields checked (:func:`typed_problem`), the rest as written: what :meth:`RunRecord.load` makes a record of,
    and what a command that checks its own fields first (``probes report``) reads.

    Raises:
        InputError: no such file, not JSON, not a JSON object, or a shared field of the wrong type.
    """
    folder = Path(path) if Path(path).is_dir() else None
    file = _run_file(path)
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
    return doc


def json_ready(value: Any) -> Any:
    """``value`` as JSON writes it for a person: NaN and infinities as None, numpy scalars as numbers, paths as
    text, tuples as lists, keys as text, parts as mappings."""
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return json_ready(value.item())
    if isinstance(value, Path):
        return str(value)
    return value


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

