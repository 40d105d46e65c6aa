"""Word-level attention for one input: the type every analysis consumes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import AlignmentError
from probes.extraction.families import word_start_marks
from probes.results import saveable

__all__ = ["TokenAttention", "WordAttention", "PUNCT_TOKENS", "is_punct_token"]

#: Clark et al.'s punctuation tokens: a token that is exactly "." or "," once the mark a tokenizer puts on a
#: word's first token is taken off (the families' :attr:`~probes.extraction.families.Family.word_start`:
#: byte-level BPE "Ġ", SentencePiece "▁"), so that "Ġ." of RoBERTa or GPT-2 counts as WordPiece's "." does.
PUNCT_TOKENS: frozenset[str] = frozenset({".", ","})
_PUNCT_ENDINGS: tuple[str, ...] = tuple(PUNCT_TOKENS)


def is_punct_token(token: str) -> bool:
    """Whether ``token`` is "." or "," (after its word-start mark, if any)."""
    if not token.endswith(_PUNCT_ENDINGS):  # a mark comes off the front: the end must be "." or "," already
        return False
    for mark in word_start_marks():
        if token.startswith(mark):
            token = token[len(mark):]
            break
    return token in PUNCT_TOKENS


@saveable
@dataclass(frozen=True)
class TokenAttention:
    """Token-level attention maps of one input, as the model ran it (kept with ``keep_tokens=True``).

    Token-level measures (Clark et al. 2019 §3 surface statistics, §6 head distances,
    Kovaleva's patterns, Voita's confidence and positional heads) are defined on these
    maps, specials included, before any pooling to words.

    Attributes:
        weights: ``(n_layers, n_heads, T, T)`` float32 over the input's ``T`` tokens (specials
            included, no padding); rows attend *from*, columns *to*; every row sums to 1
            (a decoder's rows only cover the tokens before and at the row).
        tokens: ``(T,)`` token strings as the tokenizer writes them (``convert_ids_to_tokens``).
        word_of: ``(T,)`` 0-based word index of each token, -1 for special tokens.
        start_special: ``(T,)`` True at specials before the first word ([CLS], ``<s>``, BOS).
        end_special: ``(T,)`` True at the other specials ([SEP], ``</s>``); all False for a model
            without an end special (a decoder), so measures of attention to it are empty, not zero.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"weights": "_ _ tokens tokens", "word_of": "tokens", "start_special": "tokens", "end_special": "tokens"}

    weights: npt.NDArray[np.float32]
    tokens: tuple[str, ...]
    word_of: npt.NDArray[np.intp]
    start_special: npt.NDArray[np.bool_]
    end_special: npt.NDArray[np.bool_]

    @property
    def is_special(self) -> npt.NDArray[np.bool_]:
        """``(T,)`` True at every special token."""
        return self.start_special | self.end_special

    @property
    def n_tokens(self) -> int:
        """Number of tokens T, specials included."""
        return int(self.word_of.shape[0])

    @property
    def punct(self) -> npt.NDArray[np.bool_]:
        """``(T,)`` True at non-special tokens that are "." or "," (:func:`is_punct_token`)."""
        return np.fromiter((is_punct_token(t) for t in self.tokens), dtype=bool, count=len(self.tokens)) \
            & ~self.is_special


@dataclass(frozen=True)
class WordAttention:
    """Word-level attention maps of every requested head for one input.

    Attributes:
        weights: ``(n_layers, n_heads, n, n)`` attention over the ``n`` positions
            (the input's words plus the special tokens kept, in input order);
            rows attend *from*, columns *to*. Rows of word positions sum to 1
            (Clark et al. 2019 §4.1: sum over a word's tokens for columns, mean
            over its tokens for rows).
        is_special: ``(n,)`` True at special-token positions ([CLS], [SEP], BOS ...).
        layers: the 0-based model layers held, in order (axis 0 of ``weights``).
        heads: the 0-based heads held, in order (axis 1 of ``weights``).
        meta: per-input facts from the extractor: ``n_tokens`` (tokens run), ``truncated``
            (number of words cut) and, for an input run in windows, ``windows`` (the
            ``(start, end)`` word ranges, 0-based, end exclusive).
        tokens: the token-level maps of the same layers and heads when the extractor was asked to
            keep them (``keep_tokens=True``) and the input ran whole (not in windows, not
            truncated); None otherwise.
        row_weights, row_positions: set when only some rows were computed (the extractor's rows-only
            mode, :mod:`probes.extraction.rows`): ``row_weights`` ``(n_layers, n_heads, R, n)`` holds the
            rows of the positions ``row_positions`` ``(R,)`` (increasing), and ``weights`` is then a
            read-only all-NaN view of the full shape (nothing was computed there). Read rows with
            :meth:`word_rows`, which serves both forms.
    """

    weights: npt.NDArray[np.floating[Any]]
    is_special: npt.NDArray[np.bool_]
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    tokens: TokenAttention | None = None
    row_weights: npt.NDArray[np.floating[Any]] | None = None
    row_positions: npt.NDArray[np.intp] | None = None

    @property
    def word_index(self) -> npt.NDArray[np.intp]:
        """``(n_words,)`` positions of the words (non-special positions) in ``weights``."""
        return np.flatnonzero(~self.is_special)

    @property
    def n_words(self) -> int:
        """Number of word positions."""
        return int((~self.is_special).sum())

    def word_rows(self, words: npt.ArrayLike) -> npt.NDArray[np.floating[Any]]:
        """``(n_layers, n_heads, len(words), n_words)``: the attention from the given words (0-based) to every
        word, special columns dropped, rows not renormalised; a new array. Gathers only the rows asked for.

        Raises:
            AlignmentError: a row that was not computed (only the rows an analysis named were, and this
                word was not among them).
        """
        positions = self.word_index  # (n_words,)
        asked = positions[np.asarray(words, dtype=np.intp)]  # (R,)
        if self.row_positions is None or self.row_weights is None:
            source, index = self.weights, asked
        else:
            held = self.row_positions
            index = np.searchsorted(held, asked)
            found = np.zeros(asked.shape, dtype=bool) if held.size == 0 else \
                held[np.minimum(index, held.size - 1)] == asked
            if not found.all():
                missing = sorted({int(w) for w in np.asarray(words, dtype=np.intp)[~found]})
                raise AlignmentError(f"the attention rows of words {missing} were not computed: only the rows an "
                                     "analysis names in rows() are (rows-only extraction)")
            source = self.row_weights
        n = len(positions)
        if n and positions[-1] - positions[0] == n - 1:  # words in one run (specials around them): one copy
            return source[:, :, index, positions[0]: positions[0] + n]
        return source[:, :, index, :][..., positions]

    def words_only(self) -> npt.NDArray[np.floating[Any]]:
        """``(n_layers, n_heads, n_words, n_words)``: the maps with special rows and columns dropped.

        Rows are *not* renormalised (as in Clark et al.: argmax does not need it).

        Raises:
            AlignmentError: only some rows were computed (use :meth:`word_rows`).
        """
        if self.row_positions is not None:
            raise AlignmentError(f"only {len(self.row_positions)} rows of these maps were computed (rows-only "
                                 "extraction); read them with word_rows()")
        idx = self.word_index
        if len(idx) == self.is_special.shape[0]:
            return self.weights
        return self.weights[:, :, idx[:, None], idx[None, :]]
