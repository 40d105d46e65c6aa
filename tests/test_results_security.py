"""Loading a result never runs code, and damaged values are refused on load (probes.results, probes.result_checks).

A result folder is data shared between people: its ``type``, ``__dataclass__`` and ``__error__`` names are looked
up in the allow-list of registered classes (a planted module named there is never imported), and every value is
checked against its field's annotation and the class's array shapes before the object is built.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import probes
from probes.analysis.dependency import HeadScores
from probes.analysis.unit_counts import UnitCounts
from probes.corpora import ReadReport
from probes.errors import FormatError, InputError
from probes.extraction.outputs import ExtractionReport
from probes.results import _HOMES, _REGISTRY, ARRAYS_FILE, RESULT_FILE, _savez, equal, load

PACKAGE = Path(probes.__file__).resolve().parent


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``evilmod`` module on ``sys.path`` whose import writes a marker file; returns the marker's path."""
    marker = tmp_path / "marker"
    code = tmp_path / "code"
    code.mkdir()
    (code / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                     "class Leaderboard: pass\nclass Boom(Exception): pass\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.delitem(sys.modules, "evilmod", raising=False)
    return marker


def _report(tmp_path: Path) -> Path:
    return ExtractionReport(max_tokens=512, n_items=3, n_yielded=2, skipped=["s3"], truncated=[], windowed=[]).save(
        tmp_path / "report")


def _edit(folder: Path, **changes: object) -> None:
    """Rewrite ``result.json`` with top-level keys (``type``) or fields (``fields={...}``) changed."""
    doc = json.loads((folder / RESULT_FILE).read_text(encoding="utf-8"))
    fields = changes.pop("fields", {})
    doc.update(changes)
    doc["fields"].update(fields)
    (folder / RESULT_FILE).write_text(json.dumps(doc), encoding="utf-8")


@pytest.mark.parametrize("name", ["evilmod:Leaderboard", "evilmod:ExtractionReport", "this:Leaderboard",
                                  "os:system", "builtins:object"])
def test_a_type_naming_another_module_imports_nothing(name: str, planted: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delitem(sys.modules, "this", raising=False)  # `import this` prints the Zen of Python
    folder = _report(tmp_path)
    _edit(folder, type=name)
    with pytest.raises(InputError) as err:
        load(folder)
    message = str(err.value)
    assert str(folder) in message and RESULT_FILE in message and "field 'type'" in message and repr(name) in message
    assert not planted.exists() and "evilmod" not in sys.modules and "this" not in sys.modules
    assert "Zen of Python" not in capsys.readouterr().out


@pytest.mark.parametrize("tag, value", [
    ("__dataclass__", {"__dataclass__": "evilmod:Leaderboard", "fields": {}}),
    ("__dataclass__", {"__dataclass__": "this:Leaderboard", "fields": {}}),
    ("__error__", {"__error__": "evilmod:Boom", "args": {"__tuple__": []}, "attributes": {}}),
    ("__error__", {"__error__": "this:Boom", "args": {"__tuple__": []}, "attributes": {}}),
])
def test_nested_tags_naming_another_module_import_nothing(tag: str, value: dict, planted: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "this", raising=False)
    folder = _report(tmp_path)
    _edit(folder, fields={"skipped": [value]})
    with pytest.raises(InputError, match=rf"{RESULT_FILE}: field 'skipped\.0\.{tag}': unknown type") as err:
        load(folder)
    assert str(folder) in str(err.value) and repr(value[tag]) in str(err.value)
    assert not planted.exists() and "evilmod" not in sys.modules and "this" not in sys.modules


def test_tags_only_build_types_of_their_kind(tmp_path: Path) -> None:
    """A registered dataclass is no exception, an exception no dataclass, a nested type no top-level result."""
    folder = _report(tmp_path)
    _edit(folder, fields={"skipped": [{"__error__": "probes.heads.selection:LeaderboardRow", "args": {"__tuple__": []},
                                       "attributes": {}}]})
    with pytest.raises(InputError, match="field 'skipped.0': expected an exception type"):
        load(folder)
    _edit(folder, fields={"skipped": [{"__dataclass__": "probes.errors:FormatError", "fields": {}}]})
    with pytest.raises(InputError, match="field 'skipped.0': expected a dataclass"):
        load(folder)


def test_registered_types_still_load_and_moved_probes_classes_are_found(tmp_path: Path) -> None:
    folder = _report(tmp_path)
    original = ExtractionReport.load(folder)
    _edit(folder, type="probes.extraction.old_home:ExtractionReport")  # a probes class that moved
    assert equal(load(folder), original)
    report = ReadReport()
    report.skipped.append(FormatError("bad", path="x.conllu", line=3))
    error = load(report.save(tmp_path / "read")).skipped[0]
    assert type(error) is FormatError and error.line == 3 and str(error) == "x.conllu:3: bad"


def test_every_probes_type_is_registered_from_a_listed_home() -> None:
    """Every Result subclass and every @saveable class of probes lives in a module of results._HOMES, and each
    home defines one, so loading finds each type by importing only that fixed list."""
    homes = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "Result" not in text and "saveable" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
            marks = {getattr(d, "id", "") for d in node.decorator_list}
            if "Result" in bases or "saveable" in marks:
                module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
                homes.add(module)
    assert homes - {"probes.results"} <= set(_HOMES) - {"probes.errors"}, sorted(homes - set(_HOMES))
    assert set(_HOMES) - {"probes.errors"} <= homes
    import probes.compare.types  # noqa: F401  (a home of @saveable dataclasses)

    assert "probes.errors:FormatError" in _REGISTRY and "probes.compare.types:BestHead" in _REGISTRY


# ----------------------------------------------------------------------------- values and shapes
def _scores() -> HeadScores:
    """A tiny HeadScores: 2 directions x 1 layer x 2 heads x 3 relations, two units."""
    units = UnitCounts(np.array([0, 2, 3], np.int64), np.array([0, 1, 2], np.int32), np.array([1, 1, 1], np.int32),
                       np.ones((3, 2, 1, 2), np.uint16))
    return HeadScores(np.ones((2, 1, 2, 3), np.int64), np.full(3, 2, np.int64), ("a", "b", "c"), ("x", "y"), (0,),
                      (0, 1), 2, units, {})


def _replace_array(folder: Path, name: str, array: np.ndarray) -> None:
    with np.load(folder / ARRAYS_FILE, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays[name] = array
    _savez(folder / ARRAYS_FILE, arrays)


def test_the_tiny_result_round_trips(tmp_path: Path) -> None:
    assert equal(load(_scores().save(tmp_path / "s")), _scores())


@pytest.mark.parametrize("name, array, message", [
    ("correct", np.ones((2, 1, 2, 2), np.int64),
     r"field 'correct': expected shape \(directions, layers, heads, relations\) = \(2, 1, 2, 3\) as the other "
     r"fields say, found \(2, 1, 2, 2\)"),
    ("correct", np.ones((2, 2, 3), np.int64), r"field 'correct': expected 4 axes"),
    ("total", np.ones(4, np.int64), r"field 'total': expected shape \(relations\) = \(3,\)"),
    ("correct", np.ones((2, 1, 2, 3), np.float64), r"field 'correct': expected an array of integers, found a float64"),
    ("correct", np.array(["a"] * 12).reshape(2, 1, 2, 3), r"field 'correct': expected an array of integers, found a <U1"),
    ("units.correct", np.ones((3, 2, 5, 2), np.uint16),
     r"field 'units.correct': expected shape \(_, directions, layers, heads\) = \('any', 2, 1, 2\)"),
    ("units.indptr", np.array([0, 1, 2, 3], np.int64), r"field 'units.indptr': expected shape \(n_units\+1\) = \(3,\)"),
    ("units.indptr", np.array([0, 3, 2], np.int64), r"UnitCounts \(units\): field 'indptr': expected offsets rising"),
])
def test_tampered_arrays_are_refused_naming_the_field(name: str, array: np.ndarray, message: str,
                                                      tmp_path: Path) -> None:
    folder = _scores().save(tmp_path / "s")
    _replace_array(folder, name, array)
    with pytest.raises(InputError, match=message) as err:
        load(folder)
    assert str(folder) in str(err.value) and RESULT_FILE in str(err.value)


@pytest.mark.parametrize("fields, message", [
    ({"correct": "a string"}, r"field 'correct': expected an array, found str 'a string'"),
    ({"correct": [[1, 2]]}, r"field 'correct': expected an array, found list"),
    ({"n_units": "two"}, r"field 'n_units': expected int, found str"),
    ({"layers": {"__tuple__": ["x"]}}, r"field 'layers': item 0: expected int, found str 'x'"),
    ({"relations": {"a": 1}}, r"field 'relations': expected a tuple, found dict"),
    ({"metadata": [1]}, r"field 'metadata': expected a mapping, found list"),
    ({"units": 3}, r"field 'units': expected UnitCounts or None, found int 3"),
    ({"total": {"__array__": "missing"}}, r"field 'total': arrays.npz lacks the array 'missing'"),
    ({"total": {"__float__": "lots"}}, r"field 'total': expected nan, inf or -inf, found 'lots'"),
])
def test_tampered_values_are_refused_naming_the_field(fields: dict, message: str, tmp_path: Path) -> None:
    folder = _scores().save(tmp_path / "s")
    _edit(folder, fields=fields)
    with pytest.raises(InputError, match=message) as err:
        load(folder)
    assert str(folder) in str(err.value)


def test_nested_results_are_checked_with_their_path(tmp_path: Path) -> None:
    folder = _scores().save(tmp_path / "s")
    _edit(folder, fields={"units": {"__dataclass__": "probes.analysis.unit_counts:UnitCounts",
                                    "fields": {"indptr": "x", "relation": None, "total": None, "correct": None}}})
    with pytest.raises(InputError, match=r"field 'units\.indptr': expected an array, found str 'x'"):
        load(folder)


def test_a_class_of_ones_own_loads_and_is_checked_even_with_unresolvable_annotations(tmp_path: Path) -> None:
    """A user's Result subclass registers itself; a field whose annotation names a type-checking-only import is
    left unchecked, the others are still checked."""
    import dataclasses

    from probes.results import Result

    @dataclasses.dataclass(frozen=True)
    class Mine(Result):
        frame: NotImportedHere | None  # type: ignore[name-defined]  # noqa: F821
        n: int

    folder = Mine(None, 3).save(tmp_path / "mine")
    assert load(folder) == Mine(None, 3)
    _edit(folder, fields={"n": "three"})
    with pytest.raises(InputError, match="field 'n': expected int, found str 'three'"):
        load(folder)


def test_deeply_nested_json_is_an_input_error(tmp_path: Path) -> None:
    folder = _report(tmp_path)
    (folder / RESULT_FILE).write_text('{"type": "x", "fields": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(InputError, match="not valid JSON"):
        load(folder)
