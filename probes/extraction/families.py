"""Model-family facts in one place: what differs between BERT, RoBERTa, GPT-2, Llama ... and where.

Everything the rest of ``probes`` needs to know about a Hugging Face architecture beyond the
common ``transformers`` API lives here, so a new model family is one :class:`Family` entry in
:data:`FAMILIES` (every function below, the extractor, interventions and the atlas read it at call time):

* the configuration: layers, heads and position limits under their several names
  (:func:`text_config`, :func:`n_layers`, :func:`n_heads`, :func:`position_limits`);
* decoders, which are run without a key/value cache (:func:`is_decoder`);
* byte-level BPE tokenizers, which need ``add_prefix_space=True`` for pre-split words
  (:func:`is_byte_level`);
* the word and position embeddings kept by the random-initialisation control
  (:func:`embedding_parameters`);
* the seam for head interventions: per layer, the module whose *input* is the concatenation
  of the heads' outputs, i.e. the attention output projection (:func:`head_sites`);
* where the queries and keys are made (:func:`query_key_sites`), for the sharpness-matched random-init twins
  (their query and key projections scaled, :mod:`probes.extraction.sharpness`);
* what uniform attention needs (:func:`value_sites`): per layer, the value projection (separate, or
  one chunk of a fused q/k/v projection), the key/value heads of grouped-query attention and the keys a
  query may see (causal decoders, sliding windows);
* the marks tokenizers put on word pieces (:func:`word_start_marks`, :func:`continuation_marks`), which
  :func:`probes.extraction.attention.is_punct_token` and the atlas's word labels take off;
* for the families ``probes train`` builds from scratch (:func:`trainable_families`), how: the config and model
  classes, the config's names for the sizes, the objective, the tokenizer trained for it and the parameter count
  (:class:`Trainable`, from :class:`Sizes`).

No torch import at module level: the functions take loaded models and tokenizers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from probes.errors import ConfigError

__all__ = ["Family", "FAMILIES", "family_of", "word_start_marks", "continuation_marks", "DECODER_MODEL_TYPES",
           "HEAD_OUTPUT_MODULES", "POSITION_EMBEDDING_MODULES", "NO_MAX_LENGTH", "HeadSite", "text_config", "n_layers",
           "n_heads", "head_dim", "is_decoder", "is_byte_level", "position_limits", "embedding_parameters",
           "head_sites", "VALUE_MODULES", "ValueSite", "n_kv_heads", "key_window", "value_sites", "QueryKeySite",
           "query_key_sites", "Sizes", "Trainable", "trainable_families"]

#: Tokenizers report a huge ``model_max_length`` (about 1e30) when they have none.
NO_MAX_LENGTH = 10**8


@dataclass(frozen=True)
class Sizes:
    """The sizes of a small model trained from scratch (``probes train``), in words every family shares.

    Attributes:
        layers, heads, hidden: transformer layers, attention (query) heads per layer and the hidden size (a head
            is ``hidden / heads`` wide).
        intermediate: the MLP's width.
        kv_heads: key/value heads per layer (``heads`` where there is no grouped-query attention).
        positions: the longest input, in tokens.
        vocab: the vocabulary's size.
        attention_dropout: dropout on attention probabilities; hidden_dropout: every other dropout.
    """

    layers: int
    heads: int
    hidden: int
    intermediate: int
    kv_heads: int
    positions: int
    vocab: int
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0


@dataclass(frozen=True)
class Trainable:
    """How ``probes train`` builds a small model of one family from :class:`Sizes` (a :class:`Family`'s ``training``).

    Attributes:
        config_class, model_class: the ``transformers`` config class and the language model built from it.
        masked_lm: trained as a masked-LM encoder (else as a causal LM).
        byte_level: the tokenizer trained for it is byte-level BPE over all 256 bytes (else BERT-style BPE).
        special_tokens: that tokenizer's special tokens (byte-level: end of text, then padding).
        hidden_dropout: the config has dropouts besides the attention's (Llama's has none).
        grouped_query: the key/value heads may be fewer than the query heads.
        config_fields: the config's own names for the sizes (``Sizes -> keyword arguments``; the vocabulary, the
            special tokens' ids and the attention kernel are the caller's).
        parameters: the parameters ``model_class`` has at those sizes (an embedding tied to the LM head counted
            once), to check the memory a run needs before it is built.
        mlp_output: the module of a layer (relative to it, as :attr:`Family.layers` lists the layers) whose output
            is the MLP's whole contribution to the block (GPT-2 ``mlp.c_proj``, Llama ``mlp.down_proj``, BERT
            ``output.dense``, added to the residual before the block's last LayerNorm); ``--attention-only`` sets
            its weight and bias to 0 (None: the row cannot be built attention-only).
        mlp_modules: every module of a layer that only the MLP uses (the output projection's module or a parent
            of it among them); ``--attention-only`` freezes their parameters (``requires_grad`` False).
    """

    config_class: str
    model_class: str
    masked_lm: bool
    byte_level: bool
    special_tokens: tuple[str, ...]
    hidden_dropout: bool
    grouped_query: bool
    config_fields: Callable[[Sizes], dict[str, Any]]
    parameters: Callable[[Sizes], int]
    mlp_output: str | None = None
    mlp_modules: tuple[str, ...] = ()

    @property
    def attention_only_rule(self) -> str:
        """How ``--attention-only`` removes this row's MLP, in words (the record of an attention-only run)."""
        return (f"every block keeps its MLP at intermediate size 1 with the weight (and bias) of {self.mlp_output} "
                f"set to 0 and {', '.join(self.mlp_modules)} frozen (requires_grad False, never trained), so the "
                "MLP adds exactly 0 and the saved folder, loaded by transformers' Auto classes, computes the "
                "attention-only model")


def _bert_fields(s: Sizes) -> dict[str, Any]:
    return {"hidden_size": s.hidden, "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
            "intermediate_size": s.intermediate, "max_position_embeddings": s.positions, "type_vocab_size": 2,
            "hidden_dropout_prob": s.hidden_dropout, "attention_probs_dropout_prob": s.attention_dropout}


def _bert_parameters(s: Sizes) -> int:
    """q, k, v, o with biases, two LayerNorms and the MLP a layer; words, positions, 2 types; the MLM transform
    (the LM head is tied to the word embeddings, its bias counted)."""
    h, inner = s.hidden, s.intermediate
    layer = 4 * h * h + 2 * h * inner + 9 * h + inner
    return s.vocab * h + s.positions * h + 2 * h + 2 * h + s.layers * layer + h * h + 3 * h + s.vocab


def _gpt2_fields(s: Sizes) -> dict[str, Any]:
    return {"n_embd": s.hidden, "n_layer": s.layers, "n_head": s.heads, "n_inner": s.intermediate,
            "n_positions": s.positions, "attn_pdrop": s.attention_dropout, "resid_pdrop": s.hidden_dropout,
            "embd_pdrop": s.hidden_dropout}


def _gpt2_parameters(s: Sizes) -> int:
    """BERT's blocks; words and positions; a final LayerNorm (the LM head tied, without bias)."""
    h, inner = s.hidden, s.intermediate
    layer = 4 * h * h + 2 * h * inner + 9 * h + inner
    return s.vocab * h + s.positions * h + s.layers * layer + 2 * h


def _llama_fields(s: Sizes) -> dict[str, Any]:
    return {"hidden_size": s.hidden, "num_hidden_layers": s.layers, "num_attention_heads": s.heads,
            "num_key_value_heads": s.kv_heads, "intermediate_size": s.intermediate,
            "max_position_embeddings": s.positions, "attention_dropout": s.attention_dropout}


def _llama_parameters(s: Sizes) -> int:
    """No biases, a gated MLP and two RMSNorms a layer; rotary positions; an LM head of its own."""
    h, kv = s.hidden, s.kv_heads * (s.hidden // s.heads)
    layer = 2 * h * h + 2 * h * kv + 3 * h * s.intermediate + 2 * h
    return 2 * s.vocab * h + s.layers * layer + h


_BYTE_SPECIALS = ("<|endoftext|>", "<pad>")


@dataclass(frozen=True)
class Family:
    """What one model family (one ``config.model_type``) needs beyond the common ``transformers`` API.

    Module paths are relative: ``layers`` to the base model, the others to one layer of it.

    Attributes:
        decoder: a causal decoder, run without a key/value cache, whatever its config says about ``is_decoder``.
        layers: the list of transformer layers in the base model (None: no head interventions).
        head_output: the attention output projection in a layer; its input is ``(..., n_heads * head_dim)``,
            head ``h`` at ``[h * head_dim, (h + 1) * head_dim)`` (the seam for head interventions).
        values: the value projection in a layer, or the fused q/k/v projection (None: no uniform attention).
        fused: ``(part, parts)`` when ``values`` is one fused projection whose output's last dimension is
            ``parts`` equal chunks with the values in chunk ``part``; None for a separate value projection.
        query_key: the query and key projections in a layer, whose outputs scaled by ``s`` scale every attention
            logit by ``s**2`` (no norm after them, no other term in the logits); both the ``values`` module of a
            fused projection (``fused`` set): the queries and keys are its chunks 0 and 1. None: unknown, or a
            family where that scaling is not a pure ``s**2`` (DeBERTa's relative terms, Qwen3's q/k norms).
        symmetric_window: sliding-window layers see ``sliding_window`` keys on each side of the query (ModernBERT's
            local layers), not the window up to the query (Mistral, Qwen2 ...).
        position_embeddings: last name of the module holding absolute position embeddings (None: rotary or
            relative positions), kept by the random-initialisation control.
        word_start: marks the family's tokenizer puts on a word's first token (byte-level BPE ``"Ġ"``,
            SentencePiece ``"▁"``), taken off before a token is compared with "." or "," or shown as a label.
        continuation: marks on a word's later tokens (WordPiece ``"##"``), taken off in labels.
        training: how ``probes train`` builds a small model of the family from scratch (None: it does not).
        attention_norm: the LayerNorm in a layer that takes the attention block's output plus the residual (post-LN
            families: BERT's ``attention.output.LayerNorm``); None where the block's output joins the residual
            stream with no norm after it (pre-LN families: GPT-2, Llama, ModernBERT). The ``contribution`` attention
            source linearises it (:mod:`probes.extraction.sources`).
    """

    decoder: bool = False
    layers: str | None = None
    head_output: str | None = None
    values: str | None = None
    fused: tuple[int, int] | None = None
    query_key: tuple[str, str] | None = None
    symmetric_window: bool = False
    position_embeddings: str | None = None
    word_start: tuple[str, ...] = ()
    continuation: tuple[str, ...] = ()
    training: Trainable | None = None
    attention_norm: str | None = None


_BERT = Family(layers="encoder.layer", head_output="attention.output.dense", values="attention.self.value",
               query_key=("attention.self.query", "attention.self.key"), position_embeddings="position_embeddings",
               continuation=("##",), attention_norm="attention.output.LayerNorm")
_LLAMA = Family(decoder=True, layers="layers", head_output="self_attn.o_proj", values="self_attn.v_proj",
                query_key=("self_attn.q_proj", "self_attn.k_proj"), word_start=("▁",))

#: ``config.model_type`` -> its :class:`Family`: the one table a new model family is added to.
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
#: * gpt_neox: a decoder only (its fused q/k/v interleaves the heads: no interventions yet).
#:
#: ``probes train`` builds bert (a masked-LM encoder), gpt2 and llama (causal LMs): their ``training``.
FAMILIES: dict[str, Family] = {
    "bert": replace(_BERT, training=Trainable(
        config_class="BertConfig", model_class="BertForMaskedLM", masked_lm=True, byte_level=False,
        special_tokens=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"), hidden_dropout=True, grouped_query=False,
        config_fields=_bert_fields, parameters=_bert_parameters, mlp_output="output.dense",
        mlp_modules=("intermediate", "output.dense"))),
    "roberta": replace(_BERT, continuation=(), word_start=("Ġ",)),
    "xlm-roberta": replace(_BERT, continuation=(), word_start=("▁",)),
    "camembert": replace(_BERT, continuation=(), word_start=("▁",)),
    "electra": _BERT,
    "deberta-v2": replace(_BERT, values="attention.self.value_proj", query_key=None, continuation=(),
                          word_start=("▁",)),
    "modernbert": Family(layers="layers", head_output="attn.Wo", values="attn.Wqkv", fused=(2, 3),
                         query_key=("attn.Wqkv", "attn.Wqkv"), symmetric_window=True, word_start=("Ġ",)),
    "gpt2": Family(decoder=True, layers="h", head_output="attn.c_proj", values="attn.c_attn", fused=(2, 3),
                   query_key=("attn.c_attn", "attn.c_attn"), position_embeddings="wpe", word_start=("Ġ",),
                   training=Trainable(config_class="GPT2Config", model_class="GPT2LMHeadModel", masked_lm=False,
                                      byte_level=True, special_tokens=_BYTE_SPECIALS, hidden_dropout=True,
                                      grouped_query=False, config_fields=_gpt2_fields, parameters=_gpt2_parameters,
                                      mlp_output="mlp.c_proj", mlp_modules=("ln_2", "mlp"))),
    "llama": replace(_LLAMA, word_start=("▁", "Ġ"),  # Llama 2: SentencePiece; Llama 3: byte-level BPE
                     training=Trainable(config_class="LlamaConfig", model_class="LlamaForCausalLM", masked_lm=False,
                                        byte_level=True, special_tokens=_BYTE_SPECIALS, hidden_dropout=False,
                                        grouped_query=True, config_fields=_llama_fields,
                                        parameters=_llama_parameters, mlp_output="mlp.down_proj",
                                        mlp_modules=("post_attention_layernorm", "mlp"))),
    "mistral": _LLAMA,
    "qwen2": replace(_LLAMA, word_start=("Ġ",)),
    "qwen3": replace(_LLAMA, query_key=None, word_start=("Ġ",)),  # q/k norms would undo a q/k scale
    "gemma": _LLAMA,
    "gpt_neox": Family(decoder=True, word_start=("Ġ",)),
}


def family_of(model_or_config: Any) -> Family | None:
    """The :class:`Family` of a model or config by its ``model_type`` (None for a family not in :data:`FAMILIES`)."""
    return FAMILIES.get(getattr(text_config(model_or_config), "model_type", None) or "")


def trainable_families() -> dict[str, Trainable]:
    """``model_type`` -> :class:`Trainable` of every family ``probes train`` builds, in table order (read from
    :data:`FAMILIES` now)."""
    return {name: family.training for name, family in FAMILIES.items() if family.training is not None}


def _marks(field: str) -> tuple[str, ...]:
    """Every family's marks of one kind, in table order, each once."""
    return tuple(dict.fromkeys(mark for family in FAMILIES.values() for mark in getattr(family, field)))


def word_start_marks() -> tuple[str, ...]:
    """The word-start marks of every family's tokenizer (``"Ġ"``, ``"▁"``), read from :data:`FAMILIES` now."""
    return _marks("word_start")


def continuation_marks() -> tuple[str, ...]:
    """The continuation marks of every family's tokenizer (``"##"``), read from :data:`FAMILIES` now."""
    return _marks("continuation")


# Views of FAMILIES taken at import, kept for callers that read them (new code reads FAMILIES).
#: ``config.model_type`` of causal decoders whose configs do not all say ``is_decoder``.
DECODER_MODEL_TYPES: frozenset[str] = frozenset(name for name, f in FAMILIES.items() if f.decoder)
#: ``model_type`` -> (the layer list in the base model, the attention output projection in a layer).
HEAD_OUTPUT_MODULES: dict[str, tuple[str, str]] = {
    name: (f.layers, f.head_output) for name, f in FAMILIES.items() if f.layers and f.head_output}
#: ``model_type`` -> (the value projection in a layer, :attr:`Family.fused`).
VALUE_MODULES: dict[str, tuple[str, tuple[int, int] | None]] = {
    name: (f.values, f.fused) for name, f in FAMILIES.items() if f.values}
#: Last name of the modules holding absolute position embeddings (BERT family; GPT-2's ``wpe``).
POSITION_EMBEDDING_MODULES: tuple[str, ...] = tuple(dict.fromkeys(
    f.position_embeddings for f in FAMILIES.values() if f.position_embeddings))


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
    family = family_of(config)
    return bool(getattr(config, "is_decoder", False)) or "CausalLM" in type(model).__name__ or \
        (family is not None and family.decoder)


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

    The word embeddings are ``model.get_input_embeddings()``; position embeddings are the modules named by
    any family's :attr:`Family.position_embeddings` (rotary and relative schemes have none).
    """
    word = model.get_input_embeddings()
    positions = {f.position_embeddings for f in FAMILIES.values() if f.position_embeddings}
    owners = {name for name, module in model.named_modules()
              if module is word or name.rsplit(".", 1)[-1] in positions}
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
        ConfigError: the model family is not in :data:`FAMILIES` with its layers and output projection.
    """
    model_type = getattr(text_config(model), "model_type", None)
    known = sorted(name for name, f in FAMILIES.items() if f.layers and f.head_output)
    family = family_of(model)
    if family is None or not family.layers or not family.head_output:
        raise ConfigError(f"head interventions: expected a model type in {known}, found "
                          f"{model_type!r} (add its output projection to probes.extraction.families)")
    layers_path, output_path = family.layers, family.head_output
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
    size = int(window) if sliding and window is not None else None  # this layer's window (None: it has none)
    family = family_of(config)
    if family is not None and family.symmetric_window:
        return size, size
    if not is_decoder(model):
        return None, None
    return (None if size is None else size - 1), 0


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
        ConfigError: the model family is not in :data:`FAMILIES` with its layers, output and value projections.
    """
    model_type = getattr(text_config(model), "model_type", None)
    known = sorted(name for name, f in FAMILIES.items() if f.values)
    family = family_of(model)
    if family is None or not family.values or not family.layers or not family.head_output:
        raise ConfigError(f"uniform attention: expected a model type in {known}, found "
                          f"{model_type!r} (add its value projection to probes.extraction.families)")
    layers_path, value_path, fused = family.layers, family.values, family.fused
    base = getattr(model, "base_model", model)
    prefix = next(name for name, module in model.named_modules() if module is base)
    heads, kv, size = n_heads(model), n_kv_heads(model), head_dim(model)
    sites = []
    for layer, block in enumerate(base.get_submodule(layers_path)):
        before, after = key_window(model, layer)
        sites.append(ValueSite(layer, ".".join(p for p in (prefix, layers_path, str(layer), value_path) if p),
                               block.get_submodule(value_path), fused, heads, kv, size, before, after))
    return sites


@dataclass(frozen=True)
class QueryKeySite:
    """Where one layer's queries (or keys) are made: a projection, or a chunk of a fused q/k/v projection.

    Attributes:
        layer: 0-based layer.
        role: ``"query"`` or ``"key"``.
        name: the module's name in ``model.named_modules()``.
        module: the projection (a ``Linear``, weight ``(out, in)``; GPT-2: a ``Conv1D``, weight ``(in, out)``).
        fused: ``(part, parts)``: the queries or keys are chunk ``part`` of ``parts`` of the output; None: all of it.
    """

    layer: int
    role: str
    name: str
    module: Any
    fused: tuple[int, int] | None

    def outputs(self, tensor: Any, *, bias: bool = False) -> Any:
        """The view of the module's weight (or ``bias``) that makes this site's outputs (in-place edits reach it)."""
        axis = 0 if bias or type(self.module).__name__ != "Conv1D" else 1  # Conv1D keeps its outputs last
        if self.fused is None:
            return tensor
        part, parts = self.fused
        width = tensor.shape[axis] // parts
        return tensor.narrow(axis, part * width, width)


def query_key_sites(model: Any) -> list[QueryKeySite]:
    """Per layer, where the queries and where the keys are made (two sites a layer, query first).

    Raises:
        ConfigError: the model family is not in :data:`FAMILIES` with its layers and query/key projections.
    """
    model_type = getattr(text_config(model), "model_type", None)
    known = sorted(name for name, f in FAMILIES.items() if f.query_key and f.layers)
    family = family_of(model)
    if family is None or not family.query_key or not family.layers:
        raise ConfigError(f"query/key scaling: expected a model type in {known}, found {model_type!r} (add its "
                          "query and key projections to probes.extraction.families)")
    base = getattr(model, "base_model", model)
    prefix = next(name for name, module in model.named_modules() if module is base)
    fused = family.fused if family.query_key[0] == family.query_key[1] == family.values else None
    sites = []
    for layer, block in enumerate(base.get_submodule(family.layers)):
        for part, (role, path) in enumerate(zip(("query", "key"), family.query_key)):
            sites.append(QueryKeySite(layer, role, ".".join(p for p in (prefix, family.layers, str(layer), path) if p),
                                      block.get_submodule(path), None if fused is None else (part, fused[1])))
    return sites
