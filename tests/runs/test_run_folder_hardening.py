"""A run folder read back by ``probes report``: every field of its run.json checked, nothing read from outside it.

The folder is built with the project's own writers (``UnitStore.save``, ``run_record(...).save``) on a tiny saved
result, then damaged: a unit path that is absolute, climbs out with ``..`` or leads out through a link is refused
before any unit is loaded (a secret result outside never reaches the report); each malformed field is one
InputError naming run.json and the field, never an internal error; the CLI prints it as one line. Lock files that
are pipes, links leading out or hold impossible process ids are refused or taken over without hanging.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from probes.errors import FolderLockedError, InputError
from probes.extraction.outputs import ExtractionReport
from probes.run_record import RUN_FILE, RunRecord
from probes.runs.experiment import COMMAND, report_experiment
from probes.runs.experiment_cache import UnitStore

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need a POSIX system")

SECRET = "secret-sentence-id-4711"


def _result(skipped: str = "s3") -> ExtractionReport:
    return ExtractionReport(max_tokens=512, n_items=3, n_yielded=2, skipped=[skipped], truncated=[], windowed=[])


def _coreference() -> Any:
    """A coreference unit's result: antecedent scores of random heads on the tiny GUM fixture."""
    from probes.runs.coreference import CoreferenceRun
    from tests.test_results import coref_result

    return CoreferenceRun(coref_result(), None, RunRecord.of({"command": "probes coref"}), n_resamples=10)


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    """A finished run folder of one coreference unit on model m and data d, as `probes run` writes it."""
    from probes.runs.record import run_record

    folder = tmp_path / "run"
    unit = UnitStore(folder).save("coref", "m", "d", "k" * 64, {"kind": "coreference"}, _coreference(), 0.5)
    record = run_record(
        COMMAND, experiment={"name": "tiny", "title": "Tiny", "description": "A tiny run.", "out": str(folder)},
        models={"m": {"spec": "m", "kind": "trained", "n_layers": 2, "n_heads": 2, "weights_sha256": "0" * 64}},
        data={"d": {"treebank": "d.conllu", "files": {}}},
        analyses={"coref": {"kind": "coreference", "models": ["m"], "data": ["d"], "options": {}}},
        units=[{"analysis": "coref", "kind": "coreference", "model": "m", "data": "d", "key": unit.key,
                "reused": False, "seconds": 0.5, "path": unit.folder, "from_atlas": None}],
        seed_questions=False, report_options={"n_resamples": 10, "tolerance": 0.05, "seed": 0},
        timings={"units_s": 0.5})
    record.save(folder / RUN_FILE)
    return folder


@pytest.fixture()
def secret(tmp_path: Path) -> Path:
    """A unit folder outside the run folder, whose result holds :data:`SECRET`."""
    folder = tmp_path / "elsewhere" / "unit"
    _result(SECRET).save(folder / "result")
    return folder


def _edit(run: Path, change: Callable[[dict[str, Any]], object]) -> None:
    doc = json.loads((run / RUN_FILE).read_text(encoding="utf-8"))
    change(doc)
    (run / RUN_FILE).write_text(json.dumps(doc), encoding="utf-8")


def _set_unit(key: str, value: object) -> Callable[[dict[str, Any]], object]:
    return lambda doc: doc["units"][0].__setitem__(key, value)


def _nothing_read_outside(run: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every folder probes.results.load is asked for (to check that none is outside ``run``)."""
    import probes.results

    asked: list[Path] = []
    real = probes.results.load

    def spy(path: Any) -> Any:
        asked.append(Path(path).resolve())
        return real(path)

    monkeypatch.setattr(probes.results, "load", spy)
    return asked


def test_a_valid_run_folder_reports(run: Path) -> None:
    done = report_experiment(run)
    assert "1 units" in done.format() and (run / "report.md").is_file() and (run / "report.html").is_file()


@pytest.mark.parametrize("how", ["absolute", "dotdot", "link"])
def test_a_unit_path_leading_out_of_the_run_folder_is_refused(run: Path, secret: Path, how: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "link":
        (run / "results" / "evil").symlink_to(secret, target_is_directory=True)
    path = {"absolute": str(secret), "dotdot": os.path.relpath(secret, run), "link": "results/evil"}[how]
    _edit(run, _set_unit("path", path))
    asked = _nothing_read_outside(run, monkeypatch)
    with pytest.raises(InputError) as err:
        report_experiment(run)
    assert type(err.value) is InputError
    message = str(err.value)
    assert str(run / RUN_FILE) in message and "units[0].path" in message
    assert "outside" in message or "expected a relative path" in message
    assert asked == [] and not (run / "report.md").exists()
    written = [p.read_text(encoding="utf-8", errors="replace") for p in run.rglob("*") if p.is_file()]
    assert not any(SECRET in text for text in written)


def test_the_cli_says_it_in_one_line(run: Path, secret: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    _edit(run, _set_unit("path", str(secret)))
    assert main(["report", str(run)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "units[0].path" in err[0]
    assert "internal error" not in err[0] and SECRET not in err[0]


def test_a_link_inside_a_unit_folder_leading_out_is_refused(run: Path, secret: Path) -> None:
    unit = run / "results" / "coref" / "m" / "d"
    import shutil

    shutil.rmtree(unit / "result")
    (unit / "result").symlink_to(secret / "result", target_is_directory=True)
    with pytest.raises(InputError, match=r"units\[0\]\.path.*leads outside"):
        report_experiment(run)


def _pop(*keys: str) -> Callable[[dict[str, Any]], object]:
    def change(doc: dict[str, Any]) -> None:
        target = doc
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        del target[keys[-1]]
    return change


def _put(*keys: str, value: object) -> Callable[[dict[str, Any]], object]:
    def change(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[int(keys[-1]) if isinstance(target, list) else keys[-1]] = value
    return change


MALFORMED = [
    (_put("units", value="results/coref/m/d"), 'units: expected a list of units, found "results/coref/m/d"'),
    (_put("units", "0", "path", value=17), "units[0].path: expected a relative path string, found 17"),
    (_put("units", "0", "path", value=["results"]), "units[0].path: expected a relative path string"),
    (_put("units", "0", "path", value=""), "units[0].path: expected a relative path string"),
    (_put("units", "0", value=["coref"]), "units[0]: expected a mapping"),
    (_pop("units", "0", "model"), "units[0].model: expected a string (every unit names it), found none"),
    (_put("units", "0", "model", value="other"), "units[0].model: expected one of the models"),
    (_put("units", "0", "analysis", value=3), "units[0].analysis: expected a string, found 3"),
    (_put("units", "0", "seconds", value=-1), "units[0].seconds: expected a number >= 0, found -1"),
    (_put("units", "0", "reused", value="yes"), "units[0].reused: expected true or false"),
    (_put("units", "0", "options", value="x"), "units[0].options: expected a mapping"),
    (_put("units", "0", "options", value={"seed": -3}), "units[0].options.seed: expected a whole number"),
    (_put("models", value=["m"]), "models: expected a mapping"),
    (_put("models", "m", value="m"), 'models["m"]: expected a mapping'),
    (_put("models", "m", "n_layers", value=10**30), 'models["m"].n_layers: expected a whole number from 0'),
    (_put("models", "m", "n_heads", value="12"), 'models["m"].n_heads: expected a whole number'),
    (_put("models", "m", "lab", value="x"), 'models["m"].lab: expected a mapping'),
    (_put("models", "m", "lab", value={"heads": 2.5}), 'models["m"].lab.heads: expected a whole number'),
    (_put("models", "m", "query_key", value={"scale": "big"}), 'models["m"].query_key.scale: expected a number'),
    (_put("analyses", value="coref"), "analyses: expected a mapping"),
    (_put("analyses", "coref", "options", value=[1]), 'analyses["coref"].options: expected a mapping'),
    (_put("analyses", "coref", "models", value="m"), 'analyses["coref"].models: expected a list of strings'),
    (_put("data", value=5), "data: expected a mapping"),
    (_put("data", "d", "treebank", value=["a"]), 'data["d"].treebank: expected a string'),
    (_put("invocation", value="python -m probes"), "invocation: expected a mapping"),
    (_put("invocation", "argv", value="probes run x"), "invocation.argv: expected a list of strings"),
    (_put("invocation", "git", value={"commit": 1}), "invocation.git: expected"),
    (_put("command", value=5), "command: expected a string, found 5"),
    (_put("timings", value=[1]), "timings: expected a mapping"),
    (_put("report_options", "n_resamples", value=1e9), "report_options.n_resamples: expected a whole number from 1"),
    (_put("report_options", "n_resamples", value=10**9), "report_options.n_resamples: expected a whole number"),
    (_put("report_options", "n_resamples", value="1000"), "report_options.n_resamples: expected a whole number"),
    (_put("report_options", "n_resamples", value=-5), "report_options.n_resamples: expected a whole number"),
    (_put("report_options", "n_resamples", value=True), "report_options.n_resamples: expected a whole number"),
    (_put("report_options", "tolerance", value=2), "report_options.tolerance: expected a number in [0, 1)"),
    (_put("report_options", "seed", value=-1), "report_options.seed: expected a whole number"),
    (_put("report_options", value=[]), "report_options: expected a mapping"),
    (_put("seed_questions", value="yes"), "seed_questions: expected true or false"),
    (_put("experiment", value="tiny"), "experiment: expected a mapping"),
    (_put("experiment", "description", value={"a": 1}), "experiment.description: expected a string"),
]


@pytest.mark.parametrize("change, message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_a_malformed_field_is_one_input_error_naming_run_json_and_the_field(
        run: Path, change: Callable[[dict[str, Any]], object], message: str) -> None:
    _edit(run, change)
    with pytest.raises(InputError) as err:
        report_experiment(run)
    assert str(err.value).startswith(f"{run / RUN_FILE}: ") and message in str(err.value)


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "expected a JSON object of fields, found list"),
    ("{" * 10_000 + "}" * 10_000, "nested at most"),
    ('{"command": "probes run", "units": [', "unreadable text"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_a_run_json_that_is_not_a_record_is_one_input_error(run: Path, text: str | bytes, message: str) -> None:
    path = run / RUN_FILE
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InputError, match=message) as err:
        report_experiment(run)
    assert RUN_FILE in str(err.value)


def test_a_run_json_linking_out_of_the_run_folder_is_not_followed(run: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text((run / RUN_FILE).read_text(encoding="utf-8").replace("A tiny run.", SECRET), encoding="utf-8")
    (run / RUN_FILE).unlink()
    (run / RUN_FILE).symlink_to(outside)
    with pytest.raises(InputError, match="leads outside") as err:
        report_experiment(run)
    assert SECRET not in str(err.value) and not (run / "report.md").exists()


@needs_fifo
def test_a_run_json_that_is_a_pipe_does_not_hang(run: Path) -> None:
    (run / RUN_FILE).unlink()
    os.mkfifo(run / RUN_FILE)
    with pytest.raises(InputError, match="named pipe"):
        report_experiment(run)


def test_a_kind_edited_to_another_is_refused_before_the_comparison(run: Path) -> None:
    _edit(run, _set_unit("kind", "leaderboard"))
    with pytest.raises(InputError, match=r"units\[0\]\.kind: 'leaderboard' expects a saved Leaderboard, found a "
                                         "saved CoreferenceRun"):
        report_experiment(run)


def test_the_result_types_are_those_the_analyses_return() -> None:
    import importlib

    from probes.runs.experiment_record import RESULT_TYPES
    from probes.runs.experiment_schema import KINDS

    for kind, (function, _) in KINDS.items():
        module, name = function.split(":")
        returned = getattr(importlib.import_module(module), name).__annotations__["return"]
        assert RESULT_TYPES[kind] == ("BaselineScores" if kind == "baselines" else str(returned)), kind


def test_unit_store_loads_only_inside_its_run_folder(run: Path, secret: Path) -> None:
    store = UnitStore(run)
    assert store.load("results/coref/m/d").n_resamples == 10
    for outside in (str(secret), os.path.relpath(secret, run)):
        with pytest.raises(InputError, match="unit folder"):
            store.load(outside)


@needs_fifo
def test_a_unit_file_that_is_a_pipe_is_not_read(run: Path) -> None:
    unit = run / "results" / "coref" / "m" / "d" / "unit.json"
    key = json.loads(unit.read_text(encoding="utf-8"))["key"]
    unit.unlink()
    os.mkfifo(unit)
    assert UnitStore(run).find("coref", "m", "d", key) is None  # recomputed, not hung


# --- lock files --------------------------------------------------------------------------------------------


@needs_fifo
def test_a_lock_file_that_is_a_pipe_or_leads_out_is_respected_without_being_read(tmp_path: Path) -> None:
    from probes.locks import LOCK_NAME, FolderLock

    folder = tmp_path / "out"
    folder.mkdir()
    os.mkfifo(folder / LOCK_NAME)
    with pytest.raises(FolderLockedError, match="unreadable lock file"):
        FolderLock(folder).acquire()
    (folder / LOCK_NAME).unlink()
    outside = tmp_path / "holder.json"
    outside.write_text(json.dumps({"pid": 1, "host": "secret-host", "what": SECRET}), encoding="utf-8")
    (folder / LOCK_NAME).symlink_to(outside)
    with pytest.raises(FolderLockedError, match="unreadable lock file") as err:
        FolderLock(folder).acquire()
    assert SECRET not in str(err.value)


@pytest.mark.parametrize("pid", [10**30, -1, 2**31])
def test_a_lock_of_an_impossible_process_is_taken_over(tmp_path: Path, pid: int) -> None:
    from probes.locks import LOCK_NAME, FolderLock

    folder = tmp_path / "out"
    folder.mkdir()
    (folder / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": socket.gethostname()}), encoding="utf-8")
    with FolderLock(folder):
        assert json.loads((folder / LOCK_NAME).read_text(encoding="utf-8"))["pid"] == os.getpid()


@pytest.mark.parametrize("field, value", [("training_s", "abc"), ("training_s", float("nan")),
                                          ("last_step", -3), ("last_step", 2.5), ("tokens_per_second", [1])])
def test_a_lab_run_with_a_bad_number_is_one_input_error(tmp_path: Path, field: str, value: Any) -> None:
    """A lab unit's run.json whose training figures are not numbers is refused naming the field, not an internal
    error from float() or int()."""
    from types import SimpleNamespace

    from probes.runs.experiment_train import load_lab_run

    timings = {"training_s": value if field == "training_s" else 1.0}
    training = {"tokens_per_second": 10.0, "last_step": 4}
    if field != "training_s":
        training[field] = value
    doc = {"command": "train", "timings": timings, "training": training}  # as a run.json on disk holds it
    (tmp_path / "run.json").write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(InputError, match=field) as info:
        load_lab_run(SimpleNamespace(cell="c", seed=0, folder="u"), tmp_path)
    assert "run.json" in str(info.value)
