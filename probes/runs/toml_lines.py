"""Where a key of a TOML file is written: ``(table, ..., key)`` -> line, so that errors can name the line.

:mod:`tomllib` gives the values but no positions. :class:`KeyLines` scans the text once: table headers
(``[data.ewt]``, ``[[a.b]]``, quoted parts such as ``[analyses."x y"]``) and assignments (``key = ...``,
dotted ``a.b = ...``, quoted keys) give the line of each full key path; a path that is not written out
(a key of an inline table, a default left out) falls back to the line of its longest written prefix, so
the error still points at the right table. Lines inside multi-line strings are skipped.
"""

from __future__ import annotations

import re
import tomllib

__all__ = ["KeyLines"]

_BARE = r"[A-Za-z0-9_-]+"
_BASIC = r'"(?:[^"\\\n]|\\.)*"'
_LITERAL = r"'[^'\n]*'"
_KEY = rf"(?:{_BARE}|{_BASIC}|{_LITERAL})"
_DOTTED = rf"{_KEY}(?:[ \t]*\.[ \t]*{_KEY})*"
_HEADER = re.compile(rf"^[ \t]*\[\[?[ \t]*(?P<key>{_DOTTED})[ \t]*\]\]?")
_ASSIGN = re.compile(rf"^[ \t]*(?P<key>{_DOTTED})[ \t]*=")
_PART = re.compile(_KEY)


def _unquote(part: str) -> str:
    """A key part as tomllib reads it (quotes and escapes resolved)."""
    if part.startswith('"'):
        try:
            return str(tomllib.loads(f"k = {part}")["k"])
        except tomllib.TOMLDecodeError:
            return part.strip('"')
    return part[1:-1] if part.startswith("'") else part


def _parts(dotted: str) -> tuple[str, ...]:
    return tuple(_normal(_unquote(m.group())) for m in _PART.finditer(dotted))


def _normal(key: str) -> str:
    """Keys compare with ``-`` and ``_`` alike, as the readers treat ``select-on`` and ``select_on``."""
    return key.replace("-", "_")


class KeyLines:
    """The 1-based line of every key path written in one TOML text."""

    def __init__(self, text: str) -> None:
        self._lines: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        quote: str | None = None  # the delimiter of the multi-line string we are in
        for number, line in enumerate(text.splitlines(), 1):
            if quote is not None:
                if line.count(quote) % 2 == 1:
                    quote = None
                continue
            header = _HEADER.match(line)
            if header:
                table = _parts(header.group("key"))
                self._add(table, number)
                continue
            assign = _ASSIGN.match(line)
            if assign:
                self._add(table + _parts(assign.group("key")), number)
                rest = line[assign.end():]
                quote = next((q for q in ('"""', "'''") if rest.count(q) % 2 == 1), None)

    def _add(self, path: tuple[str, ...], number: int) -> None:
        """Record ``path`` and every prefix not seen before (a header or dotted key opens its parent tables)."""
        for end in range(1, len(path) + 1):
            self._lines.setdefault(path[:end], number)

    def line(self, *path: str) -> int | None:
        """The line of ``path`` (table names then the key), else of its longest written prefix; None if none is."""
        parts = tuple(_normal(p) for p in path)
        for end in range(len(parts), 0, -1):
            if parts[:end] in self._lines:
                return self._lines[parts[:end]]
        return None
