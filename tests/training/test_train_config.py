"""TrainConfig: every option checked (the error names the option, what was expected and what was found), the
checkpoint steps, the record round trip, and `probes train` parsing (options and --config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.cli import main
from probes.errors import ConfigError
from probes.training.config import TrainConfig, checkpoint_steps
from probes.training.schemes import InitScheme

BASE = dict(arch="bert", layers=2, heads=4, hidden=32, treebank=("sample:dev",), tokenizer="train:200")


def test_defaults_and_derived_sizes():
    config = TrainConfig(**BASE)
    assert (config.head_size, config.intermediate_size, config.masked_lm) == (8, 128, True)
    assert config.init == InitScheme("independent") and config.attention_dropout == 0.0 and config.hidden_dropout == 0.0
    assert config.train_vocab == 200
    assert TrainConfig(**{**BASE, "tokenizer": "bert-base-uncased"}).train_vocab is None
    assert TrainConfig(**{**BASE, "treebank": "sample:dev"}).treebank == ("sample:dev",)  # one spec as text


def test_log2_checkpoint_steps():
    assert checkpoint_steps("log2", 20) == [0, 1, 2, 4, 8, 16, 20]
    assert checkpoint_steps("log2", 16) == [0, 1, 2, 4, 8, 16]
    assert checkpoint_steps("log2", 1) == [0, 1]
    with pytest.raises(ConfigError, match="--checkpoints: expected one of log2, log2\\+50, found 'every'"):
        checkpoint_steps("every", 5)


def test_dense_checkpoint_steps_add_every_fiftieth_step():
    assert checkpoint_steps("log2+50", 120) == [0, 1, 2, 4, 8, 16, 32, 50, 64, 100, 120]
    assert checkpoint_steps("log2+50", 100) == [0, 1, 2, 4, 8, 16, 32, 50, 64, 100]


@pytest.mark.parametrize(("change", "words"), [
    ({"arch": "t5"}, ["--arch", "bert, gpt2, llama", "'t5'"]),
    ({"heads": 5}, ["--heads", "divisor of --hidden 32", "found 5"]),
    ({"layers": 0}, ["--layers", "from 1 to 1024", "found 0"]),
    ({"layers": True}, ["--layers", "whole number", "True"]),
    ({"init": "same"}, ["--init", "identical+noise:EPS", "'same'"]),
    ({"attention_dropout": 1.0}, ["--attention-dropout", "< 1.0", "1.0"]),
    ({"seed": -1}, ["--seed", "from 0", "-1"]),
    ({"steps": 0}, ["--steps", "from 1 to", "found 0"]),
    ({"warmup": 30, "steps": 10}, ["--warmup", "from 0 to 10", "30"]),
    ({"learning_rate": 0.0}, ["--learning-rate", "> 0.0", "0.0"]),
    ({"kv_heads": 2}, ["--kv-heads", "only llama", "2"]),
    ({"arch": "llama", "kv_heads": 3}, ["--kv-heads", "divisor of --heads 4", "3"]),
    ({"arch": "llama", "hidden_dropout": 0.1}, ["--hidden-dropout", "llama", "0.1"]),
    ({"arch": "gpt2", "tokenizer": "train:200"}, ["--tokenizer", ">= 258", "256 bytes", "200"]),
    ({"tokenizer": "train:many"}, ["--tokenizer", "train:VOCAB", "'train:many'"]),
    ({"treebank": ()}, ["--treebank", "one or more", "[]"]),
    ({"max_minutes": 0}, ["--max-minutes", "> 0.0", "0"]),
])
def test_bad_values_name_the_option_what_was_expected_and_found(change, words):
    with pytest.raises(ConfigError) as caught:
        TrainConfig(**{**BASE, **change})
    message = str(caught.value)
    assert all(w in message for w in words), message
    assert "expected" in message and "found" in message


def test_record_round_trip_and_resume_key():
    config = TrainConfig(**{**BASE, "init": "identical+noise:0.01", "max_minutes": 3.0})
    data = config.to_dict()
    assert data["treebank"] == ["sample:dev"] and TrainConfig.from_dict(data) == config
    assert "max_minutes" not in config.resume_key()  # a stopped run may resume with another limit
    other = TrainConfig(**{**BASE, "init": "identical+noise:0.01", "seed": 3})
    assert config.differences(other) == ["--seed: 0 -> 3"]
    with pytest.raises(ConfigError, match=r"found \['colour'\]"):
        TrainConfig.from_dict({**data, "colour": "red"})


def test_cli_help_and_a_bad_value(capsys):
    assert main(["train", "--help"]) == 0
    assert "--arch" in capsys.readouterr().out
    code = main(["train", "--arch", "bert", "--layers", "1", "--heads", "3", "--hidden", "32", "--treebank",
                 "sample:dev", "--out", "unused", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "--heads: expected a divisor of --hidden 32" in err and "found 3" in err
    assert main(["train", "--arch", "t5", "--layers", "1", "--heads", "2", "--hidden", "32", "--treebank",
                 "sample:dev", "--out", "unused"]) == 2


def test_cli_config_file_unknown_key_names_file_and_line(tmp_path: Path, capsys):
    path = tmp_path / "train.toml"
    path.write_text('arch = "bert"\nlayers = 1\ncolour = "red"\n', encoding="utf-8")
    assert main(["train", "--config", str(path), "--heads", "2", "--hidden", "32", "--treebank", "sample:dev",
                 "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"{path}:3:" in err and "unknown key 'colour'" in err


def test_cli_parses_init_once_and_hands_the_scheme_down(monkeypatch, tmp_path: Path, capsys):
    """`--init` is parsed once, while the command line is read; TrainConfig and everything below get the scheme."""
    import probes.runs.train as train_run
    from probes.errors import ConfigError as Stop

    parse, texts, configs = InitScheme.parse.__func__, [], []
    monkeypatch.setattr(InitScheme, "parse", classmethod(lambda cls, text: texts.append(text) or parse(cls, text)))

    def train_model(config: TrainConfig, out: Path, **kwargs: object) -> None:
        configs.append(config)
        raise Stop("stopped before training")

    monkeypatch.setattr(train_run, "train_model", train_model)
    code = main(["train", "--arch", "bert", "--layers", "1", "--heads", "2", "--hidden", "32", "--treebank",
                 "sample:dev", "--init", "identical+noise:1e-2", "--out", str(tmp_path / "out"), "--no-progress"])
    assert code == 1 and "stopped before training" in capsys.readouterr().err
    assert texts == ["identical+noise:1e-2"]
    assert configs[0].init == InitScheme("identical+noise", 0.01) and configs[0].to_dict()["init"] == \
        "identical+noise:0.01"
    assert main(["train", "--arch", "bert", "--layers", "1", "--heads", "2", "--hidden", "32", "--treebank",
                 "sample:dev", "--init", "same", "--out", str(tmp_path / "out")]) == 2  # a usage error
    assert "--init" in capsys.readouterr().err and len(configs) == 1
