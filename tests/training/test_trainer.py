"""Training runs: the data and its held-out split, the tokenizer, the model, and the run itself: same seeds give
byte-identical checkpoints, a stopped or SIGKILLed run resumes byte-identical, --max-minutes stops at a checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from probes.errors import ConfigError
from probes.training.config import TrainConfig

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
TINY = dict(layers=1, heads=2, hidden=32, treebank=("sample:dev",), steps=4, batch_size=2, seq_len=16)


def _config(arch: str = "gpt2", **change: object) -> TrainConfig:
    return TrainConfig(arch=arch, tokenizer="train:200" if arch == "bert" else "train:300", **{**TINY, **change})


def _weights(run: Path, names: tuple[str, ...] = ("model.safetensors", "training.json")) -> dict[str, bytes]:
    """Every checkpoint's model.safetensors and training.json, by relative path."""
    return {str(p.relative_to(run)): p.read_bytes() for name in names
            for p in sorted((run / "checkpoints").glob(f"step-*/{name}"))}


# ------------------------------------------------------------------------------------------ data
def test_held_out_split_is_fixed_disjoint_and_about_a_tenth():
    from probes.training.data import read_corpus

    first, again = read_corpus(["sample:dev"]), read_corpus(["sample:dev"])
    assert first == again  # chosen by hashing ids: the same every time
    total = len(first.train) + len(first.dev)
    assert 0 < len(first.dev) < 0.25 * total
    assert first.sources[0].sentences == total and len(first.sources[0].sha256) == 64
    chosen = read_corpus(["sample:dev"], select_on="sample:test")
    assert len(chosen.train) == total and "sample:test" in chosen.dev_rule
    with pytest.raises(ConfigError, match="--select-on: expected held-out data apart from --treebank"):
        read_corpus(["sample:dev"], select_on="sample:dev")


def test_text_files_and_token_blocks(tmp_path: Path):
    from probes.training.data import read_texts, token_blocks
    from probes.training.tokenizer import train_tokenizer

    path = tmp_path / "text.txt"
    path.write_text("the cat sat\n\n  on the   mat \n", encoding="utf-8")
    source, items = read_texts(str(path))
    assert items == [("text.txt:1", "the cat sat"), ("text.txt:3", "on the mat")] and source.sentences == 2
    tokenizer = train_tokenizer(["the cat sat on the mat"] * 3, "bert", 40, 8)
    blocks = token_blocks(["the cat sat on the mat"] * 6, tokenizer, 8, masked_lm=True)
    assert blocks.shape[1] == 8 and len(blocks) >= 2
    assert (blocks[:, 0] == tokenizer.cls_token_id).all() and (blocks[:, -1] == tokenizer.sep_token_id).all()


def test_tokenizer_training_is_deterministic():
    from probes.training.data import read_corpus
    from probes.training.tokenizer import train_tokenizer

    texts = read_corpus(["sample:dev"]).train
    for arch, vocab in (("bert", 200), ("gpt2", 300)):
        one, two = (train_tokenizer(texts, arch, vocab, 16).backend_tokenizer.to_str() for _ in range(2))
        assert one == two
    assert len(train_tokenizer(texts, "gpt2", 300, 16)) == 300


# ------------------------------------------------------------------------------------------ models
@pytest.mark.parametrize("arch", ["bert", "gpt2", "llama"])
def test_model_takes_the_sizes_and_dropouts_and_the_seed(arch: str):
    from probes.training.models import build_model
    from probes.training.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["a few words to train on"] * 4, arch, 200 if arch == "bert" else 300, 16)
    config = _config(arch, heads=4, attention_dropout=0.25)
    model = build_model(config, tokenizer)
    hf = model.config
    assert (hf.num_attention_heads, hf.hidden_size // hf.num_attention_heads, hf.num_hidden_layers) == (4, 8, 1)
    dropout = {"bert": "attention_probs_dropout_prob", "gpt2": "attn_pdrop", "llama": "attention_dropout"}[arch]
    assert getattr(hf, dropout) == 0.25 and hf.vocab_size == len(tokenizer)
    same, other = build_model(config, tokenizer), build_model(_config(arch, heads=4, seed=1), tokenizer)
    first = next(model.parameters())
    assert torch.equal(first, next(same.parameters())) and not torch.equal(first, next(other.parameters()))


def test_identical_scheme_is_applied_to_the_built_model():
    from probes.training.models import build_model
    from probes.training.schemes import head_blocks
    from probes.training.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["a few words to train on"] * 4, "gpt2", 300, 16)
    blocks = head_blocks(build_model(_config("gpt2", heads=4, init="identical"), tokenizer), 0)
    assert all(torch.equal(b[0], b[h]) for b in blocks.values() for h in range(1, 4))
    free = head_blocks(build_model(_config("gpt2", heads=4), tokenizer), 0)
    assert not torch.equal(free["query"][0], free["query"][1])


# ------------------------------------------------------------------------------------------ runs
@pytest.mark.parametrize("arch", ["gpt2", "bert"])
def test_same_seeds_give_byte_identical_checkpoints(tmp_path: Path, arch: str):
    from probes.training.trainer import train

    config = _config(arch, steps=2, attention_dropout=0.1)  # dropout: the random state is part of what must repeat
    runs = [train(config, tmp_path / name, progress=False) for name in ("a", "b")]
    assert list(runs[0].checkpoints) == [0, 1, 2] and runs[0].stopped == "finished"
    assert _weights(tmp_path / "a") == _weights(tmp_path / "b")
    train(_config(arch, steps=2, attention_dropout=0.1, data_seed=1), tmp_path / "c", progress=False)
    assert (_weights(tmp_path / "c")["checkpoints/step-000002/model.safetensors"]
            != _weights(tmp_path / "a")["checkpoints/step-000002/model.safetensors"])
    assert not (tmp_path / "a" / "resume").exists()  # a finished run keeps no resume state


def test_training_json_records_the_run(tmp_path: Path):
    from probes.checksum import file_sha256
    from probes.corpora.registry import resolve_treebank
    from probes.training.trainer import train

    run = train(_config("bert", steps=1, init="identical", attention_dropout=0.1), tmp_path / "run", progress=False)
    first, last = (json.loads((run.checkpoints[s] / "training.json").read_text()) for s in (0, 1))
    assert (first["step"], first["tokens_seen"], first["train_loss"]) == (0, 0, None)
    assert (last["step"], last["tokens_seen"]) == (1, 2 * 16) and last["train_loss"] > 0 and last["dev_loss"] > 0
    assert last["scheme"]["scheme"] == "identical" and last["seeds"] == {"seed": 0, "data_seed": 0}
    assert last["data"]["sources"][0]["sha256"] == file_sha256(resolve_treebank("sample:dev"))
    assert last["config"]["attention_dropout"] == 0.1 and last["objective"] == "masked-LM"
    assert first["unigram_dev_loss"] == last["unigram_dev_loss"] > 0


def test_max_minutes_stops_at_a_checkpoint_and_the_run_resumes_byte_identical(tmp_path: Path):
    from probes.training.trainer import train

    stopped = train(_config("bert", max_minutes=1e-6, attention_dropout=0.1), tmp_path / "a", progress=False)
    assert stopped.stopped == "max-minutes" and stopped.last_step == 1 and (tmp_path / "a" / "resume").is_dir()
    resumed = train(_config("bert", attention_dropout=0.1), tmp_path / "a", progress=False)
    assert resumed.resumed_from == 1 and resumed.stopped == "finished" and list(resumed.checkpoints) == [0, 1, 2, 4]
    train(_config("bert", attention_dropout=0.1), tmp_path / "b", progress=False)
    weights = ("model.safetensors",)  # training.json says max_minutes was given to the stopped part
    assert _weights(tmp_path / "a", weights) == _weights(tmp_path / "b", weights)
    assert _weights(tmp_path / "a")["checkpoints/step-000004/training.json"] == _weights(tmp_path / "b")[
        "checkpoints/step-000004/training.json"]
    assert train(_config("bert", attention_dropout=0.1), tmp_path / "a").stopped == "already finished"


def test_a_run_folder_refuses_other_options(tmp_path: Path):
    from probes.training.trainer import train

    train(_config("gpt2", max_minutes=1e-6), tmp_path / "run", progress=False)
    with pytest.raises(ConfigError, match=r"--seed: 0 -> 5"):
        train(_config("gpt2", seed=5), tmp_path / "run", progress=False)


_KILLER = textwrap.dedent("""
    import os, signal, sys
    import torch
    from transformers import TrainerCallback
    from probes.training.config import TrainConfig
    from probes.training.trainer import train

    class Kill(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 6:  # after the checkpoint at step 4, before the one at 8
                os.kill(os.getpid(), signal.SIGKILL)

    torch.set_num_threads(1)
    config = TrainConfig.from_dict(__import__("json").loads(sys.argv[2]))
    train(config, sys.argv[1], progress=False, callbacks=[Kill()])
""")


@pytest.mark.subprocess
def test_a_sigkilled_run_resumes_byte_identical(tmp_path: Path):
    from probes.training.trainer import train

    config = _config("bert", steps=8, attention_dropout=0.1, hidden_dropout=0.1)
    script = tmp_path / "killer.py"
    script.write_text(_KILLER, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "a"), json.dumps(config.to_dict())],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir()) == [
        "step-000000", "step-000001", "step-000002", "step-000004"]
    resumed = train(config, tmp_path / "a", progress=False)
    assert resumed.resumed_from == 4 and list(resumed.checkpoints) == [0, 1, 2, 4, 8]
    train(config, tmp_path / "b", progress=False)
    assert _weights(tmp_path / "a") == _weights(tmp_path / "b")


def test_a_run_without_a_log_every_step_records_the_same_checkpoint_losses(tmp_path: Path):
    """Without a progress bar the Trainer logs only at each checkpoint step and the step before it: the train loss
    recorded at every checkpoint is still that one step's, equal to a run that logs every step."""
    from probes.training.checkpoints import read_training
    from probes.training.config import TrainConfig
    from probes.training.trainer import train

    config = TrainConfig(arch="gpt2", layers=1, heads=2, hidden=16, attention_only=True, task="induction", steps=12,
                         batch_size=4, seq_len=32, period_min=4, period_max=8, seed=3)
    quiet = train(config, tmp_path / "quiet", progress=False)
    shown = train(config, tmp_path / "shown", progress=True)

    def losses(run: Any) -> dict[int, float | None]:
        return {step: read_training(folder).train_loss for step, folder in sorted(run.checkpoints.items())}

    assert losses(quiet) == losses(shown) and len(losses(quiet)) == len(config.checkpoint_steps())
    assert all(isinstance(v, float) for step, v in losses(quiet).items() if step > 0)  # a loss at every step > 0


def test_the_lean_trainer_trains_what_the_trainer_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """probes' Trainer (one clip over a fixed list of the trained parameters, no FLOP count, a frozen heap during
    train) gives checkpoints byte-identical to transformers' own Trainer's, an attention-only model (frozen MLP
    parameters, left out of the clip) included; and it is the one ``train`` uses."""
    from transformers import Trainer

    import probes.training.trainer as trainer_module

    config = TrainConfig(arch="gpt2", layers=1, heads=2, hidden=16, attention_only=True, task="induction", steps=6,
                         batch_size=4, seq_len=32, period_min=4, period_max=8, seed=5, learning_rate=0.05)
    made: list[str] = []
    lean = trainer_module.lean_trainer

    def spy(**kwargs: Any) -> Any:
        made.append("lean")
        return lean(**kwargs)

    monkeypatch.setattr(trainer_module, "lean_trainer", spy)
    trainer_module.train(config, tmp_path / "lean", progress=False)
    monkeypatch.setattr(trainer_module, "lean_trainer", lambda **kwargs: Trainer(**kwargs))
    trainer_module.train(config, tmp_path / "plain", progress=False)
    lean_weights = _weights(tmp_path / "lean", ("model.safetensors",))
    assert made == ["lean"] and len(lean_weights) == len(config.checkpoint_steps())
    assert lean_weights == _weights(tmp_path / "plain", ("model.safetensors",))
