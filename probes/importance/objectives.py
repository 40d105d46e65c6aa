"""What a head intervention is measured on: objectives with one loss per sentence.

An :class:`Objective` prepares each batch once on the unmodified model (``prepare``: masks, reference
states, labels), then gives each sentence's loss under whatever interventions are active
(``losses``: differentiable, so gate gradients flow) and, for reports, named per-sentence metrics
(``evaluate``: always ``"loss"``, plus e.g. ``"accuracy"``).

* :class:`LanguageModelObjective`: masked LM with seeded 15% masking (encoders) or next token (decoders);
  needs a checkpoint with its LM head (:func:`probes.extraction.gradients.load_lm`).
* :class:`RepresentationObjective`: 1 - cosine between the intervened and the original mean-pooled final
  hidden states (mean over non-padding tokens, all-MiniLM-L6-v2's pooling); any model.
* :class:`ProbeObjective`: a linear probe on the last layer's word states predicting each word's
  dependency relation, fitted once on the unmodified model (:meth:`ProbeObjective.fit`).
* :class:`CallableObjective`: any ``fn(model, batch) -> (B,) losses``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError, ModelOutputError
from probes.importance.batches import Batch

__all__ = ["Objective", "LanguageModelObjective", "RepresentationObjective", "ProbeObjective", "CallableObjective",
           "OBJECTIVES", "LM_KINDS", "mean_pool", "word_states", "probe_label"]

#: Names accepted by ``--objective``.
OBJECTIVES: tuple[str, ...] = ("lm", "representation", "probe")


@runtime_checkable
class Objective(Protocol):
    """A loss per sentence, lower is better."""

    name: str

    def prepare(self, model: Any, batch: Batch) -> Batch:
        """Add what ``losses`` needs to ``batch.extras`` (run once per batch, unmodified model, no grad)."""
        ...

    def losses(self, model: Any, batch: Batch) -> Any:
        """``(B,)`` each sentence's loss under the active interventions (differentiable)."""
        ...

    def evaluate(self, model: Any, batch: Batch) -> dict[str, Any]:
        """``{"loss": (B,), ...}`` per-sentence metrics as float64 numpy arrays, no grad (``"loss"`` equals
        ``losses``)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the objective is, for the run record."""
        ...


# ----------------------------------------------------------------------------- shared helpers
def _numpy(values: Any) -> npt.NDArray[np.float64]:
    """``(B,)`` a loss tensor as float64 numpy, off the graph."""
    return values.detach().double().cpu().numpy()


def _hidden(model: Any, batch: Batch) -> Any:
    """``(B, T, D)`` the last hidden states of the base model (an LM's head is not run)."""
    base = getattr(model, "base_model", model)
    out = base(**batch.model_inputs(), use_cache=False)
    hidden = getattr(out, "last_hidden_state", None)
    return out[0] if hidden is None else hidden


def _check_losses(losses: Any, batch: Batch, name: str) -> Any:
    """``losses`` if it is a ``(B,)`` tensor, else :class:`ModelOutputError` naming the shapes."""
    shape = tuple(getattr(losses, "shape", ()))
    if shape != (len(batch.sentences),):
        raise ModelOutputError(f"objective {name!r}: expected one loss per sentence, shape ({len(batch.sentences)},), "
                               f"found {type(losses).__name__} of shape {shape}")
    return losses


def _evaluate(objective: Any, model: Any, batch: Batch) -> dict[str, npt.NDArray[np.float64]]:
    """``{"loss": (B,)}`` float64 numpy, no grad."""
    import torch

    with torch.no_grad():
        return {"loss": _numpy(objective.losses(model, batch))}


# ----------------------------------------------------------------------------- representation
def mean_pool(hidden: Any, attention_mask: Any) -> Any:
    """``(B, D)`` mean of ``hidden`` ``(B, T, D)`` over the non-padding tokens (specials included, as
    sentence-transformers' mean pooling of all-MiniLM-L6-v2)."""
    real = attention_mask[..., None] != 0  # (B, T, 1)
    # masked_fill, not a product: some models leave NaN at padding (ModernBERT, float64, eager), and 0 * NaN = NaN.
    return hidden.masked_fill(~real, 0).sum(dim=1) / real.sum(dim=1).clamp(min=1).to(hidden.dtype)


class RepresentationObjective:
    """1 - cos(pooled intervened, pooled original), mean pooling over non-padding final hidden states.

    ``prepare`` stores the unmodified model's pooled states as ``batch.extras["reference"]`` ``(B, D)``.
    The loss is 0 at the unmodified model and that is its minimum, so its gradient w.r.t. the gates is 0
    there: Michel's first-order score says nothing on it. The objective is *stationary*: with ``e`` the
    unit-length pooled state (:meth:`embedding`), ``1 - cos = |e - e_ref|^2 / 2`` exactly, and importance
    uses the Gauss-Newton term instead (:mod:`probes.importance.scores`).
    """

    name = "representation"
    #: Reads only the model's output: batched leave-one-out may replay the layers below an ablation.
    final_states_only = True
    #: The loss is at its minimum on the unmodified model (gate gradients vanish there).
    stationary = True

    def prepare(self, model: Any, batch: Batch) -> Batch:
        import torch

        with torch.no_grad():
            batch.extras["reference"] = mean_pool(_hidden(model, batch), batch.attention_mask).detach()
        return batch

    def _reference(self, batch: Batch) -> Any:
        reference = batch.extras.get("reference")
        if reference is None:
            raise ConfigError("representation objective: expected a prepared batch (objective.prepare(model, batch) "
                              "on the unmodified model), found no reference states")
        return reference

    def embedding(self, model: Any, batch: Batch) -> tuple[Any, Any]:
        """``(e, e_ref)``, each ``(B, D)``: unit-length pooled states under the active interventions, and the
        unmodified model's (``losses == |e - e_ref|^2 / 2``)."""
        import torch

        pooled = mean_pool(_hidden(model, batch), batch.attention_mask)  # (B, D)
        reference = self._reference(batch).to(pooled.dtype)
        return (torch.nn.functional.normalize(pooled, dim=-1), torch.nn.functional.normalize(reference, dim=-1))

    def losses(self, model: Any, batch: Batch) -> Any:
        import torch

        pooled = mean_pool(_hidden(model, batch), batch.attention_mask)  # (B, D)
        return 1 - torch.nn.functional.cosine_similarity(pooled, self._reference(batch).to(pooled.dtype), dim=-1)

    def evaluate(self, model: Any, batch: Batch) -> dict[str, Any]:
        return _evaluate(self, model, batch)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name,
                "rule": "1 - cosine(mean-pooled final hidden states with the intervention, the same without); "
                        "mean over non-padding tokens, specials included; one loss per sentence",
                "note": "the loss is at its minimum (0) without intervention, so its gate gradient is 0 there; "
                        "importance uses the Gauss-Newton term |de/dg_h|^2 / 2 (e: unit pooled state)"}


# ----------------------------------------------------------------------------- language model
LM_KINDS: tuple[str, ...] = ("masked-lm", "causal-lm")


class LanguageModelObjective:
    """Masked LM (seeded 15%, 80/10/10 per sentence index) or next-token LM; mean cross-entropy per sentence.

    ``kind`` is :func:`probes.extraction.gradients.load_lm`'s objective; the model must carry its LM head.
    The masks are those of :func:`probes.extraction.gradients.encode_items` (``default_rng([seed, index])``
    per sentence index), so they do not depend on batching. ``prepare`` stores ``extras["input_ids"]``
    (masked ids; masked LM only) and ``extras["labels"]`` ``(B, T)``. A decoder sentence of one token
    has nothing to predict: its loss is 0 (counted in ``describe``).
    """

    name = "lm"
    #: Reads only the model's output: batched leave-one-out may replay the layers below an ablation.
    final_states_only = True

    def __init__(self, tokenizer: Any, kind: str, *, seed: int = 0) -> None:
        if kind not in LM_KINDS:
            raise ConfigError(f"lm objective kind: expected one of {', '.join(LM_KINDS)}, found {kind!r}")
        if kind == "masked-lm" and getattr(tokenizer, "mask_token_id", None) is None:
            raise ConfigError("lm objective: a masked LM needs a tokenizer with a mask token; found none")
        self.tokenizer, self.kind, self.seed = tokenizer, kind, int(seed)
        self.n_nothing_to_predict = 0

    def prepare(self, model: Any, batch: Batch) -> Batch:
        import torch

        from probes.extraction.gradients import _mask

        if self.kind == "causal-lm":
            batch.extras["labels"] = batch.input_ids.clone()
            self.n_nothing_to_predict += sum(s.input_ids.shape[0] < 2 for s in batch.sentences)
            return batch
        ids = batch.input_ids.detach().cpu().numpy().copy()  # (B, T)
        labels = np.full_like(ids, -100)
        for b, s in enumerate(batch.sentences):
            n = s.input_ids.shape[0]
            ids[b, :n], labels[b, :n] = _mask(s.input_ids, s.word_index < 0, self.tokenizer,
                                              np.random.default_rng([self.seed, s.index]))
        device = batch.input_ids.device
        batch.extras["input_ids"] = torch.from_numpy(ids).to(device)
        batch.extras["labels"] = torch.from_numpy(labels).to(device)
        return batch

    def losses(self, model: Any, batch: Batch) -> Any:
        from probes.extraction.gradients import lm_losses

        labels = batch.extras.get("labels")
        if labels is None:
            raise ConfigError("lm objective: expected a prepared batch (objective.prepare(model, batch)), found no labels")
        inputs = batch.model_inputs()
        return lm_losses(model, inputs["input_ids"], inputs["attention_mask"], labels, self.kind,
                         output_attentions=False)[0]

    def evaluate(self, model: Any, batch: Batch) -> dict[str, Any]:
        return _evaluate(self, model, batch)

    def describe(self) -> dict[str, Any]:
        from probes.extraction.gradients import MASK_RATE

        rule = (f"masked LM: each non-special token chosen with p={MASK_RATE} (at least one), 80% [MASK] / 10% random "
                "/ 10% kept, numpy default_rng([seed, sentence index]); mean cross-entropy over the chosen tokens"
                if self.kind == "masked-lm" else
                "next-token LM: mean cross-entropy over each sentence's T-1 predictions")
        return {"name": self.name, "kind": self.kind, "seed": self.seed, "rule": rule,
                "n_nothing_to_predict": int(self.n_nothing_to_predict)}


# ----------------------------------------------------------------------------- probe
def probe_label(relation: str) -> str:
    """The probe's label of a relation: the part before ``:`` (``nmod:poss`` -> ``nmod``)."""
    return relation.split(":", 1)[0]


def word_states(model: Any, batch: Batch) -> tuple[Any, Any]:
    """``(states (B, W, D), has_tokens (B, W) bool)``: each word's mean last hidden state over its tokens."""
    import torch

    hidden = _hidden(model, batch)  # (B, T, D)
    width = max(len(s.words) for s in batch.sentences)
    words = torch.arange(width, device=hidden.device)
    member = (batch.word_index[:, None, :] == words[None, :, None]).to(hidden.dtype)  # (B, W, T)
    counts = member.sum(dim=-1)  # (B, W)
    hidden = hidden.masked_fill((batch.word_index < 0)[..., None], 0)  # NaN at padding must not leak (mean_pool)
    return member @ hidden / counts.clamp(min=1)[..., None], counts > 0


class ProbeObjective:
    """A linear probe on the last layer's word states (mean of each word's tokens) predicting its relation.

    ``fit(model, batches)`` trains it once on the unmodified model (scikit-learn logistic regression);
    ``losses`` is each sentence's mean cross-entropy over its words with a known label; ``evaluate`` adds
    ``accuracy`` (per sentence, over the same words).

    Labels are the relations' parts before ``:`` (:func:`probe_label`). The features are standardised
    (scikit-learn ``StandardScaler``, then ``LogisticRegression``, lbfgs, multinomial), and the pipeline is
    folded into one ``torch.nn.Linear`` (:attr:`linear`) on the model's device and dtype. Words whose label
    was not seen at fit time are ignored (label -100) and counted by label; a sentence with no labelled
    word has loss 0 and accuracy NaN, and is counted (both over every prepared batch).
    """

    name = "probe"
    #: Reads only the model's output: batched leave-one-out may replay the layers below an ablation.
    final_states_only = True

    def __init__(self, *, C: float = 0.1, max_iter: int = 500, random_state: int = 0) -> None:
        self.C, self.max_iter, self.random_state = float(C), int(max_iter), int(random_state)
        self.classes: tuple[str, ...] = ()
        self.estimator: Any = None  # the fitted scikit-learn pipeline
        self.linear: Any = None
        self.n_fit_words = 0
        self.converged = False
        self.unseen: Counter[str] = Counter()
        self.n_without_labels = 0

    def _fit_data(self, model: Any, batches: Sequence[Batch]) -> tuple[npt.NDArray[np.float64], list[str]]:
        """``(X (n, D), labels)``: the word states and labels of every labelled word of ``batches``."""
        import torch

        rows, labels = [], []
        with torch.no_grad():
            for batch in batches:
                states, has = word_states(model, batch)  # (B, W, D), (B, W)
                states, has = states.double().cpu().numpy(), has.cpu().numpy()
                for b, s in enumerate(batch.sentences):
                    for w, relation in enumerate(s.relations):
                        if has[b, w]:
                            rows.append(states[b, w])
                            labels.append(probe_label(relation))
        return (np.stack(rows) if rows else np.zeros((0, 0))), labels

    def fit(self, model: Any, batches: Sequence[Batch]) -> ProbeObjective:
        """Fit on the unmodified model's word states of ``batches`` (sentences with relations); returns self."""
        import torch
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        X, y = self._fit_data(model, batches)
        if len(set(y)) < 2:
            raise ConfigError(f"probe objective: expected words of at least 2 relations to fit on, found "
                              f"{len(y)} labelled words of {len(set(y))} relation(s) (does the data have relations?)")
        pipe = make_pipeline(StandardScaler(), LogisticRegression(C=self.C, max_iter=self.max_iter,
                                                                  random_state=self.random_state))
        pipe.fit(X, np.asarray(y))
        scaler, lr = pipe[0], pipe[-1]
        weight = lr.coef_ / scaler.scale_  # (K, D) or (1, D) for two classes
        bias = lr.intercept_ - weight @ scaler.mean_  # (K,) or (1,)
        if weight.shape[0] == 1:  # binary: softmax over (0, z) is the sigmoid of z
            weight, bias = np.vstack([np.zeros_like(weight), weight]), np.concatenate([[0.0], bias])
        param = next(model.parameters())
        self.linear = torch.nn.Linear(weight.shape[1], weight.shape[0]).to(device=param.device, dtype=param.dtype)
        with torch.no_grad():
            self.linear.weight.copy_(torch.from_numpy(weight))
            self.linear.bias.copy_(torch.from_numpy(bias))
        self.linear.requires_grad_(False)
        self.classes, self.estimator, self.n_fit_words = tuple(str(c) for c in lr.classes_), pipe, len(y)
        self.converged = bool(np.all(np.asarray(lr.n_iter_) < self.max_iter))
        return self

    def prepare(self, model: Any, batch: Batch) -> Batch:
        """Store ``extras["probe_labels"]`` ``(B, W)``: each word's class index, -100 when unknown or unseen."""
        import torch

        if self.linear is None:
            raise ConfigError("probe objective: expected a fitted probe (ProbeObjective().fit(model, batches)), "
                              "found none")
        index = {c: i for i, c in enumerate(self.classes)}
        width = max(len(s.words) for s in batch.sentences)
        labels = np.full((len(batch.sentences), width), -100, dtype=np.int64)
        for b, s in enumerate(batch.sentences):
            present = set(s.word_index[s.word_index >= 0].tolist())
            for w, relation in enumerate(s.relations):
                label = probe_label(relation)
                if label not in index:
                    self.unseen[label] += 1
                elif w in present:
                    labels[b, w] = index[label]
            self.n_without_labels += int(not (labels[b] >= 0).any())
        batch.extras["probe_labels"] = torch.from_numpy(labels).to(batch.input_ids.device)
        return batch

    def _word_losses(self, model: Any, batch: Batch) -> tuple[Any, Any, Any]:
        """``(cross-entropy (B, W), logits (B, W, K), labels (B, W))``."""
        import torch

        labels = batch.extras.get("probe_labels")
        if labels is None or self.linear is None:
            raise ConfigError("probe objective: expected a fitted probe and a prepared batch "
                              "(objective.prepare(model, batch)), found none")
        states, _ = word_states(model, batch)  # (B, W, D)
        logits = self.linear(states)  # (B, W, K)
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")
        return ce, logits, labels

    def losses(self, model: Any, batch: Batch) -> Any:
        ce, _, labels = self._word_losses(model, batch)
        return ce.sum(dim=1) / (labels != -100).sum(dim=1).clamp(min=1)

    def evaluate(self, model: Any, batch: Batch) -> dict[str, Any]:
        import torch

        with torch.no_grad():
            ce, logits, labels = self._word_losses(model, batch)
            known = labels != -100  # (B, W)
            count = known.sum(dim=1)
            right = ((logits.argmax(dim=-1) == labels) & known).sum(dim=1)
            accuracy = torch.where(count > 0, right.double() / count.clamp(min=1), torch.nan)
            return {"loss": _numpy(ce.sum(dim=1) / count.clamp(min=1)), "accuracy": _numpy(accuracy)}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name,
                "rule": "linear probe (StandardScaler + LogisticRegression, lbfgs, multinomial) on the last hidden "
                        "layer's word states (mean over each word's tokens), fitted once on the unmodified model; "
                        "labels: the relation before ':'; loss: each sentence's mean cross-entropy over its "
                        "labelled words (0 when none); accuracy: per sentence, over the same words (NaN when none)",
                "C": self.C, "max_iter": self.max_iter, "random_state": self.random_state, "converged": self.converged,
                "classes": list(self.classes), "n_fit_words": int(self.n_fit_words),
                "unseen_labels": dict(sorted(self.unseen.items())), "n_unseen_words": int(sum(self.unseen.values())),
                "n_sentences_without_labels": int(self.n_without_labels)}


# ----------------------------------------------------------------------------- any callable
class CallableObjective:
    """Any ``fn(model, batch) -> (B,)`` loss tensor, named ``name``."""

    def __init__(self, fn: Callable[[Any, Batch], Any], name: str = "custom") -> None:
        if not callable(fn):
            raise ConfigError(f"callable objective: expected a function fn(model, batch) -> (B,) losses, found "
                              f"{type(fn).__name__}")
        self.fn, self.name = fn, str(name)

    def prepare(self, model: Any, batch: Batch) -> Batch:
        return batch

    def losses(self, model: Any, batch: Batch) -> Any:
        return _check_losses(self.fn(model, batch), batch, self.name)

    def evaluate(self, model: Any, batch: Batch) -> dict[str, Any]:
        return _evaluate(self, model, batch)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "function": getattr(self.fn, "__qualname__", type(self.fn).__name__),
                "module": getattr(self.fn, "__module__", None)}
