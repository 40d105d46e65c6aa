"""Which reader a file needs: from ``format=`` or from its name."""

from __future__ import annotations

from os import PathLike
from pathlib import Path

from probes.errors import ConfigError

__all__ = ["FORMATS", "detect_format"]

FORMATS = ("conllu", "conllx", "spacy", "conll2012")

_SUFFIXES = {
    ".conllu": "conllu",
    ".conllx": "conllx",
    ".conll": "conllx",
    ".spacy": "spacy",
}


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
