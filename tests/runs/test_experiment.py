"""``probes run`` end to end on tiny models and the sample corpus: units saved and re-used, the report's numbers
are the saved results' numbers, an interrupted run resumes, ``probes report`` re-makes the same report.

The runs read the first :data:`LIMIT` sentences of each split (``probes run --limit``), which also checks that the
limit reaches every unit and its key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probes.errors import ConfigError
from probes.results import equal, load
from tests.tiny_models import build

# one worker runs this module, so the experiment runs once (first_run) for all its tests
pytestmark = pytest.mark.xdist_group("experiment")

#: ``probes run --limit``: sentences read from each split by every unit of these runs.
LIMIT = 30

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
        run = run_experiment(experiment, out=out, progress=False, limit=LIMIT)
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
    again = module.run_experiment(experiment, out=out, progress=False, limit=LIMIT)
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
    run_experiment(experiment, out=copy, progress=False, limit=LIMIT)
    computed = {(u["analysis"], u["model"]) for u in _units(copy) if not u["reused"]}
    assert computed == {("prune", "twin")}
    assert not (copy / gone["path"]).parent.joinpath(".sample-half").exists()
    run_experiment(changed, out=copy, progress=False, limit=LIMIT)
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
        module.run_experiment(experiment, out=out, progress=False, limit=LIMIT)
    with pytest.raises(ConfigError, match="has not finished"):
        module.report_experiment(out)
    monkeypatch.setattr(module, "_compute", real)
    module.run_experiment(experiment, out=out, progress=False, limit=LIMIT)  # the same folder: accepted, resumed
    units = _units(out)
    assert sum(u["reused"] for u in units) == 2 and len(units) == 8  # the two units finished before the interrupt


def test_limit_reaches_every_unit_and_the_record(first_run: tuple[Path, object]) -> None:
    out, _ = first_run
    record = json.loads((out / "run.json").read_text())
    assert record["options"] == {"limit": LIMIT}
    for unit in record["units"]:
        saved = json.loads((out / unit["path"] / "unit.json").read_text())
        own = 24 if unit["analysis"] == "prune" else LIMIT  # the smaller of the file's limit and --limit
        assert saved["inputs"]["options"]["limit"] == own, unit["analysis"]
    board = load(out / next(u["path"] for u in record["units"] if u["analysis"] == "leaderboard") / "result")
    assert board.record.data["report"]["sentences"] == LIMIT == board.record.data["select"]["sentences"]


def test_limit_is_part_of_every_key_and_absent_without_it(experiment: Path) -> None:
    """Without --limit a unit's options (so its key) are the file's; with it, every key differs from the full
    run's, so a limited run and a full run never re-use each other's units (but a --limit above a unit's own
    limit leaves what that unit computes, and so its key, as it is)."""
    from probes.runs import experiment as module
    from probes.runs.experiment_cache import unit_key
    from probes.runs.experiment_spec import read_experiment

    spec = read_experiment(experiment)
    hashes = module._Hashes()
    keys: dict[int | None, dict[str, str]] = {}
    for limit in (None, 10, 24, 100):
        atlas_keys: dict[tuple[str, str, str], str] = {}
        keys[limit] = {}
        for plan in module._plan(spec):
            inputs = module._inputs(plan, spec, hashes, atlas_keys, limit)
            key = keys[limit][plan.label] = unit_key(inputs)
            if plan.analysis.kind == "atlas":
                atlas_keys[(plan.analysis.name, plan.model.name, plan.data.name)] = key
            expected = {**plan.analysis.options, **({"js_items": True} if plan.analysis.kind == "atlas" else {})}
            if limit is not None:
                expected["limit"] = min(limit, plan.analysis.options.get("limit", limit))
            assert inputs["options"] == expected, (limit, plan.label)
    assert len(keys[None]) == 8
    for label, key in keys[None].items():
        assert keys[10][label] != key and keys[24][label] != keys[10][label], label
        prune = label.startswith("prune")
        assert (keys[100][label] == key) == prune, label  # prune's own limit (24) is below 100: nothing changes
        assert (keys[24][label] == key) == prune, label


def test_limit_below_one_is_refused_before_any_work(experiment: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main
    from probes.runs.experiment import run_experiment

    with pytest.raises(ConfigError, match="limit must be a whole number >= 1"):
        run_experiment(experiment, out=tmp_path / "run", progress=False, limit=0)
    assert not (tmp_path / "run").exists()
    assert main(["run", str(experiment), "--out", str(tmp_path / "run"), "--limit", "0"]) == 2
    assert "--limit" in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_cli_run_passes_limit_to_the_library(experiment: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main
    from probes.runs import experiment as module

    given: dict[str, object] = {}

    def stop(path: object, **kwargs: object) -> None:
        given.update(kwargs)
        raise ConfigError("stopped after the arguments were seen")

    monkeypatch.setattr(module, "run_experiment", stop)
    assert main(["run", str(experiment), "--limit", "7", "--no-progress"]) == 1
    assert given["limit"] == 7 and "stopped after" in capsys.readouterr().err
    assert main(["run", str(experiment), "--no-progress"]) == 1
    assert given["limit"] is None


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
