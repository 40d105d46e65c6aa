"""``TrainReport`` is a result like every other (issue 37, item 7): it saves, loads back equal, and converts to
pandas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from probes.training.config import TrainConfig

torch = pytest.importorskip("torch")

TINY = dict(arch="bert", layers=1, heads=2, hidden=32, treebank=("sample:dev",), tokenizer="train:200", steps=2,
            batch_size=2, seq_len=64, attention_dropout=0.0, init="identical")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    from probes.runs.train import train_model

    torch.set_num_threads(1)
    return train_model(TrainConfig(**TINY), tmp_path_factory.mktemp("runs") / "tiny", progress=False,
                       symmetry_sentences=2)


def test_train_report_saves_loads_and_converts(report, tmp_path: Path) -> None:
    import pandas as pd

    import probes
    from probes.results import Result, equal
    from probes.runs.train import TrainReport

    assert isinstance(report, Result)
    saved = report.save(tmp_path / "report")
    back = TrainReport.load(saved)
    assert equal(back, report)
    assert back.run == report.run and back.record == report.record
    assert equal(probes.load(saved), report)
    table = back.to_pandas()
    assert isinstance(table, pd.DataFrame) and len(table) == len(report.run.checkpoints)
    assert table.equals(report.to_pandas())
    assert back.format() == report.format()


@pytest.mark.subprocess
def test_a_saved_train_report_loads_in_a_fresh_interpreter(report, tmp_path: Path) -> None:
    saved = report.save(tmp_path / "report")
    code = ("import sys, probes\n"
            "back = probes.load(sys.argv[1])\n"  # nothing imported by hand: probes.load finds the type's module
            "print(type(back).__name__, len(back.to_pandas()))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(saved)], capture_output=True, text=True, timeout=300,
                          cwd=REPO)  # the timeout only guards against a hang
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"TrainReport {len(report.run.checkpoints)}"
