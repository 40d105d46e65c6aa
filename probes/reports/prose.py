"""Prose for people: the short answers every report opens with, and the rules that keep its paragraphs short.

Every Markdown report `probes` writes (an experiment's ``report.md``, ``leaderboard.md``, ``atlas.md``,
``matching.md``, ``coref_leaderboard.md``, ``parsers.md``, ``importance.md``, a training run's ``report.md`` ...)
opens, right under its title, with its answers (``## Answers`` or ``## In short``): each finding in a few sentences
with its number and its test. Tables, figures and the rules behind the numbers come after. No prose paragraph is
longer than :data:`MAX_PARAGRAPH` characters: runs of numbers go into tables, long rules into lists
(:func:`clauses`). :func:`paragraphs` is how a paragraph is told from a table, a heading, a list or a code block.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

__all__ = ["MAX_PARAGRAPH", "IN_SHORT", "ANSWERS", "paragraphs", "long_paragraphs", "sections", "clauses",
           "opening", "bullets", "plural", "joined", "sentences", "pack"]

#: The longest prose paragraph a report holds (characters).
MAX_PARAGRAPH = 600
#: The heading of a report's opening section, where there are no numbered questions.
IN_SHORT = "In short"
#: The heading of the opening section of a report that answers numbered questions (the experiment report).
ANSWERS = "Answers"

_LIST = re.compile(r"^\s*([-*+]|\d+[.)])\s")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _kind(block: list[str]) -> str:
    """What a blank-line separated block of Markdown is: heading, table, list, code, html or paragraph."""
    first = block[0]
    if first.lstrip().startswith("#"):
        return "heading"
    if first.lstrip().startswith("|"):
        return "table"
    if _LIST.match(first):
        return "list"
    if _FENCE.match(first) or first.startswith(("    ", "\t")):
        return "code"
    if first.lstrip().startswith("<"):
        return "html"
    return "paragraph"


def _blocks(markdown: str) -> list[list[str]]:
    """The blank-line separated blocks of ``markdown`` (a fenced code block, blank lines and all, is one block)."""
    blocks: list[list[str]] = []
    current: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            current.append(line)
            continue
        if not line.strip() and not fenced:
            if current:
                blocks.append(current)
            current = []
            continue
        current.append(line)
    if current:
        blocks.append(current)
    return blocks


def paragraphs(markdown: str) -> list[str]:
    """The prose paragraphs of ``markdown``: blank-line separated blocks that are not a table, a heading, a list,
    a code block or an HTML block, each joined into one line."""
    return [" ".join(line.strip() for line in block) for block in _blocks(markdown) if _kind(block) == "paragraph"]


def long_paragraphs(markdown: str, limit: int = MAX_PARAGRAPH) -> list[str]:
    """The prose paragraphs of ``markdown`` longer than ``limit`` characters (none, in a report of `probes`)."""
    return [p for p in paragraphs(markdown) if len(p) > limit]


def sections(markdown: str) -> list[tuple[str, str]]:
    """``(heading, body)`` of every ``##`` section of ``markdown``, in order (the title and what precedes the
    first section are left out; a ``###`` subsection stays inside its section's body)."""
    out: list[tuple[str, str]] = []
    for part in re.split(r"^(?=## )", markdown, flags=re.M):
        if part.startswith("## "):
            heading, _, body = part.partition("\n")
            out.append((heading[3:].strip(), body))
    return out


def clauses(text: str) -> list[str]:
    """``text`` split at its top-level ``; `` (never inside brackets), each clause stripped, a final period
    dropped: a long rule becomes a list of short items."""
    parts: list[str] = []
    depth, start = 0, 0
    for k, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        elif char == ";" and depth == 0 and text[k + 1 : k + 2] == " ":
            parts.append(text[start:k])
            start = k + 2
    parts.append(text[start:])
    cleaned = [p.strip() for p in parts]
    if cleaned and cleaned[-1].endswith(".") and not cleaned[-1].endswith(".."):
        cleaned[-1] = cleaned[-1][:-1]
    return [p for p in cleaned if p]


def opening(findings: Iterable[str], heading: str = IN_SHORT) -> list[str]:
    """The Markdown lines of a report's opening section: ``## heading`` and one paragraph per finding."""
    lines = [f"## {heading}", ""]
    for finding in findings:
        if finding.strip():
            lines += [finding.strip(), ""]
    return lines


def bullets(items: Iterable[str]) -> list[str]:
    """Markdown list lines, one per item, and a blank line after them."""
    lines = [f"- {item}" for item in items if item]
    return [*lines, ""] if lines else []


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 head``, ``3 heads`` (``many``: the plural when it is not ``word + 's'``)."""
    return f"{count} {word if count == 1 else many or word + 's'}"


def joined(items: Sequence[str], last: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = [i for i in items if i]
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {last} {items[-1]}"


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences: after a ``.``, ``!`` or ``?`` followed by a space and a capital letter."""
    return [s for s in _SENTENCE_END.split(text.strip()) if s]


def pack(text: str | Iterable[str], limit: int = MAX_PARAGRAPH) -> list[str]:
    """Sentences (``text``'s, or the given ones) gathered in order into paragraphs of at most ``limit`` characters
    (a sentence longer than that stays a paragraph of its own)."""
    parts = sentences(text) if isinstance(text, str) else [s.strip() for s in text if s.strip()]
    out: list[str] = []
    for part in parts:
        if out and len(out[-1]) + 1 + len(part) <= limit:
            out[-1] = f"{out[-1]} {part}"
        else:
            out.append(part)
    return out
