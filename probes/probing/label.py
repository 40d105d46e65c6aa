"""Per-head relation-label probes: given a gold arc, predict its label from one head.

For each attention head, a scikit-learn :class:`~sklearn.linear_model.LogisticRegression`
reads the arc's attention in both directions (``alpha(dep -> head)``,
``alpha(head -> dep)``, and for root arcs the attention to / from the leading and
trailing special tokens) plus the pair's relative position (one-hot offset
``head - dep`` clipped to ``±5``, or ROOT). One more probe sees the position only:
the floor each head is compared with. Training arcs are kept in a bounded
reservoir sample (``max_arcs``), so memory does not grow with the corpus.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.base import BaseEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits

from probes.analysis.base import Analysis
from probes.corpora.types import Sentence, base_relation
from probes.errors import ConfigError
from probes.extraction.attention import WordAttention
from probes.probing.features import attention_features, check_pair
from probes.probing.train import Pair, iter_pairs

__all__ = ["PerHeadLabelProbe", "LabelScorer", "arc_features", "MAX_OFFSET"]

#: Offsets beyond this are pooled in the one-hot position features.
MAX_OFFSET = 5
_N_POS = 2 * MAX_OFFSET + 1  # offsets -5..-1, 1..5, and ROOT
_N_ATT = 6


def arc_features(
    sentence: Sentence, attention: WordAttention
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Features of the sentence's gold arcs.

    Returns:
        ``att``: ``(m, n_layers * n_heads, 6)`` attention channels per arc and head;
        ``pos``: ``(m, 11)`` one-hot relative position (offsets -5..-1, 1..5 clipped, ROOT last).
    """
    pa = attention_features(attention)
    lh, m = pa.n_maps // 2, pa.n_words
    heads = np.asarray(sentence.heads)  # (m,) 0..m
    dep = np.arange(m)
    is_root = heads == 0
    hw = np.where(is_root, 0, heads - 1)  # 0-based head word (dummy 0 for root arcs)
    att = np.zeros((m, lh, _N_ATT), dtype=np.float32)
    att[:, :, 0] = np.where(is_root[:, None], 0.0, pa.words[:lh, dep, hw].T)  # alpha(dep -> head)
    att[:, :, 1] = np.where(is_root[:, None], 0.0, pa.words[lh:, dep, hw].T)  # alpha(head -> dep)
    att[:, :, 2:4] = np.where(is_root[:, None, None], pa.root[:lh].transpose(1, 0, 2), 0.0)
    att[:, :, 4:6] = np.where(is_root[:, None, None], pa.root[lh:].transpose(1, 0, 2), 0.0)
    off = np.clip(heads - (dep + 1), -MAX_OFFSET, MAX_OFFSET)
    col = np.where(is_root, _N_POS - 1, np.where(off < 0, off + MAX_OFFSET, off + MAX_OFFSET - 1))
    pos = np.zeros((m, _N_POS), dtype=np.float32)
    pos[dep, col] = 1.0
    return att, pos


class PerHeadLabelProbe(BaseEstimator):
    """One label classifier per attention head (plus a position-only floor).

    Args:
        relation_level: ``"full"`` UD labels or ``"base"`` (subtypes stripped).
        max_arcs: size of the reservoir sample of training arcs.
        C: inverse regularisation strength of each LogisticRegression.
        max_iter: LogisticRegression iterations.
        random_state: seed of the reservoir sample and of the classifiers.
        progress: progress bars on stderr.

    Attributes:
        classifiers_: ``n_layers * n_heads + 1`` fitted LogisticRegressions (floor last).
        classes_: the labels.
        n_layers_, n_heads_, n_arcs_seen_, n_arcs_used_, n_sentences_seen_, n_skipped_: shape and counts.
    """

    display_name = "label"

    def __init__(
        self,
        *,
        relation_level: str = "full",
        max_arcs: int = 20000,
        C: float = 1.0,
        max_iter: int = 300,
        random_state: int | None = 0,
        progress: bool = True,
    ) -> None:
        self.relation_level = relation_level
        self.max_arcs = max_arcs
        self.C = C
        self.max_iter = max_iter
        self.random_state = random_state
        self.progress = progress

    # ---------------------------------------------------------------- streaming collection
    def _validate_params(self) -> None:
        if self.relation_level not in ("full", "base"):
            raise ConfigError(
                f"The 'relation_level' parameter of PerHeadLabelProbe must be 'full' or 'base'. "
                f"Got {self.relation_level!r} instead."
            )
        if not isinstance(self.max_arcs, int) or self.max_arcs < 1:
            raise ConfigError(f"The 'max_arcs' parameter of PerHeadLabelProbe must be an int >= 1. "
                              f"Got {self.max_arcs!r} instead.")

    def _labels(self, sentence: Sentence) -> list[str]:
        return [base_relation(r) if self.relation_level == "base" else r for r in sentence.relations]

    def _learn_one(self, sentence: Sentence, attention: WordAttention) -> None:
        """Add a sentence's arcs to the reservoir (Algorithm R, one arc at a time, vectorised)."""
        if attention.n_words != sentence.n_words or sentence.n_words == 0:
            self._skipped = getattr(self, "_skipped", 0) + 1
            return
        if not hasattr(self, "_att"):
            lh = attention.weights.shape[0] * attention.weights.shape[1]
            self._shape = tuple(int(x) for x in attention.weights.shape[:2])
            self._att = np.zeros((self.max_arcs, lh, _N_ATT), dtype=np.float32)
            self._pos = np.zeros((self.max_arcs, _N_POS), dtype=np.float32)
            self._y: list[str] = [""] * self.max_arcs
            self._seen = 0
            self._rng = np.random.default_rng(self.random_state)
        att, pos = arc_features(sentence, attention)
        labels = self._labels(sentence)
        m = len(labels)
        self._n_sentences = getattr(self, "_n_sentences", 0) + 1
        index = self._seen + np.arange(m)  # global arc numbers
        slot = np.where(index < self.max_arcs, index, self._rng.integers(0, index + 1))
        keep = slot < self.max_arcs
        for j in np.flatnonzero(keep):  # later arcs of the sentence overwrite earlier ones, as Algorithm R
            self._att[slot[j]] = att[j]
            self._pos[slot[j]] = pos[j]
            self._y[slot[j]] = labels[j]
        self._seen += m

    def _flush(self) -> None:
        """Fit every head's classifier on the reservoir."""
        if not hasattr(self, "_att"):
            raise ConfigError("PerHeadLabelProbe.fit: found no usable sentence in X")
        n = min(self._seen, self.max_arcs)
        att, pos, y = self._att[:n], self._pos[:n], np.asarray(self._y[:n])
        self.n_layers_, self.n_heads_ = self._shape
        self.classes_ = np.unique(y)
        lh = att.shape[1]
        from probes.progress import iterate

        heads = iterate(range(lh + 1), "label probes", unit="head", progress=self.progress, leave=False)
        self.classifiers_ = []
        with threadpool_limits(1):  # tiny problems: BLAS threads only contend (5x slower on a busy 2-core box)
            for p in heads:
                X = pos if p == lh else np.concatenate([att[:, p], pos], axis=1)
                clf = LogisticRegression(C=self.C, max_iter=self.max_iter, random_state=self.random_state)
                self.classifiers_.append(clf.fit(X, y))
        self.n_arcs_seen_, self.n_arcs_used_ = self._seen, n
        self.n_skipped_ = getattr(self, "_skipped", 0)
        self.n_sentences_seen_ = getattr(self, "_n_sentences", 0)
        for attr in ("_att", "_pos", "_y", "_seen", "_rng", "_shape", "_skipped", "_n_sentences"):
            self.__dict__.pop(attr, None)

    # ---------------------------------------------------------------- scikit-learn API
    def fit(self, X: Iterable[Pair], y: None = None) -> PerHeadLabelProbe:
        """Collect the arcs of ``X`` (one streaming pass) and fit every head's classifier."""
        self._validate_params()
        for attr in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
            delattr(self, attr)
        for sentence, attention in iter_pairs(X, progress=self.progress, desc="label arcs"):
            self._learn_one(sentence, attention)
        self._flush()
        return self

    def predict_arcs(self, att: npt.NDArray[np.float32], pos: npt.NDArray[np.float32]) -> npt.NDArray[np.str_]:
        """``(n_probes, n_arcs)`` predicted labels from :func:`arc_features` output (floor last)."""
        check_is_fitted(self, "classifiers_")
        lh = att.shape[1]
        with threadpool_limits(1):
            return np.stack([
                clf.predict(pos if p == lh else np.concatenate([att[:, p], pos], axis=1))
                for p, clf in enumerate(self.classifiers_)
            ])

    def predict_one(self, sentence: Sentence, attention: WordAttention) -> npt.NDArray[np.str_]:
        """``(n_probes, m)`` predicted label of each gold arc of one sentence by each probe (floor last)."""
        check_pair(sentence, attention)
        return self.predict_arcs(*arc_features(sentence, attention))

    def labels(self, sentence: Sentence) -> list[str]:
        """The gold labels at this probe's relation level."""
        return self._labels(sentence)

    def score(self, X: Iterable[Pair], y: None = None) -> npt.NDArray[np.float64]:
        """``(n_probes,)`` label accuracy of each probe (floor last) over ``X``."""
        scorer = LabelScorer(self)
        for s, a in X:
            scorer.update(s, a)
        correct, total = scorer.compute()
        return correct.sum(0) / max(int(total.sum()), 1)


class LabelScorer(Analysis[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]):
    """Accumulator of per-head label accuracy; predicts in chunks of arcs (fast), keeps per-sentence counts.

    ``compute()`` returns ``(correct (n_sentences, n_probes), total (n_sentences,))``.
    """

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    probe: PerHeadLabelProbe
    correct: list[npt.NDArray[np.integer[Any]]]
    total: list[int]
    _pending: list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], list[str]]]
    _n_pending: int

    def __init__(self, probe: PerHeadLabelProbe, *, chunk: int = 4096) -> None:
        super().__init__()
        self.add_option("probe", probe)
        self.chunk = chunk
        self.add_state("correct", [], "extend")  # per sentence: (n_probes,) correct arcs
        self.add_state("total", [], "extend")  # per sentence: arcs
        self.add_state("_pending", [], "buffer")  # (attention features, offsets, gold labels) per sentence
        self.add_state("_n_pending", 0, "buffer")

    def update(self, item: Sentence, word_attention: WordAttention) -> None:
        """Queue one sentence's gold arcs."""
        check_pair(item, word_attention)
        att, pos = arc_features(item, word_attention)
        self._pending.append((att, pos, self.probe.labels(item)))
        self._n_pending += item.n_words
        if self._n_pending >= self.chunk:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        att = np.concatenate([a for a, _, _ in self._pending])
        pos = np.concatenate([p for _, p, _ in self._pending])
        gold = np.asarray([g for _, _, labels in self._pending for g in labels])
        hit = self.probe.predict_arcs(att, pos) == gold  # (P, n_arcs)
        sizes = [len(labels) for _, _, labels in self._pending]
        for chunk in np.split(hit, np.cumsum(sizes)[:-1], axis=1):
            self.correct.append(chunk.sum(1))
        self.total += sizes
        self._pending, self._n_pending = [], 0

    def compute(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Per-sentence correct counts ``(n_sentences, n_probes)`` and arc totals ``(n_sentences,)``."""
        self._flush()
        return np.asarray(self.correct, dtype=np.int64), np.asarray(self.total, dtype=np.int64)
