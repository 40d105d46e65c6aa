"""The atlas in short: the first section of ``atlas.md``.

How many of Clark et al.'s findings hold for this model, each finding in a sentence or two with its numbers (long
lists of heads cut to their first few: the findings table under it holds them all), how many heads have a role,
and how layers and heads are numbered. Everything comes from :func:`probes.reports.atlas.text.findings` and the
heads table; nothing is computed here that the tables do not show.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from probes.heads.naming import INDEXING_NOTE
from probes.reports.prose import clauses

__all__ = ["atlas_findings", "shorten"]

#: Characters of a finding's own text in the opening section (the findings table holds it whole).
SHORT = 420
#: Head names shown from a longer list.
SHOWN = 5

_NAME_PATTERN = r"\d+-\d+(?: \(\d+(?:\.\d+)?\))?"  # a head (1-based layer-head), perhaps with its score
_HEADS = re.compile(rf"(?:{_NAME_PATTERN}, ){{{SHOWN},}}{_NAME_PATTERN}")  # more than SHOWN of them in a row
_NAME = re.compile(_NAME_PATTERN)
_HOLDS = {"yes": "holds", "partly": "holds in part", "no": "does not hold"}


def _cut(match: re.Match[str]) -> str:
    names = _NAME.findall(match.group(0))
    return f"{', '.join(names[:SHOWN])} and {len(names) - SHOWN} more"


def shorten(text: str, limit: int = SHORT) -> str:
    """``text`` with every list of more than :data:`SHOWN` heads cut to its first few (``1-1, 1-2 ... and 7
    more``), then its ``;`` clauses kept while they fit ``limit`` characters (``...`` when some are left out)."""
    text = _HEADS.sub(_cut, text)
    kept: list[str] = []
    for part in clauses(text):
        if kept and len("; ".join([*kept, part])) > limit:
            return "; ".join(kept) + "; ... (the whole finding in the table below)"
        kept.append(part)
    return "; ".join(kept)


def _finding(finding: Any) -> str:
    """One finding in short: the topic, whether it holds (nothing said where it cannot be checked), this model's
    numbers."""
    holds = _HOLDS.get(finding.holds)
    topic = finding.topic[:1].upper() + finding.topic[1:]
    return f"{topic}{f' ({holds})' if holds else ''}: {shorten(finding.here)}."


def _roles(table: Any) -> str:
    """How many heads have a role, by role, from the heads table."""
    n = len(table)
    positional = int((table["positional"] != 0).sum()) if "positional" in table.columns else 0
    rare = int(table["rare_word"].astype(bool).sum()) if "rare_word" in table.columns else 0
    syntactic = int(table["syntactic"].astype(bool).sum()) if "syntactic" in table.columns else 0
    listed = "; the heads with a role are listed below" if positional or rare or syntactic else ""
    return (f"Of the {n} heads, {positional} are positional, {rare} attend to rare words and {syntactic} carry a "
            f"syntactic relation (held out, Holm over the model's heads){listed}.")


def atlas_findings(found: Sequence[Any], table: Any) -> list[str]:
    """The opening paragraphs of ``atlas.md``: the count of findings that hold, each finding in short, the heads
    with a role, and the one line on numbering."""
    counts = {key: sum(f.holds == key for f in found) for key in ("yes", "partly", "no")}
    unchecked = len(found) - sum(counts.values())
    lead = (f"Clark et al.'s findings on BERT-base, checked on this model by the rules at the end: {counts['yes']} "
            f"hold, {counts['partly']} hold in part and {counts['no']} do not"
            + (f"; {unchecked} are described without a verdict." if unchecked else "."))
    return [lead, *(_finding(f) for f in found), _roles(table), f"{INDEXING_NOTE[:1].upper()}{INDEXING_NOTE[1:]}."]
