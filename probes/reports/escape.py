"""Data text made safe for the places reports put it: JSON inside an HTML ``<script>``, Markdown cells and headings.

Words, sentence ids, relation labels, model and file names come from the user's data and may hold anything.
Each sink gets one function, used by every report writer:

* :func:`script_json`: JSON for an inline ``<script type="application/json">``. ``<``, ``>``, ``&``, U+2028
  and U+2029 are written as ``\\u003c``, ``\\u003e``, ``\\u0026``, ``\\u2028``, ``\\u2029``, so no
  ``</script>``, ``<!--`` or ``<script`` can reach the HTML parser (which would end the element early, or
  swallow the next one) and the text parses back to the same strings.
* :func:`md_cell`, :func:`md_heading`, :func:`md_text`, :func:`md_label`: plain text for a Markdown table cell,
  a heading, a paragraph / list item, or the label of a link or image. They escape only what Markdown would read as markup, so ordinary text (``nmod:poss``,
  ``bert-base-uncased``, ``<0.001``, ``>50%``, paths) comes out byte for byte as it went in.
* :func:`md_no_html`: for text that is Markdown on purpose (a link, inline code) but holds data: raw HTML and
  line breaks neutralised, the Markdown kept.

HTML text outside scripts goes through :func:`html.escape` at each site.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["script_json", "md_cell", "md_heading", "md_text", "md_label", "md_no_html"]

_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SCRIPT_RE = re.compile("[<>&\u2028\u2029]")


def script_json(data: Any) -> str:
    """``data`` as compact JSON that is safe inside an HTML ``<script>`` element (see the module docstring).

    The five characters occur in JSON only inside strings, where the ``\\uXXXX`` forms mean the same."""
    text = json.dumps(data, separators=(",", ":"))
    return _SCRIPT_RE.sub(lambda m: _SCRIPT_UNSAFE[m.group()], text)


#: Markdown line endings (CommonMark: LF, CR, CR LF): a cell, heading or list item must stay on its line.
_LINE_BREAKS = re.compile(r"\r\n|\r|\n")
#: ``<`` where it could open raw HTML (a tag, ``</``, ``<!--``, ``<!DOCTYPE``, ``<?``) or an autolink; a ``<``
#: before a digit or a space (``<0.001``, ``(< 30)``) is text to Markdown and is kept.
_HTML_START = re.compile(r"<(?=[A-Za-z/!?])")
#: ``&`` where it would start a character reference (``&lt;``, ``&#60;``, ``&#x3c;``).
_ENTITY_START = re.compile(r"&(?=[A-Za-z][A-Za-z0-9]*;|#[0-9]+;|#[xX][0-9A-Fa-f]+;)")
#: A backslash that would escape the next character (only ASCII punctuation can be backslash-escaped).
_ESCAPING_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~])")
#: The ``](`` of a link whose target has a scheme other than http(s) (``javascript:``, ``data:``).
_UNSAFE_LINK = re.compile(r"\]\((?=\s*<?(?![Hh][Tt][Tt][Pp][Ss]?:)[A-Za-z][A-Za-z0-9+.-]*:)")



def md_no_html(text: Any) -> str:
    """Markdown text with no raw HTML, no character references and no line breaks: tag openers as ``&lt;``,
    reference openers as ``&amp;``, each line break as one space. Emphasis, inline code and links to relative
    paths or http(s) addresses are kept; a link to any other scheme (``javascript:``) is left as text."""
    return _one_line_no_html(_UNSAFE_LINK.sub("\\](", str(text)))


def _one_line_no_html(text: str) -> str:
    """``text`` with tag openers as ``&lt;``, reference openers as ``&amp;`` and each line break as one space."""
    text = _ENTITY_START.sub("&amp;", text)
    text = _HTML_START.sub("&lt;", text)
    return _LINE_BREAKS.sub(" ", text)


def _md_plain(text: Any, *, brackets: bool = False) -> str:
    """Plain text as Markdown inline text: escaping backslashes doubled, backticks escaped, no link, no HTML, one
    line; with ``brackets``, every ``[`` and ``]`` escaped (else only the ``]`` of a ``](`` that would make a link,
    ``[x](javascript:...)``)."""
    text = _ESCAPING_BACKSLASH.sub(r"\\\\", str(text)).replace("`", "\\`")
    text = re.sub(r"[\[\]]", r"\\\g<0>", text) if brackets else text.replace("](", "\\](")
    return _one_line_no_html(text)


def md_cell(text: Any) -> str:
    """Plain text for one GitHub Markdown table cell: as :func:`md_text`, and ``|`` escaped (one cell)."""
    return _md_plain(text).replace("|", "\\|")


def md_heading(text: Any) -> str:
    """Plain text for (part of) an ATX heading after the writer's own ``# ``: as :func:`md_text`, and a trailing run
    of ``#`` escaped (it would be read as the heading's closing sequence and dropped). A leading ``#`` is text there
    and is kept; a line break cannot start a new block, since there is none."""
    return re.sub(r"#+$", lambda m: "\\#" * len(m.group()), _md_plain(text))


def md_text(text: Any) -> str:
    """Plain text for a paragraph or a list item: no raw HTML, no code span, no link, on one line."""
    return _md_plain(text)


def md_label(text: Any) -> str:
    """Plain text for the label of a link or an image (``![label](path)``): as :func:`md_text`, brackets escaped."""
    return _md_plain(text, brackets=True)
