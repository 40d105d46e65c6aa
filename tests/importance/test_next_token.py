"""The next-token objective on decoders (GPT-2, Llama with GQA): the loss by hand, its gate gradients, pruning
with it, and ``probes importance`` / ``probes prune --objective lm`` end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.extraction.interventions import head_gates
from probes.extraction.loading import load_tokenizer
from probes.importance.batches import encode_sentences, make_batches
from probes.importance.objectives import LanguageModelObjective
from probes.importance.pruning import pruning_curves
from probes.importance.scores import gate_gradients
from tests.importance.cases import SENTENCES
from tests.tiny_models import build

SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample" / "sample-dev.conllu"


def _causal(family: str, root: Path) -> tuple[Any, Any, Path]:
    """``(float64 causal LM, tokenizer, folder saved with its LM head)`` of the tiny ``family`` decoder."""
    from transformers import AutoModelForCausalLM

    base = build(family, root / "base")
    torch.manual_seed(2)  # Llama's lm_head is not in the base checkpoint: drawn here, then saved
    model = AutoModelForCausalLM.from_pretrained(base, attn_implementation="eager").eval()
    folder = root / f"{family}-lm"
    model.save_pretrained(folder)
    load_tokenizer(str(base)).save_pretrained(folder)
    return model.double(), load_tokenizer(str(folder)), folder


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def decoder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    return _causal(request.param, tmp_path_factory.mktemp(request.param))


def _batches(objective: Any, model: Any, tok: Any, budget: int = 40) -> list[Any]:
    encoded, skipped = encode_sentences(tok, SENTENCES)
    assert not skipped
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    return [objective.prepare(model, b) for b in make_batches(encoded, pad_id=pad, max_batch_tokens=budget)]


def _hand_losses(model: Any, tok: Any, gates: Any = None) -> np.ndarray:
    """``(N,)`` each sentence alone, unpadded: mean of -log p(token t | tokens < t) over t = 1 .. n-1."""
    encoded, _ = encode_sentences(tok, SENTENCES)
    out = []
    for e in encoded:
        ids = torch.as_tensor(e.input_ids)[None]  # (1, n)
        with torch.no_grad():
            if gates is None:
                logits = model(input_ids=ids, use_cache=False).logits[0]
            else:
                with head_gates(model, gates):
                    logits = model(input_ids=ids, use_cache=False).logits[0]
        logp = torch.log_softmax(logits, dim=-1)  # (n, V)
        out.append(float(-logp[torch.arange(ids.shape[1] - 1), ids[0, 1:]].mean()))
    return np.array(out)


def test_next_token_loss_by_hand(decoder: tuple[Any, Any, Path]) -> None:
    model, tok, _ = decoder
    objective = LanguageModelObjective(tok, "causal-lm")
    batches = _batches(objective, model, tok)
    got: dict[int, float] = {}
    with torch.no_grad():
        for b in batches:
            got.update(zip(b.indices.tolist(), objective.losses(model, b).tolist()))
    np.testing.assert_allclose([got[i] for i in sorted(got)], _hand_losses(model, tok), rtol=1e-10)
    assert objective.describe()["n_nothing_to_predict"] == 0


def _hand_gradients(model: Any, tok: Any) -> np.ndarray:
    """``(N, L, H)`` |d loss / d gate| of each sentence alone, unpadded (autograd through head_gates)."""
    encoded, _ = encode_sentences(tok, SENTENCES)
    out = []
    for e in encoded:
        ids = torch.as_tensor(e.input_ids)[None]
        gates = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
        with head_gates(model, gates):
            logp = torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0], dim=-1)
        (grad,) = torch.autograd.grad(-logp[torch.arange(ids.shape[1] - 1), ids[0, 1:]].mean(), gates)
        out.append(grad.abs().numpy())
    return np.stack(out)


def test_next_token_gate_gradients(decoder: tuple[Any, Any, Path]) -> None:
    """Against each sentence's own gradient, unpadded; for GPT-2 (float64 throughout) also finite differences
    (Llama's RMSNorm and softmax run in float32 even in a float64 model: too coarse for them)."""
    model, tok, _ = decoder
    objective = LanguageModelObjective(tok, "causal-lm")
    grads = gate_gradients(model, _batches(objective, model, tok), objective)  # (N, L, H)
    assert grads.shape == (len(SENTENCES), 2, 4) and grads.max() > 0
    np.testing.assert_allclose(grads, _hand_gradients(model, tok), rtol=1e-6, atol=1e-9)
    if model.config.model_type != "gpt2":
        return
    eps = 1e-5
    for layer, head in [(0, 1), (1, 3)]:
        plus, minus = torch.ones(2, 4, dtype=torch.float64), torch.ones(2, 4, dtype=torch.float64)
        plus[layer, head] += eps
        minus[layer, head] -= eps
        fd = (_hand_losses(model, tok, plus) - _hand_losses(model, tok, minus)) / (2 * eps)
        np.testing.assert_allclose(grads[:, layer, head], np.abs(fd), rtol=1e-4, atol=1e-9)


def test_pruning_with_next_token_loss(decoder: tuple[Any, Any, Path]) -> None:
    model, tok, _ = decoder
    objective = LanguageModelObjective(tok, "causal-lm")
    result = pruning_curves(model, _batches(objective, model, tok), objective, random_seeds=(0,), step=0.25,
                            one_per_layer=True, data="tiny")
    assert result.objective == "lm" and result.curves == ("importance", "random:0")
    for c in range(len(result.curves)):
        for s, n in enumerate(result.n_pruned):
            gates = torch.ones(8, dtype=torch.float64)
            gates[result.order[c, :n]] = 0
            expected = _hand_losses(model, tok, gates.reshape(2, 4)).mean()
            assert result.values[c, s, 0] == pytest.approx(expected, rel=1e-9)
    assert result.one_per_layer is not None and np.isfinite(result.one_per_layer.loss_delta).all()


def test_importance_and_prune_commands_with_lm_on_a_decoder(decoder: tuple[Any, Any, Path]) -> None:
    from probes.runs.importance import importance, prune

    _, _, folder = decoder
    run = importance(str(folder), str(SAMPLE), objective="lm", limit=16, n_resamples=20, device="cpu")
    assert run.result.objective == "lm" and run.record.details.importance.objective["kind"] == "causal-lm"
    assert np.isfinite(run.result.loo_effect).all() and (run.result.raw_importance > 0).any()
    assert "T-1 predictions" in run.record.details.importance.objective["rule"]
    curves = prune(str(folder), str(SAMPLE), objective="lm", limit=16, step=0.5, random_seeds=(0,), orders=(),
                   one_per_layer=False, leaderboard_at=None, device="cpu")
    assert curves.curves.objective == "lm" and np.isfinite(curves.curves.values).all()
