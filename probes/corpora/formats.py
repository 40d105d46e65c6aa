"""Which reader a file needs: from ``format=`` or from its name."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from os import PathLike
from pathlib import Path
from typing import Any

from probes.corpora.types import Sentence
from probes.errors import ConfigError

__all__ = ["FORMATS", "FORMAT_FILES", "TREEBANK_READERS", "detect_format", "treebank_reader"]

#: Every format and the file names it is recognised by (``*`` patterns match the end of a name).
#: The one table that readers, :func:`detect_format` and the CLI help texts are built from.
FORMAT_FILES: dict[str, tuple[str, ...]] = {
    "conllu": (".conllu",),
    "conllx": (".conllx", ".conll"),
    "spacy": (".spacy",),
    "conll2012": ("*_conll",),
}

FORMATS = tuple(FORMAT_FILES)

_SUFFIXES = {suffix: fmt for fmt, names in FORMAT_FILES.items() for suffix in names if suffix.startswith(".")}


def detect_format(path: str | PathLike[str], format: str | None = None) -> str:
    """The format name for ``path``: ``format`` if given, else guessed from the file name.

    ``*.conllu`` -> conllu, ``*.conllx``/``*.conll`` -> conllx, ``*.spacy`` -> spacy,
    ``*_conll`` (OntoNotes ``*.gold_conll``, ``*.v4_gold_conll``) -> conll2012; anything
    else is read as CoNLL-U.
    """
    if format is not None:
        fmt = format.lower().replace("-", "").replace("_", "")
        if fmt not in FORMATS:
            raise ConfigError(f"format: expected one of {', '.join(FORMATS)}, found {format!r}")
        return fmt
    name = Path(path).name.lower()
    if name.endswith("_conll"):
        return "conll2012"
    return _SUFFIXES.get(Path(name).suffix, "conllu")


#: The sentence reader of each dependency-treebank format, as ``module:function``, imported on use
#: (spaCy is slow to import). CoNLL-2012 files hold documents and no dependency trees: their
#: sentences come from :func:`probes.corpora.readers.read_treebank`, which flattens the documents.
TREEBANK_READERS: dict[str, str] = {
    "conllu": "probes.corpora.conllu:read_conllu",
    "conllx": "probes.corpora.conllx:read_conllx",
    "spacy": "probes.corpora.spacy_docs:read_docbin",
}


def treebank_reader(fmt: str) -> Callable[..., Iterator[Sentence]]:
    """The reader function of a dependency-treebank format (a key of :data:`TREEBANK_READERS`).

    Raises:
        ConfigError: ``fmt`` is not a dependency-treebank format.
    """
    if fmt not in TREEBANK_READERS:
        raise ConfigError(f"expected a dependency treebank ({', '.join(TREEBANK_READERS)}), found format {fmt!r}")
    module, name = TREEBANK_READERS[fmt].split(":")
    reader: Any = getattr(importlib.import_module(module), name)
    return reader
