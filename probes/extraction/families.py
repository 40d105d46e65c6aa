"""Model-family facts in one place: what differs between BERT, RoBERTa, GPT-2, Llama ... and where.

Everything the rest of ``probes`` needs to know about a Hugging Face architecture beyond the
common ``transformers`` API lives here, so a new model family is one entry in the tables below:

* the configuration: layers, heads and position limits under their several names
  (:func:`text_config`, :func:`n_layers`, :func:`n_heads`, :func:`position_limits`);
* decoders, which are run without a key/value cache (:func:`is_decoder`);
* byte-level BPE tokenizers, which need ``add_prefix_space=True`` for pre-split words
  (:func:`is_byte_level`);
* the word and position embeddings kept by the random-initialisation control
  (:func:`embedding_parameters`);
* the seam for head interventions: per layer, the module whose *input* is the concatenation
  of the heads' outputs, i.e. the attention output projection (:func:`head_sites`);
* what uniform attention needs (:func:`value_sites`): per layer, the value projection (separate, or
  one chunk of a fused q/k/v projection), the key/value heads of grouped-query attention and the keys a
  query may see (causal decoders, sliding windows).

No torch import at module level: the functions take loaded models and tokenizers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from probes.errors import ConfigError

__all__ = ["DECODER_MODEL_TYPES", "HEAD_OUTPUT_MODULES", "POSITION_EMBEDDING_MODULES", "NO_MAX_LENGTH",
           "HeadSite", "text_config", "n_layers", "n_heads", "head_dim", "is_decoder", "is_byte_level",
           "position_limits", "embedding_parameters", "head_sites", "VALUE_MODULES", "ValueSite", "n_kv_heads",
           "key_window", "value_sites"]

#: ``config.model_type`` of causal decoders whose configs do not all say ``is_decoder``.
DECODER_MODEL_TYPES: frozenset[str] = frozenset(
    {"gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gpt_neox"})

#: Tokenizers report a huge ``model_max_length`` (about 1e30) when they have none.
NO_MAX_LENGTH = 10**8

_BERT_LIKE = ("encoder.layer", "attention.output.dense")
_LLAMA_LIKE = ("layers", "self_attn.o_proj")

#: ``model_type`` -> (the layer list in the base model, the attention output projection in a layer).
#: The projection's input is ``(..., n_heads * head_dim)``, head ``h`` at ``[h * head_dim, (h + 1) * head_dim)``.
HEAD_OUTPUT_MODULES: dict[str, tuple[str, str]] = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "xlm-roberta": _BERT_LIKE,
    "camembert": _BERT_LIKE,
    "electra": _BERT_LIKE,
    "deberta-v2": _BERT_LIKE,
    "modernbert": ("layers", "attn.Wo"),
    "gpt2": ("h", "attn.c_proj"),
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "qwen3": _LLAMA_LIKE,
    "gemma": _LLAMA_LIKE,
}

_BERT_VALUE = ("attention.self.value", None)
_LLAMA_VALUE = ("self_attn.v_proj", None)

#: ``model_type`` -> (the value projection in a layer, ``(part, parts)`` when q, k and v come from one fused
#: projection whose output's last dimension is ``parts`` equal chunks with the values in chunk ``part``,
#: else ``None``). Within the values, head ``h`` is at ``[h * head_dim, (h + 1) * head_dim)``.
#:
#: What uniform attention needed, per family:
#:
#: * bert, roberta, electra: ``attention.self.value``, a separate Linear; every non-padding key.
#: * deberta-v2: ``attention.self.value_proj``; every non-padding key (padding *queries* see no key at all in
#:   the model; their output never reaches a real token).
#: * modernbert: chunk 2 of 3 of the fused Linear ``attn.Wqkv`` (``view(..., 3, H, d)``); local layers
#:   (``layer_types``) see the keys with ``|i - j| <= sliding_window`` (= ``local_attention // 2``).
#: * gpt2: chunk 2 of 3 of the fused Conv1D ``attn.c_attn`` (in, 3 * E), ``split(E)``; causal.
#: * llama, mistral, qwen2/3, gemma: ``self_attn.v_proj`` with grouped-query attention (query head ``h``
#:   reads key/value head ``h // (H / KV)``); causal; sliding layers (``layer_types``, or every layer when
#:   ``sliding_window`` is set without ``layer_types``) see ``i - W < j <= i``.
VALUE_MODULES: dict[str, tuple[str, tuple[int, int] | None]] = {
    "bert": _BERT_VALUE,
    "roberta": _BERT_VALUE,
    "xlm-roberta": _BERT_VALUE,
    "camembert": _BERT_VALUE,
    "electra": _BERT_VALUE,
    "deberta-v2": ("attention.self.value_proj", None),
    "modernbert": ("attn.Wqkv", (2, 3)),
    "gpt2": ("attn.c_attn", (2, 3)),
    "llama": _LLAMA_VALUE,
    "mistral": _LLAMA_VALUE,
    "qwen2": _LLAMA_VALUE,
    "qwen3": _LLAMA_VALUE,
    "gemma": _LLAMA_VALUE,
}

#: Last name of the modules holding absolute position embeddings (BERT family; GPT-2's ``wpe``).
POSITION_EMBEDDING_MODULES: tuple[str, ...] = ("position_embeddings", "wpe")


def text_config(model_or_config: Any) -> Any:
    """The text part of a model's config (multimodal configs nest it; plain ones are it)."""
    config = getattr(model_or_config, "config", model_or_config)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _first(config: Any, names: Iterable[str], what: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if value:
            return int(value)
    raise ConfigError(f"{type(config).__name__}: expected the number of {what} in the config, found none")


def n_layers(model_or_config: Any) -> int:
    """Number of transformer layers (``num_hidden_layers``; GPT-2: ``n_layer``)."""
    return _first(text_config(model_or_config), ("num_hidden_layers", "n_layer"), "layers")


def n_heads(model_or_config: Any) -> int:
    """Number of attention (query) heads per layer (``num_attention_heads``; GPT-2: ``n_head``)."""
    return _first(text_config(model_or_config), ("num_attention_heads", "n_head"), "attention heads")


def head_dim(model_or_config: Any) -> int:
    """Size of one head's output: ``head_dim`` when the config has it (Llama), else hidden size / heads."""
    config = text_config(model_or_config)
    explicit = getattr(config, "head_dim", None)
    if explicit:
        return int(explicit)
    return _first(config, ("hidden_size", "n_embd"), "hidden units") // n_heads(config)


def is_decoder(model: Any) -> bool:
    """Whether ``model`` is a causal decoder (run with ``use_cache=False``: no cache is wanted)."""
    config = text_config(model)
    return bool(getattr(config, "is_decoder", False)) or "CausalLM" in type(model).__name__ or \
        getattr(config, "model_type", "") in DECODER_MODEL_TYPES


def is_byte_level(tokenizer: Any) -> bool:
    """Whether a fast tokenizer pre-tokenizes at byte level (RoBERTa, GPT-2 BPE ...)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and "ByteLevel" in repr(backend.pre_tokenizer)


def position_limits(tokenizer: Any, model_or_config: Any) -> list[int]:
    """Every maximum length the tokenizer and the config state (tokens, special ones included)."""
    config = text_config(model_or_config)
    values = (getattr(tokenizer, "model_max_length", None), getattr(config, "max_position_embeddings", None),
              getattr(config, "n_positions", None))
    return [int(v) for v in values if v is not None and int(v) < NO_MAX_LENGTH]


def embedding_parameters(model: Any) -> tuple[str, ...]:
    """Names of the word-embedding and absolute position-embedding weights, in parameter order.

    The word embeddings are ``model.get_input_embeddings()``; position embeddings are the
    modules named in :data:`POSITION_EMBEDDING_MODULES` (rotary and relative schemes have none).
    """
    word = model.get_input_embeddings()
    owners = {name for name, module in model.named_modules()
              if module is word or name.rsplit(".", 1)[-1] in POSITION_EMBEDDING_MODULES}
    return tuple(name for name, _ in model.named_parameters() if name.rsplit(".", 1)[0] in owners
                 and name.endswith(".weight"))


@dataclass(frozen=True)
class HeadSite:
    """Where the heads of one layer meet: the module whose input concatenates their outputs.

    Attributes:
        layer: 0-based layer.
        name: the module's name in ``model.named_modules()``.
        module: the module (a ``Linear``; GPT-2: a ``Conv1D``); its input is
            ``(..., n_heads * head_dim)`` with head ``h`` at ``[h * head_dim, (h + 1) * head_dim)``.
        n_heads, head_dim: heads of the layer and the size of each head's output.
    """

    layer: int
    name: str
    module: Any
    n_heads: int
    head_dim: int


def head_sites(model: Any) -> list[HeadSite]:
    """Per layer, the attention output projection of ``model`` (the hook point for head interventions).

    Raises:
        ConfigError: the model family is not in :data:`HEAD_OUTPUT_MODULES`.
    """
    model_type = getattr(text_config(model), "model_type", None)
    if model_type not in HEAD_OUTPUT_MODULES:
        raise ConfigError(f"head interventions: expected a model type in {sorted(HEAD_OUTPUT_MODULES)}, found "
                          f"{model_type!r} (add its output projection to probes.extraction.families)")
    layers_path, output_path = HEAD_OUTPUT_MODULES[model_type]
    base = getattr(model, "base_model", model)
    prefix = next(name for name, module in model.named_modules() if module is base)
    layers = base.get_submodule(layers_path)
    heads, size = n_heads(model), head_dim(model)
    return [HeadSite(layer, ".".join(p for p in (prefix, layers_path, str(layer), output_path) if p),
                     block.get_submodule(output_path), heads, size)
            for layer, block in enumerate(layers)]


def n_kv_heads(model_or_config: Any) -> int:
    """Key/value heads per layer: ``num_key_value_heads`` (grouped-query attention), else the query heads."""
    config = text_config(model_or_config)
    value = getattr(config, "num_key_value_heads", None)
    return int(value) if value else n_heads(config)


def key_window(model: Any, layer: int) -> tuple[int | None, int | None]:
    """``(before, after)``: a query at ``i`` may see keys ``i - before <= j <= i + after`` (``None``: no limit).

    Padding keys are never seen either (the attention mask). Encoders see everything, decoders nothing
    after the query; ModernBERT's local layers see ``sliding_window`` tokens each side and sliding decoder
    layers (Mistral, Qwen2 ...) the ``sliding_window`` tokens up to and including the query.
    """
    config = text_config(model)
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    sliding = window is not None and (layer_types[layer] == "sliding_attention" if layer_types else True)
    if getattr(config, "model_type", None) == "modernbert":
        return (int(window), int(window)) if sliding else (None, None)
    if not is_decoder(model):
        return None, None
    return (int(window) - 1, 0) if sliding else (None, 0)


@dataclass(frozen=True)
class ValueSite:
    """Where a layer's value vectors are made (for uniform attention: their mean over the visible keys).

    Attributes:
        layer: 0-based layer.
        name: the module's name in ``model.named_modules()``.
        module: the value projection, or the fused q/k/v projection.
        fused: ``(part, parts)``: the values are chunk ``part`` of ``parts`` of the output's last dimension;
            ``None``: the whole output.
        n_heads, n_kv_heads, head_dim: query heads, key/value heads and the size of one head's values.
        before, after: the keys a query sees (:func:`key_window`).
    """

    layer: int
    name: str
    module: Any
    fused: tuple[int, int] | None
    n_heads: int
    n_kv_heads: int
    head_dim: int
    before: int | None
    after: int | None

    def kv_head(self, head: int) -> int:
        """The key/value head that query head ``head`` reads (grouped-query attention)."""
        return head // (self.n_heads // self.n_kv_heads)

    def values(self, output: Any) -> Any:
        """``(..., n_heads, head_dim)`` each query head's values, from the module's output ``(..., width)``."""
        if self.fused is not None:
            part, parts = self.fused
            width = output.shape[-1] // parts
            output = output[..., part * width:(part + 1) * width]
        values = output.reshape(*output.shape[:-1], self.n_kv_heads, self.head_dim)
        repeat = self.n_heads // self.n_kv_heads
        return values if repeat == 1 else values.repeat_interleave(repeat, dim=-2)


def value_sites(model: Any) -> list[ValueSite]:
    """Per layer, where the values are made and which keys each query sees.

    Raises:
        ConfigError: the model family is not in :data:`VALUE_MODULES`.
    """
    model_type = getattr(text_config(model), "model_type", None)
    if model_type not in VALUE_MODULES or model_type not in HEAD_OUTPUT_MODULES:
        raise ConfigError(f"uniform attention: expected a model type in {sorted(VALUE_MODULES)}, found "
                          f"{model_type!r} (add its value projection to probes.extraction.families)")
    layers_path = HEAD_OUTPUT_MODULES[model_type][0]
    value_path, fused = VALUE_MODULES[model_type]
    base = getattr(model, "base_model", model)
    prefix = next(name for name, module in model.named_modules() if module is base)
    heads, kv, size = n_heads(model), n_kv_heads(model), head_dim(model)
    sites = []
    for layer, block in enumerate(base.get_submodule(layers_path)):
        before, after = key_window(model, layer)
        sites.append(ValueSite(layer, ".".join(p for p in (prefix, layers_path, str(layer), value_path) if p),
                               block.get_submodule(value_path), fused, heads, kv, size, before, after))
    return sites
