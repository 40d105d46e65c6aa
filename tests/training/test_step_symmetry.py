"""Head distances at every early step, measured in memory while training (probes.training.step_symmetry, issue 39
point 6): the same numbers the checkpoint symmetry measures on the saved checkpoints of those steps, exactly 0 for
identical heads without dropout, no change to the training, a resumed run continuing what the earlier call kept
(or writing nothing and saying why), and ``probes train --symmetry-steps`` recording it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.errors import ConfigError
from probes.training.config import TrainConfig

torch = pytest.importorskip("torch")

#: A tiny attention-only gpt2 on the induction task: 8 steps, checkpoints at 0, 1, 2, 4, 8; near-identical heads
#: (noise 1e-2) so the distances grow from small but non-zero values; dropout on, so a callback that left the model
#: in eval mode or drew random numbers would change the losses.
CONFIG = TrainConfig(arch="gpt2", layers=2, heads=4, hidden=16, attention_only=True, task="induction", task_vocab=8,
                     seq_len=16, period_min=2, period_max=4, seed=3, data_seed=5, steps=8, batch_size=4,
                     learning_rate=1e-2, init="identical+noise:0.01", attention_dropout=0.1, hidden_dropout=0.1)
SENTENCES = 6


def _train(out: Path, config: TrainConfig = CONFIG, **options: Any) -> Any:
    from probes.runs.train import train_model

    torch.set_num_threads(1)
    return train_model(config, out, progress=False, **{"symmetry_sentences": SENTENCES, **options})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run with ``symmetry_steps = 8``, and the same run without it, each with its report written."""
    base = tmp_path_factory.mktemp("step-symmetry")
    runs = {"with": _train(base / "with", symmetry_steps=8), "without": _train(base / "without")}
    for report in runs.values():
        report.write(report.run.out)
    return runs


def test_every_step_equals_the_checkpoint_symmetry_of_that_step(runs: dict[str, Any]) -> None:
    report = runs["with"]
    steps, checkpoints = report.step_symmetry, report.symmetry
    assert steps.steps.tolist() == list(range(9)) and checkpoints.steps.tolist() == [0, 1, 2, 4, 8]
    assert steps.n_sentences == checkpoints.n_sentences == SENTENCES
    rtol = 1e-4 if torch.cuda.is_available() else 1e-9  # trained (and measured) on a GPU, the checkpoints on the CPU
    for k, step in enumerate(checkpoints.steps):
        np.testing.assert_array_equal(steps.param_distance[step], checkpoints.param_distance[k])
        np.testing.assert_allclose(steps.attention_distance[step], checkpoints.attention_distance[k], rtol=rtol,
                                   atol=1e-15)
    upper = np.triu(np.ones((4, 4), dtype=bool), k=1)
    assert (steps.param_distance[:, :, upper] > 0).all() and (steps.attention_distance[:, :, upper] > 0).all()
    assert not np.array_equal(steps.param_distance[3], steps.param_distance[4])  # steps between checkpoints differ


def test_the_callback_does_not_change_the_training(runs: dict[str, Any]) -> None:
    from safetensors.torch import load_file

    a, b = runs["with"], runs["without"]
    assert a.step_symmetry is not None and b.step_symmetry is None
    for field in ("train_loss", "dev_loss"):
        np.testing.assert_array_equal(getattr(a.curves, field), getattr(b.curves, field))
    for step in (0, 1, 2, 4, 8):
        got = load_file(a.run.checkpoints[step] / "model.safetensors")
        expected = load_file(b.run.checkpoints[step] / "model.safetensors")
        assert got.keys() == expected.keys()
        assert all(torch.equal(got[k], expected[k]) for k in got)


def test_the_run_folder_and_record_hold_it(runs: dict[str, Any]) -> None:
    from probes.training.symmetry import HeadSymmetry

    report = runs["with"]
    saved = HeadSymmetry.load(report.run.out / "symmetry-steps")
    np.testing.assert_array_equal(saved.attention_distance, report.step_symmetry.attention_distance)
    summary = report.record.details.train.symmetry_steps
    assert (summary.asked, summary.last_step, summary.sentences, summary.folder, summary.skipped) == (
        8, 8, SENTENCES, "symmetry-steps", None)
    assert report.record.timings["symmetry_steps_s"] > 0
    assert "head symmetry at every step 0..8" in report.format()
    assert runs["without"].record.details.train.symmetry_steps is None
    assert not (runs["without"].run.out / "symmetry-steps").exists()


def test_identical_heads_without_dropout_are_exactly_zero_apart_at_every_step(tmp_path: Path) -> None:
    config = dataclasses.replace(CONFIG, init="identical", steps=4, attention_dropout=0.0, hidden_dropout=0.0)
    symmetry = _train(tmp_path / "run", config, symmetry_steps=4).step_symmetry
    assert symmetry.steps.tolist() == [0, 1, 2, 3, 4]
    assert not symmetry.param_distance.any() and not symmetry.attention_distance.any()


def test_a_resumed_run_continues_the_steps_kept_or_writes_none_and_says_why(tmp_path: Path,
                                                                            runs: dict[str, Any]) -> None:
    from probes.cli import main
    from probes.run_record import RunRecord
    from probes.training.symmetry import HeadSymmetry

    out = tmp_path / "run"
    command = ["train", "--arch", "gpt2", "--layers", "2", "--heads", "4", "--hidden", "16", "--attention-only",
               "--task", "induction", "--task-vocab", "8", "--period-min", "2", "--period-max", "4", "--seq-len",
               "16", "--steps", "8", "--batch-size", "4", "--learning-rate", "1e-2", "--init", "identical+noise:0.01",
               "--attention-dropout", "0.1", "--hidden-dropout", "0.1", "--seed", "3", "--data-seed", "5", "--symmetry-sentences", str(SENTENCES), "--symmetry-steps", "8",
               "--out", str(out), "--no-progress"]
    assert main([*command, "--max-minutes", "0.000001"]) == 0  # stops at step 1: steps 0..1 measured and kept
    first = HeadSymmetry.load(out / "symmetry-steps")
    assert first.steps.tolist() == [0, 1]
    assert main(command) == 0  # resumed from step 1: steps 2..8 measured, appended
    record = RunRecord.load(out)
    assert record.details.train.training.resumed_from == 1 and record.options["symmetry_steps"] == 8
    assert record.details.train.symmetry_steps.last_step == 8
    whole, expected = HeadSymmetry.load(out / "symmetry-steps"), runs["with"].step_symmetry
    np.testing.assert_array_equal(whole.steps, expected.steps)
    np.testing.assert_array_equal(whole.param_distance, expected.param_distance)  # as if it never stopped
    np.testing.assert_allclose(whole.attention_distance, expected.attention_distance, rtol=1e-9, atol=1e-15)
    assert main([*command, "--overwrite", "--max-minutes", "0.000001"]) == 0
    import shutil

    shutil.rmtree(out / "symmetry-steps")  # the earlier call's steps lost: the resumed call cannot measure them
    assert main(command) == 0
    assert not (out / "symmetry-steps").exists()
    summary = json.loads((out / "run.json").read_text())["symmetry_steps"]
    assert summary["last_step"] is None and "resumed from step 1" in summary["skipped"]


def test_bad_requests_are_refused(tmp_path: Path) -> None:
    from probes.training.step_symmetry import StepSymmetry

    with pytest.raises(ConfigError, match="--symmetry-sentences"):
        _train(tmp_path / "a", symmetry_steps=2, symmetry_sentences=0)
    with pytest.raises(ConfigError, match="--symmetry-steps"):
        _train(tmp_path / "b", symmetry_steps=-1)
    with pytest.raises(ConfigError, match="--symmetry-steps"):
        StepSymmetry(-1, list, list)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_lab_run_reads_the_steps_from_its_folder(runs: dict[str, Any]) -> None:
    from types import SimpleNamespace

    from probes.runs.experiment_train import load_lab_run

    unit = SimpleNamespace(cell="noise", seed=3, folder="train/noise/seed-3")
    run = load_lab_run(unit, runs["with"].run.out)
    assert run.step_symmetry is not None and run.step_symmetry.steps.tolist() == list(range(9))
    assert load_lab_run(unit, runs["without"].run.out).step_symmetry is None
