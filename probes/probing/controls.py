"""Controls that separate what a head encodes from what a probe learns on its own.

* :class:`ControlTask` (Hewitt & Liang 2019, the default): every word *type* is given, once and
  at random (uniformly, seeded), one of three behaviours: attach to itself, to the first word
  of the sentence, or to the last word of the sentence (their released code,
  ``CorruptedEdgePositionTask`` with every type corrupted). **Selectivity** = accuracy - control
  accuracy: what a probe gets right on the task beyond what it can memorise per word type.
* :class:`OffsetControlTask` (the earlier variant, ``control="offset"``): each type attaches at a
  consistent relative offset (or to ROOT) drawn from the training set's gold offset distribution.
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
from probes.errors import ConfigError
from probes.extraction.families import embedding_parameters

__all__ = ["ControlTask", "OffsetControlTask", "CONTROL_KINDS", "make_control", "random_init_copy", "selectivity",
           "ROOT_BEHAVIOUR", "BEHAVIOURS"]

#: Behaviour "attach to ROOT" in :attr:`OffsetControlTask.offsets_`.
ROOT_BEHAVIOUR = 0
#: Hewitt & Liang's three behaviours, in the order of their code (0 self, 1 first word, 2 last word).
BEHAVIOURS: tuple[str, str, str] = ("self", "first", "last")
#: What ``control=`` accepts.
CONTROL_KINDS: tuple[str, ...] = ("hewitt-liang", "offset")


def _uniform(random_state: int, word: str) -> float:
    """A fixed uniform draw in [0, 1) for ``(random_state, word)`` (order-free, the same in every process)."""
    digest = hashlib.blake2b(f"{random_state}\x00{word}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


@dataclass
class ControlTask:
    """Hewitt & Liang's (2019) dependency control task: each word type attaches to itself, the first or the last word.

    Each word *type* (the exact word form, as in their code) gets one of :data:`BEHAVIOURS`, drawn
    uniformly at random once, from a hash of ``random_state`` and the type (so the mapping needs no
    type table and is the same for train and test, for unseen types and across processes). The
    control head of word ``i`` of an ``m``-word sentence is then ``i`` (itself), ``1`` or ``m``
    (CoNLL-U numbering); ROOT is never a control head. Relations are kept, so punctuation is
    excluded from scores as on the task.

    Args:
        random_state: seed of the type -> behaviour mapping.
    """

    random_state: int = 0

    def fit(self, sentences: Iterable[Sentence] | None = None) -> ControlTask:
        """Nothing to learn (kept for the scikit-learn-like API); returns ``self``."""
        return self

    def with_seed(self, random_state: int) -> ControlTask:
        """The same task with another mapping seed."""
        return replace(self, random_state=random_state)

    def behaviour(self, word: str) -> str:
        """``"self"``, ``"first"`` or ``"last"``: the behaviour of a word type."""
        return BEHAVIOURS[min(int(_uniform(self.random_state, word) * 3), 2)]

    def heads(self, sentence: Sentence) -> tuple[int, ...]:
        """Control heads of a sentence (CoNLL-U numbering: 1..m; a word may head itself)."""
        m = sentence.n_words
        target = {"first": 1, "last": m}
        return tuple(i if (b := self.behaviour(w)) == "self" else target[b]
                     for i, w in enumerate(sentence.words, start=1))

    def relabel(self, sentence: Sentence) -> Sentence:
        """The sentence with its heads replaced by the control heads (relations kept)."""
        return replace(sentence, heads=self.heads(sentence))

    def describe(self) -> dict[str, Any]:
        """For run records."""
        return {"kind": "hewitt-liang",
                "definition": "Hewitt & Liang 2019: each word type (exact form) is given, once, uniformly at random, "
                              "one of: attach to itself, to the first word, to the last word of the sentence",
                "random_state": self.random_state}


@dataclass
class OffsetControlTask:
    """A type-consistent relative-attachment control task (the variant used before Hewitt & Liang's).

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

    def with_seed(self, random_state: int) -> OffsetControlTask:
        """The same fitted distribution with another mapping seed."""
        other = OffsetControlTask(self.max_offset, random_state)
        other._counts.update(self._counts)
        return other.finalize() if hasattr(self, "offsets_") else other

    def update(self, sentence: Sentence) -> None:
        """Count the gold offsets of one training sentence."""
        heads = np.asarray(sentence.heads)
        pos = np.arange(1, len(heads) + 1)
        off = np.where(heads == 0, ROOT_BEHAVIOUR, np.clip(heads - pos, -self.max_offset, self.max_offset))
        self._counts.update(int(o) for o in off)

    def fit(self, sentences: Iterable[Sentence]) -> OffsetControlTask:
        """Learn the offset distribution from training sentences (streaming); returns ``self``."""
        self._counts.clear()
        for s in sentences:
            self.update(s)
        return self.finalize()

    def finalize(self) -> OffsetControlTask:
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
            raise ValueError("OffsetControlTask is not fitted: call fit(sentences) first")
        u = _uniform(self.random_state, word.lower())
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
            "kind": "offset",
            "definition": "word type (lowercased) -> consistent offset (or ROOT), drawn from the training "
                          "set's gold offsets",
            "max_offset": self.max_offset,
            "random_state": self.random_state,
            "behaviours": {("ROOT" if k == 0 else f"{k:+d}"): float(p)
                           for k, p in zip(getattr(self, "offsets_", []), getattr(self, "probabilities_", []))},
        }


def make_control(kind: str, random_state: int = 0,
                 sentences: Iterable[Sentence] | None = None) -> ControlTask | OffsetControlTask:
    """The control task named ``kind`` (:data:`CONTROL_KINDS`), fitted on ``sentences`` where it needs them."""
    if kind == "hewitt-liang":
        return ControlTask(random_state)
    if kind == "offset":
        if sentences is None:
            raise ConfigError("the offset control task needs the training sentences (its offset distribution)")
        return OffsetControlTask(random_state=random_state).fit(sentences)
    raise ConfigError(f"control: expected one of {', '.join(CONTROL_KINDS)}, found {kind!r}")


def selectivity(
    accuracy: npt.ArrayLike,
    control_accuracy: npt.ArrayLike,
    floor: npt.ArrayLike | None = None,
    control_floor: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float64]:
    """Hewitt & Liang's selectivity, accuracy minus control-task accuracy (elementwise).

    With ``floor`` and ``control_floor`` (the *floor-adjusted* variant, secondary in every table) (the accuracy of the same probe without
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
