"""Data text made safe for the places reports put it: HTML text and attributes, JSON inside an HTML ``<script>``,
Markdown cells, headings, paragraphs and links.

Words, sentence ids, relation labels, model and file names, descriptions and paths come from the user's data, an
experiment file or a run folder's ``run.json``, and may hold anything. Every sink below starts with
:func:`clean_text`, so no report (``report.md``, ``report.html``, ``atlas.md``, ``atlas.html``, ``head_view.html``,
``leaderboard.md`` ...) holds a hidden character:

* :func:`clean_text`: removes the C0 controls except TAB, LF and CR, DEL, the C1 controls, the bidi embeddings,
  overrides and isolates (U+202A-U+202E, U+2066-U+2069, the "Trojan Source" characters), and the invisible
  characters that can hide or disguise text (zero-width space U+200B, word joiner and invisible operators
  U+2060-U+2064, the deprecated format characters U+206A-U+206F, the byte-order mark U+FEFF, the interlinear
  annotation marks U+FFF9-U+FFFB); a lone surrogate becomes U+FFFD (it could not be written as UTF-8). TAB, LF
  and CR are kept because they are whitespace wherever text lands: HTML shows them as a space, and each Markdown
  sink decides what a line break means there (one line for a cell, a heading, a list item: a space; a line of its
  own in a whole document). Zero-width (non-)joiners U+200C/U+200D and the directional marks U+200E/U+200F/U+061C
  are kept: they are part of the spelling of Persian, Indic and emoji words and of right-to-left text, and
  reorder nothing beyond the word they sit in.
* :func:`safe_link`: whether a link address may become a link: it is read as a browser reads it (WHATWG URL
  parsing: leading and trailing C0 controls and spaces stripped, every TAB, LF and CR removed, the scheme
  case-insensitive; also after HTML character references are decoded, as a Markdown renderer may pass
  ``jav&#x61;script:`` through to an attribute that the browser decodes). Only a relative address (no scheme)
  and ``http:`` / ``https:`` pass. A protocol-relative ``//host/...`` (or ``\\\\host``, which browsers read the
  same way) is refused: it leaves the report's own site without saying so, and no report writes one; write
  ``https://host/...`` instead. A refused link is shown as its text, never as a link.
* :func:`path_href`: a relative file path as a link address: percent-encoded, so it can never read as a scheme
  (``a:b`` becomes ``a%3Ab``), never ends a Markdown link early, and ordinary paths stay as they are.
* :func:`html_text`: text for HTML content or a quoted attribute value.
* :func:`script_json`: JSON for an inline ``<script type="application/json">``. ``<``, ``>``, ``&``, U+2028
  and U+2029 are written as ``\\u003c``, ``\\u003e``, ``\\u0026``, ``\\u2028``, ``\\u2029``, so no
  ``</script>``, ``<!--`` or ``<script`` can reach the HTML parser (which would end the element early, or
  swallow the next one) and the text parses back to the same strings (cleaned by :func:`clean_text`).
* :func:`md_cell`, :func:`md_heading`, :func:`md_text`, :func:`md_label`: plain text for a Markdown table cell,
  a heading, a paragraph / list item, or the label of a link or image. They escape only what Markdown would read
  as markup (raw HTML, links, link reference definitions, code spans, attribute lists ``{: ...}`` of the
  ``attr_list`` extension that MkDocs enables), so ordinary text (``nmod:poss``, ``bert-base-uncased``,
  ``<0.001``, ``>50%``, paths) comes out byte for byte as it went in.
* :func:`md_literal`, :func:`md_code`: data for a Markdown-on-purpose string that a renderer below reads later (a
  link label, an identifier in a code span), with its Markdown characters backslash-escaped.
* :func:`md_no_html`: for text that is Markdown on purpose (an experiment's description, a sentence with a link or
  inline code) but holds data: raw HTML, character references and line breaks neutralised, links kept only when
  :func:`safe_link` passes their address and the address is written plainly (no spaces, quotes, angle brackets,
  parentheses or character references), attribute lists and reference definitions escaped.
* :func:`md_inline_html`: the same Markdown-on-purpose text as HTML (backslash escapes, inline code, the safe
  links; everything else escaped), so ``report.md`` and ``report.html`` show the same links.
* :func:`md_document`: a whole Markdown file, last thing before it is written: cleaned, and every link, raw HTML
  tag, reference definition and attribute list that the sinks above would not have let through neutralised. On
  text already made by those sinks it changes nothing.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any
from urllib.parse import quote

__all__ = ["clean_text", "safe_link", "path_href", "html_text", "script_json", "md_cell", "md_heading", "md_text",
           "md_label", "md_literal", "md_code", "md_no_html", "md_inline_html", "md_document"]

#: Characters no report keeps (see the module docstring): C0 but TAB LF CR, DEL, C1, bidi embeddings / overrides /
#: isolates, and invisible characters that can disguise text.
_HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b\u202a-\u202e\u2060-\u2064\u2066-\u206f"
                     "\ufeff\ufff9-\ufffb]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: Any) -> str:
    """``text`` as a string without the characters of :data:`_HIDDEN`; a lone surrogate as U+FFFD."""
    return _HIDDEN.sub("", _SURROGATE.sub("\ufffd", str(text)))


#: What the WHATWG URL parser strips from both ends of an address (C0 controls and space) ...
_URL_ENDS = "".join(map(chr, range(0x21)))
#: ... and removes from anywhere in it.
_URL_TAB_NEWLINE = re.compile("[\t\n\r]")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
#: Two slashes or backslashes: another host, with the report's own scheme.
_OTHER_HOST = re.compile(r"[/\\]{2}")
_SAFE_SCHEMES = ("http", "https")


def _browser_address(address: str) -> str:
    """``address`` as a browser's URL parser reads it before it looks for a scheme."""
    return _URL_TAB_NEWLINE.sub("", address.strip(_URL_ENDS))


def _plain_address_is_safe(address: str) -> bool:
    """Whether the browser's reading of ``address`` has no scheme but http(s) and does not name another host."""
    url = _browser_address(address)
    scheme = _SCHEME.match(url)
    if scheme:
        return scheme.group(1).lower() in _SAFE_SCHEMES
    return not _OTHER_HOST.match(url)


def safe_link(address: Any) -> bool:
    """Whether ``address`` may be a link's ``href`` (or an image's ``src``): relative, ``http:`` or ``https:`` as a
    browser reads it, also once HTML character references in it are decoded (see the module docstring)."""
    text = clean_text(address)
    return _plain_address_is_safe(text) and _plain_address_is_safe(html.unescape(text))


def path_href(path: str | PurePath) -> str:
    """A relative file path (``/``-separated) as a link address: percent-encoded but for ``/``, so no colon can
    make a scheme and no space or parenthesis can end a Markdown link; a leading ``//`` is kept on this host
    (``.//``). Ordinary paths (letters, digits, ``_ . - ~ /``) are returned as they are."""
    text = path.as_posix() if isinstance(path, PurePath) else str(path)
    encoded = quote(clean_text(text), safe="/")
    return "." + encoded if encoded.startswith("//") else encoded


def html_text(value: Any) -> str:
    """``value`` as HTML text or a quoted attribute value: cleaned, ``& < > " '`` as character references."""
    return html.escape(clean_text(value), quote=True)


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_SCRIPT_RE = re.compile("[<>&\u2028\u2029]")


def _clean_data(data: Any) -> Any:
    """``data`` with every string in it (keys too) through :func:`clean_text`."""
    if isinstance(data, str):
        return clean_text(data)
    if isinstance(data, Mapping):
        return {_clean_data(k): _clean_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_clean_data(v) for v in data]
    return data


def script_json(data: Any) -> str:
    """``data`` as compact JSON that is safe inside an HTML ``<script>`` element (see the module docstring).

    The five characters occur in JSON only inside strings, where the ``\\uXXXX`` forms mean the same."""
    text = json.dumps(_clean_data(data), separators=(",", ":"))
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
#: The characters Python-Markdown (MkDocs) reads a backslash escape of; a backslash before any other character is
#: a backslash (so ``\<b>`` is still a tag there, and ``<`` is never left to a backslash).
_PM_ESCAPABLE = r"\\`*_{}\[\]()>#+.!-"
#: A link address written plainly: no space, quote, angle bracket, parenthesis, bracket, brace, backslash,
#: backtick or ``&`` (so no title, no ``<...>`` form, no character reference, and it ends where every renderer
#: ends it).
_PLAIN_DEST = r"[^\s()<>\"'\\&`{}\[\]]*"
#: The Markdown that :func:`md_no_html` and :func:`md_document` look at, left to right: a backslash escape (kept
#: as it is, so an escaped ``]`` stays escaped and ``\\\\`` cannot un-escape what follows), the ``](address)`` of
#: an inline link or image, a ``]`` that would close a link, the ``:`` after a ``]`` (escaped or not) that would
#: make a reference definition ``[id]: address``, a ``{`` that could open an attribute list, a ``<`` that could
#: open raw HTML or an autolink.
_MD_TOKEN = re.compile(rf"(?P<pair>\\[{_PM_ESCAPABLE}])|\]\((?P<dest>{_PLAIN_DEST})\)|(?P<close>\](?=\())"
                       r"|(?P<colon>(?<=\]):)|(?P<brace>\{)|(?P<tag><(?=[A-Za-z/!?]))")
#: The ``:`` of a ``]:`` as a character reference: no renderer reads ``]&#58;`` as a reference definition (Python-
#: Markdown's definitions ignore a backslash before the ``]``, so escaping the bracket is not enough), every one
#: shows a colon.
_REF_COLON = "&#58;"


def _md_token(match: re.Match[str]) -> str:
    """One token of :data:`_MD_TOKEN`, made safe."""
    if match.group("pair") is not None:
        return match.group()
    if match.group("dest") is not None:
        return match.group() if safe_link(match.group("dest")) else "\\" + match.group()
    if match.group("close") is not None:
        return "\\]"
    if match.group("colon") is not None:
        return _REF_COLON
    return "\\{" if match.group("brace") is not None else "&lt;"


def _neutralise(text: str) -> str:
    """Markdown ``text`` with no raw HTML, no attribute list, no reference definition and no link to an address
    :func:`safe_link` refuses (or that is not written plainly); escapes already there are kept."""
    return _MD_TOKEN.sub(_md_token, text)


def md_no_html(text: Any) -> str:
    """Markdown text with no raw HTML, no character references and no line breaks: tag openers as ``&lt;``,
    reference openers as ``&amp;``, each line break as one space. Emphasis, inline code and links to relative
    paths or http(s) addresses are kept; a link to any other scheme (``javascript:``) is left as text."""
    text = _ENTITY_START.sub("&amp;", clean_text(text))
    return _LINE_BREAKS.sub(" ", _neutralise(text))


def md_document(text: Any) -> str:
    """A whole Markdown file as it may be written (see the module docstring): line breaks kept, character
    references kept (a link address holding one is refused), everything :func:`_neutralise` refuses escaped."""
    return _neutralise(clean_text(text))


def _one_line_no_html(text: str) -> str:
    """``text`` with tag openers as ``&lt;``, reference openers as ``&amp;`` and each line break as one space."""
    text = _ENTITY_START.sub("&amp;", text)
    text = _HTML_START.sub("&lt;", text)
    return _LINE_BREAKS.sub(" ", text)


def _md_plain(text: Any, *, brackets: bool = False) -> str:
    """Plain text as Markdown inline text: escaping backslashes doubled, backticks and ``{`` escaped, no link, no
    HTML, one line; with ``brackets``, every ``[`` and ``]`` escaped (else only the ``]`` of a ``](`` that would
    make a link, ``[x](javascript:...)``); the colon of a ``]:`` (which would make a reference definition) as
    ``&#58;``."""
    text = _ESCAPING_BACKSLASH.sub(r"\\\\", clean_text(text)).replace("`", "\\`").replace("{", "\\{")
    text = re.sub(r"[\[\]]", r"\\\g<0>", text) if brackets else text.replace("](", "\\](")
    return _one_line_no_html(text).replace("]:", "]" + _REF_COLON)


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


def md_literal(text: Any) -> str:
    """Data inside Markdown-on-purpose text that :func:`md_no_html` or :func:`md_inline_html` renders later (a link
    label, a name in a sentence): cleaned, one line, backslashes that would escape doubled, backticks, brackets
    and ``{`` backslash-escaped. ``<`` and ``&`` are left to the renderer (which escapes them once)."""
    text = _ESCAPING_BACKSLASH.sub(r"\\\\", clean_text(text))
    return _LINE_BREAKS.sub(" ", re.sub(r"[`\[\]{]", r"\\\g<0>", text))


#: Characters that keep data out of a code span (:func:`md_code`): a backtick ends it, and the renderers would
#: show the escapes of the others inside it.
_NOT_IN_CODE = re.compile(r"[`<>&\[\]{}\\\r\n]")


def md_code(text: Any) -> str:
    """Data as inline code in Markdown-on-purpose text (a model spec, a file name): ```` `text` ```` when it holds
    none of ``` ` < > & [ ] { } \\ ``` and no line break; else :func:`md_literal` (plain text, shown as it is)."""
    text = clean_text(text)
    return f"`{text}`" if text and not _NOT_IN_CODE.search(text) else md_literal(text)


#: Markdown-on-purpose text as :func:`md_inline_html` reads it: a backslash escape, a code span, an inline link
#: whose label holds no unescaped bracket and whose address is written plainly (:data:`_PLAIN_DEST`).
_INLINE = re.compile(rf"(?P<pair>\\[{_PM_ESCAPABLE}])|`(?P<code>[^`]+)`"
                     rf"|\[(?P<label>(?:\\[{_PM_ESCAPABLE}]|[^\[\]\\]|\\(?![{_PM_ESCAPABLE}]))*)\]"
                     rf"\((?P<dest>{_PLAIN_DEST})\)")


def _inline_html(text: str, *, links: bool) -> str:
    """``text`` (cleaned) as HTML: escapes resolved, code spans as ``<code>``, with ``links`` the inline links
    whose address :func:`safe_link` passes as ``<a href>`` (others as their text); the rest escaped."""
    out, position = [], 0
    for match in _INLINE.finditer(text):
        out.append(html.escape(text[position:match.start()], quote=True))
        position = match.end()
        if match.group("pair") is not None:
            out.append(html.escape(match.group()[1], quote=True))
        elif match.group("code") is not None:
            out.append(f"<code>{html.escape(match.group('code'), quote=True)}</code>")
        elif links and safe_link(match.group("dest")):
            label = _inline_html(match.group("label"), links=False)
            out.append(f'<a href="{html.escape(match.group("dest"), quote=True)}">{label}</a>')
        else:
            out.append(html.escape(match.group(), quote=True))
    out.append(html.escape(text[position:], quote=True))
    return "".join(out)


def md_inline_html(text: Any) -> str:
    """Markdown-on-purpose text (as :func:`md_no_html` takes it) as HTML: backslash escapes resolved, inline code
    as ``<code>``, inline links to an address :func:`safe_link` passes as ``<a href>``; everything else (raw HTML,
    character references, other links) shown as text."""
    return _inline_html(clean_text(text), links=True)
