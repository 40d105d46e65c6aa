"""Sentences tokenized once into length-sorted batches, each token mapped to its word.

Every importance and pruning computation re-runs the model many times on the same sentences; encoding and
batching happen once (:func:`encode_sentences`, :func:`make_batches`), and each objective adds what it
needs to a batch once, on the unmodified model (:meth:`probes.importance.objectives.Objective.prepare`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError, InputError

__all__ = ["EncodedSentence", "Batch", "encode_sentences", "make_batches", "DEFAULT_BATCH_TOKENS"]

#: Padded tokens per batch (rows x longest row): bounds activation memory whatever the sentence lengths.
DEFAULT_BATCH_TOKENS = 4096


@dataclass(frozen=True)
class EncodedSentence:
    """One sentence ready for the model.

    Attributes:
        index: 0-based position in the input sequence (seeds and per-sentence tables use it).
        sent_id: the sentence id ("" for plain word lists).
        words: the words.
        relations: each word's dependency relation (() when the input has none).
        input_ids: ``(T,)`` token ids with the tokenizer's specials.
        word_index: ``(T,)`` the word of each token, -1 for specials.
        n_words_dropped: words cut from the end to fit the model (``truncate=True``), 0 when whole.
    """

    index: int
    sent_id: str
    words: tuple[str, ...]
    relations: tuple[str, ...]
    input_ids: npt.NDArray[np.int64]
    word_index: npt.NDArray[np.int64]
    n_words_dropped: int = 0


@dataclass
class Batch:
    """Sentences padded on the right to one width ``T``; tensors on the model's device.

    Attributes:
        sentences: the encoded sentences, in batch order.
        input_ids: ``(B, T)`` long.
        attention_mask: ``(B, T)`` long, 1 on real tokens.
        word_index: ``(B, T)`` long, each token's word, -1 for specials and padding.
        extras: what objectives add in ``prepare`` (masked ids, labels, reference states ...), by name.
    """

    sentences: tuple[EncodedSentence, ...]
    input_ids: Any
    attention_mask: Any
    word_index: Any
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def indices(self) -> npt.NDArray[np.int64]:
        """``(B,)`` each row's sentence index."""
        return np.array([s.index for s in self.sentences], dtype=np.int64)

    def model_inputs(self) -> dict[str, Any]:
        """``{"input_ids", "attention_mask"}`` for ``model(**batch.model_inputs())``."""
        return {"input_ids": self.extras.get("input_ids", self.input_ids), "attention_mask": self.attention_mask}


def _words_and_relations(item: Any) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """``(sent_id, words, relations)`` of a ``Sentence`` or a plain list of words."""
    words = getattr(item, "words", item)
    if isinstance(words, str) or not isinstance(words, Sequence) or not all(isinstance(w, str) for w in words):
        raise InputError(f"importance: expected a Sentence or a list of words, found {type(item).__name__}")
    relations = tuple(getattr(item, "relations", ()) or ())
    if relations and len(relations) != len(words):
        raise InputError(f"importance: sentence {getattr(item, 'sent_id', '')!r} has {len(words)} words but "
                         f"{len(relations)} relations; expected one relation per word")
    return str(getattr(item, "sent_id", "") or ""), tuple(words), relations


def _encode(tokenizer: Any, words: Sequence[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(input_ids (T,), word_index (T,))`` of ``words`` with the tokenizer's specials."""
    enc = tokenizer(list(words), is_split_into_words=True, add_special_tokens=True)
    ids = np.asarray(enc["input_ids"], dtype=np.int64)  # (T,)
    return ids, np.array([-1 if w is None else w for w in enc.word_ids()], dtype=np.int64)  # (T,)


def _longest_prefix(tokenizer: Any, words: Sequence[str], max_tokens: int) -> int:
    """The most leading words whose tokens (with specials) fit in ``max_tokens`` (binary search; 0 if none)."""
    low, high = 0, len(words)
    while low < high:
        mid = (low + high + 1) // 2
        if _encode(tokenizer, words[:mid])[0].shape[0] <= max_tokens:
            low = mid
        else:
            high = mid - 1
    return low


def encode_sentences(tokenizer: Any, sentences: Sequence[Any], *, max_tokens: int | None = None,
                     truncate: bool = False) -> tuple[list[EncodedSentence], list[str]]:
    """``(encoded, skipped ids)``: each sentence (a ``Sentence`` or a list of words) tokenized as pre-split words.

    Sentences longer than ``max_tokens`` (with specials) are skipped and named, or with ``truncate`` cut to
    their longest prefix of whole words that fits (``n_words_dropped`` says how many went); sentences without
    words are skipped and named. Relations are kept whole (``nmod:poss``); the probe objective keeps the part
    before ``:``. A skipped sentence is named by its ``sent_id``, or ``#<index>`` (0-based) when it has none.
    The byte-level BPE tokenizers need ``add_prefix_space=True``
    (:func:`probes.extraction.loading.load_tokenizer` sets it).
    """
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ConfigError(f"max_tokens: expected a whole number >= 1 or None, found {max_tokens!r}")
    encoded: list[EncodedSentence] = []
    skipped: list[str] = []
    for index, item in enumerate(sentences):
        sent_id, words, relations = _words_and_relations(item)
        ids, word_index = _encode(tokenizer, words) if words else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        dropped = 0
        if truncate and max_tokens is not None and ids.shape[0] > max_tokens:
            keep = _longest_prefix(tokenizer, words, max_tokens)
            dropped, words, relations = len(words) - keep, words[:keep], relations[:keep]
            ids, word_index = _encode(tokenizer, words) if words else (ids[:0], word_index[:0])
        if not words or (max_tokens is not None and ids.shape[0] > max_tokens) or not (word_index >= 0).any():
            skipped.append(sent_id or f"#{index}")
            continue
        encoded.append(EncodedSentence(index, sent_id, words, relations, ids, word_index, dropped))
    return encoded, skipped


def _pad(rows: Sequence[npt.NDArray[np.int64]], width: int, fill: int) -> npt.NDArray[np.int64]:
    """``(B, width)`` the rows padded on the right with ``fill``."""
    out = np.full((len(rows), width), fill, dtype=np.int64)
    for b, row in enumerate(rows):
        out[b, :row.shape[0]] = row
    return out


def _batch(chunk: Sequence[EncodedSentence], pad_id: int, device: Any) -> Batch:
    """One :class:`Batch` of ``chunk``, tensors on ``device``."""
    import torch

    width = max(s.input_ids.shape[0] for s in chunk)
    ids = _pad([s.input_ids for s in chunk], width, pad_id)  # (B, T)
    mask = _pad([np.ones_like(s.input_ids) for s in chunk], width, 0)  # (B, T)
    words = _pad([s.word_index for s in chunk], width, -1)  # (B, T)
    input_ids, attention_mask, word_index = (torch.from_numpy(a).to(device) for a in (ids, mask, words))
    return Batch(tuple(chunk), input_ids, attention_mask, word_index)


def make_batches(encoded: Sequence[EncodedSentence], *, pad_id: int, max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
                 max_batch_size: int = 64, device: Any = None) -> list[Batch]:
    """Length-sorted batches (deterministic: by length, then index) of at most ``max_batch_tokens`` padded tokens.

    A batch grows while (rows x longest row) stays within ``max_batch_tokens`` and rows within
    ``max_batch_size``; a sentence longer than the budget alone gets a batch of its own.
    """
    for name, value in (("max_batch_tokens", max_batch_tokens), ("max_batch_size", max_batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}: expected a whole number >= 1, found {value!r}")
    order = sorted(encoded, key=lambda s: (s.input_ids.shape[0], s.index))
    batches: list[Batch] = []
    chunk: list[EncodedSentence] = []
    for sentence in order:
        width = sentence.input_ids.shape[0]  # the longest so far: sorted by length
        if chunk and ((len(chunk) + 1) * width > max_batch_tokens or len(chunk) + 1 > max_batch_size):
            batches.append(_batch(chunk, pad_id, device))
            chunk = []
        chunk.append(sentence)
    if chunk:
        batches.append(_batch(chunk, pad_id, device))
    return batches


# ----------------------------------------------------------------------------- shared by scores and ablations
def _as_batches(batches: Any) -> list[Any]:
    """``batches`` as a list (they are read several times); InputError when there is none."""
    out = list(batches)
    if not out:
        raise InputError("importance: expected at least one batch of sentences, found none")
    return out


def _shape(model: Any) -> tuple[int, int]:
    """``(L, H)``: the model's layers and heads per layer (the hooked output projections)."""
    from probes.extraction.families import head_sites

    sites = head_sites(model)
    return len(sites), sites[0].n_heads


def _in_index_order(rows: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]
                    ) -> npt.NDArray[np.float64]:
    """``(N, ...)`` per-batch ``(indices (B,), values (B, ...))`` stacked in sentence index order."""
    indices = np.concatenate([i for i, _ in rows])
    if np.unique(indices).size != indices.size:
        raise InputError("importance: expected each sentence in one batch only, found a sentence index twice")
    values = np.concatenate([v for _, v in rows], axis=0)
    return values[np.argsort(indices, kind="stable")]
