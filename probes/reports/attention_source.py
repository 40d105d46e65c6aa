"""The attention source of a run, said in its reports (the maps are the weights unless the run says otherwise)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["attention_source", "source_suffix", "source_sentence"]

#: What each source's maps hold, in one phrase (probes.extraction.sources.SOURCE_HELP, without importing torch).
_SAID = {
    "weights": "the attention weights",
    "norm": "alpha_ij x ||f_h(x_j)||, the size of what each head moves from each token (Kobayashi et al. 2020)",
    "contribution": "each token's term in the attention block's output through the head, with the block's "
                    "LayerNorm (Kobayashi et al. 2021)",
    "value-zeroing": "1 - cos of the layer's output with and without the head's value of each token (Mohebbi et al. "
                     "2023)",
}


def attention_source(record: Any) -> str:
    """The attention source recorded anywhere in a run record (an extractor's ``attention_source``); ``weights``
    when none is (runs before there were other sources, stores of weights)."""
    found = _find(record.to_dict() if hasattr(record, "to_dict") else record)
    return found or "weights"


def _find(value: Any) -> str | None:
    if isinstance(value, Mapping):
        if isinstance(value.get("attention_source"), str):
            return str(value["attention_source"])
        for item in value.values():
            got = _find(item)
            if got:
                return got
    elif isinstance(value, (list, tuple)):
        for item in value:
            got = _find(item)
            if got:
                return got
    return None


def source_suffix(record: Any) -> str:
    """`` (attention source: norm)`` for a title, empty for the weights."""
    source = attention_source(record)
    return "" if source == "weights" else f" (attention source: {source})"


def source_sentence(record: Any) -> str:
    """One sentence saying what the maps hold, every row normalised to sum 1."""
    source = attention_source(record)
    return (f"Attention source: {source}: each head's map holds {_SAID.get(source, source)}"
            + ("." if source == "weights" else ", each row normalised to sum 1."))
