"""Reading files that come from outside: regular files only, bounded in size and nesting, inside their folder.

Every reader of a file a user hands in (a run folder's ``run.json``, a store manifest, an experiment file, a
model folder's ``config.json``, a result's ``result.json``) goes through these functions, so that a hostile or
broken file ends in one :class:`~probes.errors.InputError` naming the file, the line or field, what was
expected and what was found: never in a hang (``/dev/zero``), a memory blow-up (a header that claims
gigabytes), a ``RecursionError`` (JSON nested thousands deep) or a read outside the folder (``../``, an
absolute path, a symlink leading out).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

from probes.errors import FormatError, InputError

__all__ = [
    "MAX_TEXT_BYTES",
    "MAX_DEPTH",
    "regular_file",
    "file_size",
    "read_bytes",
    "read_text",
    "load_json",
    "loads_json",
    "load_toml",
    "loads_toml",
    "check_depth",
    "inside_folder",
]

#: The largest JSON or TOML file read whole (records, manifests, configs, experiment files): 64 MiB.
MAX_TEXT_BYTES = 64 << 20

#: The deepest nesting of lists and objects accepted in a JSON or TOML file (records need fewer than 10).
MAX_DEPTH = 64

#: Brackets counted in the raw text (strings included) before a parser runs: far below Python's recursion limit,
#: far above what a string of brackets in a real file holds. The parsed value is then held to ``limit``.
_PARSER_DEPTH = 400

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: str | os.PathLike[str], *, what: str = "file") -> Path:
    """``path`` as a Path if it names a regular file (links followed); else an InputError saying what it is.

    Devices (``/dev/zero``), pipes and folders are refused before a byte is read, so nothing hangs on them.
    """
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"expected {what}, found no such file", path=file) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise InputError(f"expected {what}, found a path that cannot be read: {_reason(exc)}", path=file) from None
    if not stat.S_ISREG(mode):
        raise InputError(f"expected {what} (a regular file), found {_kind(mode)}", path=file)
    return file


def file_size(path: str | os.PathLike[str], *, what: str = "file") -> int:
    """The size in bytes of the regular file ``path`` (see :func:`regular_file`)."""
    return regular_file(path, what=what).stat().st_size


def read_bytes(path: str | os.PathLike[str], *, limit: int = MAX_TEXT_BYTES, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, refused with an InputError if it holds more than ``limit``."""
    file = regular_file(path, what=what)
    try:
        with file.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise InputError(f"expected {what}, found a file that cannot be read: {_reason(exc)}", path=file) from None
    if len(data) > limit:
        raise InputError(f"expected {what} of at most {limit:,} bytes, found a larger file", path=file)
    return data


def read_text(path: str | os.PathLike[str], *, limit: int = MAX_TEXT_BYTES, what: str = "file") -> str:
    """The UTF-8 text of ``path`` (see :func:`read_bytes`); a byte that is not UTF-8 is a FormatError with its
    line."""
    data = read_bytes(path, limit=limit, what=what)
    return decode_utf8(data, path=path, what=what)


def decode_utf8(data: bytes, *, path: str | os.PathLike[str] | None, what: str = "file") -> str:
    """``data`` decoded as UTF-8; else a FormatError naming the line and byte that are not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FormatError(f"expected {what} in UTF-8 text, found byte 0x{data[exc.start]:02x} that is not UTF-8 "
                          "(save the file as UTF-8)", path=path, line=line) from None


def check_depth(value: Any, *, path: str | os.PathLike[str] | None, limit: int = MAX_DEPTH,
                what: str = "file") -> Any:
    """``value`` if its lists and mappings nest at most ``limit`` deep (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            raise FormatError(f"expected {what} nested at most {limit} deep, found deeper nesting", path=path)
        stack.extend((child, depth + 1) for child in children)
    return value


def loads_json(text: str, *, path: str | os.PathLike[str] | None = None, what: str = "a JSON file",
               limit: int = MAX_DEPTH) -> Any:
    """``text`` parsed as JSON; any fault (syntax, nesting past ``limit``, a number past Python's limits) is a
    FormatError naming ``path`` and the line."""
    if _bracket_depth(text) > _PARSER_DEPTH:
        raise FormatError(f"expected {what} nested at most {limit} deep, found deeper nesting", path=path)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"expected {what}, found invalid JSON: {exc.msg} (column {exc.colno})",
                          path=path, line=exc.lineno) from None
    except (RecursionError, ValueError, OverflowError) as exc:
        raise FormatError(f"expected {what}, found JSON that cannot be read: {_reason(exc)}", path=path) from None
    return check_depth(value, path=path, limit=limit, what=what)


def load_json(path: str | os.PathLike[str], *, what: str = "a JSON file", max_bytes: int = MAX_TEXT_BYTES,
              limit: int = MAX_DEPTH) -> Any:
    """The JSON document in the regular file ``path``: bounded in size and nesting, UTF-8, one InputError for
    every fault."""
    return loads_json(read_text(path, limit=max_bytes, what=what), path=path, what=what, limit=limit)


def loads_toml(text: str, *, path: str | os.PathLike[str] | None = None, what: str = "a TOML file",
               limit: int = MAX_DEPTH) -> dict[str, Any]:
    """``text`` parsed as TOML; any fault is a FormatError naming ``path`` and, where TOML says it, the line."""
    if _bracket_depth(text) > _PARSER_DEPTH:
        raise FormatError(f"expected {what} nested at most {limit} deep, found deeper nesting", path=path)
    try:
        value = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        message = getattr(exc, "msg", str(exc))
        raise FormatError(f"expected {what}, found invalid TOML: {message}", path=path, line=line) from None
    except (RecursionError, ValueError, OverflowError) as exc:
        raise FormatError(f"expected {what}, found TOML that cannot be read: {_reason(exc)}", path=path) from None
    return check_depth(value, path=path, limit=limit, what=what)


def load_toml(path: str | os.PathLike[str], *, what: str = "a TOML file", max_bytes: int = MAX_TEXT_BYTES,
              limit: int = MAX_DEPTH) -> dict[str, Any]:
    """The TOML document in the regular file ``path`` (see :func:`loads_toml`)."""
    return loads_toml(read_text(path, limit=max_bytes, what=what), path=path, what=what, limit=limit)


def inside_folder(folder: str | os.PathLike[str], relative: object, *, what: str = "path",
                  source: str | os.PathLike[str] | None = None) -> Path:
    """``folder / relative`` resolved, if ``relative`` (read from the file ``source``) is a relative path that
    stays inside ``folder`` after links are followed; else an InputError naming ``source`` and the path.

    Used for every path read from a file (a run's unit paths, a store's shard names): nothing a file says may
    make `probes` read outside the folder it came with.
    """
    where = source if source is not None else folder
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise InputError(f"{what}: expected a relative path inside {folder}, found {relative!r}", path=where)
    if PurePath(relative).is_absolute() or relative.startswith(("/", "\\")) or ".." in PurePath(relative).parts:
        raise InputError(f"{what}: expected a relative path inside {folder}, found {relative!r}", path=where)
    root = Path(folder).resolve()
    try:
        resolved = (root / relative).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # RuntimeError: a symlink loop on older Pythons
        raise InputError(f"{what} {relative!r}: cannot be resolved: {_reason(exc)}", path=where) from None
    if not resolved.is_relative_to(root):
        raise InputError(f"{what} {relative!r}: leads outside {root} (through a link); refusing to read it",
                         path=where)
    return resolved


def _bracket_depth(text: str) -> int:
    """An upper bound of the nesting in JSON or TOML ``text`` where it could pass :data:`_PARSER_DEPTH` (else 0):
    the deepest run of unclosed ``[`` and ``{``, strings included, so that a parser's recursion limit is never
    reached (a string full of brackets only over-counts)."""
    if text.count("[") + text.count("{") <= _PARSER_DEPTH:  # the common case, without a Python loop
        return 0
    depth = deepest = 0
    for char in re.sub(r"[^\[\]{}]+", "", text):
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif char in "]}" and depth:
            depth -= 1
    return deepest


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


#: A loader of one kind of file, as the fuzz tests call it: path in, value or InputError out.
Loader = Callable[[Path], Any]
