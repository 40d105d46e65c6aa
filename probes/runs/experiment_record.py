"""The ``run.json`` of a ``probes run`` folder, read back for ``probes report``: every field checked once, on load.

``probes report RUN_DIR`` rebuilds the report from the record and the unit folders it names, so the record is
input like any other: a field of the wrong type, a count out of range or a unit folder outside ``RUN_DIR``
(an absolute path, ``..``, a link leading out) is one :class:`~probes.errors.InputError` naming ``run.json`` and
the field (``units[3].path: expected a relative path inside RUN_DIR, found 17``), before any unit is read, never a
``KeyError`` or ``TypeError`` in the middle of the report, and never a file read from outside the run folder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from probes.errors import InputError
from probes.run_details import ExperimentUnit
from probes.run_record import RUN_FILE, RunRecord, read_run_json
from probes.runs.option_rules import MAX_COUNT, N_RESAMPLES, SEED, Rule, shown
from probes.safe_read import inside_folder

__all__ = ["read_experiment_record", "check_experiment_record", "check_unit_result", "unit_result_folder",
           "RESULT_TYPES", "MAX_UNITS"]

#: The most units a run folder's record may list (far above any experiment: one per analysis x model x data).
MAX_UNITS = 1_000_000
#: The most layers or heads a model of the record may say it has.
_MAX_SIZE = 1_000_000

_TEXT = Rule("string")
_FLAG = Rule("flag")
_SECONDS = Rule("number", 0)
_FRACTION = Rule("number", 0, 1, below=True)
_SIZE = Rule("count", 0, _MAX_SIZE)
_STEP = Rule("count", 0, MAX_COUNT)
_ANY_SEED = Rule("count", 0, 2**64 - 1)  # a random-init twin's seed: a label here, bounded where it is used
_NUMBER = Rule("number")


class _Wrong(Exception):
    """A field of the record that is not what the report reads (turned into an InputError naming run.json)."""

    def __init__(self, field: str, expected: str, found: str) -> None:
        super().__init__(field)
        self.field, self.expected, self.found = field, expected, found


def _rule(rule: Rule, value: Any, field: str) -> Any:
    if not rule.allows(value):
        raise _Wrong(field, rule.expected(), rule.found(value))
    return value


def _optional(rule: Rule, value: Any, field: str) -> Any:
    return None if value is None else _rule(rule, value, field)


def _must(rule: Rule) -> Callable[[Any, str], Any]:
    """A check of a field that must follow ``rule``."""
    return lambda value, field: _rule(rule, value, field)


def _maybe(rule: Rule) -> Callable[[Any, str], Any]:
    """A check of a field that is null or follows ``rule``."""
    return lambda value, field: _optional(rule, value, field)


def _nested(checks: Mapping[str, Callable[[Any, str], Any]]) -> Callable[[Any, str], Any]:
    """A check of a field that is null or a mapping whose fields pass ``checks``."""
    return lambda value, field: _fields(_optional_mapping(value, field), field, checks)


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise _Wrong(field, "a mapping of names to values", shown(value))
    return value


def _optional_mapping(value: Any, field: str) -> Mapping[str, Any]:
    return {} if value is None else _mapping(value, field)


def _texts(value: Any, field: str) -> None:
    if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise _Wrong(field, "a list of strings", shown(value))


def _fields(entry: Mapping[str, Any], where: str, checks: Mapping[str, Callable[[Any, str], Any]]) -> None:
    """Check each field of ``entry`` that ``checks`` names and that is there (absent fields are not read)."""
    for key, check in checks.items():
        if key in entry:
            check(entry[key], f"{where}.{key}")


def _text(value: Any, field: str) -> Any:
    return _optional(_TEXT, value, field)


def _entries(value: Any, field: str, check: Callable[[Mapping[str, Any], str], None]) -> None:
    """``value`` is a mapping of names to mappings; ``check`` each entry, named ``field["name"]``."""
    for name, entry in _mapping(value, field).items():
        where = f"{field}[{shown(name)}]"
        check(_mapping(entry, where), where)


def _model(entry: Mapping[str, Any], where: str) -> None:
    _fields(entry, where, {
        "kind": _text, "spec": _text, "base": _text, "weights_sha256": _text, "seed": _maybe(_ANY_SEED),
        "n_layers": _maybe(_SIZE), "n_heads": _maybe(_SIZE), "weights_source": _optional_mapping,
        "query_key": _nested({"scale": _maybe(_NUMBER), "target_confidence": _maybe(_NUMBER)}),
        "lab": _nested({"cell": _text, "init": _text, "seed": _must(_ANY_SEED), "step": _maybe(_STEP),
                        "last_step": _maybe(_STEP), "heads": _maybe(_SIZE), "layers": _maybe(_SIZE),
                        "attention_dropout": _maybe(_FRACTION)})})


def _dataset(entry: Mapping[str, Any], where: str) -> None:
    _fields(entry, where, {"treebank": _text, "corpus": _text, "select_on": _text, "files": _optional_mapping})


def _analysis(entry: Mapping[str, Any], where: str) -> None:
    _fields(entry, where, {"kind": _text, "models": _texts, "data": _texts, "options": _optional_mapping})


def _unit(unit: Any, where: str, models: Mapping[str, Any]) -> Mapping[str, Any]:
    """One entry of ``units``: the fields the report reads, of their types; its model one of ``models``."""
    entry = _mapping(unit, where)
    for key in ("analysis", "kind", "model", "data", "path"):
        if key not in entry:
            raise _Wrong(f"{where}.{key}", "a string (every unit names it)", "none")
        if key != "path":
            _rule(_TEXT, entry[key], f"{where}.{key}")
    if not isinstance(entry["path"], str) or not entry["path"]:
        raise _Wrong(f"{where}.path", "a relative path string", shown(entry["path"]))
    _fields(entry, where, {"key": _text, "from_atlas": _text, "run_folder": _text, "how": _text,
                           "reused": _maybe(_FLAG), "seconds": _maybe(_SECONDS),
                           "options": _nested({"cell": _text, "other": _text, "seed": _maybe(_ANY_SEED),
                                               "config": _optional_mapping})})
    if entry["model"] not in models:
        raise _Wrong(f"{where}.model", "one of the models the record's models describe", shown(entry["model"]))
    return entry


#: The checks of the record's own fields (those ``probes run`` adds to the shared ones), where they are given.
_RECORD_FIELDS: dict[str, Callable[[Any, str], Any]] = {
    "analyses": lambda value, field: _entries(value, field, _analysis),
    "experiment": _nested({key: _text for key in ("name", "title", "description", "out", "file", "copy")}),
    "report_options": _nested({"n_resamples": _must(N_RESAMPLES), "tolerance": _must(_FRACTION),
                               "seed": _must(SEED)}),
    "seed_questions": _maybe(_FLAG), "status": _text, "train": _optional_mapping}


def _units(value: Any, models: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        raise _Wrong("units", "a list of units", shown(value))
    if len(value) > MAX_UNITS:
        raise _Wrong("units", f"at most {MAX_UNITS:,} units", f"{len(value):,}")
    return [_unit(unit, f"units[{i}]", models) for i, unit in enumerate(value)]


def unit_result_folder(run_dir: Path, unit_path: str, *, field: str, source: Path) -> Path:
    """The resolved ``result/`` folder of the unit at ``unit_path`` (relative to ``run_dir``); InputError naming
    ``source`` and ``field`` when the path is absolute, climbs out with ``..`` or leads out through a link."""
    inside_folder(run_dir, unit_path, what=field, source=source)
    return inside_folder(run_dir, str(PurePosixPath(unit_path, "result")), what=field, source=source)


def check_experiment_record(doc: Mapping[str, Any], run_dir: Path, source: Path) -> list[Path]:
    """Check every field of a ``probes run`` record (``doc``: its fields as ``run.json`` holds them, before they
    become a :class:`RunRecord`) that ``probes report`` reads; the unit's result folders, in the order of
    ``units``, each inside ``run_dir``.

    Raises:
        InputError: naming ``source`` (the ``run.json``) and the field: what was expected, what was found.
    """
    try:
        models = doc.get("models", {})  # every unit's model is one of these
        _entries(models, "models", _model)
        if doc.get("data") is not None:
            _entries(doc["data"], "data", _dataset)
        for key, check in _RECORD_FIELDS.items():
            if key in doc:
                check(doc[key], key)
        units = _units(doc.get("units", []), models)
    except _Wrong as wrong:
        raise InputError(f"{wrong.field}: expected {wrong.expected}, found {wrong.found}", path=source) from None
    return [unit_result_folder(run_dir, u["path"], field=f"units[{i}].path", source=source)
            for i, u in enumerate(units)]


#: The type of the result a unit of each kind saves (by class name: no analysis module is imported to check it);
#: a unit of another kind is not read by the comparison.
RESULT_TYPES: dict[str, str] = {
    "leaderboard": "Leaderboard", "baselines": "BaselineScores", "atlas": "Atlas", "coreference": "CoreferenceRun",
    "bridging": "BridgingRun", "probe": "ProbeRun", "importance": "HeadImportance", "prune": "Pruning",
    "match": "MatchRun", "train": "LabRun"}


def check_unit_result(unit: ExperimentUnit, result: Any, index: int, source: Path) -> Any:
    """``result``, loaded from the folder of ``units[index]``, if it is what a unit of its ``kind`` saves; else an
    InputError naming ``source`` and the unit's kind (a kind edited in ``run.json`` would break the comparison)."""
    expected = RESULT_TYPES.get(unit.kind)
    if expected is not None and type(result).__name__ != expected:
        raise InputError(f"units[{index}].kind: {unit.kind!r} expects a saved {expected}, found a saved "
                         f"{type(result).__name__} in {unit.path}", path=source)
    return result


def read_experiment_record(run_dir: Path) -> tuple[RunRecord, list[Path]]:
    """The checked record of the run folder ``run_dir`` and its units' result folders
    (:func:`check_experiment_record`, run on the fields as written, before they become a record).

    Raises:
        InputError: no ``run.json``, one that is not JSON, or a field that is not what the report reads.
    """
    source = run_dir / RUN_FILE
    doc = read_run_json(run_dir)  # the folder's run.json, not followed out of it
    folders = check_experiment_record(doc, run_dir, source)
    try:
        return RunRecord.of(doc), folders
    except InputError as exc:
        raise InputError(exc.reason, path=source) from None
