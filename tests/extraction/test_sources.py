"""Attention sources against slow references, on tiny models of every family: the norm map equals
alpha_ij ||W_O^h (W_V^h x_j + b_V^h)|| computed head by head from the weight matrices; the contribution map equals
ALTI's measure computed token by token; the per-head terms plus the residual and the biases sum to the block's
output; GQA heads use their group's values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from probes.errors import ConfigError
from tests.tiny_models import build, perturb, tiny_families

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", params=tiny_families())
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, Any]:
    """A tiny model of one family with every parameter perturbed (biases nonzero), eager attention, and a batch
    of two right-padded inputs of different lengths."""
    from transformers import AutoModel, AutoTokenizer

    name = request.param
    folder = build(name, tmp_path_factory.mktemp("sources"))
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    perturb(model, 7)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    texts = ["the quick brown fox jumps over the lazy dog .", "a cat sat on the mat"]
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    return name, model, (encoded["input_ids"], encoded["attention_mask"])


def _reference_pieces(model: Any, batch: Any, layer: int) -> tuple[Any, Any, Any, Any]:
    """From one plain forward pass: the weights (B, H, T, T), the value projection's input x (B, T, E), and the
    per-head value and output matrices read from the modules' weights by hand: W_V (H, E, d), b_V (H, d),
    W_O (H, d, D)."""
    from probes.extraction import families

    site = families.value_sites(model)[layer]
    head = families.head_sites(model)[layer]
    seen: dict[str, Any] = {}
    handle = site.module.register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0]))
    try:
        with torch.no_grad():
            out = model(input_ids=batch[0], attention_mask=batch[1], output_attentions=True)
    finally:
        handle.remove()
    conv = type(site.module).__name__ == "Conv1D"
    weight = site.module.weight.detach()
    weight = weight if conv else weight.t()  # (E, out)
    bias = site.module.bias.detach() if site.module.bias is not None else torch.zeros(weight.shape[1])
    if site.fused is not None:
        part, parts = site.fused
        width = weight.shape[1] // parts
        weight, bias = weight[:, part * width:(part + 1) * width], bias[part * width:(part + 1) * width]
    d, heads, kv = site.head_dim, site.n_heads, site.n_kv_heads
    w_v = torch.stack([weight[:, (h // (heads // kv)) * d:(h // (heads // kv) + 1) * d] for h in range(heads)])
    b_v = torch.stack([bias[(h // (heads // kv)) * d:(h // (heads // kv) + 1) * d] for h in range(heads)])
    out_weight = head.module.weight.detach()
    out_weight = out_weight if type(head.module).__name__ == "Conv1D" else out_weight.t()  # (H*d, D)
    w_o = torch.stack([out_weight[h * d:(h + 1) * d] for h in range(heads)])
    return out.attentions[layer].double(), seen["x"].double(), (w_v.double(), b_v.double()), w_o.double()


def test_norm_maps_equal_alpha_times_the_norm_of_each_heads_transformed_value(tiny: tuple[str, Any, Any]):
    from probes.extraction.sources import SourceHooks

    name, model, batch = tiny
    layer = 1
    alpha, x, (w_v, b_v), w_o = _reference_pieces(model, batch, layer)
    B, H, T, _ = alpha.shape
    expected = np.zeros((B, H, T, T))
    for b in range(B):
        for h in range(H):
            for j in range(T):
                f = (x[b, j] @ w_v[h] + b_v[h]) @ w_o[h]  # W_O^h (W_V^h x_j + b_V^h)
                expected[b, h, :, j] = (alpha[b, h, :, j] * f.norm()).numpy()
    with SourceHooks(model, "norm", [layer]) as hooks, torch.no_grad():
        model(input_ids=batch[0], attention_mask=batch[1])
        raw = hooks.raw(layer, alpha.float())
        maps, totals = hooks.transform(layer, alpha.float())
    np.testing.assert_allclose(raw.numpy(), expected, rtol=1e-4, atol=1e-5)
    rows = expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(maps.numpy(), np.divide(expected, rows, out=np.zeros_like(expected), where=rows > 0),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(totals.numpy(), rows[..., 0], rtol=1e-4, atol=1e-5)


def test_contribution_maps_equal_the_norm_of_each_linearised_term(tiny: tuple[str, Any, Any]):
    """||T_i(alpha_ij f_h(x_j))|| up to the row's 1/s_i, with T_i the post-attention LayerNorm's gamma * (v - mean v)
    (post-LN families) or the identity (pre-LN), token by token."""
    from probes.extraction import families
    from probes.extraction.sources import SourceHooks

    name, model, batch = tiny
    layer = 0
    alpha, x, (w_v, b_v), w_o = _reference_pieces(model, batch, layer)
    family = families.family_of(model)
    assert (family is not None and family.attention_norm is not None) == (name in ("bert", "roberta", "electra",
                                                                                 "deberta-v2"))
    gamma = None
    if family is not None and family.attention_norm:
        blocks = model.base_model.get_submodule(family.layers)
        gamma = blocks[layer].get_submodule(family.attention_norm).weight.detach().double()
    B, H, T, _ = alpha.shape
    expected = np.zeros((B, H, T, T))
    for b in range(B):
        for h in range(H):
            f = torch.stack([(x[b, j] @ w_v[h] + b_v[h]) @ w_o[h] for j in range(T)])  # (T, D)
            if gamma is not None:
                f = gamma * (f - f.mean(dim=-1, keepdim=True))
            for i in range(T):
                for j in range(T):
                    expected[b, h, i, j] = float((alpha[b, h, i, j] * f[j]).norm())
    with SourceHooks(model, "contribution", [layer]) as hooks, torch.no_grad():
        model(input_ids=batch[0], attention_mask=batch[1])
        raw = hooks.raw(layer, alpha.float())
    np.testing.assert_allclose(raw.numpy(), expected, rtol=1e-3, atol=1e-4)


def test_head_terms_residual_and_biases_sum_to_the_blocks_output(tiny: tuple[str, Any, Any]):
    from probes.extraction.decomposition import block_terms

    name, model, batch = tiny
    for layer in (0, 1):
        terms = block_terms(model, batch[0], batch[1], layer)
        real = batch[1].bool()  # padding rows are not the model's concern
        np.testing.assert_allclose(terms.total()[real].numpy(), terms.output[real].numpy(), rtol=1e-4, atol=2e-4)
        assert float(terms.heads.abs().sum()) > 0 and float(terms.residual.abs().sum()) > 0


def test_gqa_query_heads_read_their_groups_values():
    """In the llama model (4 query heads, 2 kv heads), the norms of what heads 0 and 1 move from a token are
    those of kv head 0's values through each head's own output slice; heads 0 and 2 read different values."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaModel

    from probes.extraction.sources import SourceHooks

    torch.manual_seed(0)
    model = LlamaModel(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=16, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                   attn_implementation="eager")).eval()
    ids = torch.randint(0, 50, (1, 9))
    kept: dict[str, Any] = {}
    handle = model.layers[0].self_attn.v_proj.register_forward_hook(lambda m, a, o: kept.__setitem__("v", o))
    with SourceHooks(model, "norm", [0]) as hooks, torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
        values = hooks.values[0]  # (1, T, 4, 8)
        moved = hooks.vectors(0)  # (1, 4, T, D): W_O^h v^h_j
    handle.remove()
    v = kept["v"].reshape(1, 9, 2, 8)
    for h, g in ((0, 0), (1, 0), (2, 1), (3, 1)):
        assert torch.equal(values[0, :, h], v[0, :, g])
        w = model.layers[0].self_attn.o_proj.weight[:, h * 8:(h + 1) * 8]
        np.testing.assert_allclose(moved[0, h].numpy(), (v[0, :, g] @ w.t()).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert not torch.equal(values[0, :, 0], values[0, :, 2])


def test_a_family_whose_block_does_not_decompose_is_refused_with_its_reason():
    from transformers import GPTNeoXConfig, GPTNeoXModel

    from probes.extraction.sources import SOURCES, check_source, check_source_name

    model = GPTNeoXModel(GPTNeoXConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                       intermediate_size=16))
    check_source(model, "weights")
    for source in SOURCES[1:]:
        with pytest.raises(ConfigError, match=r"'gpt_neox' models are not supported.*values"):
            check_source(model, source)
    with pytest.raises(ConfigError, match="expected one of weights, norm, contribution, value-zeroing, found 'nrom'"):
        check_source_name("nrom")


