"""Synthetic sentences with a planted syntactic head, for tests, demos and sanity checks.

Every head attends at random (Dirichlet rows) except the planted one, whose row
for each word puts ``strength`` of its mass on the word's gold head (on the
trailing special token for the root word). A probe that works must find it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from probes.corpora.types import Sentence
from probes.extraction.attention import WordAttention

__all__ = ["planted_pairs"]

_RELATIONS = ("nsubj", "obj", "det", "amod", "punct")


def planted_pairs(
    n_sentences: int,
    *,
    n_layers: int = 2,
    n_heads: int = 3,
    planted: tuple[int, int] = (1, 2),
    strength: float = 0.9,
    min_words: int = 3,
    max_words: int = 12,
    vocab_size: int = 40,
    random_state: int = 0,
) -> Iterator[tuple[Sentence, WordAttention]]:
    """``(Sentence, WordAttention)`` pairs with one planted dependency head.

    Args:
        n_sentences: how many pairs.
        n_layers, n_heads: shape of the head grid.
        planted: 0-based ``(layer, head)`` that points at the gold head.
        strength: attention mass the planted head puts on the gold head.
        min_words, max_words: sentence length range.
        vocab_size: number of word types (``w0``, ``w1`` ...).
        random_state: seed.

    Yields:
        Sentences with random trees (``[CLS] w1..wm [SEP]`` attention, specials flagged).
    """
    rng = np.random.default_rng(random_state)
    for s in range(n_sentences):
        m = int(rng.integers(min_words, max_words + 1))
        order = rng.permutation(m)  # random recursive tree: each node's head comes earlier in `order`
        heads = np.zeros(m, dtype=np.int64)
        for pos in range(1, m):
            heads[order[pos]] = order[int(rng.integers(0, pos))] + 1
        relations = tuple(str(r) for r in rng.choice(_RELATIONS, size=m))
        relations = tuple("root" if h == 0 else r for h, r in zip(heads, relations))
        words = tuple(f"w{int(t)}" for t in rng.integers(0, vocab_size, size=m))
        n = m + 2
        weights = rng.dirichlet(np.ones(n), size=(n_layers, n_heads, n)).astype(np.float32)  # (L, H, n, n)
        target = np.where(heads == 0, n - 1, heads)  # gold head position; ROOT -> [SEP]
        rows = np.arange(1, m + 1)
        planted_map = weights[planted[0], planted[1]]
        planted_map[rows] *= 1.0 - strength
        planted_map[rows, target] += strength
        sentence = Sentence(
            sent_id=f"synthetic-{s}",
            words=words,
            heads=tuple(int(h) for h in heads),
            relations=relations,
            upos=tuple("PUNCT" if r == "punct" else "X" for r in relations),
        )
        special = np.zeros(n, dtype=bool)
        special[[0, n - 1]] = True
        yield sentence, WordAttention(weights, special, tuple(range(n_layers)), tuple(range(n_heads)))
