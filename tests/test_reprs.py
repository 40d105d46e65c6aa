"""Short views of results and run records (probes.reprs): a few lines in a REPL, a compact escaped summary and the
head of the main table in a notebook, for every result type (the instances of tests/test_results.py's CASES)."""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser

import numpy as np
import pytest

from probes.reprs import HTML_ROWS
from probes.results import Result
from probes.run_record import RunRecord
from tests.test_results import CASES, extraction_report, head_scores, sentence_pairs

#: The most characters a result's notebook view may have (a summary and HTML_ROWS rows of its table).
HTML_BOUND = 20_000
#: Elements that have no end tag.
_VOID = {"br", "hr", "img", "col", "meta", "input", "wbr"}


class _Checker(HTMLParser):
    """Every element closed in order (void elements aside); the text outside tags, and the tags seen."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[str] = []
        self.problems: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in _VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.open or self.open[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.open[-1:] or 'nothing'}")
        else:
            self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def checked_html(text: str) -> _Checker:
    """Parse ``text``; fail unless every element is closed in order."""
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert not checker.problems and not checker.open, (checker.problems, checker.open)
    return checker


def _leaderboard(**names: str):
    from probes.runs.leaderboard import leaderboard_from_pairs

    pairs = sentence_pairs()
    return leaderboard_from_pairs(pairs[:8], select_pairs=pairs[8:], min_count=3, **names)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_result_reads_in_a_few_lines(name: str) -> None:
    result = CASES[name]()
    text = repr(result)
    assert len(text) < 1_000, text
    lines = text.splitlines()
    assert lines[0].startswith(type(result).__name__) and len(lines) <= 8, text
    assert ".to_pandas()" in lines[-1] and ".save(folder)" in lines[-1]
    assert "array(" not in text  # no array printed cell by cell


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_result_has_a_compact_valid_notebook_view(name: str) -> None:
    result = CASES[name]()
    view = result._repr_html_()
    assert len(view) < HTML_BOUND
    parsed = checked_html(view)
    assert "script" not in parsed.tags and "table" in parsed.tags
    assert type(result).__name__ in "".join(parsed.text)
    assert parsed.tags.count("tr") <= HTML_ROWS + 1  # the header and the first rows of the table


def test_a_result_names_its_shape_model_and_data() -> None:
    board = _leaderboard(report_name="sample:test", select_name="sample:dev", record={"model": "package:m"})
    text = repr(board)
    assert text.splitlines()[0] == "Leaderboard: 2 layers x 3 heads"
    assert "model package:m; heads selected on sample:dev, reported on sample:test" in text
    assert f"rows: [{len(board.rows)} LeaderboardRow]" in text


def test_the_notebook_table_is_the_head_of_to_pandas() -> None:
    scores = head_scores()
    table = scores.to_pandas()
    assert len(table) > HTML_ROWS
    parsed = checked_html(scores._repr_html_())
    assert parsed.tags.count("tr") == HTML_ROWS + 1
    text = " ".join(parsed.text)
    assert f"{len(table)} rows x {len(table.columns)} columns, the first {HTML_ROWS} below" in text
    assert "layers and heads 1-based" in text


def test_text_from_files_is_escaped_in_html_and_printable_in_text() -> None:
    board = _leaderboard(report_name="<b>report</b>", select_name="rest",
                         record={"model": "<img src=x onerror=alert(1)>\x1b[2J"})
    view = board._repr_html_()
    assert "<img" not in view and "<b>report" not in view
    assert "&lt;img src=x onerror=alert(1)&gt;" in view and "&lt;b&gt;report&lt;/b&gt;" in view
    checked_html(view)
    assert "\x1b" not in repr(board) and "\x1b" not in view


def test_a_large_result_stays_short() -> None:
    report = dataclasses.replace(extraction_report(), skipped=[f"sentence-{i}" for i in range(100_000)])
    assert len(repr(report)) < 1_000 and "skipped: [100000 str]" in repr(report)
    assert len(report._repr_html_()) < HTML_BOUND


def test_a_subclass_that_writes_its_own_repr_keeps_it() -> None:
    @dataclasses.dataclass(frozen=True)
    class Own(Result):
        score: np.ndarray

        def __repr__(self) -> str:
            return "mine"

    @dataclasses.dataclass(frozen=True)
    class Plain(Result):
        score: np.ndarray

    assert repr(Own(np.zeros(3))) == "mine"
    assert repr(Plain(np.zeros((2, 3)))).splitlines()[:2] == ["Plain", "  fields: score: float64 2x3"]


def test_a_run_record_is_one_line() -> None:
    record = RunRecord.of({
        "command": "probes match",
        "models": {"a": {"spec": "package:a", "extractor": {"model": "/x/" * 400}},
                   "b": {"spec": "random-init:package:a@1"}},
        "data": {"treebank": "sample:dev", "name": "sample:dev", "path": "/x/" * 400},
        "files": ["f"] * 10_000,
    })
    text = repr(record)
    view = record._repr_html_()
    parsed = checked_html(view)
    assert len(view) < HTML_BOUND and parsed.tags.count("tr") == 1 + 8  # the header, then one row per leaf field
    assert text in "".join(parsed.text)
    assert text == ("RunRecord: probes match; models package:a, random-init:package:a@1; data sample:dev; 4 fields")
    board = RunRecord.of({"command": "probes leaderboard", "model": "package:m", "reported_on": "sample:test",
                          "selection": {"mode": "same"}})
    assert repr(board) == ("RunRecord: probes leaderboard; model package:m; heads selected and reported on "
                           "sample:test (optimistic); 4 fields")
    split = RunRecord.of({"command": "probes atlas", "reported_on": "ud:en_ewt:dev", "selection": {"mode": "split"}})
    assert "; heads selected on one half of ud:en_ewt:dev, reported on the other; " in repr(split)
    assert repr(RunRecord()) == "RunRecord: a run; 0 fields"
