"""Initialisation schemes: parsing, the identical copy against a hand-built one, and symmetry under training."""

from __future__ import annotations

import pytest
import torch

from probes.errors import ConfigError
from probes.training.schemes import InitScheme, apply_scheme, head_blocks
from tests.training.cases import (
    FAMILIES,
    HEADS,
    LAYERS,
    D,
    attention_maps,
    copy_head_zero_by_hand,
    hand_heads,
    max_head_gap,
    tiny_model,
    train_steps,
)


def _schemed(family: str, text: str, seed: int = 0, **dropouts: float) -> torch.nn.Module:
    model = tiny_model(family, seed, **dropouts)
    apply_scheme(model, InitScheme.parse(text), seed)
    return model


def _max_map_gap(model: torch.nn.Module, family: str) -> float:
    return max(float((maps[:, h] - maps[:, 0]).abs().max()) for maps in attention_maps(model, family)
               for h in range(1, HEADS))


# ----------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("text, name, noise", [("independent", "independent", 0.0), ("identical", "identical", 0.0),
                                               (" identical+noise:0.01 ", "identical+noise", 0.01),
                                               ("identical+noise:1e-3", "identical+noise", 0.001)])
def test_parse_reads_each_scheme_and_its_text_reads_back(text: str, name: str, noise: float) -> None:
    scheme = InitScheme.parse(text)
    assert (scheme.name, scheme.noise) == (name, noise)
    assert InitScheme.parse(scheme.text) == scheme
    assert scheme.describe()["scheme"] == scheme.text and scheme.describe()["noise"] == noise


@pytest.mark.parametrize("text", ["random", "identical+noise:0", "identical+noise:-0.1", "identical+noise:x",
                                  "identical+noise:nan", "identical+noise:inf", "identical+noise", ""])
def test_parse_refuses_other_texts_naming_them_and_the_choices(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        InitScheme.parse(text)
    assert repr(text) in str(caught.value) and "identical+noise:EPS" in str(caught.value)


def test_a_scheme_built_directly_is_checked() -> None:
    with pytest.raises(ConfigError, match="noise"):
        InitScheme("identical", 0.5)
    with pytest.raises(ConfigError, match="expected one of"):
        InitScheme("copied")


# ----------------------------------------------------------------------------- identical, against a hand-built copy
@pytest.mark.parametrize("family", FAMILIES)
def test_identical_equals_a_hand_built_copy_of_head_zero(family: str) -> None:
    raw = tiny_model(family, seed=3)
    by_hand = tiny_model(family, seed=3)
    copy_head_zero_by_hand(by_hand, family)
    schemed = _schemed(family, "identical", seed=3)
    hand, ours = dict(by_hand.named_parameters()), dict(schemed.named_parameters())
    assert hand.keys() == ours.keys()
    for name, value in hand.items():
        assert torch.equal(value, ours[name]), name
    changed = [n for n, v in raw.named_parameters() if not torch.equal(v, hand[n])]
    assert changed and all("attn" in n or "attention" in n for n in changed)  # only attention weights moved
    assert max_head_gap(raw, family) > 0 and max_head_gap(schemed, family) == 0.0


@pytest.mark.parametrize("family", FAMILIES)
def test_head_blocks_are_the_hand_slices(family: str) -> None:
    model = tiny_model(family, seed=1)
    parts = {"query": "q", "key": "k", "value": "v", "output": "o"}
    for layer in range(LAYERS):
        blocks, hand = head_blocks(model, layer), hand_heads(model, family, layer)
        assert list(blocks) == list(parts) and all(len(v) == HEADS for v in blocks.values())
        for head in range(HEADS):
            for part, short in parts.items():
                want = [hand[head][f"{short}.{kind}"].reshape(-1) for kind in "wb" if f"{short}.{kind}" in hand[head]]
                assert torch.equal(blocks[part][head], torch.cat(want)), (layer, head, part)
    assert blocks["query"][0].numel() == D * 32 + (0 if family == "llama" else D)
    with pytest.raises(ConfigError, match="layer"):
        head_blocks(model, LAYERS)


# ----------------------------------------------------------------------------- symmetry under training
@pytest.mark.parametrize("family", FAMILIES)
def test_identical_heads_stay_exactly_equal_after_training(family: str) -> None:
    model = _schemed(family, "identical")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    train_steps(model, family, steps=50)
    moved = max((p - before[n]).abs().max().item() for n, p in model.named_parameters()
                if "attn" in n or "attention" in n)
    assert moved > 0.05  # it trained (Adam, lr 0.01) ...
    assert max_head_gap(model, family) == 0.0  # ... and every head is still head 0, bit for bit
    assert _max_map_gap(model, family) == 0.0


@pytest.mark.parametrize("family", FAMILIES)
def test_hidden_dropout_keeps_identical_heads_equal(family: str) -> None:
    """Dropout outside the per-head attention weights (embeddings, the output projection's result, the MLP) masks
    what every head reads or what they give together, so the heads stay copies (llama has no such dropout)."""
    model = _schemed(family, "identical", hidden_dropout=0.2)
    train_steps(model, family, steps=20)
    assert max_head_gap(model, family) == 0.0


@pytest.mark.parametrize("family", FAMILIES)
def test_attention_dropout_breaks_the_symmetry(family: str) -> None:
    model = _schemed(family, "identical", attention_dropout=0.1)
    train_steps(model, family, steps=20)
    assert max_head_gap(model, family) > 1e-4
    assert _max_map_gap(model, family) > 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_noise_breaks_the_symmetry_and_grows_under_training(family: str) -> None:
    model = _schemed(family, "identical+noise:0.01")
    start = max_head_gap(model, family)
    assert start > 0 and _max_map_gap(model, family) > 0
    train_steps(model, family, steps=30)
    assert max_head_gap(model, family) > start


@pytest.mark.parametrize("family", FAMILIES)
def test_noise_has_the_relative_size_asked_and_its_seed(family: str) -> None:
    identical = _schemed(family, "identical", seed=2)
    for eps in (0.01, 0.1):
        noisy = _schemed(family, f"identical+noise:{eps}", seed=2)
        for layer in range(LAYERS):
            base, moved = hand_heads(identical, family, layer), hand_heads(noisy, family, layer)
            for head in range(HEADS):
                w0, w = base[head]["q.w"], moved[head]["q.w"]
                ratio = ((w - w0).std() / w0.std()).item()
                assert 0.7 * eps < ratio < 1.3 * eps, (layer, head, ratio)
    first, again = (_schemed(family, "identical+noise:0.01", seed=2) for _ in range(2))
    other = _schemed(family, "identical+noise:0.01", seed=5)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), again.parameters()))
    assert max_head_gap(other, family) > 0 and not torch.equal(hand_heads(other, family, 0)[1]["q.w"],
                                                               hand_heads(again, family, 0)[1]["q.w"])


@pytest.mark.parametrize("family", FAMILIES)
def test_independent_changes_nothing_and_follows_the_seed(family: str) -> None:
    plain = tiny_model(family, seed=0)
    same = _schemed(family, "independent", seed=0)
    other = _schemed(family, "independent", seed=1)
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), same.parameters()))
    differing = [n for (n, a), b in zip(plain.named_parameters(), other.parameters()) if not torch.equal(a, b)]
    assert any("attn" in n or "attention" in n for n in differing)
    assert max_head_gap(same, family) > 0
