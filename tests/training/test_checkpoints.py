"""Checkpoints as model folders: their names (trained:RUN@STEP), written whole or not at all, and a trained
checkpoint loading in probes' extractor and in `probes leaderboard` like any folder; the curves result."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from probes.errors import ConfigError
from probes.extraction.trained_runs import TRAINING_FILE, list_checkpoints, parse_trained, resolve_trained, step_name
from probes.training.checkpoints import read_training, write_checkpoint
from probes.training.record import CheckpointRecord
from tests.training.cases import a_record

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT trained 4 steps on sample:dev (blocks of 64 tokens: sample sentences fit its positions)."""
    from probes.training.config import TrainConfig
    from probes.training.trainer import train

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("runs") / "bert"
    config = TrainConfig(arch="bert", layers=1, heads=2, hidden=32, treebank=("sample:dev",), tokenizer="train:200",
                         steps=4, batch_size=2, seq_len=64)
    train(config, out, progress=False)
    return out


def test_step_names_and_spec_forms():
    assert step_name(8) == "step-000008" and step_name(1234567) == "step-1234567"
    assert parse_trained("trained:runs/x@last") == (Path("runs/x"), None)
    assert parse_trained("trained:runs/x") == (Path("runs/x"), None)
    assert parse_trained("trained:runs/x@16") == (Path("runs/x"), 16)
    assert parse_trained("trained:/a/b@c/d") == (Path("/a/b@c/d"), None)  # '@' inside a folder name
    with pytest.raises(ConfigError, match="expected a step number or last after '@', found 'first'"):
        parse_trained("trained:runs/x@first")
    with pytest.raises(ConfigError, match="expected trained:RUN@STEP"):
        parse_trained("trained:")


def test_resolution_names_the_run_folder_and_its_steps(trained_run: Path, tmp_path: Path):
    from probes.extraction.loading import resolve_model

    folders = list_checkpoints(trained_run)
    assert list(folders) == [0, 1, 2, 4]
    assert resolve_model(f"trained:{trained_run}@last") == str(folders[4])
    assert resolve_model(f"trained:{trained_run}") == str(folders[4])
    assert resolve_trained(f"trained:{trained_run}@2") == str(folders[2])
    with pytest.raises(ConfigError) as caught:
        resolve_model(f"trained:{trained_run}@3")
    assert str(trained_run) in str(caught.value) and "the run has steps 0, 1, 2, 4" in str(caught.value)
    with pytest.raises(ConfigError, match="found no such folder"):
        resolve_model(f"trained:{tmp_path / 'missing'}@last")
    with pytest.raises(ConfigError, match="a folder without checkpoints/step-NNNNNN/"):
        resolve_model(f"trained:{tmp_path}")


def test_checkpoint_is_written_whole_or_not_at_all(tmp_path: Path):
    from transformers import BertConfig, BertForMaskedLM

    from probes.training.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["a small text to train on", "and another one"], "bert", 60, 16)
    model = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=8, max_position_embeddings=16))
    (tmp_path / "checkpoints" / step_name(3)).mkdir(parents=True)  # a folder without training.json: incomplete
    record = CheckpointRecord(run=a_record(), step=5, tokens_seen=320, train_loss=4.0, dev_loss=4.25)
    folder = write_checkpoint(tmp_path, model, tokenizer, record)
    assert list_checkpoints(tmp_path) == {5: folder}  # the incomplete one is not a checkpoint
    assert json.loads((folder / TRAINING_FILE).read_text())["step"] == 5 and read_training(folder) == record
    assert {p.name for p in folder.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]  # no temporary left


def test_checkpoint_loads_in_the_extractor(trained_run: Path):
    from probes.corpora import read_treebank
    from probes.corpora.registry import resolve_treebank
    from probes.runs.inputs import load_extractor

    extractor = load_extractor(f"trained:{trained_run}@last", batch_size=4, device="cpu", progress=False)
    sentence = next(iter(read_treebank(resolve_treebank("sample:dev"))))
    (_, maps), = list(extractor.iter_attention([sentence]))
    weights = np.asarray(maps.weights)
    assert weights.shape[:2] == (1, 2)  # 1 layer, 2 heads
    assert np.allclose(weights.sum(-1), 1.0, atol=1e-4)


def test_leaderboard_runs_on_a_trained_checkpoint(trained_run: Path, tmp_path: Path, capsys):
    from probes.cli import main

    code = main(["leaderboard", "--model", f"trained:{trained_run}@last", "--treebank", "sample:dev",
                 "--limit", "20", "--out", str(tmp_path / "board"), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    record = json.loads((tmp_path / "board" / "run.json").read_text())
    assert record["model"] == f"trained:{trained_run}@last"


def test_curves_from_the_checkpoints_save_and_load(trained_run: Path, tmp_path: Path):
    import probes
    from probes.training.curves import read_curves, unigram_loss

    curves = read_curves(trained_run)
    assert curves.steps.tolist() == [0, 1, 2, 4]
    assert curves.tokens_seen.tolist() == [0, 128, 256, 512]  # steps x batch 2 x 64 tokens
    assert math.isnan(curves.train_loss[0]) and np.isfinite(curves.train_loss[1:]).all()
    assert np.isfinite(curves.dev_loss).all() and curves.objective == "masked-LM"
    assert 0 < curves.unigram_dev_loss < math.log(200) + 0.5
    back = probes.load(curves.save(tmp_path / "curves"))
    assert back.steps.tolist() == curves.steps.tolist() and back.unigram_dev_loss == curves.unigram_dev_loss
    # the baseline by hand: counts 3 of token 1 and 1 of token 2 over a vocabulary of 4, add-one smoothed
    assert unigram_loss([1, 1, 1, 2], [1, 2], 4) == pytest.approx(-(math.log(4 / 8) + math.log(2 / 8)) / 2)
