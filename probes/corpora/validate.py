"""Checks that a sentence's heads form one dependency tree rooted at ROOT.

Pure functions over plain sequences, so every reader (CoNLL-U, CoNLL-X, spaCy)
shares one definition of "valid tree" and one wording of the errors.
"""

from __future__ import annotations

from collections.abc import Sequence

from probes.errors import AnnotationError

__all__ = ["check_tree", "find_cycle", "tree_depths"]


def find_cycle(heads: Sequence[int]) -> list[int] | None:
    """A cycle in ``heads`` (1-based, 0 = ROOT) as 1-based word ids, or None.

    Heads must already be in ``0..n``. Linear time: every word is walked once.
    """
    n = len(heads)
    state = [0] * (n + 1)  # 0 unseen, 1 on the current path, 2 reaches ROOT
    state[0] = 2
    for start in range(1, n + 1):
        path: list[int] = []
        node = start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = heads[node - 1]
        if state[node] == 1:  # walked back into the current path
            return path[path.index(node) :]
        for visited in path:
            state[visited] = 2
    return None


def check_tree(
    heads: Sequence[int],
    *,
    sent_id: str,
    path: str | None,
    lines: Sequence[int] | None = None,
    first_line: int | None = None,
) -> None:
    """Raise :class:`AnnotationError` unless ``heads`` is a tree with exactly one root.

    Args:
        heads: 1-based heads, 0 = ROOT, one per word.
        sent_id: used in the message.
        path: the file, for the ``path:line:`` prefix.
        lines: the 1-based file line of each word, to point at the offending word.
        first_line: the line used when no single word is at fault.
    """
    n = len(heads)

    def where(word: int) -> int | None:  # word is 1-based
        return lines[word - 1] if lines else first_line

    for i, head in enumerate(heads, 1):
        if not 0 <= head <= n:
            raise AnnotationError(
                f"sentence '{sent_id}': expected the head of word {i} in 0..{n}, found {head}",
                path=path,
                line=where(i),
            )
    roots = [i for i, head in enumerate(heads, 1) if head == 0]
    if not roots:
        raise AnnotationError(
            f"sentence '{sent_id}': expected exactly one word with head 0 (root), found none",
            path=path,
            line=first_line if first_line is not None else where(1),
        )
    if len(roots) > 1:
        raise AnnotationError(
            f"sentence '{sent_id}': expected exactly one word with head 0 (root), "
            f"found {len(roots)} (words {', '.join(map(str, roots))})",
            path=path,
            line=where(roots[1]),
        )
    cycle = find_cycle(heads)
    if cycle:
        first = min(cycle)
        ring = " -> ".join(str(w) for w in cycle + [cycle[0]])
        raise AnnotationError(
            f"sentence '{sent_id}': expected a tree, found a cycle of heads {ring}",
            path=path,
            line=where(first),
        )


def tree_depths(heads: Sequence[int]) -> list[int]:
    """Distance of each word to ROOT (the root word has depth 1); heads must form a tree."""
    depth = [0] * len(heads)
    for i in range(len(heads)):
        chain, j = [], i
        while j >= 0 and depth[j] == 0:
            chain.append(j)
            j = heads[j] - 1
        d = depth[j] if j >= 0 else 0
        for node in reversed(chain):
            d += 1
            depth[node] = d
    return depth
