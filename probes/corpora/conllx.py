"""CoNLL-X: the 10-column format of PTB-to-dependency conversions (used by structural probes).

Columns: ID FORM LEMMA CPOSTAG POSTAG FEATS HEAD DEPREL PHEAD PDEPREL. CPOSTAG is
kept as ``upos``, POSTAG as ``xpos``; PHEAD/PDEPREL are not kept. There are no
multiword ranges or empty nodes, so every ID must be an integer.
"""

from __future__ import annotations

from collections.abc import Iterator
from os import PathLike

from probes.corpora.conllu import iter_parsed
from probes.corpora.readreport import ReadReport
from probes.corpora.types import Sentence

__all__ = ["read_conllx"]


def read_conllx(
    path: str | PathLike[str],
    *,
    on_error: str = "raise",
    report: ReadReport | None = None,
) -> Iterator[Sentence]:
    """Stream the sentences of a CoNLL-X file (same options as :func:`read_conllu`)."""
    for parsed in iter_parsed(path, fmt="conllx", on_error=on_error, report=report):
        yield parsed.sentence
