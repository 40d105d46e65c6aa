"""Tests of function of a literal ensemble (issue 39, points 3 and 4), from its members' own.

An ensemble of ``N`` members predicts the mean of their probabilities (:func:`probes.training.ensemble.ensemble_log_probs`),
so ablating a head changes only its own member's term of that mean. Given each member's
:class:`~probes.importance.function.FunctionTests` on the same tokens, every ablation of the ensemble follows without
another forward pass: with ``p_m = exp(-token_loss_m)`` and a member's ablated ``p_m' = exp(-(token_loss_m + damage_m))``

* the ensemble's ``p = mean_m p_m``;
* head ``(m, k)`` ablated: ``p_m`` replaced by member ``m``'s ``p`` with head ``k`` ablated;
* two heads of one member (one layer): ``p_m`` replaced by that member's pair ablation;
* two heads of different members (one layer): both members' ``p`` replaced by their single ablations.

The ensemble is held as one model of ``N x h`` heads a layer, member-major (head ``m * h + k`` is head ``k`` of member
``m``, as :mod:`probes.importance.lab_types` holds it), with every within-layer pair of those heads. All mixing is in
log space (``-logsumexp(-losses) + log N``), so tokens a member finds very unlikely lose no precision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.importance.function import FunctionTests, head_pairs

__all__ = ["ensemble_function_tests", "ensemble_loss"]

#: The pair scopes of members an ensemble's tests are built from: every pair within a layer (whose pairs across
#: members follow from single ablations), or single heads only (``"none"``, every member alike: no pairs).
_SCOPES: tuple[str, ...] = ("layer", "none")


def ensemble_loss(losses: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``(n_tokens,)`` the ensemble's loss ``-log mean_m exp(-losses[m])`` from the members' ``(N, n_tokens)``."""
    values = -np.asarray(losses, dtype=np.float64)
    top = values.max(axis=0)
    mixed: npt.NDArray[np.float64] = -(top + np.log(np.exp(values - top).sum(axis=0)) - math.log(len(values)))
    return mixed


def _check(members: Sequence[FunctionTests]) -> None:
    """ConfigError (naming ``ensemble``) unless the members were measured alike, on the same tokens, in one shape."""
    if len(members) == 0 or not all(isinstance(m, FunctionTests) for m in members):
        raise ConfigError(f"ensemble: expected one FunctionTests per member (at least one), found "
                          f"{[type(m).__name__ for m in members]}")
    first = members[0]
    n_layers, n_heads = len(first.layers), len(first.heads)
    scope = first.pair_scope if first.pair_scope in _SCOPES else _SCOPES[0]
    expected = np.asarray(head_pairs(n_layers, n_heads, scope), dtype=np.int64).reshape(-1, 2)
    for m, tests in enumerate(members):
        where = f"ensemble: member {m + 1}"
        if tests.pair_scope != scope or not np.array_equal(tests.pairs, expected):
            raise ConfigError(f"{where}: expected every within-layer pair (pair_scope 'layer', or 'none' in every "
                              f"member), found pair_scope {tests.pair_scope!r} with {len(tests.pairs)} pairs")
        same = {"layers": (tests.layers, first.layers), "heads": (tests.heads, first.heads),
                "objective": (tests.objective, first.objective), "ablation": (tests.ablation, first.ablation),
                "n_sequences": (tests.n_sequences, first.n_sequences), "n_tokens": (tests.n_tokens, first.n_tokens)}
        for name, (found, want) in same.items():
            if found != want:
                raise ConfigError(f"{where}: expected {name} {want!r} as member 1 (the same tokens, the same shape), "
                                  f"found {found!r}")
        if not np.array_equal(tests.donors, first.donors):
            raise ConfigError(f"{where}: expected the resample donors of member 1 (one derangement of the same "
                              f"sequences), found {tests.donors.tolist()}")
        shapes = {"token_loss": (tests.token_loss.shape, (first.n_tokens,)),
                  "damage": (tests.damage.shape, (n_layers, n_heads, first.n_tokens)),
                  "pair_damage": (tests.pair_damage.shape, (len(expected), first.n_tokens))}
        for name, (found_shape, want_shape) in shapes.items():
            if found_shape != want_shape:
                raise ConfigError(f"{where}: expected {name} of shape {want_shape}, found {found_shape}")


def ensemble_function_tests(members: Sequence[FunctionTests]) -> FunctionTests:
    """The tests of function of the ensemble of ``members`` (see the module), each member's measured on the same
    token batches (same sequences, scored tokens and ablation; pairs within each layer, or, in every member, none).

    Returns:
        FunctionTests of ``N x h`` heads a layer (member-major): the members' layers, heads ``range(N * h)``, every
        within-layer pair (none when the members have none: pair scope ``"none"``), the ensemble's ``token_loss``,
        ``damage`` and ``pair_damage``, model ``"ensemble of N: <members' models joined by ', '>"`` and the members'
        objective, ablation, seed, sequences and donors.

    Raises:
        ConfigError: naming ``ensemble``: no members, or members measured on different tokens (counts, donors) or
            of different shapes (layers, heads, pairs), or with another ablation or objective. That the ids
            themselves were the same is the caller's to keep: a FunctionTests does not hold them.
    """
    _check(members)
    first, count = members[0], len(members)
    n_layers, h = len(first.layers), len(first.heads)
    width = count * h
    base = np.stack([m.token_loss for m in members]).astype(np.float64)  # (N, n_tokens)
    single = np.stack([m.token_loss[None, None] + m.damage for m in members])  # (N, L, h, n_tokens)
    scope = first.pair_scope
    own_pairs = {pair: row for row, pair in enumerate(head_pairs(n_layers, h, scope))}
    pair_loss = np.stack([m.token_loss[None] + m.pair_damage for m in members])  # (N, P_member, n_tokens)
    loss = ensemble_loss(base)

    def ablated(layer: int, heads: Sequence[int]) -> npt.NDArray[np.float64]:
        """The ensemble's loss increase with ``heads`` (ensemble indices within ``layer``) ablated."""
        losses = base.copy()
        by_member: dict[int, list[int]] = {}
        for head in heads:
            m, k = divmod(head, h)
            by_member.setdefault(m, []).append(k)
        for m, ks in by_member.items():
            if len(ks) == 1:
                losses[m] = single[m, layer, ks[0]]
            else:
                losses[m] = pair_loss[m, own_pairs[(layer * h + min(ks), layer * h + max(ks))]]
        return ensemble_loss(losses) - loss

    damage = np.stack([np.stack([ablated(layer, [head]) for head in range(width)]) for layer in range(n_layers)])
    pairs = head_pairs(n_layers, width, scope)
    pair_damage = np.stack([ablated(i // width, [i % width, j % width]) for i, j in pairs]) if pairs else \
        np.zeros((0, first.n_tokens))
    return FunctionTests(
        layers=first.layers, heads=tuple(range(width)),
        model=f"ensemble of {count}: " + ", ".join(m.model for m in members), objective=first.objective,
        ablation=first.ablation, seed=first.seed, pair_scope=scope, n_sequences=first.n_sequences,
        n_tokens=first.n_tokens, donors=first.donors.copy(), token_loss=loss,
        damage=damage.reshape(n_layers, width, first.n_tokens),
        pairs=np.asarray(pairs, dtype=np.int64).reshape(-1, 2), pair_damage=pair_damage)
