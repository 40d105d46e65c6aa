"""Extraction: the only stage that runs a model.

Loads a Hugging Face model with eager attention, tokenizes gold words, runs batches and pools
token maps into word-level :class:`~probes.extraction.attention.WordAttention` (``extractor``,
``align``), cuts long documents into windows (``windows``), saves and reads attention stores
(``store``). Model-family facts live in ``families`` (with :func:`head_sites`, the seam where head
interventions hook), model loading in ``loading``, head gates and zero, mean and uniform-attention ablation in
``interventions`` (the model then runs in ``probes.importance``).
Torch is imported on first use.
"""

from __future__ import annotations

from probes._lazy import lazy_getattr
from probes.extraction.attention import WordAttention

__all__ = ["WordAttention", "AttentionExtractor", "ExtractionReport", "open_store", "extract_to_store",
           "AttentionStore", "Window", "document_windows", "iter_windows", "load_pretrained", "head_sites",
           "head_gates", "intervene", "head_means", "ABLATIONS"]

__getattr__ = lazy_getattr(__name__, {
    "AttentionExtractor": "probes.extraction.extractor",
    "ExtractionReport": "probes.extraction.extractor",
    "open_store": "probes.extraction.store",
    "extract_to_store": "probes.extraction.store",
    "AttentionStore": "probes.extraction.store",
    "Window": "probes.extraction.windows",
    "document_windows": "probes.extraction.windows",
    "iter_windows": "probes.extraction.windows",
    "load_pretrained": "probes.extraction.loading",
    "head_sites": "probes.extraction.families",
    "head_gates": "probes.extraction.interventions",
    "intervene": "probes.extraction.interventions",
    "head_means": "probes.extraction.interventions",
    "ABLATIONS": "probes.extraction.interventions",
})
