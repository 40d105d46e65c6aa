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
  of the heads' outputs, i.e. the attention output projection (:func:`head_sites`).

No torch import at module level: the functions take loaded models and tokenizers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from probes.errors import ConfigError

__all__ = ["DECODER_MODEL_TYPES", "HEAD_OUTPUT_MODULES", "POSITION_EMBEDDING_MODULES", "NO_MAX_LENGTH",
           "HeadSite", "text_config", "n_layers", "n_heads", "head_dim", "is_decoder", "is_byte_level",
           "position_limits", "embedding_parameters", "head_sites"]

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
