"""Batched leave-one-out (ablations as row blocks, lower layers replayed) against one pass per head and by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.errors import ConfigError
from probes.extraction.interventions import head_means, intervene
from probes.importance.ablations import ablated_metrics, ablation_groups, repeat_batch, skips_lower_layers
from probes.importance.batches import encode_sentences, make_batches
from probes.importance.objectives import LanguageModelObjective, RepresentationObjective
from probes.importance.scores import leave_one_out, sentence_metrics
from tests.importance.cases import SENTENCES, OneHeadObjective, ProjectionObjective, batches_of, tiny_bert
from tests.tiny_models import build

FAMILIES = ("bert", "gpt2", "llama")


def _lm(family: str, root: Path) -> tuple[Any, Any, str]:
    """``(model with its LM head, tokenizer, LM kind)`` of the tiny ``family`` model, eager attention, eval.

    The weights are redrawn larger (normal, std 0.15, seeded) than the checkpoint's 0.02: with those, attention
    is nearly uniform and a head's removal moves the loss by about 1e-6, below float32's rounding of the loss.
    """
    import transformers

    from probes.extraction.loading import load_tokenizer

    folder = build(family, root)
    cls = transformers.AutoModelForMaskedLM if family == "bert" else transformers.AutoModelForCausalLM
    model = cls.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.15)
    return model, load_tokenizer(str(folder)), "masked-lm" if family == "bert" else "causal-lm"


def _prepared(objective: Any, model: Any, tokenizer: Any, budget: int = 40) -> list[Any]:
    encoded, skipped = encode_sentences(tokenizer, SENTENCES)
    assert not skipped
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    batches = make_batches(encoded, pad_id=pad, max_batch_tokens=budget)
    assert len(batches) > 2  # several padded batches
    with torch.no_grad():
        return [objective.prepare(model, b) for b in batches]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, Any], tuple[Any, Any, str]]:
    import copy

    root = tmp_path_factory.mktemp("models")
    out = {}
    for family in FAMILIES:
        model, tok, kind = _lm(family, root)
        out[(family, torch.float32)] = (model, tok, kind)
        out[(family, torch.float64)] = (copy.deepcopy(model).double(), tok, kind)
    return out


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("ablation", ["zero", "mean", "uniform"])
def test_batched_equals_one_at_a_time(family: str, ablation: str, models: dict[Any, Any]) -> None:
    for dtype in (torch.float32, torch.float64):
        model, tok, kind = models[(family, dtype)]
        for objective in (LanguageModelObjective(tok, kind, seed=3), RepresentationObjective()):
            assert skips_lower_layers(objective)
            batches = _prepared(objective, model, tok)
            means = head_means(model, [b.model_inputs() for b in batches]).to(dtype) if ablation == "mean" else None
            base, reference = leave_one_out(model, batches, objective, ablation=ablation, means=means,
                                            method="one-at-a-time")
            assert np.abs(reference - base[:, None, None]).max() > 1e-3  # removing a head changes something
            for max_tokens in (1, 90, None):  # one head a pass; 2 or 3; every head of a layer in one pass
                got_base, got = leave_one_out(model, batches, objective, ablation=ablation, means=means,
                                              max_tokens=max_tokens)
                if dtype == torch.float64:  # the same arithmetic but for more rows per matmul
                    np.testing.assert_allclose(got_base, base, rtol=1e-12, atol=1e-14)
                    np.testing.assert_allclose(got, reference, rtol=1e-12, atol=1e-14)
                else:
                    np.testing.assert_allclose(got_base, base, rtol=1e-5, atol=1e-7)
                    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-7)
            for layers in model.base_model.modules():
                assert "forward" not in layers.__dict__  # the replayed layers run again after


def test_last_layer_head_by_hand(models: dict[Any, Any]) -> None:
    """GPT-2, last layer, zero ablation: the block's output recomputed from its input and its heads' outputs
    with one head's slice zeroed (c_proj is linear), then ln_f, the tied LM head and the next-token loss."""
    model, tok, kind = models[("gpt2", torch.float64)]
    objective = LanguageModelObjective(tok, kind)
    batches = _prepared(objective, model, tok)
    _, ablated = leave_one_out(model, batches, objective)
    block = model.transformer.h[-1]
    d = model.config.n_embd // model.config.n_head
    for batch in batches:
        seen: dict[str, Any] = {}
        handles = [block.register_forward_pre_hook(lambda m, a, kw, seen=seen: seen.update(x=a[0]), with_kwargs=True),
                   block.attn.c_proj.register_forward_pre_hook(lambda m, a, seen=seen: seen.update(z=a[0]))]
        try:
            with torch.no_grad():
                model(**batch.model_inputs(), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        for head in range(model.config.n_head):
            with torch.no_grad():
                z = seen["z"].clone()
                z[..., head * d:(head + 1) * d] = 0
                mid = seen["x"] + block.attn.c_proj(z)  # (B, T, D): the residual after attention
                out = mid + block.mlp(block.ln_2(mid))
                logits = model.lm_head(model.transformer.ln_f(out))  # (B, T, V)
                logp = torch.log_softmax(logits, dim=-1)
            for r, sentence in enumerate(batch.sentences):
                n = sentence.input_ids.shape[0]
                ids = torch.as_tensor(sentence.input_ids)
                expected = -logp[r, torch.arange(n - 1), ids[1:]].mean()  # the first token is not predicted
                assert ablated[sentence.index, -1, head] == pytest.approx(float(expected), rel=1e-12)


def test_planted_head_known_effect_and_no_replay_for_inner_hooks(tmp_path: Path) -> None:
    model, tok = tiny_bert(tmp_path)
    batches = batches_of(tok)
    objective = OneHeadObjective(0, 1)  # reads layer 0's heads: its layers must all run
    assert not skips_lower_layers(objective)
    base, ablated = leave_one_out(model, batches, objective)
    np.testing.assert_array_equal(ablated[:, 0, 1], 1.0)  # 1 / (1 + 0): its output is gone
    others = np.delete(ablated.reshape(len(base), -1), 1, axis=1)
    np.testing.assert_array_equal(others, np.repeat(base[:, None], 7, axis=1))  # nothing else reaches it
    assert (base < 1).all()
    # A projection objective with layers replayed (asked for) and without: the same numbers.
    projection = ProjectionObjective(model.config.hidden_size)
    plain = leave_one_out(model, batches, projection, skip_lower=False)[1]
    replayed = leave_one_out(model, batches, projection, skip_lower=True)[1]
    reference = leave_one_out(model, batches, projection, method="one-at-a-time")[1]
    np.testing.assert_allclose(plain, reference, rtol=1e-12)
    np.testing.assert_allclose(replayed, reference, rtol=1e-12)


def test_many_masks_and_metrics(tmp_path: Path) -> None:
    model, tok = tiny_bert(tmp_path)
    batches = batches_of(tok)
    objective = ProjectionObjective(model.config.hidden_size)
    rng = np.random.default_rng(0)
    masks = rng.random((6, 2, 4)) < 0.4
    masks[0] = False
    got = ablated_metrics(model, batches, objective, masks, max_tokens=100, skip_lower=True)
    assert set(got) == {"loss", "accuracy"} and got["loss"].shape == (6, len(SENTENCES))
    for m, mask in enumerate(masks):
        expected = sentence_metrics(model, batches, objective, pruned=mask)
        np.testing.assert_allclose(got["loss"][m], expected["loss"], rtol=1e-12)
        np.testing.assert_array_equal(got["accuracy"][m], expected["accuracy"])
    with pytest.raises(ConfigError, match=r"n_masks, n_layers, n_heads"):
        ablated_metrics(model, batches, objective, np.zeros((2, 4), dtype=bool))
    with pytest.raises(ConfigError, match="method"):
        leave_one_out(model, batches, objective, method="fast")


def test_groups_and_repeat_by_hand(tmp_path: Path) -> None:
    masks = np.zeros((10, 3, 9), dtype=bool)
    masks[np.arange(9), 1, np.arange(9)] = True  # nine heads of layer 1; the last mask ablates nothing
    # rows x width = 10 tokens, budget 40: 4 ablations a pass -> 3 passes of 3 (balanced), the empty mask alone
    assert ablation_groups(masks, 2, 5, 40) == [(1, [0, 1, 2]), (1, [3, 4, 5]), (1, [6, 7, 8]), (3, [9])]
    assert ablation_groups(masks, 2, 5, 5) == [(1, [i]) for i in range(9)] + [(3, [9])]  # at least one a pass
    model, tok = tiny_bert(tmp_path)
    batch = RepresentationObjective().prepare(model, batches_of(tok)[0])
    twice = repeat_batch(batch, 3)
    n = len(batch.sentences)
    assert twice.sentences == batch.sentences * 3
    for name in ("input_ids", "attention_mask", "word_index"):
        assert torch.equal(getattr(twice, name)[2 * n:], getattr(batch, name))
    assert torch.equal(twice.extras["reference"][n:2 * n], batch.extras["reference"])


def test_per_row_blocks_of_intervene(tmp_path: Path) -> None:
    """``ablate=(K, L, H)`` on a batch repeated K times: block j equals a pass with ablate[j] alone."""
    model, tok = tiny_bert(tmp_path)
    batch = batches_of(tok)[1]
    blocks = np.zeros((3, 2, 4), dtype=bool)
    blocks[0, 0, 2] = blocks[2, 1, 0] = blocks[2, 0, 3] = True  # block 1: nothing ablated
    n = len(batch.sentences)
    for ablation in ("zero", "uniform"):
        with torch.no_grad(), intervene(model, ablate=blocks, ablation=ablation):
            together = model(**repeat_batch(batch, 3).model_inputs()).last_hidden_state
        for j in range(3):
            with torch.no_grad(), intervene(model, ablate=blocks[j], ablation=ablation):
                alone = model(**batch.model_inputs()).last_hidden_state
            torch.testing.assert_close(together[j * n:(j + 1) * n], alone, rtol=1e-12, atol=1e-12)
    with pytest.raises(ConfigError, match="3 equal blocks"), torch.no_grad(), intervene(model, ablate=blocks):
        model(**batch.model_inputs()) if n % 3 else model(input_ids=batch.input_ids[:1])
