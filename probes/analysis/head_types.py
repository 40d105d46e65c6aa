"""Head types decoders are known for: previous-token, duplicate-token and induction heads, for any family.

The reference is TransformerLens' head detector (``transformer_lens/head_detector.py`` in
TransformerLensOrg/TransformerLens: ``detect_head``, ``get_previous_token_head_detection_pattern``,
``get_duplicate_token_head_detection_pattern``, ``get_induction_head_detection_pattern``,
``compute_head_attention_similarity_score``). What is followed, exactly:

* the detection patterns ``P`` (``(T, T)`` 0/1, lower triangular, over the whole input, specials included):
  previous token ``P[i, i-1] = 1``; duplicate token ``P[i, j] = 1`` for ``j < i`` with ``ids[j] == ids[i]``;
  induction: the duplicate pattern shifted one column right (``P[i, j] = 1`` for ``1 <= j <= i`` with
  ``ids[j-1] == ids[i]`` and ``j-1 < i``: the token *after* an earlier occurrence);
* their ``error_measure="mul"`` (the default): ``score = sum(A * P) / sum(A)`` on one input's ``(T, T)`` map
  ``A`` of a head, after ``exclude_bos`` (column 0 set to 0) and ``exclude_current_token`` (the diagonal set to
  0); both default to False, as in TransformerLens;
* a list of inputs scores each input and averages the scores (``torch.stack(batch_scores).mean(0)``).

Where this differs, on purpose: TransformerLens' list path does not pass ``exclude_bos`` /
``exclude_current_token`` on (each input is scored with the defaults); here they are passed on (with the
defaults the numbers are the same). TransformerLens always puts a BOS at column 0 (``to_tokens``); here
``exclude_bos`` zeroes the columns of the tokenizer's own leading specials (BOS, [CLS]) and nothing when the
tokenizer adds none (GPT-2: column 0 is then a random token). An input whose ``sum(A)`` is 0 after the
exclusions (TransformerLens: NaN) is left out of the average.

Inputs (:func:`repeated_sequences`): ``n`` sequences of ``length`` token ids drawn (seeded
``numpy.random.Generator``, without replacement within a sequence, so each id has exactly one other copy)
from the tokenizer's ordinary vocabulary (special ids left out), each repeated twice, with the specials the
tokenizer adds around a text (BOS for Llama, [CLS] ... [SEP] for BERT, none for GPT-2).

Encoders see both ways, so three bidirectional counterparts are scored for them too (not for a decoder,
whose rows cannot see the tokens after them): next token ``P[i, i+1] = 1``; duplicate token, bidirectional:
``P[i, j] = 1`` for ``j != i`` with ``ids[j] == ids[i]`` (the other copy, earlier or later); induction,
bidirectional: ``P[i, j] = 1`` when ``j - 1 != i`` and ``ids[j-1] == ids[i]`` (the token after the other copy,
earlier or later). Same score, same options.

An ideal head's score (:attr:`HeadTypeScores.ceiling`) is the score of the map that puts every row with a
non-empty pattern row uniformly on it and every other row on itself: rows with nothing to find still count in
``sum(A)``, so on ``[BOS] r r`` an induction head scores at most ``L / (2L + 1)``, not 1.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.results import Result, head_axes, head_names, long_table

__all__ = ["CAUSAL_TYPES", "BIDIRECTIONAL_TYPES", "DEFAULT_SEQUENCES", "DEFAULT_LENGTH", "REFERENCE",
           "HeadTypeScores", "head_types", "score_maps", "similarity_score", "repeated_sequences", "PATTERNS",
           "previous_token_pattern", "duplicate_token_pattern", "induction_pattern", "next_token_pattern",
           "duplicate_bidirectional_pattern", "induction_bidirectional_pattern", "ideal_map"]

#: Sequences and tokens per sequence (each repeated twice) of the default inputs.
DEFAULT_SEQUENCES = 20
DEFAULT_LENGTH = 20
#: Where the definitions come from.
REFERENCE = "TransformerLens transformer_lens/head_detector.py (detect_head, error_measure='mul')"


def _ids(ids: npt.ArrayLike) -> npt.NDArray[np.int64]:
    out = np.asarray(ids, dtype=np.int64)
    if out.ndim != 1:
        raise ConfigError(f"head-type pattern: expected a 1-d sequence of token ids, found shape {out.shape}")
    return out


def previous_token_pattern(ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(T, T)``: ``P[i, i-1] = 1`` (TransformerLens ``get_previous_token_head_detection_pattern``)."""
    return np.eye(len(_ids(ids)), k=-1)


def next_token_pattern(ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(T, T)``: ``P[i, i+1] = 1`` (the bidirectional counterpart of the previous-token pattern)."""
    return np.eye(len(_ids(ids)), k=1)


def _same(ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(T, T)``: 1 where ``ids[i] == ids[j]`` and ``i != j``."""
    ids = _ids(ids)
    same = (ids[:, None] == ids[None, :]).astype(np.float64)
    np.fill_diagonal(same, 0.0)
    return same


def _shift_right(pattern: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The pattern's columns moved one to the right, column 0 empty (``P'[i, j] = P[i, j-1]``)."""
    out = np.zeros_like(pattern)
    out[:, 1:] = pattern[:, :-1]
    return out


def duplicate_token_pattern(ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(T, T)``: earlier copies of the row's token (TransformerLens ``get_duplicate_token_head_detection_pattern``)."""
    return np.tril(_same(ids))


def induction_pattern(ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(T, T)``: the token after an earlier copy of the row's token, ``tril`` of the duplicate pattern shifted
    one column right (TransformerLens ``get_induction_head_detection_pattern``)."""
    return np.tril(_shift_right(duplicate_token_pattern(ids)))


def duplicate_bidirectional_pattern(ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(T, T)``: every other copy of the row's token, earlier or later."""
    return _same(ids)


def induction_bidirectional_pattern(ids: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(T, T)``: the token after every other copy of the row's token, earlier or later."""
    return _shift_right(_same(ids))


#: Every head type and its detection pattern (of one input's token ids).
PATTERNS: dict[str, Callable[[npt.ArrayLike], npt.NDArray[np.float64]]] = {
    "previous_token": previous_token_pattern,
    "duplicate_token": duplicate_token_pattern,
    "induction": induction_pattern,
    "next_token": next_token_pattern,
    "duplicate_token_bidirectional": duplicate_bidirectional_pattern,
    "induction_bidirectional": induction_bidirectional_pattern,
}
#: The types scored for every family (TransformerLens' three).
CAUSAL_TYPES: tuple[str, ...] = ("previous_token", "duplicate_token", "induction")
#: The types scored for encoders only (not defined for a decoder: its rows do not see later tokens).
BIDIRECTIONAL_TYPES: tuple[str, ...] = ("next_token", "duplicate_token_bidirectional", "induction_bidirectional")


def similarity_score(attention: npt.ArrayLike, pattern: npt.ArrayLike, *, exclude_bos: bool = False,
                     exclude_current_token: bool = False, bos_columns: int = 1) -> npt.NDArray[np.float64]:
    """TransformerLens' ``mul`` score of each ``(T, T)`` map in ``attention`` ``(..., T, T)``: ``(...)``.

    ``sum(A * P) / sum(A)`` after ``exclude_bos`` (the first ``bos_columns`` columns set to 0; TransformerLens:
    column 0) and ``exclude_current_token`` (the diagonal set to 0). NaN where ``sum(A)`` is 0 after them.
    """
    maps = np.array(attention, dtype=np.float64)  # (..., T, T), a copy: the exclusions write into it
    pattern = np.asarray(pattern, dtype=np.float64)
    if maps.shape[-2:] != pattern.shape or pattern.shape[0] != pattern.shape[1]:
        raise ConfigError(f"head-type score: expected square maps matching the pattern {pattern.shape}, "
                          f"found {maps.shape}")
    if exclude_bos:
        maps[..., :, :bos_columns] = 0.0
    if exclude_current_token:
        n = pattern.shape[0]
        maps[..., np.arange(n), np.arange(n)] = 0.0
    total = maps.sum(axis=(-1, -2))
    hit = (maps * pattern).sum(axis=(-1, -2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, hit / np.where(total > 0, total, 1.0), np.nan)


def ideal_map(pattern: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(T, T)``: each row with a non-empty pattern row uniform over it, every other row on itself."""
    pattern = np.asarray(pattern, dtype=np.float64)
    width = pattern.sum(axis=1, keepdims=True)  # (T, 1)
    return np.where(width > 0, pattern / np.where(width > 0, width, 1.0), np.eye(pattern.shape[0]))


def repeated_sequences(vocabulary: Sequence[int] | npt.ArrayLike, n: int, length: int, *, seed: int = 0,
                       prefix: Sequence[int] = (), suffix: Sequence[int] = ()) -> npt.NDArray[np.int64]:
    """``(n, len(prefix) + 2 * length + len(suffix))`` ids: ``prefix + r + r + suffix`` per sequence, ``r`` being
    ``length`` distinct ids of ``vocabulary`` drawn by ``numpy.random.default_rng(seed)``."""
    vocabulary = np.asarray(vocabulary, dtype=np.int64)
    if length < 2 or n < 1:
        raise ConfigError(f"head-type inputs: expected at least 1 sequence of at least 2 tokens, found {n} of {length}")
    if len(vocabulary) < length:
        raise ConfigError(f"head-type inputs: {length} distinct tokens per sequence need a vocabulary that large; "
                          f"the tokenizer has {len(vocabulary)} ordinary tokens")
    rng = np.random.default_rng(seed)
    rows = [np.concatenate([prefix, r, r, suffix]).astype(np.int64)
            for r in (rng.choice(vocabulary, size=length, replace=False) for _ in range(n))]
    return np.stack(rows)


def score_maps(maps: Sequence[npt.NDArray[np.floating[Any]]], sequences: npt.NDArray[np.int64],
               types: Sequence[str], *, exclude_bos: bool = False, exclude_current_token: bool = False,
               bos_columns: int = 1) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(scores, ceilings)``, each ``(K, L, H)`` and ``(K,)``: the mean over inputs of each type's score.

    ``maps``: per input its ``(L, H, T, T)`` token maps; ``sequences``: ``(n, T)`` their token ids.
    """
    options: dict[str, Any] = {"exclude_bos": exclude_bos, "exclude_current_token": exclude_current_token,
               "bos_columns": bos_columns}
    shape = np.shape(maps[0])[:2] if len(maps) else (0, 0)
    sums, counts = np.zeros((len(types),) + shape), np.zeros((len(types),) + shape)
    ceilings = np.zeros(len(types))
    for weights, ids in zip(maps, sequences):
        for k, name in enumerate(types):
            pattern = PATTERNS[name](ids)
            score = similarity_score(weights, pattern, **options)  # (L, H)
            defined = ~np.isnan(score)
            sums[k] += np.where(defined, score, 0.0)
            counts[k] += defined
            ceilings[k] += float(np.nan_to_num(similarity_score(ideal_map(pattern), pattern, **options)))
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return scores, ceilings / max(len(maps), 1)


@dataclass(frozen=True)
class HeadTypeScores(Result):
    """Per-head scores of each head type on repeated random sequences (see the module docstring).

    Attributes:
        layers, heads: 0-based model layers and heads (axes of the arrays).
        types: the types scored, in the order of ``scores`` (a decoder's: :data:`CAUSAL_TYPES`).
        scores: ``(K, L, H)`` TransformerLens' ``mul`` score, mean over the sequences.
        ceiling: ``(K,)`` the score of an ideal head of each type on the same sequences.
        n_sequences, length, seed: the inputs (each sequence ``length`` tokens, twice).
        prefix, suffix: the special ids around each sequence.
        causal: whether the model is a decoder (the bidirectional types are then not defined).
        exclude_bos, exclude_current_token: TransformerLens' options used.
        rule: the definitions, in words.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"scores": "types layers heads", "ceiling": "types"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    types: tuple[str, ...]
    scores: npt.NDArray[np.float64]
    ceiling: npt.NDArray[np.float64]
    n_sequences: int
    length: int
    seed: int = 0
    prefix: tuple[int, ...] = ()
    suffix: tuple[int, ...] = ()
    causal: bool = True
    exclude_bos: bool = False
    exclude_current_token: bool = False
    rule: str = ""

    def score(self, name: str) -> npt.NDArray[np.float64]:
        """``(L, H)`` scores of head type ``name``."""
        if name not in self.types:
            raise ConfigError(f"head type: expected one of {', '.join(self.types)}, found {name!r}")
        return self.scores[self.types.index(name)]

    def relative(self, name: str) -> npt.NDArray[np.float64]:
        """``(L, H)`` scores of ``name`` as a share of an ideal head's (:attr:`ceiling`)."""
        ceiling = float(self.ceiling[self.types.index(name)]) if name in self.types else 0.0
        return self.score(name) / ceiling if ceiling > 0 else np.full(self.scores.shape[1:], np.nan)

    def found(self, name: str, share: float = 0.5) -> list[tuple[int, int]]:
        """0-based ``(layer, head)`` of the heads of type ``name``: score at least ``share`` of an ideal head's,
        strongest first."""
        relative = self.relative(name)
        layer, head = np.nonzero(np.nan_to_num(relative, nan=-1.0) >= share)
        order = np.argsort(-relative[layer, head], kind="stable")
        return [(int(self.layers[layer[i]]), int(self.heads[head[i]])) for i in order]

    def to_pandas(self) -> Any:
        """One row per head: ``layer, head`` (1-based), ``head_name`` and a column per type."""
        table = long_table(head_axes(self.layers, self.heads), {name: self.score(name) for name in self.types})
        table.insert(2, "head_name", head_names(table))
        return table


def head_types(extractor: Any, *, n_sequences: int = DEFAULT_SEQUENCES, length: int = DEFAULT_LENGTH,
               seed: int = 0, exclude_bos: bool = False, exclude_current_token: bool = False) -> HeadTypeScores:
    """Score every kept head of ``extractor``'s model for each head type (see the module docstring).

    ``extractor``: an :class:`~probes.extraction.extractor.AttentionExtractor`; its model runs on the token ids
    (:meth:`~probes.extraction.extractor.AttentionExtractor.token_maps`).

    Raises:
        ConfigError: too few sequences or tokens, a vocabulary smaller than ``length``, or sequences longer
            than the model takes.
    """
    for name, value, least in (("n_sequences", n_sequences, 1), ("length", length, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"head types: {name} must be a whole number >= {least}, found {value!r}")
    prefix, suffix = special_ids(extractor.tokenizer)
    total = len(prefix) + 2 * length + len(suffix)
    if total > extractor.max_tokens:
        raise ConfigError(f"head types: sequences of 2 x {length} tokens and {len(prefix) + len(suffix)} specials "
                          f"({total}) are longer than the model takes ({extractor.max_tokens}); use a smaller length")
    sequences = repeated_sequences(ordinary_ids(extractor.tokenizer), n_sequences, length, seed=seed,
                                   prefix=prefix, suffix=suffix)
    causal = bool(getattr(extractor, "_is_decoder", False))
    types = CAUSAL_TYPES if causal else CAUSAL_TYPES + BIDIRECTIONAL_TYPES
    maps = extractor.token_maps(sequences.tolist())  # n x (L', H', T, T)
    scores, ceiling = score_maps(maps, sequences, types, exclude_bos=exclude_bos and bool(prefix),
                                 exclude_current_token=exclude_current_token, bos_columns=len(prefix))
    return HeadTypeScores(tuple(extractor.layers), tuple(extractor.heads), tuple(types), scores, ceiling,
                          n_sequences, length, seed, tuple(prefix), tuple(suffix), causal, bool(exclude_bos),
                          bool(exclude_current_token), rule_text(n_sequences, length, causal, exclude_bos,
                                                                 exclude_current_token))


def rule_text(n_sequences: int, length: int, causal: bool, exclude_bos: bool, exclude_current_token: bool) -> str:
    """The definitions behind the scores, in one sentence (for reports)."""
    both = "" if causal else ("; encoders also: next token, duplicate and induction toward the other copy "
                              "(earlier or later)")
    return (f"{REFERENCE}: score = sum(A * P) / sum(A) over each input's token map, mean over {n_sequences} "
            f"sequences of {length} distinct random ordinary tokens repeated twice (with the tokenizer's specials); "
            f"P = previous token, earlier copies of the token (duplicate), the token after an earlier copy "
            f"(induction){both}; exclude_bos={exclude_bos}, exclude_current_token={exclude_current_token}; "
            "a head is of a type when its score is at least half an ideal head's on the same inputs")


def special_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids the tokenizer adds before and after a text: ``(prefix, suffix)`` (e.g. ``[BOS]``, ``[]``)."""
    plain = tokenizer(["a"], is_split_into_words=True, add_special_tokens=False)["input_ids"]
    full = tokenizer(["a"], is_split_into_words=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start: start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain):])
    return [], []


def ordinary_ids(tokenizer: Any) -> npt.NDArray[np.int64]:
    """Every id of the tokenizer's vocabulary but its special ones, increasing."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    return np.array([i for i in range(len(tokenizer)) if i not in special], dtype=np.int64)
