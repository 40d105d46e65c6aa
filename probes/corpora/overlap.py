"""How much two datasets share: the check that makes held-out selection mean held out.

Heads chosen on one dataset and reported on another are only held out if the two do not share sentences. Two
datasets are compared by content (each sentence's words) and by the ids their files give (``# sent_id`` and
``# newdoc id``), before any model work, so ``--select-on A.conllu -t A.conllu``, a selection file cut from the
report file, or two files that share documents are refused with one line instead of being reported as held out.

Short sentences ("Thank you .", "Yes .") recur in independent corpora (UD English EWT's dev and test share 27 of
about 2,000, all but one under 8 words), so content overlap counts sentences of at least :data:`MIN_WORDS` words,
and a few of those (at most :data:`MAX_SHARED_SHARE` of the smaller side: a quotation repeated across documents) are
measured and recorded but not refused. Any shared sentence id or document id is refused: ids name annotated
units, and a shared one means the same unit is on both sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from probes.corpora.types import Sentence
from probes.errors import ConfigError

__all__ = ["DataOverlap", "MIN_WORDS", "MAX_SHARED_SHARE", "measure_overlap", "refuse_overlap"]

#: Sentences shorter than this many words are not counted as shared content (they recur in unrelated text).
MIN_WORDS = 8
#: The share of the smaller side's sentences that shared long sentences may reach before the data count as
#: overlapping (one quotation repeated across documents is not a leak; a tenth of the data is).
MAX_SHARED_SHARE = 0.01
#: How many shared ids an error message names.
_SHOWN = 3


@dataclass(frozen=True)
class DataOverlap:
    """What a selection dataset shares with a report dataset.

    Attributes:
        n_select, n_report: sentences on each side.
        shared_sentences: selection sentences whose words (at least :data:`MIN_WORDS` of them) also make a report
            sentence.
        shared_sentence_ids: ``# sent_id`` values on both sides (at most a few kept in ``examples``).
        n_shared_sentence_ids: how many sentence ids are on both sides.
        shared_documents: ``# newdoc id`` values on both sides, sorted.
        identical: both sides hold the same sentences (by words), in any order.
    """

    n_select: int
    n_report: int
    shared_sentences: int
    n_shared_sentence_ids: int
    shared_sentence_ids: tuple[str, ...]
    shared_documents: tuple[str, ...]
    identical: bool

    @property
    def overlapping(self) -> bool:
        """Whether the two sides share too much for heads chosen on one to be held out from the other."""
        smaller = max(1, min(self.n_select, self.n_report))
        return (self.identical or self.n_shared_sentence_ids > 0 or bool(self.shared_documents)
                or self.shared_sentences > MAX_SHARED_SHARE * smaller)

    def describe(self) -> str:
        """One clause saying what is shared (for the error line and the report)."""
        if self.identical:
            return f"they hold the same {self.n_report} sentences"
        parts = []
        if self.shared_sentences:
            parts.append(f"{self.shared_sentences} of the {self.n_select} selection sentences (of {MIN_WORDS}+ words) "
                         "are also in the report data")
        if self.n_shared_sentence_ids:
            shown = ", ".join(self.shared_sentence_ids)
            more = "" if self.n_shared_sentence_ids <= len(self.shared_sentence_ids) else ", ..."
            parts.append(f"{self.n_shared_sentence_ids} sentence ids are on both sides ({shown}{more})")
        if self.shared_documents:
            shown = ", ".join(self.shared_documents[:_SHOWN])
            more = "" if len(self.shared_documents) <= _SHOWN else ", ..."
            parts.append(f"{len(self.shared_documents)} documents are on both sides ({shown}{more})")
        return "; ".join(parts) or "they share nothing"

    def to_dict(self) -> dict[str, Any]:
        """For the run record: the counts measured (``overlapping``: whether they were refused as held out)."""
        return {"select_sentences": self.n_select, "report_sentences": self.n_report,
                "shared_sentences": self.shared_sentences, "min_words": MIN_WORDS,
                "shared_sentence_ids": self.n_shared_sentence_ids, "shared_documents": len(self.shared_documents),
                "identical": self.identical, "overlapping": self.overlapping}


def measure_overlap(select: Sequence[Sentence], report: Sequence[Sentence]) -> DataOverlap:
    """What ``select`` shares with ``report``, by words and by sentence and document ids."""
    report_words = {s.words for s in report}
    select_words = {s.words for s in select}
    shared = sum(1 for s in select if len(s.words) >= MIN_WORDS and s.words in report_words)
    report_ids = {s.sent_id for s in report}
    ids = [s.sent_id for s in select if s.sent_id in report_ids]
    documents = sorted({s.doc_id for s in select if s.doc_id} & {s.doc_id for s in report if s.doc_id})
    identical = bool(select) and select_words == report_words and len(select) == len(report)
    return DataOverlap(n_select=len(select), n_report=len(report), shared_sentences=shared,
                       n_shared_sentence_ids=len(ids), shared_sentence_ids=tuple(ids[:_SHOWN]),
                       shared_documents=tuple(documents), identical=identical)


def refuse_overlap(overlap: DataOverlap, select_name: str, report_name: str, *, flag: str = "--select-on",
                   same: str = "--select-on same") -> None:
    """Refuse held-out selection on data that overlap the report data: one ConfigError that says what is shared and
    how to ask for same-data selection on purpose (``same``: the option that does, reported as optimistic)."""
    if overlap.overlapping:
        raise ConfigError(f"{flag} {select_name} is not held out from the report data {report_name}: "
                          f"{overlap.describe()}. Choose data that share no sentences or documents, or select and "
                          f"report on the same data on purpose with {same} (reported as optimistic)")
