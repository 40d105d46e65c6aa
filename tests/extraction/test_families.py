"""Model-family facts and the head-intervention seam, on the tiny model of every family."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from probes.errors import ConfigError
from probes.extraction import families
from probes.extraction.interventions import head_gates
from tests.tiny_models import BUILDERS, build

#: family -> (query weight of layer 0 relative to the base model, whether heads are its columns (Conv1D)).
QUERY_WEIGHT = {
    "bert": ("encoder.layer.0.attention.self.query.weight", False),
    "roberta": ("encoder.layer.0.attention.self.query.weight", False),
    "electra": ("encoder.layer.0.attention.self.query.weight", False),
    "deberta": ("encoder.layer.0.attention.self.query_proj.weight", False),
    "modernbert": ("layers.0.attn.Wqkv.weight", False),  # fused q, k, v rows: q first
    "gpt2": ("h.0.attn.c_attn.weight", True),  # Conv1D (in, 3 * out): q first
    "llama": ("layers.0.self_attn.q_proj.weight", False),
}
IDS = torch.tensor([[5, 9, 7, 12, 6, 8, 10, 11]])  # (1, T): ids every tiny vocabulary has


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    from transformers import AutoModel

    folder = build(request.param, tmp_path_factory.mktemp("models"))
    return request.param, AutoModel.from_pretrained(folder, attn_implementation="eager").eval()


def _site_inputs(model: Any) -> list[torch.Tensor]:
    """The input of every head site during one forward pass: n_layers x (1, T, n_heads * head_dim)."""
    seen: list[torch.Tensor] = []
    handles = [s.module.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach().clone()))
               for s in families.head_sites(model)]
    try:
        with torch.no_grad():
            model(input_ids=IDS)
    finally:
        for h in handles:
            h.remove()
    return seen


def test_head_sites_one_per_layer_with_heads_concatenated(family: tuple[str, Any]) -> None:
    name, model = family
    sites = families.head_sites(model)
    assert [s.layer for s in sites] == [0, 1]
    assert all(s.n_heads == 4 for s in sites)
    assert all(dict(model.named_modules())[s.name] is s.module for s in sites)
    inputs = _site_inputs(model)
    assert len(inputs) == 2  # each site runs exactly once per forward pass
    assert all(x.shape[-1] == s.n_heads * s.head_dim for x, s in zip(inputs, sites))


def test_perturbing_one_query_head_changes_only_its_slice(family: tuple[str, Any]) -> None:
    """The seam's input really is the heads' outputs side by side, in head order."""
    name, model = family
    site = families.head_sites(model)[0]
    before = _site_inputs(model)[0]  # (1, T, H * d)
    weight_name, columns = QUERY_WEIGHT[name]
    weight = model.get_parameter(weight_name)
    rows = slice(2 * site.head_dim, 3 * site.head_dim)  # head 2's queries
    saved = weight.detach().clone()
    noise = torch.randn(saved.shape, generator=torch.Generator().manual_seed(0)) * 3.0  # sharp attention
    with torch.no_grad():
        if columns:
            weight[:, rows] += noise[:, rows]
        else:
            weight[rows] += noise[rows]
    try:
        after = _site_inputs(model)[0]
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    heads_before = before.view(*before.shape[:-1], site.n_heads, site.head_dim)
    heads_after = after.view(*after.shape[:-1], site.n_heads, site.head_dim)
    others = [0, 1, 3]
    assert torch.equal(heads_after[..., others, :], heads_before[..., others, :])
    change = (heads_after[..., 2, :] - heads_before[..., 2, :]).abs().max()
    assert change > 1e-3 * heads_before[..., 2, :].abs().max()


def test_head_gates_match_zeroed_projection_columns(family: tuple[str, Any]) -> None:
    name, model = family
    with torch.no_grad():
        plain = model(input_ids=IDS).last_hidden_state
        with head_gates(model, torch.ones(2, 4)):
            ones = model(input_ids=IDS).last_hidden_state
        gates = torch.ones(2, 4)
        gates[1, 3] = 0.0
        with head_gates(model, gates):
            gated = model(input_ids=IDS).last_hidden_state
        again = model(input_ids=IDS).last_hidden_state  # hooks gone
        site = families.head_sites(model)[1]
        weight = site.module.weight
        saved = weight.clone()
        cols = slice(3 * site.head_dim, 4 * site.head_dim)
        if name == "gpt2":  # Conv1D: (in, out)
            weight[cols] = 0.0
        else:  # Linear: (out, in)
            weight[:, cols] = 0.0
        zeroed = model(input_ids=IDS).last_hidden_state
        weight.copy_(saved)
    torch.testing.assert_close(ones, plain)
    torch.testing.assert_close(again, plain)
    torch.testing.assert_close(gated, zeroed)
    assert (gated - plain).abs().max() > 1e-4


def test_head_gates_check_the_shape(family: tuple[str, Any]) -> None:
    _, model = family
    with pytest.raises(ConfigError, match=r"expected shape \(n_layers, n_heads\) = \(2, 4\), found \(4, 2\)"):
        with head_gates(model, torch.ones(4, 2)):
            pass


def test_family_facts(family: tuple[str, Any]) -> None:
    name, model = family
    assert families.n_layers(model) == 2 and families.n_heads(model) == 4
    assert families.is_decoder(model) == (name in ("gpt2", "llama"))
    expected = {"gpt2": ("wte.weight", "wpe.weight"), "llama": ("embed_tokens.weight",),
                "modernbert": ("embeddings.tok_embeddings.weight",)}.get(
        name, ("embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight"))
    assert families.embedding_parameters(model) == expected


def test_byte_level_tokenizers(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    for name, byte_level in (("bert", False), ("roberta", True), ("gpt2", True), ("llama", False)):
        assert families.is_byte_level(AutoTokenizer.from_pretrained(build(name, tmp_path))) is byte_level


def test_unknown_family_is_a_config_error() -> None:
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8))
    model.config.model_type = "not-a-family"
    with pytest.raises(ConfigError, match="expected a model type in .* found 'not-a-family'"):
        families.head_sites(model)
