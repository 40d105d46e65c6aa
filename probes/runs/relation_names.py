"""Relation names asked for (``--relations``), checked against the data's own before any model loads.

A leaderboard lists a relation only if some word of the data is scored under it: its full label (``nmod:poss``), its
pooled base (``nmod:*``), ``ALL`` or ``ALL-nopunct`` (:func:`probes.analysis.relations.word_keys`); a decoder's
sided names (``amod (head left)``) by their plain name. A name the data never has is refused as soon as the data is
read, with the nearest names (:mod:`difflib`), instead of after the model has run.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from probes.analysis.relations import plain_name, redundant_pools, word_keys
from probes.errors import ConfigError

if TYPE_CHECKING:
    from probes.corpora.types import Sentence

__all__ = ["data_relations", "check_relations"]

#: The most relation names an error line lists when no name is close.
_SHOWN = 8


def data_relations(sentences: Iterable[Sentence]) -> Counter[str]:
    """Every relation name a word of ``sentences`` is scored under, with how many words are."""
    labels = Counter(label for sentence in sentences for label in sentence.relations)
    counts: Counter[str] = Counter()
    for label, n in labels.items():
        for key in word_keys(label):
            counts[key] += n
    return counts


def check_relations(relations: Sequence[str] | None, sentences: Iterable[Sentence], data: str,
                    flag: str = "--relations") -> None:
    """Refuse names in ``relations`` that no word of ``sentences`` (the data named ``data``) is scored under.

    Raises:
        ConfigError: one line naming each unknown relation, the data, and the nearest names of the data (or its most
            frequent ones when none is near).
    """
    if not relations:
        return
    counts = data_relations(sentences)
    missing = [r for r in relations if plain_name(r) not in counts]
    if not missing:
        return
    pools = redundant_pools(list(counts))  # ``det:*`` where no det subtype occurs: valid, but not worth naming
    known = sorted((r for r in counts if r not in pools), key=lambda r: (-counts[r], r))
    hints = []
    for name in missing:
        close = difflib.get_close_matches(plain_name(name), known, n=3, cutoff=0.6)
        hints.append(f"{name!r}" + (f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""))
    listed = ", ".join(known[:_SHOWN]) + (f" and {len(known) - _SHOWN} more" if len(known) > _SHOWN else "")
    which = "relation" if len(missing) == 1 else "relations"
    raise ConfigError(f"{flag}: {which} {', '.join(hints)} not in {data} (its relations: {listed})")
