"""How much each head attends from words to special tokens (Clark et al. 2019 §3, "attention to [CLS]/[SEP]").

For every head, the attention mass a word's row puts on the special positions kept by the
extractor, averaged over every word of the corpus (rows of special tokens are not counted).
Leading specials (before the first word: ``[CLS]``, ``<s>``, BOS) and the others (trailing:
``[SEP]``, ``</s>``, or any special between words) are summed apart, as Clark et al. found heads that park
their attention on ``[SEP]`` in the middle layers. Rows of word positions sum to 1 (see
:class:`~probes.extraction.attention.WordAttention`), so the two means lie in ``[0, 1]`` and
``1 - leading - trailing`` is the mass left on words.

This is the worked example of ``docs/architecture.md`` ("Adding an analysis"): one file,
one registration line in :data:`probes.analysis.ANALYSES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.base import Analysis
from probes.extraction.attention import WordAttention
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["AttentionToSpecials", "SpecialsResult"]


@dataclass(frozen=True)
class SpecialsResult(Result):
    """Attention mass from words to special tokens, per head.

    Attributes:
        layers, heads: 0-based model layers and heads (axes of the arrays).
        leading: ``(L, H)`` summed mass from word rows to leading special positions.
        trailing: ``(L, H)`` summed mass from word rows to the other special positions.
        n_words: word rows summed over.
        n_items: items seen.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"leading": "layers heads", "trailing": "layers heads"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    leading: npt.NDArray[np.float64]
    trailing: npt.NDArray[np.float64]
    n_words: int
    n_items: int

    def mean(self, which: str = "all") -> npt.NDArray[np.float64]:
        """``(L, H)`` mean mass per word to ``leading``, ``trailing`` or ``all`` specials (NaN without words)."""
        sums = {"leading": self.leading, "trailing": self.trailing, "all": self.leading + self.trailing}
        if which not in sums:
            raise ValueError(f"which: expected leading, trailing or all, found {which!r}")
        return sums[which] / self.n_words if self.n_words else np.full(self.leading.shape, np.nan)

    def to_pandas(self) -> Any:
        """One row per head: ``layer, head, head_name, leading, trailing, all`` (means; 1-based layer/head)."""
        axes = head_axes(self.layers, self.heads)
        table = long_table(axes, {w: self.mean(w) for w in ("leading", "trailing", "all")})
        table.insert(2, "head_name", head_names(table))
        return table


class AttentionToSpecials(Analysis[SpecialsResult]):
    """Streaming per-head attention mass from words to special tokens (see the module docstring)."""

    # options and state, declared by add_option / add_state in __init__ (set there with setattr)
    _leading: npt.NDArray[np.float64]
    _trailing: npt.NDArray[np.float64]
    _n_words: int
    _n_items: int

    def __init__(self) -> None:
        super().__init__()
        self.add_state("_layers", None, "same")
        self.add_state("_heads", None, "same")
        self.add_state("_leading", np.zeros((0, 0)), "sum")  # (L, H)
        self.add_state("_trailing", np.zeros((0, 0)), "sum")  # (L, H)
        self.add_state("_n_words", 0, "sum")
        self.add_state("_n_items", 0, "sum")

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Add the word rows of one item."""
        if self.bind_heads(word_attention):
            self._leading = np.zeros((len(word_attention.layers), len(word_attention.heads)))
            self._trailing = np.zeros((len(word_attention.layers), len(word_attention.heads)))
        words = word_attention.word_index  # (n_words,)
        self._n_items += 1
        if not words.size:
            return
        special = word_attention.is_special  # (n,)
        position = np.arange(special.shape[0])
        lead = special & (position < words[0])  # (n,)
        trail = special & ~lead  # (n,)
        rows = word_attention.weights[:, :, words, :]  # (L, H, n_words, n)
        self._leading += rows[..., lead].sum(axis=(-1, -2), dtype=np.float64)
        self._trailing += rows[..., trail].sum(axis=(-1, -2), dtype=np.float64)
        self._n_words += int(words.size)

    def compute(self) -> SpecialsResult:
        """The sums so far as a :class:`SpecialsResult`."""
        return SpecialsResult(self._layers or (), self._heads or (), self._leading.copy(), self._trailing.copy(),
                              self._n_words, self._n_items)
