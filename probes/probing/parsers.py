"""Clark et al. 2019 §5 attention-based dependency parsers and their baselines.

* :class:`AttnParser` ("Attn"): ``p(c | i) ∝ exp(Σ_k θ_k F[k, i, c])`` over the
  ``K = 2 x layers x heads`` maps (both directions), ROOT scored from the
  special tokens with two learned scalars; no bias.
* :class:`AttnEmbParser` ("Attn+Emb", Clark's Attn+GloVe): the weight of map ``k``
  for the pair is predicted from the two words' static vectors,
  ``θ_k(i, c) = W_k · [v_c ; v_i] + b_k``, with a zero vector for the ROOT candidate.
  **Vectors are aligned as in the paper's formula** (candidate ``c`` gets word
  ``c``'s vector). The released code pairs candidate ``c`` with word ``c + 1``'s
  vector (clark_spec §5.2); that shift is *not* reproduced.
* :class:`DistancesEmbParser` ("Distances+Emb"): an MLP (256 tanh units) over
  Clark's 8 distance channels and ``[v_c ; v_i]`` (the paper's all-zero dummy
  channel is left out: it cannot change the output).
* :class:`RightBranching`: head = next word (offset +1); the last word's offset
  is clipped to itself (always wrong), as Clark's offset baselines clip (§3.4).

Training (shared, :class:`~probes.probing.train.SentenceProbe`): summed
cross-entropy over a sentence's words, Adam lr 0.002, one sentence per step,
one epoch in file order, TF1-style init (Glorot-uniform weights, zero biases,
ROOT scalars uniform in ``±√3``): Clark's settings, all of them parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from probes.corpora.types import Sentence
from probes.errors import ConfigError
from probes.extraction.attention import WordAttention
from probes.probing.decode import argmax_heads, uas_counts
from probes.probing.embeddings import StaticVectors
from probes.probing.features import attention_features, check_pair, distance_features
from probes.probing.train import Pair, SentenceProbe

__all__ = ["AttnParser", "AttnEmbParser", "DistancesEmbParser", "RightBranching"]


def _torch_features(attention: WordAttention, device: Any) -> tuple[Any, Any]:
    import torch

    pa = attention_features(attention)
    return torch.as_tensor(pa.words, device=device), torch.as_tensor(pa.root, device=device)


def _root_scalars() -> Any:
    import torch

    return torch.nn.Parameter(torch.empty(2).uniform_(-math.sqrt(3.0), math.sqrt(3.0)))


class AttnParser(SentenceProbe):
    """Clark's attention-only parser: one weight per attention map, plus two ROOT scalars.

    Args:
        epochs: passes over the training pairs (Clark: 1).
        learning_rate: Adam step size (Clark: 0.002).
        batch_size: sentences per optimiser step (Clark: 1).
        random_state: seed of the initialisation.
        device: torch device to train on (``"cuda"``), CPU by default.
        progress: show a progress bar on stderr.

    Attributes:
        module_: the trained torch module (``theta``: ``(K,)``, ``root``: ``(2,)``).
        n_sentences_seen_, n_words_seen_, n_skipped_: training counts.
    """

    display_name = "Attn"

    def __init__(
        self,
        *,
        epochs: int = 1,
        learning_rate: float = 0.002,
        batch_size: int = 1,
        random_state: int | None = 0,
        device: str | None = None,
        progress: bool = True,
    ) -> None:
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.random_state = random_state
        self.device = device
        self.progress = progress

    def _build(self, sentence: Sentence, attention: WordAttention) -> None:
        import torch

        self.n_layers_, self.n_heads_ = (int(x) for x in attention.weights.shape[:2])
        k = 2 * self.n_layers_ * self.n_heads_
        module = torch.nn.Module()
        bound = math.sqrt(6.0 / (k + 1))  # Glorot-uniform of a (K, 1) dense kernel
        module.theta = torch.nn.Parameter(torch.empty(k).uniform_(-bound, bound))
        module.root = _root_scalars()
        self.module_ = module

    def _logits(self, sentence: Sentence, attention: WordAttention) -> Any:
        import torch

        words, root = _torch_features(attention, self._device())  # (K, m, m), (K, m, 2)
        theta, scal = self.module_.get_parameter("theta"), self.module_.get_parameter("root")
        word_logits = torch.einsum("k,kic->ic", theta, words)  # (m, m)
        root_logits = torch.einsum("k,kir,r->i", theta, root, scal)  # (m,)
        return torch.cat([root_logits[:, None], word_logits], dim=1)  # (m, m + 1)

    def head_weights(self) -> npt.NDArray[np.float32]:
        """``(2, n_layers, n_heads)`` learned weight of each map (dep_to_head, head_to_dep)."""
        check_is_fitted(self, "module_")
        theta = self.module_.get_parameter("theta").detach().cpu().numpy()
        return theta.reshape(2, self.n_layers_, self.n_heads_)


class _EmbMixin(SentenceProbe):
    """Static vectors of a sentence as a torch tensor, with the parameter check."""

    vectors: StaticVectors | None

    def _vectors(self, sentence: Sentence) -> Any:
        import torch

        if self.vectors is None:
            raise ConfigError(
                f"{type(self).__name__} needs static word vectors: pass vectors=ModelInputVectors.from_model(...) "
                "or GloveVectors.load(path)"
            )
        return torch.as_tensor(np.asarray(self.vectors(sentence.words), dtype=np.float32), device=self._device())


class AttnEmbParser(_EmbMixin, SentenceProbe):
    """Clark's Attn+GloVe parser: map weights predicted from the two words' static vectors.

    Args:
        vectors: static word vectors (:class:`~probes.probing.embeddings.ModelInputVectors`
            or :class:`~probes.probing.embeddings.GloveVectors`).
        epochs, learning_rate, batch_size, random_state, device, progress: as :class:`AttnParser`.

    Attributes:
        module_: ``dense`` (``Linear(2d, K)``, the ``W_k, U_k, b_k``) and ``root`` ``(2,)``.
    """

    display_name = "Attn+Emb"

    def __init__(
        self,
        vectors: StaticVectors | None = None,
        *,
        epochs: int = 1,
        learning_rate: float = 0.002,
        batch_size: int = 1,
        random_state: int | None = 0,
        device: str | None = None,
        progress: bool = True,
    ) -> None:
        self.vectors = vectors
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.random_state = random_state
        self.device = device
        self.progress = progress

    def _build(self, sentence: Sentence, attention: WordAttention) -> None:
        import torch

        k = 2 * attention.weights.shape[0] * attention.weights.shape[1]
        d = self._vectors(sentence).shape[1]
        module = torch.nn.Module()
        module.dense = torch.nn.Linear(2 * d, k)  # input [v_candidate ; v_dependent]
        torch.nn.init.xavier_uniform_(module.dense.weight)
        torch.nn.init.zeros_(module.dense.bias)
        module.root = _root_scalars()
        self.module_ = module

    def _logits(self, sentence: Sentence, attention: WordAttention) -> Any:
        import torch

        words, root = _torch_features(attention, self._device())  # (K, m, m), (K, m, 2)
        v = self._vectors(sentence)  # (m, d)
        d = v.shape[1]
        w, b = self.module_.get_parameter("dense.weight"), self.module_.get_parameter("dense.bias")  # (K, 2d), (K,)
        w_cand = v @ w[:, :d].T  # (m, K): candidate word c's part
        w_dep = v @ w[:, d:].T + b  # (m, K): dependent i's part plus bias
        # sum_k (w_cand[c, k] + w_dep[i, k]) * F[k, i, c], without building (m, m, K).
        word_logits = torch.einsum("ck,kic->ic", w_cand, words) + torch.einsum("ik,kic->ic", w_dep, words)
        # ROOT candidate: zero vector, so only the dependent's part and the bias.
        root_logits = torch.einsum("ik,kir,r->i", w_dep, root, self.module_.get_parameter("root"))  # (m,)
        return torch.cat([root_logits[:, None], word_logits], dim=1)  # (m, m + 1)


class DistancesEmbParser(_EmbMixin, SentenceProbe):
    """Clark's Distances+GloVe baseline: an MLP over distance channels and the two words' vectors.

    Args:
        vectors: static word vectors.
        hidden: hidden units (Clark: 256, tanh).
        epochs, learning_rate, batch_size, random_state, device, progress: as :class:`AttnParser`.
    """

    display_name = "Distances+Emb"

    def __init__(
        self,
        vectors: StaticVectors | None = None,
        *,
        hidden: int = 256,
        epochs: int = 1,
        learning_rate: float = 0.002,
        batch_size: int = 1,
        random_state: int | None = 0,
        device: str | None = None,
        progress: bool = True,
    ) -> None:
        self.vectors = vectors
        self.hidden = hidden
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.random_state = random_state
        self.device = device
        self.progress = progress

    def _build(self, sentence: Sentence, attention: WordAttention) -> None:
        import torch

        d = self._vectors(sentence).shape[1]
        module = torch.nn.Module()
        module.hidden = torch.nn.Linear(8 + 2 * d, self.hidden)  # [distances ; v_c ; v_i]
        module.out = torch.nn.Linear(self.hidden, 1)
        for layer in (module.hidden, module.out):
            torch.nn.init.xavier_uniform_(layer.weight)
            torch.nn.init.zeros_(layer.bias)
        self.module_ = module

    def _logits(self, sentence: Sentence, attention: WordAttention) -> Any:
        import torch

        m = sentence.n_words
        dist = torch.as_tensor(distance_features(m), device=self._device())  # (m, m + 1, 8)
        v = self._vectors(sentence)  # (m, d)
        d = v.shape[1]
        w, b = self.module_.get_parameter("hidden.weight"), self.module_.get_parameter("hidden.bias")  # (h, 8 + 2d)
        h_dist = dist @ w[:, :8].T  # (m, m + 1, h)
        h_cand = torch.cat([torch.zeros_like(v[:1]), v]) @ w[:, 8 : 8 + d].T  # (m + 1, h), ROOT = 0 vector
        h_dep = v @ w[:, 8 + d :].T + b  # (m, h)
        h = torch.tanh(h_dist + h_cand[None, :, :] + h_dep[:, None, :])  # (m, m + 1, h)
        return self.module_.get_submodule("out")(h).squeeze(-1)  # (m, m + 1)


class RightBranching(BaseEstimator):
    """Baseline: every word's head is the next word (offset +1, clipped to the last word).

    Nothing is learned; ``fit`` only records that it was called.
    """

    display_name = "right-branching"

    def __init__(self) -> None:
        pass

    def fit(self, X: Iterable[Pair] | None = None, y: None = None) -> RightBranching:
        """No-op (returns ``self``)."""
        self.fitted_ = True
        return self

    def predict_log_proba_one(self, sentence: Sentence, attention: WordAttention | None) -> npt.NDArray[np.float32]:
        """``(m, m + 1)`` log-probabilities: 0 at the next word, a large negative elsewhere."""
        check_is_fitted(self, "fitted_")
        if attention is not None:
            check_pair(sentence, attention)
        m = sentence.n_words
        out = np.full((m, m + 1), -1e9, dtype=np.float32)
        out[np.arange(m), np.minimum(np.arange(m) + 2, m)] = 0.0
        return out

    def predict(self, X: Iterable[Pair]) -> list[npt.NDArray[np.int64]]:
        """Predicted heads of every sentence."""
        return [argmax_heads(self.predict_log_proba_one(s, a)) for s, a in X]

    def score(self, X: Iterable[Pair], y: None = None) -> float:
        """UAS, punctuation excluded."""
        correct = total = 0
        for s, a in X:
            c, t = uas_counts(argmax_heads(self.predict_log_proba_one(s, a)), s)
            correct, total = correct + c, total + t
        return correct / total if total else float("nan")
