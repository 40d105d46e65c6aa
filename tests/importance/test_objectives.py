"""Batches and objectives of head importance, against hand computations on tiny models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.corpora.types import Sentence
from probes.errors import ConfigError, InputError, ModelOutputError
from probes.extraction.gradients import _batch_tensors, encode_items, lm_losses
from probes.extraction.interventions import head_gates
from probes.extraction.loading import load_tokenizer
from probes.importance.batches import encode_sentences, make_batches
from probes.importance.objectives import (
    CallableObjective,
    LanguageModelObjective,
    Objective,
    ProbeObjective,
    RepresentationObjective,
    probe_label,
    word_states,
)
from tests.tiny_models import build, tiny_families

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "cat", "sat", "on", "mat", "and",
         "barked", "at", "it", "unbelievable", "result", "a", "she"]
#: The planted probe task: each word's relation is determined by the word (subtypes exercise the ':' rule).
PLANTED = {"the": "det", "a": "det:predet", "fox": "nsubj", "dog": "nsubj", "cat": "obj", "mat": "obj",
           "quick": "amod", "lazy": "amod", "sat": "root", "jumps": "root"}


def _sentences(n: int, seed: int, vocab: dict[str, str] = PLANTED) -> list[Sentence]:
    rng = np.random.default_rng(seed)
    words = sorted(vocab)
    out = []
    for i in range(n):
        chosen = tuple(words[j] for j in rng.integers(len(words), size=int(rng.integers(2, 9))))
        out.append(Sentence(f"s{seed}-{i}", chosen, tuple(0 for _ in chosen), tuple(vocab[w] for w in chosen)))
    return out


def _model(folder: Path, cls: str = "AutoModel", dtype: Any = torch.float64) -> Any:
    import transformers

    return getattr(transformers, cls).from_pretrained(folder, attn_implementation="eager", dtype=dtype).eval()


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    folder = build("bert", tmp_path_factory.mktemp("models"))
    return _model(folder), load_tokenizer(str(folder)), folder


def _prepared(objective: Any, model: Any, tokenizer: Any, sentences: Any, budget: int = 64) -> list[Any]:
    encoded, skipped = encode_sentences(tokenizer, sentences)
    assert not skipped
    batches = make_batches(encoded, pad_id=tokenizer.pad_token_id, max_batch_tokens=budget)
    return [objective.prepare(model, b) for b in batches]


def _per_sentence(batches: Any, fn: Any) -> np.ndarray:
    """``(N,)`` ``fn(batch)`` values put back in sentence index order."""
    out: dict[int, float] = {}
    for b in batches:
        out.update(zip(b.indices.tolist(), np.asarray(fn(b), dtype=np.float64).tolist()))
    return np.array([out[i] for i in sorted(out)])


# ----------------------------------------------------------------------------- batches
def test_encode_maps_tokens_to_words_and_names_skipped(bert: tuple[Any, Any, Path]) -> None:
    _, tok, _ = bert
    sents = [Sentence("a", ("unbelievable", "results"), (0, 1), ("root", "nmod:poss")), Sentence("empty", (), (), ()),
             ["the", "dog"], [], ["the"] * 40]
    encoded, skipped = encode_sentences(tok, sents, max_tokens=20)
    assert skipped == ["empty", "#3", "#4"]  # no words; no words (unnamed); too long (42 tokens > 20)
    first, second = encoded
    assert (first.index, first.sent_id, first.relations) == (0, "a", ("root", "nmod:poss"))  # full labels kept
    assert tok.convert_ids_to_tokens(first.input_ids.tolist()) == \
        ["[CLS]", "un", "##believ", "##able", "re", "##sult", "##s", "[SEP]"]
    assert first.word_index.tolist() == [-1, 0, 0, 0, 1, 1, 1, -1]
    assert (second.index, second.sent_id, second.relations, second.word_index.tolist()) == (2, "", (), [-1, 0, 1, -1])
    assert probe_label("nmod:poss") == "nmod"
    with pytest.raises(InputError, match="Sentence or a list of words"):
        encode_sentences(tok, ["a plain string"])


def test_batches_respect_the_budget_and_are_deterministic(bert: tuple[Any, Any, Path]) -> None:
    _, tok, _ = bert
    encoded, _ = encode_sentences(tok, _sentences(30, seed=1))
    batches = make_batches(encoded, pad_id=0, max_batch_tokens=40, max_batch_size=4)
    assert sorted(i for b in batches for i in b.indices) == list(range(30))
    order = [(s.input_ids.shape[0], s.index) for b in batches for s in b.sentences]
    assert order == sorted(order)  # by length, then index
    for b in batches:
        B, T = b.input_ids.shape
        assert B <= 4 and B * T <= 40 and T == max(s.input_ids.shape[0] for s in b.sentences)
        for row, s in enumerate(b.sentences):
            n = s.input_ids.shape[0]
            assert b.input_ids[row, :n].tolist() == s.input_ids.tolist() and (b.input_ids[row, n:] == 0).all()
            assert b.attention_mask[row].tolist() == [1] * n + [0] * (T - n)
            assert b.word_index[row].tolist() == s.word_index.tolist() + [-1] * (T - n)
        assert b.model_inputs()["input_ids"] is b.input_ids
    # Each batch is full: the next sentence would break the budget or the size limit.
    for b, nxt in zip(batches, batches[1:]):
        width = nxt.sentences[0].input_ids.shape[0]
        assert (len(b.sentences) + 1) * width > 40 or len(b.sentences) == 4
    shuffled = make_batches(list(reversed(encoded)), pad_id=0, max_batch_tokens=40, max_batch_size=4)
    assert [b.indices.tolist() for b in shuffled] == [b.indices.tolist() for b in batches]
    alone = make_batches(encoded[:3], pad_id=0, max_batch_tokens=1)  # over budget: one sentence per batch
    assert [len(b.sentences) for b in alone] == [1, 1, 1]
    with pytest.raises(ConfigError, match="max_batch_tokens"):
        make_batches(encoded, pad_id=0, max_batch_tokens=0)


# ----------------------------------------------------------------------------- representation
def _pooled_alone(model: Any, s: Any) -> np.ndarray:
    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(s.input_ids)[None]).last_hidden_state[0]  # (T, D)
    return hidden.mean(dim=0).numpy()


def test_representation_loss_is_one_minus_cosine(bert: tuple[Any, Any, Path]) -> None:
    model, tok, _ = bert
    obj = RepresentationObjective()
    assert isinstance(obj, Objective)
    batches = _prepared(obj, model, tok, _sentences(12, seed=2), budget=40)
    assert any(bool((b.attention_mask == 0).any()) for b in batches)  # padding is exercised
    unmodified = _per_sentence(batches, lambda b: obj.evaluate(model, b)["loss"])
    np.testing.assert_allclose(unmodified, 0, atol=1e-12)
    gates = torch.ones(2, 4, dtype=torch.float64)
    gates[0, 1], gates[1, 3] = 0.0, 0.3
    with head_gates(model, gates):
        perturbed = _per_sentence(batches, lambda b: obj.losses(model, b).detach())
        moved = {s.index: _pooled_alone(model, s) for b in batches for s in b.sentences}
    ref = {s.index: _pooled_alone(model, s) for b in batches for s in b.sentences}
    hand = np.array([1 - moved[i] @ ref[i] / np.linalg.norm(moved[i]) / np.linalg.norm(ref[i]) for i in sorted(ref)])
    assert hand.min() > 1e-6  # the perturbation matters
    np.testing.assert_allclose(perturbed, hand, rtol=1e-9, atol=1e-12)
    with pytest.raises(ConfigError, match="prepared batch"):
        obj.losses(model, make_batches(encode_sentences(tok, [["the"]])[0], pad_id=0)[0])


# ----------------------------------------------------------------------------- probe
def _word_states_alone(model: Any, s: Any) -> np.ndarray:
    """``(W, D)`` each word's mean last hidden state over its tokens, sentence run alone."""
    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(s.input_ids)[None]).last_hidden_state[0].numpy()
    return np.stack([hidden[s.word_index == w].mean(axis=0) for w in range(len(s.words))])


def test_probe_fits_a_planted_task_and_its_loss_is_sklearns(bert: tuple[Any, Any, Path]) -> None:
    model, tok, _ = bert
    fit_batches = make_batches(encode_sentences(tok, _sentences(40, seed=3))[0], pad_id=0, max_batch_tokens=64)
    obj = ProbeObjective().fit(model, fit_batches)
    assert set(obj.classes) == {"det", "nsubj", "obj", "amod", "root"}  # 'det:predet' -> 'det'
    assert obj.linear.weight.dtype == torch.float64 and not obj.linear.weight.requires_grad
    held_out = _sentences(15, seed=4) + [Sentence("new", ("the", "dog", "sat"), (2, 3, 0), ("det", "nsubj", "punct")),
                                         Sentence("none", ("on", "it"), (0, 1), ("case", "expl"))]
    planted = {**PLANTED, "on": "case", "it": "expl"}
    batches = _prepared(obj, model, tok, held_out, budget=48)
    accuracy = _per_sentence(batches, lambda b: obj.evaluate(model, b)["accuracy"])
    assert np.isnan(accuracy[-1]) and np.nanmean(accuracy) > 0.9
    losses = _per_sentence(batches, lambda b: obj.losses(model, b).detach())
    for s in held_out:
        enc = encode_sentences(tok, [s])[0][0]
        known = [w for w, r in enumerate(s.relations) if probe_label(r) in obj.classes]
        if not known:
            assert losses[held_out.index(s)] == 0
            continue
        log_p = obj.estimator.predict_log_proba(_word_states_alone(model, enc)[known])  # (n, K)
        cols = [list(obj.estimator.classes_).index(probe_label(planted[s.words[w]])) for w in known]
        np.testing.assert_allclose(losses[held_out.index(s)], -log_p[np.arange(len(known)), cols].mean(), rtol=1e-6)
    info = obj.describe()
    assert info["unseen_labels"] == {"case": 1, "expl": 1, "punct": 1} and info["n_sentences_without_labels"] == 1
    assert info["n_fit_words"] == sum(len(s.words) for s in _sentences(40, seed=3))


def test_probe_needs_relations(bert: tuple[Any, Any, Path]) -> None:
    model, tok, _ = bert
    batches = make_batches(encode_sentences(tok, [["the", "dog"]])[0], pad_id=0)
    with pytest.raises(ConfigError, match="at least 2 relations"):
        ProbeObjective().fit(model, batches)
    with pytest.raises(ConfigError, match="fitted probe"):
        ProbeObjective().prepare(model, batches[0])


# ----------------------------------------------------------------------------- language model
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_lm_masks_follow_the_sentence_index_and_the_loss_is_lm_losses(family: str, tmp_path: Path) -> None:
    folder = build(family, tmp_path)
    kind = "masked-lm" if family == "bert" else "causal-lm"
    model = _model(folder, "AutoModelForMaskedLM" if family == "bert" else "AutoModelForCausalLM", torch.float32)
    tok = load_tokenizer(str(folder))
    sents = _sentences(14, seed=5)
    obj = LanguageModelObjective(tok, kind, seed=7)
    by_batching = []
    for budget in (30, 200):
        batches = _prepared(obj, model, tok, sents, budget=budget)
        if kind == "masked-lm":
            ids = {s.index: b.extras["input_ids"][r, :s.input_ids.shape[0]].tolist()
                   for b in batches for r, s in enumerate(b.sentences)}
            by_batching.append([ids[i] for i in sorted(ids)])
        with torch.no_grad():
            by_batching.append(_per_sentence(batches, lambda b: obj.losses(model, b)))
    items, skipped = encode_items(tok, sents, kind, seed=7)
    assert skipped == 0
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    with torch.no_grad():
        alone = np.array([float(lm_losses(model, *_batch_tensors([e], pad, "cpu"), kind)[0][0]) for e in items])
    if kind == "masked-lm":
        assert by_batching[0] == by_batching[2] == [e.input_ids.tolist() for e in items]  # the same masks
        assert any(e.input_ids.tolist() != s.input_ids.tolist()
                   for e, s in zip(items, encode_sentences(tok, sents)[0]))
    np.testing.assert_allclose(by_batching[-1], alone, rtol=1e-5)
    np.testing.assert_allclose(by_batching[-3] if kind == "masked-lm" else by_batching[0], alone, rtol=1e-5)
    assert obj.describe()["kind"] == kind
    with pytest.raises(ConfigError, match="masked-lm, causal-lm"):
        LanguageModelObjective(tok, "lm")


# ----------------------------------------------------------------------------- callable and gradients
def _sum_of_squares(model: Any, batch: Any) -> Any:
    """Squares of the first 5 hidden units summed over real tokens (all D units: a constant after LayerNorm)."""
    hidden = model(**batch.model_inputs()).last_hidden_state  # (B, T, D)
    return (hidden[..., :5].pow(2).sum(-1) * batch.attention_mask).sum(-1)


def test_callable_objective_checks_its_output(bert: tuple[Any, Any, Path]) -> None:
    model, tok, _ = bert
    batch = make_batches(encode_sentences(tok, [["the", "dog"], ["a", "cat", "sat"]])[0], pad_id=0)[0]
    obj = CallableObjective(_sum_of_squares, "squares")
    assert obj.prepare(model, batch) is batch and obj.name == "squares"
    with torch.no_grad():
        np.testing.assert_allclose(obj.evaluate(model, batch)["loss"], _sum_of_squares(model, batch).numpy())
    with pytest.raises(ModelOutputError, match=r"shape \(2,\)"):
        CallableObjective(lambda m, b: torch.zeros(3)).losses(model, batch)
    with pytest.raises(ConfigError, match="function"):
        CallableObjective("not callable")  # type: ignore[arg-type]


def _loss_at(obj: Any, model: Any, batches: Any, gates: torch.Tensor) -> torch.Tensor:
    with head_gates(model, gates):
        return torch.cat([obj.losses(model, b) for b in batches]).sum()


@pytest.mark.parametrize("which", ["representation", "probe", "lm", "callable"])
def test_every_objective_has_gate_gradients(which: str, bert: tuple[Any, Any, Path]) -> None:
    model, tok, folder = bert
    sents = _sentences(6, seed=6)
    if which == "lm":
        model = _model(folder, "AutoModelForMaskedLM")
        obj: Any = LanguageModelObjective(tok, "masked-lm")
    elif which == "probe":
        obj = ProbeObjective().fit(model, make_batches(encode_sentences(tok, _sentences(20, 8))[0], pad_id=0))
    else:
        obj = RepresentationObjective() if which == "representation" else CallableObjective(_sum_of_squares)
    batches = _prepared(obj, model, tok, sents, budget=40)
    point = torch.full((2, 4), 0.6, dtype=torch.float64)  # away from gates 1: the representation loss is > 0
    gates = point.clone().requires_grad_(True)
    _loss_at(obj, model, batches, gates).backward()
    grad = gates.grad
    assert grad is not None and grad.abs().max() > 0
    eps = 1e-5
    for layer, head in ((0, 2), (1, 1)):
        up, down = point.clone(), point.clone()
        up[layer, head] += eps
        down[layer, head] -= eps
        with torch.no_grad():
            fd = (_loss_at(obj, model, batches, up) - _loss_at(obj, model, batches, down)) / (2 * eps)
        np.testing.assert_allclose(float(grad[layer, head]), float(fd), rtol=1e-4, atol=1e-9)


def test_representation_gradient_vanishes_at_the_unmodified_model(bert: tuple[Any, Any, Path]) -> None:
    """The loss has its minimum at gates 1: gradient importance on it is 0 there (stated in describe())."""
    model, tok, _ = bert
    obj = RepresentationObjective()
    batches = _prepared(obj, model, tok, _sentences(6, seed=9), budget=40)
    gates = torch.ones(2, 4, dtype=torch.float64, requires_grad=True)
    _loss_at(obj, model, batches, gates).backward()
    assert gates.grad.abs().max() < 1e-9
    assert "gradient is 0" in obj.describe()["note"]


@pytest.mark.parametrize("family", tiny_families())
def test_word_states_and_representation_on_every_family(family: str, tmp_path: Path) -> None:
    """Word states equal a per-sentence hand mean over each word's tokens (with padding in the batch), and the
    representation loss is 0 unmodified and > 0 with a layer's heads gated off, for every tokenizer and family."""
    folder = build(family, tmp_path)
    model, tok = _model(folder), load_tokenizer(str(folder))
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    sents = [["unbelievable", "results", "at", "the", "mat"], ["the", "dog"], ["she", "barked", "at", "it"]]
    batch = make_batches(encode_sentences(tok, sents)[0], pad_id=pad)[0]
    assert (batch.attention_mask == 0).any()
    with torch.no_grad():
        states, has = word_states(model, batch)
    # transformers computes rotary angles in float32 even in a float64 model, and that float32 product rounds
    # by the batch's shape on some CPUs: a rotary model agrees to float32 precision, any other to 1e-9.
    rotary = any("rotary" in name for name, _ in model.named_modules())
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if rotary else {"atol": 1e-9}
    for row, s in enumerate(batch.sentences):
        assert has[row].tolist() == [w < len(s.words) for w in range(states.shape[1])]
        np.testing.assert_allclose(states[row, :len(s.words)].numpy(), _word_states_alone(model, s), **tolerance)
    obj = RepresentationObjective()
    batch = obj.prepare(model, batch)
    with torch.no_grad():
        np.testing.assert_allclose(obj.losses(model, batch).numpy(), 0, atol=1e-12)
        gates = torch.ones(2, 4, dtype=torch.float64)
        gates[0] = 0
        with head_gates(model, gates):
            assert (obj.losses(model, batch) > 1e-9).all()
