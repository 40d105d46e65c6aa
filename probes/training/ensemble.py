"""The literal ensemble of issue 39 (point 3): ``N`` models of ``H / N`` heads each, trained independently from
different seeds on the same data, whose averaged prediction stands beside one ``H``-head model of about the same
parameter count.

* :func:`member_config` sizes a member: ``H / N`` heads, the same layers, task, data and optimisation, and the
  largest hidden size (a multiple of its heads) at which ``N`` members have no more parameters than the one model
  (:func:`ensemble_params` gives both counts); :func:`member_seed` and :func:`member_configs` give every member its
  own initialisation seed while all keep ``data_seed``, so they see the same sequences in the same order.
* :func:`ensemble_log_probs` is the ensemble's prediction: the log of the mean of the members' probabilities (not
  of their log-probabilities), and :func:`ensemble_token_loss` its loss at each scored token, in the token order of
  :class:`probes.importance.function.FunctionTests`.

The tests of function of an ensemble (its heads ablated one and two at a time) are built from its members' own in
:func:`probes.importance.ensemble_function.ensemble_function_tests` (a later stage: this one cannot import
:mod:`probes.importance`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.training.config import TrainConfig, whole_number

if TYPE_CHECKING:
    import torch

__all__ = ["member_config", "member_configs", "member_seed", "ensemble_params", "config_vocab",
           "ensemble_log_probs", "ensemble_token_loss", "SEED_STRIDE"]

#: The step between the seeds of consecutive members (odd, so members ``0 .. 2**32 - 1`` of one ensemble never share
#: a seed; the golden ratio of 2**32, so nearby ensemble seeds rarely meet either).
SEED_STRIDE = 0x9E3779B9
_SEEDS = 2**32


def config_vocab(config: TrainConfig) -> int:
    """The vocabulary size ``config`` fixes by itself: a task run's (the family's special tokens and the task's
    tokens and markers, as :func:`probes.training.task_data.task_tokenizer` builds it), or VOCAB of ``train:VOCAB``.

    Raises:
        ConfigError: a base model's tokenizer (its size is known only once it is loaded: pass ``vocab``).
    """
    spec = config.task_spec
    if spec is not None:
        return len(config.family.special_tokens) + spec.size
    if config.train_vocab is not None:
        return config.train_vocab
    raise ConfigError(f"vocab: expected the vocabulary size for --tokenizer {config.tokenizer} (a base tokenizer's "
                      "size is known once it is loaded), found none")


def _parameters(config: TrainConfig, vocab: int) -> int:
    """The parameters of ``config``'s model over ``vocab`` entries: its family's count (the embedding tied to the LM
    head counted once; an attention-only model's zeroed, frozen MLP of width 1 counted too)."""
    return config.family.parameters(config.sizes(vocab))


def _sized(config: TrainConfig, heads: int, hidden: int, members: int) -> TrainConfig:
    """``config`` with ``heads`` heads and hidden size ``hidden`` (an explicit MLP width scaled with the hidden
    size, rounded down, at least 1; key/value heads divided by ``members``)."""
    intermediate = None if config.intermediate is None else max(1, config.intermediate * hidden // config.hidden)
    kv_heads = None if config.kv_heads is None else config.kv_heads // members
    return dataclasses.replace(config, heads=heads, hidden=hidden, head_dim=None, intermediate=intermediate,
                               kv_heads=kv_heads)


def member_config(config: TrainConfig, members: int, *, vocab: int | None = None) -> TrainConfig:
    """The config of one of ``members`` models that together stand for the ``config.heads``-head model ``config``.

    A member has ``config.heads // members`` heads and everything else of ``config`` (layers, task, data, steps,
    optimisation, initialisation scheme, ``seed`` and ``data_seed``; give each member its seed with
    :func:`member_seed`, or take :func:`member_configs`). Its hidden size is the largest multiple ``d`` of its heads
    with ``members x params(member at d) <= params(config)``: the ensemble is as close as the sizes allow to the one
    model's parameter count without exceeding it. ``--head-dim`` is dropped (the member's head size is
    ``d / heads``); an explicit ``--intermediate`` scales with the hidden size (``intermediate x d // hidden``, at
    least 1); ``--kv-heads`` is divided by ``members``. ``members`` 1 gives ``config`` itself.

    Args:
        vocab: the vocabulary size the parameters are counted over (default :func:`config_vocab`).

    Raises:
        ConfigError: naming ``ensemble``: ``members`` not a divisor of ``config.heads`` (or of ``--kv-heads``), or
            no hidden size fitting the parameter budget.
    """
    members = whole_number("ensemble", members)
    if config.heads % members:
        raise ConfigError(f"ensemble: expected a number of members dividing --heads {config.heads} (each member has "
                          f"heads / members heads), found {members}")
    if config.kv_heads is not None and config.kv_heads % members:
        raise ConfigError(f"ensemble: expected a number of members dividing --kv-heads {config.kv_heads}, found "
                          f"{members}")
    if members == 1:
        return config
    vocab = config_vocab(config) if vocab is None else whole_number("vocab", vocab)
    heads = config.heads // members
    budget = _parameters(config, vocab)

    def fits(multiple: int) -> bool:
        return members * _parameters(_sized(config, heads, multiple * heads, members), vocab) <= budget

    if not fits(1):
        raise ConfigError(f"ensemble: expected {members} members of {heads} head(s) to fit in the {budget} parameters "
                          f"of the one model, found even hidden size {heads} too large (the embeddings over {vocab} "
                          "tokens are counted in every member)")
    low, high = 1, config.hidden // heads  # fits(low); a member at the one model's hidden size has as many parameters
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return _sized(config, heads, low * heads, members)


def member_seed(seed: int, member: int) -> int:
    """The initialisation seed of member ``member`` of an ensemble whose seed is ``seed``: ``seed`` for member 0,
    then ``(seed + member x SEED_STRIDE) mod 2**32`` (:data:`SEED_STRIDE`): deterministic, and distinct for the
    members of one ensemble."""
    seed, member = whole_number("seed", seed, 0), whole_number("member", member, 0)
    if seed >= _SEEDS or member >= _SEEDS:
        raise ConfigError(f"seed, member: expected whole numbers below 2**32, found {seed}, {member}")
    return (seed + member * SEED_STRIDE) % _SEEDS


def member_configs(config: TrainConfig, members: int, *, vocab: int | None = None) -> tuple[TrainConfig, ...]:
    """The configs of every member (:func:`member_config`), member ``m`` with seed :func:`member_seed`
    ``(config.seed, m)`` and ``config.data_seed`` (the same data in the same order)."""
    one = member_config(config, members, vocab=vocab)
    return tuple(dataclasses.replace(one, seed=member_seed(config.seed, m)) for m in range(members))


def ensemble_params(config: TrainConfig, members: int, *, vocab: int | None = None) -> tuple[int, int]:
    """``(ensemble, single)``: the parameters of ``members`` members of :func:`member_config` summed, and of the
    one model ``config`` (the family's count over ``vocab``, default :func:`config_vocab`)."""
    vocab = config_vocab(config) if vocab is None else whole_number("vocab", vocab)
    member = member_config(config, members, vocab=vocab)
    return members * _parameters(member, vocab), _parameters(config, vocab)


# ----------------------------------------------------------------------------- the ensemble's prediction
def _ids(input_ids: Any) -> torch.Tensor:
    """``input_ids`` as an ``(N, T)`` int64 CPU tensor, or ConfigError."""
    import torch

    ids = input_ids.detach().cpu() if isinstance(input_ids, torch.Tensor) else torch.as_tensor(np.asarray(input_ids))
    if ids.dim() != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.numel() == 0:
        raise ConfigError(f"input_ids: expected whole numbers of shape (sequences, tokens), found {ids.dtype} of shape "
                          f"{tuple(ids.shape)}")
    return ids.to(torch.int64)


def _log_probs(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """``(N, T, V)`` float64 log-softmax of one model's logits on ``ids``, in eval mode without grad (the model's
    train/eval mode restored after)."""
    import torch

    from probes.extraction.families import is_decoder

    was_training = model.training
    extra = {"use_cache": False} if is_decoder(model) else {}
    try:
        model.eval()
        with torch.no_grad():
            device = next(model.parameters()).device
            logits = model(input_ids=ids.to(device), **extra).logits
    finally:
        model.train(was_training)
    return torch.log_softmax(logits.detach().to("cpu", torch.float64), dim=-1)


def ensemble_log_probs(models: Sequence[Any], input_ids: Any) -> torch.Tensor:
    """``(N, T, V)`` float64 (CPU): the log of the mean of the members' softmax probabilities at every position,
    ``logsumexp_m(log_softmax(logits_m)) - log(len(models))``; each model run in eval mode without grad.

    Args:
        models: the members (LM-headed models over one vocabulary).
        input_ids: ``(N, T)`` token ids (a tensor or an array), every one real (no padding).

    Raises:
        ConfigError: no members, ids that are not ``(N, T)`` whole numbers, or members of different vocabularies.
    """
    import torch

    if len(models) == 0:
        raise ConfigError("ensemble: expected at least one member model, found none")
    ids = _ids(input_ids)
    total: torch.Tensor | None = None
    for m, model in enumerate(models):
        log_probs = _log_probs(model, ids)
        if total is not None and log_probs.shape != total.shape:
            raise ConfigError(f"ensemble: expected members over one vocabulary ({total.shape[-1]} entries, member 1), "
                              f"found {log_probs.shape[-1]} in member {m + 1}")
        total = log_probs if total is None else torch.logaddexp(total, log_probs)
    assert total is not None  # at least one member
    return total - math.log(len(models))


def ensemble_token_loss(models: Sequence[Any], input_ids: Any, scored: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(n_tokens,)`` the ensemble's loss ``-log p_ensemble(token t | tokens < t)`` at every scored position ``t``
    (:func:`ensemble_log_probs` of causal LMs), sequence by sequence, position by position: the order of
    :attr:`probes.importance.function.FunctionTests.token_loss`.

    Args:
        scored: ``(N, T)`` bool, the positions whose token is predicted (never position 0: nothing precedes it).

    Raises:
        ConfigError: a mask of another shape or type, a scored position 0, or no scored position.
    """
    ids = _ids(input_ids)
    mask = np.asarray(scored)
    if mask.shape != tuple(ids.shape) or mask.dtype != np.bool_:
        raise ConfigError(f"scored: expected a bool mask of the shape of input_ids {tuple(ids.shape)}, found "
                          f"{mask.dtype} of shape {mask.shape}")
    if mask[:, 0].any():
        raise ConfigError(f"scored: a causal LM predicts no token at position 0 (nothing before it); expected it "
                          f"unscored, found it scored in {int(mask[:, 0].sum())} sequence(s)")
    if not mask.any():
        raise ConfigError("scored: expected at least one scored token, found none")
    log_probs = ensemble_log_probs(models, ids)  # (N, T, V): position t - 1 predicts the token at t
    picked = log_probs[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]  # (N, T - 1)
    loss: npt.NDArray[np.float64] = -picked.numpy()[mask[:, 1:]]
    return loss
