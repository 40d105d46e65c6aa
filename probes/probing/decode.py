"""From candidate scores to heads and trees, and the attachment metrics.

* **UAS** (Clark et al. 2019 §5.4): each word's predicted head is the argmax of its
  candidate scores (ROOT + the ``m`` words, self allowed); no tree decoding.
  Scored over words whose gold relation is not ``punct`` (Clark: "it is standard
  to ignore punct"); root words count.
* **UUAS** (Hewitt & Manning 2019): an undirected maximum spanning tree over the
  non-punctuation words, compared with the gold tree's undirected edges between
  non-punctuation words; denominator = number of such gold edges, pooled.

Punctuation means a word whose gold relation (subtype stripped) is ``punct``,
for both metrics (Hewitt & Manning used the PTB punctuation tags; in UD every
PUNCT word is attached as ``punct``, so the two coincide almost always).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from probes.corpora.types import Sentence, base_relation

__all__ = ["is_punct", "argmax_heads", "uas_counts", "max_spanning_tree", "uuas_counts", "gold_edges"]


def is_punct(sentence: Sentence) -> npt.NDArray[np.bool_]:
    """``(m,)`` True for words whose gold relation is ``punct`` (subtypes stripped)."""
    return np.array([base_relation(r) == "punct" for r in sentence.relations], dtype=bool)


def argmax_heads(scores: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Predicted head of each word: argmax over candidates (ROOT = 0, words ``1..m``).

    Args:
        scores: ``(m, m + 1)`` candidate scores, ROOT column first.

    Returns:
        ``(m,)`` heads in CoNLL-U numbering; ties go to the lowest index.
    """
    return np.asarray(scores).argmax(axis=-1).astype(np.int64)


def uas_counts(pred: npt.ArrayLike, sentence: Sentence) -> tuple[int, int]:
    """``(correct, total)`` attachments of one sentence, punctuation excluded."""
    keep = ~is_punct(sentence)
    gold = np.asarray(sentence.heads)
    return int((np.asarray(pred)[keep] == gold[keep]).sum()), int(keep.sum())


def max_spanning_tree(weights: npt.ArrayLike) -> list[tuple[int, int]]:
    """Edges ``(i, j)``, ``i < j``, of an undirected maximum spanning tree (Prim's algorithm).

    Args:
        weights: ``(n, n)`` symmetric edge weights (only ``i != j`` is read).

    Returns:
        ``n - 1`` edges (none for ``n < 2``); ties go to the lowest index.
    """
    w = np.asarray(weights, dtype=np.float64)
    n = w.shape[0]
    if n < 2:
        return []
    in_tree = np.zeros(n, dtype=bool)
    in_tree[0] = True
    best = w[0].copy()  # (n,) best weight linking each node to the tree
    parent = np.zeros(n, dtype=np.int64)
    edges: list[tuple[int, int]] = []
    for _ in range(n - 1):
        out = np.flatnonzero(~in_tree)
        j = int(out[np.argmax(best[out])])
        i = int(parent[j])
        edges.append((min(i, j), max(i, j)))
        in_tree[j] = True
        better = (w[j] > best) & ~in_tree
        best[better] = w[j][better]
        parent[better] = j
    return edges


def gold_edges(sentence: Sentence) -> set[tuple[int, int]]:
    """Undirected gold edges between non-punctuation words, as 0-based ``(i, j)``, ``i < j``."""
    punct = is_punct(sentence)
    out = set()
    for i, h in enumerate(sentence.heads):
        if h == 0 or punct[i] or punct[h - 1]:
            continue
        out.add((min(i, h - 1), max(i, h - 1)))
    return out


def uuas_counts(scores: npt.ArrayLike, sentence: Sentence) -> tuple[int, int]:
    """``(correct, total)`` undirected edges of one sentence (Hewitt & Manning's UUAS).

    Args:
        scores: ``(m, m + 1)`` candidate log-probabilities (or any scores where higher
            means more likely), ROOT column first; the undirected weight of words
            ``i, j`` is ``scores[i, j] + scores[j, i]`` (both attachment directions).
        sentence: the gold sentence.
    """
    s = np.asarray(scores, dtype=np.float64)[:, 1:]  # (m, m) word candidates only
    keep = np.flatnonzero(~is_punct(sentence))
    gold = gold_edges(sentence)
    if len(keep) < 2:
        return 0, len(gold)
    sub = s[np.ix_(keep, keep)]
    pred = {(int(keep[a]), int(keep[b])) for a, b in max_spanning_tree(sub + sub.T)}
    return len(pred & gold), len(gold)
