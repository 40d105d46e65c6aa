"""``match`` analyses in ``probes run``: every pair of seeds' final models of a cell, explicit pairs and a null
model; each unit holds the :class:`~probes.runs.match.MatchRun` that ``match_models`` gives on the same inputs, and
its key holds both models' (and the null model's) weights hashes. Bad match tables are refused at their line.

One tiny lab (GPT-2, 1 layer x 2 heads, 20 steps on sample:dev, 2 seeds) trains once for the module; ``copy``
names the folder of seed 1's last checkpoint, so matching seed 1 with it has a known answer (distance 0, the
identity)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from probes.errors import ConfigError

pytest.importorskip("torch")
pytestmark = pytest.mark.xdist_group("experiment-match")

LAB = """
[experiment]
name = "lab-match"
n_resamples = 20
unit_reports = false

[models]
copy = "trained:{out}/train/independent/seed-1@last"

[train]
arch = "gpt2"
layers = 1
heads = 2
hidden = 16
steps = 20
batch_size = 4
seq_len = 128
tokenizer = "train:300"
seeds = [1, 2]
symmetry_sentences = 0
treebank = "sample:dev"

[train.independent]

[data.sample]
treebank = "sample:test"

[analyses.match-seeds]
kind = "match"
limit = 16
n_resamples = 20

[analyses.match-copy]
kind = "match"
pairs = [["independent-s1", "copy"]]
null = "independent-s2"
limit = 16
n_resamples = 20
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    import torch

    from probes.runs.experiment import run_experiment

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("lab-match")
    out = root / "run"
    path = root / "lab.toml"
    path.write_text(LAB.format(out=out), encoding="utf-8")
    return path, out, run_experiment(path, out=out, progress=False)


def _units(run, analysis: str) -> list[dict]:
    return [u for u in run.record.details.run.units if u["analysis"] == analysis]


def test_seed_pairs_hold_the_matching_match_models_gives(lab) -> None:
    from probes.results import load
    from probes.runs.match import MatchRun, match_models

    _, out, run = lab
    (unit,) = _units(run, "match-seeds")  # two seeds: one pair; the [models] copy has no cell
    assert (unit["kind"], unit["model"], unit["data"]) == ("match", "independent-s1", "sample")
    assert unit["options"]["other"] == "independent-s2" and unit["options"]["cell"] == "independent"
    assert unit["path"] == "results/match-seeds/independent-s1~independent-s2/sample"
    saved = load(out / unit["path"] / "result")
    assert isinstance(saved, MatchRun) and saved.matching.within_layers and saved.matching.shape_a == (1, 2)
    direct = match_models(f"{out}/train/independent/seed-1/checkpoints/step-000020",
                          f"{out}/train/independent/seed-2/checkpoints/step-000020", "sample:test",
                          within_layers=True, limit=16, n_resamples=20)
    np.testing.assert_array_equal(saved.matching.head_b, direct.matching.head_b)
    np.testing.assert_array_equal(saved.matching.distance, direct.matching.distance)
    assert saved.matching.null_low is not None and "shuffled across layers" in saved.matching.null


def test_a_model_matched_with_its_own_weights_is_at_distance_zero_against_a_null_model(lab) -> None:
    from probes.results import load

    _, out, run = lab
    (unit,) = _units(run, "match-copy")
    assert unit["options"]["other"] == "copy" and unit["options"]["cell"] is None
    matching = load(out / unit["path"] / "result").matching
    assert np.all(matching.distance == 0.0)
    np.testing.assert_array_equal(matching.head_a, matching.head_b)  # the identity
    assert "null model" in matching.null and matching.null_low is not None


def test_match_keys_hold_both_models_and_the_null_models_weights(lab) -> None:
    import json

    _, out, run = lab
    models = run.record.details.models
    (unit,) = _units(run, "match-copy")
    inputs = json.loads((out / unit["path"] / "unit.json").read_text())["inputs"]
    assert inputs["model"]["weights_sha256"] == models["independent-s1"]["weights_sha256"]
    assert inputs["other"]["weights_sha256"] == models["copy"]["weights_sha256"]
    assert inputs["null"]["weights_sha256"] == models["independent-s2"]["weights_sha256"]
    assert models["copy"]["weights_sha256"] == models["independent-s1"]["weights_sha256"]  # the same folder
    (seeds,) = _units(run, "match-seeds")
    assert json.loads((out / seeds["path"] / "unit.json").read_text())["inputs"]["null"] == "shuffle"


def test_the_comparison_gets_match_units_with_their_pair(lab) -> None:
    from probes.runs.experiment import report_experiment

    _, out, _ = lab
    again = report_experiment(out, out=out.parent / "report-copy")
    assert {u["model"] for u in again.record.details.run.units if u["kind"] == "match"} == {"independent-s1"}


_FILE = """
[train]
arch = "gpt2"
layers = 1
heads = 2
hidden = 16
treebank = "sample:dev"
seeds = {seeds}

[train.a]

[models]
other = "some/folder"

[data.sample]
treebank = "sample:test"

[analyses.m]
kind = "match"
"""


@pytest.mark.parametrize("seeds, options, expected", [
    ("[1]", "", r"analyses\.m\.pairs: pairs = \"seeds\": expected two or more seeds' final models of one training "
                r"cell"),
    ("[1, 2]", "within_layers = false\n", r"analyses\.m\.null: null = \"shuffle\" .* needs within_layers = true"),
    ("[1, 2]", 'pairs = [["a-s1", "nope"]]\n', r"analyses\.m\.pairs: unknown model 'nope'"),
    ("[1, 2]", 'pairs = [["a-s1", "a-s1"]]\n', r"analyses\.m\.pairs: expected \"seeds\" or a non-empty list of pairs"),
    ("[1, 2]", 'null = "nope"\n', r"analyses\.m\.null: expected \"shuffle\" or a model name"),
    ("[1, 2]", "limit = 0\n", r"analyses\.m\.limit: expected a whole number from 1"),
    ("[1, 2]", "js_sentences = 3\n", r"analyses\.m\.js_sentences: unknown option for match"),
])
def test_bad_match_tables_are_refused_at_their_line(tmp_path: Path, seeds: str, options: str, expected: str) -> None:
    from probes.runs.experiment_spec import read_experiment

    path = tmp_path / "x.toml"
    path.write_text(_FILE.format(seeds=seeds) + options, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"x\.toml:\d+: " + expected):
        read_experiment(path)


def test_seed_pairs_are_drawn_within_cells_from_the_analysis_models(tmp_path: Path) -> None:
    from probes.runs.experiment_lab import lab_names
    from probes.runs.experiment_match import match_pairs
    from probes.runs.experiment_spec import read_experiment

    path = tmp_path / "x.toml"
    cell_b = "[train.b]\nseeds = [4, 5]\ncheckpoint_models = [0]\n\n[models]"  # b-s4-step0 is no final model
    path.write_text(_FILE.format(seeds="[1, 2, 3]").replace("[models]", cell_b), encoding="utf-8")
    experiment = read_experiment(path)
    pairs = match_pairs("seeds", experiment.analyses[0].models, lab_names(experiment.train))
    assert pairs == [("a-s1", "a-s2", "a"), ("a-s1", "a-s3", "a"), ("a-s2", "a-s3", "a"), ("b-s4", "b-s5", "b")]
