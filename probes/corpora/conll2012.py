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
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from os import PathLike
from typing import TYPE_CHECKING

from probes.corpora.blocks import iter_blocks
from probes.corpora.coref import tree_head
from probes.corpora.readreport import ReadReport, check_on_error
from probes.corpora.validate import tree_depths
from probes.corpora.spacy_docs import DEFAULT_PIPELINE, _span_to_sentence, parse_words
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


def _raw_documents(path: str) -> Iterator[_RawDoc]:
    """Yield the sections of ``path`` with their mentions as document offsets."""
    doc: _RawDoc | None = None
    opened: dict[str, list[tuple[int, int]]] = defaultdict(list)
    offset = 0

    def fail(line: int, msg: str, cls: type[InputError] = FormatError) -> None:
        if doc is not None and doc.error is None:
            doc.error = cls(f"document '{doc.doc_id}': {msg}", path=path, line=line)

    def finish(line: int) -> _RawDoc | None:
        nonlocal doc
        if doc is None:
            return None
        for eid, stack in opened.items():
            if stack:
                fail(
                    stack[0][1],
                    f"expected a closing '{eid})' for the mention opened here, "
                    "found the end of the document",
                    AnnotationError,
                )
        done, doc = doc, None
        return done

    for block in iter_blocks(path):
        words: list[str] = []
        pos: list[str] = []
        lemmas: list[str] = []
        lines: list[int] = []
        for k, text in enumerate(block.lines):
            lineno = block.line + k
            if block.bad_line == lineno:
                fail(lineno, block.bad_reason or "undecodable line")
                if doc is None:
                    raise FormatError(
                        block.bad_reason or "undecodable line", path=path, line=lineno
                    )
            if text.startswith("#begin document"):
                if words and doc is not None:
                    doc.sentences.append((lines[0], words, pos, lemmas, lines))
                    words, pos, lemmas, lines = [], [], [], []
                done = finish(lineno)
                if done is not None:
                    yield done
                m = _BEGIN.match(text)
                if not m:
                    raise FormatError(
                        f"expected '#begin document (<name>); part <n>', found {text!r}",
                        path=path,
                        line=lineno,
                    )
                doc = _RawDoc(f"{m.group(1)}_{m.group(2)}", lineno)
                opened.clear()
                offset = 0
                continue
            if text.startswith("#end document"):
                if words and doc is not None:
                    doc.sentences.append((lines[0], words, pos, lemmas, lines))
                    words, pos, lemmas, lines = [], [], [], []
                done = finish(lineno)
                if done is None:
                    raise FormatError(
                        "expected '#begin document' before '#end document', found none",
                        path=path,
                        line=lineno,
                    )
                yield done
                continue
            if text.startswith("#"):
                continue
            if doc is None:
                raise FormatError(
                    f"expected '#begin document (<name>); part <n>', found {text[:40]!r}",
                    path=path,
                    line=lineno,
                )
            cols = text.split()
            if len(cols) < MIN_COLUMNS:
                fail(
                    lineno,
                    f"expected at least {MIN_COLUMNS} whitespace-separated columns, "
                    f"found {len(cols)}",
                )
                continue
            for chunk in cols[-1].split("|") if cols[-1] != "-" else ():
                m = _COREF.match(chunk)
                if not m or not (m.group(1) or m.group(3)):
                    fail(
                        lineno,
                        f"expected coreference chunks like '(12', '12)' or '(12)', "
                        f"found {cols[-1]!r}",
                        AnnotationError,
                    )
                    break
                eid = m.group(2)
                if m.group(1):
                    opened[eid].append((offset, lineno))
                if m.group(3):
                    if not opened[eid]:
                        fail(
                            lineno,
                            f"expected an open mention of entity {eid} to close, found "
                            f"'{eid})' never opened",
                            AnnotationError,
                        )
                        break
                    start, line0 = opened[eid].pop()
                    doc.mentions.append((eid, start, offset, line0))
            words.append(cols[3])
            pos.append(cols[4])
            lemmas.append(cols[6] if cols[6] != "-" else "_")
            lines.append(lineno)
            offset += 1
        if words and doc is not None:
            doc.sentences.append((lines[0], words, pos, lemmas, lines))
    if doc is not None:
        raise FormatError(
            f"document '{doc.doc_id}': expected '#end document', found the end of " "the file",
            path=path,
            line=doc.line,
        )


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
        trees: a CoNLL-U/CoNLL-X treebank with the same sentences in the same order
            (words must match), used instead of spaCy.
        on_error: ``"raise"`` or ``"skip"`` (a bad document is skipped whole).
        report: a :class:`ReadReport` to fill.

    Raises:
        FormatError, AnnotationError: ``path:line:`` for malformed input.
    """
    from probes.corpora.readers import read_treebank

    check_on_error(on_error)
    report = report if report is not None else ReadReport()
    name = str(path)
    given = iter(read_treebank(trees)) if trees is not None else None
    for raw in _raw_documents(name):
        try:
            if raw.error is not None:
                raise raw.error
            if not raw.sentences:
                raise FormatError(
                    f"document '{raw.doc_id}': expected sentences, found none",
                    path=name,
                    line=raw.line,
                )
            sentences: list[Sentence] = []
            if given is not None:
                for k, (line0, words, pos, lemmas, _) in enumerate(raw.sentences, 1):
                    tree = next(given, None)
                    if tree is None or list(tree.words) != words:
                        raise AnnotationError(
                            f"document '{raw.doc_id}': expected the next sentence of {trees} to "
                            f"have the words {' '.join(words[:8])!r}..., found "
                            f"{'the end of that file' if tree is None else repr(' '.join(tree.words[:8]))}",
                            path=name,
                            line=line0,
                        )
                    sentences.append(
                        replace(
                            tree,
                            sent_id=f"{raw.doc_id}-{k}",
                            doc_id=raw.doc_id,
                            path=name,
                            line=line0,
                            xpos=tuple(pos),
                        )
                    )
            else:
                parsed = parse_words([s[1] for s in raw.sentences], pipeline)
                for k, ((line0, words, pos, lemmas, _), sdoc) in enumerate(
                    zip(raw.sentences, parsed), 1
                ):
                    sent = _span_to_sentence(
                        sdoc[:],
                        sent_id=f"{raw.doc_id}-{k}",
                        doc_id=raw.doc_id,
                        silver=True,
                        path=name,
                    )
                    if sent is None or list(sent.words) != words:
                        raise FormatError(
                            f"document '{raw.doc_id}': expected words without whitespace, found "
                            f"{words!r}",
                            path=name,
                            line=line0,
                        )
                    sentences.append(
                        replace(sent, line=line0, xpos=tuple(pos), lemmas=tuple(lemmas), text=None)
                    )
        except InputError as err:
            if on_error == "raise":
                raise
            report.skip(err)
            continue
        starts, doc_heads, depth, total = [], [], [], 0
        for sent in sentences:
            starts.append(total)
            doc_heads.extend(total + h - 1 if h else -1 for h in sent.heads)
            depth.extend(tree_depths(sent.heads))
            total += len(sent.words)
        from bisect import bisect_right

        mentions = []
        for eid, start, end, _ in raw.mentions:
            words_ = tuple(range(start, end + 1))
            mentions.append(
                Mention(
                    entity=eid,
                    words=words_,
                    head=tree_head(words_, doc_heads, depth),
                    sentence=bisect_right(starts, start) - 1,
                )
            )
        mentions.sort(key=lambda m: (m.start, -m.end, m.entity))
        doc = Document(
            doc_id=raw.doc_id,
            sentences=tuple(sentences),
            mentions=tuple(mentions),
            path=name,
            line=raw.line,
            sentence_starts=tuple(starts),
        )
        report.documents += 1
        report.sentences += len(sentences)
        report.words += total
        yield doc
