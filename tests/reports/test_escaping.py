"""Hostile text from the data in every report sink: JSON inside the HTML pages' scripts, HTML text, Markdown
tables, headings and list items. Checked with real parsers (the standard library's HTML parser, Python-Markdown
and markdown-it where installed, Chromium where found); ordinary text must come out unchanged."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from probes.reports.atlas.html import ExampleMaps, atlas_html, head_view_html
from probes.reports.escape import md_cell, md_heading, md_label, md_no_html, md_text, script_json
from probes.reports.tables import markdown_table

pd = pytest.importorskip("pandas")

#: Text that ends or opens a script element, hides the next one in a comment, breaks JavaScript string
#: literals (U+2028/2029 in old engines), or is HTML.
HOSTILE = ("<!--<script>", "</script>", "</SCRIPT >", "a\u2028b\u2029c", "<img src=x onerror=alert(1)>",
           "&amp; &lt;", "]]>", "-->")
ORDINARY = ("nmod:poss", "acl:relcl", "compound:prt", "bert-base-uncased", "models/tiny_bert", "C:/data/x.conllu",
            "en_ewt-ud-dev.conllu", "sample-1", "1-2", "offset -5", "<0.001", "too few links (< 30)", "[CLS]",
            "4 heads put >50% on the previous token", "##d", "ALL-nopunct", "7: 1-2, 1-3, 1-4, ...", "a_b", "x*y",
            "10.0 [10.0, 10.0]", "Attn+Emb [control task]", "R&D", "head_to_dep", "é ü 中文", "it's \"quoted\"")


class _Page(HTMLParser):
    """Every element's start tag, and the script elements with their text, as an HTML parser sees them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "script":
            self.scripts.append((dict(attrs), ""))
            self._in_script = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)
        else:
            self.text.append(data)


def _parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


def _labels() -> tuple[str, ...]:
    return ("[CLS]", *HOSTILE, "[SEP]")


def _maps(n_layers: int = 2, n_heads: int = 2) -> np.ndarray:
    n = len(_labels())
    maps = np.random.default_rng(0).dirichlet(np.ones(n), size=(n_layers, n_heads, n))
    return maps.astype(np.float32)


def _check_scripts(page: str) -> dict:
    """The page has exactly its two scripts, the data one holds no ``<`` (so no HTML tokenizer can leave the
    script early or enter its comment-like escape states, whatever the parser), and its JSON parses."""
    parsed = _parse(page)
    assert len(parsed.scripts) == 2 == page.count("<script")
    (data_attrs, payload), (code_attrs, code) = parsed.scripts
    assert data_attrs == {"type": "application/json", "id": "atlas-data"} and code_attrs == {}
    assert "<" not in payload and ">" not in payload and "&" not in payload
    assert "\u2028" not in payload and "\u2029" not in payload
    assert "JSON.parse" in code and code.rstrip().endswith("})();")
    assert "img" not in parsed.tags  # no element from the data (no figures in these pages)
    return json.loads(payload)


def test_script_json_escapes_the_five_characters_and_parses_back() -> None:
    data = {"labels": list(HOSTILE), "name": "<!--<script>", "n": 3, "nested": [{"k&<>": "\u2028"}]}
    text = script_json(data)
    for character in "<>&\u2028\u2029":
        assert character not in text
    assert "\\u003c!--\\u003cscript\\u003e" in text and "\\u2028" in text and "\\u0026" in text
    assert json.loads(text) == data
    assert script_json({"a": [1, 2.5, None, "x"]}) == '{"a":[1,2.5,null,"x"]}'  # ordinary data: compact JSON


def test_atlas_html_with_hostile_ids_words_and_labels_keeps_both_scripts_intact() -> None:
    heads = pd.DataFrame({"layer": [1, 1, 2, 2], "head": [1, 2, 1, 2], "pattern": ["broad"] * 4,
                          "best_relation": list(HOSTILE[:4]), "best_accuracy": [.5, .4, .3, .2]})
    example = ExampleMaps(_maps(), _labels(), name="<!--<script>", level="token")
    page = atlas_html(heads, title="tiny on </script><!--<script>", summary=[("<!--<script>", "</script>")],
                      example=example, notes=["<img src=x onerror=alert(1)>"])
    data = _check_scripts(page)
    assert data["example"]["labels"] == list(_labels()) and data["example"]["name"] == "<!--<script>"
    text = "".join(_parse(page).text)
    # shown as text: the title, the example's name, the summary, the notes and the table's relations
    for shown in ("tiny on </script><!--<script>", "Example: <!--<script>", "<img src=x onerror=alert(1)>",
                  "a\u2028b\u2029c", "</SCRIPT >"):
        assert shown in text, shown


def test_head_view_html_with_hostile_tokens_and_id_keeps_both_scripts_intact() -> None:
    page = head_view_html(_maps(1, 3), _labels(), title="</script>", name="<!--<script>\u2028", level="word")
    data = _check_scripts(page)
    assert data["example"]["labels"] == list(_labels()) and data["example"]["name"] == "<!--<script>\u2028"
    assert data["example"]["layers"] == 1 and data["example"]["heads"] == 3
    assert "Example: <!--<script>\u2028" in "".join(_parse(page).text)


def test_a_hostile_page_runs_its_scripts_in_chromium(tmp_path: Path) -> None:
    """The browser's own parser (one page: atlas.html and head_view.html share the page shell and its escaping)."""
    from tests.reports.browser import Browser, find_chromium

    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium found (install Debian's package: apt-get install -y chromium; .ci/run does)")
    page = tmp_path / "atlas.html"
    heads = pd.DataFrame({"layer": [1, 2], "head": [1, 2], "best_relation": HOSTILE[:2]})
    page.write_text(atlas_html(heads, title="<!--<script>", example=ExampleMaps(_maps(), _labels(), name="</script>")),
                    encoding="utf-8")
    with Browser(executable, width=900, height=700) as browser:
        browser.open(page)
        scripts, ready, labels, lines = browser.evaluate(
            "[document.scripts.length, window.atlas && window.atlas.ready, "
            "JSON.parse(document.getElementById('atlas-data').textContent).example.labels, "
            "window.atlas.show(1, 1, false)]")
        errors = list(browser.errors)
    assert errors == []
    assert scripts == 2 and ready is True and labels == list(_labels()) and lines > 0


@pytest.mark.parametrize("escape", [md_cell, md_heading, md_text, md_label, md_no_html])
def test_escaping_is_a_no_op_on_ordinary_text(escape) -> None:
    for text in ORDINARY:
        if escape is md_label and ("[" in text or "]" in text):
            continue  # a label's brackets are escaped by design
        assert escape(text) == text, (escape.__name__, text)


def test_an_ordinary_table_is_byte_for_byte_as_before() -> None:
    rows = [{"relation": "nmod:poss", "p": "<0.001", "acc": 0.25, "ties": "7: 1-2, 1-3, ..."},
            {"relation": "acl:relcl", "p": "-", "acc": float("nan"), "ties": "too few links (< 30)"}]
    assert markdown_table(rows, ["relation", "p", "acc", "ties"], headers=["relation", "p (Holm)", "acc.", "ties"],
                          percent=["acc"]) == (
        "| relation | p (Holm) | acc. | ties |\n|---|---|---|---|\n"
        "| nmod:poss | <0.001 | 25.0 | 7: 1-2, 1-3, ... |\n| acl:relcl | - | - | too few links (< 30) |\n")


HOSTILE_CELLS = ["a|b<b>bold</b>", "x\\|y", "`code` | ``", "line\nbreak\r\nand <!--<script>", "&lt;i&gt; &#60;",
                 "[x](javascript:alert(1))", "<https://example.com>", "\\"]


def _renderers() -> list:
    """Markdown renderers with GitHub tables that are installed: Python-Markdown (with MkDocs) and markdown-it."""
    found = []
    try:
        import markdown

        found.append(lambda text: markdown.markdown(text, extensions=["tables"]))
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


class _Cells(HTMLParser):
    """The rendered table's rows of cell texts, and every tag seen."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self.tags: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def test_hostile_cells_render_as_one_cell_each_with_their_text_and_no_html() -> None:
    rows = [{"word": cell, "n": 1} for cell in HOSTILE_CELLS]
    text = markdown_table(rows, ["word", "n"], headers=["word <b>|", "n"])
    for render in _renderers():
        parsed = _Cells()
        parsed.feed(render(text))
        assert set(parsed.tags) == {"table", "thead", "tbody", "tr", "th", "td"}, parsed.tags  # no b, a, code...
        assert parsed.rows[0] == ["word <b>|", "n"]
        expected = [" ".join(c.replace("\r\n", "\n").split("\n")) for c in HOSTILE_CELLS]
        assert [row for row in parsed.rows[1:]] == [[c, "1"] for c in expected]


def test_hostile_headings_and_list_items_stay_one_line_of_text() -> None:
    name = "x #\n<script>alert(1)</script>\n# injected"
    text = f"# Head leaderboard: {md_heading(name)} on {md_heading('## data ##')}\n\n- {md_text(name)}\n"
    for render in _renderers():
        parsed = _Cells()
        out = render(text)
        parsed.feed(out)
        assert parsed.tags == ["h1", "ul", "li"], out
        plain = "".join(_parse(out).text)
        assert "Head leaderboard: x # <script>alert(1)</script> # injected on ## data ##" in plain
    assert md_label("Chosen heads on sentence a]b[c") == "Chosen heads on sentence a\\]b\\[c"


def test_experiment_report_escapes_data_in_markdown_and_html(tmp_path: Path) -> None:
    from probes.reports.experiment.report import Table, report_html, report_markdown

    table = Table("units", "Units of <img src=x>", ("model", "folder"),
                  (("<img src=x onerror=alert(1)>|m", "[run](units/a)"), ("[x](javascript:alert(1))", "`b`")),
                  (("m", "a"), ("x", "b")), "footer <script>", "")
    blocks = [("h2", "Models <b>"), ("p", "Data: <!--<script>"), ("table", table)]
    md = report_markdown("Experiment </script>", blocks, tmp_path)
    for render in _renderers():
        parsed = _Cells()
        parsed.feed(render(md))
        assert {"img", "script", "b"}.isdisjoint(parsed.tags)
        assert parsed.rows[1][0] == "<img src=x onerror=alert(1)>|m" and len(parsed.rows[1]) == 2
        assert parsed.tags.count("a") == 1  # the folder link kept; the data's javascript: link is text
    page = report_html("Experiment </script>", blocks)
    assert "javascript:" not in page.replace("[x](javascript:alert(1))", "")  # shown as text, never an href
    parsed_page = _parse(page)
    assert len(parsed_page.scripts) == 2 and {"img", "b"}.isdisjoint(parsed_page.tags)
    assert '<a href="units/a">run</a>' in page


def test_pruned_leaderboard_table_escapes_relations() -> None:
    from probes.reports.importance.output import leaderboard_markdown

    row = {"relation": "a|<b>x</b>", "direction": "head_to_dep", "layer": 1, "head": 2, "accuracy_unpruned": .5,
           "accuracy_pruned": .25}
    text = leaderboard_markdown({"rows": [row], "n_pruned": 2, "fraction": .25, "rule": "r"})
    assert "| a\\|&lt;b>x&lt;/b> | head_to_dep | 1-2 | 0.500 | 0.250 | -0.250 |" in text
