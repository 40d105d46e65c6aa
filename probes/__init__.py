"""probes: what does each attention head of a transformer do?

Word-level attention from every head of a Hugging Face model, aligned to words
and to linguistic annotation, scored per relation (Clark et al. 2019).
Layers and heads are 0-based in code and 1-based (``layer-head``) in every output.
"""

from __future__ import annotations

from probes._lazy import lazy_getattr
from probes.accumulate import Accumulator, accumulate
from probes.attention import WordAttention
from probes.corpora import ReadReport, read_documents, read_treebank, write_conllu
from probes.data import Bridge, Document, Mention, Sentence, SplitAntecedent
from probes.errors import (
    AlignmentError,
    AnnotationError,
    ConfigError,
    FormatError,
    InputError,
    ModelOutputError,
    ProbesError,
    SkippedItemWarning,
    StoreError,
)

__version__ = "0.1.0"

#: Names whose modules import torch/transformers: loaded on first use so that ``import probes``
#: stays light for scoring and reading on machines without a model.
_LAZY = {
    # extraction (torch, transformers)
    "AttentionExtractor": "probes.extract",
    "open_store": "probes.store",
    "extract_to_store": "probes.store",
    # syntax: head accuracy, baselines, leaderboards
    "HeadAccuracy": "probes.scoring",
    "head_accuracy": "probes.scoring",
    "HeadScores": "probes.scores",
    "BaselineScores": "probes.scores",
    "OffsetBaseline": "probes.baselines",
    "LeaderboardRow": "probes.leaderboard",
    "leaderboard": "probes.leaderboard",
    "run_leaderboard": "probes.leaderboard",
    # coreference and bridging
    "Window": "probes.windows",
    "document_windows": "probes.windows",
    "AntecedentAccuracy": "probes.coref",
    "BridgingScores": "probes.bridging",
    # trained probes
    "AttnParser": "probes.probing",
    "AttnEmbParser": "probes.probing",
    "DistancesEmbParser": "probes.probing",
    "RightBranching": "probes.probing",
    "PerHeadProbe": "probes.probing",
    "PerHeadLabelProbe": "probes.probing",
    "HeadSelectionProbe": "probes.probing",
    "ControlTask": "probes.probing",
    "ModelInputVectors": "probes.probing",
    "GloveVectors": "probes.probing",
    "run_probes": "probes.probing",
    # configuration
    "load_config": "probes.config",
    "resolve_model": "probes.config",
}


__getattr__ = lazy_getattr(__name__, _LAZY)

__all__ = [
    "Accumulator",
    "accumulate",
    "WordAttention",
    *_LAZY,
    "read_treebank",
    "read_documents",
    "write_conllu",
    "ReadReport",
    "Sentence",
    "Document",
    "Mention",
    "Bridge",
    "SplitAntecedent",
    "ProbesError",
    "InputError",
    "FormatError",
    "AnnotationError",
    "AlignmentError",
    "ModelOutputError",
    "ConfigError",
    "StoreError",
    "SkippedItemWarning",
    "__version__",
]
