"""Leaderboard rows: held-out selection, tie-breaks, intervals, and the files written."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from probes.corpora.types import Sentence
from probes.extraction.attention import WordAttention
from probes.heads.intervals import bootstrap_ci
from probes.heads.selection import LEADERBOARD_COLUMNS, leaderboard_rows
from probes.runs.leaderboard import Leaderboard, leaderboard_from_pairs, score_split


def _pairs(seed: int, n_sent: int = 60, n_layers: int = 2, n_heads: int = 3, good=(1, 2)):
    """Random sentences whose head ``good`` (layer, head) attends from each word to its head."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_sent):
        n = int(rng.integers(3, 9))
        heads = [0] + [int(rng.integers(1, i + 1)) for i in range(1, n)]  # word i+1 attaches to an earlier word
        rels = ["root"] + [str(rng.choice(["nsubj", "obj", "det"])) for _ in range(n - 1)]
        w = rng.random((n_layers, n_heads, n, n)).astype(np.float32)
        for i, h in enumerate(heads):
            if h and rng.random() < 0.8:
                w[good[0], good[1], i, h - 1] = 5.0
        out.append((Sentence(f"s{k}", tuple("w" * n), tuple(heads), tuple(rels)),
                    WordAttention(w, np.zeros(n, bool), tuple(range(n_layers)), tuple(range(n_heads)))))
    return out


def test_selection_on_one_split_report_on_another():
    select = score_split(_pairs(1, good=(1, 2)))
    report = score_split(_pairs(2, good=(0, 0)))  # on the report split another head is best
    rows = leaderboard_rows(report["heads"], report["baselines"], select=select["heads"],
                            select_baselines=select["baselines"], min_count=1, report_name="B", select_name="A")
    obj = next(r for r in rows if r.relation == "obj")
    assert (obj.layer, obj.head, obj.direction, obj.selected_on) == (1, 2, "dep_to_head", "A")
    r = report["heads"].index("obj")
    assert obj.accuracy == pytest.approx(report["heads"].correct[0, 1, 2, r] / report["heads"].total[r])
    assert obj.as_dict()["head_name"] == "2-3" and obj.as_dict()["layer"] == 2
    same = leaderboard_rows(report["heads"], report["baselines"], min_count=1)
    same_obj = next(r for r in same if r.relation == "obj")
    assert (same_obj.layer, same_obj.head, same_obj.selected_on) == (0, 0, "report data")


def test_interval_equals_stats_bootstrap_and_margin_is_paired():
    res = score_split(_pairs(3))
    sel = score_split(_pairs(30))
    rows = leaderboard_rows(res["heads"], res["baselines"], select=sel["heads"], select_baselines=sel["baselines"],
                            min_count=1)
    row = next(r for r in rows if r.relation == "ALL")
    rel = res["heads"].index("ALL")
    c, t = res["heads"].units.columns([rel], [(res["heads"].directions.index(row.direction), row.layer, row.head)])
    low, high = bootstrap_ci(c, t)
    assert (row.ci_low, row.ci_high) == pytest.approx((low[0], high[0]))
    assert row.ci_low <= row.accuracy <= row.ci_high
    base = row.position_accuracy if row.best_baseline == "position" else row.baseline_accuracy
    assert row.margin == pytest.approx(row.accuracy - base)
    assert row.beats_baseline == (row.p_adjusted < 0.05 and row.margin > 0)  # the corrected test decides
    assert row.beats_baseline and row.margin_ci_low > 0  # 80% planted vs a weak baseline
    assert row.p_adjusted >= row.p_value and row.selection == "separate"


def test_deterministic_tie_break_prefers_lowest_layer_head_direction():
    sent = Sentence("t", ("a", "b"), (2, 0), ("det", "root"))
    att = WordAttention(np.full((2, 2, 2, 2), 0.5, np.float32), np.zeros(2, bool), (0, 1), (0, 1))
    res = score_split([(sent, att)])
    assert res["heads"].best("det")[:3] == (0, 0, 0)


def test_run_writes_every_output(tmp_path):
    board = leaderboard_from_pairs(_pairs(4), select_pairs=_pairs(5), report_name="rep", select_name="sel",
                                   min_count=1)
    assert not (tmp_path / "out").exists()  # nothing is written until asked
    board.write(tmp_path / "out")
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.json", "scores.csv", "run.json"):
        assert (tmp_path / "out" / name).is_file(), name
    assert (tmp_path / "out" / "figures" / "overview.png").is_file()
    assert (tmp_path / "out" / "figures" / "obj.png").is_file()
    with open(tmp_path / "out" / "leaderboard.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert tuple(table[0]) == LEADERBOARD_COLUMNS
    assert {int(r["layer"]) for r in table} <= {1, 2} and {int(r["head"]) for r in table} <= {1, 2, 3}
    assert all(r["direction"] in ("dep_to_head", "head_to_dep") for r in table)
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 for r in table)
    with open(tmp_path / "out" / "scores.csv", newline="") as fh:
        scores = list(csv.DictReader(fh))
    n_rel = len({r["relation"] for r in scores})
    assert len(scores) == n_rel * 2 * 2 * 3
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["selected_on"] == "sel" and run["reported_on"] == "rep" and run["held_out_selection"]
    assert {"extraction_s", "scoring_s", "writing_s", "overhead_fraction"} <= set(run["timings"])
    assert "1-based" in run["indexing"] or "from 1" in run["indexing"]
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "selected on sel and are reported and tested on rep" in md and "tests in this table" in md


def test_same_data_selection_is_said(tmp_path):
    board = leaderboard_from_pairs(_pairs(6), report_name="only", min_count=1, mode="same")
    board.write(tmp_path, figures=False)
    md = (tmp_path / "leaderboard.md").read_text()
    assert "same data (only)" in md and "optimistic" in md and "0 tests in this table" in md
    assert not board.held_out_selection and board.selection_mode == "same"
    assert all(not r.beats_baseline and r.p_value != r.p_value for r in board.rows)  # never tested
    assert "n/a (same data)" in board.format()
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["selection"]["mode"] == "same" and run["significance"]["n_tests"] == 0


def test_saved_board_reloads_exactly_and_rewrites_the_same_files(tmp_path):
    from probes.results import equal

    board = leaderboard_from_pairs(_pairs(7), select_pairs=_pairs(8), report_name="rep", select_name="sel",
                                   min_count=1, record={"model": "m"})
    loaded = Leaderboard.load(board.save(tmp_path / "saved"))
    assert equal(loaded, board) and isinstance(loaded.rows, tuple)
    board.write(tmp_path / "a", figures=False)
    loaded.write(tmp_path / "b", figures=False)  # no model, no pairs: the saved result alone
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.json", "scores.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_board_views_are_one_based_and_say_where_heads_were_chosen(tmp_path):
    board = leaderboard_from_pairs(_pairs(9), select_pairs=_pairs(10), report_name="rep", select_name="sel",
                                   min_count=1)
    table = board.to_pandas()
    assert tuple(table.columns) == LEADERBOARD_COLUMNS and len(table) == len(board.rows)
    first = board.rows[0]
    assert (table.loc[0, "layer"], table.loc[0, "head"]) == (first.layer + 1, first.head + 1)
    assert board.held_out_selection and (board.selected_on, board.reported_on) == ("sel", "rep")
    assert "selected on sel, reported on rep" in board._repr_html_()
    assert board.format("markdown").startswith("| relation | count | head |")
    assert board.format().splitlines()[0].split()[:3] == ["relation", "count", "head"]


def test_run_record_is_written_once_and_lists_every_file(tmp_path, monkeypatch):
    import probes.reports.leaderboard as report_module
    from probes.reports.tables import write_json
    from probes.run_record import RunRecord

    written = []  # every writer of JSON on the way: the report's tables, and run.json's one writer
    monkeypatch.setattr(report_module, "write_json", lambda obj, path: written.append(path) or write_json(obj, path))
    save = RunRecord.save
    monkeypatch.setattr(RunRecord, "save", lambda record, path: written.append(save(record, path)) or written[-1])
    paths = leaderboard_from_pairs(_pairs(11), report_name="rep", min_count=1).write(tmp_path, figures=False)
    assert [p for p in written if p.name == "run.json"] == [tmp_path / "run.json"]
    run = json.loads(paths["run.json"].read_text())
    saved = ["leaderboard/arrays.npz", "leaderboard/result.json"]  # the saved board: listed, not returned
    assert run["files"] == sorted([*(str(p.relative_to(tmp_path)) for n, p in paths.items() if n != "run.json"),
                                   *saved]) + ["run.json"]
    assert run["timings"]["overhead_fraction"] > 0 and "writing_s" in run["timings"]


def test_library_run_from_a_model_equals_pairs_and_writes_nothing(tmp_path, monkeypatch):
    from probes.extraction.extractor import AttentionExtractor
    from probes.runs.leaderboard import leaderboard
    from tests.tiny_models import build

    sentences = [Sentence(f"t{k}", ("the", "dog", "barked", "."), (2, 3, 0, 3), ("det", "nsubj", "root", "punct"))
                 for k in range(4)]
    extractor = AttentionExtractor.from_pretrained(build("bert", tmp_path / "model"), device="cpu", progress=False)
    monkeypatch.chdir(tmp_path)
    board = leaderboard(extractor, sentences, min_count=1)
    direct = leaderboard_from_pairs(extractor.iter_attention(sentences), min_count=1)
    assert board.rows == direct.rows and board.record.data["report"] == {"sentences": 4}
    assert board.record.details.extraction_report["n_yielded"] == 4 and board.record.has("versions")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # nothing written


def test_extra_analyses_run_in_the_same_pass_and_are_saved(tmp_path):
    """A registered analysis named in ``analyses`` sees the report pairs of the leaderboard's own pass."""
    from probes.analysis.attention_to_specials import AttentionToSpecials
    from probes.analysis.driver import stream
    from probes.results import equal, load

    pairs = _pairs(9)
    board = leaderboard_from_pairs(pairs, select_pairs=_pairs(10), min_count=1, analyses=["specials"])
    alone = stream(pairs, {"specials": AttentionToSpecials()})["specials"]
    assert set(board.analyses) == {"specials"} and equal(board.analyses["specials"], alone)
    assert alone.n_items == len(pairs) and board.record.options["analyses"] == ["specials"]
    paths = board.write(tmp_path, figures=False)
    assert equal(load(paths["analyses/specials"]), alone)
    assert "analyses/specials" in json.loads((tmp_path / "run.json").read_text())["files"]
    assert equal(Leaderboard.load(board.save(tmp_path / "saved")), board)


@pytest.mark.parametrize("name, message", [("nope", "unknown analysis 'nope'"),
                                           ("coreference", "'coreference' cannot run in a leaderboard")])
def test_extra_analyses_are_checked_before_any_work(name, message):
    from probes.errors import ConfigError

    def never():  # the pairs must not be touched
        raise AssertionError("pairs were read before the analyses were checked")
        yield

    with pytest.raises(ConfigError, match=message):
        leaderboard_from_pairs(never(), analyses=[name])


def test_default_is_split_selection_in_one_pass_and_records_it(tmp_path):
    """No selection data: one half of the sentences (fixed hash of ids) selects, the other reports."""
    from probes.analysis.split import SPLIT_RULE, half_of
    from probes.results import equal

    pairs = _pairs(12, n_sent=80)
    board = leaderboard_from_pairs(pairs, report_name="rep", min_count=1)
    in_select = sum(half_of(s.sent_id) == "select" for s, _ in pairs)
    assert board.selection_mode == "split" and board.held_out_selection
    assert (board.select.n_units, board.report.n_units) == (in_select, 80 - in_select)
    assert 0 < in_select < 80 and board.record.details.leaderboard.halves == {"select": in_select, "report": 80 - in_select}
    inputs = board.record.inputs
    assert (inputs["select"]["analysed"], inputs["report"]["analysed"]) == (in_select, 80 - in_select)
    assert all(r.selection == "split" and r.selected_on == "rep (selection half)" for r in board.rows)
    assert board.record.selection == {"mode": "split", "selected_on": "rep (selection half)",
                                         "reported_on": "rep (report half)", "rule": SPLIT_RULE}
    # the reported numbers are those of the report half only
    obj = next(r for r in board.rows if r.relation == "obj")
    only = score_split([(s, a) for s, a in pairs if half_of(s.sent_id) == "report"])["heads"]
    r = only.index("obj")
    d = only.directions.index(obj.direction)
    assert obj.accuracy == pytest.approx(only.correct[d, obj.layer, obj.head, r] / only.total[r])
    loaded = Leaderboard.load(board.save(tmp_path / "saved"))
    assert equal(loaded, board) and loaded.selection_mode == "split" and loaded.held_out_selection
    paths = board.write(tmp_path / "out", figures=False)
    run = json.loads(paths["run.json"].read_text())
    assert run["selection"]["mode"] == "split" and run["significance"]["method"] == "holm"
    assert run["significance"]["n_tests"] == sum(r.p_adjusted == r.p_adjusted for r in board.rows) > 0
    md = paths["leaderboard.md"].read_text()
    assert "Selection (split)" in md and SPLIT_RULE in md and "Holm" in md
    assert f"bootstrap over {80 - in_select} sentences" in md  # no document ids: sentences, all of the report half
    text = board.format()
    assert "Selection (split)" in text and f"{run['significance']['n_tests']} tests in this table" in text


def test_significance_is_holm_corrected_over_the_rows():
    from probes.heads.inference import holm

    sel, rep = score_split(_pairs(13)), score_split(_pairs(14))
    rows = leaderboard_rows(rep["heads"], rep["baselines"], select=sel["heads"], select_baselines=sel["baselines"],
                            min_count=1)
    p = np.array([r.p_value for r in rows])
    assert np.allclose([r.p_adjusted for r in rows], holm(p), equal_nan=True)
    assert all(r.beats_baseline == (r.p_adjusted < 0.05 and r.margin > 0) for r in rows)


def test_near_ties_list_an_equally_good_head():
    """Two heads planted identically are each other's tie; a random head is not."""
    pairs = _pairs(15, n_sent=80)
    for _, att in pairs:  # head (0, 1) copies the planted head (1, 2)
        att.weights[0, 1] = att.weights[1, 2]
    sel = score_split(_pairs(16, n_sent=80))
    rep = score_split(pairs)
    rows = leaderboard_rows(rep["heads"], rep["baselines"], select=sel["heads"], select_baselines=sel["baselines"],
                            min_count=1)
    row = next(r for r in rows if r.relation == "ALL")
    assert (row.layer, row.head, row.direction) == (1, 2, "dep_to_head")
    assert row.tied_heads == ("1-2 dep_to_head",) and row.ties == 1
    assert row.as_dict()["tied_heads"] == ["1-2 dep_to_head"]


def test_root_row_says_nothing_can_predict_it():
    sel, rep = score_split(_pairs(17)), score_split(_pairs(18))
    (row,) = leaderboard_rows(rep["heads"], rep["baselines"], select=sel["heads"], select_baselines=sel["baselines"],
                              relations=["root"])
    assert row.accuracy == 0 and row.baseline_accuracy == 0 and row.position_accuracy == 0
    assert "ROOT" in row.note and row.p_value != row.p_value and not row.beats_baseline
    from probes.reports.leaderboard import format_leaderboard

    assert "n/a (ROOT)" in format_leaderboard([row])


def test_select_on_same_from_a_model(tmp_path):
    from probes.extraction.extractor import AttentionExtractor
    from probes.runs.leaderboard import leaderboard
    from tests.tiny_models import build

    sentences = [Sentence(f"t{k}", ("the", "dog", "barked", "."), (2, 3, 0, 3), ("det", "nsubj", "root", "punct"))
                 for k in range(6)]
    extractor = AttentionExtractor.from_pretrained(build("bert", tmp_path / "model"), device="cpu", progress=False)
    same = leaderboard(extractor, sentences, select_on="same", min_count=1)
    split = leaderboard(extractor, sentences, min_count=1)
    assert same.selection_mode == "same" and not same.held_out_selection and same.select is None
    assert split.selection_mode == "split" and split.report.n_units + split.select.n_units == 6
