"""Value zeroing against a slow reference, on tiny models of every family: re-running each block on copies with
alpha^h_ij v^h_j taken out of head h's output equals running the whole model again with head h's value of token j
set to zero before attention (a hook on the value projection; for GQA llama, on the values after the kv heads are
repeated), one (h, j) at a time; GQA query heads of one group score apart; padding scores 0; decoders are causal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from probes.errors import ConfigError
from tests.tiny_models import build, perturb, tiny_families

torch = pytest.importorskip("torch")

#: Kept layers, out of order: the result's layer k is layers[k].
LAYERS = (1, 0)

#: One reference per family and layer: (B, H, T, T), filled by the first test that needs it.
_REFERENCES: dict[tuple[str, int], Any] = {}


@pytest.fixture(scope="module", params=tiny_families())
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, Any]:
    """A tiny model of one family with every parameter perturbed (biases nonzero), eager attention, and a batch
    of two right-padded inputs of different lengths."""
    from transformers import AutoModel, AutoTokenizer

    name = request.param
    folder = build(name, tmp_path_factory.mktemp("value_zeroing"))
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    perturb(model, 11)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    encoded = tokenizer(["the lazy dog sat on the mat .", "a cat"], return_tensors="pt", padding=True)
    assert encoded["attention_mask"][1].sum() < encoded["attention_mask"][0].sum()  # right padding in input 1
    return name, model, (encoded["input_ids"], encoded["attention_mask"])


def _block_output(model: Any, batch: Any, layer: int) -> Any:
    """``(B, T, D)`` float64: the output hidden states of ``layer``'s block in one run of the whole model."""
    from probes.extraction import families

    family = families.family_of(model)
    assert family is not None and family.layers
    block = model.base_model.get_submodule(family.layers)[layer]
    seen: dict[str, Any] = {}
    handle = block.register_forward_hook(
        lambda m, a, out: seen.__setitem__("y", out if isinstance(out, torch.Tensor) else out[0]))
    kwargs = {"use_cache": False} if families.is_decoder(model) else {}
    try:
        with torch.no_grad():
            model(input_ids=batch[0], attention_mask=batch[1], **kwargs)
    finally:
        handle.remove()
    return seen["y"].double()


@contextmanager
def _zero_value_columns(model: Any, layer: int, head: int, token: int, width: int) -> Iterator[None]:
    """The value projection's output (fused q/k/v: its value chunk) with columns ``[head*width, (head+1)*width)``
    set to 0 at position ``token`` in every input: value head ``head`` of that token, before attention."""
    from probes.extraction import families

    site = families.value_sites(model)[layer]

    def hook(module: Any, args: Any, output: Any) -> Any:
        output = output.clone()
        offset = 0 if site.fused is None else site.fused[0] * output.shape[-1] // site.fused[1]
        output[:, token, offset + head * width:offset + (head + 1) * width] = 0
        return output

    handle = site.module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def _zero_query_heads_value(model: Any, layer: int, head: int, token: int) -> Iterator[None]:
    """Llama (GQA): the values after the kv heads are repeated, with query head ``head``'s value of ``token``
    zeroed: transformers' eager attention wrapped for the one layer (the other heads of the group keep it)."""
    from transformers.models.llama import modeling_llama

    original = modeling_llama.eager_attention_forward
    target = model.base_model.layers[layer].self_attn
    calls = []

    def wrapped(module: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        if module is not target:
            return original(module, query, key, value, *args, **kwargs)
        groups = module.num_key_value_groups
        key = modeling_llama.repeat_kv(key, groups)
        value = modeling_llama.repeat_kv(value, groups).clone()  # (B, H, T, d)
        value[:, head, token] = 0
        calls.append(head)
        module.num_key_value_groups = 1
        try:
            return original(module, query, key, value, *args, **kwargs)
        finally:
            module.num_key_value_groups = groups

    modeling_llama.eager_attention_forward = wrapped
    try:
        yield
    finally:
        modeling_llama.eager_attention_forward = original
    assert calls, "the wrapped attention was not called"


def _reference(name: str, model: Any, batch: Any, layer: int,
               zero: Callable[[Any, int, int, int], Any] | None = None) -> Any:
    """``(B, H, T, T)``: 1 - cos of the block's output with and without head h's value of token j, the whole model
    run once per (h, j) (all inputs at once: they do not meet); padding queries and keys 0."""
    from probes.extraction import families

    if zero is None and (name, layer) in _REFERENCES:
        return _REFERENCES[(name, layer)]
    if zero is None:
        gqa = families.n_kv_heads(model) != families.n_heads(model)
        width = families.head_dim(model)
        zero = (lambda m, l, h, j: _zero_query_heads_value(m, l, h, j)) if gqa else \
            (lambda m, l, h, j: _zero_value_columns(m, l, h, j, width))
    y = _block_output(model, batch, layer)  # (B, T, D)
    n_heads, (n_batch, n_tok) = families.n_heads(model), batch[0].shape
    scores = np.zeros((n_batch, n_heads, n_tok, n_tok))
    for h in range(n_heads):
        for j in range(n_tok):
            with zero(model, layer, h, j):
                zeroed = _block_output(model, batch, layer)
            cos = torch.nn.functional.cosine_similarity(zeroed, y, dim=-1)  # (B, T)
            scores[:, h, :, j] = (1 - cos).numpy()
    real = batch[1].numpy().astype(bool)  # (B, T)
    scores *= real[:, None, :, None] * real[:, None, None, :]
    _REFERENCES.setdefault((name, layer), scores)
    return scores


@pytest.fixture(scope="module")
def scores(tiny: tuple[str, Any, Any]) -> Any:
    """value_zeroing on the batch, kept layers :data:`LAYERS`, copies chunked 7 at a time (no chunk lines up with
    a head)."""
    from probes.extraction.value_zeroing import value_zeroing

    name, model, batch = tiny
    return value_zeroing(model, batch[0], batch[1], LAYERS, max_copies=7).numpy()


def test_equals_zeroing_one_tokens_value_at_a_time(tiny: tuple[str, Any, Any], scores: Any):
    from probes.extraction.value_zeroing import value_zeroing

    name, model, batch = tiny
    assert scores.shape == (2, len(LAYERS), 4, *batch[0].shape[1:2] * 2) and scores.dtype == np.float32
    for k, layer in enumerate(LAYERS):
        expected = _reference(name, model, batch, layer)
        np.testing.assert_allclose(scores[:, k], expected, atol=1e-5, rtol=0)
        assert expected.max() > 1e-3  # zeroing a value changes the output: the comparison is not of zeros
    before = _hooks(model)
    whole = value_zeroing(model, batch[0], batch[1], [LAYERS[0]])  # default chunking: every copy in one run
    np.testing.assert_allclose(whole.numpy()[:, 0], scores[:, 0], atol=1e-6, rtol=0)
    after = _hooks(model)
    assert after == before  # nothing left behind (transformers keeps its own output-recording hooks)
    assert not [hook for _, hook in after if hook.__module__ == "probes.extraction.value_zeroing"]


def _hooks(model: Any) -> set[tuple[str, Any]]:
    """Every forward (pre-)hook on the model's modules, with the module's name."""
    return {(name, hook) for name, module in model.named_modules()
            for hooks in (module._forward_hooks, module._forward_pre_hooks) for hook in hooks.values()}


def test_gqa_scores_are_per_query_head_not_per_kv_head(tiny: tuple[str, Any, Any], scores: Any):
    """Llama, 4 query heads on 2 kv heads: heads 0 and 1 read kv head 0's values with their own weights, so their
    scores differ; zeroing kv head 0 itself (both heads) is another measure, not what value zeroing computes."""
    name, model, batch = tiny
    if name != "llama":
        pytest.skip("grouped-query attention: the llama model")
    layer, k = LAYERS[0], 0
    assert np.abs(scores[:, k, 0] - scores[:, k, 1]).max() > 1e-3
    np.testing.assert_allclose(scores[:, k], _reference(name, model, batch, layer), atol=1e-5, rtol=0)
    from probes.extraction import families

    width = families.head_dim(model)
    kv_zeroed = _reference(name, model, batch, layer, zero=lambda m, l, h, j: _zero_value_columns(
        m, l, h // 2, j, width))  # kv head h // 2, read by query heads 2(h // 2) and 2(h // 2) + 1
    assert np.abs(kv_zeroed[:, 0] - scores[:, k, 0]).max() > 1e-3


def test_padding_scores_zero_and_an_input_scores_as_it_does_alone(tiny: tuple[str, Any, Any], scores: Any):
    from probes.extraction.value_zeroing import value_zeroing

    name, model, batch = tiny
    mask = batch[1].numpy().astype(bool)
    n = int(mask[1].sum())
    assert not mask[1, n:].any() and n < mask.shape[1]
    assert np.all(scores[1, :, :, n:, :] == 0) and np.all(scores[1, :, :, :, n:] == 0)
    assert scores[1, :, :, :n, :n].max() > 1e-3
    alone = value_zeroing(model, batch[0][1:2, :n], batch[1][1:2, :n], LAYERS).numpy()
    np.testing.assert_allclose(scores[1, :, :, :n, :n], alone[0], atol=1e-6, rtol=0)


def test_decoders_score_no_key_after_the_query(tiny: tuple[str, Any, Any], scores: Any):
    from probes.extraction import families

    name, model, batch = tiny
    if not families.is_decoder(model):
        pytest.skip("causal decoders only")
    after = np.triu(np.ones(scores.shape[-2:], dtype=bool), k=1)  # j > i
    assert np.abs(scores[..., after]).max() <= 1e-7
    assert scores[..., ~after].max() > 1e-3


def test_refuses_a_family_without_value_and_output_sites_and_bad_arguments(tiny: tuple[str, Any, Any]):
    from probes.extraction.value_zeroing import value_zeroing

    name, model, batch = tiny
    if name != "bert":
        pytest.skip("once")
    unknown = SimpleNamespace(config=SimpleNamespace(model_type="gpt_neox"), training=False)
    with pytest.raises(ConfigError, match=r"value zeroing: 'gpt_neox' models are not supported"):
        value_zeroing(unknown, batch[0], batch[1], [0])
    with pytest.raises(ConfigError, match=r"expected 0-based layers in \[0, 2\) for 'bert', found \[2\]"):
        value_zeroing(model, batch[0], batch[1], [2])
    with pytest.raises(ConfigError, match="expected max_copies >= 1, found 0"):
        value_zeroing(model, batch[0], batch[1], [0], max_copies=0)

