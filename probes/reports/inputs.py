"""What happened to a run's inputs, in sentences: one line per split of a run record's ``inputs``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from probes.extraction.gguf import weights_line
from probes.run_record import RunRecord

__all__ = ["inputs_lines"]


def _ids(ids: Sequence[str], limit: int | None) -> str:
    if limit is None or len(ids) <= limit:
        return ", ".join(ids)
    return ", ".join(ids[:limit]) + f" and {len(ids) - limit} more"


#: How the splits of an ``inputs`` section are named in sentences.
_SPLIT_NAMES = {"select": "selection", "eval": "evaluation", "train": "training"}


def inputs_lines(inputs: Mapping[str, Mapping[str, Any]] | RunRecord, *, limit: int | None = 10) -> list[str]:
    """One line per split of an ``inputs`` section (``{split: inputs_record}``), naming the ids cut or windowed
    (the first ``limit`` of each kind; None: all), e.g. ``report split (test.conllu): 9 of 10 sentences
    analysed; over 64 tokens: 1 skipped: s600``.

    Given a whole run record, the lines of its ``inputs`` follow one on the model's weights when they were
    dequantised from a GGUF file: ``model weights dequantised from Q4_1 to float32 (NAME.gguf, sha256 ...)``.
    """
    lines = []
    if isinstance(inputs, RunRecord):
        weights = weights_line(dict(inputs.weights_source or {}))
        lines += [f"model {weights}"] if weights else []
        inputs = inputs.inputs
    for name, split in inputs.items():
        unit = split.get("unit", "sentences")
        phase = _SPLIT_NAMES.get(name, name)
        label = f"{phase} split ({split['data']})" if split.get("data") else f"{phase} split"
        text = f"{label}: {split['analysed']} of {split['seen']} {unit} analysed"
        parts = [f"{len(split[k])} {label}: {_ids(split[k], limit)}"
                 for k, label in (("skipped", "skipped"), ("truncated", "truncated, not analysed"),
                                  ("windowed", "run in windows, analysed"),
                                  ("cut", "cut to the words that fit, analysed")) if split.get(k)]
        most = f"over {split['max_tokens']} tokens" if split.get("max_tokens") else "over the model's maximum"
        if split.get("over_budget"):  # some fit the model but not the attention-memory budget
            budget = split.get("max_attention_mb")
            most += f" or the attention budget ({budget:g} MB)" if budget else " or the attention budget"
            parts.append(f"{len(split['over_budget'])} of them for the budget only: {_ids(split['over_budget'], limit)}")
        lines.append(text + (f"; {most}: " + "; ".join(parts) if parts else f"; none {most}"))
    return lines
