"""Roles form where the task needs them (issue 39): a seeded 2-layer attention-only model trained by
:func:`probes.training.trainer.train` on ``--task induction`` goes through the induction phase change and ends
with a previous-token head in layer 1 and induction heads in layer 2 (1-based; layers 0 and 1 in the code).

The model is a Llama (rotary positions), not a GPT-2: with GPT-2's learned absolute positions the previous-token
head formed in only some seeds within a test's budget (the role-lab experiment's settings, lr 2e-3 and 1000 steps
at data seed 0: seeds 2, 3 and 4 ended at held-out loss 1.83, 1.86 and 1.20, their best previous-token scores 0.03,
0.15 and 0.23; at lr 4e-3 and 700 steps two of three seeds stalled at loss 1.5 with none above 0.1). The settings
here formed both roles in each of the 6 seeds tried (1, 2, 3, 5, 6, 7 at data seed 0, on these 32 held-out
sequences: best previous-token score 0.73-0.94, every layer-2 head's induction score 0.56-0.62 and atlas induction
score 0.68-0.72; the run's held-out loss 3.46-3.50 at step 128, 0.11-0.19 at step 256, 0.015-0.018 at step 600).

Every score is judged against the same score of uniform causal attention (each query spreads evenly over the keys
it sees), computed here on the same sequences: the untrained model scores as uniform attention does (its
attention logits start near 0), and the trained roles score over 0.5, about 10x the uniform value.
About 20 s on one thread (600 steps of batch 32).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.analysis.task_roles import RoleScores, role_scores
from probes.training.checkpoints import read_training
from probes.training.config import TrainConfig
from probes.training.task_data import labelled
from probes.training.tasks import DEV_STREAM, TaskBatch, TaskSpec

torch = pytest.importorskip("torch")

CONFIG = TrainConfig(arch="llama", layers=2, heads=4, hidden=64, attention_only=True, task="induction",
                     task_vocab=64, seq_len=64, period_min=8, period_max=32, batch_size=32, steps=600,
                     learning_rate=3e-3, warmup=50, seed=2, data_seed=0)
#: Held-out sequences scored (the run's held-out stream: never trained on).
N_HELD_OUT = 32
#: A role "formed": a head puts more than half its attention on the role's key (uniform attention: 0.03-0.06).
FORMED = 0.5


def held_out(spec: TaskSpec, data_seed: int, n: int) -> TaskBatch:
    """The first ``n`` sequences of the run's held-out stream, as one batch."""
    parts = [spec.example(data_seed, DEV_STREAM, i) for i in range(n)]
    periods = [p.periods for p in parts if p.periods is not None]
    return TaskBatch(ids=np.concatenate([p.ids for p in parts]), loss_mask=np.concatenate([p.loss_mask for p in parts]),
                     role_of=np.concatenate([p.role_of for p in parts]), key_of=np.concatenate([p.key_of for p in parts]),
                     role_names=spec.role_names, periods=np.concatenate(periods) if periods else None)


def uniform_attention(batch: TaskBatch, layers: int, heads: int) -> np.ndarray:
    """``(N, L, H, T, T)`` causal attention spread evenly: row ``q`` puts ``1 / (q + 1)`` on each key ``<= q``."""
    t = batch.ids.shape[1]
    rows = np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None]
    return np.broadcast_to(rows, (len(batch.ids), layers, heads, t, t))


def measured(folder: Path, batch: TaskBatch) -> tuple[float, RoleScores]:
    """The held-out loss on the predictable positions and every head's role scores, of one checkpoint."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    ids, labels = labelled(batch, len(CONFIG.family.special_tokens))
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids), labels=torch.from_numpy(labels), output_attentions=True)
    attention = torch.stack(out.attentions, dim=1).numpy()  # (N, L, H, T, T)
    return float(out.loss), role_scores(attention, batch)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The run trained once: its checkpoints, and the first and last model measured on held-out sequences."""
    from probes.training.trainer import train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a module fixture runs before the per-test one-thread fixture (conftest)
    try:
        done = train(CONFIG, tmp_path_factory.mktemp("induction") / "run", progress=False)
        assert CONFIG.task_spec is not None
        batch = held_out(CONFIG.task_spec, CONFIG.data_seed, N_HELD_OUT)
        first, last = (measured(done.checkpoints[step], batch) for step in (0, CONFIG.steps))
    finally:
        torch.set_num_threads(threads)
    uniform = role_scores(uniform_attention(batch, CONFIG.layers, CONFIG.heads), batch)
    yield {"run": done, "batch": batch, "first": first, "last": last, "uniform": uniform}


def test_the_untrained_model_attends_as_uniform_attention_does(run: dict[str, Any]) -> None:
    _, first = run["first"]
    uniform = run["uniform"]
    for name in ("std:previous_token", "induction", "std:induction"):
        base = float(uniform.of(name)[0, 0])
        assert 0 < base < FORMED / 5  # the threshold is far above chance: about 0.06 and 0.03 here
        assert np.abs(first.of(name) - base).max() < 0.25 * base, name  # no head starts with a role


def test_a_previous_token_head_forms_in_layer_1_and_induction_heads_in_layer_2(run: dict[str, Any]) -> None:
    _, last = run["last"]
    previous, induction = last.of("std:previous_token"), last.of("induction")
    assert previous[0].max() > FORMED  # layer 1 (0-based 0): a head attends to the token before the query
    assert induction[1].max() > FORMED  # layer 2: a head attends to the token after the earlier copy
    assert last.of("std:induction")[1].max() > FORMED  # the atlas' induction score agrees
    # ... and each role sits in its own layer: the other layer's heads stay near uniform attention on it
    assert induction[0].max() < 2 * float(run["uniform"].of("induction")[0, 0])
    assert previous[1].max() < previous[0].max() / 2


def test_the_held_out_loss_goes_through_a_phase_change(run: dict[str, Any]) -> None:
    first_loss, _ = run["first"]
    last_loss, _ = run["last"]
    vocab = CONFIG.task_vocab + len(CONFIG.family.special_tokens)
    assert abs(first_loss - math.log(vocab)) < 0.1  # the untrained model guesses uniformly over its vocabulary
    assert last_loss < first_loss / 2
    # the run's own held-out loss (512 sequences, at each checkpoint): a plateau, then a fall to near 0
    curve = {step: read_training(folder).dev_loss for step, folder in run["run"].checkpoints.items()}
    assert curve[0] == pytest.approx(first_loss, abs=0.05)
    assert curve[128] > 0.75 * curve[0]  # still on the plateau at step 128 ...
    assert curve[CONFIG.steps] < 0.1 * curve[0]  # ... and the copies predicted by the end
