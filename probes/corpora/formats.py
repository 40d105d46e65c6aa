"""Which reader a file needs: from ``format=`` or from its name, through one table of formats."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from probes.corpora.types import Document, Sentence
from probes.errors import ConfigError

__all__ = ["Format", "FORMAT_TABLE", "FORMATS", "FORMAT_FILES", "TREEBANK_READERS", "detect_format",
           "format_of", "treebank_reader", "document_reader"]


@dataclass(frozen=True)
class Format:
    """One corpus format: the file names it is recognised by and its readers.

    Readers are named ``module:function`` and imported on use (spaCy is slow to import); each takes
    ``(path, *, on_error=, report=, **options)`` and streams :class:`Sentence` or :class:`Document` objects.

    Attributes:
        files: name patterns: ``.suffix`` matches the file's suffix, ``*end`` the end of its name.
        sentences: the reader of dependency-annotated sentences (None: the sentences of ``documents``).
        documents: the reader of coreference documents (None: not a coreference format).
        options: whether the readers take options (``pipeline=`` ...); the others refuse any.
    """

    files: tuple[str, ...]
    sentences: str | None = None
    documents: str | None = None
    options: bool = False


#: Every format, one line each: the one table that :func:`probes.read_treebank`, :func:`probes.read_documents`,
#: :func:`detect_format` and the CLI help texts are built from. CoNLL-2012 files hold documents and no
#: dependency trees: their sentences are the documents' sentences.
FORMAT_TABLE: dict[str, Format] = {
    "conllu": Format((".conllu",), "probes.corpora.conllu:read_conllu", "probes.corpora.coref:read_corefud"),
    "conllx": Format((".conllx", ".conll"), "probes.corpora.conllx:read_conllx"),
    "spacy": Format((".spacy",), "probes.corpora.spacy_docs:read_docbin", options=True),
    "conll2012": Format(("*_conll",), documents="probes.corpora.conll2012:read_conll2012", options=True),
}

# Views of FORMAT_TABLE taken at import, kept for callers that read them (new code reads FORMAT_TABLE).
#: Every format and the file names it is recognised by (``*`` patterns match the end of a name).
FORMAT_FILES: dict[str, tuple[str, ...]] = {name: f.files for name, f in FORMAT_TABLE.items()}
FORMATS = tuple(FORMAT_FILES)
#: The sentence reader of each dependency-treebank format, as ``module:function``.
TREEBANK_READERS: dict[str, str] = {name: f.sentences for name, f in FORMAT_TABLE.items() if f.sentences}


def detect_format(path: str | PathLike[str], format: str | None = None) -> str:
    """The format name for ``path``: ``format`` if given, else guessed from the file name.

    ``*.conllu`` -> conllu, ``*.conllx``/``*.conll`` -> conllx, ``*.spacy`` -> spacy,
    ``*_conll`` (OntoNotes ``*.gold_conll``, ``*.v4_gold_conll``) -> conll2012; anything
    else is read as CoNLL-U. Name ends (``*`` patterns) are tried before suffixes.
    """
    if format is not None:
        fmt = format.lower().replace("-", "").replace("_", "")
        if fmt not in FORMAT_TABLE:
            raise ConfigError(f"format: expected one of {', '.join(FORMAT_TABLE)}, found {format!r}")
        return fmt
    name = Path(path).name.lower()
    for fmt, spec in FORMAT_TABLE.items():
        if any(p.startswith("*") and name.endswith(p[1:]) for p in spec.files):
            return fmt
    suffix = Path(name).suffix
    return next((fmt for fmt, spec in FORMAT_TABLE.items() if suffix in spec.files), "conllu")


def format_of(fmt: str) -> Format:
    """The :class:`Format` named ``fmt`` (a key of :data:`FORMAT_TABLE`, as :func:`detect_format` returns it)."""
    if fmt not in FORMAT_TABLE:
        raise ConfigError(f"format: expected one of {', '.join(FORMAT_TABLE)}, found {fmt!r}")
    return FORMAT_TABLE[fmt]


def _imported(target: str) -> Any:
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def treebank_reader(fmt: str) -> Callable[..., Iterator[Sentence]]:
    """The reader function of a dependency-treebank format (one with :attr:`Format.sentences`).

    Raises:
        ConfigError: ``fmt`` is not a dependency-treebank format.
    """
    treebanks = [name for name, f in FORMAT_TABLE.items() if f.sentences]
    spec = FORMAT_TABLE.get(fmt)
    if spec is None or spec.sentences is None:
        raise ConfigError(f"expected a dependency treebank ({', '.join(treebanks)}), found format {fmt!r}")
    reader: Callable[..., Iterator[Sentence]] = _imported(spec.sentences)
    return reader


def document_reader(fmt: str) -> Callable[..., Iterator[Document]]:
    """The reader function of a coreference format (one with :attr:`Format.documents`).

    Raises:
        ConfigError: ``fmt`` is not a coreference format.
    """
    spec = FORMAT_TABLE.get(fmt)
    if spec is None or spec.documents is None:
        known = " or ".join(name for name, f in FORMAT_TABLE.items() if f.documents)
        raise ConfigError(f"read_documents: expected a {known} file, found format {fmt!r}")
    reader: Callable[..., Iterator[Document]] = _imported(spec.documents)
    return reader
