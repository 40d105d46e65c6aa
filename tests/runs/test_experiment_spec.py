"""Experiment files: every mistake names the file, the line and what was expected; env paths; defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.errors import ConfigError
from probes.runs.experiment_spec import expand_env, read_experiment

GOOD = """
[experiment]
title = "t"
seed_questions = true
n_resamples = 200

[models]
base = "some/folder"
twin = "random-init:some/folder@4"

[data.sample]
treebank = "sample:test"
select_on = "sample:dev"

[data.gum]
corpus = "ud:en_gum:test"

[analyses.atlas]
js_sentences = 20

[analyses.coref]
kind = "coreference"
n_resamples = 50

[analyses.prune-probe]
kind = "prune"
objective = "probe"
models = ["base"]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_models_data_and_analyses(tmp_path: Path) -> None:
    exp = read_experiment(_write(tmp_path, GOOD))
    assert exp.name == "exp" and exp.out == "runs/exp" and exp.seed_questions and exp.n_resamples == 200
    twin = exp.model("twin")
    assert (twin.kind, twin.base, twin.seed) == ("random-init", "some/folder", 4)
    assert exp.model("base").kind == "trained"
    atlas = next(a for a in exp.analyses if a.name == "atlas")
    assert atlas.data == ("sample",)  # gum has no treebank: an atlas cannot run on it
    coref = next(a for a in exp.analyses if a.name == "coref")
    assert coref.kind == "coreference" and coref.data == ("sample", "gum")  # a treebank serves as a corpus
    prune = next(a for a in exp.analyses if a.name == "prune-probe")
    assert prune.models == ("base",) and prune.options == {"objective": "probe"}
    assert exp.dataset("gum").files("coreference") == {"corpus": "ud:en_gum:test"}
    assert exp.dataset("sample").files("atlas") == {"treebank": "sample:test", "select_on": "sample:dev"}


@pytest.mark.parametrize(("old", "new", "message", "line"), [
    ("js_sentences = 20", "js_sentencez = 20", "analyses.atlas.js_sentencez: unknown option for atlas", 19),
    ('kind = "prune"', 'kind = "prun"', "analyses.prune-probe.kind: expected a kind, one of .*found \"prun\"", 26),
    ('models = ["base"]', 'models = ["bass"]', "analyses.prune-probe.models: unknown model 'bass'", 28),
    ("title = \"t\"", "titel = \"t\"", "experiment.titel: unknown key", 3),
    ("n_resamples = 200", "n_resamples = \"many\"", "experiment.n_resamples: expected a whole number from 1 to 100000, found \"many\"", 5),
    ('treebank = "sample:test"', 'treebank = 3', "data.sample.treebank: expected a file or treebank name", 12),
    ("[analyses.atlas]", "[analyses.\"at las\"]", "expected letters, digits", None),
])
def test_mistakes_name_the_line(tmp_path: Path, old: str, new: str, message: str, line: int | None) -> None:
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ConfigError, match=message) as info:
        read_experiment(path)
    assert str(path) in str(info.value)
    if line is not None:
        assert f":{line}:" in str(info.value)


def test_managed_arguments_are_not_options(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("js_sentences = 20", 'treebank = "x"'))
    with pytest.raises(ConfigError, match="analyses.atlas.treebank: unknown option for atlas"):
        read_experiment(path)


def test_an_analysis_on_data_it_cannot_use_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("js_sentences = 20", 'data = "gum"'))
    with pytest.raises(ConfigError, match="data 'gum' has no treebank"):
        read_experiment(path)


def test_missing_tables_and_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"expected a \[models\] table"):
        read_experiment(_write(tmp_path, "[data.x]\ntreebank = 'a'\n[analyses.atlas]\n"))
    with pytest.raises(ConfigError, match="cannot read the experiment file"):
        read_experiment(tmp_path / "none.toml")
    with pytest.raises(ConfigError, match="syntax error"):
        read_experiment(_write(tmp_path, "[models\n"))


def test_env_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROBES_TEST_DIR", raising=False)
    assert expand_env("${PROBES_TEST_DIR:-../shared/data}/a.conllu") == "../shared/data/a.conllu"
    monkeypatch.setenv("PROBES_TEST_DIR", "/data")
    assert expand_env("${PROBES_TEST_DIR:-x}/a.conllu") == "/data/a.conllu"
    monkeypatch.delenv("PROBES_TEST_DIR")
    with pytest.raises(ConfigError, match="PROBES_TEST_DIR is not set"):
        expand_env("${PROBES_TEST_DIR}/a")


def test_first_existing_place_wins(tmp_path: Path) -> None:
    local = tmp_path / "local.conllu"
    text = GOOD.replace('select_on = "sample:dev"', f'select_on = ["{tmp_path}/none.conllu", "{local}", "ud:en_ewt:dev"]')
    assert read_experiment(_write(tmp_path, text)).dataset("sample").select_on == "ud:en_ewt:dev"
    local.write_text("")
    assert read_experiment(_write(tmp_path, text)).dataset("sample").select_on == str(local)
    text = GOOD.replace('select_on = "sample:dev"', f'select_on = ["{tmp_path}/a.conllu", "{tmp_path}/b.conllu"]')
    with pytest.raises(ConfigError, match="none of .*a.conllu, .*b.conllu exists"):
        read_experiment(_write(tmp_path, text))


def test_shipped_experiments_read() -> None:
    root = Path(__file__).resolve().parents[2] / "experiments"
    for name in ("demo-compare.toml", "what-makes-heads-differ.toml"):
        exp = read_experiment(root / name)
        assert exp.seed_questions and any(m.kind == "random-init" for m in exp.models)
