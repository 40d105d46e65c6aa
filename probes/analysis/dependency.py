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

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis, partial_reason
from probes.analysis.driver import stream
from probes.analysis.relations import RelationColumns, merge_relations, redundant_pools, widen
from probes.analysis.unit_counts import UnitCounts
from probes.corpora.types import Sentence
from probes.errors import AlignmentError, InputError
from probes.extraction.attention import WordAttention
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["DIRECTIONS", "HeadAccuracy", "HeadScores", "head_accuracy", "predict_heads"]

#: Clark et al.'s two modes: the dependent's row (it attends to its head), and the
#: transpose (the head attends to its dependent).
DIRECTIONS: tuple[str, str] = ("dep_to_head", "head_to_dep")

#: Most attention values :class:`HeadAccuracy` holds before scoring them (64 MB as float32).
_MAX_PENDING_VALUES = 1 << 24


@dataclass(frozen=True)
class HeadScores(Result):
    """How often each head's most-attended word is the gold head (Clark et al. 2019 §4.2).

    Attributes:
        correct: ``(n_directions, n_layers, n_heads, n_relations)`` int64 correct counts.
        total: ``(n_relations,)`` int64 number of scored words per relation.
        relations: relation names (full UD labels, ``base:*`` pools, ``ALL``, ``ALL-nopunct``).
        directions: names of axis 0 (see :data:`DIRECTIONS`).
        layers: 0-based model layers of axis 1.
        heads: 0-based model heads of axis 2.
        n_units: number of sentences scored.
        units: per-sentence counts for bootstrap intervals, or None if not kept.
        metadata: free-form facts (options, model, data).
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"correct": "directions layers heads relations", "total": "relations",
               "units.indptr": "n_units+1", "units.correct": "_ directions layers heads"}

    correct: npt.NDArray[np.int64]
    total: npt.NDArray[np.int64]
    relations: tuple[str, ...]
    directions: tuple[str, ...]
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    n_units: int = 0
    units: UnitCounts | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)  # Any: free-form facts, any JSON a caller adds

    def index(self, relation: str) -> int:
        """Position of ``relation`` on the last axis; InputError if it was never seen."""
        try:
            return self.relations.index(relation)
        except ValueError:
            raise InputError(f"relation {relation!r} does not occur in the scored data") from None

    def count(self, relation: str) -> int:
        """Number of scored words of ``relation``."""
        return int(self.total[self.index(relation)])

    def accuracy(self) -> npt.NDArray[np.float64]:
        """``(n_directions, n_layers, n_heads, n_relations)`` accuracies; NaN where a relation has no words."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.correct / np.where(self.total > 0, self.total, np.nan)

    def to_pandas(self) -> Any:
        """One row per relation, direction and head: ``relation, count, direction, layer, head,
        head_name, correct, accuracy`` (``layer``/``head`` 1-based model numbers)."""
        axes = {"relation": self.relations, "direction": self.directions,
                **head_axes(self.layers, self.heads)}
        table = long_table(axes, {"count": self.total[:, None, None, None],
                                  "correct": np.moveaxis(self.correct, -1, 0),
                                  "accuracy": np.moveaxis(self.accuracy(), -1, 0)})
        table["head_name"] = head_names(table)
        return table[["relation", "count", "direction", "layer", "head", "head_name", "correct", "accuracy"]]

    def best(self, relation: str) -> tuple[int, int, int, float]:
        """Best ``(direction, layer_pos, head_pos, accuracy)`` for ``relation``.

        Ties are broken deterministically: higher accuracy, then lower layer, head,
        and direction (Clark's notebook silently kept the last of equals).
        """
        r = self.index(relation)
        counts = self.correct[..., r]  # (D, L, H)
        # order: (layer, head, direction) ascending among the maxima
        flat = np.transpose(counts, (1, 2, 0)).reshape(-1)
        pos = int(np.argmax(flat))  # first maximum = lowest (layer, head, direction)
        n_h, n_d = counts.shape[2], counts.shape[0]
        layer, rest = divmod(pos, n_h * n_d)
        head, direction = divmod(rest, n_d)
        total = self.total[r]
        return direction, layer, head, (float(counts[direction, layer, head] / total) if total else float("nan"))

    def __add__(self, other: HeadScores) -> HeadScores:
        """Counts of both (scored on different data with the same heads and directions)."""
        if (self.directions, self.layers, self.heads) != (other.directions, other.layers, other.heads):
            raise InputError(
                "cannot add HeadScores over different heads: expected directions/layers/heads "
                f"{self.directions}/{self.layers}/{self.heads}, found {other.directions}/{other.layers}/{other.heads}"
            )
        relations, mapping = merge_relations(self.relations, other.relations)
        n = len(relations)
        correct = widen(self.correct, n).copy()
        total = widen(self.total, n).copy()
        np.add.at(correct, (..., mapping), other.correct)  # type: ignore[arg-type]  # numpy stubs: ufunc.at takes tuple indices (slices, Ellipsis)
        np.add.at(total, mapping, other.total)
        units = None
        if self.units is not None and other.units is not None:
            units = self.units.concat(other.units.remap(mapping))
        return HeadScores(
            correct, total, relations, self.directions, self.layers, self.heads,
            self.n_units + other.n_units, units, dict(self.metadata),
        )


def predict_heads(weights: npt.NDArray[np.floating]) -> npt.NDArray[np.int64]:
    """Each head's predicted head word, both directions.

    Args:
        weights: ``(..., n, n)`` word-only maps (rows from, columns to), e.g. ``(n_layers, n_heads, n, n)``
            or a stack of same-length sentences ``(B, n_layers, n_heads, n, n)``.

    Returns:
        ``(2, ..., n)`` 1-based predictions, axis 0 ordered as :data:`DIRECTIONS`;
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


class HeadAccuracy(Analysis[HeadScores]):
    """Streaming per-head, per-relation attachment counts (Clark et al. 2019 §4.2).

    Sentences are scored in batches: :meth:`update` checks a sentence and holds a view of
    its word maps; every ``buffer`` sentences (and in :meth:`compute` / :meth:`merge`) the
    held sentences are scored together, same-length sentences in one stacked argmax, so
    the per-sentence Python cost stays small. Results do not depend on ``buffer``.

    State is bounded: int64 counts ``(2, layers, heads, relations)``, at most ``buffer``
    held sentences, and, when ``keep_units`` is on, per-sentence uint16 counts for every
    relation present (``2 * layers * heads * 2`` bytes per (sentence, relation): about
    9 MB for MiniLM on EWT test, 35 MB for a 12x12 model), needed for bootstrap intervals.

    Partial inputs (truncated by the extractor) are left out by the driver
    (:func:`probes.analysis.driver.stream`), never here: fed one directly, this raises
    :class:`~probes.errors.AlignmentError` like any other word-count mismatch.

    Args:
        poss_rule: apply the possessive rule to ``nmod:poss`` (module docstring).
        keep_units: keep per-sentence counts (needed by :mod:`probes.runs.leaderboard`).
        buffer: sentences held before they are scored together (memory: their word maps).
        sided: for a causal decoder, score every relation split by the side of the gold word (``amod (head
            left)``, ``amod (head right)``; roots left out): a row sees only earlier words, so ``dep_to_head``
            can be right only on the left side and ``head_to_dep`` only on the right
            (:class:`probes.analysis.relations.RelationColumns`).
    """

    items: ClassVar[str] = "sentences"

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    poss_rule: bool
    keep_units: bool
    sided: bool
    _vocab: RelationColumns
    _correct: npt.NDArray[np.int64]
    _total: npt.NDArray[np.int64]
    _n_units: int
    _unit_len: list[npt.NDArray[np.int64]]
    _unit_rel: list[npt.NDArray[np.int32]]
    _unit_total: list[npt.NDArray[np.int32]]
    _unit_correct: list[npt.NDArray[np.uint16]]
    _unit_doc: list[tuple[str, ...]]
    _pending: list[tuple[Sentence, npt.NDArray[np.floating[Any]]]]
    _pending_values: int

    def __init__(self, *, poss_rule: bool = True, keep_units: bool = True, buffer: int = 256,
                 sided: bool = False) -> None:
        super().__init__()
        self.add_option("poss_rule", poss_rule)
        self.add_option("keep_units", keep_units)
        self.add_option("sided", bool(sided))
        self.buffer = max(int(buffer), 1)
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        self.add_state("_vocab", RelationColumns(sided=sided), "vocab")
        self.add_state("_correct", np.zeros((len(DIRECTIONS), 0, 0, 0), dtype=np.int64), "sum",
                       vocab="_vocab")  # (D, L, H, R capacity)
        self.add_state("_total", np.zeros(0, dtype=np.int64), "sum", vocab="_vocab")  # (R capacity,)
        self.add_state("_n_units", 0, "sum")
        # per-sentence counts, in chunks: pairs per unit, and per pair its column, total and correct
        self.add_state("_unit_len", [], "extend")
        self.add_state("_unit_rel", [], "extend", vocab="_vocab")
        self.add_state("_unit_total", [], "extend")
        self.add_state("_unit_correct", [], "extend")
        self.add_state("_unit_doc", [], "extend")  # chunks of document ids, one per sentence ("" for none)
        self.add_state("_pending", [], "buffer")  # (sentence, (L, H, n, n) word maps)
        self.add_state("_pending_values", 0, "buffer")

    @property
    def n_units(self) -> int:
        """Sentences scored so far (held ones included)."""
        return self._n_units

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
            partial = " (it was truncated by the extractor: feed pairs through probes.analysis.stream, " \
                      "which leaves partial inputs out)" if partial_reason(word_attention) else ""
            raise AlignmentError(
                f"sentence {sentence.sent_id!r}: expected attention over {sentence.n_words} words, "
                f"found {word_attention.n_words}{partial}", path=sentence.path, line=sentence.line)
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
        if self.sided:  # the unseen side cannot be right (an argmax over zeros must not score it by its tie rule)
            seen = np.where(inc.target < inc.position[inc.source], DIRECTIONS.index("dep_to_head"),
                            DIRECTIONS.index("head_to_dep"))  # (E,) the direction that can see the gold word
            hits &= np.repeat(np.arange(shape[0])[None, :] == seen[:, None], n_heads // shape[0], axis=1)
        pair_counts = inc.pair_sums(hits)  # (P, D*L*H)
        k = len(self._vocab)
        self._grow("_vocab", k)
        self._correct[..., :k] += np.moveaxis(inc.column_sums(pair_counts, k).reshape((k,) + shape), 0, -1)
        self._total[:k] += inc.total
        if self.keep_units:
            self._unit_len.append(np.bincount(inc.pair_unit, minlength=len(sentences)).astype(np.int64))
            self._unit_rel.append(inc.pair_column.astype(np.int32))
            self._unit_total.append(inc.pair_total)
            self._unit_correct.append(pair_counts.reshape((-1,) + shape))
            self._unit_doc.append(tuple(s.doc_id or "" for s in sentences))
        self._pending, self._pending_values = [], 0

    def compute(self, *, prune: bool = True) -> HeadScores:
        """The counts so far as an immutable :class:`HeadScores`.

        Args:
            prune: drop pooled ``base:*`` relations whose base never occurred with a subtype
                (they would repeat the plain label).
        """
        self._flush()
        if self._layers is None:
            warnings.warn("HeadAccuracy.compute() called before any update()", UserWarning, stacklevel=2)
            return HeadScores(np.zeros((len(DIRECTIONS), 0, 0, 0), np.int64), np.zeros(0, np.int64), (),
                              DIRECTIONS, (), (), 0, None, {"poss_rule": self.poss_rule})
        names = list(self._vocab.index)
        keep = np.arange(len(names))
        if prune:
            drop = redundant_pools(names)
            keep = np.array([i for i, r in enumerate(names) if r not in drop], dtype=np.int64)
        mapping = np.full(len(names), -1, dtype=np.int64)
        mapping[keep] = np.arange(len(keep))
        return HeadScores(
            correct=self._correct[..., keep].copy(),  # keep < len(names) <= capacity
            total=self._total[keep].copy(),
            relations=tuple(names[i] for i in keep),
            directions=DIRECTIONS,
            layers=self._layers,
            heads=self._heads or (),
            n_units=self._n_units,
            units=self._units(mapping) if self.keep_units else None,
            metadata={"poss_rule": self.poss_rule, **({"sided": True} if self.sided else {})},
        )

    def _units(self, mapping: npt.NDArray[np.int64]) -> UnitCounts:
        """Per-sentence counts, relations renumbered by ``mapping`` (-1: dropped)."""
        rel = np.concatenate(self._unit_rel) if self._unit_rel else np.zeros(0, np.int32)
        lens = np.concatenate(self._unit_len) if self._unit_len else np.zeros(0, np.int64)
        tot = np.concatenate(self._unit_total) if self._unit_total else np.zeros(0, np.int32)
        cor = (np.concatenate(self._unit_correct) if self._unit_correct
               else np.zeros((0,) + self._correct.shape[:3], np.uint16))
        kept = mapping[rel] >= 0
        unit_id = np.repeat(np.arange(len(lens)), lens)[kept]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(unit_id, minlength=len(lens)))]).astype(np.int64)
        docs = tuple(d for chunk in self._unit_doc for d in chunk)
        return UnitCounts(indptr, mapping[rel[kept]].astype(np.int32), tot[kept], cor[kept],
                          docs if any(docs) else ())


def head_accuracy(
    pairs: Iterable[tuple[Sentence, WordAttention]], *, poss_rule: bool = True, keep_units: bool = True,
    sided: bool = False,
) -> HeadScores:
    """Functional twin of :class:`HeadAccuracy`: score every pair in one call."""
    done = stream(pairs, {"heads": HeadAccuracy(poss_rule=poss_rule, keep_units=keep_units, sided=sided)},
                  overlap=False)
    return done["heads"]
