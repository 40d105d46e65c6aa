"""Controls that separate what a head encodes from what a probe learns on its own.

* :class:`ControlTask` (Hewitt & Liang 2019): every word *type* gets a random but
  consistent attachment behaviour, "attach to the word at offset ``k_type``"
  (or to ROOT). Offsets are drawn from the gold offset distribution of the
  training corpus, so a probe that only uses position scores about the same on
  the real and the control task, and **selectivity** = accuracy - control
  accuracy isolates what the attention adds beyond position and memorisation.
* :func:`random_init_copy` (Clark et al. 2019 §5.2): a copy of the model with
  every weight re-initialised except the word and position embeddings.
"""

from __future__ import annotations

import copy
import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.corpora.types import Sentence
from probes.extraction.families import embedding_parameters

__all__ = ["ControlTask", "random_init_copy", "selectivity", "ROOT_BEHAVIOUR"]

#: Behaviour "attach to ROOT" in :attr:`ControlTask.offsets`.
ROOT_BEHAVIOUR = 0


@dataclass
class ControlTask:
    """Hewitt & Liang's dependency control task, type-consistent relative attachment.

    Each word type (lowercased form) is hashed with ``random_state`` to a
    behaviour: an offset ``k != 0`` ("attach to word ``i + k``", clipped into the
    sentence; a clip that lands on the word itself attaches to ROOT) or ROOT.
    Behaviours are drawn from the distribution of gold offsets (words farther
    than ``max_offset`` pooled at ``±max_offset``) seen by :meth:`fit`. The
    hash needs no type table, so the mapping is the same for unseen types, for
    train and test, and across processes.

    Args:
        max_offset: largest offset kept as its own behaviour.
        random_state: seed of the type -> behaviour mapping.

    Attributes:
        offsets_: behaviours (``0`` = ROOT), and probabilities_ their probabilities.
    """

    max_offset: int = 5
    random_state: int = 0
    _counts: Counter[int] = field(default_factory=Counter, repr=False, init=False)

    def update(self, sentence: Sentence) -> None:
        """Count the gold offsets of one training sentence."""
        heads = np.asarray(sentence.heads)
        pos = np.arange(1, len(heads) + 1)
        off = np.where(heads == 0, ROOT_BEHAVIOUR, np.clip(heads - pos, -self.max_offset, self.max_offset))
        self._counts.update(int(o) for o in off)

    def fit(self, sentences: Iterable[Sentence]) -> ControlTask:
        """Learn the offset distribution from training sentences (streaming); returns ``self``."""
        self._counts.clear()
        for s in sentences:
            self.update(s)
        return self.finalize()

    def finalize(self) -> ControlTask:
        """Freeze the distribution counted by :meth:`update`."""
        keys = sorted(self._counts)
        total = sum(self._counts.values())
        self.offsets_ = np.asarray(keys, dtype=np.int64)
        self.probabilities_ = np.asarray([self._counts[k] / total for k in keys]) if total else np.zeros(0)
        self._cdf = np.cumsum(self.probabilities_)
        return self

    def behaviour(self, word: str) -> int:
        """The offset (0 = ROOT) of a word type."""
        if not hasattr(self, "offsets_") or len(self.offsets_) == 0:
            raise ValueError("ControlTask is not fitted: call fit(sentences) first")
        digest = hashlib.blake2b(f"{self.random_state}\x00{word.lower()}".encode(), digest_size=8).digest()
        u = int.from_bytes(digest, "little") / 2.0**64  # uniform in [0, 1)
        return int(self.offsets_[min(int(np.searchsorted(self._cdf, u, side="right")), len(self.offsets_) - 1)])

    def heads(self, sentence: Sentence) -> tuple[int, ...]:
        """Control heads of a sentence (CoNLL-U numbering, 0 = ROOT)."""
        m = sentence.n_words
        out = []
        for i, word in enumerate(sentence.words, start=1):
            k = self.behaviour(word)
            h = 0 if k == ROOT_BEHAVIOUR else min(max(i + k, 1), m)
            out.append(0 if h == i else h)
        return tuple(out)

    def relabel(self, sentence: Sentence) -> Sentence:
        """The sentence with its heads replaced by the control heads (relations kept)."""
        return replace(sentence, heads=self.heads(sentence))

    def describe(self) -> dict[str, Any]:
        """For run records."""
        return {
            "kind": "Hewitt & Liang 2019 control task: word type -> consistent offset (or ROOT)",
            "max_offset": self.max_offset,
            "random_state": self.random_state,
            "behaviours": {("ROOT" if k == 0 else f"{k:+d}"): float(p)
                           for k, p in zip(getattr(self, "offsets_", []), getattr(self, "probabilities_", []))},
        }


def selectivity(
    accuracy: npt.ArrayLike,
    control_accuracy: npt.ArrayLike,
    floor: npt.ArrayLike | None = None,
    control_floor: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """Hewitt & Liang's selectivity, accuracy minus control-task accuracy (elementwise).

    With ``floor`` and ``control_floor`` (the accuracy of the same probe without
    attention, on the task and on the control task), the gains over those floors
    are compared instead: ``(accuracy - floor) - (control_accuracy - control_floor)``.
    Per-head probes carry explicit position features, and the two tasks need not be
    equally easy from position alone; the floor-adjusted form is what a head adds
    on the task beyond what it adds on the control task, so it is ~0 for a head
    that carries no information and the raw form is the difference of the floors.
    """
    out = np.asarray(accuracy, dtype=np.float64) - np.asarray(control_accuracy, dtype=np.float64)
    if floor is not None and control_floor is not None:
        out = out - (np.asarray(floor, dtype=np.float64) - np.asarray(control_floor, dtype=np.float64))
    return out


def random_init_copy(model: Any, *, random_state: int = 0) -> tuple[Any, list[str]]:
    """A copy of ``model`` with every weight re-initialised except word and position embeddings.

    Clark et al. 2019 §5.2 trained their Attn+GloVe probe on "BERT with random
    initialisation" keeping the word and position embeddings; whether they kept
    token-type embeddings and the embedding LayerNorm is not stated. Here those
    are re-initialised (LayerNorm to its identity init ``1, 0``). Which parameters are the
    word and position embeddings is a model-family fact
    (:func:`probes.extraction.families.embedding_parameters`; GPT-2: ``wte``, ``wpe``;
    rotary models such as Llama have no position embeddings to keep). Linear and
    embedding weights are drawn from ``N(0, initializer_range)`` (BERT: 0.02; the
    config's value, 0.02 if absent), biases set to 0.

    Args:
        model: a Hugging Face (PyTorch) model.
        random_state: torch seed of the new weights.

    Returns:
        ``(new_model, kept)`` where ``kept`` lists the parameter names copied unchanged.
    """
    import torch

    std = float(getattr(getattr(model, "config", None), "initializer_range", 0.02) or 0.02)
    fresh = copy.deepcopy(model)
    gen = torch.Generator(device="cpu").manual_seed(random_state)
    keep = set(embedding_parameters(fresh))
    kept: list[str] = []
    with torch.no_grad():
        for name, param in fresh.named_parameters():
            if name in keep:
                kept.append(name)
                continue
            leaf = name.rsplit(".", 1)[-1]
            owner = fresh.get_submodule(name.rsplit(".", 1)[0]) if "." in name else fresh
            if isinstance(owner, torch.nn.LayerNorm) or "LayerNorm" in type(owner).__name__:
                param.fill_(1.0 if leaf == "weight" else 0.0)
            elif leaf == "bias":
                param.zero_()
            else:
                param.copy_(torch.randn(param.shape, generator=gen) * std)
    fresh.eval()
    return fresh, kept
