"""Issue 36, class 2: text that reaches a report loses its hidden characters, and a link survives only when a
browser would read its address as relative, http or https.

Each hostile vector goes into a real report (the experiment report from an experiment's description and from a run
folder's ``run.json`` rendered by ``probes report``, the atlas and head-view pages, a leaderboard's Markdown); the
pages are read back with the standard library's HTML parser and ``report.md`` is rendered with Python-Markdown (with
the extensions MkDocs enables here) and markdown-it where installed. The address of every ``href`` and ``src`` is
read as the WHATWG URL parser reads it (:func:`_scheme`, written here independently of the code under test).
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.compare.types import Comparison
from probes.reports.escape import (
    clean_text,
    html_text,
    md_cell,
    md_document,
    md_heading,
    md_inline_html,
    md_label,
    md_no_html,
    md_text,
    path_href,
    safe_link,
    script_json,
)

pd = pytest.importorskip("pandas")

JS = "javascript:alert(1)"
#: The issue's vector: a C0 control before the scheme, which browsers strip.
CTRL_JS = "\x01" + JS
#: Link addresses that a browser would run or load as something other than a relative, http or https URL.
UNSAFE_ADDRESSES = (CTRL_JS, " " + JS, "java\tscript:alert(1)", "java\nscript:alert(1)", "JAVASCRIPT:alert(1)",
                    "jav&#x61;script:alert(1)", "javascript&colon;alert(1)", "data:text/html,<script>alert(1)</script>",
                    "vbscript:msgbox(1)", "file:///etc/passwd", "\x00\x1f " + JS + " \x08", "//evil.example/x",
                    "\\\\evil.example/x", "/\\evil.example/x")
SAFE_ADDRESSES = ("figures/best_heads_ewt.png", "results/board/minilm/ewt", "../run/report.html", "#answers",
                  "https://arxiv.org/abs/1906.04341", "HTTP://example.com/a_b?x=1&y=2", "a%3Ab", "/docs/index.html", "")
#: Markdown (and HTML in Markdown) that would make a link, an image, raw HTML or an attribute.
MARKDOWN_VECTORS = (*(f"[x]({a})" for a in UNSAFE_ADDRESSES), f"![i]({JS})", f"[x](<{JS}>)", f"<{JS}>",
                    f"[x\\]({JS})", f"[x\\\\]({JS})", f"[1]: {JS}\n\n[x][1] [1]", f"[1\\]: {JS}", f"- [2]: <{JS}>",
                    f"<a href={JS}>a</a>", "<img src=x onerror=alert(1)>", "<script>alert(1)</script>",
                    "<svg/onload=alert(1)>", "x {: onclick=alert(1) }", "[y](https://example.com){onclick=alert(1)}",
                    "\u202eevil\u202c \u2066name\u2069")
#: Characters no report may hold (TAB, LF and CR are whitespace and kept).
HIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")
_C0_AND_SPACE = "".join(map(chr, range(0x21)))


def _scheme(address: str) -> str | None:
    """The scheme a browser reads in ``address`` (WHATWG: C0 controls and spaces stripped from both ends, TAB, LF
    and CR removed), lower-cased; ``//`` for another host on the page's scheme; None for a relative address."""
    url = re.sub("[\t\n\r]", "", address.strip(_C0_AND_SPACE))
    found = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", url)
    if found:
        return found.group(1).lower()
    return "//" if re.match(r"[/\\]{2}", url) else None


class _Elements(HTMLParser):
    """Every start tag with its attributes (values decoded, as a browser decodes them) and the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _elements(page: str) -> _Elements:
    parsed = _Elements()
    parsed.feed(page)
    parsed.close()
    return parsed


#: The page shell's own ``data:`` addresses: the empty favicon and the embedded PNG figures.
_OWN_DATA = re.compile(r"data:,|data:image/png;base64,[A-Za-z0-9+/=]*")


def _check_html(page: str, *, scripts: int = 0) -> _Elements:
    """No hidden character; every ``href``/``src`` relative or http(s) (bar the shell's own ``data:`` ones); no
    event-handler attribute; no element that runs or embeds anything but the shell's own ``scripts``."""
    assert not HIDDEN.search(page), HIDDEN.findall(page)
    parsed = _elements(page)
    for tag, attrs in parsed.elements:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        for name in ("href", "src", "action", "formaction", "srcset", "poster", "background"):
            value = attrs.get(name)
            if value is None:
                continue
            own = tag in ("link", "img") and _OWN_DATA.fullmatch(value)
            assert own or _scheme(value) in (None, "http", "https"), (tag, name, value)
    tags = [tag for tag, _ in parsed.elements]
    assert tags.count("script") == scripts, tags
    assert {"iframe", "object", "embed", "svg", "math", "form", "base", "frame", "applet"}.isdisjoint(tags), tags
    return parsed


def _renderers() -> list[Any]:
    """Python-Markdown with the extensions of this project's mkdocs.yml, and markdown-it, where installed."""
    found = []
    try:
        import markdown

        extensions = ["admonition", "attr_list", "tables", "toc"]
        try:
            import pymdownx  # noqa: F401

            extensions += ["pymdownx.highlight", "pymdownx.superfences"]
        except ImportError:
            pass
        found.append(lambda text: markdown.markdown(text, extensions=extensions))
    except ImportError:
        pass
    try:
        from markdown_it import MarkdownIt

        found.append(MarkdownIt("commonmark").enable("table").render)
    except ImportError:
        pass
    if not found:
        pytest.skip("neither Python-Markdown nor markdown-it-py is installed")
    return found


def _check_markdown(text: str) -> list[_Elements]:
    """``text`` holds no hidden character, and renders (every renderer) to HTML that passes :func:`_check_html`
    with no image (reports' images are relative figure files, checked by the caller where there are any)."""
    assert not HIDDEN.search(text), HIDDEN.findall(text)
    out = []
    for render in _renderers():
        parsed = _check_html(render(text))
        out.append(parsed)
    return out


# --- the functions --------------------------------------------------------------------------------------------


def test_clean_text_removes_controls_bidi_and_invisible_characters_and_keeps_whitespace() -> None:
    hidden = ([chr(c) for c in range(0x20) if chr(c) not in "\t\n\r"] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)]
              + [chr(c) for c in range(0x202A, 0x202F)] + [chr(c) for c in range(0x2066, 0x206A)]
              + ["\u200b", "\u2060", "\ufeff"])
    for char in hidden:
        assert clean_text(f"a{char}b") == "ab", hex(ord(char))
    assert clean_text("a\tb\nc\r\nd") == "a\tb\nc\r\nd"  # whitespace: each sink decides what a break means
    # the spelling of Persian (ZWNJ), emoji (ZWJ) and right-to-left marks is kept
    for word in ("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "\U0001f469\u200d\U0001f52c", "\u200fabc\u200e"):
        assert clean_text(word) == word
    assert clean_text("a\ud800b") == "a\ufffdb"  # a lone surrogate (from JSON) could not be written as UTF-8
    assert clean_text(3.5) == "3.5"


@pytest.mark.parametrize("address", UNSAFE_ADDRESSES)
def test_safe_link_refuses_what_a_browser_reads_as_another_scheme_or_host(address: str) -> None:
    assert not safe_link(address)


@pytest.mark.parametrize("address", SAFE_ADDRESSES)
def test_safe_link_keeps_relative_and_http_addresses(address: str) -> None:
    assert safe_link(address)


def test_path_href_can_never_be_a_scheme_and_leaves_ordinary_paths_alone() -> None:
    assert path_href("results/board/minilm/ewt") == "results/board/minilm/ewt"
    assert path_href(Path("figures") / "best_heads_en-ewt_1.png") == "figures/best_heads_en-ewt_1.png"
    assert path_href("../run~1/a.b") == "../run~1/a.b"
    for hostile in (CTRL_JS, JS, "JAVASCRIPT:x", "a b/(c)[d]<e>&f\"g'", "//evil.example/x", "data:text/html,x"):
        href = path_href(hostile)
        assert safe_link(href) and _scheme(href) is None, (hostile, href)
        assert not re.search(r"[\s()<>\[\]\"'&:]", href), href
    assert path_href("a:b") == "a%3Ab" and path_href("//x") == ".//x"


def test_sinks_clean_hidden_characters() -> None:
    name = "m\u202eodel\x01\x7f\x85\u2066x\u2069\u200b"
    for sink in (md_cell, md_heading, md_text, md_label, md_no_html, md_document, md_inline_html, html_text):
        assert not HIDDEN.search(sink(name)), sink.__name__
    data = json.loads(script_json({"labels": [name, "ok"], name: {"name": name}}))
    assert data == {"labels": ["modelx", "ok"], "modelx": {"name": "modelx"}}


@pytest.mark.parametrize("vector", MARKDOWN_VECTORS)
def test_markdown_sinks_render_no_link_html_or_attribute(vector: str) -> None:
    """Each sink's output, alone and inside a whole document, renders to no unsafe link, no raw HTML element, no
    event handler; md_document changes nothing the sinks made."""
    for sink in (md_cell, md_heading, md_text, md_label, md_no_html, md_document):
        text = sink(vector)
        if sink is not md_document:
            assert md_document(text) == text, (sink.__name__, text)  # idempotent on what the sinks made
        document = f"# {text}\n\n{text}\n\n- {text}\n\n| a |\n|---|\n| {text.replace('|', chr(92) + '|')} |\n"
        for parsed in _check_markdown(md_document(document)):
            assert {"img", "script", "svg"}.isdisjoint(tag for tag, _ in parsed.elements), (sink.__name__, text)
            hrefs = [attrs.get("href") for tag, attrs in parsed.elements if tag == "a"]
            assert all(h == "https://example.com" for h in hrefs), (sink.__name__, hrefs)
    inline = _check_html(md_inline_html(vector))
    assert all(tag == "a" and attrs == {"href": "https://example.com"} for tag, attrs in inline.elements), vector


def test_safe_markdown_links_are_kept_as_they_are() -> None:
    text = ("See [the paper](https://arxiv.org/abs/1906.04341), [a unit](results/board/minilm/ewt) and "
            "![the figure](figures/q1_spread.png), `code` too.")
    assert md_no_html(text) == text and md_document(text) == text
    assert md_inline_html(text) == (
        'See <a href="https://arxiv.org/abs/1906.04341">the paper</a>, <a href="results/board/minilm/ewt">a unit</a>'
        ' and !<a href="figures/q1_spread.png">the figure</a>, <code>code</code> too.')
    for render in _renderers():
        hrefs = [attrs.get("href") or attrs.get("src") for tag, attrs in _elements(render(text)).elements
                 if tag in ("a", "img")]
        assert hrefs == ["https://arxiv.org/abs/1906.04341", "results/board/minilm/ewt", "figures/q1_spread.png"]


def test_ordinary_text_is_unchanged_by_every_sink() -> None:
    from tests.reports.test_escaping import ORDINARY

    for text in ORDINARY:
        assert md_document(text) == text and md_no_html(text) == text, text
        assert html_text(text) == html.escape(text, quote=True)


# --- the experiment report -----------------------------------------------------------------------------------

HOSTILE_DESCRIPTION = " ".join((f"Trained vs random heads. [one]({CTRL_JS}) [two]( {JS}) [three](java\tscript:x)",
                                "[four](JAVASCRIPT:x) [five](jav&#x61;script:x) [six](data:text/html,x)",
                                "[seven](vbscript:x) [eight][r] [r]: javascript:alert(2)",
                                "<img src=x onerror=alert(3)> <a href=javascript:alert(4)>a</a> {: onclick=alert(5) }",
                                "\u202eevil\u202c [paper](https://arxiv.org/abs/1906.04341)"))


def _hostile_record(out: Path) -> dict[str, Any]:
    """A run.json of an experiment whose description, names and specs hold every vector."""
    model = f"m\u202e1 [x]({CTRL_JS}) {{: onclick=alert(1) }}"
    experiment = {"name": "seed\u2066x", "title": f"T <script>alert(1)</script> [t]({JS})",
                  "description": HOSTILE_DESCRIPTION, "out": str(out)}
    return {"command": "probes run", "experiment": experiment,
            "models": {model: {"kind": "trained", "spec": f"`<img src=x onerror=alert(1)>` [s]({JS})"}},
            "data": {f"d [x]({JS})": {"treebank": f"{JS}.conllu", "select_on": "\x01javascript:x"}},
            "units": [], "analyses": {}, "seed_questions": True, "report_options": {"n_resamples": 10}}


def _check_experiment_report(out: Path) -> tuple[_Elements, list[_Elements]]:
    page = (out / "report.html").read_text(encoding="utf-8")
    parsed = _check_html(page, scripts=2)  # the shell's own data and code scripts, nothing else
    text = (out / "report.md").read_text(encoding="utf-8")
    return parsed, _check_markdown(text)


def test_probes_report_of_a_hostile_run_folder_makes_no_unsafe_link(tmp_path: Path) -> None:
    from probes.runs.experiment import report_experiment

    (tmp_path / "run.json").write_text(json.dumps(_hostile_record(tmp_path)), encoding="utf-8")
    report_experiment(tmp_path)
    page, rendered = _check_experiment_report(tmp_path)
    links = [attrs["href"] for tag, attrs in page.elements if tag == "a" and not attrs["href"].startswith("#")]
    assert links == ["https://arxiv.org/abs/1906.04341"]  # the description's one safe link, and no other
    shown = "".join(page.text)
    assert "[seven](vbscript:x)" in shown and "<img src=x onerror=alert(3)>" in shown  # shown as text
    assert "\u202e" not in shown and "evil" in shown
    for parsed in rendered:
        assert [attrs["href"] for tag, attrs in parsed.elements if tag == "a"] == ["https://arxiv.org/abs/1906.04341"]


def _units_record(paths: list[str]) -> dict[str, Any]:
    units = [{"analysis": "board", "kind": "leaderboard", "model": "m", "data": "d", "key": "k", "reused": False,
              "seconds": 1.0, "path": p} for p in paths]
    return {"experiment": {"name": "seed", "description": "Units."}, "models": {"m": {"kind": "trained", "spec": "m"}},
            "data": {"d": {"treebank": "d.conllu"}}, "units": units}


HOSTILE_PATHS = [CTRL_JS, JS, " " + JS, "JAVASCRIPT:x", "//evil.example/x", f"a]({JS})[b", "<img src=x onerror=1>",
                 "jav&#x61;script:x", "u\u202e\u2066/x"]


def test_unit_paths_from_run_json_link_only_inside_the_run_folder(tmp_path: Path) -> None:
    from probes.reports.experiment.report import write_experiment_report

    comparison = Comparison(models={"m": {"kind": "trained", "spec": "m"}}, missing={"best_heads": "none"})
    write_experiment_report(comparison, _units_record(["results/board/m/d", *HOSTILE_PATHS]), tmp_path)
    page, rendered = _check_experiment_report(tmp_path)
    links = [attrs["href"] for tag, attrs in page.elements if tag == "a" and not attrs["href"].startswith("#")]
    assert links[0] == "results/board/m/d" and len(links) == 1 + len(HOSTILE_PATHS)  # each folder, as a path here
    assert all(_scheme(h) is None for h in links)
    assert links[1] == links[2] == "javascript%3Aalert%281%29"  # the control character gone, the colon encoded
    for parsed in rendered:
        hrefs = [attrs["href"] for tag, attrs in parsed.elements if tag == "a"]
        assert hrefs == links
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "| [results/board/m/d](results/board/m/d) |" in md  # an ordinary unit's link as it always was


def test_a_copy_of_the_report_names_hostile_unit_folders_as_text(tmp_path: Path) -> None:
    from probes.reports.experiment.report import write_experiment_report

    comparison = Comparison(models={"m": {"kind": "trained", "spec": "m"}})
    out = tmp_path / "copy"
    write_experiment_report(comparison, _units_record(["results/board/m/d", *HOSTILE_PATHS]), out,
                            run_dir=tmp_path / "run")
    page, rendered = _check_experiment_report(out)
    assert not [attrs for tag, attrs in page.elements if tag == "a" and not attrs["href"].startswith("#")]
    assert "<code>results/board/m/d</code>" in (out / "report.html").read_text(encoding="utf-8")
    for parsed in rendered:
        assert not [attrs for tag, attrs in parsed.elements if tag == "a"]


# --- the atlas, the head view, a leaderboard -----------------------------------------------------------------

HOSTILE_NAMES = (CTRL_JS, "<img src=x onerror=alert(1)>", f"[x]({JS})", "\u202eevil\u202c", "a\x85b\u2068c\u2069",
                 "</script><script>alert(1)</script>")
_PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def test_atlas_and_head_view_pages_hold_no_hidden_character_or_unsafe_link() -> None:
    from probes.reports.atlas.html import ExampleMaps, atlas_html, head_view_html

    n = len(HOSTILE_NAMES)
    maps = np.full((1, 2, n, n), 1.0 / n, dtype=np.float32)
    heads = pd.DataFrame({"layer": [1, 1], "head": [1, 2], "best_relation": HOSTILE_NAMES[:2],
                          HOSTILE_NAMES[2]: HOSTILE_NAMES[3:5]})
    page = atlas_html(heads, title=HOSTILE_NAMES[0], summary=[(HOSTILE_NAMES[3], HOSTILE_NAMES[0])],
                      figures={f"Chosen heads on sentence {HOSTILE_NAMES[4]}": _PNG},
                      example=ExampleMaps(maps, HOSTILE_NAMES, name=HOSTILE_NAMES[3]), notes=list(HOSTILE_NAMES))
    parsed = _check_html(page, scripts=2)
    assert [tag for tag, _ in parsed.elements].count("img") == 1  # the figure, embedded as PNG data
    assert not [attrs for tag, attrs in parsed.elements if tag == "a" and not attrs["href"].startswith("#")]
    payload = page.split('id="atlas-data">', 1)[1].split("</script>", 1)[0]
    labels = json.loads(payload)["example"]["labels"]
    assert labels == [clean_text(name) for name in HOSTILE_NAMES] and labels[3] == "evil"
    view = head_view_html(maps[:, :1], HOSTILE_NAMES, title=HOSTILE_NAMES[0], name=HOSTILE_NAMES[4])
    _check_html(view, scripts=2)


def test_leaderboard_markdown_from_a_hostile_record() -> None:
    from probes.reports.leaderboard import _markdown
    from probes.run_record import RunRecord

    record = RunRecord.of({"command": "probes leaderboard", "model": f"m\u202e [x]({CTRL_JS}) {{: onclick=x }}",
                           "reported_on": "<img src=x onerror=alert(1)>",
                           "selection": {"mode": "held-out", "selected_on": f"[1]: {JS}"}})
    text = _markdown([], record, "figures/overview.png")
    assert text.endswith("![overview](figures/overview.png)\n")  # the figure's link as it always was
    for parsed in _check_markdown(text):
        assert [attrs.get("src") for tag, attrs in parsed.elements if tag == "img"] == ["figures/overview.png"]
        assert not [attrs for tag, attrs in parsed.elements if tag == "a" and "href" in attrs
                    and not attrs["href"].startswith("#")]
