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

An ``attention_only`` model (``--attention-only``) is the family's own model class with an MLP of width 1 whose
output is exactly 0 and never trained (:func:`remove_mlp`): in every block the module the family's row names as the
MLP's output (:attr:`~probes.extraction.families.Trainable.mlp_output`) gets weight and bias 0, and every module
only the MLP uses (:attr:`~probes.extraction.families.Trainable.mlp_modules`) is frozen (``requires_grad`` False,
so the optimizer never sees it and no weight decay moves it). The saved folder is an ordinary model folder: loaded by
transformers' Auto classes it computes the attention-only model, and every probes analysis reads it as any other.
BERT's block keeps its second LayerNorm (over the residual alone then), as that is part of its attention path.
"""

from __future__ import annotations

from typing import Any

from probes.training.config import TrainConfig

__all__ = ["model_config", "build_model", "remove_mlp"]


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
    then :func:`~probes.training.schemes.apply_scheme` with ``config.init`` (and :func:`remove_mlp` when
    ``config.attention_only``); in train mode."""
    import torch
    import transformers

    from probes.training.schemes import apply_scheme

    cls = getattr(transformers, config.family.model_class)
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(config.seed)
        model = cls(model_config(config, tokenizer))
        apply_scheme(model, config.init, config.seed)
        if config.attention_only:
            remove_mlp(model, config.arch)
    finally:
        torch.random.set_rng_state(state)
    return model.train()


def remove_mlp(model: Any, arch: str) -> None:
    """Make every block's MLP of ``model`` (a model of the trainable family ``arch``) add exactly 0, untrained:
    the weight and bias of its output module zeroed and every module only the MLP uses frozen (see the module).

    Raises:
        ConfigError: ``arch``'s row of the families table names no MLP.
    """
    import torch

    from probes.errors import ConfigError
    from probes.extraction.families import FAMILIES

    row = FAMILIES.get(arch)
    training = row.training if row is not None else None
    if row is None or training is None or not row.layers or not training.mlp_output:
        raise ConfigError(f"--attention-only: expected an --arch whose families row names its MLP, found {arch}")
    base = getattr(model, "base_model", model)
    for block in base.get_submodule(row.layers):
        output = block.get_submodule(training.mlp_output)
        with torch.no_grad():
            output.weight.zero_()
            if getattr(output, "bias", None) is not None:
                output.bias.zero_()
        for path in (training.mlp_output, *training.mlp_modules):
            for parameter in block.get_submodule(path).parameters():
                parameter.requires_grad_(False)
