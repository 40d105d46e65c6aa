"""The head atlas end to end on tiny models (probes.runs.atlas, probes atlas)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import probes
from probes.cli import app
from probes.errors import ConfigError
from probes.runs.atlas import Atlas, atlas, spread_ids
from tests.tiny_models import build

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# one worker runs this module, so the atlas of the tiny BERT (bert_atlas) is computed once
pytestmark = pytest.mark.xdist_group("atlas")


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("bert", tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("gpt2", tmp_path_factory.mktemp("gpt2"))


@pytest.fixture(scope="module")
def bert_atlas(bert: Path) -> Atlas:
    return atlas(bert, "sample:dev", js_sentences=20, clusters=3, word_level=True)


def test_heads_table_has_one_row_per_head_with_every_measure(bert_atlas: Atlas) -> None:
    table = bert_atlas.heads_table()
    assert len(table) == 2 * 4  # the tiny BERT: 2 layers x 4 heads
    assert table["layer"].tolist() == [1, 1, 1, 1, 2, 2, 2, 2] and table["head"].tolist() == [1, 2, 3, 4] * 2
    for column in ("to_cls", "to_sep", "to_punct", "to_self", "to_next", "to_prev", "entropy", "entropy_first",
                   "confidence", "positional", "rare_word", "pattern", "syntactic", "best_relation", "best_accuracy",
                   "best_margin", "cluster", "mds_x", "mds_y", "word_to_cls", "pattern_heterogeneous"):
        assert column in table.columns, column
    # the table holds the analyses' own numbers, in layer-major order
    np.testing.assert_array_equal(table["to_cls"].to_numpy(), bert_atlas.surface.mean("to_cls").ravel())
    np.testing.assert_array_equal(table["cluster"].to_numpy(), bert_atlas.clusters)
    assert set(table["cluster"]) <= {1, 2, 3}
    assert bert_atlas.distances.n_items == 20
    # a bare BertModel has no masked-LM head: no gradients, and the note says why
    assert bert_atlas.gradients is None and "no language-model head" in bert_atlas.gradients_note
    assert bert_atlas.record.details.atlas.leaderboard.selection.mode == "split"


def test_write_and_load_back(bert_atlas: Atlas, tmp_path: Path) -> None:
    paths = bert_atlas.write(tmp_path / "out")
    out = tmp_path / "out"
    for name in ("heads.csv", "atlas.md", "atlas.html", "head_view.html", "run.json"):
        assert paths[name].is_file(), name
    record = json.loads((out / "run.json").read_text())
    assert all((out / f).is_file() for f in record["files"])
    assert "figures/mds.png" in record["files"] and "leaderboard/leaderboard.md" in record["files"]
    table = pd.read_csv(out / "heads.csv")
    assert table["head_name"].tolist()[:2] == ["1-1", "1-2"]
    text = (out / "atlas.md").read_text()
    assert "Findings beside Clark et al." in text and "1-based" in text and "kappa" in text
    loaded = probes.load(out / "atlas")
    assert isinstance(loaded, Atlas)
    pd.testing.assert_frame_equal(loaded.heads_table(), bert_atlas.heads_table())
    # re-reported without the model, with SVG figures this time (PNG too: atlas.html embeds them)
    svg = loaded.write(tmp_path / "svg", figure_format="svg")
    assert svg["heads.csv"].read_text() == paths["heads.csv"].read_text()
    assert svg["figures/mds.svg"].read_text().lstrip().startswith("<?xml") and svg["figures/mds.png"].is_file()


def test_decoder_has_empty_end_special_and_gradients(gpt2: Path) -> None:
    result = atlas(gpt2, "sample:dev", limit=30, js_sentences=10, grad_sentences=5)
    table = result.heads_table()
    assert table["to_sep"].isna().all()  # no end special: empty, not zero
    assert result.gradients is not None and {"grad_other", "grad_sep"} <= set(table.columns)
    assert table["grad_sep"].isna().all() and table["grad_other"].notna().all()


def test_coreference_accuracy_per_head(bert: Path) -> None:
    result = atlas(bert, "sample:dev", corpus=FIXTURES / "coref" / "tiny_gum.conllu", limit=30, js_sentences=5,
                   grad_sentences=0)
    accuracy = result.heads_table()["coref_accuracy"].to_numpy()
    assert accuracy.shape == (8,) and np.all((accuracy >= 0) & (accuracy <= 1))
    assert result.gradients is None and "--grad-sentences 0" in result.gradients_note


def test_bad_options_fail_before_the_model_loads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="js_sentences must be a whole number >= 2"):
        atlas(tmp_path / "no-model", "sample:dev", js_sentences=1)
    with pytest.raises(ConfigError, match="clusters must be"):
        atlas(tmp_path / "no-model", "sample:dev", clusters=0)


def test_unknown_example_is_named(bert: Path) -> None:
    with pytest.raises(ConfigError, match="no sentence with id 'nope'"):
        atlas(bert, "sample:dev", example="nope", limit=5)


def test_spread_ids_is_a_fixed_sample_of_the_given_size() -> None:
    ids = [f"s{i}" for i in range(1000)]
    chosen = spread_ids(ids, 100)
    assert len(chosen) == 100 and chosen == spread_ids(list(reversed(ids)), 100)
    assert 20 < sum(int(i[1:]) < 500 for i in chosen) < 80  # spread over the corpus, not its first sentences


def test_cli_writes_the_atlas(bert: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    done = CliRunner().invoke(app, ["atlas", "--model", str(bert), "--treebank", "sample:dev", "--limit", "25",
                                    "--js-sentences", "5", "--clusters", "2", "--out", str(out), "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "Report:" in done.output and "layers and heads 1-based" in done.output
    assert (out / "atlas.html").is_file()
    bad = CliRunner().invoke(app, ["atlas", "--model", str(bert), "--treebank", "sample:dev", "--js-sentences", "1"])
    assert bad.exit_code == 2
