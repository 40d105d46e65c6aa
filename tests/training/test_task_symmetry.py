"""Identical heads stay bit-identical on the role lab's tasks (issue 39): a model built with ``--init identical``
and trained by :func:`probes.training.trainer.train` on ``--task induction`` or ``--task roles``, attention-only or
with its MLP, ends with every head of each layer equal to head 0, bit for bit, in every parameter block
(:func:`probes.training.schemes.head_blocks`; :func:`probes.training.symmetry.param_distances` exactly 0). Nothing in
the data, the loss mask or the MLP tells the heads apart. The control: the same run with attention dropout 0.1
(a mask drawn per head) makes them differ, so the equality above is not a check that cannot fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.training.config import TrainConfig
from probes.training.schemes import PARTS, InitScheme, head_blocks
from probes.training.symmetry import param_distances

torch = pytest.importorskip("torch")

LAYERS, HEADS, STEPS = 2, 4, 6
#: Each task's options, at the smallest sizes its checks allow.
TASK_OPTIONS: dict[str, dict[str, Any]] = {
    "induction": {"task_vocab": 16, "period_min": 3, "period_max": 8, "seq_len": 16},
    "roles": {"task_vocab": 16, "seq_len": 24}}


def _trained(tmp_path: Path, arch: str, task: str, attention_only: bool, attention_dropout: float = 0.0
             ) -> tuple[Any, Any]:
    """The first and last checkpoint of an ``identical`` run, loaded as transformers models."""
    from transformers import AutoModelForCausalLM

    from probes.training.trainer import train

    config = TrainConfig(arch=arch, layers=LAYERS, heads=HEADS, hidden=32, attention_only=attention_only,
                         init=InitScheme.parse("identical"), attention_dropout=attention_dropout, task=task, steps=STEPS,
                         batch_size=4, learning_rate=1e-2, seed=3, **TASK_OPTIONS[task])
    run = train(config, tmp_path / "run", progress=False)
    first, last = (AutoModelForCausalLM.from_pretrained(run.checkpoints[step], attn_implementation="eager")
                   for step in (0, STEPS))
    return first, last


def _head_vectors(model: Any, layer: int) -> np.ndarray:
    """``(H, P)``: each head's blocks of every part, end to end."""
    blocks = head_blocks(model, layer)
    return np.stack([torch.cat([blocks[part][h] for part in PARTS]).double().numpy() for h in range(HEADS)])


def _moved(first: Any, last: Any, where: str) -> float:
    """The largest change of a parameter whose name holds ``where``."""
    before = dict(first.named_parameters())
    return max((p - before[n]).abs().max().item() for n, p in last.named_parameters() if where in n)


@pytest.mark.parametrize(("arch", "task", "attention_only"), [
    ("gpt2", "induction", True), ("gpt2", "roles", True), ("gpt2", "induction", False), ("gpt2", "roles", False),
    ("llama", "induction", True), ("llama", "roles", False)])
def test_identical_heads_stay_bit_identical_on_the_tasks(tmp_path: Path, arch: str, task: str,
                                                        attention_only: bool) -> None:
    first, last = _trained(tmp_path, arch, task, attention_only)
    attention, mlp = (".attn.", ".mlp.") if arch == "gpt2" else (".self_attn.", ".mlp.")
    assert _moved(first, last, attention) > 1e-3  # the heads trained ...
    if not attention_only:
        assert _moved(first, last, mlp) > 1e-3  # ... beside an MLP that trained too
    for layer in range(LAYERS):
        blocks = head_blocks(last, layer)
        assert all(torch.equal(block, heads[0]) for heads in blocks.values() for block in heads[1:])
        assert not param_distances(_head_vectors(last, layer)).any()  # ... and stayed equal, bit for bit


@pytest.mark.parametrize(("task", "attention_only"), [("induction", True), ("roles", False)])
def test_attention_dropout_makes_identical_heads_differ(tmp_path: Path, task: str, attention_only: bool) -> None:
    first, last = _trained(tmp_path, "gpt2", task, attention_only, attention_dropout=0.1)
    for layer in range(LAYERS):
        assert not param_distances(_head_vectors(first, layer)).any()  # built identical ...
        apart = param_distances(_head_vectors(last, layer))
        assert (apart[~np.eye(HEADS, dtype=bool)] > 1e-2).all()  # ... and every pair apart (0.36-0.43 seen)
