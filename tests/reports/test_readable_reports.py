"""Issue 38, reports a person reads: every generated report opens, right under its title, with its answers in short
paragraphs (no prose paragraph over 600 characters; tables, lists and code are not paragraphs), says once that layers
and heads are 1-based, and keeps its numbers; every series in a figure's axes has its own colour, line style and
marker; and a training run whose held-out loss ends above the unigram baseline says so, in its summary and at the
top of its report.

Each report is generated on the tiny inputs the existing report tests use (hand-built comparisons and results,
simulated coreference runs, planted probing data, two tiny random BERTs for the atlas and the match).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.reports.prose import MAX_PARAGRAPH, long_paragraphs, pack, paragraphs, sections

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "docs" / "what-makes-heads-differ"


def _readable(text: str, name: str, *, numbered: bool = True, tested: bool = True) -> str:
    """Assert ``text`` (a report.md) reads as issue 38 asks; its opening section's body.

    The title, then at once ``## Answers`` or ``## In short`` with at least one paragraph holding a number; no prose
    paragraph anywhere over :data:`MAX_PARAGRAPH` characters; ``numbered``: the opening says how layers and heads
    are numbered; ``tested``: it names its test."""
    lines = text.splitlines()
    assert lines[0].startswith("# "), name
    first = next(line for line in lines[1:] if line.strip())
    assert first in ("## Answers", "## In short"), (name, first)
    heading, body = sections(text)[0]
    said = paragraphs(body)
    assert said and any(any(c.isdigit() for c in p) for p in said), (name, said)
    assert not long_paragraphs(text), (name, [p[:120] for p in long_paragraphs(text)])
    if numbered:
        assert "numbered from 1" in body or "1-based" in body, name
    if tested:
        assert "Holm" in body or "test" in body, name
    return body


# --- the rule itself ---------------------------------------------------------------------------------------


def test_paragraphs_are_prose_only_and_packing_keeps_them_short() -> None:
    text = ("# Title\n\n## In short\n\nOne short answer. It has 2 sentences.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
            "- a list item " + "x" * 700 + "\n- another\n\n```\n" + "code " * 200 + "\n\nstill code\n```\n\n"
            "<div>" + "h" * 700 + "</div>\n\n    indented code " + "y" * 700 + "\n\nA second\nparagraph.\n")
    assert paragraphs(text) == ["One short answer. It has 2 sentences.", "A second paragraph."]
    assert long_paragraphs(text) == [] and long_paragraphs(text + "\n" + "z" * 601 + "\n") == ["z" * 601]
    assert sections(text)[0][0] == "In short"
    sentences = [f"Sentence {k} holds the number {k}{' and a word' * 12}." for k in range(12)]
    packed = pack(" ".join(sentences))
    assert len(packed) > 1 and all(len(p) <= MAX_PARAGRAPH for p in packed)
    assert " ".join(packed) == " ".join(sentences)  # nothing lost, nothing reordered


# --- every report ------------------------------------------------------------------------------------------


def test_the_leaderboard_opens_with_its_answers(tmp_path: Path) -> None:
    from tests.reports.test_figures import _board

    board = _board()
    board.write(tmp_path, figures=False)
    text = (tmp_path / "leaderboard.md").read_text(encoding="utf-8")
    body = _readable(text, "leaderboard.md")
    tested = [r for r in board.rows if r.p_adjusted == r.p_adjusted]
    assert f"The best head of {sum(r.beats_baseline for r in tested)} of {len(tested)} relations beats" in body
    best = max(board.rows, key=lambda r: r.margin)  # the numbers are the table's
    assert (f"{best.relation} ({best.direction}), head {best.layer + 1}-{best.head + 1}, accuracy "
            f"{100 * best.accuracy:.1f}% [{100 * best.ci_low:.1f}-{100 * best.ci_high:.1f}]") in body
    assert f"| {best.relation} | {best.count} | {best.layer + 1}-{best.head + 1} |" in text
    assert text.count("numbered from 1") == 1  # said once


def test_coreference_and_bridging_open_with_their_answers(tmp_path: Path) -> None:
    from probes.runs.coreference import BridgingRun, CoreferenceRun
    from tests.runs.test_coref_selection import fake_bridging, fake_coref

    rng = np.random.default_rng(5)
    p = np.full((3, 4), 0.5)
    p[1, 2] = 0.8  # head 2-3 is the planted one
    record = {"command": "coref", "options": {"corpus": "gum.conllu"},
              "selection": {"mode": "split", "selected_on": "gum.conllu, selection half (30 documents)",
                            "reported_on": "gum.conllu, report half (30 documents)"}}
    CoreferenceRun(fake_coref(rng, p), fake_coref(rng, p, prefix="s"), record, n_resamples=20).write(
        tmp_path / "coref", figures=False)
    body = _readable((tmp_path / "coref" / "coref_leaderboard.md").read_text(encoding="utf-8"), "coref")
    assert body.lstrip().startswith("Head 2-3 picks the antecedent of") and "Holm p" in body
    BridgingRun(fake_bridging(rng, [40, 20, 0, 0, 0]), fake_bridging(rng, [40, 20, 0, 0, 0], prefix="s"),
                {**record, "command": "bridging"}, n_resamples=20, min_links=12).write(
        tmp_path / "bridging", figures=False)
    body = _readable((tmp_path / "bridging" / "bridging_leaderboard.md").read_text(encoding="utf-8"), "bridging")
    assert "Over all 60 links, head" in body and "attention-mass ratio" in body


def test_importance_and_pruning_open_with_their_answers() -> None:
    from probes.reports.importance.report import importance_markdown, pruning_markdown
    from tests.reports.test_importance_reports import _importance, _pruning

    body = _readable(importance_markdown(_importance(), model="tiny", record={}), "importance.md", tested=False)
    assert "Spearman's rho = 0.4321 (95% interval 0.1234 to 0.7654" in body
    body = _readable(pruning_markdown(_pruning(), model="tiny", record={}), "pruning.md", tested=False)
    assert "`importance` order 0.5 (4 heads)" in body and "at 3 of 3 steps" in body


def _experiment_md(comparison: Any, record: Any, out: Path) -> str:
    """report.md of an experiment, without drawing its figures."""
    from probes.reports.experiment.report import report_blocks, report_markdown

    return report_markdown("An experiment", report_blocks(comparison, record, {}, out), out)


def test_the_experiment_report_opens_with_its_answers(tmp_path: Path) -> None:
    from tests.reports.test_experiment_report import _comparison, _record

    body = _readable(_experiment_md(_comparison(), _record(), tmp_path), "report.md (seed questions)")
    assert [p[:3] for p in paragraphs(body)[:5]] == ["Q1.", "Q2.", "Q3.", "Q4.", "Q5."]
    text = _experiment_md(replace(_comparison(), tests=()), _record(seed_questions=False), tmp_path)
    body = _readable(text, "report.md (no seed questions)")
    assert sections(text)[0][0] == "In short" and "minilm on ewt: the best head of" in body


def test_the_shipped_seed_question_report_reads_and_is_the_one_its_comparison_writes(tmp_path: Path) -> None:
    """docs/what-makes-heads-differ/report.md is the current layout: it opens with Q1..Q5, no paragraph runs long,
    and its answers are what its saved comparison and run record give now; the lab's answers open lab/report.md."""
    from probes import load

    shipped = (SHIPPED / "report.md").read_text(encoding="utf-8")
    body = _readable(shipped, "docs/what-makes-heads-differ/report.md")
    assert [p[:3] for p in paragraphs(body)[:5]] == ["Q1.", "Q2.", "Q3.", "Q4.", "Q5."]
    assert "Lab (" not in body and "## Training lab" not in shipped  # the lab is the role lab's report now
    lab = (SHIPPED / "lab" / "report.md").read_text(encoding="utf-8")
    assert sections(lab)[0][0] == "Answers" and len(paragraphs(_readable(lab, "lab/report.md"))) >= 5
    record = json.loads((SHIPPED / "run.json").read_text(encoding="utf-8"))
    again = _experiment_md(load(SHIPPED / "comparison"), record, SHIPPED)
    assert sections(again)[0] == sections(shipped)[0]


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.tiny_models import build

    root = tmp_path_factory.mktemp("readable")
    return build("bert", root / "a", seed=0), build("bert", root / "b", seed=1)


def test_the_match_opens_with_its_answers(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    from probes.runs.match import match_models

    run = match_models(str(tiny_pair[0]), str(tiny_pair[1]), "sample:dev", within_layers=True, limit=6,
                       n_resamples=10, progress=False)
    run.write(tmp_path, figures=False)
    body = _readable((tmp_path / "matching.md").read_text(encoding="utf-8"), "matching.md", tested=False)
    assert f"D_match {run.summary['D_match']:.4f}" in body and "D_random" in body and "null" in body


def test_the_atlas_opens_with_its_answers(tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    from probes.runs.atlas import atlas

    result = atlas(tiny_pair[0], "sample:dev", js_sentences=6, clusters=2, limit=12, progress=False,
                   grad_sentences=0, head_type_sequences=0)
    result.write(tmp_path, figures=False)
    body = _readable((tmp_path / "atlas.md").read_text(encoding="utf-8"), "atlas.md", tested=False)
    assert body.lstrip().startswith("Clark et al.'s findings on BERT-base, checked on this model")
    assert "Positional heads (does not hold): 0 previous-token heads" in body  # a random tiny BERT: none
    _readable((tmp_path / "leaderboard" / "leaderboard.md").read_text(encoding="utf-8"), "atlas leaderboard")


def test_the_probe_reports_open_with_their_answers(tmp_path: Path) -> None:
    from probes.probing import ControlTask
    from probes.probing.synthetic import planted_pairs
    from probes.runs.probing import run_probes

    run = run_probes(list(planted_pairs(24, random_state=0)), list(planted_pairs(16, random_state=1)),
                     kinds=["per-head", "attn", "right-branching", "label"], control=ControlTask(0), seeds=1,
                     random_state=5, min_count=1, progress=False)
    run.write(tmp_path, figures=False)
    body = _readable((tmp_path / "parsers.md").read_text(encoding="utf-8"), "parsers.md", numbered=False)
    best = max(run.parsers, key=lambda r: r.uas)
    assert f"The best parser is {best.probe}: UAS {100 * best.uas:.1f}%" in body
    _readable((tmp_path / "per_head.md").read_text(encoding="utf-8"), "per_head.md")
    _readable((tmp_path / "label.md").read_text(encoding="utf-8"), "label.md")


# --- training: the baseline in words -----------------------------------------------------------------------


def _train_report(out: Path, last: float, unigram: float = 5.933) -> Any:
    """A finished 8-step training run planted by hand: held-out loss 8.3 at step 0 and ``last`` at step 8."""
    from probes.run_record import RunRecord
    from probes.runs.train import TrainReport
    from probes.training.config import TrainConfig
    from probes.training.curves import TrainingCurves
    from probes.training.trainer import TrainingRun

    config = TrainConfig(arch="bert", layers=1, heads=2, hidden=32, treebank=("sample:dev",), tokenizer="train:200",
                         steps=8)
    run = TrainingRun(out=out, config=config, checkpoints={0: out / "checkpoints/step-000000",
                                                           8: out / "checkpoints/step-000008"},
                      resumed_from=None, stopped="finished", seconds=1.0, tokens_per_second=1000.0, training=None)
    curves = TrainingCurves(steps=np.array([0, 8]), tokens_seen=np.array([0, 4096]),
                            train_loss=np.array([np.nan, 6.4]), dev_loss=np.array([8.3, last]),
                            unigram_dev_loss=unigram)
    return TrainReport(run=run, curves=curves, record=RunRecord.of({"command": "probes train"}))


SENTENCE = ("held-out loss 6.165 ends above the unigram baseline 5.933: the model has not learned more than word "
            "frequencies; train longer or check the data")


@pytest.mark.parametrize("last, above", [(6.165, True), (4.8, False)])
def test_training_says_when_held_out_loss_ends_above_the_unigram_baseline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], last: float,
        above: bool) -> None:
    import probes.runs.train as train_run
    from probes.cli import main

    out = tmp_path / "run"
    monkeypatch.setattr(train_run, "train_model", lambda *args, **kwargs: _train_report(out, last))
    code = main(["train", "--arch", "bert", "--layers", "1", "--heads", "2", "--hidden", "32", "-t", "sample:dev",
                 "--steps", "8", "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert (SENTENCE in printed) is above
    assert ("ends above the unigram baseline" in printed) is above
    report = (out / "report.md").read_text(encoding="utf-8")
    body = _readable(report, "training report.md", tested=False)
    first = paragraphs(body)[0]
    if above:
        assert first == SENTENCE[:1].upper() + SENTENCE[1:] + "."
    else:
        assert first.startswith("Held-out loss 4.800 at step 8 ends below the unigram baseline 5.933")
    assert "report.md" in json.loads((out / "run.json").read_text(encoding="utf-8"))["files"]


def test_the_baseline_sentence_needs_a_last_loss_strictly_above_it(tmp_path: Path) -> None:
    from probes.reports.training import baseline_warning

    assert baseline_warning(_train_report(tmp_path, 6.165).curves) == SENTENCE
    assert baseline_warning(_train_report(tmp_path, 5.933).curves) == ""  # equal is not above
    assert baseline_warning(_train_report(tmp_path, float("nan")).curves) == ""


# --- figures: every series of an axes told apart -----------------------------------------------------------


def test_series_styles_tell_every_series_apart() -> None:
    from probes.reports.experiment.figures import model_styles
    from probes.reports.figures import PALETTE, series_styles

    styles = list(series_styles(f"s{k}" for k in range(len(PALETTE))).values())
    assert len({s.color for s in styles}) == len({s.marker for s in styles}) == len(PALETTE)
    many = list(series_styles(f"s{k}" for k in range(60)).values())
    assert len({(s.color, s.linestyle, s.marker) for s in many}) == 60
    # the seed question's six models: two trained, four random-init twins, each its own colour and marker
    models = json.loads((SHIPPED / "run.json").read_text(encoding="utf-8"))["models"]
    shown = model_styles({name: info for name, info in models.items() if not info.get("lab")})
    assert len(shown) == 6
    assert len({s["color"] for s in shown.values()}) == len({s["marker"] for s in shown.values()}) == 6
    assert {name for name, s in shown.items() if s["fill"] == "white"} == {
        "minilm-random", "minilm-sharp", "smollm2-random", "smollm2-sharp"}


def _key(handle: Any) -> tuple[str, str, str]:
    """What tells a legend entry apart: its colour, line style and marker (a patch: ``patch`` and its hatch)."""
    from matplotlib.collections import Collection
    from matplotlib.colors import to_hex
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if isinstance(handle, Line2D):
        return to_hex(handle.get_color()), str(handle.get_linestyle()), str(handle.get_marker())
    if isinstance(handle, Patch):
        return to_hex(handle.get_facecolor()), "patch", str(handle.get_hatch() or "")
    if isinstance(handle, Collection):
        faces = np.asarray(handle.get_facecolor())
        colour = faces[0] if len(faces) else np.asarray(handle.get_edgecolor())[0]
        shape = np.round(handle.get_paths()[0].vertices, 2).tolist() if handle.get_paths() else []
        return to_hex(colour), type(handle).__name__, str(shape)
    raise AssertionError(f"a legend entry of an unexpected kind: {handle!r}")


@pytest.fixture()
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Any]]]:
    """Every figure handed to ``save_figure``, by file name, none written."""
    import probes.reports.atlas.figures
    import probes.reports.experiment.figures
    import probes.reports.experiment.lab_figures
    import probes.reports.figures
    import probes.reports.importance.figures

    figures: list[tuple[str, Any]] = []

    def keep(fig: Any, path: str | Path, **options: Any) -> Path:
        figures.append((Path(path).name, fig))
        return Path(path)

    for module in (probes.reports.figures, probes.reports.experiment.figures, probes.reports.experiment.lab_figures,
                   probes.reports.atlas.figures, probes.reports.importance.figures):
        monkeypatch.setattr(module, "save_figure", keep)
    yield figures


def _legends_tell_series_apart(figures: list[tuple[str, Any]]) -> int:
    """Assert no two entries of any legend look alike; the number of legends seen."""
    seen = 0
    for name, fig in figures:
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
        for legend in legends:
            keys = [_key(h) for h in legend.legend_handles]
            labels = [t.get_text() for t in legend.get_texts()]
            alike = [(label, key) for label, key in zip(labels, keys) if keys.count(key) > 1]
            assert not alike, (name, alike)
            seen += 1
    return seen


def test_every_experiment_and_lab_figure_tells_its_series_apart(drawn: list[tuple[str, Any]],
                                                               tmp_path: Path) -> None:
    from probes import load
    from probes.reports.experiment import lab
    from probes.reports.experiment.report import _draw
    from probes.run_record import RunRecord
    from tests.reports.test_experiment_report import _comparison, _record

    _draw(_comparison(), RunRecord.of(_record()), tmp_path, "png")  # 4 models on 2 datasets
    lab.draw_lab(load(SHIPPED.parent.parent / "tests" / "fixtures" / "lab_comparison"), tmp_path, "png", "lab")
    names = {name for name, _ in drawn}
    assert {"head_kinds.png", "q1_spread.png", "q3_redundancy.png", "pruning.png", "q5_layers.png",
            "lab_symmetry.png", "lab_capacity.png", "lab_division.png"} <= names
    assert _legends_tell_series_apart(drawn) >= 10


def test_every_atlas_importance_and_training_figure_tells_its_series_apart(
        drawn: list[tuple[str, Any]], tiny_pair: tuple[Path, Path], tmp_path: Path) -> None:
    from probes.reports.atlas.report import _figures
    from probes.reports.importance.figures import write_importance_scatter, write_pruning_curves
    from probes.reports.training import draw_loss, draw_symmetry
    from probes.runs.atlas import atlas
    from probes.training.symmetry import HeadSymmetry
    from tests.reports.test_importance_reports import _importance, _pruning

    result = atlas(tiny_pair[0], "sample:dev", js_sentences=6, clusters=2, limit=12, progress=False,
                   grad_sentences=0, head_type_sequences=0)
    _figures(result, result.heads_table(), tmp_path)
    write_pruning_curves(_pruning(), tmp_path / "curves.png", title="tiny")
    write_importance_scatter(_importance(), tmp_path / "scatter.png", title="tiny")
    draw_loss(_train_report(tmp_path, 6.165).curves, tmp_path / "loss.png")
    rng = np.random.default_rng(0)
    distances = rng.uniform(0.1, 1.0, (3, 3, 2, 2))
    draw_symmetry(HeadSymmetry(steps=np.array([0, 1, 2]), param_distance=distances, attention_distance=distances / 2,
                               n_sentences=4), tmp_path / "symmetry.png")
    names = {name for name, _ in drawn}
    assert {"entropy.png", "mds.png", "patterns.png", "curves.png", "loss.png", "symmetry.png"} <= names
    assert _legends_tell_series_apart(drawn) >= 6
