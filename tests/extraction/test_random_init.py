"""random-init:BASE@SEED twins: the base's architecture and tokenizer, fresh weights drawn by the seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from probes.errors import ConfigError
from probes.extraction.loading import load_pretrained, resolve_model, weights_sha256
from probes.extraction.random_init import parse_random_init
from tests.tiny_models import build


@pytest.fixture()
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROBES_CACHE", str(tmp_path / "cache"))
    return build("bert", tmp_path / "bert")


def test_parse() -> None:
    assert parse_random_init("random-init:package:x@3") == ("package:x", 3)
    assert parse_random_init("random-init:some/folder") == ("some/folder", 0)
    with pytest.raises(ConfigError, match="whole number"):
        parse_random_init("random-init:x@three")
    with pytest.raises(ConfigError, match="expected random-init:BASE@SEED"):
        parse_random_init("random-init:")


def test_twin_is_the_same_architecture_with_seeded_fresh_weights(base: Path, tmp_path: Path) -> None:
    first = resolve_model(f"random-init:{base}@1")
    assert Path(first).parent == tmp_path / "cache" / "random-init"
    again = resolve_model(f"random-init:{base}@1")  # re-used, not redrawn
    assert again == first
    other = resolve_model(f"random-init:{base}@2")
    assert weights_sha256(first) != weights_sha256(other) != weights_sha256(base)
    made = json.loads((Path(first) / "random_init.json").read_text())
    assert made["seed"] == 1 and made["base"] == str(base)
    model, tokenizer, _ = load_pretrained(f"random-init:{base}@1", progress=False)
    trained, trained_tok, _ = load_pretrained(base, progress=False)
    assert model.config.num_hidden_layers == trained.config.num_hidden_layers
    assert model.config.num_attention_heads == trained.config.num_attention_heads
    assert tokenizer("the dog")["input_ids"] == trained_tok("the dog")["input_ids"]
    # every weight is redrawn, embeddings included
    state, trained_state = model.state_dict(), trained.state_dict()
    differing = [k for k in state if state[k].dtype.is_floating_point and state[k].std() > 0
                 and not torch.equal(state[k], trained_state[k])]
    assert "embeddings.word_embeddings.weight" in differing
    assert len(differing) == len([k for k in state if state[k].dtype.is_floating_point and state[k].std() > 0])


def test_deleted_twin_is_redrawn_identically(base: Path) -> None:
    import shutil

    folder = resolve_model(f"random-init:{base}@5")
    digest = weights_sha256(folder)
    shutil.rmtree(folder)
    assert weights_sha256(resolve_model(f"random-init:{base}@5")) == digest


def test_twin_of_a_twin_is_refused(base: Path) -> None:
    with pytest.raises(ConfigError, match="cannot itself be random-init"):
        resolve_model(f"random-init:random-init:{base}@1@2")
