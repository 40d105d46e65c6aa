"""Results are data: every result type saves to an open folder and loads back exactly.

A saved result is a folder holding two files:

- ``result.json``: ``{"type": "module:Class", "format": 1, "fields": {...}}`` with every
  field that is not a numpy array, in plain JSON where JSON is exact (str, int, finite
  float, bool, None, lists, str-keyed dicts) and small tagged objects where it is not
  (``{"__tuple__": [...]}``, ``{"__dict__": [[key, value], ...]}`` for non-str keys,
  ``{"__float__": "nan"}``, ``{"__dataclass__": "module:Class", "fields": {...}}`` for
  nested dataclasses, ``{"__array__": "name"}`` for an array kept in ``arrays.npz`` ...).
- ``arrays.npz``: every numpy array (and numpy scalar), named by its dotted field path
  (``correct``, ``units.indptr``), in :func:`numpy.savez`'s format, never pickled.

Loading never runs code named by a file: the ``type``, ``__dataclass__`` and ``__error__`` names are
looked up in an allow-list filled at class definition (every :class:`Result` subclass, and the classes
marked :func:`saveable`), and every decoded value is checked against its field's annotation and the
class's ``_shapes`` (:mod:`probes.result_checks`) before the object is built.

So tuples stay tuples, ints stay ints, NaN stays NaN, dict keys keep their type, and
arrays keep dtype, shape and every bit. Any reader of JSON and ``.npy`` can open it.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import zipfile
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from probes import errors, reprs
from probes.atomic_io import atomic_file
from probes.errors import FormatError, InputError
from probes.result_checks import value_problems
from probes.run_record import RUN_FILE, RunRecord
from probes.safe_arrays import NpzArchive
from probes.safe_read import inside_folder, load_json

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["Result", "load", "equal", "saveable", "long_table", "head_axes", "head_names", "require_pandas", "FORMAT",
           "RESULT_FILE", "ARRAYS_FILE"]

#: Version of the folder format written by :meth:`Result.save`.
FORMAT = 1
#: Name of the JSON file of a saved result.
RESULT_FILE = "result.json"
#: Name of the array file of a saved result.
ARRAYS_FILE = "arrays.npz"

R = TypeVar("R", bound="Result")
T = TypeVar("T", bound=type)
_TAGS = ("__tuple__", "__dict__", "__counter__", "__set__", "__frozenset__", "__float__",
         "__array__", "__dataclass__", "__error__", "__path__")
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.\-]")


def require_pandas() -> Any:
    """Import pandas, or raise an ImportError saying how to get it."""
    try:
        import pandas
    except ImportError as exc:  # pragma: no cover - pandas is a core dependency in practice
        raise ImportError("tables of results need pandas: pip install pandas") from exc
    return pandas


def long_table(axes: Mapping[str, Any], values: Mapping[str, Any]) -> pd.DataFrame:
    """Tidy table with one row per cell of a grid: a column per axis, then a column per value.

    Args:
        axes: ``{column: labels}`` in axis order; the grid has shape ``(len(labels), ...)``.
        values: ``{column: array}``, each broadcastable to the grid's shape.
    """
    pandas = require_pandas()
    labels = [np.asarray(v) for v in axes.values()]
    shape = tuple(len(v) for v in labels)
    grid = np.meshgrid(*labels, indexing="ij") if labels else []
    table: dict[str, Any] = {name: g.reshape(-1) for name, g in zip(axes, grid)}
    for name, value in values.items():
        table[name] = np.broadcast_to(np.asarray(value), shape).reshape(-1)
    return pandas.DataFrame(table)


def head_axes(layers: Sequence[int], heads: Sequence[int]) -> dict[str, npt.NDArray[np.int64]]:
    """``{"layer": ..., "head": ...}`` axes of a layers x heads array for :func:`long_table`, numbered from 1."""
    return {"layer": np.asarray(layers, dtype=np.int64) + 1, "head": np.asarray(heads, dtype=np.int64) + 1}


def head_names(table: pd.DataFrame) -> Any:
    """``layer-head`` names (``8-11``) from a table's 1-based ``layer`` and ``head`` columns."""
    return table["layer"].astype(str) + "-" + table["head"].astype(str)


#: The allow-list of loadable types: saved name (``module:Qualname``) -> class. Filled at class definition by
#: :class:`Result` and :func:`saveable`; loading constructs nothing else.
_REGISTRY: dict[str, type] = {}

#: The probes modules that define loadable types. A saved name whose module is one of these imports it (this
#: fixed entry, never a name read from a file) before the look-up; tests/test_results_security.py keeps the list
#: complete.
_HOMES: tuple[str, ...] = (
    "probes.analysis.attention_to_specials", "probes.analysis.baselines", "probes.analysis.bridging",
    "probes.analysis.coreference", "probes.analysis.cross_distances", "probes.analysis.dependency",
    "probes.analysis.driver", "probes.compare.matching", "probes.runs.match", "probes.runs.train",
    "probes.compare.lab_types", "probes.compare.role_lab_types", "probes.compare.families", "probes.compare.growth",
    "probes.importance.lab_types", "probes.runs.role_lab",
    "probes.analysis.head_distances", "probes.analysis.head_types", "probes.analysis.patterns",
    "probes.analysis.roles", "probes.analysis.surface", "probes.analysis.unit_counts", "probes.compare.types",
    "probes.analysis.sinks",
    "probes.corpora.readreport", "probes.errors",
    "probes.extraction.attention", "probes.extraction.gradients", "probes.extraction.outputs", "probes.heads.profile",
    "probes.heads.selection", "probes.importance.function", "probes.importance.pruning", "probes.importance.scores",
    "probes.probing.per_head",
    "probes.runs.atlas", "probes.runs.coreference", "probes.runs.experiment", "probes.runs.experiment_train",
    "probes.runs.importance",
    "probes.runs.leaderboard", "probes.runs.probing", "probes.training.curves", "probes.training.symmetry",
    "probes.compare.sources", "probes.runs.sources", "probes.runs.attention_maps",
)


def saveable(cls: T) -> T:
    """Class decorator: allow ``cls`` (a dataclass or exception type held inside results) to be rebuilt on load.

    :class:`Result` subclasses are registered on their own; a result folder naming any other type is refused.
    """
    _REGISTRY[_type_name(cls)] = cls
    return cls


class Result:
    """Mixin for (frozen) dataclasses holding the outcome of an analysis or a run.

    Gives ``save(path)`` / ``load(path)`` (exact round trip, see the module docstring),
    ``to_pandas()`` (a tidy long table; subclasses override it with named columns) and
    a notebook view. Equality stays the dataclass's; use :func:`equal` to compare results
    holding arrays.
    """

    __slots__ = ()

    #: Array shapes a loaded result must have: ``{field path: "axis axis ..."}``, each axis a field (its length,
    #: or its value when an int; ``a*b`` a product, ``a+1`` one more), an UPPERCASE name (the same size wherever
    #: it appears), a number, or ``_`` (any). See :mod:`probes.result_checks`.
    _shapes: Mapping[str, str] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register every Result subclass under its saved name (the allow-list :func:`load` reads), and give it
        Result's short repr: the dataclass decorator, applied after this, adds its field-by-field ``__repr__`` only
        to a class that defines none (a subclass that writes its own keeps it)."""
        super().__init_subclass__(**kwargs)
        saveable(cls)
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = Result.__repr__  # type: ignore[method-assign]  # the short view, before @dataclass runs

    def __post_init__(self) -> None:
        """A ``record`` field given as a mapping (as ``result.json`` holds it) becomes a :class:`RunRecord`."""
        record = getattr(self, "record", None)
        if isinstance(record, Mapping):
            try:
                object.__setattr__(self, "record", RunRecord.of(record))
            except InputError as exc:  # a malformed record in result.json: say which field
                raise InputError(f"field 'record': {exc.reason}") from None

    def _check_loaded(self) -> None:
        """Checks of a just-loaded result beyond its annotations and ``_shapes``: raise ValueError naming the field
        (subclasses override it; load adds the file)."""

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write this result to the folder ``path`` (created if needed) and return it."""
        if not dataclasses.is_dataclass(self):
            raise TypeError(f"{type(self).__name__} subclasses Result but is not a dataclass")
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        text = _dumps(type(self), _encode_fields(self, "", arrays))
        _replace(folder / RESULT_FILE, lambda p: p.write_text(text + "\n", encoding="utf-8"))
        _replace(folder / ARRAYS_FILE, lambda p: _savez(p, arrays))
        return folder

    @classmethod
    def load(cls: type[R], path: str | os.PathLike[str]) -> R:
        """Read a result saved by :meth:`save`; InputError if it is not one of ``cls``."""
        result = load(path)
        if not isinstance(result, cls):
            raise InputError(
                f"expected a saved {cls.__name__}, found a saved {type(result).__name__}", path=Path(path)
            )
        return result

    def to_pandas(self) -> pd.DataFrame:
        """A tidy long table of the array fields, one row per cell (subclasses give named columns).

        Columns: ``array`` (field name), ``i0, i1, ...`` (0-based positions on each axis;
        when the result has ``layers`` and ``heads`` and an array's last two axes match
        them, those axes are ``layer`` and ``head``, 1-based model numbers), ``value``.
        A result without arrays gives one row of its scalar fields.
        """
        pandas = require_pandas()
        frames = [_array_frame(self, f.name, value) for f, value in _field_values(self)
                  if isinstance(value, np.ndarray) and value.dtype.kind in "biuf"]
        if frames:
            return pandas.concat(frames, ignore_index=True)
        row = {f.name: value for f, value in _field_values(self) if _is_scalar(value)}
        return pandas.DataFrame([row])

    def __repr__(self) -> str:
        """A few lines for a REPL: the class, layers x heads, the run record (command, model, data), each field in a
        few characters, and the methods that show more (:mod:`probes.reprs`)."""
        return reprs.result_text(self)

    def _repr_html_(self) -> str:
        """Notebook view: the same facts, then the head of the :meth:`to_pandas` table (escaped; a short text of
        the fields without pandas)."""
        try:
            require_pandas()
        except ImportError:
            return reprs.result_html(self, None, self._summary())
        return reprs.result_html(self, self.to_pandas(), self._summary())

    def _summary(self) -> str:
        """One line per field: arrays by dtype and shape, other values in a few characters."""
        return "\n".join(f"{f.name}: {reprs.described(value)}" for f, value in _field_values(self))


def load(path: str | os.PathLike[str]) -> Result:
    """Read any saved result, rebuilding the type recorded in its ``result.json``.

    ``path`` is a saved result's folder (``result.json`` and ``arrays.npz``), or the output folder of a command:
    then the main result its ``run.json`` names (``result``: ``leaderboard``, ``atlas``, ``match`` ...), which
    must lie inside that folder. Only registered types are built (never a module named by the file is imported)
    and every value is checked against its field's annotation and the class's array shapes: InputError naming
    the file and the field; a folder that is neither says what it expected and what it found.
    """
    folder = _saved_folder(Path(path))
    doc = _read_json(folder)
    cls = _registered(doc["type"], "type", folder)
    if not (issubclass(cls, Result) and dataclasses.is_dataclass(cls)):
        raise InputError(f"{RESULT_FILE}: field 'type': expected a Result type, found {doc['type']!r}", path=folder)
    arrays_path = folder / ARRAYS_FILE
    if not (arrays_path.exists() or arrays_path.is_symlink()):
        raise InputError(f"not a saved result: {ARRAYS_FILE} is missing", path=folder)
    inside_folder(folder, ARRAYS_FILE, what="file")  # a link leading out of the folder is not followed
    try:
        with NpzArchive(arrays_path, what=ARRAYS_FILE) as npz:  # every array's size checked before it is read
            return _build(cls, doc["fields"], _Decoder(npz, folder), "")
    except OSError as exc:
        raise InputError(f"cannot read {ARRAYS_FILE}: {exc}", path=folder) from exc


def equal(a: Any, b: Any) -> bool:
    """Exact, array-aware equality: same types, bit-identical arrays, NaN equal to NaN.

    Dataclasses are compared field by field, mappings by keys (of the same type) and
    values, exceptions by type, ``args`` and attributes.
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return all(equal(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping):
        keys_b = {(type(k), k): k for k in b}
        return len(a) == len(b) and all((type(k), k) in keys_b and equal(a[k], b[keys_b[type(k), k]]) for k in a)
    if isinstance(a, BaseException):
        return equal(a.args, b.args) and equal(vars(a), vars(b))
    return bool(a == b)


# --- writing -------------------------------------------------------------------------------


def _type_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _field_values(obj: Any) -> Iterator[tuple[dataclasses.Field[Any], Any]]:
    for f in dataclasses.fields(obj):
        yield f, getattr(obj, f.name)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool, np.generic))


def _array_frame(result: Any, name: str, array: np.ndarray) -> pd.DataFrame:
    """Long table of one array field: one row per cell, axis positions as columns."""
    axes: dict[str, Any] = {f"i{k}": np.arange(n) for k, n in enumerate(array.shape)}
    layers, heads = getattr(result, "layers", None), getattr(result, "heads", None)
    if (array.ndim >= 2 and isinstance(layers, tuple) and isinstance(heads, tuple)
            and array.shape[-2:] == (len(layers), len(heads))):
        axes.pop(f"i{array.ndim - 1}"), axes.pop(f"i{array.ndim - 2}")
        axes.update(layer=np.asarray(layers, dtype=np.int64) + 1, head=np.asarray(heads, dtype=np.int64) + 1)
    table = long_table(axes, {"value": array})
    table.insert(0, "array", name)
    return table


def _encode_fields(obj: Any, prefix: str, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    return {f.name: _encode(value, f"{prefix}{f.name}", arrays) for f, value in _field_values(obj)}


def _encode(value: Any, where: str, arrays: dict[str, np.ndarray]) -> Any:
    """JSON-able form of ``value``; arrays go to ``arrays`` under a name derived from ``where``."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if type(value) is int:
        return value
    if type(value) is float:
        return value if np.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, (np.ndarray, np.generic)):
        return _encode_array(value, where, arrays)
    if isinstance(value, RunRecord):  # saved as the plain mapping run.json holds; rebuilt by the result class
        return _encode_mapping(value.to_dict(), where, arrays)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__dataclass__": _type_name(type(value)), "fields": _encode_fields(value, f"{where}.", arrays)}
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        items = [_encode(v, f"{where}.{i}", arrays) for i, v in enumerate(value)]
        return {"__tuple__": items} if isinstance(value, tuple) else items
    if isinstance(value, (set, frozenset)):
        tag = "__frozenset__" if isinstance(value, frozenset) else "__set__"
        return {tag: [_encode(v, f"{where}.{i}", arrays) for i, v in enumerate(sorted(value, key=repr))]}
    if isinstance(value, Mapping):
        return _encode_mapping(value, where, arrays)
    if isinstance(value, PurePath):
        return {"__path__": str(value)}
    if isinstance(value, BaseException):
        return {"__error__": _type_name(type(value)), "args": _encode(tuple(value.args), f"{where}.args", arrays),
                "attributes": _encode(dict(vars(value)), f"{where}.attributes", arrays)}
    raise TypeError(f"cannot save {where}: values of type {type(value).__name__} are not supported")


def _encode_array(value: np.ndarray | np.generic, where: str, arrays: dict[str, np.ndarray]) -> Any:
    array = np.asarray(value)
    if array.dtype.hasobject:
        raise TypeError(f"cannot save {where}: arrays of Python objects need pickle, which results never use")
    key = base = _KEY_CHARS.sub("_", where) or "array"
    n = 1
    while key in arrays:
        key, n = f"{base}~{n}", n + 1
    arrays[key] = array
    return {"__array__": key, "scalar": True} if isinstance(value, np.generic) else {"__array__": key}


def _encode_mapping(value: Mapping[Any, Any], where: str, arrays: dict[str, np.ndarray]) -> Any:
    plain = all(type(k) is str and k not in _TAGS for k in value)
    if isinstance(value, Counter):
        pairs = [[_encode(k, f"{where}.key", arrays), _encode(v, f"{where}.{k}", arrays)] for k, v in value.items()]
        return {"__counter__": pairs}
    if plain:
        return {k: _encode(v, f"{where}.{k}", arrays) for k, v in value.items()}
    return {"__dict__": [[_encode(k, f"{where}.key", arrays), _encode(v, f"{where}.{k}", arrays)]
                         for k, v in value.items()]}


def _dumps(cls: type, fields: dict[str, Any]) -> str:
    """The ``result.json`` text: one line per field, each field compact (valid, diff-friendly JSON)."""
    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)

    body = ",\n".join(f"  {dump(name)}: {dump(value)}" for name, value in fields.items())
    return (f'{{"type": {dump(_type_name(cls))}, "format": {FORMAT}, "fields": {{\n'
            + body + ("\n" if body else "") + "}}")


def _savez(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """What :func:`numpy.savez` writes (a zip of ``name.npy``), pickle refused, any array name allowed."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as handle:
                np.lib.format.write_array(handle, array, allow_pickle=False)


def _replace(target: Path, write: Any) -> None:
    """Write through a temporary file, then rename: a crash never leaves half a file."""
    with atomic_file(target) as tmp:
        write(tmp)


# --- reading -------------------------------------------------------------------------------

#: The manifest of an attention store (:mod:`probes.extraction.store`, a later stage: named here, not imported).
_STORE_MANIFEST = "manifest.json"


def _saved_folder(folder: Path) -> Path:
    """The saved result that ``folder`` stands for: itself when it holds a ``result.json`` (or is no run folder:
    :func:`_read_json` says what it found); for a command's output folder, the folder its ``run.json`` names as
    the run's main result (``result``), kept inside ``folder``; never a run folder again (no loops)."""
    def present(name: str) -> bool:
        return (folder / name).exists() or (folder / name).is_symlink()

    if not folder.is_dir() or present(RESULT_FILE):
        return folder
    if present(RUN_FILE):
        record, source = RunRecord.load(folder), folder / RUN_FILE
        if record.details.result is None:
            saved = sorted(f"{p.parent.name}/" for p in folder.glob(f"*/{RESULT_FILE}"))
            found = (f"saved results in {', '.join(saved[:5])}: load one of them" if saved
                     else "the folder holds no saved result")
            raise InputError(f"field 'result': expected the folder of the run's main result, found none (a run of "
                             f"{record.command or 'an unknown command'} by an older probes, or an unfinished one); "
                             f"{found}", path=source)
        return inside_folder(folder, record.details.result, what="field 'result'", source=source)
    if present(_STORE_MANIFEST):
        raise InputError(f"an attention store ({_STORE_MANIFEST}), not a saved result: read it with "
                         "probes.open_store(path)", path=folder)
    return folder


def _read_json(folder: Path) -> dict[str, Any]:
    """The checked ``result.json`` of ``folder``; InputError saying what is wrong."""
    if not folder.exists():
        raise InputError("no such folder: expected a result folder written by Result.save", path=folder)
    if not folder.is_dir():
        raise InputError(f"expected a result folder (with {RESULT_FILE} and {ARRAYS_FILE}), found a file",
                         path=folder)
    file = folder / RESULT_FILE
    if not file.is_file():
        found = ", ".join(sorted(p.name for p in folder.iterdir())[:5]) or "an empty folder"
        raise InputError(f"neither a saved result nor a command's output folder: expected {RESULT_FILE}, found "
                         f"{found} (a saved result holds {RESULT_FILE} and {ARRAYS_FILE}; an output folder, a "
                         f"{RUN_FILE} naming its result)", path=folder)
    inside_folder(folder, RESULT_FILE, what="file")  # a link leading out of the folder is not followed
    try:
        doc = load_json(file, what=f"a result record ({RESULT_FILE})")
    except FormatError as exc:  # bad JSON, bad UTF-8, nested too deeply, too large
        raise InputError(f"{RESULT_FILE} is not valid JSON: {exc.reason}", path=file, line=exc.line) from None
    if not (isinstance(doc, dict) and isinstance(doc.get("type"), str) and isinstance(doc.get("fields"), dict)):
        raise InputError(f"{RESULT_FILE}: expected an object with 'type' and 'fields'", path=folder)
    fmt = doc.get("format")
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt > FORMAT:
        raise InputError(f"{RESULT_FILE}: expected format {FORMAT} or older, found {fmt!r} "
                         "(written by a newer probes?)", path=folder)
    return doc


def _registered(name: str, field: str, folder: Path) -> type:
    """The allow-listed class saved as ``name`` in ``field``; InputError naming the file, the field and the name.

    A name whose module is one of :data:`_HOMES` imports that fixed entry first; a probes class that moved to
    another probes module is found as the one registered (already imported) class of that name. Nothing named by
    the file alone is ever imported.
    """
    module, _, qualname = name.partition(":")
    if name not in _REGISTRY and module in _HOMES:
        importlib.import_module(_HOMES[_HOMES.index(module)])
    if name not in _REGISTRY and qualname and module.split(".")[0] == "probes":  # a probes class that moved
        moved = [cls for saved, cls in _REGISTRY.items() if saved.partition(":")[2] == qualname]
        if len(moved) == 1:
            return moved[0]
    if name not in _REGISTRY:
        raise InputError(f"{RESULT_FILE}: field {field!r}: unknown type {name!r} (only probes result types and the "
                         "types registered with probes.results.saveable are loaded; import the module defining "
                         "it first)", path=folder)
    return _REGISTRY[name]


class _Decoder:
    """Rebuilds values encoded by :func:`_encode`, reading arrays from an open npz."""

    def __init__(self, npz: Any, folder: Path) -> None:
        self.npz = npz
        self.folder = folder

    def fail(self, message: str) -> InputError:
        return InputError(f"{RESULT_FILE}: {message}", path=self.folder)

    def __call__(self, value: Any, where: str) -> Any:
        """The value encoded as ``value`` at the field path ``where`` (named in errors)."""
        if isinstance(value, list):
            return [self(v, f"{where}.{i}") for i, v in enumerate(value)]
        if not isinstance(value, dict):
            return value
        tag = next((k for k in value if k in _TAGS), None)
        if tag is None:
            return {k: self(v, f"{where}.{k}") for k, v in value.items()}
        body = value[tag]
        if tag in ("__array__", "__float__", "__path__", "__dataclass__", "__error__") and not isinstance(body, str):
            raise self.fail(f"field {where!r}: expected a name after {tag}, found {body!r}")
        if tag == "__array__":
            if body not in self.npz.files:
                raise self.fail(f"field {where!r}: {ARRAYS_FILE} lacks the array {body!r} named in {RESULT_FILE}")
            array = self.npz[body]
            return array[()] if value.get("scalar") else array
        if tag == "__float__":
            try:
                return float(body)
            except ValueError:
                raise self.fail(f"field {where!r}: expected nan, inf or -inf, found {body!r}") from None
        if tag == "__path__":
            return Path(body)
        if tag == "__dataclass__":
            cls = _registered(body, f"{where}.__dataclass__", self.folder)
            if not dataclasses.is_dataclass(cls) or not isinstance(value.get("fields"), dict):
                raise self.fail(f"field {where!r}: expected a dataclass with its fields, found {body!r}")
            return _build(cls, value["fields"], self, f"{where}.")
        if tag == "__error__":
            return self.error(body, value, where)
        if not isinstance(body, list):
            raise self.fail(f"field {where!r}: expected a list after {tag}, found {type(body).__name__}")
        items = [self(v, f"{where}.{i}") for i, v in enumerate(body)]
        if tag in ("__dict__", "__counter__"):
            if not all(isinstance(i, list) and len(i) == 2 for i in items):
                raise self.fail(f"field {where!r}: expected [key, value] pairs after {tag}")
            try:
                pairs = dict(items)
            except TypeError as exc:
                raise self.fail(f"field {where!r}: {exc}") from None
            return Counter(pairs) if tag == "__counter__" else pairs
        try:
            return {"__tuple__": tuple, "__set__": set, "__frozenset__": frozenset}[tag](items)
        except TypeError as exc:
            raise self.fail(f"field {where!r}: {exc}") from None

    def error(self, name: str, value: dict[str, Any], where: str) -> BaseException:
        cls = _registered(name, f"{where}.__error__", self.folder)
        if not issubclass(cls, BaseException):
            raise self.fail(f"field {where!r}: expected an exception type, found {name!r}")
        args, attributes = self(value.get("args"), f"{where}.args"), self(value.get("attributes"), f"{where}.attributes")
        names_ok = isinstance(attributes, dict) and all(isinstance(k, str) and k.isidentifier() for k in attributes)
        if not isinstance(args, tuple) or not names_ok:
            raise self.fail(f"field {where!r}: expected an exception's args and attributes")
        exc = cls.__new__(cls)
        exc.args = args
        vars(exc).update(attributes)
        return exc


#: What a class's ``__init__``, ``__post_init__`` or ``_check_loaded`` raises on values that passed the annotation
#: checks but not its own (a record of the wrong shape, an axis that does not add up): the file's fault.
_BUILD_ERRORS = (TypeError, ValueError, IndexError, KeyError, AttributeError, OverflowError, ZeroDivisionError)


def _build(cls: type, encoded: dict[str, Any], decode: _Decoder, prefix: str) -> Any:
    """An instance of dataclass ``cls`` from its encoded fields at the field path ``prefix``.

    Each decoded value is checked (annotation, ``_shapes``) before ``cls`` is called, so damaged values are an
    InputError naming the field, never an IndexError later; then the instance's ``_check_loaded`` runs.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(encoded) - set(fields))
    if unknown:
        raise decode.fail(f"{cls.__name__} has no field(s) {', '.join(prefix + u for u in unknown)}")
    values = {name: decode(v, prefix + name) for name, v in encoded.items()}
    for problem in value_problems(cls, values, prefix):
        raise decode.fail(problem)
    init = {k: v for k, v in values.items() if fields[k].init}
    try:
        obj = cls(**init)
    except _BUILD_ERRORS as exc:
        raise decode.fail(f"cannot rebuild {prefix or cls.__name__}: {exc}") from exc
    for name, v in values.items():
        if not fields[name].init:
            object.__setattr__(obj, name, v)
    check = getattr(obj, "_check_loaded", None)
    try:
        if callable(check):
            check()
    except _BUILD_ERRORS as exc:
        raise decode.fail(f"{cls.__name__} ({prefix.rstrip('.') or 'the result'}): {exc}") from exc
    return obj


for _exception in vars(errors).values():  # the exception types ReadReport and others keep in __error__ tags
    if isinstance(_exception, type) and issubclass(_exception, BaseException) and _exception.__module__ == errors.__name__:
        saveable(_exception)
