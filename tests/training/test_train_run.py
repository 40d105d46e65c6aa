"""``probes train`` after training: the head symmetry of every checkpoint (saved, drawn, listed, printed), and a
trained checkpoint read by ``probes atlas`` and ``probes importance`` like any model folder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from probes.training.config import TrainConfig

torch = pytest.importorskip("torch")

TINY = dict(arch="bert", layers=2, heads=2, hidden=32, treebank=("sample:dev",), tokenizer="train:200", steps=4,
            batch_size=2, seq_len=64, attention_dropout=0.0)


def _run(out: Path, init: str, symmetry_sentences: int = 4):
    from probes.runs.train import train_model

    report = train_model(TrainConfig(init=init, **TINY), out, progress=False, symmetry_sentences=symmetry_sentences)
    report.write(out)
    return report


@pytest.fixture(scope="module")
def identical(tmp_path_factory: pytest.TempPathFactory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("runs") / "identical"
    return out, _run(out, "identical")


def test_identical_heads_stay_exactly_equal_at_every_checkpoint(identical):
    _, report = identical
    symmetry = report.symmetry
    assert list(symmetry.steps) == sorted(report.run.checkpoints) and symmetry.steps[-1] == 4
    assert symmetry.param_distance.shape == (len(symmetry.steps), 2, 2, 2)
    assert symmetry.n_sentences == 4
    assert np.all(symmetry.param_distance == 0.0)
    assert np.all(symmetry.attention_distance == 0.0)


def test_symmetry_is_saved_drawn_listed_and_printed(identical):
    import probes

    out, report = identical
    loaded = probes.load(out / "symmetry")
    np.testing.assert_array_equal(loaded.param_distance, report.symmetry.param_distance)
    np.testing.assert_array_equal(loaded.steps, report.symmetry.steps)
    assert (out / "figures" / "symmetry.png").stat().st_size > 0
    record = json.loads((out / "run.json").read_text())
    assert "figures/symmetry.png" in record["files"]
    from probes.training.allocator import keep_freed_memory

    assert record["training"]["allocator"] == keep_freed_memory()  # what the run set, said in its record
    assert any(f.startswith("symmetry/") for f in record["files"])
    assert record["symmetry"]["sentences"] == 4 and record["symmetry"]["steps"] == list(map(int, report.symmetry.steps))
    lines = [line for line in report.format().splitlines() if line.startswith("head symmetry")]
    assert lines == [f"head symmetry at step 4, layer {n}: mean parameter distance 0.0000, "
                     "mean attention distance 0.0000" for n in (1, 2)]


def test_independent_heads_differ_from_the_start(tmp_path: Path):
    report = _run(tmp_path / "independent", "independent")
    first = report.symmetry.layer_means()
    at_zero = first[first["step"] == 0]
    assert len(at_zero) == 2
    assert (at_zero["param_distance"] > 0).all() and (at_zero["attention_distance"] > 0).all()


def test_zero_symmetry_sentences_skips_it(tmp_path: Path):
    from probes.runs.train import train_model

    out = tmp_path / "skip"
    report = train_model(TrainConfig(init="identical", **{**TINY, "layers": 1, "steps": 1}), out, progress=False,
                         symmetry_sentences=0)
    report.write(out)
    assert report.symmetry is None and not (out / "symmetry").exists()
    assert "head symmetry" not in report.format()


@pytest.mark.parametrize("command", [
    ["atlas", "--limit", "4", "--js-sentences", "2", "--grad-sentences", "2", "--no-figures"],
    ["importance", "--limit", "6", "--n-resamples", "10"],
])
def test_trained_checkpoint_runs_in_atlas_and_importance(identical, tmp_path: Path, capfd, command):
    from probes.cli import main

    out, _ = identical
    target = tmp_path / command[0]
    code = main([command[0], "--model", f"trained:{out}@last", "--treebank", "sample:dev", *command[1:],
                 "--out", str(target), "--no-progress"])
    err = capfd.readouterr().err
    assert code == 0, err
    assert "newly initialized" not in err and "MISSING" not in err  # no load report for the pooler
    record = json.loads((target / "run.json").read_text())
    assert record["model"] == f"trained:{out}@last"
    if command[0] == "atlas":
        assert not (target / "figures").exists() and (target / "heads.csv").is_file()


def test_other_ranks_never_inspect_rank_zeros_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Under torchrun rank 1 writes its report to scratch; had it checked rank 0's folder while rank 0 turned
    its marker into run.json, it would see "other files" and refuse (a race CI once lost)."""
    import probes.runs.train as train_run
    from probes.reports.outdir import MARKER

    out = tmp_path / "ranked"
    report = train_run.train_model(TrainConfig(init="identical", **{**TINY, "layers": 1, "steps": 1}), out,
                                   progress=False, symmetry_sentences=0)
    (out / MARKER).unlink(missing_ok=True)  # rank 0 between its marker and its run.json: checkpoints only
    with pytest.raises(ValueError, match="not empty"):
        report.write(out)  # rank 0 itself would refuse such a folder ...
    monkeypatch.setattr(train_run, "launched_main", lambda: False)
    report.write(out)  # ... rank 1 does not look
