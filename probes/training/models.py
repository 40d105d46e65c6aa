"""A fresh model of a training run: a transformers config per architecture, built under the run's seed.

``bert`` is :class:`~transformers.BertForMaskedLM`, ``gpt2`` :class:`~transformers.GPT2LMHeadModel`, ``llama``
:class:`~transformers.LlamaForCausalLM` (grouped-query attention with ``kv_heads``). The config takes the size
(``heads`` heads of ``hidden / heads`` each), every dropout from the run's config (attention dropout as given,
the others ``hidden_dropout``, 0 by default), positions up to ``seq_len``, the tokenizer's vocabulary and special
tokens, and eager attention (the attention weights probes reads). The weights are drawn by the architecture's
own initialisation under ``torch.manual_seed(seed)``, then the initialisation scheme is applied
(:func:`probes.training.schemes.apply_scheme`); the caller's random state is left as it was.
"""

from __future__ import annotations

from typing import Any

from probes.training.config import TrainConfig

__all__ = ["model_config", "build_model", "MODEL_CLASSES"]

#: The transformers class built for each architecture.
MODEL_CLASSES: dict[str, str] = {"bert": "BertForMaskedLM", "gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}


def _special_ids(tokenizer: Any) -> dict[str, int | None]:
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    return {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": bos, "eos_token_id": eos}


def model_config(config: TrainConfig, tokenizer: Any) -> Any:
    """The transformers config of ``config``'s architecture, sized for ``tokenizer``'s vocabulary."""
    import transformers

    common = {"vocab_size": len(tokenizer), "attn_implementation": "eager", **_special_ids(tokenizer)}
    if config.arch == "bert":
        return transformers.BertConfig(
            hidden_size=config.hidden, num_hidden_layers=config.layers, num_attention_heads=config.heads,
            intermediate_size=config.intermediate_size, max_position_embeddings=config.seq_len, type_vocab_size=2,
            hidden_dropout_prob=config.hidden_dropout, attention_probs_dropout_prob=config.attention_dropout,
            **common)
    if config.arch == "gpt2":
        return transformers.GPT2Config(
            n_embd=config.hidden, n_layer=config.layers, n_head=config.heads, n_inner=config.intermediate_size,
            n_positions=config.seq_len, attn_pdrop=config.attention_dropout, resid_pdrop=config.hidden_dropout,
            embd_pdrop=config.hidden_dropout, **common)
    return transformers.LlamaConfig(
        hidden_size=config.hidden, num_hidden_layers=config.layers, num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads or config.heads, intermediate_size=config.intermediate_size,
        max_position_embeddings=config.seq_len, attention_dropout=config.attention_dropout, **common)


def build_model(config: TrainConfig, tokenizer: Any) -> Any:
    """A freshly initialised model of ``config`` (see the module): built under ``torch.manual_seed(config.seed)``,
    then :func:`~probes.training.schemes.apply_scheme` with ``config.init``; in train mode."""
    import torch
    import transformers

    from probes.training.schemes import InitScheme, apply_scheme

    scheme = InitScheme.parse(config.init)
    cls = getattr(transformers, MODEL_CLASSES[config.arch])
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(config.seed)
        model = cls(model_config(config, tokenizer))
        apply_scheme(model, scheme, config.seed)
    finally:
        torch.random.set_rng_state(state)
    return model.train()
