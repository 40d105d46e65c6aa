"""Tests of function from ablations (probes.importance.function) against one hand-made forward pass per ablation.

The reference here shares nothing with the module but ``head_means`` (the mean the brief names): it loads the
tiny models itself, writes its own forward pre-hook on the output projection replacing the ablated heads' slices,
and computes each token's cross-entropy from the logits by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.errors import ConfigError
from probes.extraction.families import head_sites
from probes.extraction.interventions import head_means
from probes.importance.function import FunctionTests, derangement, function_tests, head_pairs
from probes.results import equal, load
from tests.tiny_models import build

N_SEQ, WIDTH = 6, 12


def _lm(family: str, root: Path) -> tuple[Any, int | None]:
    """``(float64 LM-headed tiny model, mask token id)``, weights redrawn larger (std 0.15, seeded) so that a
    head's removal moves the loss visibly (tests/importance/test_batched_loo.py does the same)."""
    import transformers

    from probes.extraction.loading import load_tokenizer

    folder = build(family, root)
    cls = transformers.AutoModelForMaskedLM if family == "bert" else transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    model = cls.from_pretrained(folder, attn_implementation="eager", dtype=torch.float64).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float64) * 0.15)
    return model, load_tokenizer(str(folder)).mask_token_id


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, int | None]]:
    root = tmp_path_factory.mktemp("function")
    return {family: _lm(family, root / family) for family in ("gpt2", "bert")}


def _tokens(model: Any, family: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(ids (N, T), scored (N, T))``: random ids (no specials), about half the positions scored (never 0)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, model.config.vocab_size, size=(N_SEQ, WIDTH))
    scored = rng.random((N_SEQ, WIDTH)) < (0.3 if family == "bert" else 0.6)
    scored[:, 0] = False
    scored[:, 1] = True
    return ids, scored


def _slow(model: Any, ids: np.ndarray, scored: np.ndarray, heads: list[tuple[int, int]], mask_id: int | None,
          replace: Any) -> np.ndarray:
    """``(n_tokens,)`` loss at the scored tokens, one whole-batch pass with ``heads`` [(layer, head)] replaced by
    ``replace(layer, head, output (N, T, d))`` through a pre-hook on the output projection (none: unmodified)."""
    sites = head_sites(model)
    d = sites[0].head_dim
    x = torch.from_numpy(ids)
    inputs = x.masked_fill(torch.from_numpy(scored), mask_id) if mask_id is not None else x

    def hook_for(layer: int, head: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            hidden = args[0].clone()
            hidden[..., head * d:(head + 1) * d] = replace(layer, head, args[0][..., head * d:(head + 1) * d])
            return (hidden,)
        return hook

    handles = [sites[layer].module.register_forward_pre_hook(hook_for(layer, head)) for layer, head in heads]
    try:
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=inputs).logits, dim=-1).numpy()  # (N, T, V)
    finally:
        for handle in handles:
            handle.remove()
    n, t = ids.shape
    if mask_id is None:  # next token: logits at t - 1
        loss = np.zeros((n, t))
        loss[:, 1:] = -np.take_along_axis(logp[:, :-1], ids[:, 1:, None], axis=2)[..., 0]
    else:
        loss = -np.take_along_axis(logp, ids[:, :, None], axis=2)[..., 0]
    return loss[scored]


def _head_outputs(model: Any, ids: np.ndarray, mask_id: int | None, scored: np.ndarray) -> list[torch.Tensor]:
    """Per layer ``(N, T, H * d)`` the unmodified output projection inputs (the resample donors by hand)."""
    sites = head_sites(model)
    kept: list[torch.Tensor] = []
    handles = [s.module.register_forward_pre_hook(lambda m, a: kept.append(a[0].clone())) for s in sites]
    x = torch.from_numpy(ids)
    try:
        with torch.no_grad():
            model(input_ids=x.masked_fill(torch.from_numpy(scored), mask_id) if mask_id is not None else x)
    finally:
        for h in handles:
            h.remove()
    return kept


def _replacer(model: Any, ablation: str, ids: np.ndarray, scored: np.ndarray, mask_id: int | None,
              donors: np.ndarray) -> Any:
    d = head_sites(model)[0].head_dim
    if ablation == "mean":
        x = torch.from_numpy(ids)
        inputs = x.masked_fill(torch.from_numpy(scored), mask_id) if mask_id is not None else x
        means = head_means(model, [{"input_ids": inputs, "attention_mask": torch.ones_like(inputs)}])
        return lambda layer, head, out: means[layer, head].to(out.dtype).expand_as(out)
    outputs = _head_outputs(model, ids, mask_id, scored)
    return lambda layer, head, out: outputs[layer][torch.from_numpy(donors)][..., head * d:(head + 1) * d]


@pytest.mark.parametrize("family", ["gpt2", "bert"])
@pytest.mark.parametrize("ablation", ["mean", "resample"])
def test_single_and_pair_effects_equal_one_pass_per_ablation(family: str, ablation: str, models: Any) -> None:
    model, mask_id = models[family]
    ids, scored = _tokens(model, family)
    hand_mask = mask_id if family == "bert" else None
    got = function_tests(model, ids, scored, ablation=ablation, pairs="all", seed=3, batch_rows=4, max_tokens=50,
                         mask_token_id=hand_mask)
    replace = _replacer(model, ablation, ids, scored, hand_mask, got.donors)
    base = _slow(model, ids, scored, [], hand_mask, replace)
    np.testing.assert_allclose(got.token_loss, base, rtol=0, atol=1e-10)
    assert got.n_tokens == int(scored.sum()) and got.damage.shape == (2, 4, got.n_tokens)
    for layer in range(2):
        for head in range(4):
            want = _slow(model, ids, scored, [(layer, head)], hand_mask, replace) - base
            np.testing.assert_allclose(got.damage[layer, head], want, rtol=0, atol=1e-9)
    assert np.abs(got.damage).max() > 1e-2  # ablating a head changes the loss: the comparison is not of zeros
    assert got.pairs.tolist() == [list(p) for p in head_pairs(2, 4, "all")]
    for row in (0, 13, len(got.pairs) - 1):  # within layer 1, across layers, within layer 2
        i, j = got.pairs[row]
        want = _slow(model, ids, scored, [divmod(int(i), 4), divmod(int(j), 4)], hand_mask, replace) - base
        np.testing.assert_allclose(got.pair_damage[row], want, rtol=0, atol=1e-9)
    assert not np.allclose(got.pair_damage[13], got.damage.reshape(8, -1)[got.pairs[13]].sum(axis=0))


def test_within_layer_pairs_by_default_and_the_derived_numbers(models: Any) -> None:
    model, _ = models["gpt2"]
    ids, scored = _tokens(model, "gpt2")
    got = function_tests(model, ids, scored)
    assert got.pair_scope == "layer" and got.ablation == "mean" and (got.donors == -1).all()
    assert got.pairs.tolist() == [[i, j] for i, j in head_pairs(2, 4, "all") if i // 4 == j // 4]
    assert len(got.pairs) == 12
    inter = got.interactions()
    single = got.damage.mean(axis=2).reshape(-1)
    np.testing.assert_allclose(inter.interaction, got.pair_damage.mean(axis=1) - single[got.pairs].sum(axis=1))
    np.testing.assert_allclose(got.correlation(), np.corrcoef(got.damage.reshape(8, -1)), atol=1e-12)
    table = got.to_pandas()
    assert list(table["kind"]) == ["single"] * 8 + ["pair"] * 12
    assert table["head_name"].iloc[0] == "1-1" and table["head_name"].iloc[7] == "2-4"
    pair = table.iloc[8]
    assert (pair["head_name"], pair["partner"]) == ("1-1", "1-2")
    assert pair["interaction"] == pytest.approx(inter.interaction[0])
    assert list(got.correlation_table().columns)[:2] == ["1-1", "1-2"]
    assert "FunctionTests" in repr(got) and len(repr(got).splitlines()) < 30


def test_mean_ablation_of_a_head_whose_output_is_its_mean_changes_nothing(models: Any) -> None:
    """Planted: head 1-3's values are a constant (value weights 0, bias exact in float32), so its output at every
    token is that constant: its mean. Mean ablation (and resample) of it changes nothing; zeroing it does."""
    import copy

    model = copy.deepcopy(models["gpt2"][0])
    d, hidden = 8, 32
    columns = slice(2 * hidden + 2 * d, 2 * hidden + 3 * d)  # c_attn's value columns of head 3 (index 2)
    with torch.no_grad():
        attn = model.transformer.h[0].attn.c_attn
        attn.weight[:, columns] = 0
        attn.bias[columns] = torch.tensor([0.5, -0.25, 1.0, -1.5, 0.75, 2.0, -0.5, 0.125], dtype=torch.float64)
    ids, scored = _tokens(model, "gpt2")
    for ablation in ("mean", "resample"):
        got = function_tests(model, ids, scored, ablation=ablation)
        assert np.abs(got.damage[0, 2]).max() < 1e-9, ablation
        assert np.abs(got.damage).max() > 1e-2  # the other heads matter
        pairs = got.pairs.tolist()
        for partner in (0, 1, 3):  # a pair with the planted head is the partner alone
            row = pairs.index(sorted([2, partner]))
            np.testing.assert_allclose(got.pair_damage[row], got.damage[0, partner], atol=1e-9)
    zeroed = _slow(model, ids, scored, [(0, 2)], None, lambda layer, head, out: torch.zeros_like(out))
    assert np.abs(zeroed - got.token_loss).max() > 1e-2  # the head's constant output does matter


def test_resample_is_deterministic_for_a_seed(models: Any) -> None:
    model, mask_id = models["bert"]
    ids, scored = _tokens(model, "bert")
    first = function_tests(model, ids, scored, ablation="resample", seed=7, mask_token_id=mask_id)
    again = function_tests(model, ids, scored, ablation="resample", seed=7, mask_token_id=mask_id, batch_rows=5)
    other = function_tests(model, ids, scored, ablation="resample", seed=8, mask_token_id=mask_id)
    assert equal(first.donors, again.donors) and np.allclose(first.damage, again.damage, rtol=0, atol=1e-10)
    assert not (first.donors == np.arange(N_SEQ)).any()
    assert sorted(first.donors.tolist()) == list(range(N_SEQ))
    assert not equal(first.donors, other.donors) and not np.allclose(first.damage, other.damage)
    assert equal(derangement(N_SEQ, 7), first.donors) and first.seed == 7


def test_a_model_folder_is_loaded_with_its_head(models: Any, tmp_path: Path) -> None:
    from probes.extraction.loading import load_tokenizer

    model, _ = models["gpt2"]
    folder = tmp_path / "lm"
    copy_as_float(model).save_pretrained(folder)
    load_tokenizer(str(build("gpt2", tmp_path / "tok"))).save_pretrained(folder)
    ids, scored = _tokens(model, "gpt2")
    from_folder = function_tests(folder, ids, scored, ablation="resample", seed=1)
    from_model = function_tests(copy_as_float(model), ids, scored, ablation="resample", seed=1)
    assert from_folder.objective == "causal-lm" and from_folder.model == str(folder)
    np.testing.assert_allclose(from_folder.damage, from_model.damage, rtol=0, atol=1e-5)


def copy_as_float(model: Any) -> Any:
    import copy

    return copy.deepcopy(model).float()


def test_round_trip(models: Any, tmp_path: Path) -> None:
    model, _ = models["gpt2"]
    ids, scored = _tokens(model, "gpt2")
    got = function_tests(model, ids, scored, ablation="resample", seed=2)
    assert equal(load(got.save(tmp_path / "saved")), got)
    assert equal(FunctionTests.load(tmp_path / "saved"), got)


@pytest.mark.parametrize("change, message", [
    (lambda ids, s: (ids, s.astype(int)), "scored: expected a bool mask"),
    (lambda ids, s: (ids[:, :-1], s), "scored: expected a bool mask"),
    (lambda ids, s: (ids, np.ones_like(s)), "position 0"),
    (lambda ids, s: (ids, np.zeros_like(s)), "at least one scored token"),
    (lambda ids, s: (ids + 10_000, s), "token ids in 0.."),
])
def test_bad_tokens_are_config_errors(change: Any, message: str, models: Any) -> None:
    model, _ = models["gpt2"]
    ids, scored = change(*_tokens(model, "gpt2"))
    with pytest.raises(ConfigError, match=message):
        function_tests(model, ids, scored)


def test_bad_options_are_config_errors(models: Any) -> None:
    model, _ = models["gpt2"]
    ids, scored = _tokens(model, "gpt2")
    with pytest.raises(ConfigError, match="ablation: expected one of mean, resample"):
        function_tests(model, ids, scored, ablation="zero")
    with pytest.raises(ConfigError, match="pairs: expected one of layer, all"):
        function_tests(model, ids, scored, pairs="some")
    with pytest.raises(ConfigError, match="at least 2 sequences"):
        function_tests(model, ids[:1], scored[:1], ablation="resample")


def function_result() -> FunctionTests:
    """A hand-built instance (tests/test_results.py's round-trip case)."""
    rng = np.random.default_rng(0)
    pairs = np.array(head_pairs(2, 2, "layer"), dtype=np.int64)
    return FunctionTests(layers=(0, 1), heads=(0, 1), model="tiny", objective="causal-lm", ablation="resample",
                         seed=3, pair_scope="layer", n_sequences=3, n_tokens=5, donors=np.array([2, 0, 1], dtype=np.int64),
                         token_loss=rng.random(5), damage=rng.random((2, 2, 5)), pairs=pairs,
                         pair_damage=rng.random((len(pairs), 5)))
