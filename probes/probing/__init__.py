"""Probes that read attention: per-head relation probes, Clark et al.'s parsers, controls.

Every probe follows scikit-learn's estimator contract. The streaming ones take
``X`` = an iterable of ``(Sentence, WordAttention)`` pairs (from an extractor or
a store) and train in bounded memory; :class:`HeadSelectionProbe` is the plain
pairwise-classifier form over :func:`pair_features` rows.
Layers and heads are 0-based in code and named 1-based (``layer-head``) in outputs.
"""

from __future__ import annotations

from probes.probing.classifier import HeadSelectionProbe
from probes.probing.controls import ControlTask, OffsetControlTask, random_init_copy, selectivity
from probes.probing.decode import argmax_heads, is_punct, max_spanning_tree, uas_counts, uuas_counts
from probes.probing.embeddings import GloveVectors, ModelInputVectors, StaticVectors
from probes.probing.features import PairAttention, PairBatch, attention_features, distance_features, pair_features
from probes.probing.label import PerHeadLabelProbe
from probes.probing.parsers import AttnEmbParser, AttnParser, DistancesEmbParser, RightBranching
from probes.probing.per_head import PerHeadEvaluator, PerHeadProbe, PerHeadScores
from probes.probing.train import SentenceProbe, fit_together

__all__ = [
    "AttnParser",
    "AttnEmbParser",
    "DistancesEmbParser",
    "RightBranching",
    "PerHeadProbe",
    "PerHeadEvaluator",
    "PerHeadScores",
    "PerHeadLabelProbe",
    "HeadSelectionProbe",
    "SentenceProbe",
    "fit_together",
    "ControlTask",
    "OffsetControlTask",
    "random_init_copy",
    "selectivity",
    "StaticVectors",
    "GloveVectors",
    "ModelInputVectors",
    "PairAttention",
    "PairBatch",
    "attention_features",
    "distance_features",
    "pair_features",
    "argmax_heads",
    "is_punct",
    "max_spanning_tree",
    "uas_counts",
    "uuas_counts",
]
