"""The attention source through the runs: the CLI option, run.json and the report say it; a store of one source is
never read as another's; an experiment's ``attention_source`` reaches the extractor and its unit key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from probes.cli import main
from tests.tiny_models import build

pytest.importorskip("torch")
SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("bert", tmp_path_factory.mktemp("source-runs"))


def test_leaderboard_under_norm_records_and_says_its_source(tiny: Path, tmp_path: Path):
    boards = {}
    for source in ("weights", "norm"):
        out = tmp_path / source
        assert main(["leaderboard", "--model", str(tiny), "--treebank", str(SAMPLE / "sample-test.conllu"),
                     "--select-on", str(SAMPLE / "sample-dev.conllu"), "--min-count", "5", "--no-figures",
                     "--attention-source", source, "--out", str(out), "--no-progress"]) == 0
        record = json.loads((out / "run.json").read_text())
        assert record["extractor"]["attention_source"] == source
        text = (out / "leaderboard.md").read_text()
        assert ("(attention source: norm)" in text.splitlines()[0]) == (source == "norm")
        assert f"Attention source: {source}" in text
        boards[source] = [row for row in csv_rows(out / "scores.csv")]
    assert boards["weights"] != boards["norm"]  # the norm maps move the scores


def csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_a_store_is_never_read_as_another_sources(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    stores = {}
    for source in ("weights", "norm"):
        stores[source] = tmp_path / f"store-{source}"
        assert main(["extract", "--model", str(tiny), "--treebank", str(SAMPLE / "sample-dev.conllu"),
                     "--store", str(stores[source]), "--attention-source", source, "--no-progress"]) == 0
    from probes.extraction.store import open_store

    assert open_store(stores["norm"]).info["attention_source"] == "norm"
    capsys.readouterr()
    code = main(["leaderboard", "--store", str(stores["norm"]), "--select-store", str(stores["weights"]),
                 "--out", str(tmp_path / "mixed"), "--no-figures", "--no-progress"])
    assert code != 0
    assert "attention_source 'norm' vs 'weights'" in capsys.readouterr().err
    # the same store resumed under another source is refused too
    code = main(["extract", "--model", str(tiny), "--treebank", str(SAMPLE / "sample-dev.conllu"),
                 "--store", str(stores["weights"]), "--attention-source", "contribution", "--no-progress"])
    assert code != 0 and "attention_source" in capsys.readouterr().err


def test_an_experiments_attention_source_reaches_the_extractor_and_the_key(tiny: Path, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch):
    from probes.runs import experiment as module
    from probes.runs.experiment_cache import unit_key
    from probes.runs.experiment_spec import read_experiment

    text = f"""
[experiment]
name = "sources"
[models]
tiny = "{tiny}"
[data.sample]
treebank = "sample:test"
select_on = "sample:dev"
[analyses.plain]
kind = "leaderboard"
min_count = 5
[analyses.normed]
kind = "leaderboard"
min_count = 5
attention_source = "norm"
"""
    path = tmp_path / "sources.toml"
    path.write_text(text, encoding="utf-8")
    spec = read_experiment(path)
    plans = {plan.analysis.name: plan for plan in module._plan(spec)}
    hashes = module._Hashes()
    keys = {name: unit_key(module._inputs(plan, spec, hashes, {})) for name, plan in plans.items()}
    assert keys["plain"] != keys["normed"]
    seen: dict[str, Any] = {}

    def fake(model: Any, treebank: Any, **kwargs: Any) -> str:
        seen[kwargs["min_count"]] = kwargs.get("extraction")
        return "board"

    monkeypatch.setattr("probes.runs.experiment_spec.analysis_function", lambda kind: fake)
    module._compute(plans["normed"], str(tiny), module._options(plans["normed"], spec), False, {})
    assert seen[5].source == "norm"
    bad = text.replace('attention_source = "norm"', 'attention_source = "norms"')
    path.write_text(bad, encoding="utf-8")
    from probes.errors import ConfigError

    with pytest.raises(ConfigError, match=r"attention_source: expected one of .*weights.*norm"):
        read_experiment(path)
