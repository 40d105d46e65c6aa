"""Model-family facts and the head-intervention seam, on the tiny model of every family."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from probes.errors import ConfigError
from probes.extraction import families
from probes.extraction.interventions import head_gates
from tests.tiny_models import BUILDERS, build, tiny_families

IDS = torch.tensor([[5, 9, 7, 12, 6, 8, 10, 11]])  # (1, T): ids every tiny vocabulary has


def _is_conv1d(module: Any) -> bool:
    """GPT-2's ``Conv1D`` keeps its weight as (in, out), a ``Linear`` as (out, in)."""
    return type(module).__name__ == "Conv1D"


@pytest.fixture(scope="module", params=tiny_families())
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


def test_perturbing_one_value_head_changes_only_its_slice(family: tuple[str, Any]) -> None:
    """The seam's input really is the heads' outputs side by side, in head order: perturbing the values of
    head 2 (its key/value head under grouped-query attention) changes the slices of the query heads reading
    it and no other."""
    _, model = family
    site, values = families.head_sites(model)[0], families.value_sites(model)[0]
    before = _site_inputs(model)[0]  # (1, T, H * d)
    weight = values.module.weight
    part, parts = values.fused or (0, 1)
    width = (weight.shape[1] if _is_conv1d(values.module) else weight.shape[0]) // parts
    kv = values.kv_head(2)
    rows = slice(part * width + kv * site.head_dim, part * width + (kv + 1) * site.head_dim)  # head 2's values
    saved = weight.detach().clone()
    noise = torch.randn(saved.shape, generator=torch.Generator().manual_seed(0)) * 3.0
    with torch.no_grad():
        if _is_conv1d(values.module):
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
    changed = [h for h in range(site.n_heads) if values.kv_head(h) == kv]
    others = [h for h in range(site.n_heads) if h not in changed]
    assert 2 in changed and others
    assert torch.equal(heads_after[..., others, :], heads_before[..., others, :])
    for head in changed:
        change = (heads_after[..., head, :] - heads_before[..., head, :]).abs().max()
        assert change > 1e-3 * heads_before[..., head, :].abs().max()


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
        if _is_conv1d(site.module):  # Conv1D: (in, out)
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
    """Facts against what the model does and holds: a decoder's attention is causal; the embeddings kept are
    the input embeddings and the absolute position embeddings (one row per position the config allows)."""
    _, model = family
    assert families.n_layers(model) == 2 and families.n_heads(model) == 4
    with torch.no_grad():
        maps = torch.stack(model(input_ids=IDS, output_attentions=True).attentions)  # (L, 1, H, T, T)
    assert families.is_decoder(model) == (not torch.triu(maps, diagonal=1).any().item())
    word = model.get_input_embeddings()
    limits = {getattr(model.config, key, None) for key in ("max_position_embeddings", "n_positions")} - {None}
    expected = tuple(f"{name}.weight" for name, module in model.named_modules() if module is word or (
        isinstance(module, torch.nn.Embedding) and module.num_embeddings in limits))
    assert families.embedding_parameters(model) == expected
    assert expected[0] == f"{next(n for n, m in model.named_modules() if m is word)}.weight"


def test_every_tiny_model_is_a_family_and_every_family_is_covered() -> None:
    """The tests run on the families of the table that have a tiny model; a family without one shares the
    layout of one that has (or has no intervention seam to test), so every entry's paths are exercised."""
    assert set(BUILDERS) <= set(families.FAMILIES), "a tiny model for a family missing from FAMILIES"

    def layout(f: families.Family) -> tuple[Any, ...]:
        return f.decoder, f.layers, f.head_output, f.values, f.fused, f.symmetric_window

    tested = {layout(families.FAMILIES[name]) for name in tiny_families()}
    uncovered = [name for name, f in families.FAMILIES.items()
                 if name not in BUILDERS and f.layers is not None and layout(f) not in tested]
    assert not uncovered, f"families with a layout no tiny model tests: {uncovered}"


def test_views_of_the_table_agree_with_it() -> None:
    table = families.FAMILIES
    assert families.DECODER_MODEL_TYPES == {n for n, f in table.items() if f.decoder}
    assert families.HEAD_OUTPUT_MODULES["gpt2"] == ("h", "attn.c_proj")
    assert families.VALUE_MODULES["modernbert"] == ("attn.Wqkv", (2, 3))
    assert set(families.POSITION_EMBEDDING_MODULES) == {"position_embeddings", "wpe"}
    assert families.word_start_marks() == ("Ġ", "▁") and families.continuation_marks() == ("##",)


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
