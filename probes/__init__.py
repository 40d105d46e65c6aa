"""probes: what does each attention head of a transformer do?

Word-level attention from every head of a Hugging Face model, aligned to words
and to linguistic annotation, scored per relation (Clark et al. 2019).
Layers and heads are 0-based in code and 1-based (``layer-head``) in every output.
"""

from __future__ import annotations

from probes._lazy import lazy_getattr
from probes.analysis.base import Accumulator, accumulate
from probes.extraction.attention import WordAttention
from probes.corpora import ReadReport, read_documents, read_treebank, write_conllu
from probes.corpora.types import Bridge, Document, Mention, Sentence, SplitAntecedent
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
    "AttentionExtractor": "probes.extraction.extractor",
    "open_store": "probes.extraction.store",
    "extract_to_store": "probes.extraction.store",
    # syntax: head accuracy, baselines, leaderboards
    "HeadAccuracy": "probes.analysis.dependency",
    "head_accuracy": "probes.analysis.dependency",
    "HeadScores": "probes.analysis.scores",
    "BaselineScores": "probes.analysis.scores",
    "OffsetBaseline": "probes.analysis.baselines",
    "LeaderboardRow": "probes.runs.leaderboard",
    "leaderboard": "probes.runs.leaderboard",
    "run_leaderboard": "probes.runs.leaderboard",
    # coreference and bridging
    "Window": "probes.extraction.windows",
    "document_windows": "probes.extraction.windows",
    "AntecedentAccuracy": "probes.analysis.coreference",
    "BridgingScores": "probes.analysis.bridging",
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
    "load_config": "probes.runs.config",
    "resolve_model": "probes.runs.config",
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
