"""Per-head dependency accuracy (Clark et al. 2019 §4.2) as a streaming accumulator.

For every layer, head and direction, each word's prediction is the *other* word
the head attends most to:

* ``dep_to_head``: the word's own row (the dependent attends to its head);
* ``head_to_dep``: the word's column (the head attends to its dependent),
  i.e. the argmax over candidates ``j`` of ``M[j, i]``.

Special tokens are dropped, the word itself is masked, ties go to the left-most
word (numpy ``argmax``), and ROOT can never be predicted, so root words always
count wrong for heads, as in the paper. A word is scored under its full UD label
(``nmod:poss``), under its pooled base label (``nmod:*``, only kept when a subtype
occurs), under ``ALL`` (every word) and under ``ALL-nopunct``.

**Possessive rule** (Clark §3.3 adapted to UD, on by default): a ``nmod:poss``
word followed by ``'s``, ``’s``, ``'`` or ``’`` labelled ``case`` counts correct
under ``nmod:poss`` iff the prediction for the clitic equals the possessor's gold
head (the possessed noun). Stanford/ClearNLP labels (``poss`` + ``possessive`` or
``case``, as spaCy's English parser writes) get the same rule. Only the possessive
relation itself uses it; ``ALL`` and ``nmod:*`` always score every word plainly
(Clark's notebook also changed "All"; on EWT dev that is at most 57 of 25,147 words).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from probes.attention import WordAttention
from probes.data import Sentence, base_relation
from probes.errors import AlignmentError, SkippedItemWarning
from probes.heads import DIRECTIONS
from probes.scores import ALL, ALL_NOPUNCT, HeadScores, UnitCounts, pooled_name, redundant_pools

__all__ = [
    "POSS_RELATIONS",
    "POSS_CLITICS",
    "HeadAccuracy",
    "head_accuracy",
    "predict_heads",
    "RelationColumns",
    "poss_rule_words",
]

logger = logging.getLogger("probes")

#: The relations the possessive rule applies to (UD ``nmod:poss``; ``poss`` in Stanford/ClearNLP labels).
POSS_RELATIONS = frozenset({"nmod:poss", "poss"})
#: Clitics that trigger it (straight and curly apostrophes) ...
POSS_CLITICS = frozenset({"'s", "’s", "'", "’"})
#: ... when labelled with one of these (UD ``case``; Stanford ``possessive``).
POSS_CLITIC_RELATIONS = frozenset({"case", "possessive"})


def poss_rule_words(sentence: Sentence) -> npt.NDArray[np.intp]:
    """0-based positions ``i`` of ``nmod:poss`` (or ``poss``) words followed by a possessive clitic
    (``'s``, ``’s``, ``'``, ``’``) labelled ``case`` (or ``possessive``)."""
    rel, words = sentence.relations, sentence.words
    if POSS_RELATIONS.isdisjoint(rel):
        return np.zeros(0, dtype=np.intp)
    return np.array(
        [i for i in range(len(words) - 1)
         if rel[i] in POSS_RELATIONS and words[i + 1] in POSS_CLITICS
         and base_relation(rel[i + 1]) in POSS_CLITIC_RELATIONS],
        dtype=np.intp,
    )


def _word_keys(label: str) -> tuple[str, ...]:
    """Every relation a word with ``label`` is scored under."""
    keys = [label, pooled_name(base_relation(label)), ALL]
    if base_relation(label) != "punct":
        keys.append(ALL_NOPUNCT)
    return tuple(keys)


@dataclass(frozen=True)
class Incidence:
    """Which words count under which relation columns, for one sentence.

    Attributes:
        plain: ``(n_words, n_columns)`` float32 1 where the word is scored plainly under the column.
        total: ``(n_columns,)`` int64 words per column (rule-scored words included).
        poss_words: ``(p,)`` positions whose ``nmod:poss`` score uses the clitic's prediction.
        poss_columns: ``(p,)`` the column of each such word's own label (``nmod:poss`` or ``poss``).
    """

    plain: npt.NDArray[np.float32]
    total: npt.NDArray[np.int64]
    poss_words: npt.NDArray[np.intp]
    poss_columns: npt.NDArray[np.int64]


class RelationColumns:
    """A growing vocabulary of relation columns shared by one accumulator's sentences."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self._by_label: dict[str, npt.NDArray[np.int64]] = {}

    def __len__(self) -> int:
        return len(self.index)

    def columns(self, label: str) -> npt.NDArray[np.int64]:
        """Columns a word labelled ``label`` is scored under (full, pooled, ALL, ALL-nopunct)."""
        cols = self._by_label.get(label)
        if cols is None:
            cols = np.array([self.index.setdefault(k, len(self.index)) for k in _word_keys(label)], dtype=np.int64)
            self._by_label[label] = cols
        return cols

    def incidence(self, sentence: Sentence, *, poss_rule: bool = True) -> Incidence:
        """The word-by-column incidence of ``sentence`` (columns added as needed)."""
        per_word = [self.columns(label) for label in sentence.relations]
        rows = np.repeat(np.arange(sentence.n_words), [len(c) for c in per_word])
        cols = np.concatenate(per_word) if per_word else np.zeros(0, dtype=np.int64)
        plain = np.zeros((sentence.n_words, len(self.index)), dtype=np.float32)
        plain[rows, cols] = 1.0
        total = np.bincount(cols, minlength=len(self.index)).astype(np.int64)
        poss = poss_rule_words(sentence) if poss_rule else np.zeros(0, dtype=np.intp)
        columns = np.array([self.index[sentence.relations[i]] for i in poss], dtype=np.int64)
        plain[poss, columns] = 0.0
        return Incidence(plain, total, poss, columns)


def predict_heads(weights: npt.NDArray[np.floating]) -> npt.NDArray[np.int64]:
    """Each head's predicted head word, both directions.

    Args:
        weights: ``(n_layers, n_heads, n, n)`` word-only maps (rows from, columns to).

    Returns:
        ``(2, n_layers, n_heads, n)`` 1-based predictions, axis 0 ordered as
        :data:`probes.heads.DIRECTIONS`; ``-1`` when a word has no other word.
    """
    n = weights.shape[-1]
    masked = np.array(weights, dtype=np.float32)  # (L, H, n, n), a copy
    diag = np.arange(n)
    masked[..., diag, diag] = -np.inf
    pred = np.stack([masked.argmax(axis=-1), masked.argmax(axis=-2)]) + 1  # (2, L, H, n)
    if n < 2:
        pred[...] = -1
    return pred


def _hits(pred: npt.NDArray[np.int64], sentence: Sentence, inc: Incidence) -> npt.NDArray[np.float32]:
    """``(D*L*H, n_columns)`` correct counts of every head for every column of one sentence."""
    n = sentence.n_words
    gold = np.asarray(sentence.heads, dtype=np.int64)  # (n,)
    flat = pred.reshape(-1, n)  # (D*L*H, n)
    counts = (flat == gold).astype(np.float32) @ inc.plain  # (D*L*H, n_columns)
    if inc.poss_words.size:
        clitic_hits = (flat[:, inc.poss_words + 1] == gold[inc.poss_words]).astype(np.float32)  # (D*L*H, p)
        np.add.at(counts, (slice(None), inc.poss_columns), clitic_hits)
    return counts


class HeadAccuracy:
    """Streaming per-head, per-relation attachment counts (Clark et al. 2019 §4.2).

    State is bounded: int64 counts ``(2, layers, heads, relations)`` plus, when
    ``keep_units`` is on, per-sentence uint16 counts for every relation present
    (``2 * layers * heads * 2`` bytes per (sentence, relation): about 9 MB for
    MiniLM on EWT test, 35 MB for a 12x12 model), needed for bootstrap intervals.

    Args:
        poss_rule: apply the possessive rule to ``nmod:poss`` (module docstring).
        keep_units: keep per-sentence counts (needed by :mod:`probes.leaderboard`).
    """

    def __init__(self, *, poss_rule: bool = True, keep_units: bool = True) -> None:
        self.poss_rule = poss_rule
        self.keep_units = keep_units
        self.reset()

    def reset(self) -> None:
        """Forget everything seen."""
        self._layers: tuple[int, ...] | None = None
        self._heads: tuple[int, ...] | None = None
        self._vocab = RelationColumns()
        self._correct = np.zeros((len(DIRECTIONS), 0, 0, 0), dtype=np.int64)  # (D, L, H, R)
        self._total = np.zeros(0, dtype=np.int64)  # (R,)
        self._n_units = 0
        self._n_skipped = 0
        self._unit_rel: list[npt.NDArray[np.int32]] = []
        self._unit_total: list[npt.NDArray[np.int32]] = []
        self._unit_correct: list[npt.NDArray[np.uint16]] = []

    @property
    def n_units(self) -> int:
        """Sentences scored so far."""
        return self._n_units

    def _grow(self, n: int) -> None:
        """Make room for ``n`` relation columns."""
        if n > self._total.shape[0]:
            extra = max(n, 2 * self._total.shape[0]) - self._total.shape[0]
            self._correct = np.concatenate(
                [self._correct, np.zeros(self._correct.shape[:3] + (extra,), dtype=np.int64)], axis=3)
            self._total = np.concatenate([self._total, np.zeros(extra, dtype=np.int64)])

    def update(self, item: Sentence, word_attention: WordAttention) -> None:
        """Score one sentence against its word-level attention."""
        sentence = item
        if self._layers is None:
            self._layers, self._heads = tuple(word_attention.layers), tuple(word_attention.heads)
            self._correct = np.zeros((len(DIRECTIONS), len(self._layers), len(self._heads), 0), dtype=np.int64)
        elif (tuple(word_attention.layers), tuple(word_attention.heads)) != (self._layers, self._heads):
            raise AlignmentError(
                f"sentence {sentence.sent_id!r}: attention holds layers {word_attention.layers} heads "
                f"{word_attention.heads}, expected {self._layers} and {self._heads} as before",
                path=sentence.path, line=sentence.line)
        if word_attention.n_words != sentence.n_words:
            if word_attention.meta.get("truncated") or word_attention.meta.get("window"):
                self._n_skipped += 1
                warnings.warn(f"sentence {sentence.sent_id!r} was truncated by the extractor; not scored",
                              SkippedItemWarning, stacklevel=2)
                return
            raise AlignmentError(
                f"sentence {sentence.sent_id!r}: expected attention over {sentence.n_words} words, "
                f"found {word_attention.n_words}", path=sentence.path, line=sentence.line)
        inc = self._vocab.incidence(sentence, poss_rule=self.poss_rule)
        pred = predict_heads(word_attention.words_only())  # (D, L, H, n)
        counts = _hits(pred, sentence, inc)  # (D*L*H, K)
        k = len(self._vocab)
        self._grow(k)
        shape = self._correct.shape[:3] + (k,)
        self._correct[..., :k] += counts.reshape(shape).astype(np.int64)
        self._total[:k] += inc.total
        self._n_units += 1
        if self.keep_units:
            present = np.flatnonzero(inc.total)
            self._unit_rel.append(present.astype(np.int32))
            self._unit_total.append(inc.total[present].astype(np.int32))
            self._unit_correct.append(counts[:, present].T.reshape((len(present),) + shape[:3]).astype(np.uint16))

    def merge(self, other: HeadAccuracy) -> None:
        """Add ``other``'s state (another shard, same options) to this one."""
        if other._layers is None:
            return
        merged = self.compute(prune=False) + other.compute(prune=False)
        self._load(merged)

    def _load(self, scores: HeadScores) -> None:
        self._layers, self._heads = scores.layers, scores.heads
        self._vocab = RelationColumns()
        for r in scores.relations:
            self._vocab.index[r] = len(self._vocab.index)
        self._correct, self._total = scores.correct.copy(), scores.total.copy()
        self._n_units, self._n_skipped = scores.n_units, scores.n_skipped
        self._unit_rel, self._unit_total, self._unit_correct = [], [], []
        if scores.units is not None:
            u = scores.units
            for a, b in zip(u.indptr[:-1], u.indptr[1:]):
                self._unit_rel.append(u.relation[a:b])
                self._unit_total.append(u.total[a:b])
                self._unit_correct.append(u.correct[a:b])

    def compute(self, *, prune: bool = True) -> HeadScores:
        """The counts so far as an immutable :class:`~probes.scores.HeadScores`.

        Args:
            prune: drop pooled ``base:*`` relations whose base never occurred with a subtype
                (they would repeat the plain label).
        """
        if self._layers is None:
            warnings.warn("HeadAccuracy.compute() called before any update()", UserWarning, stacklevel=2)
            return HeadScores(np.zeros((len(DIRECTIONS), 0, 0, 0), np.int64), np.zeros(0, np.int64), (),
                              DIRECTIONS, (), (), 0, self._n_skipped, None, {"poss_rule": self.poss_rule})
        names = list(self._vocab.index)
        keep = np.arange(len(names))
        if prune:
            drop = redundant_pools(names)
            keep = np.array([i for i, r in enumerate(names) if r not in drop], dtype=np.int64)
        mapping = np.full(len(names), -1, dtype=np.int64)
        mapping[keep] = np.arange(len(keep))
        units = None
        if self.keep_units:
            rel = np.concatenate(self._unit_rel) if self._unit_rel else np.zeros(0, np.int32)
            lens = np.array([len(r) for r in self._unit_rel], dtype=np.int64)
            tot = np.concatenate(self._unit_total) if self._unit_total else np.zeros(0, np.int32)
            cor = (np.concatenate(self._unit_correct) if self._unit_correct
                   else np.zeros((0,) + self._correct.shape[:3], np.uint16))
            kept = mapping[rel] >= 0
            unit_id = np.repeat(np.arange(len(lens)), lens)[kept]
            indptr = np.concatenate([[0], np.cumsum(np.bincount(unit_id, minlength=len(lens)))]).astype(np.int64)
            units = UnitCounts(indptr, mapping[rel[kept]].astype(np.int32), tot[kept], cor[kept])
        return HeadScores(
            correct=self._correct[..., keep].copy(),  # keep < len(names) <= capacity
            total=self._total[keep].copy(),
            relations=tuple(names[i] for i in keep),
            directions=DIRECTIONS,
            layers=self._layers,
            heads=self._heads or (),
            n_units=self._n_units,
            n_skipped=self._n_skipped,
            units=units,
            metadata={"poss_rule": self.poss_rule},
        )


def head_accuracy(
    pairs: Iterable[tuple[Sentence, WordAttention]], *, poss_rule: bool = True, keep_units: bool = True
) -> HeadScores:
    """Functional twin of :class:`HeadAccuracy`: score every pair in one call."""
    acc = HeadAccuracy(poss_rule=poss_rule, keep_units=keep_units)
    for sentence, attention in pairs:
        acc.update(sentence, attention)
    return acc.compute()
