"""Shared pieces of the importance and pruning tests: objectives of our own, sentences, hand-built results.

The objectives here do not depend on :mod:`probes.importance.objectives`, so the scores and pruning are
tested against objectives whose every number can be recomputed by hand:

* :class:`ProjectionObjective`: per sentence, the mean over non-padding tokens of ``(h_t . v)^2`` for the
  last hidden state ``h_t`` and a fixed random ``v`` (smooth in every gate; LayerNorm does not flatten it).
* :class:`OneHeadObjective`: planted: ``1 / (1 + S)`` with ``S`` the mean square of one head's output
  (read at the output projection's input of its layer, after the gates): only that head matters, and
  removing it raises the loss to 1.

The result factories are also the round-trip cases of ``tests/test_results.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from probes.importance.pruning import OnePerLayer, PruningResult
from probes.importance.scores import ImportanceResult

#: Sentences of the tiny BERT vocabulary, lengths 2 to 8 words (so batches are padded).
SENTENCES = [
    ["the", "quick", "brown", "fox"], ["a", "cat", "sat", "on", "the", "mat"], ["the", "dog", "barked"],
    ["she", "did", "know", "it"], ["the", "lazy", "dog", "sat", "on", "a", "mat", "."], ["fox", "jumps"],
    ["a", "quick", "cat", "jumps", "over", "the", "dog"], ["the", "mat", "is", "brown"],
    ["she", "sat", "at", "the", "mat", "and", "it", "barked"], ["the", "head", "words"],
    ["a", "brown", "dog", "and", "a", "lazy", "cat"], ["it", "is", "the", "fox", "."],
]


def tiny_bert(folder: Path) -> tuple[Any, Any]:
    """A tiny BERT (2 layers x 4 heads) built in ``folder``, in float64 with eager attention, and its tokenizer."""
    import torch
    from transformers import AutoModel

    from probes.extraction.loading import load_tokenizer
    from tests.tiny_models import build

    built = build("bert", folder)
    model = AutoModel.from_pretrained(built, attn_implementation="eager", dtype=torch.float64).eval()
    return model, load_tokenizer(str(built))


def batches_of(tokenizer: Any, budget: int = 40, sentences: Any = SENTENCES) -> list[Any]:
    """:data:`SENTENCES` encoded and batched within ``budget`` padded tokens."""
    from probes.importance.batches import encode_sentences, make_batches

    encoded, skipped = encode_sentences(tokenizer, sentences)
    if skipped:
        raise AssertionError(f"test sentences skipped: {skipped}")
    return make_batches(encoded, pad_id=tokenizer.pad_token_id, max_batch_tokens=budget)


def per_sentence_losses(model: Any, batches: Any, objective: Any, gates: Any) -> np.ndarray:
    """``(N,)`` losses with ``gates`` (L, H), sentences in index order (the independent path: head_gates)."""
    import torch

    from probes.extraction.interventions import head_gates

    out: dict[int, float] = {}
    with torch.no_grad(), head_gates(model, gates):
        for batch in batches:
            out.update(zip(batch.indices.tolist(), objective.losses(model, batch).tolist()))
    return np.array([out[i] for i in sorted(out)])


def _hidden(model: Any, batch: Any) -> Any:
    out = model(**batch.model_inputs())
    return out.last_hidden_state  # (B, T, D)


class ProjectionObjective:
    """Per sentence: mean over non-padding tokens of ``(h_t . v)^2`` (last hidden states, fixed ``v``)."""

    name = "projection"

    def __init__(self, dim: int, seed: int = 0) -> None:
        self.direction = np.random.default_rng(seed).standard_normal(dim)  # (D,)

    def prepare(self, model: Any, batch: Any) -> Any:
        return batch

    def losses(self, model: Any, batch: Any) -> Any:
        import torch

        hidden = _hidden(model, batch)
        v = torch.as_tensor(self.direction, dtype=hidden.dtype, device=hidden.device)
        mask = batch.attention_mask.to(hidden.dtype)  # (B, T)
        return ((hidden @ v) ** 2 * mask).sum(1) / mask.sum(1)  # (B,)

    def evaluate(self, model: Any, batch: Any) -> dict[str, Any]:
        import torch

        with torch.no_grad():
            loss = self.losses(model, batch).double().cpu().numpy()
        return {"loss": loss, "accuracy": (loss < 1.0).astype(np.float64)}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class OneHeadObjective:
    """Planted: ``1 / (1 + mean square of head (layer, head)'s output over non-padding tokens)``."""

    name = "one-head"

    def __init__(self, layer: int = 0, head: int = 1) -> None:
        self.layer, self.head = layer, head

    def prepare(self, model: Any, batch: Any) -> Any:
        return batch

    def losses(self, model: Any, batch: Any) -> Any:
        from probes.extraction.families import head_sites

        site = head_sites(model)[self.layer]
        seen: dict[str, Any] = {}

        def hook(module: Any, args: tuple[Any, ...]) -> None:  # registered last: runs after the gates
            seen["x"] = args[0]

        handle = site.module.register_forward_pre_hook(hook)
        try:
            model(**batch.model_inputs())
        finally:
            handle.remove()
        x = seen["x"].reshape(*seen["x"].shape[:2], site.n_heads, site.head_dim)[:, :, self.head]  # (B, T, d)
        mask = batch.attention_mask.to(x.dtype)
        square = ((x ** 2).sum(-1) * mask).sum(1) / mask.sum(1)  # (B,)
        return 1 / (1 + square)

    def evaluate(self, model: Any, batch: Any) -> dict[str, Any]:
        import torch

        with torch.no_grad():
            return {"loss": self.losses(model, batch).double().cpu().numpy()}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "layer": self.layer, "head": self.head}


# ----------------------------------------------------------------------------- hand-built results
def importance_result() -> ImportanceResult:
    """2 layers x 3 heads, every field filled."""
    rng = np.random.default_rng(3)
    raw = rng.random((2, 3))
    effect = rng.normal(size=(2, 3))
    return ImportanceResult(layers=(0, 1), heads=(0, 1, 2), objective="representation", data="sample:dev",
                            importance=raw / np.linalg.norm(raw, axis=1, keepdims=True), raw_importance=raw,
                            normalization="layer-l2", loo_effect=effect, loo_low=effect - 0.1, loo_high=effect + 0.1,
                            ablation="zero", base_loss=0.25, rank_correlation=0.6, rank_low=0.1, rank_high=0.9,
                            n_sentences=12, n_resamples=100, confidence=0.95)


def one_per_layer() -> OnePerLayer:
    """2 layers x 3 heads, two metrics."""
    return OnePerLayer(layers=(0, 1), heads=(0, 1, 2), kept=np.array([2, 0]), metrics=("loss", "accuracy"),
                       values=np.array([[1.5, 0.5], [1.2, 0.7]]), base=np.array([1.0, 0.8]),
                       loss_delta=np.array([0.5, 0.2]), loss_low=np.array([0.3, 0.1]),
                       loss_high=np.array([0.7, 0.3]))


def pruning_result(with_one_per_layer: bool = True) -> PruningResult:
    """Curves of 6 heads in steps of 1/3: importance, two random orders and a score order; loss and accuracy."""
    loss = np.array([[1.0, 1.02, 1.3, 3.0],    # importance
                     [1.0, 1.2, 2.0, 3.0],     # random:0
                     [1.0, 1.1, 2.5, 3.0],     # random:1
                     [1.0, 1.04, 1.06, 3.0]])  # specialised-last
    accuracy = np.array([[0.8, 0.79, 0.7, 0.1], [0.8, 0.6, 0.4, 0.1], [0.8, 0.75, 0.3, 0.1], [0.8, 0.8, 0.5, 0.1]])
    orders = np.array([[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [2, 0, 1, 5, 3, 4], [1, 0, 3, 2, 5, 4]])
    return PruningResult(layers=(0, 1), heads=(0, 1, 2), objective="probe", data="sample:dev",
                         selection="sample:train", metrics=("loss", "accuracy"), higher_is_better=(False, True),
                         curves=("importance", "random:0", "random:1", "specialised-last"),
                         fractions=np.array([0.0, 1 / 3, 2 / 3, 1.0]), n_pruned=np.array([0, 2, 4, 6]),
                         values=np.stack([loss, accuracy], axis=-1), order=orders, step=1 / 3, importance="iterative",
                         ablation="zero", one_per_layer=one_per_layer() if with_one_per_layer else None)
