"""Gradient importance of attention by key type (probes.extraction.gradients, Clark et al. 2019 §3.2).

The gradient is checked against central finite differences: one post-softmax attention weight
A[l, h, i, j] is perturbed by +-eps inside the model's eager attention function (the weights that
multiply the values), in float64, on a tiny random BERT with a masked-LM head and a tiny GPT-2 LM.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from probes.errors import ConfigError  # noqa: E402
from probes.extraction.gradients import (  # noqa: E402
    KEY_TYPES,
    KeyTypeGradients,
    attention_gradients,
    encode_items,
    gradient_importance,
    importance_from_model,
    lm_head,
    lm_losses,
    load_lm,
)
from probes.results import equal, load  # noqa: E402
from tests.tiny_models import build  # noqa: E402

SENTENCES = [
    ["The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "."],
    ["A", "cat", "sat", "on", "the", "mat", ",", "and", "the", "dog", "barked", "at", "it", "."],
    ["She", "did", "n't", "know", "."],
    ["Attention", "heads", "in", "transformers"],
]


def _with_head(root: Path, family: str, head_class: str) -> Path:
    """The tiny ``family`` model's tokenizer and config, saved as ``head_class`` (random LM head weights)."""
    bare = build(family, root / "bare")
    folder = root / f"{family}-lm"
    shutil.copytree(bare, folder)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    torch.manual_seed(3)
    getattr(transformers, head_class)(transformers.AutoConfig.from_pretrained(bare)).eval().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def mlm_folder(tmp_path_factory) -> Path:
    return _with_head(tmp_path_factory.mktemp("mlm"), "bert", "BertForMaskedLM")


@pytest.fixture(scope="module")
def clm_folder(tmp_path_factory) -> Path:
    return _with_head(tmp_path_factory.mktemp("clm"), "gpt2", "GPT2LMHeadModel")


def _tensors(items):
    width = max(e.input_ids.shape[0] for e in items)
    ids = np.zeros((len(items), width), np.int64)
    labels = np.full((len(items), width), -100, np.int64)
    mask = np.zeros((len(items), width), np.int64)
    for b, e in enumerate(items):
        n = e.input_ids.shape[0]
        ids[b, :n], labels[b, :n], mask[b, :n] = e.input_ids, e.labels, 1
    return torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(labels)


def _finite_difference(model, module_path, attention_module, target, tensors, objective, eps=1e-4):
    """(L(A + eps e) - L(A - eps e)) / 2 eps for one weight ``target = (layer, head, i, j)`` of example 0."""
    layer, head, i, j = target
    module = importlib_module(module_path)
    original = module.eager_attention_forward
    site = attention_module(model, layer)

    def loss_with(delta: float) -> float:
        def perturbed(mod, query, key, value, attention_mask, *args, **kwargs):
            out, weights = original(mod, query, key, value, attention_mask, *args, **kwargs)
            if mod is not site:
                return out, weights
            changed = weights.clone()
            changed[0, head, i, j] += delta
            return torch.matmul(changed, value).transpose(1, 2).contiguous(), changed

        module.eager_attention_forward = perturbed
        try:
            with torch.no_grad():
                return float(lm_losses(model, *tensors, objective)[0][0])
        finally:
            module.eager_attention_forward = original

    with torch.no_grad():
        plain = float(lm_losses(model, *tensors, objective)[0][0])
    assert loss_with(0.0) == pytest.approx(plain, abs=1e-14)  # the re-implemented product is the model's
    return (loss_with(eps) - loss_with(-eps)) / (2 * eps)


def importlib_module(path: str):
    import importlib

    return importlib.import_module(path)


CASES = {
    "masked-lm": ("mlm_folder", "transformers.models.bert.modeling_bert",
                  lambda m, layer: m.bert.encoder.layer[layer].attention.self),
    "causal-lm": ("clm_folder", "transformers.models.gpt2.modeling_gpt2",
                  lambda m, layer: m.transformer.h[layer].attn),
}


@pytest.mark.parametrize("objective", sorted(CASES))
def test_gradient_equals_finite_differences(objective, request) -> None:
    fixture, module_path, site = CASES[objective]
    model, tokenizer, _, found = load_lm(request.getfixturevalue(fixture))
    assert found == objective
    model = model.double()
    items, skipped = encode_items(tokenizer, SENTENCES[1:2], objective, seed=5)
    assert skipped == 0
    tensors = _tensors(items)
    grads = attention_gradients(model, *tensors, objective)  # (1, L, H, T, T)
    T = items[0].input_ids.shape[0]
    assert grads.shape == (1, 2, 4, T, T) and grads.dtype == torch.float64
    # last layer: only rows that feed the loss matter (a masked token; the prediction of the last token)
    row = int(np.flatnonzero(items[0].labels != -100)[0]) if objective == "masked-lm" else T - 2
    silent = T - 1  # masked LM: [SEP] is never predicted; causal LM: the last row predicts nothing
    rng = np.random.default_rng(0)
    targets = [(1, 3, row, row), (1, 2, row, 0), (0, 0, 0, 0)]
    targets += [(0, int(rng.integers(4)), i, int(rng.integers(i + 1))) for i in rng.integers(T, size=5)]
    for target in targets:
        analytic = float(grads[(0, *target)])
        numeric = _finite_difference(model, module_path, site, target, tensors, objective)
        assert abs(analytic) > 1e-8, target  # a real signal, not two zeros
        assert numeric == pytest.approx(analytic, rel=1e-5, abs=1e-11), target
    assert float(grads[0, 1, 0, silent, 1]) == 0.0
    assert _finite_difference(model, module_path, site, (1, 0, silent, 1), tensors, objective) == \
        pytest.approx(0.0, abs=1e-11)


def test_batch_gradients_are_per_example(mlm_folder) -> None:
    """A padded batch gives each example the gradient of its own loss (the example run alone)."""
    model, tokenizer, _, objective = load_lm(mlm_folder)
    model = model.double()
    items, _ = encode_items(tokenizer, SENTENCES, objective, seed=1)
    together = attention_gradients(model, *_tensors(items), objective)
    for b, item in enumerate(items):
        alone = attention_gradients(model, *_tensors([item]), objective)[0]
        n = item.input_ids.shape[0]
        assert torch.allclose(together[b, :, :, :n, :n], alone, rtol=1e-9, atol=1e-12)


def test_head_on_masked_positions_only_gives_the_same_loss(mlm_folder) -> None:
    """The fast path (BERT's ``cls`` head on the masked positions only) equals the model's own forward."""
    model, tokenizer, _, objective = load_lm(mlm_folder)
    model = model.double()
    assert lm_head(model) is model.cls
    tensors = _tensors(encode_items(tokenizer, SENTENCES, objective, seed=4)[0])
    fast, fast_attn = lm_losses(model, *tensors, objective)
    full, full_attn = lm_losses(model, *tensors, objective, masked_only=False)
    assert torch.allclose(fast, full, rtol=1e-12, atol=0)
    g_fast = torch.autograd.grad(fast.sum(), fast_attn)
    g_full = torch.autograd.grad(full.sum(), full_attn)
    assert all(torch.allclose(a, b, rtol=1e-9, atol=1e-15) for a, b in zip(g_fast, g_full))


def test_key_types_and_masking(mlm_folder) -> None:
    _, tokenizer, _, _ = load_lm(mlm_folder)
    items, _ = encode_items(tokenizer, [["The", "dog", ",", "the", "cat", "."]], "masked-lm", seed=0)
    # tokens: [CLS] the dog , the cat . [SEP]
    assert [KEY_TYPES[k] for k in items[0].key_type] == ["cls", "other", "other", "punct", "other", "other",
                                                         "punct", "sep"]
    words = [["the", "dog", "sat", "on", "the", "mat", "and", "the", "cat", "barked"] * 5] * 60
    items, _ = encode_items(tokenizer, words, "masked-lm", seed=0)
    again, _ = encode_items(tokenizer, words, "masked-lm", seed=0)
    other, _ = encode_items(tokenizer, words, "masked-lm", seed=1)
    assert all(np.array_equal(a.input_ids, b.input_ids) for a, b in zip(items, again))
    assert not all(np.array_equal(a.input_ids, b.input_ids) for a, b in zip(items, other))
    original = np.asarray(tokenizer(words[0], is_split_into_words=True)["input_ids"])
    chosen = np.concatenate([np.flatnonzero(e.labels != -100) for e in items])
    assert all(0 < c < len(original) - 1 for c in chosen)  # never a special token
    labels = np.concatenate([e.labels[e.labels != -100] for e in items])
    assert np.array_equal(labels, np.concatenate([original[e.labels != -100] for e in items]))
    assert 0.13 < chosen.shape[0] / (60 * (len(original) - 2)) < 0.17  # 15% of 3,300 word tokens
    seen = np.concatenate([e.input_ids[e.labels != -100] for e in items])
    masked = np.mean(seen == tokenizer.mask_token_id)
    kept = np.mean(seen == labels)
    assert 0.75 < masked < 0.85 and 0.06 < kept < 0.16  # 80% mask, 10% kept (+ the rare same random)
    assert 0.05 < 1 - masked - kept < 0.14  # 10% replaced by a random token (not special)
    assert not set(seen[(seen != labels) & (seen != tokenizer.mask_token_id)]) & set(tokenizer.all_special_ids)
    one, _ = encode_items(tokenizer, [["dog"]] * 20, "masked-lm", seed=0)
    assert all((e.labels != -100).sum() == 1 for e in one)  # at least one masked token per example


def _slow_reference(model, items, objective):
    """Per example, per head and key type, the mean |dL/dA| by explicit loops, then the mean over examples."""
    L, H = 2, 4
    total, count = np.zeros((L, H, 4)), np.zeros(4)
    for item in items:
        g = attention_gradients(model, *_tensors([item]), objective)[0].abs().numpy()
        n = item.input_ids.shape[0]
        for k in range(4):
            pairs = [(i, j) for i in range(n) for j in range(n)
                     if item.key_type[j] == k and (objective == "masked-lm" or j <= i)]
            if not pairs:
                continue
            count[k] += 1
            for layer in range(L):
                for head in range(H):
                    total[layer, head, k] += np.mean([g[layer, head, i, j] for i, j in pairs])
    with np.errstate(invalid="ignore"):
        return total / count, count


@pytest.mark.parametrize("objective", sorted(CASES))
def test_aggregation_matches_slow_reference(objective, request) -> None:
    model, tokenizer, name, _ = load_lm(request.getfixturevalue(CASES[objective][0]))
    model = model.double()
    result = importance_from_model(model, tokenizer, SENTENCES, objective=objective, seed=2, batch_size=3,
                                   device="cpu", name=name)
    items, _ = encode_items(tokenizer, SENTENCES, objective, seed=2)
    expected, count = _slow_reference(model, items, objective)
    assert result.importance.shape == (2, 4, 4) and result.n_items == 4 and result.n_skipped == 0
    assert np.array_equal(result.n_examples, count.astype(np.int64))
    assert np.allclose(result.importance, expected, rtol=1e-9, atol=0, equal_nan=True)
    one_by_one = importance_from_model(model, tokenizer, SENTENCES, objective=objective, seed=2, batch_size=1,
                                       device="cpu", name=name)
    assert np.allclose(one_by_one.importance, result.importance, rtol=1e-9, atol=0, equal_nan=True)
    if objective == "causal-lm":  # GPT-2 adds no specials: sep and cls are empty (NaN), not zero
        assert result.n_examples[KEY_TYPES.index("sep")] == 0
        assert np.isnan(result.of("sep")).all() and np.isnan(result.of("cls")).all()
    else:
        assert result.n_examples.tolist() == [4, 4, 3, 4]  # the 4th sentence has no "." or ","
        assert np.isfinite(result.importance).all() and (result.importance > 0).all()


def test_run_from_folder_result_and_table(mlm_folder, tmp_path) -> None:
    result = gradient_importance(mlm_folder, SENTENCES + [["x"] * 80], max_items=5, batch_size=2, device="cpu")
    assert isinstance(result, KeyTypeGradients) and result.objective == "masked-lm"
    assert result.n_items == 4 and result.n_skipped == 1  # 82 tokens > the tiny model's 64
    assert result.per_layer().shape == (2, 4) and "80/10/10" in result.choices
    table = result.to_pandas()
    assert list(table.columns) == ["layer", "head", "head_name", "grad_sep", "grad_cls", "grad_punct",
                                   "grad_other"]
    assert table["head_name"].iloc[-1] == "2-4"
    assert equal(load(result.save(tmp_path / "r")), result)
    first_two = gradient_importance(mlm_folder, SENTENCES, max_items=2, device="cpu")
    assert first_two.n_items == 2


def test_refuses_a_checkpoint_without_lm_head(tmp_path) -> None:
    bare = build("bert", tmp_path)  # a bare BertModel, like all-MiniLM-L6-v2
    with pytest.raises(ConfigError, match=r"lacks weights.*cls\.predictions"):
        gradient_importance(bare, SENTENCES, device="cpu")
    # GPT-2's LM head is tied to its input embeddings: a bare GPT2Model checkpoint has it
    assert load_lm(build("gpt2", tmp_path))[3] == "causal-lm"


def test_bad_options(mlm_folder) -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        gradient_importance(mlm_folder, SENTENCES, batch_size=0)
    with pytest.raises(ConfigError, match="max_items"):
        gradient_importance(mlm_folder, SENTENCES, max_items=0)
    with pytest.raises(ConfigError, match="key type"):
        gradient_importance(mlm_folder, SENTENCES[:1], device="cpu").of("SEP")
    with pytest.raises(ValueError, match="list of words"):
        gradient_importance(mlm_folder, ["a sentence as one string"], device="cpu")
