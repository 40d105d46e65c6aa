"""Checks of a loaded result's values: each field against its annotation, arrays against the class's shapes.

A ``result.json`` and its ``arrays.npz`` come from outside, so :func:`probes.results.load` checks every
decoded value before the object is built: a string where an array belongs, an array of floats where counts
belong, or a per-head array whose shape disagrees with ``layers`` and ``heads`` is a clear error naming the
field, not an ``IndexError`` deep inside ``probes report``. The checks are cheap: types and shapes, never
the values of arrays.

Annotations are read with :func:`typing.get_type_hints` (a field whose annotation cannot be evaluated is not
checked). Shapes come from a class attribute ``_shapes = {"field": "axis axis ..."}``; each axis is

- a field path (``layers``, ``board.report.heads``): its length, or its value when it is an int;
  ``a*b`` is a product and ``a+1`` one more;
- an UPPERCASE name (``B``): any size, the same wherever the name appears in the class's shapes;
- a number, or ``_`` for any size.

An entry whose array or axis field is None (an optional part left out) is skipped. A field annotated with a
dataclass that has an ``of`` classmethod (such as :class:`probes.run_record.RunRecord`) may hold the plain
mapping ``of`` converts, as ``result.json`` saves it.
"""

from __future__ import annotations

import dataclasses
import numbers
import sys
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePath
from typing import Any

import numpy as np

__all__ = ["value_problems"]

_HINTS: dict[type, dict[str, Any]] = {}
_SEQUENCES = (tuple, list, Sequence)
_MAPPINGS = (dict, Mapping)


def value_problems(cls: type, values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """What is wrong with the decoded field ``values`` of dataclass ``cls``, one message per problem.

    Each message starts ``field 'prefix.name':`` and says what was expected and what was found.
    """
    hints = _hints(cls)
    for name, value in values.items():
        if name in hints:
            problem = _mismatch(value, hints[name])
            if problem is not None:
                yield f"field {prefix + name!r}: {problem}"
    yield from _shape_problems(getattr(cls, "_shapes", None) or {}, values, prefix)


def _hints(cls: type) -> dict[str, Any]:
    """The evaluated field annotations of ``cls`` (cached; one that cannot be evaluated is left out)."""
    if cls not in _HINTS:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # an annotation naming a type only imported for type checkers: evaluate field by field
            hints = {}
            for f in dataclasses.fields(cls):
                owner = types.SimpleNamespace(__annotations__={f.name: f.type})
                namespace = vars(sys.modules[cls.__module__]) if cls.__module__ in sys.modules else {}
                try:
                    hints.update(typing.get_type_hints(owner, globalns=dict(namespace)))
                except Exception:
                    continue
        _HINTS[cls] = hints
    return _HINTS[cls]


def _found(value: Any) -> str:
    """A short description of ``value`` for messages."""
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _mismatch(value: Any, hint: Any) -> str | None:
    """Why ``value`` does not fit the annotation ``hint`` (None when it fits or cannot be checked cheaply)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        problems = [_mismatch(value, a) for a in args]
        if None in problems:
            return None
        deeper = [p for p in problems if p and not p.startswith("expected ")]  # the value's own kind, inside
        wanted = [p.partition(", found ")[0].removeprefix("expected ") for p in problems if p]
        return deeper[0] if deeper else f"expected {' or '.join(wanted)}, found {_found(value)}"
    if hint is type(None):
        return None if value is None else f"expected None, found {_found(value)}"
    if origin is typing.Literal:
        return None if value in args else f"expected one of {args}, found {_found(value)}"
    if hint is np.ndarray or origin is np.ndarray:
        return _array_mismatch(value, args)
    if origin in _SEQUENCES or hint in (tuple, list):
        return _sequence_mismatch(value, hint, args)
    if origin in _MAPPINGS or (isinstance(origin, type) and issubclass(origin, Mapping)) or hint is dict:
        return _mapping_mismatch(value, args)
    return _scalar_mismatch(value, hint)


def _scalar_mismatch(value: Any, hint: Any) -> str | None:
    kinds: dict[Any, tuple[type, ...]] = {bool: (bool, np.bool_), int: (numbers.Integral,), str: (str,),
                                          float: (numbers.Real,)}
    if hint in kinds:
        expected = kinds[hint]
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint) and callable(getattr(hint, "of", None)):
        expected = (hint, Mapping)  # saved as a plain mapping that the class's ``of`` turns back into one
    elif isinstance(hint, type) and (dataclasses.is_dataclass(hint) or issubclass(hint, (BaseException, PurePath))):
        expected = (hint,)
    else:
        return None  # Any, type variables, protocols ...: not checked
    return None if isinstance(value, expected) else f"expected {hint.__name__}, found {_found(value)}"


def _array_mismatch(value: Any, args: tuple[Any, ...]) -> str | None:
    if not isinstance(value, np.ndarray):
        return f"expected an array, found {_found(value)}"
    scalar = typing.get_args(args[1])[0] if len(args) == 2 and typing.get_args(args[1]) else None
    if not isinstance(scalar, type) or not issubclass(scalar, np.generic):
        return None
    for family, kinds, label in ((np.bool_, "b", "bools"), (np.integer, "iu", "integers"),
                                 (np.floating, "f", "floats"), (np.complexfloating, "c", "complex numbers")):
        if issubclass(scalar, family):
            return None if value.dtype.kind in kinds else f"expected an array of {label}, found {_found(value)}"
    return None


def _sequence_mismatch(value: Any, hint: Any, args: tuple[Any, ...]) -> str | None:
    if not isinstance(value, (tuple, list)):
        return f"expected a {getattr(hint, '__name__', 'sequence')}, found {_found(value)}"
    if len(args) == 2 and args[1] is Ellipsis or len(args) == 1:
        items = [(i, v, args[0]) for i, v in enumerate(value)]
    elif args and args[-1] is not Ellipsis:
        if len(value) != len(args):
            return f"expected {len(args)} items, found {len(value)}"
        items = [(i, v, a) for i, (v, a) in enumerate(zip(value, args))]
    else:
        return None
    for i, item, item_hint in items:
        problem = _mismatch(item, item_hint)
        if problem is not None:
            return f"item {i}: {problem}"
    return None


def _mapping_mismatch(value: Any, args: tuple[Any, ...]) -> str | None:
    if not isinstance(value, Mapping):
        return f"expected a mapping, found {_found(value)}"
    if len(args) == 1:  # Counter[K]
        args = (args[0], int)
    if len(args) != 2:
        return None
    for key, item in value.items():
        problem = _mismatch(key, args[0]) or _mismatch(item, args[1])
        if problem is not None:
            return f"key {key!r}: {problem}"
    return None


# --- shapes --------------------------------------------------------------------------------


def _resolve(values: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted field path (None when a part is missing or None)."""
    first, *rest = path.split(".")
    value = values.get(first)
    for part in rest:
        value = getattr(value, part, None)
    return value


def _size(token: str, values: Mapping[str, Any], free: dict[str, int], actual: int) -> int | None:
    """The size an axis token asks for (None: any size, or a field that is left out)."""
    if token == "_":
        return None
    token, plus, extra = token.partition("+")
    if token.isupper():  # a free size: bound where it first appears
        return free.setdefault(token, actual - (int(extra) if plus else 0)) + (int(extra) if plus else 0)
    size = 1
    for factor in token.split("*"):
        if factor.isdigit():
            size *= int(factor)
            continue
        value = _resolve(values, factor)
        if value is None:
            return None
        size *= int(value) if isinstance(value, numbers.Integral) else len(value)
    return size + (int(extra) if plus else 0)


def _shape_problems(shapes: Mapping[str, str], values: Mapping[str, Any], prefix: str) -> Iterator[str]:
    """Each array of ``shapes`` whose shape disagrees with the other fields."""
    free: dict[str, int] = {}
    for path, axes in shapes.items():
        array, tokens = _resolve(values, path), axes.split()
        if not isinstance(array, np.ndarray):
            continue  # left out (None), or not an array: the annotation check says so
        if array.ndim != len(tokens):
            yield (f"field {prefix + path!r}: expected {len(tokens)} axes ({', '.join(tokens)}), found an array of "
                   f"shape {array.shape}")
            continue
        try:
            expected = [_size(t, values, free, n) for t, n in zip(tokens, array.shape)]
        except (TypeError, ValueError):
            continue  # an axis field of the wrong type: the annotation check says so
        if any(e is not None and e != n for e, n in zip(expected, array.shape)):
            shown = tuple("any" if e is None else e for e in expected)
            yield (f"field {prefix + path!r}: expected shape ({', '.join(tokens)}) = {shown} as the other fields "
                   f"say, found {array.shape}")
