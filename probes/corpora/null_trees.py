"""Null treebanks: the same sentences with their trees redrawn at random, so no head can predict them.

:func:`random_trees` keeps every word, label and other column of each sentence and redraws its
heads as a *random recursive tree*: the words are put in a uniformly random order; the first is
the one root (head 0) and each later word attaches to a uniformly chosen word placed before it.
The result is always a valid tree (one root, every word reaches it, no cycle). The tree does not
depend on the words, so the head of a word is equally likely to be any other word (or ROOT):
every head of a model and every fixed offset ``k != 0`` is exactly at chance, and every "head
beats the baseline" finding on these trees is a false positive; a leaderboard's flagged rate on
them measures its selection bias (issue 10; ``benchmarks/null_trees.py``). The root is drawn at
random too: keeping the annotated root (usually the main verb) would let a head that finds the
verb beat the baseline, since early words of a random recursive tree have many dependents.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import numpy as np

from probes.corpora.types import Sentence

__all__ = ["random_tree", "random_trees"]


def random_tree(n_words: int, rng: np.random.Generator) -> tuple[int, ...]:
    """1-based heads (0 = ROOT) of a random recursive tree over ``n_words`` words in a uniformly random order."""
    order = [int(i) for i in rng.permutation(n_words)]
    heads = [0] * n_words
    for k in range(1, n_words):
        heads[order[k]] = order[int(rng.integers(0, k))] + 1  # a word placed before it (or the root)
    return tuple(heads)


def random_trees(sentences: Iterable[Sentence], seed: int) -> list[Sentence]:
    """``sentences`` with heads redrawn as random recursive trees (words, labels, ids kept); the same
    ``seed`` gives the same trees."""
    rng = np.random.default_rng(seed)
    out = []
    for sentence in sentences:
        out.append(dataclasses.replace(sentence, heads=random_tree(sentence.n_words, rng)))
    return out
