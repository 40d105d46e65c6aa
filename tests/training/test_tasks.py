"""The tasks whose roles are known (probes.training.tasks), their role scores and `probes train --task`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from probes.analysis.task_roles import role_scores
from probes.errors import ConfigError, InputError
from probes.training.config import TrainConfig
from probes.training.record import TrainingRecord
from probes.training.tasks import ROLES, TaskSpec

FIXTURES = Path(__file__).parent.parent / "fixtures" / "training"


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("ids", "loss_mask", "role_of", "key_of"))


@pytest.mark.parametrize("name", ["induction", "roles"])
def test_generators_are_deterministic(name):
    spec = TaskSpec(name, vocab=16, seq_len=40)
    assert _same(spec.generate(7, 5), spec.generate(7, 5))
    assert not _same(spec.generate(7, 5), spec.generate(8, 5))
    assert _same(spec.example(3, 0, 2), spec.example(3, 0, 2))
    assert not np.array_equal(spec.example(3, 0, 2).ids, spec.example(3, 1, 2).ids)  # train and dev streams differ


def test_induction_periods_and_mask():
    spec = TaskSpec("induction", vocab=10, seq_len=48, period_min=5, period_max=12)
    batch = spec.generate(0, 200)
    assert batch.periods is not None
    assert batch.periods.min() == 5 and batch.periods.max() == 12  # the whole range, and never outside it
    for ids, mask, period, keys in zip(batch.ids, batch.loss_mask, batch.periods, batch.key_of):
        t = np.arange(48)
        assert (ids[period:] == ids[:-period]).all()  # repeated with the period
        assert np.array_equal(mask, t >= period + 1)  # exactly the copies whose period has been seen
        q = np.nonzero(mask)[0] - 1
        assert np.array_equal(keys[q], q + 1 - period) and (keys[np.setdiff1d(t, q)] == -1).all()
        assert (ids[q + 1] == ids[keys[q]]).all()


def test_roles_targets_copy_their_keys():
    spec = TaskSpec("roles", vocab=12, seq_len=64)
    batch = spec.generate(1, 100)
    seq, q = np.nonzero(batch.role_of >= 0)
    keys, roles = batch.key_of[seq, q], batch.role_of[seq, q]
    assert np.array_equal(np.nonzero(batch.loss_mask), (seq, q + 1))  # the loss is on the answers only
    assert (batch.ids[seq, q] == spec.vocab + roles).all()  # the marker names the role
    assert (batch.ids[seq, q + 1] == batch.ids[seq, keys]).all()
    assert set(roles.tolist()) == set(range(len(ROLES)))
    for s, query, key, role in zip(seq, q, keys, roles):
        expected = {0: query - 1, 1: query - 2, 2: 0}.get(int(role))
        if expected is None:  # induction: after the last earlier copy of the token before the marker
            copies = np.nonzero(batch.ids[s, :query - 1] == batch.ids[s, query - 1])[0]
            expected = copies[-1] + 1
        assert key == expected


def test_each_ideal_map_scores_one_on_its_own_role_only():
    batch = TaskSpec("roles", vocab=16, seq_len=32).generate(3, 6)
    maps = batch.role_maps()
    uniform = np.tril(np.ones((32, 32))) / np.arange(1, 33)[:, None]
    for r, name in enumerate(batch.role_names):
        attention = np.broadcast_to(uniform, (6, 32, 32)).copy()
        rows = maps[:, r].sum(-1) > 0
        attention[rows] = maps[:, r][rows]  # the role's ideal rows, a causal uniform row elsewhere
        scores = role_scores(attention[:, None, None], batch)
        assert scores.of(name)[0, 0] == 1.0
        others = [scores.of(other)[0, 0] for other in batch.role_names if other != name]
        assert max(others) < 1.0


def test_a_previous_token_map_scores_as_the_atlas_does():
    batch = TaskSpec("induction", vocab=16, seq_len=40).generate(0, 3)
    previous = np.broadcast_to(np.eye(40, k=-1), (3, 40, 40)).copy()
    previous[:, 0, 0] = 1.0
    scores = role_scores(previous[:, None, None], batch)
    assert scores.of("std:previous_token")[0, 0] == pytest.approx(39 / 40)
    assert scores.of("induction")[0, 0] == 0.0  # no period is 1


@pytest.mark.parametrize(("options", "flag"), [
    ({"task": "copy"}, "--task"), ({"task": "induction", "arch": "bert"}, "--arch"),
    ({"task": "induction", "treebank": ("sample:dev",)}, "--treebank"), ({"task": "induction", "seq_len": 30}, "--seq-len"),
    ({"task": "induction", "period_min": 9, "period_max": 8}, "--period-max"), ({"task": "roles", "task_roles": 5}, "--task-roles"),
    ({"task_vocab": 8, "treebank": ("sample:dev",)}, "--task-vocab"), ({"task": "induction", "tokenizer": "train:300"}, "--tokenizer"),
])
def test_bad_task_options_name_the_option(options, flag):
    with pytest.raises(ConfigError, match=f"^{flag}:"):
        TrainConfig(**{"arch": "gpt2", "layers": 1, "heads": 2, "hidden": 16, **options})


@pytest.mark.parametrize("fixture", ["run-gpt2.json", "checkpoint-bert-step0.json"])
def test_old_records_load_as_text(fixture):
    data = json.loads((FIXTURES / fixture).read_text())
    assert "task" not in data and "task" not in data["config"]
    record = TrainingRecord.from_dict(data)
    assert record.config.task == "text" and record.config.task_spec is None
    assert "task" not in record.to_dict() and "task" not in record.config.to_dict()


def test_a_record_with_a_bad_task_is_refused():
    data = json.loads((FIXTURES / "run-gpt2.json").read_text())
    data["config"]["task"] = "copy"
    with pytest.raises(InputError, match="--task"):
        TrainingRecord.from_dict(data)


def test_train_induction_records_the_task_and_resumes(tmp_path: Path, capfd):
    from probes.cli import main

    out = tmp_path / "run"
    command = ["train", "--arch", "gpt2", "--layers", "1", "--heads", "2", "--hidden", "16", "--task", "induction",
               "--task-vocab", "12", "--period-min", "4", "--period-max", "8", "--seq-len", "16", "--steps", "4",
               "--batch-size", "2", "--symmetry-sentences", "0", "--out", str(out), "--no-progress"]
    assert main([*command, "--max-minutes", "0.000001"]) == 0, capfd.readouterr().err
    assert "stopped by --max-minutes" in capfd.readouterr().out
    record = json.loads((out / "training.json").read_text())
    assert record["config"]["task"] == "induction" and record["config"]["tokenizer"] == "task"
    assert record["task"]["period_min"] == 4 and record["task"]["vocab"] == 12
    assert record["objective"] == "causal-LM (induction task, predictable positions only)"
    assert record["data"]["sources"] == []
    assert main(command) == 0, capfd.readouterr().err
    printed = capfd.readouterr().out
    assert "resumed from step 1" in printed and "predictable positions only" in printed
    steps = sorted(int(p.name.split("-")[1]) for p in (out / "checkpoints").iterdir())
    assert steps == [0, 1, 2, 4]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
    assert tokenizer("t0 t11")["input_ids"] == [2, 13]  # after the end-of-text and padding tokens
    curves = (out / "curves.csv").read_text().splitlines()
    assert len(curves) == 5
    assert main([*command[:12], "16", *command[13:]]) == 1  # other task options: refused, naming them
    assert "--task-vocab: 12 -> 16" in capfd.readouterr().err
