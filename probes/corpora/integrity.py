"""Checks every reader shares for input that parses but must not be accepted quietly.

Control characters (Unicode category ``Cc``: U+0000-U+001F and U+007F-U+009F) have no place in a
word, a label or an id: a NUL or an escape code in a FORM silently reaches the tokenizer, the
reports and the file names. Tab is allowed (it separates columns, or is plain whitespace in a
comment); newlines never reach a field (files are read line by line), so the pattern leaves them
out and a block's lines can be searched at once, joined by newlines. Repeated sentence or
document ids are caught by :class:`IdRegister`: results are keyed by those ids, so a repeat would
silently merge two inputs.
"""

from __future__ import annotations

import re

__all__ = ["CONTROL", "IdRegister", "control_char", "shown"]

#: Every ``Cc`` character except tab and newline.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return ascii(match.group())[1:-1]


def shown(text: str, limit: int = 60) -> str:
    """``text`` for an error message: control characters escaped (``\\x00``), cut after ``limit`` characters."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return CONTROL.sub(_escape, cut)


def control_char(text: str) -> str | None:
    """A description of the first control character of ``text`` (``U+0000 at character 3``), or None."""
    match = CONTROL.search(text)
    if match is None:
        return None
    return f"U+{ord(match.group()):04X} at character {match.start() + 1}"


class IdRegister:
    """The ids seen so far in one file and the line each was first seen on."""

    def __init__(self) -> None:
        self._first: dict[str, int] = {}

    def first_line(self, ident: str, line: int) -> int | None:
        """The line ``ident`` was first seen on if it repeats, else None (and ``ident`` is recorded)."""
        if ident in self._first:
            return self._first[ident]
        self._first[ident] = line
        return None
