"""Streaming training of torch probes over ``(Sentence, WordAttention)`` pairs.

Every probe here is a scikit-learn estimator whose ``X`` is an iterable of
``(Sentence, WordAttention)`` pairs (from a live extractor or a store) instead of
a matrix: attention maps of a corpus do not fit in memory, so training streams,
one sentence (or ``batch_size`` sentences) per optimiser step, in input order.
``epochs > 1`` needs a re-iterable ``X`` (a store, a list), since each epoch is
one more pass over it. Memory is bounded by one batch of sentences.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from probes.corpora.types import Sentence
from probes.errors import ConfigError, SkippedItemWarning
from probes.extraction.attention import WordAttention
from probes.probing.decode import argmax_heads, uas_counts

__all__ = ["SentenceProbe", "iter_pairs", "fit_together", "single_thread", "ShuffleBuffer", "SHUFFLE_BUFFER"]

log = logging.getLogger("probes")

Pair = tuple[Sentence, WordAttention]


def iter_pairs(X: Iterable[Pair], *, progress: bool, desc: str) -> Iterator[Pair]:
    """``X`` with a progress bar on stderr (when ``progress``; :func:`probes.progress.iterate`)."""
    if not progress:
        yield from X
        return
    from probes.progress import iterate

    yield from iterate(X, desc, unit="sent", leave=False)


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch CPU ops on one thread inside the block (restored after).

    A probe's per-sentence tensors are tiny; intra-op threads only add overhead
    there (up to 10x slower on a busy 2-core machine), while the extraction
    feeding the stream keeps all threads.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: Sentences held by each seeded shuffle buffer of :func:`fit_together`.
SHUFFLE_BUFFER = 64


class ShuffleBuffer:
    """A seeded streaming shuffle: hold ``size`` items, emit a random one for each new item past ``size``.

    Every seed gets its own order of one stream without a second pass over it (memory: ``size`` items).
    """

    def __init__(self, seed: int, size: int = SHUFFLE_BUFFER) -> None:
        self.rng, self.size = np.random.default_rng(seed), size
        self.items: list[Any] = []

    def push(self, item: Any) -> list[Any]:
        """Add ``item``; returns the items to use now (none until the buffer is full, then one)."""
        self.items.append(item)
        if len(self.items) <= self.size:
            return []
        j = int(self.rng.integers(len(self.items)))
        self.items[j], self.items[-1] = self.items[-1], self.items[j]
        return [self.items.pop()]

    def drain(self) -> list[Any]:
        """The held items, in a random order (end of a pass)."""
        order = self.rng.permutation(len(self.items))
        out, self.items = [self.items[i] for i in order], []
        return out


def fit_together(
    probes: Sequence[SentenceProbe],
    X: Iterable[Pair],
    *,
    transforms: Sequence[Callable[[Sentence], Sentence] | None] | None = None,
    orders: Sequence[int | None] | None = None,
    epochs: int = 1,
    progress: bool = True,
    desc: str = "training",
) -> None:
    """Train several probes from scratch in lockstep over one stream (one extraction for all).

    Args:
        probes: unfitted (or to-be-refitted) probes; their own ``epochs`` is ignored.
        X: ``(Sentence, WordAttention)`` pairs (re-iterable when ``epochs > 1``).
        transforms: per probe, an optional ``Sentence -> Sentence`` applied before it
            sees the sentence (e.g. a control task's relabelling).
        orders: per probe, ``None`` (input order) or a seed: probes with the same seed read the
            stream through one :class:`ShuffleBuffer` of :data:`SHUFFLE_BUFFER` sentences seeded with it.
        epochs: passes over ``X``.
        progress: progress bar on stderr.
        desc: progress bar label.
    """
    transforms = list(transforms) if transforms is not None else [None] * len(probes)
    orders = list(orders) if orders is not None else [None] * len(probes)
    if len(transforms) != len(probes) or len(orders) != len(probes):
        raise ConfigError(f"fit_together: expected {len(probes)} transforms and orders (one per probe), "
                          f"found {len(transforms)} and {len(orders)}")
    if epochs > 1 and iter(X) is X:
        raise ConfigError(f"epochs={epochs} needs a re-iterable X (a store or a list), found a one-shot iterator")
    for probe in probes:
        probe._validate_params()
        for attr in [a for a in vars(probe) if a.endswith("_") and not a.startswith("_")]:
            delattr(probe, attr)
    groups: dict[int | None, list[int]] = {}
    for k, seed in enumerate(orders):
        groups.setdefault(seed, []).append(k)
    buffers = {seed: ShuffleBuffer(seed) for seed in groups if seed is not None}

    def learn(members: list[int], pairs: Iterable[Pair]) -> None:
        for sentence, attention in pairs:
            for k in members:
                transform = transforms[k]
                probes[k]._learn_one(transform(sentence) if transform else sentence, attention)

    for epoch in range(epochs):
        for pair in iter_pairs(X, progress=progress, desc=f"{desc} epoch {epoch + 1}/{epochs}"):
            for seed, members in groups.items():
                learn(members, [pair] if seed is None else buffers[seed].push(pair))
        for seed, buffer in buffers.items():
            learn(groups[seed], buffer.drain())
        for probe in probes:
            probe._flush()


def _check_positive_int(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"The {name!r} parameter of {owner} must be an int >= 1. Got {value!r} instead.")


class SentenceProbe(BaseEstimator):
    """Base class: a torch head-selection probe trained by streaming over sentences.

    Subclasses implement ``_build(sentence, attention)`` (create ``self.module_``)
    and ``_logits(sentence, attention)`` (candidate logits ``(m, m + 1)``, ROOT
    first, or ``(n_probes, m, m + 1)`` for a bank of probes), and may override
    ``_loss``. Training: per-word softmax over ROOT + the ``m`` words (self
    allowed), cross-entropy **summed** over the words of a batch, Adam
    (Clark et al. 2019 §5.3: batch of one sentence, lr 0.002, one epoch, file order).
    """

    #: Name shown on progress bars and in tables.
    display_name = "probe"

    # --- scikit-learn API -------------------------------------------------------------------
    def fit(self, X: Iterable[Pair], y: None = None) -> SentenceProbe:
        """Train from scratch for ``epochs`` passes over ``X``.

        Args:
            X: ``(Sentence, WordAttention)`` pairs; gold heads come from the sentences.
            y: ignored (present for the scikit-learn signature).

        Returns:
            ``self``.
        """
        self._validate_params()
        if self.epochs > 1 and iter(X) is X:
            raise ConfigError(
                f"epochs={self.epochs} needs a re-iterable X (a store or a list), found a one-shot iterator"
            )
        for attr in [a for a in vars(self) if a.endswith("_") and not a.startswith("_")]:
            delattr(self, attr)
        for epoch in range(self.epochs):
            self._one_pass(X, desc=f"{self.display_name} epoch {epoch + 1}/{self.epochs}")
        return self

    def partial_fit(self, X: Iterable[Pair], y: None = None) -> SentenceProbe:
        """One more pass over ``X``, continuing from the current state (or from scratch)."""
        self._validate_params()
        self._one_pass(X, desc=self.display_name)
        return self

    def predict(self, X: Iterable[Pair]) -> list[npt.NDArray[np.int64]]:
        """Predicted head of every word of every sentence (argmax, CoNLL-U numbering)."""
        return [argmax_heads(self.predict_log_proba_one(s, a)) for s, a in X]

    def predict_log_proba_one(self, sentence: Sentence, attention: WordAttention) -> npt.NDArray[np.float32]:
        """``(m, m + 1)`` (or ``(n_probes, m, m + 1)``) log-probabilities of the candidates."""
        import torch

        check_is_fitted(self, "module_")
        self._check_item(sentence, attention)
        with torch.no_grad(), single_thread():
            logits = self._logits(sentence, attention)
            return torch.log_softmax(logits, dim=-1).cpu().numpy()

    def score(self, X: Iterable[Pair], y: None = None) -> float:
        """UAS (punctuation excluded, Clark et al. §5.4) over the sentences of ``X``."""
        correct = total = 0
        for sentence, attention in X:
            c, t = uas_counts(argmax_heads(self.predict_log_proba_one(sentence, attention)), sentence)
            correct, total = correct + c, total + t
        return correct / total if total else float("nan")

    # --- training loop ---------------------------------------------------------------------
    def _validate_params(self) -> None:
        name = type(self).__name__
        _check_positive_int(name, "epochs", self.epochs)
        _check_positive_int(name, "batch_size", self.batch_size)
        if not (isinstance(self.learning_rate, (int, float)) and self.learning_rate > 0):
            raise ConfigError(
                f"The 'learning_rate' parameter of {name} must be a float > 0. Got {self.learning_rate!r} instead."
            )

    def _device(self) -> Any:
        import torch

        return torch.device(self.device or "cpu")

    def _check_item(self, sentence: Sentence, attention: WordAttention) -> bool:
        """True when the pair can be used; a mismatch raises (see features.check_pair)."""
        from probes.probing.features import check_pair

        check_pair(sentence, attention)
        return sentence.n_words > 0

    def _gold(self, sentence: Sentence) -> Any:
        import torch

        return torch.as_tensor(np.asarray(sentence.heads, dtype=np.int64), device=self._device())

    def _loss(self, sentence: Sentence, attention: WordAttention) -> Any:
        import torch.nn.functional as F

        return F.cross_entropy(self._logits(sentence, attention), self._gold(sentence), reduction="sum")

    def _one_pass(self, X: Iterable[Pair], *, desc: str) -> None:
        for sentence, attention in iter_pairs(X, progress=self.progress, desc=desc):
            self._learn_one(sentence, attention)
        self._flush()

    def _learn_one(self, sentence: Sentence, attention: WordAttention) -> None:
        """Add one training sentence; take an optimiser step when the batch is full."""
        import torch

        if attention.n_words != sentence.n_words or sentence.n_words == 0:
            self._n_pending_skips = getattr(self, "_n_pending_skips", 0) + 1
            return
        if not hasattr(self, "module_"):
            torch.manual_seed(self.random_state if self.random_state is not None else 0)
            self._build(sentence, attention)
            self.module_.to(self._device())
            self.optimizer_ = torch.optim.Adam(self.module_.parameters(), lr=self.learning_rate)
            self.n_sentences_seen_ = 0
            self.n_words_seen_ = 0
            self.n_skipped_ = 0
            self._pending: list[Any] = []
        self.module_.train()
        with single_thread():
            self._pending.append(self._loss(sentence, attention))
            if len(self._pending) >= self.batch_size:
                self._step(self._pending)
                self._pending = []
        self.n_sentences_seen_ += 1
        self.n_words_seen_ += sentence.n_words

    def _flush(self) -> None:
        """Step on a last, partial batch; report skipped sentences."""
        skipped, self._n_pending_skips = getattr(self, "_n_pending_skips", 0), 0
        if not hasattr(self, "module_"):
            raise ConfigError(f"{type(self).__name__}.fit: found no usable sentence in X ({skipped} skipped)")
        if self._pending:
            with single_thread():
                self._step(self._pending)
            self._pending = []
        self.module_.eval()
        if skipped:
            self.n_skipped_ += skipped
            log.warning("%s: skipped %d sentence(s) whose attention does not cover all words",
                        type(self).__name__, skipped)
            warnings.warn(
                f"{type(self).__name__}: skipped {skipped} sentence(s) whose attention does not cover all words",
                SkippedItemWarning,
                stacklevel=4,
            )

    def _step(self, losses: list[Any]) -> None:
        self.optimizer_.zero_grad()
        total = losses[0]
        for loss in losses[1:]:
            total = total + loss
        total.backward()
        self.optimizer_.step()

    # --- for subclasses ----------------------------------------------------------------------
    def _build(self, sentence: Sentence, attention: WordAttention) -> None:  # pragma: no cover
        raise NotImplementedError

    def _logits(self, sentence: Sentence, attention: WordAttention) -> Any:  # pragma: no cover
        raise NotImplementedError
