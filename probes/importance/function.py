"""Tests of function from ablations on token batches: what each head, and each pair of heads, is needed for.

Distances between attention maps say how heads differ, not what they do. Here every single head and every pair
of heads (of one layer by default, or all pairs) is ablated on token batches of a trained lab model (any family
that :func:`probes.extraction.gradients.load_lm` reads), and the loss increase is kept at every scored token
(issue 39, point 4). From it, :class:`FunctionTests` gives each head's effect, each pair's interaction and
additivity (:func:`probes.importance.interactions.pair_interactions`) and the correlation of per-token damage
between heads (:func:`probes.importance.interactions.damage_correlation`).

Two ablations, both replacing a head's slice of the attention output projection's input:

* ``"mean"``: the head's mean output over every token of the batches
  (:func:`probes.extraction.interventions.head_means`, applied by ``intervene(..., ablation="mean")``);
* ``"resample"``: the head's output at the same position of another sequence, the one a fixed derangement of
  the sequences (:func:`derangement`, seeded) names, taken from the unmodified model.

The loss at a scored token: for a decoder, ``-log p(token t | tokens < t)`` (position 0 cannot be scored); for
an encoder, every scored token is replaced by the mask token in the input and the loss is ``-log p(original)``
at its position. The ablations run through :func:`probes.importance.ablations.ablated_metrics` (many ablations
per forward pass, lower layers replayed); the result equals one hand-made forward pass per ablation up to float
rounding (tests/importance/test_function_ablations.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.importance.ablations import DEFAULT_LOO_TOKENS, Intervention, ablated_metrics
from probes.importance.batches import Batch, EncodedSentence
from probes.importance.interactions import PairInteractions, damage_correlation, pair_interactions
from probes.results import Result, head_names, require_pandas

__all__ = ["FUNCTION_ABLATIONS", "PAIR_SCOPES", "FunctionTests", "TokenLossObjective", "function_tests",
           "derangement", "head_pairs"]

#: How a head is removed in the tests of function.
FUNCTION_ABLATIONS: tuple[str, ...] = ("mean", "resample")
#: Which pairs of heads are ablated together: those of one layer, all, or none (single heads only).
PAIR_SCOPES: tuple[str, ...] = ("layer", "all", "none")
#: The language-model objectives a token loss is computed for.
_KINDS: tuple[str, ...] = ("causal-lm", "masked-lm")


@dataclass(frozen=True)
class FunctionTests(Result):
    """Loss increases at every scored token with each head, and each pair of heads, ablated.

    Attributes:
        layers, heads: 0-based model layers and heads.
        model: the model's folder or name ("" when given as an object without one).
        objective: ``"causal-lm"`` (next token) or ``"masked-lm"`` (scored tokens masked).
        ablation: ``"mean"`` or ``"resample"`` (:data:`FUNCTION_ABLATIONS`).
        seed: the seed of the resample derangement (recorded for mean ablation too, where it is unused).
        pair_scope: ``"layer"`` (pairs within a layer), ``"all"`` or ``"none"`` (:data:`PAIR_SCOPES`).
        n_sequences: sequences of the token batches.
        n_tokens: scored tokens (all damages are over them, sequence by sequence, position by position).
        donors: ``(n_sequences,)`` resample: the sequence whose head outputs replace each sequence's; mean: -1.
        token_loss: ``(n_tokens,)`` the unmodified model's loss at each scored token (nats).
        damage: ``(L, H, n_tokens)`` loss increase at each scored token with the head ablated alone.
        pairs: ``(P, 2)`` the heads ablated together, flat 0-based indices ``layer * H + head``.
        pair_damage: ``(P, n_tokens)`` loss increase at each scored token with the pair ablated.
    """

    _shapes = {"donors": "n_sequences", "token_loss": "n_tokens", "damage": "layers heads n_tokens",
               "pairs": "P 2", "pair_damage": "P n_tokens"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    model: str
    objective: str
    ablation: str
    seed: int
    pair_scope: str
    n_sequences: int
    n_tokens: int
    donors: npt.NDArray[np.int64]
    token_loss: npt.NDArray[np.float64]
    damage: npt.NDArray[np.float64]
    pairs: npt.NDArray[np.int64]
    pair_damage: npt.NDArray[np.float64]

    def _check_loaded(self) -> None:
        n = len(self.layers) * len(self.heads)
        if len(self.pairs) and (self.pairs.min() < 0 or self.pairs.max() >= n or
                                (self.pairs[:, 0] == self.pairs[:, 1]).any()):
            raise ValueError(f"field 'pairs': expected two different heads in 0..{n - 1}, found {self.pairs.tolist()}")

    @property
    def base_loss(self) -> float:
        """The unmodified model's mean loss over the scored tokens."""
        return float(self.token_loss.mean()) if self.n_tokens else float("nan")

    @property
    def effect(self) -> npt.NDArray[np.float64]:
        """``(L, H)`` mean loss increase over the scored tokens with each head ablated alone."""
        return self.damage.mean(axis=2)

    @property
    def joint(self) -> npt.NDArray[np.float64]:
        """``(P,)`` mean loss increase over the scored tokens with each pair ablated."""
        return self.pair_damage.mean(axis=1)

    def interactions(self) -> PairInteractions:
        """Single effects (heads flat, ``layer * H + head``), pairs and joint effects: interaction and additivity."""
        return pair_interactions(self.effect.reshape(-1), [tuple(p) for p in self.pairs.tolist()], self.joint)

    def correlation(self) -> npt.NDArray[np.float64]:
        """``(L*H, L*H)`` correlation across scored tokens of the damage of each single-head ablation."""
        return damage_correlation(self.damage.reshape(len(self.layers) * len(self.heads), -1))

    def head_name(self, flat: int) -> str:
        """The 1-based ``layer-head`` name of flat head index ``flat``."""
        layer, head = divmod(int(flat), len(self.heads))
        return f"{self.layers[layer] + 1}-{self.heads[head] + 1}"

    def correlation_table(self) -> Any:
        """:meth:`correlation` as a table indexed and labelled by 1-based ``layer-head`` names."""
        names = [self.head_name(i) for i in range(len(self.layers) * len(self.heads))]
        return require_pandas().DataFrame(self.correlation(), index=names, columns=names)

    def to_pandas(self) -> Any:
        """One row per head, then one per pair: ``kind`` (single, pair), ``layer, head`` (1-based, the first head),
        ``head_name``, ``partner`` (the pair's other head, "" for a single), ``effect`` (mean loss increase),
        ``sum_of_singles``, ``interaction`` (effect minus sum_of_singles) and ``additivity`` (their ratio); NaN for
        singles."""
        pandas = require_pandas()
        n_heads = len(self.heads)
        single = self.effect.reshape(-1)
        inter = self.interactions()
        firsts = np.concatenate([np.arange(len(single)), self.pairs[:, 0]]).astype(np.int64)
        nan = np.full(len(single), np.nan)
        table = pandas.DataFrame({
            "kind": ["single"] * len(single) + ["pair"] * len(self.pairs),
            "layer": np.asarray(self.layers, dtype=np.int64)[firsts // n_heads] + 1,
            "head": np.asarray(self.heads, dtype=np.int64)[firsts % n_heads] + 1,
            "partner": [""] * len(single) + [self.head_name(j) for j in self.pairs[:, 1]],
            "effect": np.concatenate([single, self.joint]),
            "sum_of_singles": np.concatenate([nan, single[self.pairs].sum(axis=1) if len(self.pairs) else []]),
            "interaction": np.concatenate([nan, inter.interaction]),
            "additivity": np.concatenate([nan, inter.additivity])})
        table.insert(3, "head_name", head_names(table))
        return table


# ----------------------------------------------------------------------------- the per-token objective
class TokenLossObjective:
    """The language-model loss at each scored token (``extras["scored"]`` ``(B, T)`` bool): ``evaluate`` gives
    ``"token_loss"`` ``(B, T)`` (0 where not scored) and ``"loss"`` ``(B,)`` (the mean over a row's scored
    tokens, 0 when none). Masked LM: ``prepare`` replaces the scored tokens by ``mask_token_id`` in the input."""

    name = "token-loss"
    #: Reads only the model's output: the batched ablations may replay the layers below an ablation.
    final_states_only = True

    def __init__(self, kind: str, mask_token_id: int | None = None) -> None:
        if kind not in _KINDS:
            raise ConfigError(f"token loss kind: expected one of {', '.join(_KINDS)}, found {kind!r}")
        if kind == "masked-lm" and mask_token_id is None:
            raise ConfigError("token loss: a masked LM needs the mask token's id; found none")
        self.kind, self.mask_token_id = kind, mask_token_id

    def prepare(self, model: Any, batch: Batch) -> Batch:
        if self.kind == "masked-lm":
            batch.extras["input_ids"] = batch.input_ids.masked_fill(batch.extras["scored"], int(self.mask_token_id or 0))
        return batch

    def token_losses(self, model: Any, batch: Batch) -> Any:
        """``(B, T)`` cross-entropy at each scored token under the active interventions, 0 elsewhere."""
        import torch

        extra = {"use_cache": False} if self.kind == "causal-lm" else {}
        logits = model(**batch.model_inputs(), **extra).logits  # (B, T, V)
        labels, scored = batch.input_ids, batch.extras["scored"]
        ce = torch.zeros(labels.shape, dtype=logits.dtype, device=logits.device)
        if self.kind == "causal-lm":  # the logits at t - 1 predict the token at t
            ce[:, 1:] = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), labels[:, 1:],
                                                          reduction="none")
        else:
            ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
        return torch.where(scored, ce, torch.zeros_like(ce))

    def losses(self, model: Any, batch: Batch) -> Any:
        scored = batch.extras["scored"]
        return self.token_losses(model, batch).sum(dim=1) / scored.sum(dim=1).clamp(min=1)

    def evaluate(self, model: Any, batch: Batch) -> dict[str, Any]:
        import torch

        with torch.no_grad():
            tokens = self.token_losses(model, batch)
            count = batch.extras["scored"].sum(dim=1).clamp(min=1)
            return {"loss": (tokens.sum(dim=1) / count).double().cpu().numpy(),
                    "token_loss": tokens.double().cpu().numpy()}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind,
                "rule": "cross-entropy at each scored token: next token (causal LM; position 0 never scored) or the "
                        "original token with every scored token masked (masked LM)"}


# ----------------------------------------------------------------------------- pieces
def derangement(n: int, seed: int) -> npt.NDArray[np.int64]:
    """``(n,)`` a permutation of ``0 .. n-1`` without a fixed point, uniform among them, from ``seed``
    (permutations drawn from ``default_rng(seed)`` until one has no fixed point)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ConfigError(f"resample ablation: expected at least 2 sequences to take outputs from, found {n!r}")
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(n).astype(np.int64)
        if not (order == np.arange(n)).any():
            return order


def head_pairs(n_layers: int, n_heads: int, scope: str = "layer") -> list[tuple[int, int]]:
    """The pairs ``(i, j)``, ``i < j``, of flat head indices (``layer * n_heads + head``) ablated together: those
    of one layer (``"layer"``), all (``"all"``), or none (``"none"``: single heads only)."""
    if scope not in PAIR_SCOPES:
        raise ConfigError(f"pairs: expected one of {', '.join(PAIR_SCOPES)}, found {scope!r}")
    pairs = combinations(range(n_layers * n_heads), 2)
    return [(i, j) for i, j in pairs if scope == "all" or (scope == "layer" and i // n_heads == j // n_heads)]


def _checked_tokens(input_ids: Any, scored: Any, kind: str, vocab: int | None
                    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``(ids (N, T) int64, scored (N, T) bool)``, or ConfigError naming what is wrong."""
    ids, mask = np.asarray(input_ids), np.asarray(scored)
    if ids.ndim != 2 or ids.dtype.kind not in "iu" or ids.size == 0:
        raise ConfigError(f"input_ids: expected whole numbers of shape (sequences, tokens), found {ids.dtype} of shape "
                          f"{ids.shape}")
    if mask.shape != ids.shape or mask.dtype != np.bool_:
        raise ConfigError(f"scored: expected a bool mask of the shape of input_ids {ids.shape}, found {mask.dtype} of "
                          f"shape {mask.shape}")
    if not mask.any():
        raise ConfigError("scored: expected at least one scored token, found none")
    if kind == "causal-lm" and mask[:, 0].any():
        raise ConfigError("scored: a decoder predicts no token at position 0 (nothing before it); expected it "
                          f"unscored, found it scored in {int(mask[:, 0].sum())} sequence(s)")
    if ids.min() < 0 or (vocab is not None and ids.max() >= vocab):
        raise ConfigError(f"input_ids: expected token ids in 0..{'' if vocab is None else vocab - 1}, found "
                          f"{int(ids.min())}..{int(ids.max())}")
    return ids.astype(np.int64), mask


def _token_batches(ids: npt.NDArray[np.int64], scored: npt.NDArray[np.bool_], rows: int, objective: Any,
                   model: Any) -> list[Batch]:
    """The sequences in batches of ``rows`` (no padding: every token is real), prepared by ``objective``."""
    import torch

    device = next(model.parameters()).device
    batches = []
    for start in range(0, len(ids), rows):
        chunk = range(start, min(start + rows, len(ids)))
        sentences = tuple(EncodedSentence(i, "", (), (), ids[i], np.zeros(ids.shape[1], np.int64)) for i in chunk)
        block = torch.from_numpy(ids[chunk.start:chunk.stop]).to(device)
        batch = Batch(sentences, block, torch.ones_like(block), torch.zeros_like(block),
                      {"scored": torch.from_numpy(scored[chunk.start:chunk.stop]).to(device)})
        batches.append(objective.prepare(model, batch))
    return batches


def _head_outputs(model: Any, batches: Sequence[Batch], n: int) -> list[Any]:
    """Per layer, ``(N, T, H * d)`` every sequence's head outputs (the output projection's input), unmodified."""
    import torch

    from probes.extraction.families import head_sites

    sites = head_sites(model)
    width = batches[0].input_ids.shape[1]
    outputs: list[Any] = [None] * len(sites)
    current: dict[str, Any] = {}

    def hook_for(layer: int) -> Any:
        def hook(module: Any, args: tuple[Any, ...]) -> None:
            if outputs[layer] is None:
                outputs[layer] = args[0].new_empty((n, width, args[0].shape[-1]))
            outputs[layer][current["rows"]] = args[0].detach()
        return hook

    handles = [site.module.register_forward_pre_hook(hook_for(site.layer)) for site in sites]
    try:
        with torch.no_grad():
            for batch in batches:
                current["rows"] = torch.as_tensor(batch.indices, device=batch.input_ids.device)
                model(**batch.model_inputs())
    finally:
        for handle in handles:
            handle.remove()
    return outputs


def _resample_hook(n_heads: int, head_dim: int, chosen: Any, donor: Any) -> Any:
    """A forward pre-hook: in row block ``j`` of the ``K`` blocks, the heads of ``chosen[j]`` (``(K, H)``) take
    their output from ``donor`` ``(B, T, H * d)``."""
    import torch

    def hook(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        hidden = args[0]  # (K * B, T, H * d)
        blocks, rows = chosen.shape[0], donor.shape[0]
        if hidden.dim() != 3 or hidden.shape[0] != blocks * rows:
            raise ConfigError(f"resample ablation: expected {blocks} x {rows} rows, found shape {tuple(hidden.shape)}")
        heads = hidden.reshape(blocks, rows, hidden.shape[1], n_heads, head_dim)
        given = donor.to(heads.dtype).reshape(1, rows, hidden.shape[1], n_heads, head_dim)
        where = chosen.to(heads.device)[:, None, None, :, None]  # (K, 1, 1, H, 1)
        return (torch.where(where, given, heads).reshape(hidden.shape), *args[1:])

    return hook


def _resampling(donated: Sequence[Any]) -> Intervention:
    """The resample :data:`~probes.importance.ablations.Intervention`: ``donated[layer]`` ``(N, T, H * d)`` the
    head outputs each sequence's ablated heads take (those of its donor sequence)."""
    from probes.extraction.families import head_sites

    @contextmanager
    def resampled(model: Any, block: Any, batch: Batch) -> Iterator[None]:
        import torch

        handles = []
        try:
            for site in head_sites(model):
                chosen = block[:, site.layer, :]  # (K, H)
                if bool(chosen.any()):
                    rows = torch.as_tensor(batch.indices, device=donated[site.layer].device)
                    hook = _resample_hook(site.n_heads, site.head_dim, chosen, donated[site.layer][rows])
                    handles.append(site.module.register_forward_pre_hook(hook))
            yield
        finally:
            for handle in handles:
                handle.remove()

    return resampled


def _loaded(model: Any, kind: str | None, mask_token_id: int | None) -> tuple[Any, str, str, int | None]:
    """``(model, name, kind, mask token id)``: a folder or name loaded with its LM head, or a model as given."""
    from probes.extraction.gradients import _is_decoder_config, load_lm

    if isinstance(model, (str, os.PathLike)):
        loaded, tokenizer, name, found = load_lm(os.fspath(model))
        return loaded, name, kind or found, tokenizer.mask_token_id if mask_token_id is None else mask_token_id
    found = "causal-lm" if _is_decoder_config(model.config) else "masked-lm"
    return model, str(getattr(model, "name_or_path", "") or ""), kind or found, mask_token_id


# ----------------------------------------------------------------------------- the tests of function
def function_tests(model: Any, input_ids: npt.ArrayLike, scored: npt.ArrayLike, *, ablation: str = "mean",
                   pairs: str = "layer", seed: int = 0, kind: str | None = None, mask_token_id: int | None = None,
                   batch_rows: int = 32, max_tokens: int = DEFAULT_LOO_TOKENS, progress: bool = False
                   ) -> FunctionTests:
    """Ablate each head and each pair of heads on token batches; keep the loss increase at every scored token.

    Args:
        model: a model folder or name (loaded with its LM head, eager, float32), or a loaded LM-headed model.
        input_ids: ``(N, T)`` token ids, every one real (no padding).
        scored: ``(N, T)`` bool, the tokens whose loss is measured (decoders: never position 0).
        ablation: ``"mean"`` or ``"resample"`` (:data:`FUNCTION_ABLATIONS`).
        pairs: ``"layer"`` (all pairs within a layer), ``"all"`` or ``"none"`` (:data:`PAIR_SCOPES`).
        seed: the resample derangement's seed (:func:`derangement`).
        kind: ``"causal-lm"`` or ``"masked-lm"`` (default: from the model's config).
        mask_token_id: the mask token of a masked LM given as a model (a folder's tokenizer gives it).
        batch_rows: sequences per batch; ``max_tokens``: tokens per batched ablation pass (row blocks).
        progress: show a progress bar.
    """
    import torch

    from probes.extraction.families import head_sites
    from probes.extraction.interventions import head_means
    from probes.progress import bar

    if ablation not in FUNCTION_ABLATIONS:
        raise ConfigError(f"ablation: expected one of {', '.join(FUNCTION_ABLATIONS)}, found {ablation!r}")
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ConfigError(f"batch_rows: expected a whole number >= 1, found {batch_rows!r}")
    model, name, kind, mask_token_id = _loaded(model, kind, mask_token_id)
    objective = TokenLossObjective(kind, mask_token_id)
    ids, mask = _checked_tokens(input_ids, scored, kind, getattr(model.config, "vocab_size", None))
    sites = head_sites(model)
    n_layers, n_heads = len(sites), sites[0].n_heads
    pair_list = head_pairs(n_layers, n_heads, pairs)
    singles = np.eye(n_layers * n_heads, dtype=bool)
    joint = np.zeros((len(pair_list), n_layers * n_heads), dtype=bool)
    for row, (i, j) in enumerate(pair_list):
        joint[row, [i, j]] = True
    masks = np.concatenate([np.zeros((1, n_layers * n_heads), dtype=bool), singles, joint])
    masks = masks.reshape(-1, n_layers, n_heads)
    with torch.no_grad():
        batches = _token_batches(ids, mask, batch_rows, objective, model)
    donors = np.full(len(ids), -1, dtype=np.int64)
    means, intervention = None, None
    if ablation == "mean":
        means = head_means(model, [b.model_inputs() for b in batches])
    else:
        donors = derangement(len(ids), seed)
        order = torch.from_numpy(donors)
        intervention = _resampling([out[order.to(out.device)] for out in _head_outputs(model, batches, len(ids))])
    with bar(f"ablations ({len(masks) - 1} masks)", total=len(masks) * len(batches), unit="step",
             progress=progress, leave=False) as shown:
        tokens = ablated_metrics(model, batches, objective, masks, ablation="mean" if means is not None else "zero",
                                 means=means, max_tokens=max_tokens, bar=shown, intervention=intervention)["token_loss"]
    at = tokens[:, mask]  # (M, n_tokens): the scored tokens, sequence by sequence
    base = at[0]
    return FunctionTests(
        layers=tuple(range(n_layers)), heads=tuple(range(n_heads)), model=name, objective=kind, ablation=ablation,
        seed=int(seed), pair_scope=pairs, n_sequences=len(ids), n_tokens=int(mask.sum()), donors=donors,
        token_loss=base, damage=(at[1:1 + n_layers * n_heads] - base).reshape(n_layers, n_heads, -1),
        pairs=np.asarray(pair_list, dtype=np.int64).reshape(-1, 2), pair_damage=at[1 + n_layers * n_heads:] - base)
