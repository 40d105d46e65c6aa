"""Every folder a command writes loads with ``probes.load`` (issue 38).

Each command runs once through the command line (``probes.cli.main``) on a tiny random BERT
(tests/tiny_models.py), the sample treebanks and the tiny coreference corpus, with small limits; then
``probes.load(out)`` gives the command's main result, the one its ``run.json`` names (``result``). A run.json that
names a folder outside the run folder is refused, and a folder that is neither a saved result nor a run folder
says what it expected and found. ``probes baselines`` prints its table and writes no folder; ``probes extract``
writes an attention store, which ``probes.load`` refuses naming ``probes.open_store``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import probes
from probes.cli import main
from probes.errors import InputError
from probes.results import equal
from tests.tiny_models import build

GUM_STYLE = Path(__file__).resolve().parent / "fixtures" / "coref" / "tiny_gum.conllu"
QUIET = ["--no-progress"]

EXPERIMENT = """\
[experiment]
name = "tiny-load"
unit_reports = false
seed_questions = false
n_resamples = 20

[models]
tiny = "{model}"

[data.sample]
treebank = "sample:test"
select_on = "sample:dev"

[analyses.leaderboard]
min_count = 1
"""


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One tiny BERT shared by every command here."""
    return str(build("bert", tmp_path_factory.mktemp("load-every-folder")))


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(args)
    assert code == 0, capsys.readouterr().err


def _named(out: Path) -> str:
    """The main result's folder as ``run.json`` names it."""
    return str(json.loads((out / "run.json").read_text(encoding="utf-8"))["result"])


# (command line after the model, the result's folder in the run folder, the type probes.load gives)
COMMANDS: dict[str, tuple[Callable[[str], list[str]], str, str]] = {
    "leaderboard": (lambda m: ["leaderboard", "-m", m, "-t", "sample:test", "--select-on", "sample:dev",
                               "--limit", "20", "--min-count", "1", "--no-figures"], "leaderboard", "Leaderboard"),
    "atlas": (lambda m: ["atlas", "-m", m, "-t", "sample:dev", "--limit", "16", "--js-sentences", "4",
                         "--clusters", "2", "--grad-sentences", "0", "--head-type-sequences", "1", "--no-figures"],
              "atlas", "Atlas"),
    "coref": (lambda m: ["coref", "-m", m, "-t", str(GUM_STYLE), "--select-on", "same", "--n-resamples", "10",
                         "--no-figures"], "coref", "CoreferenceRun"),
    "bridging": (lambda m: ["bridging", "-m", m, "-t", str(GUM_STYLE), "--select-on", "same", "--n-resamples", "10",
                            "--no-figures"], "bridging", "BridgingRun"),
    "probe": (lambda m: ["probe", "-m", m, "--train", "sample:dev", "--eval", "sample:test", "--max-train", "20",
                         "--max-eval", "10", "--min-count", "5", "--probe", "per-head", "--seeds", "1",
                         "--no-control", "--no-random-init", "--no-figures"], "probe", "ProbeRun"),
    "importance": (lambda m: ["importance", "-m", m, "-t", "sample:dev", "--limit", "12", "--no-loo",
                              "--n-resamples", "10"], "importance", "HeadImportance"),
    "prune": (lambda m: ["prune", "-m", m, "-t", "sample:dev", "--limit", "12", "--step", "0.5", "--seeds", "1",
                         "--orders", "", "--no-one-per-layer", "--no-leaderboard"], "pruning", "Pruning"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_commands_folder_loads_as_its_result(command: str, bert: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    args, folder, kind = COMMANDS[command]
    out = tmp_path / command
    _run([*args(bert), *QUIET, "--out", str(out)], capsys)
    loaded = probes.load(out)
    assert type(loaded).__name__ == kind and _named(out) == folder
    assert equal(loaded, probes.load(out / folder))  # the folder run.json names, nothing guessed
    assert type(loaded).load(out) is not loaded and equal(type(loaded).load(out), loaded)
    assert len(loaded.to_pandas().columns) > 0  # a whole result, its tables made without the model
    if command == "atlas":  # the atlas' leaderboard/ is a leaderboard's folder: it loads as the atlas' board
        assert equal(probes.load(out / "leaderboard"), loaded.board)


def test_a_loaded_leaderboard_equals_the_one_the_run_returned(bert: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    board = probes.leaderboard(bert, "sample:test", select_on="sample:dev", limit=20, min_count=1, device="cpu",
                               analyses=["specials"])
    paths = board.write(tmp_path / "board", figures=False)
    loaded = probes.load(tmp_path / "board")
    assert equal(loaded, board) and isinstance(loaded, probes.Leaderboard)
    assert loaded.format() == board.format() and loaded.to_pandas().equals(board.to_pandas())
    assert "leaderboard/result.json" in json.loads(paths["run.json"].read_text(encoding="utf-8"))["files"]
    assert equal(probes.load(paths["analyses/specials"]), board.analyses["specials"])  # still there too


def test_the_demo_folder_loads_as_a_leaderboard(bert: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import probes.runs.demo as demo

    monkeypatch.setattr(demo, "demo_model_dir", lambda: Path(bert))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _run(["demo", "--out", str(tmp_path / "demo"), *QUIET], capsys)
    board = probes.load(tmp_path / "demo")
    assert isinstance(board, probes.Leaderboard) and board.record.command == "probes demo" and board.rows


def test_the_match_folder_loads(bert: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.runs.match import MatchRun

    other = str(build("bert", tmp_path / "other", seed=1))
    _run(["match", "-m", bert, "-m", other, "-t", "sample:dev", "--limit", "8", "--n-resamples", "10",
          "--min-count", "1", "--no-figures", *QUIET, "--out", str(tmp_path / "match")], capsys)
    assert isinstance(probes.load(tmp_path / "match"), MatchRun) and _named(tmp_path / "match") == "match"


def test_the_train_folder_loads_as_its_curves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.training.curves import TrainingCurves

    out = tmp_path / "train"
    _run(["train", "--arch", "bert", "--layers", "1", "--heads", "2", "--hidden", "32", "--tokenizer", "train:200",
          "--treebank", "sample:dev", "--steps", "2", "--batch-size", "2", "--seq-len", "16",
          "--symmetry-sentences", "0", *QUIET, "--out", str(out)], capsys)
    curves = probes.load(out)
    assert isinstance(curves, TrainingCurves) and _named(out) == "curves"
    assert equal(curves, probes.load(out / "curves"))


def test_an_experiment_and_its_report_load_as_the_comparison(bert: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.compare.types import Comparison

    monkeypatch.setenv("PROBES_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "tiny.toml"
    path.write_text(EXPERIMENT.format(model=bert), encoding="utf-8")
    run, again = tmp_path / "run", tmp_path / "again"
    _run(["run", str(path), "--out", str(run), "--limit", "12", *QUIET], capsys)
    _run(["report", str(run), "--out", str(again)], capsys)
    first, second = probes.load(run), probes.load(again)
    assert isinstance(first, Comparison) and _named(run) == _named(again) == "comparison"
    assert set(first.models) == {"tiny"} and first.best_heads  # the leaderboard unit's heads
    assert equal(first, second)  # the report made again from the saved units


def test_a_store_is_refused_naming_open_store(bert: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    _run(["extract", "-m", bert, "-t", "sample:dev", "--limit", "3", *QUIET, "--store", str(store)], capsys)
    with pytest.raises(InputError, match=r"an attention store \(manifest\.json\).*probes\.open_store") as err:
        probes.load(store)
    assert str(store) in str(err.value)
    assert len(probes.open_store(store)) == 3  # what it names reads it


# ----------------------------------------------------------------------------- folders that are not results
def _saved(folder: Path) -> Path:
    from probes.extraction.outputs import ExtractionReport

    return ExtractionReport(max_tokens=8, n_items=1, n_yielded=1, skipped=[], truncated=[], windowed=[]).save(folder)


def _run_folder(folder: Path, result: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"command": "probes leaderboard", "result": result}),
                                     encoding="utf-8")
    return folder


def test_a_run_json_naming_a_folder_outside_is_refused(tmp_path: Path) -> None:
    _saved(tmp_path / "elsewhere")
    inside = _run_folder(tmp_path / "inside", "here")
    saved = _saved(inside / "here")
    assert equal(probes.load(inside), probes.load(saved))  # a folder inside loads
    for name in ("../elsewhere", str(tmp_path / "elsewhere"), ""):
        with pytest.raises(InputError, match="field 'result'.*expected a relative path inside") as err:
            probes.load(_run_folder(tmp_path / "out", name))
        assert str(tmp_path / "out" / "run.json") in str(err.value)
    with pytest.raises(InputError, match="field 'result': expected str or None, found int 7"):
        probes.load(_run_folder(tmp_path / "typed", 7))


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links on this system")
def test_a_run_json_naming_a_link_that_leads_outside_is_refused(tmp_path: Path) -> None:
    _saved(tmp_path / "elsewhere")
    out = _run_folder(tmp_path / "out", "board")
    try:
        (out / "board").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    except OSError as exc:  # a system that allows no links here (Windows without the right)
        pytest.skip(f"cannot make a symbolic link: {exc}")
    with pytest.raises(InputError, match="field 'result' 'board': leads outside"):
        probes.load(out)


def test_a_run_json_naming_no_result_says_which_are_there(tmp_path: Path) -> None:
    out = tmp_path / "old"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"command": "probes atlas"}), encoding="utf-8")
    with pytest.raises(InputError, match="expected the folder of the run's main result, found none.*probes atlas.*"
                                         "the folder holds no saved result"):
        probes.load(out)
    _saved(out / "atlas")
    with pytest.raises(InputError, match=r"saved results in atlas/: load one of them"):
        probes.load(out)


def test_an_empty_folder_says_what_it_expected(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"neither a saved result nor a command's output folder: expected "
                                         r"result\.json, found an empty folder.*run\.json naming its result") as err:
        probes.load(tmp_path / "empty")
    assert str(tmp_path / "empty") in str(err.value)
