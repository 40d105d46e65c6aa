"""The literal ensemble (issue 39, point 3): members sized to the one model's parameter count, their averaged
prediction, and the ensemble's tests of function built from its members'.

References are written here by hand: the mean of the members' softmax probabilities from their logits, parameter
counts from built models (``numel``), and every single and pair ablation of the ensemble by its own forward pre-hook
on each member's attention output projection (the head's slice replaced by its mean over the batch), averaged with
the other members' unablated probabilities.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from probes.errors import ConfigError
from probes.importance.ensemble_function import ensemble_function_tests
from probes.importance.function import FunctionTests, function_tests, head_pairs
from probes.training.config import TrainConfig
from probes.training.ensemble import (
    config_vocab,
    ensemble_log_probs,
    ensemble_params,
    ensemble_token_loss,
    member_config,
    member_configs,
    member_seed,
)

torch = pytest.importorskip("torch")

#: The one model: 2 attention-only gpt2 layers of 4 heads, hidden 16, the induction task over 8 tokens.
ONE = TrainConfig(arch="gpt2", layers=2, heads=4, hidden=16, attention_only=True, task="induction", task_vocab=8,
                  seq_len=16, period_min=2, period_max=4, seed=3, data_seed=5)
N_SEQ, WIDTH = 6, 12


def _members(config: TrainConfig, count: int, std: float = 0.3, **change: Any) -> list[Any]:
    """``count`` float64 members of ``config`` built by the training stage, their trainable matrices redrawn (std
    ``std``, seeded per member) so that they predict confidently and differently; in eval mode."""
    from probes.training.models import build_model
    from probes.training.task_data import task_tokenizer

    models = []
    for m, member in enumerate(member_configs(config, count)):
        model = build_model(dataclasses.replace(member, **change), task_tokenizer(member)).double()
        generator = torch.Generator().manual_seed(100 + m)
        with torch.no_grad():
            for param in model.parameters():
                if param.dim() == 2 and param.requires_grad:
                    param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float64) * std)
        models.append(model.eval())
    return models


def _tokens(vocab: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(ids (N, T), scored (N, T))``: random ids, about 60% of the positions scored (never 0, always 1)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(N_SEQ, WIDTH))
    scored = rng.random((N_SEQ, WIDTH)) < 0.6
    scored[:, 0], scored[:, 1] = False, True
    return ids, scored


def _probs(model: Any, ids: np.ndarray) -> np.ndarray:
    """``(N, T, V)`` softmax of one model's logits, by hand."""
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(ids), use_cache=False).logits.double()
    return torch.softmax(logits, dim=-1).numpy()


def _at_targets(probs: np.ndarray, ids: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """``(n_tokens,)`` the probability of each scored token given those before it, sequence by sequence."""
    return np.array([probs[s, t - 1, ids[s, t]] for s in range(ids.shape[0]) for t in range(ids.shape[1])
                     if scored[s, t]])


# ----------------------------------------------------------------------------- the averaged prediction
def test_prediction_is_the_mean_of_the_members_probabilities() -> None:
    members = _members(ONE, 4, std=0.5, attention_dropout=0.4)
    members[1].train()  # dropout on: the ensemble runs it in eval mode and gives its mode back
    ids, scored = _tokens(config_vocab(ONE))
    log_probs = ensemble_log_probs(members, torch.from_numpy(ids))
    assert members[1].training and not members[0].training
    for model in members:
        model.eval()
    by_hand = np.mean([_probs(model, ids) for model in members], axis=0)
    assert log_probs.shape == by_hand.shape == (N_SEQ, WIDTH, config_vocab(ONE))
    np.testing.assert_allclose(log_probs.exp().numpy(), by_hand, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ensemble_log_probs(members, ids).numpy(), log_probs.numpy(), rtol=0, atol=1e-12)
    # the members disagree enough that a mean of log-probabilities would be told apart
    geometric = np.exp(np.mean([np.log(_probs(model, ids)) for model in members], axis=0))
    geometric /= geometric.sum(axis=-1, keepdims=True)
    assert np.abs(geometric - by_hand).max() > 1e-2

    loss = ensemble_token_loss(members, ids, scored)
    np.testing.assert_allclose(loss, -np.log(_at_targets(by_hand, ids, scored)), rtol=0, atol=1e-6)
    assert loss.shape == (int(scored.sum()),)
    # one member: the ensemble's loss is the model's own cross-entropy
    alone = ensemble_token_loss(members[:1], ids, scored)
    np.testing.assert_allclose(alone, -np.log(_at_targets(_probs(members[0], ids), ids, scored)), atol=1e-9)


def test_token_loss_refuses_bad_masks() -> None:
    members = _members(ONE, 2)
    ids, scored = _tokens(config_vocab(ONE))
    with pytest.raises(ConfigError, match="position 0"):
        ensemble_token_loss(members, ids, np.ones_like(scored))
    with pytest.raises(ConfigError, match="scored"):
        ensemble_token_loss(members, ids, scored[:, 1:])
    with pytest.raises(ConfigError, match="ensemble"):
        ensemble_log_probs([], ids)


# ----------------------------------------------------------------------------- sizing the members
def _count(config: TrainConfig, vocab: int) -> int:
    return config.family.parameters(config.sizes(vocab))


CONFIGS = {
    "gpt2-task": ONE,
    "gpt2-text": TrainConfig(arch="gpt2", layers=3, heads=8, hidden=64, treebank=("sample:dev",), tokenizer="train:300"),
    "llama-gqa": TrainConfig(arch="llama", layers=2, heads=8, hidden=64, kv_heads=4, treebank=("sample:dev",),
                             tokenizer="train:300", seed=7),
    "bert-head-dim": TrainConfig(arch="bert", layers=2, heads=4, hidden=48, head_dim=12, treebank=("sample:dev",),
                                 tokenizer="train:200"),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("members", [2, 4])
def test_members_fill_the_parameter_budget_without_exceeding_it(name: str, members: int) -> None:
    config = CONFIGS[name]
    vocab = config_vocab(config)
    member = member_config(config, members)
    assert member.heads * members == config.heads and member.hidden % member.heads == 0
    ensemble, single = ensemble_params(config, members)
    assert single == _count(config, vocab) and ensemble == members * _count(member, vocab)
    assert ensemble <= single
    larger = dataclasses.replace(member, hidden=member.hidden + member.heads)
    assert members * _count(larger, vocab) > single  # the next hidden size would exceed it
    same = {"heads", "hidden", "head_dim", "kv_heads"}
    assert {k: v for k, v in member.to_dict().items() if k not in same} == \
        {k: v for k, v in config.to_dict().items() if k not in same}
    configs = member_configs(config, members)
    assert [c.seed for c in configs] == [member_seed(config.seed, m) for m in range(members)]
    assert len({c.seed for c in configs}) == members and configs[0].seed == config.seed
    assert {c.data_seed for c in configs} == {config.data_seed}


def test_the_count_is_what_the_built_models_hold() -> None:
    from probes.training.models import build_model
    from probes.training.task_data import task_tokenizer

    def held(config: TrainConfig) -> int:
        tokenizer = task_tokenizer(config)
        assert len(tokenizer) == config_vocab(config)
        return sum(p.numel() for p in build_model(config, tokenizer).parameters())

    ensemble, single = ensemble_params(ONE, 2)
    assert held(ONE) == single
    assert sum(held(c) for c in member_configs(ONE, 2)) == ensemble


def test_member_sizes_refused_or_kept() -> None:
    with pytest.raises(ConfigError, match="ensemble"):
        member_config(ONE, 3)
    with pytest.raises(ConfigError, match="ensemble.*--kv-heads"):
        member_config(CONFIGS["llama-gqa"], 8)
    with pytest.raises(ConfigError, match="ensemble"):
        member_config(ONE, 0)
    assert member_config(ONE, 1) == ONE
    assert member_config(CONFIGS["llama-gqa"], 2).kv_heads == 2
    with pytest.raises(ConfigError, match="vocab"):
        config_vocab(dataclasses.replace(CONFIGS["gpt2-text"], tokenizer="gpt2"))
    assert ensemble_params(dataclasses.replace(CONFIGS["gpt2-text"], tokenizer="gpt2"), 2, vocab=300) == \
        ensemble_params(CONFIGS["gpt2-text"], 2)


def test_member_seeds_are_distinct_and_deterministic() -> None:
    for seed in (0, 1, 6, 2**32 - 1):
        seeds = [member_seed(seed, m) for m in range(16)]
        assert seeds[0] == seed and len(set(seeds)) == 16
        assert all(0 <= s < 2**32 for s in seeds) and seeds == [member_seed(seed, m) for m in range(16)]
    # the members of the lab's six ensemble seeds never meet
    assert len({member_seed(seed, m) for seed in range(1, 7) for m in range(8)}) == 48
    with pytest.raises(ConfigError):
        member_seed(-1, 0)


# ----------------------------------------------------------------------------- tests of function
def _mean_ablated_probs(model: Any, ids: np.ndarray, heads: list[tuple[int, int]]) -> np.ndarray:
    """``(N, T, V)`` one gpt2 member's probabilities with ``heads`` ((layer, head)) replaced by their mean output
    over every token of ``ids`` (rounded to float32, as function_tests' means are): a forward pre-hook on
    ``attn.c_proj``, written here."""
    blocks = model.transformer.h
    size = model.config.n_embd // model.config.n_head
    inputs: dict[int, Any] = {}
    seen = [block.attn.c_proj.register_forward_pre_hook(
        lambda _m, args, layer=layer: inputs.__setitem__(layer, args[0].detach().clone()))
        for layer, block in enumerate(blocks)]
    _probs(model, ids)
    for handle in seen:
        handle.remove()

    def replace(layer: int) -> Any:
        def hook(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
            out = args[0].clone()
            for at, head in heads:
                if at == layer:
                    cut = slice(head * size, (head + 1) * size)
                    # the mean as head_means keeps it: float32 (a float64 mean moves the loss by about 3e-8)
                    out[..., cut] = inputs[layer][..., cut].mean(dim=(0, 1)).float().double()
            return (out, *args[1:])
        return hook

    handles = [block.attn.c_proj.register_forward_pre_hook(replace(layer)) for layer, block in enumerate(blocks)]
    try:
        return _probs(model, ids)
    finally:
        for handle in handles:
            handle.remove()


def _ensemble_damage(members: list[Any], ids: np.ndarray, scored: np.ndarray, h: int,
                     heads: list[tuple[int, int]]) -> np.ndarray:
    """The ensemble's loss increase at each scored token with ``heads`` ((layer, ensemble head)) mean-ablated, by
    hand: each member's probabilities (ablated where it holds one of the heads), averaged."""
    def loss(ablate: bool) -> np.ndarray:
        probs = [_mean_ablated_probs(model, ids, [(layer, head % h) for layer, head in heads if head // h == m]
                                     if ablate else []) for m, model in enumerate(members)]
        return -np.log(_at_targets(np.mean(probs, axis=0), ids, scored))

    return loss(True) - loss(False)


@pytest.fixture(scope="module")
def measured() -> tuple[list[Any], np.ndarray, np.ndarray, list[FunctionTests], FunctionTests]:
    members = _members(ONE, 2)
    ids, scored = _tokens(config_vocab(ONE), seed=1)
    tests = [dataclasses.replace(function_tests(model, ids, scored, ablation="mean"), model=f"member-{m}")
             for m, model in enumerate(members)]
    return members, ids, scored, tests, ensemble_function_tests(tests)


def test_ensemble_tests_of_function_equal_hand_ablations(measured: Any) -> None:
    members, ids, scored, tests, ensemble = measured
    h, layers = len(tests[0].heads), len(tests[0].layers)
    assert (h, layers) == (2, 2)
    assert ensemble.heads == tuple(range(4)) and ensemble.layers == (0, 1)
    assert ensemble.model == "ensemble of 2: member-0, member-1"
    assert ensemble.damage.shape == (2, 4, int(scored.sum()))
    np.testing.assert_allclose(ensemble.token_loss, ensemble_token_loss(members, ids, scored), rtol=0, atol=1e-9)
    for layer in range(layers):
        for head in range(2 * h):  # every single head: member head // h, its head head % h
            np.testing.assert_allclose(ensemble.damage[layer, head],
                                       _ensemble_damage(members, ids, scored, h, [(layer, head)]), rtol=0, atol=1e-9)
    assert np.abs(ensemble.damage).max() > 1e-2  # the ablations move the loss: the comparison has teeth
    assert ensemble.pairs.tolist() == [list(p) for p in head_pairs(layers, 2 * h, "layer")]
    for row, (i, j) in enumerate(ensemble.pairs.tolist()):  # within a member (0-1, 2-3) and across members
        layer = i // (2 * h)
        expected = _ensemble_damage(members, ids, scored, h, [(layer, i % (2 * h)), (layer, j % (2 * h))])
        np.testing.assert_allclose(ensemble.pair_damage[row], expected, rtol=0, atol=1e-9)


def test_a_single_member_is_its_own_ensemble(measured: Any) -> None:
    tests = measured[3][0]
    alone = ensemble_function_tests([tests])
    np.testing.assert_allclose(alone.token_loss, tests.token_loss, atol=1e-12)
    np.testing.assert_allclose(alone.damage, tests.damage, atol=1e-12)
    np.testing.assert_allclose(alone.pair_damage, tests.pair_damage, atol=1e-12)


def test_members_without_pairs_give_singles_only(measured: Any) -> None:
    from probes.importance.function import PAIR_SCOPES

    if "none" not in PAIR_SCOPES:
        pytest.skip("function_tests has no pair scope 'none' in this tree")
    members, ids, scored, _, ensemble = measured
    singles = ensemble_function_tests([function_tests(model, ids, scored, pairs="none") for model in members])
    assert singles.pair_scope == "none" and singles.pairs.shape == (0, 2) and singles.pair_damage.shape[0] == 0
    np.testing.assert_allclose(singles.damage, ensemble.damage, rtol=0, atol=1e-12)


def test_members_measured_apart_are_refused(measured: Any) -> None:
    members, ids, scored, tests, _ = measured
    other = scored.copy()
    other[0, 2] = not other[0, 2]
    with pytest.raises(ConfigError, match="ensemble: member 2.*n_tokens"):
        ensemble_function_tests([tests[0], function_tests(members[1], ids, other)])
    with pytest.raises(ConfigError, match="ensemble: member 2.*ablation"):
        ensemble_function_tests([tests[0], function_tests(members[1], ids, scored, ablation="resample")])
    with pytest.raises(ConfigError, match="ensemble: member 2.*pair_scope"):
        ensemble_function_tests([tests[0], function_tests(members[1], ids, scored, pairs="all")])
    with pytest.raises(ConfigError, match="ensemble"):
        ensemble_function_tests([])
