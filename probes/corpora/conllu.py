"""Streaming reader and writer for CoNLL-U (and the 10-column CoNLL-X) dependency treebanks.

The file is split into blocks here (:mod:`probes.corpora.blocks`) so every error
knows its line. Comment lines and the ID/HEAD fields go through the ``conllu``
package's own parsers (``parse_comment_line``, ``parse_id_value``,
``parse_int_value``); token lines are split on tabs here rather than by
``conllu.parse_line``, which also splits on runs of two spaces and silently
accepts too many or too few columns. Multiword-token ranges (``3-4``) and empty
nodes (``8.1``) are checked and skipped; the syntactic words are kept. As in UD's own
validator, a range spans two words or more, sits right before its first word, overlaps
no other range and ends by the sentence's last word; an empty node ``n.k`` sits after
word ``n`` (and before a range that starts at word ``n+1``), numbered ``n.1``, ``n.2``...
Numbers in ids and heads are held to :data:`MAX_DIGITS` digits before Python reads them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from conllu.exceptions import ParseException
from conllu.parser import parse_comment_line, parse_id_value, parse_int_value

from probes.corpora.blocks import Block, iter_blocks
from probes.corpora.integrity import CONTROL, IdRegister, control_char, shown
from probes.corpora.readreport import ReadReport, check_on_error
from probes.corpora.types import Sentence
from probes.corpora.validate import check_tree
from probes.errors import AnnotationError, FormatError, InputError

__all__ = [
    "ParsedBlock",
    "read_conllu",
    "iter_parsed",
    "iter_results",
    "parse_block",
    "write_conllu",
]

N_COLUMNS = 10
COLUMNS = tuple("ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC".split())
CONLLX_COLUMNS = tuple("ID FORM LEMMA CPOSTAG POSTAG FEATS HEAD DEPREL PHEAD PDEPREL".split())

#: The most digits read in a number of an ID or HEAD field: far past any sentence's length, far below what
#: Python refuses to convert (4,300 digits).
MAX_DIGITS = 9
_NUMBER = re.compile(r"[0-9]+")
_RANGE = re.compile(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")


@dataclass(frozen=True, slots=True)
class ParsedBlock:
    """A sentence with what the document reader needs beyond it.

    Attributes:
        sentence: the sentence.
        word_lines: 1-based file line of each syntactic word.
        comments: the block's ``# key = value`` metadata, in order.
        empty_nodes: ``(words_before, line, misc)`` of each empty node (``8.1``), which is
            not a word but may carry coreference brackets.
    """

    sentence: Sentence
    word_lines: tuple[int, ...]
    comments: tuple[tuple[str, str | None], ...]
    empty_nodes: tuple[tuple[int, int, str], ...] = ()


def _comments(block: Block) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    for text in block.lines:
        if text.startswith("#"):
            pairs.extend(parse_comment_line(text))
    return pairs


def _columns(text: str, *, sent_id: str, path: str | None, lineno: int, conllx: bool) -> list[str]:
    """The 10 tab-separated fields of a word line, each non-empty."""
    cols = text.split("\t")
    if len(cols) != N_COLUMNS:
        hint = " (the columns look space-separated)" if len(cols) == 1 and " " in text else ""
        raise FormatError(
            f"sentence '{sent_id}': expected {N_COLUMNS} tab-separated columns, "
            f"found {len(cols)}{hint}",
            path=path,
            line=lineno,
        )
    if "" in cols:  # CoNLL-U writes '_' for "no value"; an empty field is malformed
        col = cols.index("")
        name = (CONLLX_COLUMNS if conllx else COLUMNS)[col]
        raise FormatError(
            f"sentence '{sent_id}': expected a value in column {col + 1} ({name}; '_' if "
            "none), found an empty field",
            path=path,
            line=lineno,
        )
    return cols


def _no_control(text: str, *, sent_id: str, path: str | None, lineno: int, conllx: bool) -> None:
    """Raise unless line ``text`` is free of control characters (tab aside), naming the field that holds one."""
    if CONTROL.search(text) is None:
        return
    if text.startswith("#"):
        key = text[1:].split("=", 1)[0].strip()
        where, value = (f"the '# {key}' comment" if key else "a comment"), text
    else:
        cols = text.split("\t")
        col = next(i for i, c in enumerate(cols) if CONTROL.search(c))
        names = CONLLX_COLUMNS if conllx else COLUMNS
        where = f"{names[col]} (column {col + 1})" if col < N_COLUMNS else f"column {col + 1}"
        value = cols[col]
    raise FormatError(
        f"sentence '{shown(sent_id)}': expected no control characters in {where}, "
        f"found {control_char(value)} in '{shown(value)}'",
        path=path,
        line=lineno,
    )


def _too_long(text: str) -> bool:
    """True if a run of digits in ``text`` is longer than :data:`MAX_DIGITS`."""
    return any(len(run) > MAX_DIGITS for run in _NUMBER.findall(text))


def _id_kind(tid: str, n_words: int, *, sent_id: str, path: str | None, lineno: int,
             conllx: bool) -> tuple[str, int, int]:
    """What ID ``tid`` is: ``("word", n, 0)`` (the next syntactic word), ``("range", a, b)`` (``a-b``) or
    ``("empty", n, k)`` (``n.k``)."""
    if _too_long(tid):
        raise FormatError(f"sentence '{sent_id}': expected word id {n_words + 1} (or a range or empty node), "
                          f"found {shown(tid)!r}, a number of more than {MAX_DIGITS} digits", path=path, line=lineno)
    if not (tid.isascii() and tid.isdigit()):
        if conllx:
            raise FormatError(f"sentence '{sent_id}': expected an integer word id, found {tid!r}", path=path,
                              line=lineno)
        try:
            parsed = parse_id_value(tid)
        except ParseException as err:
            backwards = _RANGE.fullmatch(tid)  # 0-1 or 4-3: refused by range checks with a clearer message
            if backwards:
                return "range", int(backwards.group(1)), int(backwards.group(2))
            raise FormatError(
                f"sentence '{sent_id}': expected a word id (7), range (7-8) or empty node "
                f"(7.1), found {tid!r}",
                path=path,
                line=lineno,
            ) from err
        if isinstance(parsed, tuple):  # multiword-token range or empty node: not a syntactic word
            return ("empty" if parsed[1] == "." else "range"), parsed[0], parsed[2]
    if not (tid.isascii() and tid.isdigit()) or int(tid) != n_words + 1:
        raise FormatError(f"sentence '{sent_id}': expected word id {n_words + 1}, found {tid!r}", path=path,
                          line=lineno)
    return "word", n_words + 1, 0


class _NodeOrder:
    """Checks the order of a sentence's multiword-token ranges and empty nodes as the lines come.

    Attributes:
        last_range: ``(first word, last word, line)`` of the latest range, or None.
        next_empty: the ``k`` the next empty node after the current word must have.
    """

    def __init__(self, sent_id: str, path: str | None) -> None:
        self.sent_id = sent_id
        self.path = path
        self.last_range: tuple[int, int, int] | None = None
        self.next_empty = 1

    def _error(self, lineno: int, message: str) -> FormatError:
        return FormatError(f"sentence '{self.sent_id}': {message}", path=self.path, line=lineno)

    def word(self) -> None:
        """A syntactic word was read."""
        self.next_empty = 1

    def range(self, first: int, last: int, n_words: int, lineno: int) -> None:
        """A range ``first-last`` read after ``n_words`` words."""
        tid = f"{first}-{last}"
        if first < 1:
            raise self._error(lineno, f"expected a multiword token range of words numbered from 1, found {tid!r}")
        if last <= first:
            raise self._error(lineno, f"expected a multiword token range of two words or more (such as "
                              f"{first}-{first + 1}), found {tid!r}")
        if self.last_range is not None and first <= self.last_range[1]:
            a, b, line = self.last_range
            raise self._error(lineno, f"expected multiword token ranges that do not overlap, found {tid!r} "
                              f"overlapping the range '{a}-{b}' at line {line}")
        if first != n_words + 1:
            raise self._error(lineno, f"expected the multiword token range {tid!r} right before its first word "
                              f"{first}, found it after word {n_words}")
        self.last_range = (first, last, lineno)

    def empty(self, word: int, k: int, n_words: int, lineno: int) -> None:
        """An empty node ``word.k`` read after ``n_words`` words."""
        pending = self.last_range is not None and self.last_range[0] == n_words + 1
        if word != n_words or k != self.next_empty or pending:
            after = (f", before the multiword token range '{self.last_range[0]}-{self.last_range[1]}'"
                     if pending and self.last_range is not None else "")
            raise self._error(lineno, f"expected empty node {n_words}.{self.next_empty} (after word {n_words}"
                              f"{after}), found '{word}.{k}'")
        self.next_empty += 1

    def end(self, n_words: int) -> None:
        """The sentence's words are all read: the last range must end by the last word."""
        if self.last_range is not None and self.last_range[1] > n_words:
            a, b, line = self.last_range
            raise self._error(line, f"expected the multiword token range '{a}-{b}' to end by the sentence's "
                              f"last word {n_words}, found it extending past it")


def _head(head_text: str, tid: str, *, sent_id: str, path: str | None, lineno: int) -> int:
    """The HEAD field as an integer."""
    if _too_long(head_text):
        raise AnnotationError(f"sentence '{sent_id}': expected the head of word {tid} to be a word of the "
                              f"sentence, found {shown(head_text)!r}, a number of more than {MAX_DIGITS} digits",
                              path=path, line=lineno)
    if head_text.isascii() and head_text.isdigit():
        return int(head_text)
    try:
        value = parse_int_value(head_text)
    except ParseException as err:
        raise FormatError(
            f"sentence '{sent_id}': expected an integer head for word {tid}, "
            f"found {head_text!r}",
            path=path,
            line=lineno,
        ) from err
    if value is None:
        raise FormatError(
            f"sentence '{sent_id}': expected an integer head for word {tid}, found '_'",
            path=path,
            line=lineno,
        )
    return value


def _node_lines(block: Block, *, sent_id: str, conllx: bool) -> tuple[
        list[list[str]], list[int], list[int], list[tuple[int, int, str]]]:
    """The block's word lines checked in order: each word's fields (HEAD as given), heads and file lines, and
    ``(words before, line, MISC)`` of each empty node; ranges and empty nodes are checked and left out."""
    path = block.path
    rows: list[list[str]] = []
    heads: list[int] = []
    lines: list[int] = []
    empty: list[tuple[int, int, str]] = []
    order = _NodeOrder(sent_id, path)
    for offset, text in enumerate(block.lines):
        if text.startswith("#"):
            continue
        lineno = block.line + offset
        where: dict[str, Any] = {"sent_id": sent_id, "path": path, "lineno": lineno}
        cols = _columns(text, conllx=conllx, **where)
        kind, first, second = _id_kind(cols[0], len(rows), conllx=conllx, **where)
        if kind == "range":
            order.range(first, second, len(rows), lineno)
            continue
        if kind == "empty":  # keep its MISC for coreference
            order.empty(first, second, len(rows), lineno)
            empty.append((len(rows), lineno, cols[9]))
            continue
        order.word()
        heads.append(_head(cols[6], cols[0], **where))
        rows.append(cols)
        lines.append(lineno)
    if not rows:
        raise FormatError(f"sentence '{sent_id}': expected word lines, found only comments or ranges", path=path,
                          line=block.line)
    order.end(len(rows))
    return rows, heads, lines, empty


def parse_block(
    block: Block,
    *,
    fmt: str = "conllu",
    sent_id: str,
    doc_id: str | None = None,
    silver: bool = False,
    comments: list[tuple[str, str | None]] | None = None,
) -> ParsedBlock:
    """Turn one block into a validated :class:`ParsedBlock`.

    Args:
        block: the block.
        fmt: ``"conllu"`` or ``"conllx"`` (no ranges, no empty nodes, no MISC).
        sent_id: the id to use (the reader resolves ``# sent_id`` or a fallback).
        doc_id, silver: document-level values in force.
        comments: the block's parsed comments, if already parsed.

    Raises:
        FormatError, AnnotationError: with ``path:line:`` of the offending line.
    """
    path = block.path
    if block.bad_line is not None:
        raise FormatError(
            f"sentence '{sent_id}': {block.bad_reason}", path=path, line=block.bad_line
        )
    if comments is None:
        comments = _comments(block)
    conllx = fmt == "conllx"
    if CONTROL.search("\n".join(block.lines)):  # rare: find the line and field
        for offset, text in enumerate(block.lines):
            _no_control(text, sent_id=sent_id, path=path, lineno=block.line + offset, conllx=conllx)
    rows, heads, lines, empty = _node_lines(block, sent_id=sent_id, conllx=conllx)
    check_tree(heads, sent_id=sent_id, path=path, lines=lines, first_line=lines[0])
    meta = dict(comments)
    fields = list(zip(*rows))  # per column, every word's value
    sentence = Sentence(
        sent_id=sent_id,
        words=fields[1],
        heads=tuple(heads),
        relations=fields[7],
        upos=fields[3],
        xpos=fields[4],
        lemmas=fields[2],
        feats=fields[5],
        misc=() if conllx else fields[9],
        doc_id=doc_id,
        path=path,
        line=block.line,
        silver=silver or meta.get("annotation") == "silver",
        text=meta.get("text"),
    )
    return ParsedBlock(sentence, tuple(lines), tuple(comments), tuple(empty))


_KEY_COMMENTS = {"sent_id": re.compile(r"#\s*sent_id\s*="), "newdoc id": re.compile(r"#\s*newdoc(\s+id\s*=|\s*$)")}


def _comment_line(block: Block, key: str) -> int:
    """The file line of the block's ``# sent_id`` or ``# newdoc id`` comment (the block's first line if none)."""
    pattern = _KEY_COMMENTS[key]
    for offset, text in enumerate(block.lines):
        if text.startswith("#") and pattern.match(text):
            return block.line + offset
    return block.line


def _repeated(register: IdRegister, ident: str, block: Block, key: str, what: str) -> AnnotationError | None:
    """The error for an id already used in the file (``what``: ``sentence``/``document``), else None.

    Blocks are registered by their first line; the comment line is looked up only for a repeat.
    """
    first = register.first_line(ident, block.line)
    if first is None:
        return None
    return AnnotationError(
        f"{what} '{shown(ident)}': expected a {key} not used before in the file, "
        f"found it again (first in the block at line {first})",
        path=block.path,
        line=_comment_line(block, key),
    )


def iter_results(
    path: str | PathLike[str], *, fmt: str = "conllu"
) -> Iterator[tuple[bool, ParsedBlock | InputError]]:
    """Yield ``(starts_document, parsed block or its error)`` per block of ``path``.

    ``# newdoc id = X`` starts document ``X`` (``# newdoc`` alone: ``<file>#doc<k>``).
    ``# global.annotation = silver`` in the block that starts a document marks the
    whole document silver (CoNLL-U's ``global.`` prefix for document-wide attributes);
    ``# annotation = silver`` marks only its own sentence. Errors are yielded, not
    raised, so callers decide whether to stop or skip (the sentence or its document).
    A sentence id or document id used twice in the file is an error at its second use
    (results are keyed by these ids: a repeat would merge two inputs).
    """
    name = Path(path).name
    doc_id: str | None = None
    doc_silver = False
    n_docs = 0
    sent_ids, doc_ids = IdRegister(), IdRegister()
    for number, block in enumerate(iter_blocks(path), 1):
        comments = _comments(block)
        meta = dict(comments)
        starts = "newdoc id" in meta or "newdoc" in meta
        repeat: AnnotationError | None = None
        if starts:
            n_docs += 1
            doc_id = meta.get("newdoc id") or f"{name}#doc{n_docs}"
            doc_silver = meta.get("global.annotation") == "silver"
            repeat = _repeated(doc_ids, doc_id, block, "newdoc id", "document")
        sent_id = meta.get("sent_id") or f"{name}#{number}"
        repeat_sent = _repeated(sent_ids, sent_id, block, "sent_id", "sentence")
        repeat = repeat or repeat_sent
        if repeat is not None:
            yield starts, repeat
            continue
        try:
            yield starts, parse_block(
                block, fmt=fmt, sent_id=sent_id, doc_id=doc_id, silver=doc_silver, comments=comments
            )
        except InputError as err:
            yield starts, err


def iter_parsed(
    path: str | PathLike[str],
    *,
    fmt: str = "conllu",
    on_error: str = "raise",
    report: ReadReport | None = None,
) -> Iterator[ParsedBlock]:
    """Yield a :class:`ParsedBlock` per valid sentence of ``path`` (see :func:`iter_results`)."""
    check_on_error(on_error)
    report = report if report is not None else ReadReport()
    for _, result in iter_results(path, fmt=fmt):
        if isinstance(result, InputError):
            if on_error == "raise":
                raise result
            report.skip(result)
            continue
        report.sentences += 1
        report.words += len(result.sentence.words)
        yield result


def read_conllu(
    path: str | PathLike[str],
    *,
    on_error: str = "raise",
    report: ReadReport | None = None,
) -> Iterator[Sentence]:
    """Stream the sentences of a CoNLL-U file.

    Args:
        path: the ``.conllu`` file.
        on_error: ``"raise"`` (default) stops at the first bad sentence;
            ``"skip"`` skips it, warns (:class:`~probes.errors.SkippedItemWarning`)
            and records it in ``report``.
        report: a :class:`ReadReport` filled while reading.

    Raises:
        FormatError, AnnotationError: ``path:line: ...`` for malformed input.
    """
    for parsed in iter_parsed(path, fmt="conllu", on_error=on_error, report=report):
        yield parsed.sentence


def _cell(value: str | None) -> str:
    return value if value else "_"


def write_conllu(sentences: Iterable[Sentence]) -> str:
    """Serialise sentences as CoNLL-U text that :func:`read_conllu` reads back equal.

    Writes ``# newdoc id`` whenever ``doc_id`` changes, ``# sent_id``, ``# text`` when
    known and ``# annotation = silver`` for silver sentences. DEPS is written as ``_``
    (enhanced dependencies are not kept in :class:`Sentence`).
    """
    out: list[str] = []
    current_doc: str | None = None
    for sent in sentences:
        if sent.doc_id is not None and sent.doc_id != current_doc:
            out.append(f"# newdoc id = {sent.doc_id}")
            current_doc = sent.doc_id
        out.append(f"# sent_id = {sent.sent_id}")
        if sent.text:
            out.append(f"# text = {sent.text}")
        if sent.silver:
            out.append("# annotation = silver")
        n = len(sent.words)

        def col(values: tuple[str, ...], i: int) -> str:
            return _cell(values[i]) if values else "_"

        for i in range(n):
            out.append(
                "\t".join(
                    (
                        str(i + 1),
                        sent.words[i],
                        col(sent.lemmas, i),
                        col(sent.upos, i),
                        col(sent.xpos, i),
                        col(sent.feats, i),
                        str(sent.heads[i]),
                        _cell(sent.relations[i]),
                        "_",
                        col(sent.misc, i),
                    )
                )
            )
        out.append("")
    return "\n".join(out) + ("\n" if out else "")
