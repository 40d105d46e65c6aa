"""`probes demo`: the README's first command, offline.

CI runs the demo itself once, on the real all-MiniLM-L6-v2 weights (.ci/run, the README's command); here the
command runs in this process with a tiny random BERT in their place, so the test checks what the command does
with a model (the shipped sample corpus, heads chosen on dev and reported on test, every file written, where the
report is said) in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.cli import main


@pytest.fixture
def tiny_demo_model(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's model folder replaced by a tiny random BERT (tests/tiny_models.py)."""
    import probes.runs.demo as demo
    from tests.tiny_models import build

    folder = build("bert", tmp_path_factory.mktemp("demo-model"))
    monkeypatch.setattr(demo, "demo_model_dir", lambda: folder)
    return folder


def test_demo_runs_offline_and_says_where_the_report_is(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        tiny_demo_model: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.corpora.registry import SAMPLE_DIR

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"Report: {out / 'leaderboard.md'}" in printed and "silver" in printed
    run = json.loads((out / "run.json").read_text())
    assert run["command"] == "probes demo" and run["model"] == str(tiny_demo_model)
    assert run["held_out_selection"] and run["counts"]["report"]["sentences"] > 50
    assert {split: Path(run["data"][split]["path"]).name for split in ("report", "select")} == \
        {"report": "sample-test.conllu", "select": "sample-dev.conllu"}
    assert Path(run["data"]["report"]["path"]).parent == Path(SAMPLE_DIR).resolve()
    assert (out / "figures" / "overview.png").is_file()
    assert "ALL" in (out / "leaderboard.md").read_text()
