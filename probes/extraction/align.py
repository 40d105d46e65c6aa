"""Word alignment and pooling of token attention to word attention (Clark et al. 2019 §4.1).

A sentence's gold words are tokenized as pre-split words, so every tokenizer
family (WordPiece, byte-level BPE with the prefix space, SentencePiece) tells
through ``word_ids()`` which tokens make up which word. Each word becomes one
*position*; each special token ([CLS], [SEP], ``<s>``, BOS ...) stays a position
of its own, flagged in ``is_special``.

Pooling rule (the paper's): attention TO a word is the **sum** over its token
columns; attention FROM a word is the **mean** over its token rows (taken after
the column sums), so every row still sums to 1. ``from_pool="first"`` takes the
row of the word's first token (what the released code does), ``"max"`` the
element-wise maximum of the rows, renormalised to sum to 1 (unused in the paper).

This module holds no torch import at module level: :func:`pool_batch` imports
torch lazily, so ``import probes`` stays light.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.errors import AlignmentError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["FROM_POOLS", "Alignment", "align_words", "alignment_from_word_ids", "check_tokenizer",
           "pooling_matrices", "pool_batch", "pool_token_vectors"]

#: How the rows of a word's tokens are combined into the word's row.
FROM_POOLS: tuple[str, ...] = ("mean", "first", "max")


@dataclass(frozen=True, eq=False)
class Alignment:
    """Which token belongs to which position (word or special token) for one input.

    Attributes:
        input_ids: ``(T,)`` token ids, special tokens included, as the model sees them.
        token_position: ``(T,)`` position (0..n-1) of each token.
        is_special: ``(n,)`` True where the position is a special token.
        word_tokens: ``(n_words,)`` number of tokens of each word (each >= 1).
    """

    input_ids: npt.NDArray[np.int64]
    token_position: npt.NDArray[np.intp]
    is_special: npt.NDArray[np.bool_]
    word_tokens: npt.NDArray[np.intp]

    @property
    def n_tokens(self) -> int:
        """Number of tokens T, special tokens included."""
        return int(self.input_ids.shape[0])

    @property
    def n_positions(self) -> int:
        """Number of positions n: words plus special tokens."""
        return int(self.is_special.shape[0])

    @property
    def n_words(self) -> int:
        """Number of words."""
        return int(self.word_tokens.shape[0])

    @property
    def n_special_tokens(self) -> int:
        """Number of special tokens the tokenizer adds around the words."""
        return int(self.is_special.sum())


def check_tokenizer(tokenizer: Any) -> None:
    """Raise :class:`ConfigError` unless ``tokenizer`` is a fast (Rust) tokenizer with ``word_ids()``."""
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(
            f"{type(tokenizer).__name__} is a slow (Python) tokenizer; word alignment needs a fast "
            "tokenizer, which gives word_ids(): load it with AutoTokenizer.from_pretrained(..., use_fast=True)"
        )


def alignment_from_word_ids(
    input_ids: Sequence[int],
    word_ids: Sequence[int | None],
    words: Sequence[str],
    *,
    item_id: str | None = None,
    path: str | None = None,
    line: int | None = None,
) -> Alignment:
    """Build an :class:`Alignment` from a tokenizer's ``word_ids()`` (``None`` = special token).

    Raises:
        AlignmentError: a word maps to no token, or the tokens of a word are not contiguous.
    """
    n_words = len(words)
    wid = np.array([-1 if w is None else w for w in word_ids], dtype=np.intp)  # (T,)
    counts = np.bincount(wid[wid >= 0], minlength=n_words)[:n_words] if n_words else np.zeros(0, np.intp)
    if n_words and (counts == 0).any():
        bad = int(np.flatnonzero(counts == 0)[0])
        where = f"sentence {item_id!r}: " if item_id is not None else ""
        raise AlignmentError(
            f"{where}word {bad + 1} (1-based) {words[bad]!r} maps to no token of the tokenizer; "
            "expected every word to give at least one token (normalise or remove such words before "
            "extraction)",
            path=path,
            line=line,
        )
    # A new position starts at every special token and at every change of word.
    special = wid < 0
    starts = np.ones(wid.shape[0], dtype=bool)
    starts[1:] = special[1:] | (wid[1:] != wid[:-1])
    token_position = np.cumsum(starts) - 1  # (T,)
    word_of_start = wid[starts]  # (n,)
    found = word_of_start[word_of_start >= 0]
    if found.shape[0] != n_words or (found != np.arange(n_words)).any():
        raise AlignmentError(
            f"sentence {item_id!r}: the tokens of a word are not contiguous or not in word order; "
            f"expected word ids 0..{n_words - 1} in order, found {found.tolist()}",
            path=path,
            line=line,
        )
    return Alignment(
        input_ids=np.asarray(input_ids, dtype=np.int64),
        token_position=token_position.astype(np.intp),
        is_special=word_of_start < 0,
        word_tokens=counts.astype(np.intp),
    )


def align_words(
    tokenizer: Any,
    words: Sequence[str],
    *,
    item_id: str | None = None,
    path: str | None = None,
    line: int | None = None,
    special_tokens: bool = True,
) -> Alignment:
    """Tokenize ``words`` as pre-split words and align tokens to them.

    ``special_tokens=False`` leaves out the tokenizer's special tokens (every position is a word).
    """
    check_tokenizer(tokenizer)
    enc = tokenizer(list(words), is_split_into_words=True, add_special_tokens=special_tokens)
    return alignment_from_word_ids(enc["input_ids"], enc.word_ids(), words, item_id=item_id, path=path,
                                   line=line)


def pool_token_vectors(vectors: npt.ArrayLike, alignment: Alignment) -> npt.NDArray[np.float32]:
    """Word vectors from token vectors by the module's row rule: the mean over each word's tokens.

    Args:
        vectors: ``(T, d)`` one vector per token of ``alignment`` (e.g. input embeddings).
        alignment: the input's alignment.

    Returns:
        ``(n_words, d)`` float32; special-token positions are dropped.
    """
    vectors = np.asarray(vectors, dtype=np.float32)  # (T, d)
    out = np.zeros((alignment.n_positions, vectors.shape[1]), dtype=np.float32)  # (n, d)
    np.add.at(out, alignment.token_position, vectors)
    counts = np.bincount(alignment.token_position, minlength=alignment.n_positions).astype(np.float32)  # (n,)
    out = out / np.maximum(counts, 1.0)[:, None]
    return out[~alignment.is_special]


def pooling_matrices(
    alignments: Sequence[Alignment], n_tokens: int, n_positions: int, from_pool: str = "mean"
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Pooling matrices of a padded batch.

    Returns:
        ``P_from`` ``(B, n, T)``: row weights (1/count for ``mean``, one-hot first token for
        ``first``; for ``max`` the indicator, used only for the shape) and ``P_to`` ``(B, T, n)``:
        token-to-position indicator. Padding tokens and positions get all-zero rows/columns.
    """
    if from_pool not in FROM_POOLS:
        raise ConfigError(f"from_pool must be one of {FROM_POOLS}, found {from_pool!r}")
    p_to = np.zeros((len(alignments), n_tokens, n_positions), dtype=np.float32)  # (B, T, n)
    p_from = np.zeros((len(alignments), n_positions, n_tokens), dtype=np.float32)  # (B, n, T)
    for b, al in enumerate(alignments):
        t = np.arange(al.n_tokens)
        p_to[b, t, al.token_position] = 1.0
        if from_pool == "first":
            first = np.ones(al.n_tokens, dtype=bool)
            first[1:] = al.token_position[1:] != al.token_position[:-1]
            p_from[b, al.token_position[first], t[first]] = 1.0
        else:
            counts = np.bincount(al.token_position, minlength=al.n_positions).astype(np.float32)
            p_from[b, al.token_position, t] = 1.0 / counts[al.token_position]
    return p_from, p_to


def pool_batch(
    attention: torch.Tensor | Sequence[torch.Tensor],
    alignments: Sequence[Alignment],
    from_pool: str = "mean",
) -> torch.Tensor:
    """Pool a padded batch of token maps to word maps, all layers and heads at once, on their device.

    Args:
        attention: ``(B, L, H, T, T)`` token attention (rows = from, columns = to), or a sequence of
            ``L`` tensors ``(B, H, T, T)`` (a model's per-layer outputs, pooled without stacking them),
            padded after each item's tokens, consistently with the alignments.
        alignments: one per batch item.
        from_pool: ``mean`` (paper), ``first`` (released code) or ``max`` (renormalised).

    Returns:
        ``(B, L, H, n, n)`` float32 with ``n`` the largest number of positions; rows and columns past
        an item's own ``n`` are zero.
    """
    import torch

    layers = list(attention.unbind(1)) if isinstance(attention, torch.Tensor) else list(attention)
    batch, n_heads, n_tok, _ = layers[0].shape
    n_pos = max(al.n_positions for al in alignments)
    device = layers[0].device
    # The pooling matrices are built once per batch and shared by every layer.
    p_from_np, p_to_np = pooling_matrices(alignments, n_tok, n_pos, from_pool)
    p_to = torch.from_numpy(p_to_np).to(device)  # (B, T, n)
    p_from = torch.from_numpy(p_from_np).to(device)[:, None]  # (B, 1, n, T), broadcast over heads
    index = None
    if from_pool == "max":
        index_np = np.full((batch, n_tok), n_pos, dtype=np.int64)  # padding tokens -> a dump row n_pos
        for b, al in enumerate(alignments):
            index_np[b, : al.n_tokens] = al.token_position
        index = torch.from_numpy(index_np).to(device)[:, None, :, None].expand(batch, n_heads, n_tok, n_pos)
    out = torch.empty((batch, len(layers), n_heads, n_pos, n_pos), dtype=torch.float32, device=device)
    for k, attn in enumerate(layers):  # one layer at a time: no stacked copy of every map
        attn = attn.float()  # (B, H, T, T)
        # Columns: sum over each word's tokens; one bmm without broadcasting copies.
        to_words = torch.bmm(attn.reshape(batch, n_heads * n_tok, n_tok), p_to)  # (B, H*T, n)
        to_words = to_words.view(batch, n_heads, n_tok, n_pos)  # (B, H, T, n)
        if index is None:
            # Rows: mean (or first) over each word's token rows.
            out[:, k] = torch.matmul(p_from, to_words)  # (B, H, n, n)
            continue
        # max: element-wise maximum over a position's token rows, then renormalise each row.
        pooled = torch.zeros((batch, n_heads, n_pos + 1, n_pos), dtype=torch.float32, device=device)
        pooled.scatter_reduce_(-2, index, to_words, reduce="amax", include_self=True)
        pooled = pooled[:, :, :n_pos, :]  # (B, H, n, n)
        total = pooled.sum(-1, keepdim=True)
        out[:, k].copy_(pooled / torch.where(total > 0, total, torch.ones_like(total)))
    return out
