"""Split a tab-separated corpus file into blank-line separated blocks, keeping line numbers.

Why not let a library do it: every error must name its ``path:line``, and the file
must be streamed (a 200k-word treebank is never held in memory twice). Bytes are
decoded line by line so that a bad byte is reported on its own line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

from probes.errors import FormatError

__all__ = ["Block", "iter_blocks"]


@dataclass(frozen=True, slots=True)
class Block:
    """One blank-line separated block of a file.

    Attributes:
        path: the file, as given.
        line: 1-based line number of ``lines[0]``.
        lines: the block's lines without line endings (BOM removed from line 1).
        bad_line: 1-based line of the first line that is not UTF-8, or None.
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


def iter_blocks(path: str | PathLike[str]) -> Iterator[Block]:
    """Yield the blocks of ``path`` in order.

    Handles a UTF-8 BOM, CRLF line ends, any number of blank lines between or after
    blocks and a missing final newline.

    Raises:
        FormatError: ``path:1:`` when the file holds no block at all (empty file).
    """
    name = str(path)
    p = Path(path)
    if not p.is_file():
        raise FormatError(
            f"expected a corpus file, found {'a folder' if p.is_dir() else 'nothing'}", path=name
        )
    buf: list[str] = []
    start = 0
    bad_line: int | None = None
    bad_reason: str | None = None
    seen = False
    with open(p, "rb") as handle:
        lineno = 0
        for lineno, raw in enumerate(handle, 1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            text, reason = _decode(raw.rstrip(b"\r\n"), lineno)
            if not text.strip():
                if buf:
                    yield Block(name, start, tuple(buf), bad_line, bad_reason)
                    seen = True
                    buf, bad_line, bad_reason = [], None, None
                continue
            if not buf:
                start = lineno
            if reason is not None and bad_line is None:
                bad_line, bad_reason = lineno, reason
            buf.append(text)
        if buf:
            yield Block(name, start, tuple(buf), bad_line, bad_reason)
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
