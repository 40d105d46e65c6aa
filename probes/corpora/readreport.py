"""What a reader read and what it skipped (``on_error="skip"``), so nothing is dropped silently."""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from dataclasses import dataclass, field

from probes.errors import InputError, SkippedItemWarning, located
from probes.results import Result

__all__ = ["ReadReport", "check_on_error"]

logger = logging.getLogger("probes")


def check_on_error(on_error: str) -> None:
    """Reject anything but ``"raise"`` and ``"skip"``."""
    from probes.errors import ConfigError

    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error: expected 'raise' or 'skip', found {on_error!r}")


@dataclass
class ReadReport(Result):
    """Counts of a read: pass one in, read it after the iterator is exhausted.

    Attributes:
        sentences: sentences yielded.
        words: syntactic words yielded.
        documents: documents yielded (document readers only).
        skipped: the errors of the sentences (or documents) skipped, in file order.
        dropped: things read but not kept, by kind (e.g. mentions made only of
            empty nodes, a bridging link listed twice and counted once), with counts.
    """

    sentences: int = 0
    words: int = 0
    documents: int = 0
    skipped: list[InputError] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)

    @property
    def n_skipped(self) -> int:
        """Number of skipped sentences or documents."""
        return len(self.skipped)

    def reasons(self) -> Counter[str]:
        """How many were skipped for each error class (``AnnotationError`` ...)."""
        return Counter(type(err).__name__ for err in self.skipped)

    def skip(self, err: InputError) -> None:
        """Record a skipped item and warn with its ``path:line:`` message."""
        self.skipped.append(err)
        logger.warning("skipped: %s", err)
        warnings.warn(f"skipped: {err}", SkippedItemWarning, stacklevel=3)

    def note(self, kind: str, message: str, *, path: str | None = None, line: int | None = None) -> None:
        """Count something read but not kept as given (``dropped[kind]``: a repeat merged, say) and log where."""
        self.dropped[kind] += 1
        logger.warning("note: %s", located(path, line, message))

    def summary(self) -> str:
        """One line: what was read and what was skipped, by reason."""
        text = f"read {self.sentences} sentences, {self.words} words"
        if self.documents:
            text += f", {self.documents} documents"
        if self.skipped:
            why = ", ".join(f"{n} {k}" for k, n in sorted(self.reasons().items()))
            text += f"; skipped {self.n_skipped} ({why})"
        if self.dropped:
            text += "; not kept: " + ", ".join(f"{n} {k}" for k, n in sorted(self.dropped.items()))
        return text
