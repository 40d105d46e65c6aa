"""Why a column of ``heads.csv`` is empty: a measure the model or the data does not define.

An empty cell is never a number: a decoder has no end special and its rows never see the next token, a
tokenizer may add no start special, a corpus may hold no rare word. :func:`empty_columns` names every column
with an empty cell and the reason, for the notes of ``atlas.md`` and ``atlas.html``; the findings say "not
defined for a decoder" where that is the reason (:data:`NOT_FOR_DECODER`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["NOT_FOR_DECODER", "is_decoder_atlas", "empty_columns", "undefined_reason"]

#: The words every report uses for a measure a decoder does not have.
NOT_FOR_DECODER = "not defined for a decoder"

_END = ("to_sep", "sep_to_sep", "other_to_sep", "grad_sep")
_START = ("to_cls", "grad_cls")


def is_decoder_atlas(atlas: Any) -> bool:
    """Whether the atlas' surface statistics were measured on a decoder's causal rows."""
    return bool(getattr(atlas.surface, "causal", False))


def undefined_reason(column: str, atlas: Any) -> str:
    """Why ``column`` has empty cells in ``atlas``' table (one short clause)."""
    decoder = is_decoder_atlas(atlas)
    key = column[len("word_"):] if column.startswith("word_") else column
    if key in _END:
        return f"{NOT_FOR_DECODER} (no end special)" if decoder else "the model has no end special"
    if key == "to_next" and decoder:
        return f"{NOT_FOR_DECODER} (a row never sees the next token)"
    if key == "entropy_first":
        return (f"{NOT_FOR_DECODER} (row 0 sees only itself)" if decoder else
                "position 0 is not a start special")
    if key in _START:
        return (f"{NOT_FOR_DECODER} without BOS (the tokenizer adds no start special)" if decoder else
                "the model has no start special")
    if key.startswith("rare"):
        return "no sentence has a word outside the 500 most frequent (no rare-word rows)"
    if key.startswith("best_"):
        return "no relation is listed for the head (the leaderboard's rows)"
    if key == "syntactic_relations":
        return "the head is not syntactic"
    if key == "coref_accuracy":
        return "no antecedent candidates reached the head"
    return "no value for the head"


def empty_columns(table: Any, atlas: Any) -> dict[str, str]:
    """``{column: reason}`` for every column of ``table`` (the heads table) with an empty cell."""
    out = {}
    for column in table.columns:
        values = table[column]
        empty = values.isna()
        if values.dtype.kind not in "biufc":  # text: an empty string is an empty cell too
            empty = empty | (values.astype(str) == "")
        if bool(empty.any()):
            out[column] = undefined_reason(column, atlas)
    return out
