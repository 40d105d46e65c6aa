"""Per-head relation probes: which single head best predicts each relation's heads?

For every attention head ``h`` and relation ``r``, a log-linear model chooses a
dependent's head among ROOT + the sentence's words (self included) from features
of head ``h`` only:

* attention: ``alpha(i -> c)``, ``alpha(c -> i)``, and for the ROOT candidate the
  attention to / from the leading and trailing special tokens (4 channels);
* position, as an explicit control: ROOT indicator, offset indicators for
  ``c - i`` in ``-3..+3``, distance to the right and to the left (divided by ``m``).

One more probe sees the positional features only: the floor every head is
measured against. All ``n_layers x n_heads + 1`` probes and every relation train
at once, vectorised: parameters ``(n_probes, n_features)`` per relation, a word's
loss updating only its own relation's parameters (and those of the pooled
relation :data:`POOLED`, labelled ``ALL``: a probe trained on every word). Accuracy =
share of evaluation words (not used in training) whose gold head gets the highest score (punctuation included,
as in Clark's per-relation table; the pooled relation is scored without punctuation,
like UAS and the dependency leaderboard's ``ALL-nopunct``, not like its ``ALL``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.utils.validation import check_is_fitted

from probes.analysis.base import Analysis
from probes.corpora.types import Sentence, base_relation
from probes.errors import ConfigError
from probes.extraction.attention import WordAttention
from probes.heads.intervals import bootstrap_ci
from probes.heads.naming import head_name
from probes.probing.decode import is_punct
from probes.probing.features import OFFSETS, attention_features, check_pair, offset_features
from probes.probing.train import Pair, SentenceProbe, single_thread
from probes.results import Result

__all__ = [
    "PerHeadProbe",
    "PerHeadScores",
    "PerHeadEvaluator",
    "fit_evaluate",
    "head_features",
    "POOLED",
    "N_ATTENTION",
    "N_POSITION",
]

#: Label of the pooled relation: trained on every word, scored on every non-punctuation word.
POOLED = "ALL"
#: Attention channels per head (see module docstring).
N_ATTENTION = 6
#: Positional channels (ROOT, offsets -3..+3, right and left distance).
N_POSITION = 1 + len(OFFSETS) + 2


def _relation(label: str, level: str) -> str:
    return base_relation(label) if level == "base" else label


def head_features(attention: WordAttention) -> npt.NDArray[np.float32]:
    """``(n_layers * n_heads, m, m + 1, 6)`` attention channels of every head, ROOT candidate first.

    Channels: ``alpha(i -> c)``, ``alpha(c -> i)`` (0 for ROOT), then for ROOT only:
    ``alpha(i -> leading specials)``, ``alpha(i -> trailing specials)``,
    ``alpha(leading specials -> i)``, ``alpha(trailing specials -> i)``.
    """
    pa = attention_features(attention)
    lh, m = pa.words.shape[0] // 2, pa.n_words
    out = np.zeros((lh, m, m + 1, N_ATTENTION), dtype=np.float32)
    out[:, :, 1:, 0] = pa.words[:lh]
    out[:, :, 1:, 1] = pa.words[lh:]
    out[:, :, 0, 2:4] = pa.root[:lh]
    out[:, :, 0, 4:6] = pa.root[lh:]
    return out


class PerHeadProbe(SentenceProbe):
    """A bank of per-head, per-relation head-selection probes (plus the positional floor).

    Args:
        relation_level: ``"full"`` UD labels (``nmod:poss``) or ``"base"`` (``nmod``).
        epochs: passes over the training pairs.
        learning_rate: Adam step size (the model is log-linear and convex; 0.05 converges in one epoch).
        batch_size: sentences per optimiser step.
        random_state: seed (parameters start at zero, so it only matters on GPU).
        device: torch device.
        progress: progress bar on stderr.

    Attributes:
        relations_: relations seen in training, ``ALL`` first.
        n_layers_, n_heads_: head grid; probe ``p < n_layers_ * n_heads_`` is head
            ``divmod(p, n_heads_)``, the last probe is the positional floor.
        module_: torch module holding one ``(n_probes, 16)`` parameter per relation.
    """

    display_name = "per-head"

    def __init__(
        self,
        *,
        relation_level: str = "full",
        epochs: int = 1,
        learning_rate: float = 0.05,
        batch_size: int = 8,
        random_state: int | None = 0,
        device: str | None = None,
        progress: bool = True,
    ) -> None:
        self.relation_level = relation_level
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.random_state = random_state
        self.device = device
        self.progress = progress

    @property
    def n_probes_(self) -> int:
        """Number of probes: one per head, plus the positional floor."""
        return self.n_layers_ * self.n_heads_ + 1

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.relation_level not in ("full", "base"):
            raise ConfigError(
                f"The 'relation_level' parameter of PerHeadProbe must be 'full' or 'base'. "
                f"Got {self.relation_level!r} instead."
            )

    def _build(self, sentence: Sentence, attention: WordAttention) -> None:
        import torch

        self.n_layers_, self.n_heads_ = (int(x) for x in attention.weights.shape[:2])
        self.relations_: list[str] = []
        self._rel_index: dict[str, int] = {}
        self.module_ = torch.nn.ParameterList()
        self._add_relation(POOLED, register=False)

    def _add_relation(self, relation: str, *, register: bool = True) -> int:
        import torch

        param = torch.nn.Parameter(torch.zeros(self.n_probes_, N_ATTENTION + N_POSITION, device=self._device()))
        self.module_.append(param)
        self._rel_index[relation] = len(self.relations_)
        self.relations_.append(relation)
        if register:  # a relation first seen mid-stream joins the optimiser
            self.optimizer_.add_param_group({"params": [param]})
        return self._rel_index[relation]

    def _relation_ids(self, sentence: Sentence, *, grow: bool) -> npt.NDArray[np.int64]:
        """``(m,)`` index of each word's relation (-1 when unseen in training and not ``grow``)."""
        ids = []
        for label in sentence.relations:
            rel = _relation(label, self.relation_level)
            idx = self._rel_index.get(rel)
            if idx is None:
                idx = self._add_relation(rel) if grow else -1
            ids.append(idx)
        return np.asarray(ids, dtype=np.int64)

    def _all_logits(
        self, sentence: Sentence, attention: WordAttention, rel_ids: npt.NDArray[np.int64], *, repeat: int = 1
    ) -> Any:
        """``(n_probes, repeat * m, m + 1)`` logits, word ``i`` of copy ``r`` scored with the parameters
        of relation ``rel_ids[r * m + i]`` (all >= 0)."""
        import torch

        dev = self._device()
        att = torch.as_tensor(head_features(attention), device=dev)  # (LH, m, m + 1, 6)
        pos = torch.as_tensor(offset_features(sentence.n_words), device=dev)  # (m, m + 1, 10)
        if repeat > 1:
            att, pos = att.repeat(1, repeat, 1, 1), pos.repeat(repeat, 1, 1)  # (LH, rm, m + 1, 6), (rm, m + 1, 10)
        theta = torch.stack(list(self.module_))  # (R, P, F)
        sel = theta[torch.as_tensor(rel_ids, device=dev)].transpose(0, 1)  # (P, m, F)
        logits = torch.einsum("pif,icf->pic", sel[:, :, N_ATTENTION:], pos)  # (P, m, m + 1)
        head_part = torch.einsum("pif,picf->pic", sel[:-1, :, :N_ATTENTION], att)  # (LH, m, m + 1)
        return torch.cat([logits[:-1] + head_part, logits[-1:]], dim=0)

    def _loss(self, sentence: Sentence, attention: WordAttention) -> Any:
        import torch.nn.functional as F

        rel = self._relation_ids(sentence, grow=True)
        gold = self._gold(sentence)  # (m,)
        # own relation and ALL in one pass: every word appears twice, with each parameter row
        logits = self._all_logits(sentence, attention, np.concatenate([rel, np.zeros_like(rel)]), repeat=2)
        p, m2 = logits.shape[:2]  # (P, 2m, m + 1)
        return F.cross_entropy(logits.reshape(p * m2, -1), gold.repeat(2 * p), reduction="sum")

    def _logits(self, sentence: Sentence, attention: WordAttention) -> Any:
        """``(n_probes, m, m + 1)`` for the pooled ``ALL`` relation."""
        return self._all_logits(sentence, attention, np.zeros(sentence.n_words, dtype=np.int64))

    def relation_logits(
        self, sentence: Sentence, attention: WordAttention
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Logits under each word's own relation and under ``ALL``, in one pass.

        Returns:
            ``own`` ``(n_probes, m, m + 1)``, ``pooled`` ``(n_probes, m, m + 1)`` and the relation
            ids ``(m,)`` (-1 = relation unseen in training; its ``own`` row then uses ``ALL``).
        """
        import torch

        check_is_fitted(self, "module_")
        check_pair(sentence, attention)
        rel = self._relation_ids(sentence, grow=False)
        m = sentence.n_words
        with torch.no_grad(), single_thread():
            both = self._all_logits(sentence, attention, np.concatenate([np.maximum(rel, 0), np.zeros_like(rel)]),
                                    repeat=2).cpu().numpy()  # (P, 2m, m + 1)
        return both[:, :m], both[:, m:], rel

    def probe_names(self) -> list[str]:
        """1-based ``layer-head`` name of each probe, ``position-only`` for the floor."""
        return [head_name(*divmod(p, self.n_heads_)) for p in range(self.n_probes_ - 1)] + ["position-only"]


@dataclass
class PerHeadScores(Result):
    """Accuracy of every per-head probe for every relation on evaluation data (not used in training).

    Every head is scored here; a table's *best* head must be chosen on other data than it is reported on
    (:func:`probes.probing.summaries.per_head_rows`), or it is labelled optimistic.

    Attributes:
        relations: relation names, ``ALL`` first.
        counts: ``(R,)`` scored words per relation.
        correct: ``(R, n_layers, n_heads)`` correct head choices of each head's probe.
        floor_correct: ``(R,)`` correct choices of the positional-only probe.
        argmax_correct: ``(R, 2, n_layers, n_heads)`` correct plain argmax predictions
            (Clark §4.2: self masked, specials dropped) for ``DIRECTIONS``.
        unit_correct: per sentence, ``(rel_ids (R_s,), correct (R_s, n_probes), totals (R_s,))``
            for bootstrap CIs over sentences.
        n_unseen: words whose relation never occurred in training (scored in ``ALL`` only).
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"counts": "relations", "correct": "relations L H", "floor_correct": "relations",
               "argmax_correct": "relations 2 L H"}

    relations: list[str]
    counts: npt.NDArray[np.int64]
    correct: npt.NDArray[np.int64]
    floor_correct: npt.NDArray[np.int64]
    argmax_correct: npt.NDArray[np.int64]
    unit_correct: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]] = field(
        repr=False
    )
    n_unseen: int = 0

    @property
    def accuracy(self) -> npt.NDArray[np.float64]:
        """``(R, n_layers, n_heads)`` accuracy (NaN for relations without words)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.correct / self.counts[:, None, None]

    @property
    def floor_accuracy(self) -> npt.NDArray[np.float64]:
        """``(R,)`` accuracy of the positional-only probe."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.floor_correct / self.counts

    @property
    def argmax_accuracy(self) -> npt.NDArray[np.float64]:
        """``(R, 2, n_layers, n_heads)`` plain argmax accuracy per direction."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.argmax_correct / self.counts[:, None, None, None]

    def ci(self, relation: int, probe: int, *, random_state: int = 0) -> tuple[float, float]:
        """95% bootstrap interval (over sentences) of one probe's accuracy on one relation."""
        correct, total = [], []
        for rel_ids, corr, tot in self.unit_correct:
            hit = rel_ids == relation
            if hit.any():
                correct.append(int(corr[hit, probe].sum()))
                total.append(int(tot[hit].sum()))
        if not total:
            return float("nan"), float("nan")
        low, high = bootstrap_ci(np.asarray(correct), np.asarray(total), random_state=random_state)
        return float(low), float(high)


class PerHeadEvaluator(Analysis["PerHeadScores"]):
    """Accumulator scoring a fitted :class:`PerHeadProbe` on evaluation ``(Sentence, WordAttention)`` pairs.

    ``update`` keeps counts only (plus, per sentence, its per-relation correct
    counts for the bootstrap); ``merge`` adds another evaluator's state.
    """

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    probe: PerHeadProbe
    counts: npt.NDArray[np.int64]
    correct: npt.NDArray[np.int64]
    argmax_correct: npt.NDArray[np.int64]
    units: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.int64], npt.NDArray[np.int64]]]
    n_unseen: int

    def __init__(self, probe: PerHeadProbe) -> None:
        super().__init__()
        self.add_option("probe", probe)
        r, lh = len(probe.relations_), probe.n_layers_ * probe.n_heads_
        self.add_state("counts", np.zeros(r, dtype=np.int64), "sum")  # (R,) scored words
        self.add_state("correct", np.zeros((r, lh + 1), dtype=np.int64), "sum")  # (R, LH + floor)
        self.add_state("argmax_correct", np.zeros((r, 2, lh), dtype=np.int64), "sum")  # (R, 2, LH)
        self.add_state("units", [], "extend")  # per sentence: (relations, correct per relation, words)
        self.add_state("n_unseen", 0, "sum")

    def update(self, item: Sentence, word_attention: WordAttention) -> None:
        """Score one sentence."""
        logits, all_logits, rel = self.probe.relation_logits(item, word_attention)  # (P, m, m + 1) x 2, (m,)
        gold = np.asarray(item.heads)
        hit = logits.argmax(-1) == gold  # (P, m)
        hit_all = all_logits.argmax(-1) == gold  # (P, m)
        seen = rel >= 0
        self.n_unseen += int((~seen).sum())
        keep_all = ~is_punct(item)
        argmax_hit = _argmax_hits(word_attention, gold)  # (2, LH, m)
        ids = np.concatenate([np.zeros(int(keep_all.sum()), dtype=np.int64), rel[seen]])
        hits = np.concatenate([hit_all[:, keep_all], hit[:, seen]], axis=1)  # (P, n_scored)
        amax = np.concatenate([argmax_hit[:, :, keep_all], argmax_hit[:, :, seen]], axis=2)
        np.add.at(self.counts, ids, 1)
        np.add.at(self.correct.T, (slice(None), ids), hits)  # type: ignore[arg-type]  # numpy stubs: ufunc.at takes tuple indices; correct.T: (P, R)
        np.add.at(self.argmax_correct.transpose(1, 2, 0), (slice(None), slice(None), ids), amax)  # type: ignore[arg-type]  # numpy stubs: ufunc.at takes tuple indices
        uniq, inv = np.unique(ids, return_inverse=True)
        per_rel = np.zeros((len(uniq), hits.shape[0]), dtype=np.int64)
        np.add.at(per_rel, inv, hits.T)
        self.units.append((uniq, per_rel, np.bincount(inv, minlength=len(uniq))))

    def compute(self) -> PerHeadScores:
        """The accuracies so far."""
        p = self.probe
        lh = p.n_layers_ * p.n_heads_
        return PerHeadScores(
            relations=list(p.relations_),
            counts=self.counts.copy(),
            correct=self.correct[:, :lh].reshape(-1, p.n_layers_, p.n_heads_).copy(),
            floor_correct=self.correct[:, lh].copy(),
            argmax_correct=self.argmax_correct.reshape(-1, 2, p.n_layers_, p.n_heads_).copy(),
            unit_correct=list(self.units),
            n_unseen=self.n_unseen,
        )


def _argmax_hits(attention: WordAttention, gold: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """``(2, n_layers * n_heads, m)`` whether each head's plain argmax (Clark §4.2) hits the gold head.

    Self masked, specials dropped, ties to the left-most word; root words are never hit.
    """
    w = np.asarray(attention.words_only(), dtype=np.float32)  # (L, H, m, m)
    lh, m = w.shape[0] * w.shape[1], w.shape[-1]
    w = w.reshape(lh, m, m)
    eye = np.eye(m, dtype=bool)
    d2h = np.where(eye, -np.inf, w).argmax(-1) + 1  # (LH, m) 1-based
    h2d = np.where(eye, -np.inf, w.transpose(0, 2, 1)).argmax(-1) + 1
    return np.stack([d2h == gold, h2d == gold]) & (gold != 0)


def fit_evaluate(probe: PerHeadProbe, train: Iterable[Pair], test: Iterable[Pair]) -> PerHeadScores:
    """Fit ``probe`` on ``train`` and score it on ``test`` (a convenience for scripts and tests)."""
    probe.fit(train)
    ev = PerHeadEvaluator(probe)
    for s, a in test:
        ev.update(s, a)
    return ev.compute()
