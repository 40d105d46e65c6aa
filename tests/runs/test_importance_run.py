"""``probes importance`` and ``probes prune`` end to end on a tiny BERT and the packaged sample corpus.

The numbers themselves are checked against hand computations in tests/importance/; here: the data split
(selection vs report), what the files hold, long sentences named everywhere, options refused before the
model loads, and the pruned leaderboard against the invariance that attention in layer 1 cannot change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import probes
from probes.analysis.split import half_of
from probes.cli import main
from probes.results import equal
from probes.runs.importance import importance, prune
from tests.tiny_models import build

SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample" / "sample-dev.conllu"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build("bert", tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def pruned(tiny: str) -> Any:
    return prune(tiny, str(SAMPLE), limit=40, step=0.25, random_seeds=(0, 1), device="cpu")


def test_prune_measures_on_the_report_half_and_chooses_on_the_other(pruned: Any) -> None:
    from probes.runs.inputs import read_sentences

    _, sentences = read_sentences(str(SAMPLE), 40)
    halves = [half_of(s.sent_id) for s in sentences]
    inputs = pruned.record.inputs
    assert inputs["report"]["seen"] == halves.count("report") and inputs["select"]["seen"] == halves.count("select")
    assert pruned.curves.selection.endswith("(selection half)") and pruned.curves.data.endswith("(report half)")
    assert pruned.start.data == pruned.curves.selection  # the importance the curves start from: selection data
    curves = pruned.curves
    assert curves.curves == ("importance", "random:0", "random:1", "specialised-last", "confident-last")
    assert curves.n_pruned.tolist() == [0, 2, 4, 6, 8]  # 2 x 4 heads, steps of 25%
    first, last = curves.values[:, 0, 0], curves.values[:, -1, 0]
    assert np.allclose(first, first[0]) and np.allclose(last, last[0])  # nothing / everything pruned: same model
    assert abs(first[0]) < 1e-6 < last[0]  # representation: 0 unmodified (up to rounding), > 0 with every head gone
    assert sorted(curves.order[0].tolist()) == list(range(8))


def test_the_pruned_leaderboard_keeps_layer_one_heads(pruned: Any) -> None:
    """The attention of layer 1 is computed from the embeddings alone: pruning any head cannot change it."""
    table = pruned.leaderboard
    assert table["n_pruned"] == 4 and table["rows"]
    for row in table["rows"]:
        if row["layer"] == 1:
            assert row["accuracy_pruned"] == row["accuracy_unpruned"]
    pruned_heads = pruned.curves.order[0, :4]
    kept = {(r["layer"] - 1) * 4 + r["head"] - 1 for r in table["rows"]}
    assert not kept & set(pruned_heads.tolist())  # the best head *left*: never a pruned one


def test_prune_writes_tables_figures_and_a_record_that_loads_back(pruned: Any, tmp_path: Path) -> None:
    paths = pruned.write(tmp_path / "out")
    table = pd.read_csv(paths["pruning.csv"])
    assert list(table.columns[:4]) == ["order", "fraction_pruned", "n_pruned", "objective"]
    assert len(table) == 5 * 5  # 5 curves x 5 steps
    np.testing.assert_allclose(table[table.order == "importance"].objective, pruned.curves.curve("importance"))
    heads = pd.read_csv(paths["importance.csv"])
    assert (heads["layer"].min(), heads["layer"].max(), heads["head"].min(), heads["head"].max()) == (1, 2, 1, 4)
    record = json.loads(paths["run.json"].read_text())
    assert record["command"] == "probes prune" and "pruning.md" in record["files"]
    assert all((tmp_path / "out" / f).is_file() for f in record["files"])
    assert {"figures/pruning-curves.png", "figures/one-head-per-layer.png"} <= set(record["files"])
    assert equal(probes.load(tmp_path / "out" / "pruning"), pruned)
    text = paths["pruning.md"].read_text()
    assert "(selection half)" in text and "1-based" in text and "random" in text


def test_importance_cuts_a_long_sentence_and_names_it(tiny: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny BERT takes 64 tokens: a 90-word sentence is skipped, or cut with --on-long truncate, and named."""
    lines = SAMPLE.read_text(encoding="utf-8").split("\n\n")[:12]
    words = "\n".join(f"{i}\tdog\tdog\tNOUN\tNN\t_\t{0 if i == 1 else 1}\t{'root' if i == 1 else 'dep'}\t_\t_"
                      for i in range(1, 91))
    treebank = tmp_path / "long.conllu"
    treebank.write_text("\n\n".join(lines) + "\n\n# sent_id = very-long\n" + words + "\n\n", encoding="utf-8")
    out = tmp_path / "cut"
    assert main(["importance", "-m", tiny, "-t", str(treebank), "--select-on", str(SAMPLE), "--limit", "20",
                 "--on-long", "truncate", "--no-loo", "--no-progress", "--out", str(out)]) == 0
    console = capsys.readouterr().out
    assert "1 cut to the words that fit, analysed: very-long" in console
    assert "very-long" in (out / "importance.md").read_text()
    record = json.loads((out / "run.json").read_text())
    assert record["inputs"]["report"]["cut"] == ["very-long"] and record["inputs"]["report"]["analysed"] == 13
    skipped = importance(tiny, str(treebank), select_on=str(SAMPLE), limit=20, loo=False, device="cpu")
    assert skipped.record.inputs["report"]["skipped"] == ["very-long"]
    assert skipped.result.n_sentences == 12


@pytest.mark.parametrize(("args", "code", "message"), [
    (["--objective", "accuracy"], 2, "--objective"),
    (["--ablation", "random"], 2, "--ablation"),
    (["--on-long", "window"], 1, "'window' is for attention extraction"),
    (["--max-batch-tokens", "4"], 2, "--max-batch-tokens"),
])
def test_bad_options_are_refused_before_the_model_loads(args: list[str], code: int, message: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "no-such-model")  # loading it would fail with another message
    assert main(["importance", "-m", missing, "-t", str(SAMPLE), *args, "--out", str(tmp_path / "o")]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_the_cli_choices_are_the_librarys() -> None:
    from probes.cli.importance import ABLATION_CHOICES, OBJECTIVE_CHOICES
    from probes.extraction.interventions import ABLATIONS
    from probes.importance.objectives import OBJECTIVES

    assert OBJECTIVE_CHOICES == OBJECTIVES and ABLATION_CHOICES == ABLATIONS


def test_a_relation_absent_from_the_report_data_is_nan_in_the_pruned_leaderboard(tiny: str, tmp_path: Path) -> None:
    """Relations listed on the selection data may have no word in the report data (found on 200 EWT test
    sentences, where ``det:*`` had none): their accuracies are NaN and the report says why, instead of failing."""
    from probes.reports.importance.output import leaderboard_markdown

    report = tmp_path / "two.conllu"
    report.write_text("# sent_id = a\n# text = Dogs bark .\n1\tDogs\tdog\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n"
                      "2\tbark\tbark\tVERB\tVBP\t_\t0\troot\t_\t_\n3\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_\n\n"
                      "# sent_id = b\n# text = Cats sleep .\n1\tCats\tcat\tNOUN\tNNS\t_\t2\tnsubj\t_\t_\n"
                      "2\tsleep\tsleep\tVERB\tVBP\t_\t0\troot\t_\t_\n3\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_\n\n",
                      encoding="utf-8")
    run = prune(tiny, str(report), select_on=str(SAMPLE), step=0.5, random_seeds=(0,), orders=(), device="cpu")
    rows = {r["relation"]: r for r in run.leaderboard["rows"]}
    absent = [name for name in rows if name not in ("ALL", "ALL-nopunct", "nsubj", "root", "punct")]
    assert absent, f"expected a selection relation missing from the report data, found only {sorted(rows)}"
    for name in absent:
        assert np.isnan(rows[name]["accuracy_unpruned"]) and np.isnan(rows[name]["accuracy_pruned"])
    assert np.isfinite(rows["ALL"]["accuracy_unpruned"])
    text = leaderboard_markdown(run.leaderboard)
    assert f"{len(absent)} relation" in text and "no word in the report data" in text
