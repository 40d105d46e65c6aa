"""Pure data types: sentences, documents, mentions, bridging links, split antecedents.

Conventions (CoNLL-U): ``heads`` are 1-based word numbers with ``0`` for ROOT;
every other position in these types (mention spans, word offsets) is 0-based.
The types are frozen and hold tuples, so they are hashable, cheap to pass
between processes and safe to share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Sentence", "Mention", "Bridge", "SplitAntecedent", "Document", "base_relation"]


def base_relation(label: str) -> str:
    """The universal part of a UD label: ``nmod:poss`` -> ``nmod``."""
    return label.split(":", 1)[0]


@dataclass(frozen=True, slots=True)
class Sentence:
    """One dependency-annotated sentence of syntactic words.

    Multiword-token ranges (``3-4 didn't``) and empty nodes (``8.1``) are not
    words and are not kept here.

    Attributes:
        sent_id: the ``# sent_id`` (or ``<file>#<n>`` when the file has none).
        words: the FORM of each syntactic word.
        heads: 1-based head of each word, ``0`` for ROOT.
        relations: the full DEPREL of each word (subtypes kept: ``nmod:poss``).
        upos, xpos, lemmas, feats, misc: the other CoNLL-U columns (``"_"`` when empty);
            empty tuples when the source has no such column.
        doc_id: the ``# newdoc id`` in force, if any.
        path, line: where the sentence starts (first comment or token line), 1-based.
        silver: True when the annotation comes from a parser, not from annotators.
        text: the ``# text`` line, if any.
    """

    sent_id: str
    words: tuple[str, ...]
    heads: tuple[int, ...]
    relations: tuple[str, ...]
    upos: tuple[str, ...] = ()
    xpos: tuple[str, ...] = ()
    lemmas: tuple[str, ...] = ()
    feats: tuple[str, ...] = ()
    misc: tuple[str, ...] = ()
    doc_id: str | None = None
    path: str | None = None
    line: int | None = None
    silver: bool = False
    text: str | None = None

    @property
    def n_words(self) -> int:
        """Number of syntactic words."""
        return len(self.words)

    def __len__(self) -> int:
        return len(self.words)

    @property
    def base_relations(self) -> tuple[str, ...]:
        """Relations without subtypes (``nmod:poss`` -> ``nmod``)."""
        return tuple(base_relation(r) for r in self.relations)


@dataclass(frozen=True, slots=True)
class Mention:
    """A mention of a discourse entity in a :class:`Document`.

    Attributes:
        entity: the entity (cluster) id, e.g. ``"12"`` in GUM.
        words: document-level 0-based offsets of the mention's words, sorted;
            gaps mean a discontinuous mention.
        head: document-level offset of the head word: the word of the span
            whose syntactic head lies outside the span.
        sentence: 0-based index of the sentence the mention starts in.
        etype: entity type (``person``, ``abstract`` ...), if annotated.
        infstat: information status (``new``, ``giv``, ...), if annotated.
    """

    entity: str
    words: tuple[int, ...]
    head: int
    sentence: int
    etype: str | None = None
    infstat: str | None = None

    @property
    def start(self) -> int:
        """First word offset (inclusive)."""
        return self.words[0]

    @property
    def end(self) -> int:
        """Last word offset + 1 (exclusive)."""
        return self.words[-1] + 1


@dataclass(frozen=True, slots=True)
class Bridge:
    """A bridging link: ``anaphor`` is inferable from entity ``antecedent_entity``.

    Attributes:
        anaphor: the bridging anaphor mention.
        antecedent_entity: id of the antecedent entity.
        antecedent: the mention of the antecedent entity used for scoring: the
            closest one that starts before the anaphor (or, failing that, the
            first one after it).
    """

    anaphor: Mention
    antecedent_entity: str
    antecedent: Mention


@dataclass(frozen=True, slots=True)
class SplitAntecedent:
    """Entity ``entity`` (a plural such as *they*) has the separate antecedent entities ``parts``.

    GUM writes ``SplitAnte=4<54,9<54``: entity 54 is made of entities 4 and 9.

    Attributes:
        entity: id of the anaphor entity.
        parts: ids of its antecedent entities, in file order, each once.
    """

    entity: str
    parts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Document:
    """Sentences in order, with coreference mentions and bridging links.

    Mention word offsets are document-level: word ``k`` of sentence ``s`` has
    offset ``sentence_starts[s] + k``. ``split_antecedents`` holds one
    :class:`SplitAntecedent` per anaphor entity, in file order.
    """

    doc_id: str
    sentences: tuple[Sentence, ...]
    mentions: tuple[Mention, ...] = ()
    bridges: tuple[Bridge, ...] = ()
    path: str | None = None
    line: int | None = None
    sentence_starts: tuple[int, ...] = field(default=())
    split_antecedents: tuple[SplitAntecedent, ...] = ()

    def __post_init__(self) -> None:
        if not self.sentence_starts:
            starts, total = [], 0
            for sent in self.sentences:
                starts.append(total)
                total += len(sent.words)
            object.__setattr__(self, "sentence_starts", tuple(starts))

    @property
    def n_words(self) -> int:
        """Number of words in the whole document."""
        return sum(len(s.words) for s in self.sentences)

    @property
    def words(self) -> tuple[str, ...]:
        """All words of the document, in order."""
        return tuple(w for s in self.sentences for w in s.words)

    def sentence_of(self, offset: int) -> int:
        """Index of the sentence holding document-level word ``offset``."""
        from bisect import bisect_right

        return bisect_right(self.sentence_starts, offset) - 1
