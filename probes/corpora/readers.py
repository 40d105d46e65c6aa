"""The front doors: :func:`read_treebank` and :func:`read_documents` pick the reader from the formats table
(:data:`probes.corpora.formats.FORMAT_TABLE`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from os import PathLike
from typing import Any

from probes.corpora.formats import detect_format, document_reader, format_of, treebank_reader
from probes.corpora.readreport import ReadReport, check_on_error
from probes.corpora.registry import is_registry_name, resolve_treebank
from probes.corpora.types import Document, Sentence
from probes.errors import ConfigError
from probes.safe_read import regular_file

__all__ = ["read_treebank", "read_documents"]


def read_treebank(
    path: str | PathLike[str],
    format: str | None = None,
    *,
    on_error: str = "raise",
    report: ReadReport | None = None,
    **options: Any,
) -> Iterator[Sentence]:
    """Stream the dependency-annotated sentences of a treebank file.

    Args:
        path: a ``.conllu``, ``.conllx``/``.conll``, ``.spacy`` or ``*_conll`` file, or a
            registry name (``sample:dev``, ``ud:en_ewt:dev``; see :mod:`probes.corpora.registry`).
        format: ``"conllu"``, ``"conllx"``, ``"spacy"`` or ``"conll2012"``; guessed
            from the file name when None.
        on_error: ``"raise"`` or ``"skip"`` (skipped sentences are warned about and
            counted in ``report``).
        report: a :class:`ReadReport` to fill with counts and skipped errors.
        **options: passed to the format's reader (e.g. ``pipeline=`` for conll2012).

    Raises:
        InputError: ``path`` is not a regular file (no such file, a folder, a device, a named pipe).
        FormatError, AnnotationError: ``path:line: ...`` for malformed input.
    """
    check_on_error(on_error)
    path = _resolve(path)
    fmt = detect_format(path, format)
    spec = format_of(fmt)
    if not spec.options:
        _no_options(fmt, options)
    if spec.sentences is not None:
        return treebank_reader(fmt)(path, on_error=on_error, report=report, **options)
    return (
        s
        for doc in document_reader(fmt)(path, on_error=on_error, report=report, **options)
        for s in doc.sentences
    )


def read_documents(
    path: str | PathLike[str],
    format: str | None = None,
    *,
    on_error: str = "raise",
    report: ReadReport | None = None,
    **options: Any,
) -> Iterator[Document]:
    """Stream the documents of a coreference corpus, with mentions and bridging links.

    Args:
        path: a GUM/CorefUD ``.conllu`` file (``Entity=``/``Bridge=`` in MISC,
            ``# newdoc`` boundaries) or a CoNLL-2012 ``*_conll`` file.
        format: ``"conllu"`` or ``"conll2012"``; guessed from the name when None.
        on_error: ``"raise"`` or ``"skip"`` (a bad document is skipped whole).
        report: a :class:`ReadReport` to fill.
        **options: passed to the format's reader (``pipeline=`` for conll2012).
    """
    check_on_error(on_error)
    path = _resolve(path)
    fmt = detect_format(path, format)
    reader = document_reader(fmt)
    if not format_of(fmt).options:
        _no_options(fmt, options)
    return reader(path, on_error=on_error, report=report, **options)


def _resolve(path: str | PathLike[str]) -> str | PathLike[str]:
    """A registry name (``sample:dev``, ``ud:en_ewt:dev``) as its local file; any other path as given, once
    it is known to be a regular file (a folder, ``/dev/zero`` or a named pipe is refused here, when the
    reader is called, before anything is opened)."""
    text = os.fspath(path)
    path = resolve_treebank(text) if is_registry_name(text) else path
    regular_file(path, what="a corpus file")
    return path


def _no_options(fmt: str, options: dict[str, Any]) -> None:
    if options:
        raise ConfigError(f"the {fmt} reader takes no options, found {', '.join(sorted(options))}")
