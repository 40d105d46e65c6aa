"""The role lab's runner (probes.runs.role_lab): its file checked once with file and line, its jobs dealt to
torchrun ranks, worker processes, units re-used by key, the report re-made from the saved units alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.errors import ConfigError
from probes.runs.role_lab import deal, lab_jobs, report_role_lab, run_role_lab
from probes.runs.role_lab_spec import read_role_lab

REPO = Path(__file__).resolve().parents[2]

TINY = """\
[experiment]
kind = "role-lab"
title = "tiny role lab"
workers = {workers}
n_permutations = 100
n_draws = 100

[train]
arch = "gpt2"
layers = 2
heads = 2
hidden = 16
attention_only = true
task = "induction"
seq_len = 32
period_min = 4
period_max = 8
batch_size = 8
learning_rate = 2e-3
steps = 6
seeds = [1, 2]
symmetry_sentences = 0
eval_sequences = 4
map_sequences = 2

[train.independent]

[train.noise]
init = "identical+noise:0.01"
symmetry_sentences = 2
symmetry_steps = 3
seeds = [1]

[train.ensemble]
ensemble = 2
seeds = [1]

[families.independent]
cell = "independent"
role = "std:previous_token"
"""


def _file(tmp_path: Path, workers: int = 1, *, only_independent: bool = False) -> Path:
    path = tmp_path / "lab.toml"
    text = TINY.format(workers=workers)
    if only_independent:  # one cell of two seeds
        text = text[:text.index("[train.noise]")]
    path.write_text(text, encoding="utf-8")
    return path


def _units(run: Path) -> list[dict]:
    return json.loads((run / "run.json").read_text(encoding="utf-8"))["units"]


def test_the_file_is_checked_once_with_its_line(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text(TINY.format(workers=1).replace("[train.ensemble]\nensemble = 2", "[train.ensemble]\nensemble = 3"),
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.toml:\d+: train.ensemble.ensemble: expected a divisor of heads = 2"):
        read_role_lab(path)
    path.write_text(TINY.format(workers=1).replace("[families.independent]\n", "[families.independent]\n"
                                                  "models = \"x-{seed}\"\n"), encoding="utf-8")
    with pytest.raises(ConfigError, match="expected either cell = CELL .* found both"):
        read_role_lab(path)
    path.write_text(TINY.format(workers=1).replace("steps = 6\n", "steps = 6\nwarmups = 2\n"), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad.toml:\d+: train.warmups: unknown key"):
        read_role_lab(path)


def test_the_shipped_files_parse_and_name_their_families():
    lab = read_role_lab(REPO / "experiments" / "role-lab.toml")
    cells = {c.name: c for c in lab.cells}
    assert {"identical", "identical-dropout", "noise-1e-2", "noise-1e-4", "independent", "heads-1", "heads-2",
            "heads-8", "ensemble", "roles-2", "roles-4", "roles-8"} <= set(cells)
    assert all(len(cells[n].units) == 6 for n in ("identical", "noise-1e-4", "independent", "heads-8", "ensemble"))
    assert cells["ensemble"].ensemble == 4 and cells["noise-1e-2"].symmetry_steps > 0
    assert any(c.units[0].config.task == "text" for c in lab.cells)  # the natural-text cells are kept
    family = read_role_lab(REPO / "experiments" / "multiberts-family.toml").families[0]
    members = family.members()
    assert len(members) == 25 and members[0][1] == "google/multiberts-seed_0" and members[-1][2] == 24


def test_jobs_are_dealt_to_ranks_once_each(tmp_path: Path):
    first, then = lab_jobs(read_role_lab(_file(tmp_path)), str(tmp_path / "run"))
    assert [j.kind for j in then] == ["ensemble"] and len(then[0].members) == 2
    assert len({j.key for j in first}) == len(first)  # every unit its own key
    for size in (1, 2, 3):
        dealt = [deal(first, rank, size) for rank in range(size)]
        assert sorted(j.name for block in dealt for j in block) == sorted(j.name for j in first)
        assert max(map(len, dealt)) - min(map(len, dealt)) <= 1


def test_a_run_reuses_its_units_and_re_reports_from_them(tmp_path: Path):
    import probes

    run = tmp_path / "run"
    done = run_role_lab(_file(tmp_path, workers=2), out=run, progress=False)  # two worker processes
    assert done is not None
    units = _units(run)
    kinds = sorted({u["analysis"] for u in units})
    assert kinds == ["lab", "train"] and not any(u["reused"] for u in units)
    assert len([u for u in units if u["analysis"] == "train"]) == 2 + 1 + 2  # independent x2, noise, 2 members
    text = (run / "report.md").read_text(encoding="utf-8")
    assert text.count("\n## ") >= 4 and "## Answers" in text and "Family independent" in text
    assert (run / "train" / "noise" / "seed-1" / "symmetry-steps" / "result.json").is_file()
    again = run_role_lab(_file(tmp_path, workers=1), out=run, progress=False)
    assert again is not None and all(u["reused"] for u in _units(run))
    report_role_lab(run, out=tmp_path / "copy")
    copy = (tmp_path / "copy" / "report.md").read_text(encoding="utf-8")

    def parts(report: str) -> tuple[str, str]:  # the answers, and the evidence: the same from the saved units
        return report.split("## What ran")[0], report.split("## Evidence")[1].split("## Units")[0]

    assert parts(copy) == parts(text)
    assert type(probes.load(run)).__name__ == "RoleLabComparison"


def test_torchrun_ranks_share_one_run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Rank 1 (another process) computes its share and returns; rank 0 computes the rest, finds rank 1's units,
    writes the report: no unit is computed twice."""
    import os
    import subprocess
    import sys

    run, path = tmp_path / "run", _file(tmp_path, only_independent=True)
    first, _ = lab_jobs(read_role_lab(path), str(run))
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "1"}
    code = ("import sys; from probes.runs.role_lab import run_role_lab; "
            "sys.exit(0 if run_role_lab(sys.argv[1], out=sys.argv[2], progress=False) is None else 3)")
    other = subprocess.Popen([sys.executable, "-c", code, str(path), str(run)], env=env)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    try:
        assert run_role_lab(path, out=run, progress=False) is not None
    finally:
        assert other.wait(timeout=600) == 0  # rank 1 wrote no report
    reused = {u["model"] for u in _units(run) if u["reused"] and u["analysis"] == "train"}
    assert reused == {j.name for j in deal(first, 1, 2) if j.kind == "train"}  # rank 1's, not trained twice
