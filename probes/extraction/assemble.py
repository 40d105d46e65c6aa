"""From the results of an item's jobs to its :class:`~probes.extraction.attention.WordAttention`.

An item run whole (or truncated) keeps its job's maps as they are (a whole one also its token maps, when kept);
an item run in windows is put back together by :func:`combine_windows`: each word's row comes from the window
in which the word is most central (ties: the earlier window), its columns for words outside that window are 0;
leading special tokens take their rows from the first window, trailing ones from the last, and a word's
attention to its window's special tokens goes to the matching special columns, so every row still sums to 1.
Rows-only results (:mod:`probes.extraction.rows`) keep only the rows computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ModelOutputError
from probes.extraction.align import Alignment
from probes.extraction.attention import TokenAttention, WordAttention
from probes.extraction.planning import Job

__all__ = ["combine_windows", "single", "token_attention", "word_attention"]


def single(job: Job, n_words: int, layers: tuple[int, ...], heads: tuple[int, ...], tokenizer: Any
           ) -> WordAttention:
    """The WordAttention of an item run as one job: whole (with its token maps, when kept) or truncated."""
    al = job.alignment
    if job.start == 0 and al.n_words == n_words:
        meta = {"n_tokens": al.n_tokens, "truncated": 0}
        tokens = None if job.tokens is None else token_attention(al, job.tokens, tokenizer)
        return word_attention(job.result, job.row_positions, al.is_special, meta, layers, heads, tokens)
    meta = {"n_tokens": al.n_tokens, "truncated": n_words - al.n_words}  # truncated
    return word_attention(job.result, job.row_positions, al.is_special, meta, layers, heads)


def word_attention(maps: npt.NDArray[np.float32], positions: npt.NDArray[np.intp] | None,
                   is_special: npt.NDArray[np.bool_], meta: dict[str, Any], layers: tuple[int, ...],
                   heads: tuple[int, ...], tokens: TokenAttention | None = None) -> WordAttention:
    """A WordAttention of full maps ``(L', H', n, n)``, or (``positions`` given) of the rows ``(L', H', P, n)`` of
    ``positions`` alone, its ``weights`` then a read-only all-NaN view (nothing computed there)."""
    if positions is None:
        return WordAttention(maps, is_special, layers, heads, meta, tokens)
    n = is_special.shape[0]
    nothing = np.broadcast_to(np.float32(np.nan), (len(layers), len(heads), n, n))
    return WordAttention(nothing, is_special, layers, heads, meta, tokens, maps, positions)


def token_attention(alignment: Alignment, maps: npt.NDArray[np.float32], tokenizer: Any) -> TokenAttention:
    """The token-level view of one whole input: its maps ``(L', H', T, T)`` with token strings, words and
    specials."""
    special_position = alignment.is_special  # (n,)
    word_of_position = np.cumsum(~special_position) - 1  # (n,)
    position = alignment.token_position  # (T,)
    special = special_position[position]  # (T,)
    word_of = np.where(special, -1, word_of_position[position]).astype(np.intp)  # (T,)
    first_word = int(np.argmax(~special)) if (~special).any() else special.shape[0]
    start = special & (np.arange(special.shape[0]) < first_word)  # (T,)
    names = tuple(tokenizer.convert_ids_to_tokens(alignment.input_ids.tolist()))
    return TokenAttention(maps, names, word_of, start, special & ~start)


def combine_windows(jobs: Sequence[Job], n_words: int, layers: tuple[int, ...], heads: tuple[int, ...]
                    ) -> WordAttention:
    """One item's WordAttention from the results of its windows, by the rule of
    :mod:`probes.extraction.extractor`: each word's row from the window where it is most central."""
    lead = int(np.argmax(~jobs[0].alignment.is_special))  # leading specials
    trail = int(jobs[0].alignment.n_special_tokens) - lead
    n = lead + n_words + trail
    # rows only (some window ran so): each window's computed rows, as positions of its own (a window run
    # whole holds them all); the item keeps the rows it has, in position order, instead of full maps
    compact = any(job.row_positions is not None for job in jobs)
    jobs_rows = [np.arange(job.alignment.n_positions) if job.row_positions is None else job.row_positions
                 for job in jobs]
    taken: list[npt.NDArray[np.intp]] = []  # global positions of the rows kept, per window
    blocks: list[npt.NDArray[np.float32]] = []  # their rows (L', H', r, n)
    out = None if compact else np.zeros((len(layers), len(heads), n, n), dtype=np.float32)
    # Each word's row from the window where it is most central (ties: earlier window).
    best = np.full(n_words, -1)
    best_dist = np.full(n_words, np.inf)
    for k, job in enumerate(jobs):
        s, w = job.start, job.alignment.n_words
        dist = np.abs(np.arange(s, s + w) - (s + (w - 1) / 2))
        better = dist < best_dist[s : s + w]
        best[s : s + w][better] = k
        best_dist[s : s + w][better] = dist[better]
    for k, job in enumerate(jobs):
        s, w = job.start, job.alignment.n_words
        al = job.alignment
        if al.n_special_tokens != lead + trail or int(np.argmax(~al.is_special)) != lead:
            raise ModelOutputError("windows of one input got different special tokens; cannot combine them")
        local_to_global = np.concatenate([np.arange(lead), lead + s + np.arange(w),
                                          lead + n_words + np.arange(trail)])  # (n_k,)
        rows = np.flatnonzero(best[s : s + w] == k) + lead  # local word rows to take
        if k == 0:
            rows = np.concatenate([np.arange(lead), rows])
        if k == len(jobs) - 1:
            rows = np.concatenate([rows, lead + w + np.arange(trail)])
        if out is None:  # rows only: the rows this window computed, of those it is responsible for
            mine = jobs_rows[k]
            rows = rows[np.isin(rows, mine)]
            values = job.result[:, :, np.searchsorted(mine, rows), :]  # (L', H', r, n_k)
            if len(rows):
                taken.append(local_to_global[rows])
                block = np.zeros((*values.shape[:3], n), dtype=np.float32)  # (L', H', r, n)
                block[..., local_to_global] = values
                blocks.append(block)
            continue
        out[:, :, local_to_global[rows, None], local_to_global[None, :]] = job.result[:, :, rows, :]
    is_special = np.zeros(n, dtype=bool)
    is_special[:lead] = True
    is_special[lead + n_words :] = True
    meta = {"n_tokens": sum(j.alignment.n_tokens for j in jobs), "truncated": 0,
            "windows": [(j.start, j.start + j.alignment.n_words) for j in jobs]}
    if out is not None:
        return WordAttention(out, is_special, layers, heads, meta)
    positions = np.concatenate(taken) if taken else np.zeros(0, dtype=np.intp)
    order = np.argsort(positions, kind="stable")
    maps = np.concatenate(blocks, axis=2)[:, :, order] if blocks else \
        np.zeros((len(layers), len(heads), 0, n), dtype=np.float32)
    return word_attention(maps, positions[order].astype(np.intp), is_special, meta, layers, heads)
