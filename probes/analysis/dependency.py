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

from probes.extraction.attention import WordAttention
from probes.corpora.types import Sentence, base_relation
from probes.errors import AlignmentError, SkippedItemWarning
from probes.heads.naming import DIRECTIONS
from probes.analysis.scores import ALL, ALL_NOPUNCT, HeadScores, UnitCounts, pooled_name, redundant_pools

__all__ = [
    "POSS_RELATIONS",
    "POSS_CLITICS",
    "HeadAccuracy",
    "head_accuracy",
    "predict_heads",
    "RelationColumns",
    "BatchIncidence",
    "poss_rule_words",
]

logger = logging.getLogger("probes")

#: Most attention values :class:`HeadAccuracy` holds before scoring them (64 MB as float32).
_MAX_PENDING_VALUES = 1 << 24

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
    """Every relation a word with ``label`` is scored under (its own label first)."""
    keys = [label, pooled_name(base_relation(label)), ALL]
    if base_relation(label) != "punct":
        keys.append(ALL_NOPUNCT)
    return tuple(keys)


@dataclass(frozen=True)
class BatchIncidence:
    """Which word predictions count under which relation columns, for a batch of sentences.

    Words of the batch are numbered ``0..W-1`` in order (sentence ``s`` owns
    ``starts[s]:starts[s+1]``). An *entry* is one (word, column) scoring: the prediction of
    word ``source[e]`` must equal ``target[e]``. Plain entries check a word against its own
    gold head; a possessive-rule entry checks the clitic's prediction against the
    possessor's gold head. Entries are sorted by (sentence, column), so the entries of one
    *pair* (sentence, column) are contiguous and start at ``pair_start``.

    Attributes:
        starts: ``(S + 1,)`` word offsets of the sentences.
        position: ``(W,)`` 1-based position of each word in its sentence.
        length: ``(W,)`` number of words of each word's sentence.
        source: ``(E,)`` word whose prediction each entry checks.
        target: ``(E,)`` gold head it must equal (1-based in the sentence, 0 = ROOT).
        column: ``(E,)`` relation column of each entry.
        pair_start: ``(P,)`` first entry of each (sentence, column) pair.
        pair_unit: ``(P,)`` sentence (0-based in the batch) of each pair, nondecreasing.
        pair_column: ``(P,)`` column of each pair, increasing within a sentence.
        pair_total: ``(P,)`` int32 words of each pair.
        total: ``(n_columns,)`` int64 words per column.
    """

    starts: npt.NDArray[np.int64]
    position: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]
    source: npt.NDArray[np.int64]
    target: npt.NDArray[np.int64]
    column: npt.NDArray[np.int64]
    pair_start: npt.NDArray[np.int64]
    pair_unit: npt.NDArray[np.int64]
    pair_column: npt.NDArray[np.int64]
    pair_total: npt.NDArray[np.int32]
    total: npt.NDArray[np.int64]

    def pair_sums(self, hits: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint16]:
        """``(E, k)`` per-entry hits of ``k`` predictors -> ``(P, k)`` hits per pair."""
        if not self.pair_start.size:
            return np.zeros((0,) + hits.shape[1:], dtype=np.uint16)
        return np.add.reduceat(hits, self.pair_start, axis=0, dtype=np.uint16)

    def column_sums(self, pair_counts: npt.NDArray[np.uint16], n_columns: int) -> npt.NDArray[np.int64]:
        """``(P, k)`` per-pair counts -> ``(n_columns, k)`` int64 totals per column."""
        out = np.zeros((n_columns,) + pair_counts.shape[1:], dtype=np.int64)
        if not self.pair_column.size:
            return out
        order = np.argsort(self.pair_column, kind="stable")  # pairs by column
        col = self.pair_column[order]
        first = np.flatnonzero(np.concatenate([[True], col[1:] != col[:-1]]))
        out[col[first]] = np.add.reduceat(pair_counts[order], first, axis=0, dtype=np.int64)
        return out


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

    def batch_incidence(self, sentences: Sequence[Sentence], *, poss_rule: bool = True) -> BatchIncidence:
        """The entries of a batch of sentences (columns added as needed, in word order)."""
        lens = np.fromiter((s.n_words for s in sentences), dtype=np.int64, count=len(sentences))  # (S,)
        starts = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)  # (S + 1,)
        n_words = int(starts[-1])
        per_word = [self.columns(label) for s in sentences for label in s.relations]  # W arrays
        n_keys = np.fromiter((c.shape[0] for c in per_word), dtype=np.int64, count=n_words)  # (W,)
        column = np.concatenate(per_word) if per_word else np.zeros(0, dtype=np.int64)  # (E,)
        source = np.repeat(np.arange(n_words, dtype=np.int64), n_keys)  # (E,)
        gold = np.fromiter((h for s in sentences for h in s.heads), dtype=np.int64, count=n_words)  # (W,)
        target = gold[source]
        if poss_rule:
            poss = [int(starts[u]) + int(i) for u, s in enumerate(sentences) for i in poss_rule_words(s)]
            if poss:
                first_entry = np.concatenate([[0], np.cumsum(n_keys)])[np.asarray(poss)]  # own label's entry
                source[first_entry] = np.asarray(poss) + 1  # the clitic's prediction ...
        unit_of_word = np.repeat(np.arange(len(sentences), dtype=np.int64), lens)  # (W,)
        unit = unit_of_word[np.repeat(np.arange(n_words, dtype=np.int64), n_keys)]  # (E,)
        order = np.lexsort((column, unit))  # entries by (sentence, column)
        source, target, column, unit = source[order], target[order], column[order], unit[order]
        new_pair = np.ones(column.shape[0], dtype=bool)
        new_pair[1:] = (column[1:] != column[:-1]) | (unit[1:] != unit[:-1])
        pair_start = np.flatnonzero(new_pair).astype(np.int64)  # (P,)
        pair_total = np.diff(np.append(pair_start, column.shape[0])).astype(np.int32)
        position = np.arange(n_words, dtype=np.int64) - starts[unit_of_word] + 1  # (W,)
        return BatchIncidence(
            starts=starts, position=position, length=lens[unit_of_word], source=source, target=target,
            column=column, pair_start=pair_start, pair_unit=unit[pair_start], pair_column=column[pair_start],
            pair_total=pair_total, total=np.bincount(column, minlength=len(self.index)).astype(np.int64))


def predict_heads(weights: npt.NDArray[np.floating]) -> npt.NDArray[np.int64]:
    """Each head's predicted head word, both directions.

    Args:
        weights: ``(..., n, n)`` word-only maps (rows from, columns to), e.g. ``(n_layers, n_heads, n, n)``
            or a stack of same-length sentences ``(B, n_layers, n_heads, n, n)``.

    Returns:
        ``(2, ..., n)`` 1-based predictions, axis 0 ordered as :data:`probes.heads.naming.DIRECTIONS`;
        ``-1`` when a word has no other word.
    """
    n = weights.shape[-1]
    if n < 2:
        return np.full((2,) + weights.shape[:-1], -1, dtype=np.int64)
    masked = np.array(weights, dtype=np.float32)  # (..., n, n), a copy
    diag = np.arange(n)
    masked[..., diag, diag] = -np.inf
    return np.stack([masked.argmax(axis=-1), masked.argmax(axis=-2)]) + 1  # (2, ..., n)


def _word_block(attention: WordAttention) -> npt.NDArray[np.floating]:
    """``(L, H, n_words, n_words)`` word-only maps, a view when the words are contiguous (no copy)."""
    idx = attention.word_index
    if idx.size and int(idx[-1]) - int(idx[0]) + 1 == idx.size:
        a, b = int(idx[0]), int(idx[-1]) + 1
        return attention.weights[:, :, a:b, a:b]
    return attention.words_only()


class HeadAccuracy:
    """Streaming per-head, per-relation attachment counts (Clark et al. 2019 §4.2).

    Sentences are scored in batches: :meth:`update` checks a sentence and holds a view of
    its word maps; every ``buffer`` sentences (and in :meth:`compute` / :meth:`merge`) the
    held sentences are scored together, same-length sentences in one stacked argmax, so
    the per-sentence Python cost stays small. Results do not depend on ``buffer``.

    State is bounded: int64 counts ``(2, layers, heads, relations)``, at most ``buffer``
    held sentences, and, when ``keep_units`` is on, per-sentence uint16 counts for every
    relation present (``2 * layers * heads * 2`` bytes per (sentence, relation): about
    9 MB for MiniLM on EWT test, 35 MB for a 12x12 model), needed for bootstrap intervals.

    Args:
        poss_rule: apply the possessive rule to ``nmod:poss`` (module docstring).
        keep_units: keep per-sentence counts (needed by :mod:`probes.runs.leaderboard`).
        buffer: sentences held before they are scored together (memory: their word maps).
    """

    def __init__(self, *, poss_rule: bool = True, keep_units: bool = True, buffer: int = 256) -> None:
        self.poss_rule = poss_rule
        self.keep_units = keep_units
        self.buffer = max(int(buffer), 1)
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
        self._pending: list[tuple[Sentence, npt.NDArray[np.floating]]] = []  # (sentence, (L, H, n, n))
        self._pending_values = 0
        # per-sentence counts, in chunks: pairs per unit, and per pair its column, total and correct
        self._unit_len: list[npt.NDArray[np.int64]] = []
        self._unit_rel: list[npt.NDArray[np.int32]] = []
        self._unit_total: list[npt.NDArray[np.int32]] = []
        self._unit_correct: list[npt.NDArray[np.uint16]] = []

    @property
    def n_units(self) -> int:
        """Sentences scored so far (held ones included)."""
        return self._n_units

    def _grow(self, n: int) -> None:
        """Make room for ``n`` relation columns."""
        if n > self._total.shape[0]:
            extra = max(n, 2 * self._total.shape[0]) - self._total.shape[0]
            self._correct = np.concatenate(
                [self._correct, np.zeros(self._correct.shape[:3] + (extra,), dtype=np.int64)], axis=3)
            self._total = np.concatenate([self._total, np.zeros(extra, dtype=np.int64)])

    def update(self, item: Sentence, word_attention: WordAttention) -> None:
        """Score one sentence against its word-level attention (batched; see the class docstring)."""
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
        block = _word_block(word_attention)  # (L, H, n, n)
        self._pending.append((sentence, block))
        self._pending_values += block.size
        self._n_units += 1
        if len(self._pending) >= self.buffer or self._pending_values > _MAX_PENDING_VALUES:
            self._flush()

    def _flush(self) -> None:
        """Score the held sentences together."""
        if not self._pending:
            return
        sentences = [s for s, _ in self._pending]
        inc = self._vocab.batch_incidence(sentences, poss_rule=self.poss_rule)
        shape = self._correct.shape[:3]  # (D, L, H)
        n_heads = int(np.prod(shape))
        pred = np.empty((int(inc.starts[-1]), n_heads), dtype=np.int32)  # (W, D*L*H) 1-based predictions
        by_length: dict[int, list[int]] = {}
        for u, s in enumerate(sentences):
            by_length.setdefault(s.n_words, []).append(u)
        for n, units in by_length.items():
            if n == 0:
                continue
            stacked = np.stack([self._pending[u][1] for u in units])  # (B, L, H, n, n)
            p = predict_heads(stacked)  # (D, B, L, H, n)
            words = (inc.starts[units][:, None] + np.arange(n)).ravel()  # (B*n,)
            pred[words] = p.transpose(1, 4, 0, 2, 3).reshape(len(units) * n, n_heads)
        hits = pred[inc.source] == inc.target[:, None]  # (E, D*L*H)
        pair_counts = inc.pair_sums(hits)  # (P, D*L*H)
        k = len(self._vocab)
        self._grow(k)
        self._correct[..., :k] += np.moveaxis(inc.column_sums(pair_counts, k).reshape((k,) + shape), 0, -1)
        self._total[:k] += inc.total
        if self.keep_units:
            self._unit_len.append(np.bincount(inc.pair_unit, minlength=len(sentences)).astype(np.int64))
            self._unit_rel.append(inc.pair_column.astype(np.int32))
            self._unit_total.append(inc.pair_total)
            self._unit_correct.append(pair_counts.reshape((-1,) + shape))
        self._pending, self._pending_values = [], 0

    def merge(self, other: HeadAccuracy) -> None:
        """Add ``other``'s state (another shard, same options) to this one."""
        other._flush()
        if other._layers is None:
            return
        if self._layers is None:
            self._load(other.compute(prune=False))
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
        self._pending, self._pending_values = [], 0
        self._unit_len, self._unit_rel, self._unit_total, self._unit_correct = [], [], [], []
        if scores.units is not None:
            u = scores.units
            self._unit_len.append(np.diff(u.indptr))
            self._unit_rel.append(u.relation)
            self._unit_total.append(u.total)
            self._unit_correct.append(u.correct)

    def compute(self, *, prune: bool = True) -> HeadScores:
        """The counts so far as an immutable :class:`~probes.analysis.scores.HeadScores`.

        Args:
            prune: drop pooled ``base:*`` relations whose base never occurred with a subtype
                (they would repeat the plain label).
        """
        self._flush()
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
            lens = np.concatenate(self._unit_len) if self._unit_len else np.zeros(0, np.int64)
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
