"""Random recursive trees for null treebanks: valid, seeded, words and labels kept."""

from __future__ import annotations

import numpy as np

from probes.corpora.null_trees import random_trees
from probes.corpora.types import Sentence


def _reaches_root(heads: tuple[int, ...]) -> bool:
    """Every word reaches ROOT by following heads, without a cycle."""
    for i in range(len(heads)):
        seen, j = set(), i + 1
        while j != 0:
            if j in seen or not 1 <= j <= len(heads):
                return False
            seen.add(j)
            j = heads[j - 1]
    return True


def test_random_trees_are_valid_seeded_and_keep_words_and_labels():
    rng = np.random.default_rng(0)
    sents = []
    for k in range(300):
        n = int(rng.integers(1, 15))
        sents.append(Sentence(f"s{k}", tuple(f"w{i}" for i in range(n)), tuple([0] + list(range(1, n))),
                              tuple(["root"] + ["dep"] * (n - 1))))
    trees = random_trees(sents, 1)
    assert random_trees(sents, 1) == trees and random_trees(sents, 2) != trees
    for before, after in zip(sents, trees):
        assert (after.sent_id, after.words, after.relations) == (before.sent_id, before.words, before.relations)
        assert after.heads.count(0) == 1 and _reaches_root(after.heads)
        assert all(h != i + 1 for i, h in enumerate(after.heads))
    # the heads are redrawn: the chain 0 <- 1 <- 2 ... is rarely kept, and the root is anywhere
    kept = np.mean([a == b for s, t in zip(sents, trees) for a, b in zip(s.heads, t.heads)])
    assert kept < 0.4
    assert np.mean([t.heads.index(0) == 0 for t in trees if t.n_words > 5]) < 0.3
