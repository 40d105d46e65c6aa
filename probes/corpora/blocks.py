"""Split a tab-separated corpus file into blank-line separated blocks, keeping line numbers.

Why not let a library do it: every error must name its ``path:line``, and the file
must be streamed (a 200k-word treebank is never held in memory twice). Bytes are
decoded line by line so that a bad byte is reported on its own line.

Only a regular file is read (``/dev/zero``, a named pipe or a folder is refused before it
is opened), and memory stays bounded whatever the file holds: a line is read at most
:data:`MAX_LINE_BYTES` at a time (a longer line is a FormatError naming it), and a block
keeps at most :data:`MAX_BLOCK_LINES` lines and :data:`MAX_BLOCK_CHARS` characters (the rest of
an over-long block is read past, and the block is marked bad at the first line not kept,
so ``on_error="skip"`` skips just that sentence).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from os import PathLike
from typing import BinaryIO

from probes.errors import FormatError, InputError
from probes.safe_read import regular_file

__all__ = ["MAX_BLOCK_CHARS", "MAX_BLOCK_LINES", "MAX_LINE_BYTES", "Block", "iter_blocks"]

#: The longest line read (1 MiB): the longest line of UD English EWT or GUM has under 1,000 characters.
MAX_LINE_BYTES = 1 << 20

#: The most lines a block (one sentence with its comments) may hold: the longest EWT or GUM sentence has
#: under 200 words, and extraction windows or skips anything past a few thousand tokens anyway.
MAX_BLOCK_LINES = 100_000

#: The most characters a block may hold (64 Mi), so that lines at :data:`MAX_LINE_BYTES` cannot add up past it.
MAX_BLOCK_CHARS = 64 << 20


@dataclass(frozen=True, slots=True)
class Block:
    """One blank-line separated block of a file.

    Attributes:
        path: the file, as given.
        line: 1-based line number of ``lines[0]``.
        lines: the block's lines without line endings (BOM removed from line 1).
        bad_line: 1-based line of the first line that is not UTF-8, or of the first line past
            :data:`MAX_BLOCK_LINES` / :data:`MAX_BLOCK_CHARS` (not kept), or None.
        bad_reason: what was found there.
    """

    path: str
    line: int
    lines: tuple[str, ...]
    bad_line: int | None = None
    bad_reason: str | None = None


def _decode(raw: bytes, lineno: int) -> tuple[str, str | None]:
    """Decode one line as UTF-8; on failure return a replacement decoding and the reason."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as err:
        bad = raw[err.start : err.start + 1].hex()
        return raw.decode("utf-8", "replace"), (
            f"expected UTF-8 text, found byte 0x{bad} at column {err.start + 1}"
        )


def _lines(handle: BinaryIO, name: str) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes without the line end)`` of each line, none longer than :data:`MAX_LINE_BYTES`."""
    lineno = 0
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        lineno += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):  # MAX_LINE_BYTES + its line end are read
            raise FormatError(f"expected lines of at most {MAX_LINE_BYTES:,} bytes, found a longer line "
                              "(not a corpus file?)", path=name, line=lineno)
        if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        yield lineno, raw.rstrip(b"\r\n")


def _opened(path: str | PathLike[str]) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (refused before opening otherwise)."""
    file = regular_file(path, what="a corpus file")
    try:
        return file.open("rb")
    except OSError as exc:
        raise InputError(f"expected a corpus file, found one that cannot be read ({exc.strerror or exc})",
                         path=str(path)) from None


class _BlockBuilder:
    """The lines of the block being read, bounded by :data:`MAX_BLOCK_LINES` and :data:`MAX_BLOCK_CHARS`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.reset()

    def reset(self) -> None:
        """Start a new, empty block."""
        self.lines: list[str] = []
        self.start = 0
        self.size = 0
        self.n_lines = 0
        self.bad_line: int | None = None
        self.bad_reason: str | None = None

    def add(self, lineno: int, text: str, reason: str | None) -> None:
        """Keep one non-blank line and what is wrong with it, if anything (past the bounds: only count it)."""
        if not self.n_lines:
            self.start = lineno
        self.n_lines += 1
        self.size += len(text)
        if self.n_lines > MAX_BLOCK_LINES or self.size > MAX_BLOCK_CHARS:
            if self.n_lines == len(self.lines) + 1:  # the first line not kept
                self._bad(lineno, f"expected a sentence of at most {MAX_BLOCK_LINES:,} lines and "
                          f"{MAX_BLOCK_CHARS:,} characters, found a longer one (from line {self.start}; "
                          "the rest of it was read past)")
            return
        if reason is not None:
            self._bad(lineno, reason)
        self.lines.append(text)

    def _bad(self, lineno: int, reason: str) -> None:
        if self.bad_line is None:
            self.bad_line, self.bad_reason = lineno, reason

    def take(self) -> Block:
        """The block read so far; the builder starts afresh."""
        block = Block(self.name, self.start, tuple(self.lines), self.bad_line, self.bad_reason)
        self.reset()
        return block


def iter_blocks(path: str | PathLike[str]) -> Iterator[Block]:
    """Yield the blocks of ``path`` in order.

    Handles a UTF-8 BOM, CRLF line ends, any number of blank lines between or after
    blocks and a missing final newline.

    Raises:
        InputError: ``path`` is not a regular file (a folder, a device, a named pipe, nothing).
        FormatError: ``path:1:`` when the file holds no block at all (empty file); ``path:line:``
            for a line longer than :data:`MAX_LINE_BYTES`.
    """
    name = str(path)
    handle = _opened(path)
    builder = _BlockBuilder(name)
    seen = False
    lineno = 0
    with handle:
        for lineno, raw in _lines(handle, name):
            text, reason = _decode(raw, lineno)
            if text.strip():
                builder.add(lineno, text, reason)
            elif builder.n_lines:
                yield builder.take()
                seen = True
        if builder.n_lines:
            yield builder.take()
            seen = True
    if not seen:
        raise FormatError(
            (
                "expected at least one sentence, found an empty file"
                if lineno == 0
                else f"expected at least one sentence, found only {lineno} blank line(s)"
            ),
            path=name,
            line=1,
        )
