"""Held-out selection inside one dataset: a fixed hash of each item's id sends it to one of two halves.

When a best head (or a best offset) is chosen on the very data it is reported on, the choice
inflates the reported accuracy and the interval ignores it (Clark et al. 2019 select and report
on the same data). Without a separate selection split, :func:`half_of` splits the data in two by
a fixed hash of the sentence id (or, for documents and their windows, the document id): heads
are chosen on the ``"select"`` half and reported on the ``"report"`` half. The hash is salted
with :data:`SPLIT_SALT` and does not depend on the order, the number of items or the machine,
so a sentence always falls in the same half.

:class:`Half` wraps any analysis so that it sees only one half's items; two wrapped copies run
in one pass over the data (``stream(pairs, {"select": Half(A(), "select"), "report": Half(A(), "report")})``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from probes.analysis.base import Accumulator
from probes.errors import ConfigError
from probes.extraction.attention import WordAttention

__all__ = ["SPLIT_SALT", "SPLIT_RULE", "HALVES", "half_of", "split_key", "Half"]

#: Salt of the selection hash (recorded in run records; changing it changes every split).
SPLIT_SALT = "probes-selection-v1"
#: The two halves: heads are chosen on the first and reported on the second.
HALVES: tuple[str, str] = ("select", "report")
#: The rule, as written in tables and run records.
SPLIT_RULE = (f"items split in two by sha256('{SPLIT_SALT}:' + id), even first byte = selection half; "
              "id = sentence id, or document id for documents and their windows")

R = TypeVar("R")


def split_key(item: Any) -> str:
    """The id an item is hashed by: a sentence's ``sent_id``; a document's (or a window's) ``doc_id``."""
    if getattr(item, "sent_id", None) is not None:
        return str(item.sent_id)
    if getattr(item, "doc_id", None) is not None:
        return str(item.doc_id)
    raise ConfigError(f"cannot split {type(item).__name__} items in halves: they have no sent_id or doc_id")


def half_of(key: str) -> str:
    """``"select"`` or ``"report"``: the half of the item with id ``key`` (fixed, order-free)."""
    digest = hashlib.sha256(f"{SPLIT_SALT}:{key}".encode()).digest()
    return HALVES[digest[0] & 1]


class Half(Generic[R]):
    """An analysis that sees only the items of one half (see :func:`half_of`); the rest are ignored."""

    def __init__(self, inner: Accumulator[R], half: str) -> None:
        if half not in HALVES:
            raise ConfigError(f"half: expected one of {', '.join(HALVES)}, found {half!r}")
        self.inner, self.half = inner, half
        self.items = getattr(inner, "items", "any")
        self.n_seen = 0

    def update(self, item: Any, word_attention: WordAttention) -> None:
        """Pass ``item`` on when it belongs to this half."""
        if half_of(split_key(item)) == self.half:
            self.n_seen += 1
            self.inner.update(item, word_attention)

    def rows(self, item: Any) -> Sequence[int] | None:
        """The wrapped analysis' rows for an item of this half; none for the other half's items."""
        if half_of(split_key(item)) != self.half:
            return []
        return self.inner.rows(item) if hasattr(self.inner, "rows") else None

    def compute(self) -> R:
        """The wrapped analysis' result over this half."""
        return self.inner.compute()

    def merge(self, other: Half[R]) -> None:
        """Merge another shard of the same half."""
        if other.half != self.half:
            raise ConfigError(f"cannot merge the {other.half!r} half into the {self.half!r} half")
        self.inner.merge(other.inner)
        self.n_seen += other.n_seen

    def reset(self) -> None:
        """Forget everything seen."""
        self.inner.reset()
        self.n_seen = 0
