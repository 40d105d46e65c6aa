"""Relation names and which word predictions count under which relation: shared by every dependency analysis.

A word is scored under its full UD label (``nmod:poss``), under its pooled base label
(``nmod:*``, only kept when a subtype occurs), under ``ALL`` (every word) and under
``ALL-nopunct``. :class:`RelationColumns` numbers these relation columns as they are
met; :class:`BatchIncidence` says, for a batch of sentences, which word's prediction is
checked against which gold head under which column, with the possessive rule of
:mod:`probes.analysis.dependency` (``nmod:poss`` scored through the following ``'s``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from probes.corpora.types import Sentence, base_relation

__all__ = [
    "ALL",
    "ALL_NOPUNCT",
    "pooled_name",
    "redundant_pools",
    "merge_relations",
    "widen",
    "POSS_RELATIONS",
    "POSS_CLITICS",
    "POSS_CLITIC_RELATIONS",
    "poss_rule_words",
    "word_keys",
    "BatchIncidence",
    "RelationColumns",
    "SIDES",
    "sided_name",
    "plain_name",
    "leading_relations",
]

#: Every word, punctuation and root included (Clark et al.'s "All").
ALL = "ALL"
#: Every word except those labelled ``punct``.
ALL_NOPUNCT = "ALL-nopunct"


#: The two sides of a sided relation (a causal decoder's leaderboard): the gold word lies left of the scored word
#: (earlier: the scored word's own row can attend to it) or right of it (later: only the gold word's row can).
SIDES: tuple[str, str] = ("left", "right")


def sided_name(relation: str, side: str) -> str:
    """``amod`` -> ``amod (head left)``: the words of ``relation`` whose gold word lies on ``side``."""
    return f"{relation} (head {side})"


def plain_name(relation: str) -> str:
    """The relation without its side (``amod (head left)`` -> ``amod``); other names unchanged."""
    for side in SIDES:
        suffix = f" (head {side})"
        if relation.endswith(suffix):
            return relation[: -len(suffix)]
    return relation


def leading_relations(relations: Sequence[str]) -> list[str]:
    """The ``ALL`` and ``ALL-nopunct`` columns of ``relations`` (sided ones included), in that order."""
    lead = [r for r in relations if plain_name(r) in (ALL, ALL_NOPUNCT)]
    return sorted(lead, key=lambda r: ((ALL, ALL_NOPUNCT).index(plain_name(r)), r))


def pooled_name(base: str) -> str:
    """Name of the pooled base relation: ``nmod:*`` = ``nmod`` plus every ``nmod:<subtype>``.

    The ``:*`` suffix cannot collide with a UD label (subtypes are letters only).
    """
    return f"{base}:*"


def redundant_pools(relations: Sequence[str]) -> set[str]:
    """Pooled ``base:*`` names whose base never occurs with a subtype (they repeat ``base``); a sided pool by the
    subtypes on its own side."""
    split = [(plain_name(r), r[len(plain_name(r)):]) for r in relations]  # (plain name, side suffix or "")
    subtyped = {(p.split(":", 1)[0], side) for p, side in split if ":" in p and not p.endswith(":*")}
    return {r for r, (p, side) in zip(relations, split) if p.endswith(":*") and (p[:-2], side) not in subtyped}


def merge_relations(a: Sequence[str], b: Sequence[str]) -> tuple[tuple[str, ...], npt.NDArray[np.int64]]:
    """Union of two relation lists (``a``'s order first) and the index map of ``b`` into it."""
    merged = list(a)
    index = {r: i for i, r in enumerate(merged)}
    mapping = np.empty(len(b), dtype=np.int64)
    for j, rel in enumerate(b):
        if rel not in index:
            index[rel] = len(merged)
            merged.append(rel)
        mapping[j] = index[rel]
    return tuple(merged), mapping


def widen(counts: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.int64]:
    """Pad the last axis of ``counts`` with zeros up to length ``n``."""
    pad = n - counts.shape[-1]
    if pad <= 0:
        return counts
    return np.concatenate([counts, np.zeros(counts.shape[:-1] + (pad,), dtype=counts.dtype)], axis=-1)


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


def word_keys(label: str) -> tuple[str, ...]:
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
    """A growing vocabulary of relation columns shared by one accumulator's sentences.

    ``sided`` (for causal decoders): every column is split by the side of the gold word (:data:`SIDES`),
    ``amod (head left)`` and ``amod (head right)``, and ROOT entries are left out (a root has no word to
    attend to). A decoder's row sees only earlier words, so it can be right only on the left side
    (``dep_to_head``), and a column only on the right side (``head_to_dep``); a baseline scored through the
    same columns is restricted the same way.
    """

    def __init__(self, *, sided: bool = False) -> None:
        self.sided = bool(sided)
        self.index: dict[str, int] = {}
        self._by_label: dict[str, npt.NDArray[np.int64]] = {}
        self._plain: dict[str, int] = self.index if not self.sided else {}  # unsided keys -> columns of entries
        self._plain_names: list[str] = []
        self._sided: dict[tuple[int, int], int] = {}  # (plain column, side) -> column

    def __len__(self) -> int:
        return len(self.index)

    def columns(self, label: str) -> npt.NDArray[np.int64]:
        """Columns a word labelled ``label`` is scored under (full, pooled, ALL, ALL-nopunct); for a sided
        vocabulary, its plain columns (:meth:`batch_incidence` splits them by side)."""
        cols = self._by_label.get(label)
        if cols is None:
            for key in word_keys(label):
                if key not in self._plain:
                    self._plain[key] = len(self._plain)
                    self._plain_names.append(key)
            cols = np.array([self._plain[k] for k in word_keys(label)], dtype=np.int64)
            self._by_label[label] = cols
        return cols

    def _side_columns(self, column: npt.NDArray[np.int64], side: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """``(E,)`` sided columns of entries with plain ``column`` and ``side`` (0 left, 1 right)."""
        pairs, inverse = np.unique(np.stack([column, side], 1), axis=0, return_inverse=True)
        out = np.empty(len(pairs), dtype=np.int64)
        for j, (col, sd) in enumerate(pairs.tolist()):
            key = (col, sd)
            if key not in self._sided:
                name = sided_name(self._plain_names[col], SIDES[sd])
                self._sided[key] = self.index.setdefault(name, len(self.index))
            out[j] = self._sided[key]
        return out[inverse.reshape(-1)]

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
        if self.sided:  # split by the gold word's side; ROOT (and a clitic's own position) has none
            at = source - starts[unit] + 1  # (E,) 1-based position of the scored word
            keep = (target != 0) & (target != at)
            source, target, column, unit, at = source[keep], target[keep], column[keep], unit[keep], at[keep]
            column = self._side_columns(column, (target > at).astype(np.int64)) if column.size else column
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
