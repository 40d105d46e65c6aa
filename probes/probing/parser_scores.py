"""Held-out attachment scores of a fitted parser, as a streaming analysis."""

from __future__ import annotations

from typing import Any

import numpy as np

from probes.analysis.base import Analysis
from probes.corpora.types import Sentence
from probes.extraction.attention import WordAttention
from probes.heads.intervals import bootstrap_ci
from probes.probing.decode import argmax_heads, uas_counts, uuas_counts

__all__ = ["ParserScorer"]


class ParserScorer(Analysis[dict[str, float]]):
    """Accumulator of a parser's UAS and UUAS over held-out ``(Sentence, WordAttention)`` pairs.

    Keeps per-sentence counts only (4 integers each) for bootstrap intervals.

    Args:
        parser: a fitted parser with ``predict_log_proba_one(sentence, attention)``.
        transform: optional ``Sentence -> Sentence`` (a control task's relabelling).
        uuas: also decode a maximum spanning tree per sentence.
    """

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    parser: Any
    transform: Any
    uuas: bool
    counts: list[tuple[int, int, int, int]]
    ids: list[str]

    def __init__(self, parser: Any, transform: Any = None, *, uuas: bool = True) -> None:
        super().__init__()
        self.add_option("parser", parser)
        self.add_option("transform", transform)
        self.add_option("uuas", uuas)
        self.add_state("counts", [], "extend")  # per sentence: (uas correct, uas total, uuas correct, uuas total)
        self.add_state("ids", [], "extend")  # per sentence: its id (to pair sentences across scorers)

    def update(self, item: Sentence, word_attention: WordAttention) -> None:
        """Score one sentence."""
        sentence = self.transform(item) if self.transform else item
        logp = self.parser.predict_log_proba_one(sentence, word_attention)  # (m, m + 1)
        uc, ut = uas_counts(argmax_heads(logp), sentence)
        tc, tt = uuas_counts(logp, sentence) if self.uuas else (0, 0)
        self.counts.append((uc, ut, tc, tt))
        self.ids.append(str(item.sent_id))

    def unit_counts(self) -> tuple[list[str], np.ndarray]:
        """``(ids, counts)``: sentence ids and ``(n, 4)`` per-sentence counts (UAS correct, total, UUAS correct,
        total), for paired comparisons."""
        return list(self.ids), np.asarray(self.counts, dtype=np.int64).reshape(-1, 4)

    def compute(self) -> dict[str, float]:
        """UAS and UUAS with 95% bootstrap intervals over sentences."""
        c = np.asarray(self.counts, dtype=np.int64).reshape(-1, 4)
        out: dict[str, float] = {}
        for name, (k, t) in {"uas": (0, 1), "uuas": (2, 3)}.items():
            total = c[:, t].sum()
            out[name] = float(c[:, k].sum() / total) if total else float("nan")
            low, high = bootstrap_ci(c[:, k], c[:, t]) if total else (np.nan, np.nan)
            out[f"{name}_ci_low"], out[f"{name}_ci_high"] = float(low), float(high)
        return out
