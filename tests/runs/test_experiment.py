"""``probes run`` end to end on tiny models and the sample corpus: units saved and re-used, the report's numbers
are the saved results' numbers, an interrupted run resumes, ``probes report`` re-makes the same report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probes.errors import ConfigError
from probes.results import equal, load
from tests.tiny_models import build

EXPERIMENT = """
[experiment]
name = "tiny"
title = "tiny against its twin"
seed_questions = true
n_resamples = 100
unit_reports = false

[models]
tiny = "{model}"
twin = "random-init:{model}@1"

[data.sample]
treebank = "sample:test"
select_on = "sample:dev"

[analyses.atlas]
js_sentences = 12
grad_sentences = 0
batch_size = 16

[analyses.leaderboard]
min_count = 10

[analyses.baselines]    # no options: taken from the atlas' own pass

[analyses.prune]
objective = "representation"
step = 0.25
random_seeds = [0, 1]
leaderboard_at = 0.5
limit = 24
select_limit = 24
"""


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("experiment")
    model = build("bert", root / "bert")
    path = root / "tiny.toml"
    path.write_text(EXPERIMENT.format(model=model), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def first_run(experiment: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    from probes.runs.experiment import run_experiment

    mp = pytest.MonkeyPatch()
    mp.setenv("PROBES_CACHE", str(tmp_path_factory.mktemp("cache")))
    out = experiment.parent / "run"
    try:
        run = run_experiment(experiment, out=out, progress=False)
    finally:
        mp.undo()
    return out, run


def _units(out: Path) -> list[dict]:
    return json.loads((out / "run.json").read_text())["units"]


def test_every_unit_is_saved_and_the_leaderboard_is_the_saved_one(first_run: tuple[Path, object]) -> None:
    out, run = first_run
    units = _units(out)
    assert {(u["analysis"], u["model"]) for u in units} == {(a, m) for a in ("atlas", "leaderboard", "baselines", "prune")
                                                           for m in ("tiny", "twin")}
    assert not any(u["reused"] for u in units)
    for name in ("report.md", "report.html", "experiment.toml", "comparison/result.json"):
        assert (out / name).is_file(), name
    # the report's best-head table is the saved leaderboards' rows, number for number
    table = pd.read_csv(out / "tables" / "best_heads.csv")
    for unit in (u for u in units if u["analysis"] == "leaderboard"):
        board = load(out / unit["path"] / "result")
        for row in board.rows:
            mine = table[(table.model == unit["model"]) & (table.relation == row.relation)
                         & (table.direction == row.direction)]
            assert len(mine) == 1, (unit["model"], row.relation)
            got = mine.iloc[0]
            assert (got["layer"], got["head"]) == (row.layer + 1, row.head + 1)  # 1-based in the table
            assert np.isclose(got.accuracy, row.accuracy) and np.isclose(got.margin, row.margin)
    # the markdown holds those accuracies as formatted numbers
    text = (out / "report.md").read_text()
    board = load(out / next(u["path"] for u in units if u["analysis"] == "leaderboard") / "result")
    assert f"{board.rows[0].accuracy:.3f}" in text
    assert "data:image/png;base64," in (out / "report.html").read_text()


def test_baselines_come_from_the_atlas_pass(first_run: tuple[Path, object]) -> None:
    out, _ = first_run
    units = {(u["analysis"], u["model"]): u for u in _units(out)}
    for model in ("tiny", "twin"):
        assert units[("baselines", model)]["from_atlas"] == "atlas"
        atlas = load(out / units[("atlas", model)]["path"] / "result")
        assert equal(load(out / units[("baselines", model)]["path"] / "result"), atlas.board.report_baselines)


def test_saved_comparison_equals_the_one_recomputed_from_units(first_run: tuple[Path, object]) -> None:
    from probes.runs.experiment import report_experiment

    out, run = first_run
    saved = load(out / "comparison")
    again = report_experiment(out)
    assert equal(again.comparison, saved)
    assert equal(run.comparison, saved)  # type: ignore[attr-defined]


def test_second_run_reuses_every_unit(experiment: Path, first_run: tuple[Path, object],
                                      monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from probes.runs import experiment as module

    out, run = first_run
    before = {u["path"]: (out / u["path"] / "unit.json").stat().st_mtime_ns for u in _units(out)}

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a saved unit was recomputed")

    monkeypatch.setattr(module, "_compute", never)
    monkeypatch.setenv("PROBES_CACHE", str(tmp_path / "elsewhere"))  # the twin is redrawn identically there
    again = module.run_experiment(experiment, out=out, progress=False)
    assert all(u["reused"] for u in _units(out))
    assert before == {u["path"]: (out / u["path"] / "unit.json").stat().st_mtime_ns for u in _units(out)}
    assert equal(again.comparison, run.comparison)  # type: ignore[attr-defined]


def test_interrupted_run_resumes_and_changed_options_recompute(experiment: Path, first_run: tuple[Path, object],
                                                               tmp_path: Path) -> None:
    import shutil

    from probes.runs.experiment import run_experiment

    out, _ = first_run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    gone = next(u for u in _units(copy) if u["analysis"] == "prune" and u["model"] == "twin")
    shutil.rmtree(copy / gone["path"])  # as if interrupted during that unit
    (copy / gone["path"]).parent.joinpath(".sample-half").mkdir()  # a temporary folder left behind
    changed = tmp_path / "changed.toml"
    changed.write_text(experiment.read_text().replace("js_sentences = 12", "js_sentences = 10"))
    run_experiment(experiment, out=copy, progress=False)
    computed = {(u["analysis"], u["model"]) for u in _units(copy) if not u["reused"]}
    assert computed == {("prune", "twin")}
    assert not (copy / gone["path"]).parent.joinpath(".sample-half").exists()
    run_experiment(changed, out=copy, progress=False)
    computed = {(u["analysis"], u["model"]) for u in _units(copy) if not u["reused"]}
    # the atlas' options changed, and the baselines taken from it; nothing else
    assert computed == {(a, m) for a in ("atlas", "baselines") for m in ("tiny", "twin")}


def test_run_folder_of_something_else_is_refused(experiment: Path, tmp_path: Path) -> None:
    from probes.runs.experiment import report_experiment, run_experiment

    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        run_experiment(experiment, out=other, progress=False)
    with pytest.raises(ConfigError, match="expected a run folder"):
        report_experiment(other)


def test_a_run_that_failed_leaves_a_folder_that_resumes(experiment: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.runs import experiment as module

    calls = []
    real = module._compute

    def fail_third(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setenv("PROBES_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(module, "_compute", fail_third)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        module.run_experiment(experiment, out=out, progress=False)
    with pytest.raises(ConfigError, match="has not finished"):
        module.report_experiment(out)
    monkeypatch.setattr(module, "_compute", real)
    module.run_experiment(experiment, out=out, progress=False)  # the same folder: accepted, resumed
    units = _units(out)
    assert sum(u["reused"] for u in units) == 2 and len(units) == 8  # the two units finished before the interrupt


def test_cli_report(first_run: tuple[Path, object]) -> None:
    from typer.testing import CliRunner

    from probes.cli import app

    out, _ = first_run
    result = CliRunner().invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert "report.md" in result.output and "8 units" in result.output


def test_a_hub_name_in_the_local_cache_is_keyed_by_its_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub-style name (``org/name``) found in the Hugging Face cache is hashed like a folder, offline."""
    from probes.extraction.loading import weights_sha256
    from probes.runs.experiment import _hub_snapshot

    cache = tmp_path / "hub"
    snapshot = cache / "models--probes-test--tiny-bert" / "snapshots" / ("0" * 40)
    build("bert", snapshot)
    (cache / "models--probes-test--tiny-bert" / "refs").mkdir(parents=True)
    (cache / "models--probes-test--tiny-bert" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    folder = _hub_snapshot("probes-test/tiny-bert")
    assert folder is not None and weights_sha256(folder) == weights_sha256(snapshot)
    assert _hub_snapshot("probes-test/not-cached") is None
