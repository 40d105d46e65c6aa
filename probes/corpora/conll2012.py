"""CoNLL-2012 (OntoNotes ``*_conll``) coreference documents.

Layout: ``#begin document (<name>); part <nnn>`` ... ``#end document``; one token per
line with whitespace-separated columns (0 document, 1 part, 2 word number, 3 word,
4 POS, 5 parse bit, 6 lemma, ..., last = coreference); blank lines between
sentences. The coreference column holds ``-`` or ``|``-joined chunks ``(12``, ``12)``,
``(12)``. The files carry constituency, not dependency, trees: each sentence's
heads come from ``trees=`` (a CoNLL-U/CoNLL-X file of the same sentences in order)
or, by default, from a spaCy parse of the given words (tokenisation kept, one
sentence per sentence), which marks the sentence ``silver``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from os import PathLike
from typing import TYPE_CHECKING

from probes.corpora.blocks import iter_blocks
from probes.corpora.coref import document_heads, tree_head
from probes.corpora.formats import detect_format, treebank_reader
from probes.corpora.integrity import IdRegister, control_char, shown
from probes.corpora.readreport import ReadReport, check_on_error
from probes.corpora.spacy_docs import DEFAULT_PIPELINE, parse_words, span_to_sentence
from probes.corpora.types import Document, Mention, Sentence
from probes.errors import AnnotationError, FormatError, InputError

if TYPE_CHECKING:
    from spacy.language import Language

__all__ = ["read_conll2012"]

MIN_COLUMNS = 12
_BEGIN = re.compile(r"^#begin document \((.*)\);\s*part\s+(\S+)\s*$")
_COREF = re.compile(r"^(\()?([^()|]+)(\))?$")


@dataclass
class _RawDoc:
    """One ``#begin document`` ... ``#end document`` section as read."""

    doc_id: str
    line: int
    sentences: list[tuple[int, list[str], list[str], list[str], list[int]]] = field(
        default_factory=list
    )
    # (first line, words, pos, lemmas, line of each word)
    mentions: list[tuple[str, int, int, int]] = field(
        default_factory=list
    )  # entity, start, end, line
    error: InputError | None = None


class _SectionReader:
    """Reads the lines of one file into :class:`_RawDoc` sections, one line at a time.

    Errors inside a section are kept on the section (``_RawDoc.error``, the first one wins) so the
    caller can skip the document; errors outside any section are raised.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.doc: _RawDoc | None = None
        self.opened: dict[str, list[tuple[int, int]]] = defaultdict(list)  # entity -> (offset, line) stack
        self.offset = 0  # document offset of the next word
        self.doc_ids = IdRegister()  # each document name and part may appear once per file
        self._new_sentence()

    def _new_sentence(self) -> None:
        self.words: list[str] = []
        self.pos: list[str] = []
        self.lemmas: list[str] = []
        self.lines: list[int] = []

    def fail(self, line: int, msg: str, cls: type[InputError] = FormatError) -> None:
        """Record the section's first error."""
        if self.doc is not None and self.doc.error is None:
            self.doc.error = cls(f"document '{self.doc.doc_id}': {msg}", path=self.path, line=line)

    def end_sentence(self) -> None:
        """Add the words read so far to the section as one sentence."""
        if self.words and self.doc is not None:
            self.doc.sentences.append((self.lines[0], self.words, self.pos, self.lemmas, self.lines))
        self._new_sentence()

    def finish(self) -> _RawDoc | None:
        """Close the open section (None if there is none), flagging mentions never closed."""
        if self.doc is None:
            return None
        for eid, stack in self.opened.items():
            if stack:
                self.fail(stack[0][1], f"expected a closing '{eid})' for the mention opened here, "
                          "found the end of the document", AnnotationError)
        done, self.doc = self.doc, None
        return done

    def begin(self, lineno: int, text: str) -> _RawDoc | None:
        """A ``#begin document`` line: returns the section it closes, if any."""
        self.end_sentence()
        done = self.finish()
        m = _BEGIN.match(text)
        if not m:
            raise FormatError(f"expected '#begin document (<name>); part <n>', found {text!r}", path=self.path,
                              line=lineno)
        self.doc = _RawDoc(f"{m.group(1)}_{m.group(2)}", lineno)
        self.opened.clear()
        self.offset = 0
        first = self.doc_ids.first_line(self.doc.doc_id, lineno)
        if first is not None:
            self.fail(lineno, f"expected a document name and part not used before in the file, found them "
                      f"again (first at line {first})", AnnotationError)
        return done

    def end(self, lineno: int) -> _RawDoc:
        """An ``#end document`` line: returns the section it closes."""
        self.end_sentence()
        done = self.finish()
        if done is None:
            raise FormatError("expected '#begin document' before '#end document', found none", path=self.path,
                              line=lineno)
        return done

    def token(self, lineno: int, text: str) -> None:
        """A word line: its columns and coreference chunks."""
        if self.doc is None:
            raise FormatError(f"expected '#begin document (<name>); part <n>', found {text[:40]!r}",
                              path=self.path, line=lineno)
        cols = text.split()
        if len(cols) < MIN_COLUMNS:
            self.fail(lineno, f"expected at least {MIN_COLUMNS} whitespace-separated columns, found {len(cols)}")
            return
        self.coreference(self.doc, lineno, cols[-1])
        self.words.append(cols[3])
        self.pos.append(cols[4])
        self.lemmas.append(cols[6] if cols[6] != "-" else "_")
        self.lines.append(lineno)
        self.offset += 1

    def coreference(self, doc: _RawDoc, lineno: int, column: str) -> None:
        """Open and close the mentions of one word's coreference column (``-`` or ``(12|12)`` ...)."""
        for chunk in column.split("|") if column != "-" else ():
            m = _COREF.match(chunk)
            if not m or not (m.group(1) or m.group(3)):
                self.fail(lineno, f"expected coreference chunks like '(12', '12)' or '(12)', found {column!r}",
                          AnnotationError)
                return
            eid = m.group(2)
            if m.group(1):
                self.opened[eid].append((self.offset, lineno))
            if m.group(3):
                if not self.opened[eid]:
                    self.fail(lineno, f"expected an open mention of entity {eid} to close, found '{eid})' never "
                              "opened", AnnotationError)
                    return
                start, line0 = self.opened[eid].pop()
                doc.mentions.append((eid, start, self.offset, line0))

    def line(self, lineno: int, text: str) -> _RawDoc | None:
        """Any line; returns a section when the line closes one."""
        found = control_char(text)
        if found is not None:
            msg = f"expected no control characters, found {found} in '{shown(text)}'"
            if self.doc is None:
                raise FormatError(msg, path=self.path, line=lineno)
            self.fail(lineno, msg)
        if text.startswith("#begin document"):
            return self.begin(lineno, text)
        if text.startswith("#end document"):
            return self.end(lineno)
        if not text.startswith("#"):
            self.token(lineno, text)
        return None


def _raw_documents(path: str) -> Iterator[_RawDoc]:
    """Yield the sections of ``path`` with their mentions as document offsets."""
    reader = _SectionReader(path)
    for block in iter_blocks(path):
        for k, text in enumerate(block.lines):
            lineno = block.line + k
            if block.bad_line == lineno:
                reader.fail(lineno, block.bad_reason or "undecodable line")
                if reader.doc is None:
                    raise FormatError(block.bad_reason or "undecodable line", path=path, line=lineno)
            done = reader.line(lineno, text)
            if done is not None:
                yield done
        if block.bad_line is not None and block.bad_line >= block.line + len(block.lines):  # an over-long block
            reader.fail(block.bad_line, block.bad_reason or "over-long sentence")
            if reader.doc is None:
                raise FormatError(block.bad_reason or "over-long sentence", path=path, line=block.bad_line)
        reader.end_sentence()
    if reader.doc is not None:
        raise FormatError(f"document '{reader.doc.doc_id}': expected '#end document', found the end of the file",
                          path=path, line=reader.doc.line)


def _given_trees(trees: str | PathLike[str]) -> Iterator[Sentence]:
    """The sentences of the ``trees=`` treebank (CoNLL-U, CoNLL-X or ``.spacy``)."""
    return iter(treebank_reader(detect_format(trees))(trees))


def _tree_sentences(raw: _RawDoc, given: Iterator[Sentence], trees: str | PathLike[str],
                    name: str) -> list[Sentence]:
    """The section's sentences with the heads of the next sentences of ``trees`` (words must match)."""
    sentences = []
    for k, (line0, words, pos, _lemmas, _) in enumerate(raw.sentences, 1):
        tree = next(given, None)
        if tree is None or list(tree.words) != words:
            raise AnnotationError(
                f"document '{raw.doc_id}': expected the next sentence of {trees} to have the words "
                f"{' '.join(words[:8])!r}..., found "
                f"{'the end of that file' if tree is None else repr(' '.join(tree.words[:8]))}",
                path=name, line=line0)
        sentences.append(replace(tree, sent_id=f"{raw.doc_id}-{k}", doc_id=raw.doc_id, path=name, line=line0,
                                 xpos=tuple(pos)))
    return sentences


def _parsed_sentences(raw: _RawDoc, pipeline: str | Language, name: str) -> list[Sentence]:
    """The section's sentences parsed by spaCy (tokenisation kept; ``silver``)."""
    sentences = []
    parsed = parse_words([s[1] for s in raw.sentences], pipeline)
    for k, ((line0, words, pos, lemmas, _), sdoc) in enumerate(zip(raw.sentences, parsed), 1):
        sent = span_to_sentence(sdoc[:], sent_id=f"{raw.doc_id}-{k}", doc_id=raw.doc_id, silver=True, path=name)
        if sent is None or list(sent.words) != words:
            raise FormatError(f"document '{raw.doc_id}': expected words without whitespace, found {words!r}",
                              path=name, line=line0)
        sentences.append(replace(sent, line=line0, xpos=tuple(pos), lemmas=tuple(lemmas), text=None))
    return sentences


def _document(raw: _RawDoc, sentences: list[Sentence], name: str) -> Document:
    """The Document of a section: mentions with their tree heads, sorted."""
    starts, doc_heads, depth = document_heads(sentences)
    mentions = []
    for eid, start, end, _ in raw.mentions:
        words = tuple(range(start, end + 1))
        mentions.append(Mention(entity=eid, words=words, head=tree_head(words, doc_heads, depth),
                                sentence=bisect_right(starts, start) - 1))
    mentions.sort(key=lambda m: (m.start, -m.end, m.entity))
    return Document(doc_id=raw.doc_id, sentences=tuple(sentences), mentions=tuple(mentions), path=name,
                    line=raw.line, sentence_starts=tuple(starts))


def read_conll2012(
    path: str | PathLike[str],
    *,
    pipeline: str | Language = DEFAULT_PIPELINE,
    trees: str | PathLike[str] | None = None,
    on_error: str = "raise",
    report: ReadReport | None = None,
) -> Iterator[Document]:
    """Stream the documents of a CoNLL-2012 ``*_conll`` file with coreference mentions.

    Args:
        path: the file.
        pipeline: spaCy pipeline (name or loaded) that parses the words when ``trees``
            is not given; such sentences are ``silver``.
        trees: a CoNLL-U/CoNLL-X (or ``.spacy``) treebank with the same sentences in the same
            order (words must match), used instead of spaCy.
        on_error: ``"raise"`` or ``"skip"`` (a bad document is skipped whole).
        report: a :class:`ReadReport` to fill.

    Raises:
        FormatError, AnnotationError: ``path:line:`` for malformed input.
    """
    check_on_error(on_error)
    report = report if report is not None else ReadReport()
    name = str(path)
    given = _given_trees(trees) if trees is not None else None
    for raw in _raw_documents(name):
        try:
            if raw.error is not None:
                raise raw.error
            if not raw.sentences:
                raise FormatError(f"document '{raw.doc_id}': expected sentences, found none", path=name,
                                  line=raw.line)
            if given is not None and trees is not None:
                sentences = _tree_sentences(raw, given, trees, name)
            else:
                sentences = _parsed_sentences(raw, pipeline, name)
        except InputError as err:
            if on_error == "raise":
                raise
            report.skip(err)
            continue
        doc = _document(raw, sentences, name)
        report.documents += 1
        report.sentences += len(sentences)
        report.words += doc.n_words
        yield doc
