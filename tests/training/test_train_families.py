"""One model-family table for extraction and training (issue 37): ``probes train`` builds the families of
probes/extraction/families.py that have a ``training`` row, read at call time, and nothing else names an
architecture: a new row is a new ``--arch``, built, sized and checked by what the row says."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from probes.errors import ConfigError
from probes.extraction import families
from probes.training.config import ARCHS, TrainConfig

torch = pytest.importorskip("torch")

TINY = dict(layers=1, heads=4, hidden=32, treebank=("sample:dev",), seq_len=16, tokenizer="train:300")


def test_the_architectures_are_the_trainable_rows_of_the_families_table() -> None:
    rows = families.trainable_families()
    assert ARCHS == tuple(rows) == ("bert", "gpt2", "llama")
    assert {name: (row.config_class, row.model_class, row.masked_lm) for name, row in rows.items()} == {
        "bert": ("BertConfig", "BertForMaskedLM", True), "gpt2": ("GPT2Config", "GPT2LMHeadModel", False),
        "llama": ("LlamaConfig", "LlamaForCausalLM", False)}
    assert all(families.FAMILIES[name].training is None for name in ("roberta", "electra", "mistral", "gemma"))


def test_a_new_trainable_row_is_a_new_arch_built_sized_and_checked_by_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.training.memory import count_parameters
    from probes.training.models import build_model
    from probes.training.tokenizer import train_tokenizer

    gpt2 = families.FAMILIES["gpt2"]
    base = gpt2.training
    assert base is not None

    def fields(s: families.Sizes) -> dict[str, Any]:  # GPT-2's, with an MLP twice as wide: what only this row says
        return {**base.config_fields(s), "n_inner": 2 * s.intermediate}

    def parameters(s: families.Sizes) -> int:
        return base.parameters(replace(s, intermediate=2 * s.intermediate))

    wide = replace(gpt2, training=replace(base, config_fields=fields, parameters=parameters))
    with pytest.raises(ConfigError, match="--arch: expected one of bert, gpt2, llama, found 'gpt2-wide'"):
        TrainConfig(arch="gpt2-wide", **TINY)
    monkeypatch.setitem(families.FAMILIES, "gpt2-wide", wide)
    config = TrainConfig(arch="gpt2-wide", **TINY)
    tokenizer = train_tokenizer(["a few words to train on"] * 4, "gpt2-wide", 300, 16)
    model = build_model(config, tokenizer)
    assert type(model).__name__ == "GPT2LMHeadModel" and model.config.n_inner == 2 * 4 * 32
    assert count_parameters(config, len(tokenizer)) == model.num_parameters()
    with pytest.raises(ConfigError, match=r"--kv-heads: expected none for --arch gpt2-wide \(only llama has"):
        TrainConfig(arch="gpt2-wide", kv_heads=2, **TINY)
