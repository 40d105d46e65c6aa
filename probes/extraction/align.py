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

__all__ = ["FROM_POOLS", "Alignment", "BatchPooler", "align_words", "alignment_from_word_ids", "check_tokenizer",
           "pool_batch", "pool_token_vectors", "words_as_text"]

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


def words_as_text(tokenizer: Any) -> Any:
    """``tokenizer``, changed in place so that a word spelling one of its special tokens ("[SEP]", "[MASK]",
    "<s>", "<|endoftext|>" ...) is tokenized as text, never as that token, and returned.

    Two steps, both needed:

    * ``split_special_tokens = True``: transformers' own switch (the backend's ``encode_special_tokens``), so its
      added-token matcher no longer picks special tokens out of the text; every call (:func:`align_words`, the
      extractor's batches, token counts) then tokenizes words alike;
    * a model whose vocabulary holds a special token's string as an ordinary entry it matches in text (a
      SentencePiece-style Unigram model: Llama 2, XLM-R, DeBERTa-v3 ...) would still give that token for "<s>".
      For such strings only (found by encoding each one), a last pre-tokenizer step cuts every occurrence after
      its first character, so the model never sees it whole (as SentencePiece never matches its control
      symbols in text). The vocabulary and every id are unchanged, and so are the special tokens the tokenizer
      adds around the words. The unknown token is left alone: any text the vocabulary cannot spell becomes it.

    Text that holds no special token's string is tokenized as before. Done once per tokenizer (marked
    ``probes_words_as_text``); a tokenizer saved after it keeps the step, which is then not added again.
    """
    if getattr(tokenizer, "probes_words_as_text", False):
        return tokenizer
    tokenizer.split_special_tokens = True
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        backend.encode_special_tokens = True
        _cut_special_strings(backend, getattr(tokenizer, "unk_token", None))
    tokenizer.probes_words_as_text = True
    return tokenizer


def _cut_special_strings(backend: Any, unk_token: str | None) -> None:
    """Add the pre-tokenizer step of :func:`words_as_text` to ``backend`` for the special tokens (but
    ``unk_token``) its model matches in text; nothing when there are none (a tokenizer saved with the step
    matches none)."""
    import re

    from tokenizers import Regex, pre_tokenizers

    strings = sorted({t.content for i, t in backend.get_added_tokens_decoder().items() if t.special
                      and t.content != unk_token and len(t.content) > 1 and _matched(backend, t.content, i)})
    if not strings:
        return
    pattern = "|".join(f"{re.escape(text[0])}(?={re.escape(text[1:])})" for text in strings)
    cut = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    pre = backend.pre_tokenizer
    backend.pre_tokenizer = cut if pre is None else pre_tokenizers.Sequence([pre, cut])


def _matched(backend: Any, text: str, token_id: int) -> bool:
    """Whether ``backend`` (its added-token matcher off) still gives ``token_id`` for ``text`` alone or between
    letters: its model holds ``text`` as a vocabulary entry it matches (a Unigram model's control pieces)."""
    if backend.model.token_to_id(text) != token_id:
        return False
    contexts = (text, f"a{text}", f"{text}a", f"a {text} a")
    return any(token_id in backend.encode(c, add_special_tokens=False).ids for c in contexts)


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
    """Tokenize ``words`` as pre-split words and align tokens to them (a word spelling a special token is text:
    :func:`words_as_text`).

    ``special_tokens=False`` leaves out the tokenizer's special tokens (every position is a word).
    """
    check_tokenizer(tokenizer)
    enc = words_as_text(tokenizer)(list(words), is_split_into_words=True, add_special_tokens=special_tokens)
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
    out /= np.maximum(counts, 1.0)[:, None]
    return out[~alignment.is_special]


#: From this many tokens (padded) columns are pooled by gathers; below it a product with the 0/1
#: token-to-position matrix is cheaper (measured on CPU: equal near 160 tokens).
_GATHER_TOKENS = 160


@dataclass(frozen=True)
class _Pooling:
    """Indices and weights that pool one padded batch, built once and shared by every layer.

    Words are contiguous token spans, so pooling is a segment sum along each axis, with no cancellation:
    a position's row (or column) starts as its first token's and the word's other tokens are added to
    it in token order. Rows: ``(B, H, T, D)`` is seen as ``B*H*T`` rows, the pooled ``(B, H, n, D)`` as
    ``B*H*n``. Columns (``column_pool``): gathers along the last axis, or for short inputs a product with
    the 0/1 token-to-position matrix.
    """

    row_first: torch.Tensor  # (B*H*n,) first token row of each position row (past an item's n: its row 0)
    row_source: torch.Tensor  # (E,) the other token rows of multi-token words, in token order per head
    row_target: torch.Tensor  # (E,) the position rows they are added to
    # (B, T, n) 1 where token t belongs to position p (short inputs), or gather indices: (B, 1, 1, n+1)
    # first token of each position (n: a dump column), (B, 1, 1, E') the other tokens, (B, 1, 1, E')
    # their positions (padding: n).
    column_pool: torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    weight: torch.Tensor  # (B, 1, n, n) row weight (1/count for mean, else 1) times the column mask
    columns: torch.Tensor  # (B, 1, 1, n) column mask: 1 for an item's own positions, else 0
    token_row: torch.Tensor  # (B, 1, T, 1) position of each token, n for padding tokens (``max``)


def _pooling(alignments: Sequence[Alignment], n_heads: int, n_tok: int, n_pos: int, from_pool: str,
             device: torch.device) -> _Pooling:
    """The :class:`_Pooling` of one padded batch."""
    import torch

    batch = len(alignments)
    first = np.zeros((batch, n_pos + 1), dtype=np.int64)  # (B, n+1) first token of each position; n: dump
    row_weight = np.zeros((batch, n_pos), dtype=np.float32)  # (B, n)
    real = np.zeros((batch, n_pos), dtype=np.float32)  # (B, n)
    token_row = np.full((batch, n_tok), n_pos, dtype=np.int64)  # (B, T)
    # per item: the tokens after each word's first one (T_b',) and their positions (T_b',)
    extras: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
    for b, al in enumerate(alignments):
        position = al.token_position  # (T_b,)
        token = np.arange(al.n_tokens)  # (T_b,)
        starts = np.ones(al.n_tokens, dtype=bool)
        starts[1:] = position[1:] != position[:-1]
        first[b, position[starts]] = token[starts]
        counts = np.bincount(position, minlength=al.n_positions).astype(np.float32)  # (n_b,)
        row_weight[b, : al.n_positions] = 1.0 / counts if from_pool == "mean" else 1.0
        real[b, : al.n_positions] = 1.0
        token_row[b, : al.n_tokens] = position
        extras.append((token[~starts].astype(np.int64), position[~starts].astype(np.int64)))
    heads = np.arange(batch * n_heads, dtype=np.int64).reshape(batch, n_heads, 1)  # (B, H, 1) flat (b, h)
    row_source = [(heads[b] * n_tok + tok).ravel() for b, (tok, _) in enumerate(extras)]  # B x (H*T_b',)
    row_target = [(heads[b] * n_pos + pos).ravel() for b, (_, pos) in enumerate(extras)]

    def tensor(array: npt.NDArray[Any]) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device)

    column_pool: torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    if n_tok >= _GATHER_TOKENS:
        width = max(tok.shape[0] for tok, _ in extras)
        extra_token = np.zeros((batch, width), dtype=np.int64)  # (B, E')
        extra_position = np.full((batch, width), n_pos, dtype=np.int64)  # (B, E'); padding -> dump column
        for b, (tok, pos) in enumerate(extras):
            extra_token[b, : tok.shape[0]], extra_position[b, : pos.shape[0]] = tok, pos
        column_pool = (tensor(first[:, None, None, :]), tensor(extra_token[:, None, None, :]),
                        tensor(extra_position[:, None, None, :]))
    else:
        to_np = np.zeros((batch, n_tok, n_pos), dtype=np.float32)  # (B, T, n)
        for b, al in enumerate(alignments):
            to_np[b, np.arange(al.n_tokens), al.token_position] = 1.0
        column_pool = tensor(to_np)
    return _Pooling(row_first=tensor((heads * n_tok + first[:, None, :n_pos]).ravel()),
                    row_source=tensor(np.concatenate(row_source)), row_target=tensor(np.concatenate(row_target)),
                    column_pool=column_pool, weight=tensor(row_weight[:, None, :, None] * real[:, None, None, :]),
                    columns=tensor(real[:, None, None, :]), token_row=tensor(token_row[:, None, :, None]))


def _pool_rows(rows: torch.Tensor, pooling: _Pooling, extras: bool = True) -> torch.Tensor:
    """``(B*H*T, D)`` token rows (any float dtype) -> ``(B*H*n, D)`` float32 position rows (sums).

    ``extras=False`` takes each position's first token row alone.
    """
    pooled = rows.index_select(0, pooling.row_first).float()  # (B*H*n, D)
    if extras and pooling.row_source.numel():
        extra = rows.index_select(0, pooling.row_source).float()  # (E, D)
        # index_put_ adds in index order (a plain sum); index_add_ and scatter_add_ along rows are many
        # times slower on CPU with 2 threads under load.
        pooled.index_put_((pooling.row_target,), extra, accumulate=True)
    return pooled


def _pool_columns(x: torch.Tensor, pooling: _Pooling) -> torch.Tensor:
    """``(B, H, R, T)`` float32 -> ``(B, H, R, n)``: each row summed over each position's token columns."""
    import torch

    batch, n_heads, n_rows, n_tok = x.shape
    if not isinstance(pooling.column_pool, tuple):
        product = torch.bmm(x.reshape(batch, n_heads * n_rows, n_tok), pooling.column_pool)  # (B, H*R, n)
        return product.view(batch, n_heads, n_rows, -1)
    first, token, position = pooling.column_pool
    pooled = x.gather(-1, first.expand(batch, n_heads, n_rows, -1))  # (B, H, R, n+1); column n: a dump
    if token.shape[-1]:
        extra = x.gather(-1, token.expand(batch, n_heads, n_rows, -1))  # (B, H, R, E')
        pooled.scatter_add_(-1, position.expand(batch, n_heads, n_rows, -1), extra)
    return pooled[..., :-1]


class BatchPooler:
    """Pools one padded batch's token maps to word maps, one layer at a time, on each layer's own device.

    The indices and weights (:class:`_Pooling`) are built once per batch and device and shared by every
    layer, so a caller can pool each layer as soon as the model produces it and drop the token map
    (the extractor's forward hooks do): at most one layer of token attention is then alive.

    Args:
        alignments: one per batch item.
        n_tok: padded tokens T of the batch.
        from_pool: ``mean`` (paper), ``first`` (released code) or ``max`` (renormalised).
    """

    def __init__(self, alignments: Sequence[Alignment], n_tok: int, from_pool: str = "mean") -> None:
        if from_pool not in FROM_POOLS:
            raise ConfigError(f"from_pool must be one of {FROM_POOLS}, found {from_pool!r}")
        self.alignments = list(alignments)
        self.n_tok = int(n_tok)
        self.n_pos = max(al.n_positions for al in self.alignments)
        self.from_pool = from_pool
        self._by_device: dict[tuple[str, int], _Pooling] = {}  # (device, heads) -> its pooling

    def _pooling_for(self, n_heads: int, device: torch.device) -> _Pooling:
        key = (str(device), n_heads)
        if key not in self._by_device:
            self._by_device[key] = _pooling(self.alignments, n_heads, self.n_tok, self.n_pos, self.from_pool, device)
        return self._by_device[key]

    def pool(self, attn: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, H, T, T)`` token attention of one layer (any float dtype) -> ``(B, H, n, n)`` float32.

        ``out``: where to write (a ``(B, H, n, n)`` float32 view, e.g. one layer of a batch's result); on
        another device than ``attn`` (a CPU buffer for a CUDA layer), the layer is pooled on ``attn``'s device
        and copied (``non_blocking`` when ``out`` is pinned: synchronise before reading it).
        """
        import torch

        batch, n_heads, n_tok, _ = attn.shape
        pooling = self._pooling_for(n_heads, attn.device)
        direct = out is not None and out.device == attn.device
        if self.from_pool == "max":
            result = _pool_max(attn, pooling)
        else:
            rows = _pool_rows(attn.reshape(-1, n_tok), pooling, extras=self.from_pool == "mean")  # (B*H*n, T)
            columns = _pool_columns(rows.view(batch, n_heads, self.n_pos, n_tok), pooling)  # (B, H, n, n)
            if direct:
                return torch.mul(columns, pooling.weight, out=out)  # mean: sums / count; padding: 0
            result = columns * pooling.weight
        if out is None:
            return result
        out.copy_(result, non_blocking=out.is_pinned())
        return out

    def pool_rows(self, attn: torch.Tensor, targets: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``(B, H, R, T)`` probability rows of some tokens -> ``(B, H, P, n)`` float32: the rows of the ``P``
        positions they belong to, in the order of :meth:`row_positions` (an item with fewer rows is padded
        with zero rows). The work grows with ``R``, not with ``n x n``.

        ``targets`` ``(B, R)``: the position of each row's token (``n``: a padding row, dropped). The rows of a
        position must be all its tokens' (``mean``) or its first token's (``first``), as :meth:`pool` pools
        them; ``max`` is not pooled from rows. ``out``: where to write (a ``(B, H, P, n)`` float32 view, on
        any device).
        """
        import torch

        if self.from_pool == "max":
            raise ConfigError("from_pool 'max' pools whole maps, not requested rows")
        batch, n_heads, n_rows, _ = attn.shape
        pooling = self._pooling_for(n_heads, attn.device)
        slots, scale = self._row_plan(targets, attn.device)
        columns = _pool_columns(attn.float(), pooling)  # (B, H, R, n)
        n_slots = scale.shape[1]
        compact = torch.zeros((batch, n_heads, n_slots + 1, self.n_pos), dtype=torch.float32, device=attn.device)
        compact.scatter_add_(2, slots[:, None, :, None].expand(batch, n_heads, n_rows, self.n_pos), columns)
        rows = compact[:, :, :n_slots] * scale[:, None, :, None] * pooling.columns  # (B, H, P, n); padding: 0
        if out is None:
            return rows
        out.copy_(rows, non_blocking=out.is_pinned())
        return out

    def row_positions(self, targets: torch.Tensor) -> list[npt.NDArray[np.intp]]:
        """Per item, the positions (increasing) whose rows :meth:`pool_rows` returns for ``targets``."""
        rows = targets.cpu().numpy()  # (B, R)
        return [np.unique(r[r < self.n_pos]).astype(np.intp) for r in rows]

    def _row_plan(self, targets: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """For ``targets`` ``(B, R)``: each row's slot among its item's positions ``(B, R)`` (``P``: padding) and
        the row weight of each slot ``(B, P)`` (1 / tokens for ``mean``, 1 for ``first``). Built once per batch
        and device (every layer shares it)."""
        import torch

        cached = getattr(self, "_plan", None)
        if cached is not None and cached[0] is targets and cached[1] == str(device):
            return cached[2]
        rows = targets.cpu().numpy()  # (B, R)
        plans = [np.unique(r[r < self.n_pos], return_inverse=True, return_counts=True) for r in rows]
        width = max(1, max(len(p[0]) for p in plans))
        slots = np.full(rows.shape, width, dtype=np.int64)  # (B, R)
        scale = np.zeros((rows.shape[0], width), dtype=np.float32)  # (B, P)
        for b, (positions, inverse, counts) in enumerate(plans):
            slots[b, rows[b] < self.n_pos] = inverse
            scale[b, : len(positions)] = 1.0 / counts if self.from_pool == "mean" else 1.0
        plan = (torch.from_numpy(slots).to(device), torch.from_numpy(scale).to(device))
        self._plan = (targets, str(device), plan)
        return plan


def pool_batch(
    attention: torch.Tensor | Sequence[torch.Tensor],
    alignments: Sequence[Alignment],
    from_pool: str = "mean",
) -> torch.Tensor:
    """Pool a padded batch of token maps to word maps, all layers and heads at once, on their device.

    Rows (from) are pooled first, then columns (to): segment sums, O(T^2) per head (see :class:`_Pooling`).

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
    pooler = BatchPooler(alignments, n_tok, from_pool)
    out = torch.empty((batch, len(layers), n_heads, pooler.n_pos, pooler.n_pos), dtype=torch.float32,
                      device=layers[0].device)
    for k, attn in enumerate(layers):  # one layer at a time: no stacked copy of every map
        pooler.pool(attn, out=out[:, k])
    return out


def _pool_max(attn: torch.Tensor, pooling: _Pooling) -> torch.Tensor:
    """``max`` rows of one layer: ``(B, H, T, T)`` -> ``(B, H, n, n)``, each row renormalised to sum 1.

    Columns are summed first, then the element-wise maximum is taken over each position's token rows.
    """
    import torch

    batch, n_heads, n_tok, _ = attn.shape
    n_pos = pooling.columns.shape[-1]
    to_words = _pool_columns(attn.float(), pooling) * pooling.columns  # (B, H, T, n)
    index = pooling.token_row.expand(batch, n_heads, n_tok, n_pos)  # padding tokens -> a dump row n
    pooled = torch.zeros((batch, n_heads, n_pos + 1, n_pos), dtype=torch.float32, device=attn.device)
    pooled.scatter_reduce_(-2, index, to_words, reduce="amax", include_self=True)
    pooled = pooled[:, :, :n_pos, :]  # (B, H, n, n)
    total = pooled.sum(-1, keepdim=True)
    return pooled / torch.where(total > 0, total, torch.ones_like(total))
