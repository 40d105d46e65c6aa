"""A fresh model of a training run, built from its family's row of the one families table under the run's seed.

What each architecture is comes from :data:`probes.extraction.families.FAMILIES` (the run's
:attr:`~probes.training.config.TrainConfig.family`): ``bert`` is :class:`~transformers.BertForMaskedLM`, ``gpt2``
:class:`~transformers.GPT2LMHeadModel`, ``llama`` :class:`~transformers.LlamaForCausalLM` (grouped-query
attention with ``kv_heads``), each from its config class with the sizes under the config's own names. The config
takes the size (``heads`` heads of ``hidden / heads`` each), every dropout from the run's config (attention
dropout as given, the others ``hidden_dropout``, 0 by default), positions up to ``seq_len``, the tokenizer's
vocabulary and special tokens, and eager attention (the attention weights probes reads). The weights are drawn by
the architecture's own initialisation under ``torch.manual_seed(seed)``, then the initialisation scheme is applied
(:func:`probes.training.schemes.apply_scheme`); the caller's random state is left as it was.
"""

from __future__ import annotations

from typing import Any

from probes.training.config import TrainConfig

__all__ = ["model_config", "build_model"]


def _special_ids(tokenizer: Any) -> dict[str, int | None]:
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    return {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": bos, "eos_token_id": eos}


def model_config(config: TrainConfig, tokenizer: Any) -> Any:
    """The transformers config of ``config``'s architecture, sized for ``tokenizer``'s vocabulary."""
    import transformers

    family = config.family
    fields: dict[str, Any] = {**family.config_fields(config.sizes(len(tokenizer))), "vocab_size": len(tokenizer),
                              "attn_implementation": "eager", **_special_ids(tokenizer)}
    return getattr(transformers, family.config_class)(**fields)


def build_model(config: TrainConfig, tokenizer: Any) -> Any:
    """A freshly initialised model of ``config`` (see the module): built under ``torch.manual_seed(config.seed)``,
    then :func:`~probes.training.schemes.apply_scheme` with ``config.init``; in train mode."""
    import torch
    import transformers

    from probes.training.schemes import apply_scheme

    cls = getattr(transformers, config.family.model_class)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(config.seed)
        model = cls(model_config(config, tokenizer))
        apply_scheme(model, config.init, config.seed)
    finally:
        torch.random.set_rng_state(state)
    return model.train()
