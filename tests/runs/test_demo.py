"""`probes demo`: the README's first command, offline."""

from __future__ import annotations

import json

import pytest

from probes.cli import main


@pytest.mark.slow
def test_demo_runs_offline_and_says_where_the_report_is(tmp_path, capsys, minilm_path):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"Report: {out / 'leaderboard.md'}" in printed and "silver" in printed
    run = json.loads((out / "run.json").read_text())
    assert run["held_out_selection"] and run["counts"]["report"]["sentences"] > 50
    assert (out / "figures" / "overview.png").is_file()
    assert "ALL" in (out / "leaderboard.md").read_text()
