"""Corpus readers: treebanks and coreference corpora into :mod:`probes.corpora.types` types.

Front doors: :func:`read_treebank` (CoNLL-U, CoNLL-X, ``.spacy``) and
:func:`read_documents` (GUM/CorefUD CoNLL-U, CoNLL-2012). Every malformed input
raises a :class:`~probes.errors.FormatError` or
:class:`~probes.errors.AnnotationError` whose message starts with ``path:line:``.
"""

from __future__ import annotations

from probes._lazy import lazy_getattr
from probes.corpora.conllu import read_conllu, write_conllu
from probes.corpora.conllx import read_conllx
from probes.corpora.formats import detect_format
from probes.corpora.readers import read_documents, read_treebank
from probes.corpora.readreport import ReadReport

__all__ = [
    "read_treebank",
    "read_documents",
    "read_conllu",
    "read_conllx",
    "read_corefud",
    "read_conll2012",
    "read_docbin",
    "write_conllu",
    "from_spacy",
    "parse_text",
    "detect_format",
    "ReadReport",
]

_LAZY = {
    "read_corefud": "probes.corpora.coref",
    "read_conll2012": "probes.corpora.conll2012",
    "read_docbin": "probes.corpora.spacy_docs",
    "from_spacy": "probes.corpora.spacy_docs",
    "parse_text": "probes.corpora.spacy_docs",
}


#: Import the spaCy-backed readers only when used (spaCy is slow to import).
__getattr__ = lazy_getattr(__name__, _LAZY)
