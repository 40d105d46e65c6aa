"""How far apart the heads of each layer are at each checkpoint: in parameters and in attention maps.

For heads ``a`` and ``b`` of one layer of one checkpoint:

* **parameter distance** ``||v_a - v_b|| / ((||v_a|| + ||v_b||) / 2)``, where ``v_h`` concatenates head ``h``'s
  query, key, value and output-projection blocks (weights and biases, :func:`probes.training.schemes.head_blocks`;
  under grouped-query attention the key/value head it reads). 0 for exact copies; about 1.4 for independent
  random blocks of equal size; 0 when both are all zero.
* **attention distance**: the Jensen-Shannon divergence between the two heads' attention rows, averaged over every
  query row of every sentence, on the token-level maps (special tokens included, no pooling to words) with
  Clark et al.'s smoothing ``(1 - 0.001) A + 0.001 / T`` and natural logs, as
  :mod:`probes.analysis.head_distances` measures heads (its ``per_row``; at most ln 2 = 0.693). Computed as
  ``Σ_j ½ (p_j log(p_j / m_j) + q_j log(q_j / m_j))``, so equal rows give exactly 0 (``m = p`` bit for bit).

Token-level maps, not the word-level maps analyses read: a distance between heads is a fact of the model as it
ran, and pooling to words would mix each word's pieces (as the head distances of Clark et al. §6 do not). The maps
come from probes' own extractor (:class:`~probes.extraction.extractor.AttentionExtractor` with ``keep_tokens``,
eager attention) on the same sentences at every checkpoint; an over-long sentence is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.corpora.types import Sentence
from probes.errors import ConfigError, InputError
from probes.extraction.trained_runs import TRAINING_FILE, is_trained, resolve_trained
from probes.results import Result, long_table
from probes.training.checkpoints import read_training

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["HeadSymmetry", "head_symmetry", "measure_heads", "param_distances", "attention_divergences", "SMOOTHING", "RULE"]

#: Clark et al.'s smoothing of attention rows before the Jensen-Shannon divergence.
SMOOTHING = 0.001
#: The rule recorded with every :class:`HeadSymmetry`.
RULE = ("param_distance: ||a - b|| / mean(||a||, ||b||) over each head's concatenated query, key, value and "
        "output blocks (weights and biases); attention_distance: Jensen-Shannon divergence (natural log) between "
        f"the heads' token-level attention rows smoothed (1 - {SMOOTHING}) A + {SMOOTHING} / T, mean over query rows")
_STEP_NAME = re.compile(r"step-(\d+)$")


@dataclass(frozen=True)
class HeadSymmetry(Result):
    """Distances between the heads of each layer at each checkpoint (see the module docstring).

    Attributes:
        steps: ``(C,)`` the training step of each checkpoint, in the order given.
        param_distance: ``(C, L, H, H)`` relative L2 distance between heads' parameter blocks (symmetric, 0 on the
            diagonal); 0-based layers and heads.
        attention_distance: ``(C, L, H, H)`` mean Jensen-Shannon divergence per query row on the sentences.
        n_sentences: sentences whose token maps were used (the same at every checkpoint).
        rule: how both distances are computed (:data:`RULE`).
    """

    _shapes = {"param_distance": "steps L H H", "attention_distance": "steps L H H"}

    steps: npt.NDArray[np.int64]
    param_distance: npt.NDArray[np.float64]
    attention_distance: npt.NDArray[np.float64]
    n_sentences: int
    rule: str = RULE

    def to_pandas(self) -> pd.DataFrame:
        """One row per checkpoint, layer and pair of heads ``head_a < head_b``: ``step, layer, head_a, head_b,
        param_distance, attention_distance`` (layers and heads numbered from 1)."""
        n_layers, n_heads = self.param_distance.shape[1:3]
        axes = {"step": self.steps, "layer": np.arange(1, n_layers + 1), "head_a": np.arange(1, n_heads + 1),
                "head_b": np.arange(1, n_heads + 1)}
        table = long_table(axes, {"param_distance": self.param_distance,
                                  "attention_distance": self.attention_distance})
        return table[table["head_a"] < table["head_b"]].reset_index(drop=True)

    def layer_means(self) -> pd.DataFrame:
        """Per checkpoint and layer (from 1), both distances averaged over the pairs ``head_a < head_b``."""
        return self.to_pandas().groupby(["step", "layer"], as_index=False)[
            ["param_distance", "attention_distance"]].mean()


def param_distances(vectors: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``(H, H)`` relative distances between the rows of ``vectors`` ``(H, P)`` (0 where both rows are zero)."""
    gaps = np.linalg.norm(vectors[:, None, :] - vectors[None, :, :], axis=-1)
    norms = np.linalg.norm(vectors, axis=-1)
    scale = (norms[:, None] + norms[None, :]) / 2
    return np.divide(gaps, scale, out=np.zeros_like(gaps), where=scale > 0)


def attention_divergences(maps: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float64]:
    """``(H, H)`` Jensen-Shannon divergences summed over the query rows of one layer's maps ``(H, T, T)``.

    One head against all at a time, so memory stays a few ``(H, T, T)`` arrays.
    """
    rows = np.asarray(maps, dtype=np.float64)
    p = (1 - SMOOTHING) * rows + SMOOTHING / rows.shape[-1]
    out = np.zeros((p.shape[0], p.shape[0]))
    for head, a in enumerate(p):
        m = (a + p) / 2  # (H, T, T)
        terms = a * np.log(a / m) + p * np.log(p / m)  # exactly 0 where the rows are equal
        out[head] = terms.sum(axis=(-2, -1)) / 2
    return out


def _step_of(folder: Path, index: int) -> int:
    """A checkpoint's step: its record's (``training.json``), else the number in a ``step-NNNNNN`` folder name."""
    if (folder / TRAINING_FILE).is_file():
        return read_training(folder).step
    match = _STEP_NAME.search(folder.name)
    if match is None:
        raise InputError(f"checkpoint {index + 1}: expected a {TRAINING_FILE} or a step-NNNNNN folder name to give "
                         "its step (or pass steps=), found neither", path=folder)
    return int(match.group(1))


def _items(sentences: Sequence[Sentence] | Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
    """``(id, words)`` of each sentence: a Sentence's words, or a text split at whitespace."""
    items = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, Sentence):
            words, name = sentence.words, sentence.sent_id
        else:
            words, name = tuple(str(sentence).split()), f"sentence {i + 1}"
        if not words:
            raise ConfigError(f"head symmetry: {name} has no words; expected at least one")
        items.append((name, tuple(words)))
    if not items:
        raise ConfigError("head symmetry: expected at least one sentence, found none")
    return items


def _checkpoint(folder: Path, items: list[tuple[str, tuple[str, ...]]], options: dict[str, Any]
                ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], int]:
    """``(param (L, H, H), attention (L, H, H), sentences used)`` of one checkpoint."""
    from probes.extraction.extractor import AttentionExtractor

    extractor = AttentionExtractor.from_pretrained(folder, keep_tokens=True, on_long="skip", selective=False,
                                                   **options)
    return measure_heads(extractor, items, where=f" in {folder}", desc=f"symmetry {folder.name}")


def measure_heads(extractor: Any, items: Sequence[tuple[str, tuple[str, ...]]], *, what: str = "head symmetry",
                  where: str = "", desc: str | None = None
                  ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], int]:
    """``(param (L, H, H), attention (L, H, H), sentences used)`` of the extractor's model as it is now, on
    ``items`` (``(name, words)``), by this module's definitions (``what`` names the measurement in the error and, unless
    ``desc`` is given, the progress line; ``where`` ends the error); the model's training mode and attention implementation are restored.

    Raises:
        ConfigError: no sentence fits the model whole.
    """
    import torch

    from probes.training.schemes import PARTS, head_blocks

    model = extractor.model
    was_training = model.training
    implementation = getattr(model.config, "_attn_implementation", None)
    n_layers, n_heads = extractor.n_layers, extractor.n_heads
    params = np.zeros((n_layers, n_heads, n_heads))
    sums, rows, used = np.zeros((n_layers, n_heads, n_heads)), 0, 0
    model.eval()
    try:
        with torch.no_grad():
            for layer in range(n_layers):
                blocks = head_blocks(model, layer)
                vectors = torch.stack([torch.cat([blocks[part][h] for part in PARTS]) for h in range(n_heads)])
                params[layer] = param_distances(vectors.double().cpu().numpy())
            for _, attention in extractor.iter_words(items, words=lambda item: item[1], desc=desc or what):
                if attention.tokens is None:
                    continue
                weights = attention.tokens.weights  # (L, H, T, T)
                for layer in range(n_layers):
                    sums[layer] += attention_divergences(weights[layer])
                rows += weights.shape[-2]
                used += 1
    finally:
        model.train(was_training)
        if implementation not in (None, getattr(model.config, "_attn_implementation", None)):
            model.set_attn_implementation(implementation)
    if not used:
        raise ConfigError(f"{what}: expected sentences that fit the model whole, found none of {len(items)} "
                          f"(each longer than {extractor.max_tokens} tokens){where}")
    return params, sums / rows, used


def _folders(checkpoints: Sequence[Path | str]) -> Iterator[Path]:
    for checkpoint in checkpoints:
        yield Path(resolve_trained(checkpoint)) if is_trained(checkpoint) else Path(checkpoint)


def head_symmetry(checkpoints: Sequence[Path | str], sentences: Sequence[Sentence] | Sequence[str], *,
                  steps: Sequence[int] | None = None, device: str | None = "cpu", batch_size: int = 16,
                  progress: bool = False) -> HeadSymmetry:
    """Distances between the heads of each layer at each checkpoint, on the same ``sentences``.

    Args:
        checkpoints: model folders (or ``trained:RUN@STEP`` names), in the order of the result.
        sentences: Sentences (their words) or texts (split at whitespace); the same ones at every checkpoint.
        steps: the step of each checkpoint; default: each one's ``training.json``, else its ``step-NNNNNN`` name.
        device, batch_size, progress: the extractor's options.

    Raises:
        ConfigError: no checkpoints or sentences, a sentence without words, ``steps`` of another length, or
            checkpoints of different shapes.
        InputError: a checkpoint whose step cannot be read, or that used another number of sentences.
    """
    folders = list(_folders(checkpoints))
    if not folders:
        raise ConfigError("head symmetry: expected at least one checkpoint, found none")
    if steps is not None and len(steps) != len(folders):
        raise ConfigError(f"head symmetry: expected one step per checkpoint ({len(folders)}), found {len(steps)}")
    items = _items(sentences)
    found = [int(s) for s in steps] if steps is not None else [_step_of(f, i) for i, f in enumerate(folders)]
    options = {"device": device, "batch_size": batch_size, "progress": progress}
    params: list[npt.NDArray[np.float64]] = []
    attention: list[npt.NDArray[np.float64]] = []
    used: int | None = None
    for folder in folders:
        p, a, n = _checkpoint(folder, items, options)
        if params and p.shape != params[0].shape:
            raise ConfigError(f"head symmetry: expected every checkpoint with {params[0].shape[0]} layers x "
                              f"{params[0].shape[1]} heads, found {p.shape[0]} x {p.shape[1]} in {folder}")
        if used is not None and n != used:
            raise InputError(f"expected the {used} sentences of the first checkpoint, found {n} (another tokenizer?)",
                             path=folder)
        params.append(p)
        attention.append(a)
        used = n
    return HeadSymmetry(np.asarray(found, dtype=np.int64), np.stack(params), np.stack(attention), int(used or 0))
