"""Gradient importance of attention by key type (Clark et al. 2019 §3.2, clark_spec §2.5).

Clark et al. show that heads in the middle layers put most of their attention on [SEP], yet the
language-model loss hardly depends on it: the magnitude of the gradient of the masked-LM loss with
respect to each post-softmax attention weight, split by the type of the attended (key) token, is
tiny for [SEP] from layer 5 on (their Fig. 3), which supports the "no-op" reading of [SEP] attention.
The paper released no code; :data:`CHOICES` states every choice made here.

:func:`gradient_importance` loads a model WITH its language-model head (masked LM for encoders,
next-token LM for decoders) and refuses a checkpoint whose head weights are missing (a bare encoder
such as all-MiniLM-L6-v2: its head would be random). :func:`importance_from_model` does the same
for a loaded model; :func:`attention_gradients` gives the raw ``dL/dA`` of a batch (the test
compares it with finite differences).

Torch and transformers are imported on use.
"""

from __future__ import annotations

import contextlib
import itertools
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError, InputError, ModelOutputError, ProbesError
from probes.extraction.attention import is_punct_token
from probes.results import Result, head_axes, head_names, long_table

if TYPE_CHECKING:
    from probes.extraction.loading import ResolvedModel

__all__ = ["KEY_TYPES", "CHOICES", "DEFAULT_GRADIENT_ITEMS", "MASK_RATE", "OBJECTIVES", "KeyTypeGradients", "EncodedItem",
           "gradient_importance", "importance_from_model", "load_lm", "encode_items", "attention_gradients",
           "lm_losses", "lm_head"]

#: Key (column) types, in the order of the last axis of :attr:`KeyTypeGradients.importance`.
KEY_TYPES: tuple[str, ...] = ("sep", "cls", "punct", "other")
#: Examples used by default (the first ones of the input): Clark et al. used 1,000 segments of 128 tokens;
#: 500 sentences see every key type in hundreds of examples. Cost, forward plus backward, MiniLM-sized
#: encoder (6 x 12 heads) with an MLM head, EWT-like sentences, 2 CPU cores shared with other jobs
#: (load ~5): 80 ms/sentence at batch 64, 135 ms at batch 16, i.e. 40-70 s for 500 sentences; about 4x
#: less on an idle machine (the plain forward pass ran 4x slower than usual under that load).
DEFAULT_GRADIENT_ITEMS = 500
#: Share of non-special tokens chosen for the masked-LM loss (BERT's pre-training rate).
MASK_RATE = 0.15
#: The two losses: masked LM (encoders) and next-token LM (decoders).
OBJECTIVES: tuple[str, ...] = ("masked-lm", "causal-lm")
#: Punctuation tokens of the ``punct`` key type (as Clark et al.: exactly "." or ",").

#: The choices made where the paper is silent (clark_spec §2.5, §10 item 7), recorded with every result.
CHOICES = (
    "Gradient importance (Clark et al. 2019 §3.2): |dL/dA[l,h,i,j]| of the post-softmax attention weights "
    "(eager attention, model in eval mode: no dropout; plain gradients, not integrated gradients). "
    "Inputs: each sentence's words tokenized as pre-split words, whole (an input longer than the model's "
    "limit is skipped and counted), one sentence per example. "
    "Loss, encoders: masked LM, cross-entropy averaged over the masked tokens of the example; each "
    "non-special token is chosen independently with p=0.15 (at least one per example: if none is drawn, "
    "one is chosen uniformly), then 80% replaced by the mask token, 10% by a uniformly drawn non-special "
    "vocabulary token, 10% kept (BERT's 80/10/10); random numbers from numpy default_rng([seed, item "
    "index]), so results do not depend on batch size or order. Loss, decoders: next-token cross-entropy "
    "averaged over the example's T-1 predictions. Each example's gradient is that of its own loss. "
    "Key types: sep = end specials ([SEP], </s>), cls = start specials ([CLS], <s>, BOS), punct = tokens "
    "whose text (stripped of the tokenizer's space marker) is exactly '.' or ',', other = every other "
    "token. Pairs (i, j): every query row i of the input (specials included), every key j it can attend "
    "(j <= i for a decoder: the causally masked weights are not free parameters; padding excluded). "
    "Aggregation: per example and head, the mean of |dL/dA| over the pairs whose key is of the type; then "
    "the unweighted mean over the examples that have a key of that type (n_examples per type); "
    "per_layer() then averages the heads of a layer.")


@dataclass(frozen=True)
class KeyTypeGradients(Result):
    """Mean gradient magnitude of the LM loss w.r.t. attention weights, per head and key type.

    Attributes:
        layers, heads: 0-based model layers and heads (axes 0 and 1 of ``importance``).
        key_types: :data:`KEY_TYPES` (axis 2).
        importance: ``(L, H, 4)`` float64 mean over examples of the per-example mean ``|dL/dA|`` over
            the pairs whose key is of the type; NaN where no example has such a key (``sep`` for a
            decoder without an end special).
        n_examples: ``(4,)`` int64 examples that had at least one key of each type.
        n_items: examples used; n_skipped: items left out (too long for the model, nothing to predict).
        objective: ``"masked-lm"`` or ``"causal-lm"``.
        model: the model's name or folder; seed: the masking seed; choices: :data:`CHOICES`.
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"importance": "layers heads key_types", "n_examples": "key_types"}

    layers: tuple[int, ...]
    heads: tuple[int, ...]
    key_types: tuple[str, ...]
    importance: npt.NDArray[np.float64]
    n_examples: npt.NDArray[np.int64]
    n_items: int
    n_skipped: int
    objective: str
    model: str
    seed: int
    choices: str = CHOICES

    def of(self, key_type: str) -> npt.NDArray[np.float64]:
        """``(L, H)`` importance of attention to keys of ``key_type`` (one of :data:`KEY_TYPES`)."""
        if key_type not in self.key_types:
            raise ConfigError(f"key type: expected one of {', '.join(self.key_types)}, found {key_type!r}")
        return self.importance[:, :, self.key_types.index(key_type)]

    def per_layer(self) -> npt.NDArray[np.float64]:
        """``(L, 4)`` mean over the heads of each layer (Clark et al.'s Fig. 3 lines)."""
        with np.errstate(invalid="ignore"), _warnings_off():
            return np.nanmean(self.importance, axis=1) if self.importance.size else \
                np.zeros((len(self.layers), len(self.key_types)))

    def to_pandas(self) -> Any:
        """One row per head: 1-based ``layer``, ``head``, ``head_name``, ``grad_<type>`` for every key type."""
        table = long_table(head_axes(self.layers, self.heads),
                           {f"grad_{k}": self.importance[:, :, i] for i, k in enumerate(self.key_types)})
        table.insert(2, "head_name", head_names(table))
        return table


@contextlib.contextmanager
def _warnings_off() -> Iterator[None]:
    """Silence numpy's "mean of empty slice" for all-NaN columns (they stay NaN, as meant)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


@dataclass(frozen=True)
class EncodedItem:
    """One example ready for the loss.

    Attributes:
        input_ids: ``(T,)`` the ids the model sees (masked for a masked LM).
        labels: ``(T,)`` target ids, -100 where no loss is taken (masked LM: the unchosen tokens;
            causal LM: the original ids, shifted inside the loss).
        key_type: ``(T,)`` index into :data:`KEY_TYPES` of each token.
    """

    input_ids: npt.NDArray[np.int64]
    labels: npt.NDArray[np.int64]
    key_type: npt.NDArray[np.intp]


# ----------------------------------------------------------------------------- loading
def _is_decoder_config(config: Any) -> bool:
    from probes.extraction.families import family_of, text_config

    config = text_config(config)
    names = " ".join(getattr(config, "architectures", None) or [])
    family = family_of(config)
    return bool(getattr(config, "is_decoder", False)) or "CausalLM" in names or "LMHead" in names or \
        (family is not None and family.decoder)


def load_lm(name_or_path: str | Path | ResolvedModel, *, dtype: Any = None) -> tuple[Any, Any, str, str]:
    """``(model with its LM head, tokenizer, resolved name, objective)``, eager attention, eval mode (a name is
    resolved here; a :class:`~probes.extraction.loading.ResolvedModel` was resolved already).

    Raises:
        ConfigError: the model cannot be loaded, or its checkpoint lacks the LM head's weights
            (transformers would initialise them at random: the gradients would mean nothing).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    from probes.extraction.loading import ResolvedModel, _first_line, check_model, load_tokenizer
    from probes.extraction.weight_files import pickles_refused

    name = (name_or_path if isinstance(name_or_path, ResolvedModel) else ResolvedModel.of(name_or_path)).path
    check_model(name)  # before transformers reads it: no code of its own, regular files, sound weight headers
    objective = "language-model"
    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=False)
        objective = "causal-lm" if _is_decoder_config(config) else "masked-lm"
        auto = AutoModelForCausalLM if objective == "causal-lm" else AutoModelForMaskedLM
        tokenizer = load_tokenizer(name)
        level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()  # the refusal below says it better than the load report
        hf_logging.disable_progress_bar()  # a second "Loading weights" bar would say nothing new
        try:
            with pickles_refused(name):
                # (model, info) with output_loading_info=True, though transformers annotates the model alone
                loaded: Any = auto.from_pretrained(name, attn_implementation="eager", output_loading_info=True,
                                                   dtype=torch.float32 if dtype is None else dtype,
                                                   trust_remote_code=False)
                model, info = loaded
        finally:
            hf_logging.set_verbosity(level)
            if bar:
                hf_logging.enable_progress_bar()
    except ProbesError:
        raise
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(f"gradient importance: cannot load model {name!r} with a language-model head "
                          f"({objective}): {_first_line(err)}") from err
    missing = sorted(set(info.get("missing_keys") or ()) | {str(k[0]) if isinstance(k, tuple) else str(k)
                                                            for k in info.get("mismatched_keys") or ()})
    if missing:
        shown = ", ".join(missing[:6]) + (f" ... ({len(missing)} in all)" if len(missing) > 6 else "")
        raise ConfigError(
            f"gradient importance needs the model's {objective} head, but checkpoint {name!r} lacks weights "
            f"for it (transformers would initialise them at random): missing {shown}. Expected a checkpoint "
            "saved with its language-model head (e.g. bert-base-uncased, gpt2); a sentence-embedding model "
            "such as all-MiniLM-L6-v2 is a bare encoder and has none")
    return model.eval(), tokenizer, name, objective


# ----------------------------------------------------------------------------- inputs
def _words_of(item: Any) -> list[str]:
    words = getattr(item, "words", item)
    if isinstance(words, str) or not isinstance(words, Sequence) or not all(isinstance(w, str) for w in words):
        raise InputError(f"gradient importance: expected a Sentence or a list of words, found "
                         f"{type(item).__name__}")
    return list(words)


def _key_types(tokenizer: Any, ids: npt.NDArray[np.int64], word_ids: Sequence[int | None]) -> npt.NDArray[np.intp]:
    """``(T,)`` key type of each token: start specials, end specials, "."/",", others."""
    seen_word = np.cumsum([w is not None for w in word_ids]) > 0  # (T,) a word token at or before
    special = np.array([w is None for w in word_ids], dtype=bool)
    punct = np.array([is_punct_token(t) for t in tokenizer.convert_ids_to_tokens(list(ids))], dtype=bool) & ~special
    kinds = np.full(len(ids), KEY_TYPES.index("other"), dtype=np.intp)
    kinds[punct] = KEY_TYPES.index("punct")
    kinds[special & ~seen_word] = KEY_TYPES.index("cls")
    kinds[special & seen_word] = KEY_TYPES.index("sep")
    return kinds


def _mask(ids: npt.NDArray[np.int64], special: npt.NDArray[np.bool_], tokenizer: Any,
          rng: np.random.Generator) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """BERT's masking: ``(masked ids, labels)`` (see :data:`CHOICES`)."""
    candidates = np.flatnonzero(~special)
    chosen = candidates[rng.random(candidates.shape[0]) < MASK_RATE]
    if chosen.shape[0] == 0:
        chosen = candidates[[int(rng.integers(candidates.shape[0]))]]
    labels = np.full_like(ids, -100)
    labels[chosen] = ids[chosen]
    masked = ids.copy()
    draw = rng.random(chosen.shape[0])
    masked[chosen[draw < 0.8]] = tokenizer.mask_token_id
    swap = chosen[(draw >= 0.8) & (draw < 0.9)]
    if swap.shape[0]:
        banned = set(tokenizer.all_special_ids)
        vocab = np.array([i for i in range(len(tokenizer)) if i not in banned], dtype=np.int64)
        masked[swap] = vocab[rng.integers(vocab.shape[0], size=swap.shape[0])]
    return masked, labels


def encode_items(tokenizer: Any, items: Sequence[Any], objective: str, *, seed: int = 0,
                 max_tokens: int | None = None) -> tuple[list[EncodedItem], int]:
    """``(encoded examples, number skipped)``: tokenized, masked (masked LM) and typed by key.

    Items longer than ``max_tokens`` or with nothing to predict are skipped (counted).
    """
    if objective == "masked-lm" and tokenizer.mask_token_id is None:
        raise ConfigError("gradient importance: a masked LM needs a tokenizer with a mask token; found none")
    encoded, skipped = [], 0
    for index, item in enumerate(items):
        words = _words_of(item)
        if not words:
            skipped += 1
            continue
        enc = tokenizer(words, is_split_into_words=True, add_special_tokens=True)
        ids = np.asarray(enc["input_ids"], dtype=np.int64)  # (T,)
        word_ids = enc.word_ids()
        if (max_tokens is not None and ids.shape[0] > max_tokens) or \
                (objective == "causal-lm" and ids.shape[0] < 2):
            skipped += 1
            continue
        kinds = _key_types(tokenizer, ids, word_ids)
        if objective == "masked-lm":
            special = np.array([w is None for w in word_ids], dtype=bool)
            ids, labels = _mask(ids, special, tokenizer, np.random.default_rng([seed, index]))
        else:
            labels = ids.copy()
        encoded.append(EncodedItem(ids, labels, kinds))
    return encoded, skipped


# ----------------------------------------------------------------------------- gradients
def _batch_tensors(batch: Sequence[EncodedItem], pad_id: int, device: Any) -> tuple[Any, Any, Any]:
    """``(input_ids, attention_mask, labels)``, each ``(B, T)``, padded on the right."""
    import torch

    width = max(e.input_ids.shape[0] for e in batch)
    ids = np.full((len(batch), width), pad_id, dtype=np.int64)
    labels = np.full((len(batch), width), -100, dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.int64)
    for b, e in enumerate(batch):
        n = e.input_ids.shape[0]
        ids[b, :n], labels[b, :n], mask[b, :n] = e.input_ids, e.labels, 1
    return (torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device),
            torch.from_numpy(labels).to(device))


def lm_head(model: Any) -> Any:
    """The module that turns the base model's hidden states into logits, when it is the one other child.

    True of BERT's ``cls`` and RoBERTa's ``lm_head``; None for heads split over several modules
    (DistilBERT, ModernBERT ...), which then run on every position through the model's own forward.
    """
    base = getattr(model, "base_model", None)
    rest = [child for _, child in model.named_children() if child is not base]
    return rest[0] if base is not None and base is not model and len(rest) == 1 else None


def lm_losses(model: Any, input_ids: Any, attention_mask: Any, labels: Any, objective: str, *,
              masked_only: bool = True, output_attentions: bool = True) -> tuple[Any, Any]:
    """``(per-example losses (B,), attentions)``: each example's mean cross-entropy (see :data:`CHOICES`).

    For a masked LM whose head is one module (:func:`lm_head`), the head runs on the masked positions
    only (``masked_only``; the loss is the same, the vocabulary projection of every other position is
    saved). ``output_attentions=False`` skips the attention weights (then None; any attention
    implementation): head importance needs only the loss.
    """
    import torch

    head = lm_head(model) if objective == "masked-lm" and masked_only else None
    runner = model.base_model if head is not None else model
    out = runner(input_ids=input_ids, attention_mask=attention_mask, output_attentions=output_attentions,
                 use_cache=False)
    if output_attentions and (not out.attentions or any(a is None for a in out.attentions)):
        raise ModelOutputError(f"{type(model).__name__} returned no attention weights; load it with "
                               "attn_implementation='eager'")
    counts = (labels != -100).sum(dim=1).clamp(min=1)
    if head is not None:
        chosen = labels != -100  # (B, T)
        ce = torch.nn.functional.cross_entropy(head(out.last_hidden_state[chosen]), labels[chosen],
                                               reduction="none")  # (N,)
        rows = torch.arange(labels.shape[0], device=labels.device)[:, None].expand_as(labels)[chosen]
        return torch.zeros(labels.shape[0], dtype=ce.dtype, device=ce.device).index_add(0, rows, ce) / counts, \
            out.attentions
    logits = out.logits
    if objective == "causal-lm":
        logits = logits[:, :-1]
        labels = labels[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
        counts = (labels != -100).sum(dim=1).clamp(min=1)
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100,
                                           reduction="none")  # (B, T')
    return ce.sum(dim=1) / counts, out.attentions


def attention_gradients(model: Any, input_ids: Any, attention_mask: Any, labels: Any, objective: str) -> Any:
    """``(B, L, H, T, T)`` gradient of each example's own loss w.r.t. its post-softmax attention weights.

    The per-example losses are summed before one backward pass: examples do not interact in a batch,
    so each example's block of the gradient is the gradient of its own loss.
    """
    import torch

    with torch.enable_grad():
        losses, attentions = lm_losses(model, input_ids, attention_mask, labels, objective)
        if not attentions[0].requires_grad:
            raise ModelOutputError("gradient importance: the attention weights are not part of the autograd "
                                   "graph (parameters frozen with requires_grad=False?)")
        grads = torch.autograd.grad(losses.sum(), attentions)
    return torch.stack(grads, dim=1)


def _pair_weights(batch: Sequence[EncodedItem], width: int, causal: bool) -> npt.NDArray[np.float32]:
    """``(B, T, T, 4)`` 1 where pair (i, j) counts for key type k (valid row, allowed key of type k)."""
    out = np.zeros((len(batch), width, width, len(KEY_TYPES)), dtype=np.float32)
    for b, e in enumerate(batch):
        n = e.input_ids.shape[0]
        allowed = np.tril(np.ones((n, n), dtype=np.float32)) if causal else np.ones((n, n), dtype=np.float32)
        onehot = np.eye(len(KEY_TYPES), dtype=np.float32)[e.key_type]  # (n, 4)
        out[b, :n, :n] = allowed[:, :, None] * onehot[None, :, :]
    return out


def _batches(items: list[EncodedItem], batch_size: int) -> Iterator[list[EncodedItem]]:
    """Batches of similar length (sorted by length: little padding); results do not depend on it."""
    order = sorted(range(len(items)), key=lambda i: items[i].input_ids.shape[0])
    for start in range(0, len(order), batch_size):
        yield [items[i] for i in order[start:start + batch_size]]


def importance_from_model(model: Any, tokenizer: Any, sentences: Sequence[Any], *, objective: str,
                          max_items: int | None = None, seed: int = 0, batch_size: int = 32,
                          device: Any = None, name: str = "") -> KeyTypeGradients:
    """:class:`KeyTypeGradients` of a loaded LM (``model`` with its head, eval mode) on the first ``max_items``."""
    import torch

    from probes.extraction.extractor import check_device
    from probes.extraction.families import n_heads, n_layers, position_limits

    if objective not in OBJECTIVES:
        raise ConfigError(f"objective: expected one of {', '.join(OBJECTIVES)}, found {objective!r}")
    _check_count("batch_size", batch_size)
    if max_items is not None:
        _check_count("max_items", max_items)
    dev = check_device(device)
    model.to(dev).eval()
    chosen = list(itertools.islice(sentences, max_items))  # None: all
    limits = position_limits(tokenizer, model)
    items, skipped = encode_items(tokenizer, chosen, objective, seed=seed, max_tokens=min(limits) if limits else None)
    L, H = n_layers(model), n_heads(model)
    total = np.zeros((L, H, len(KEY_TYPES)), dtype=np.float64)
    n_examples = np.zeros(len(KEY_TYPES), dtype=np.int64)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    for batch in _batches(items, batch_size):
        ids, mask, labels = _batch_tensors(batch, pad, dev)
        grads = attention_gradients(model, ids, mask, labels, objective).abs_()  # (B, L, H, T, T)
        pairs = torch.from_numpy(_pair_weights(batch, ids.shape[1], objective == "causal-lm")).to(grads)
        sums = torch.einsum("blhij,bijk->blhk", grads, pairs).double().cpu().numpy()  # (B, L, H, 4)
        counts = pairs.sum(dim=(1, 2)).double().cpu().numpy()  # (B, 4)
        has = counts > 0
        total += np.where(has[:, None, None, :], sums / np.maximum(counts, 1)[:, None, None, :], 0.0).sum(0)
        n_examples += has.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        importance = np.where(n_examples > 0, total / np.maximum(n_examples, 1), np.nan)
    return KeyTypeGradients(tuple(range(L)), tuple(range(H)), KEY_TYPES, importance, n_examples, len(items),
                            skipped, objective, name, seed)


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"{name} must be a whole number >= 1, found {value!r}")


def gradient_importance(model_path_or_name: str | Path | ResolvedModel, sentences: Sequence[Any], *,
                        max_items: int | None = DEFAULT_GRADIENT_ITEMS,
                        seed: int = 0, batch_size: int = 32, device: Any = None) -> KeyTypeGradients:
    """Clark et al.'s gradient importance of attention by key type (``sep``, ``cls``, ``punct``, ``other``).

    Args:
        model_path_or_name: a folder, hub name or ``package:NAME`` of a checkpoint WITH its LM head (or that name
            resolved already: :class:`~probes.extraction.loading.ResolvedModel`).
        sentences: :class:`~probes.corpora.types.Sentence` objects or word lists; the first
            ``max_items`` are used (None: all).
        seed: masking seed; batch_size: examples per backward pass; device: cpu, cuda ... (None: auto).

    Raises:
        ConfigError: bad options, or a checkpoint without LM head weights (e.g. all-MiniLM-L6-v2).
    """
    _check_count("batch_size", batch_size)
    if max_items is not None:
        _check_count("max_items", max_items)
    model, tokenizer, name, objective = load_lm(model_path_or_name)
    return importance_from_model(model, tokenizer, sentences, objective=objective, max_items=max_items,
                                 seed=seed, batch_size=batch_size, device=device, name=name)
