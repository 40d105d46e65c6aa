"""Fuzz: mutated run records and run folders load, or raise the input error (issue 36).

Two readers: :meth:`probes.run_record.RunRecord.load` on a mutated ``run.json`` (a leaderboard's record and an
experiment's), and :func:`probes.runs.experiment.report_experiment` (what ``probes report RUN_DIR`` runs) on a
mutated run folder of ``probes run``: its ``run.json`` and the saved result of its unit. Each must return, or raise
:class:`~probes.errors.InputError`, within the watchdog, opening nothing outside the folder: unit paths turned into
``../secret/...``, absolute paths and links lead to a valid twin whose text holds the marker
(see :mod:`tests.fuzz.fuzzlib`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from probes.errors import InputError
from probes.run_record import RUN_FILE, RunRecord
from tests.fuzz.fuzzlib import (
    MARKER,
    PATH_FORMS,
    REPLACEMENTS,
    Base,
    JsonSet,
    PathOf,
    Replace,
    apply_all,
    check,
    fuzz_settings,
    mutations,
    new_case,
)

#: Where the unit's saved result lies in the run folder (``probes run`` adds ``result/``).
UNIT = "results/leaderboard/m/d"

#: A leaderboard's record, with every typed field (tests/test_run_record.py's GIVEN).
LEADERBOARD_RECORD = {
    "command": "probes leaderboard", "model": "m", "data": {"report": {"sentences": 4}},
    "options": {"min_count": 3, "exclude": ["root"]}, "reported_on": "dev", "selection": {"mode": "split"},
    "counts": {"report": {"sentences": 4}}, "inputs": {"report": {"seen": 4}}, "timings": {"scoring_s": 0.5},
    "world": None, "versions": {"python": "3.12"},
    "invocation": {"cwd": "/x", "argv": ["probes", "leaderboard"], "probes_version": "0.1.0",
                   "git": {"commit": "a" * 40, "dirty": False}},
}


def experiment_record(text: str) -> dict[str, Any]:
    """The run.json of a finished ``probes run`` of one leaderboard unit (``text`` in its names and notes)."""
    return {
        "command": "probes run", "options": {"fresh": False, "limit": None},
        "experiment": {"name": "x", "title": f"T {text}", "description": f"Heads. {text}", "out": "runs/x",
                       "file": "x.toml"},
        "models": {"m": {"kind": "trained", "spec": f"m{text}", "base": "", "seed": None, "n_layers": 2, "n_heads": 3,
                         "weights_sha256": "0" * 64}},
        "data": {"d": {"treebank": "sample:test", "select_on": "sample:dev", "files": {"test": "a.conllu"}}},
        "analyses": {"leaderboard": {"kind": "leaderboard", "models": ["m"], "data": ["d"],
                                     "options": {"min_count": 3}}},
        "units": [{"analysis": "leaderboard", "kind": "leaderboard", "model": "m", "data": "d", "key": "k" * 16,
                   "reused": False, "seconds": 1.0, "path": UNIT, "options": {}}],
        "seed_questions": True, "report_options": {"n_resamples": 10, "tolerance": 0.05, "seed": 0},
        "status": "finished", "versions": {"python": "3.12"}, "timings": {"total_s": 2.0},
        "invocation": {"cwd": "/x", "argv": ["probes", "run", "x.toml"], "probes_version": "0.1.0", "git": None},
    }


def _run_folder(folder: Path, text: str) -> Path:
    from probes.runs.leaderboard import leaderboard_from_pairs
    from tests.test_results import sentence_pairs

    pairs = sentence_pairs()
    board = leaderboard_from_pairs(pairs[:8], select_pairs=pairs[8:], report_name="first", select_name="rest",
                                   record={"model": f"m{text}", "note": text}, min_count=3)
    board.save(folder / UNIT / "result")
    (folder / RUN_FILE).write_text(json.dumps(experiment_record(text), indent=2), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Base:
    """A run folder of ``probes run`` with one leaderboard unit."""
    return Base("run folder", _run_folder(tmp_path_factory.mktemp("run") / "run", ""))


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid run folder whose text holds the marker: what a mutated one may point at, never read."""
    return _run_folder(tmp_path_factory.mktemp("secret") / "run", MARKER)


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> list[Base]:
    """Folders holding one valid run.json each: a leaderboard's record and an experiment's."""
    out = []
    for name, record in (("leaderboard run.json", LEADERBOARD_RECORD), ("experiment run.json", experiment_record(""))):
        folder = tmp_path_factory.mktemp("record")
        RunRecord.of(record).save(folder)
        out.append(Base(name, folder))
    return out


@fuzz_settings(300)
@given(data=st.data())
def test_a_mutated_run_json_loads_or_raises_the_input_error(
        records: list[Base], secret_run: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(records), label="base")
    changes = data.draw(mutations(base.infos), label="mutations")
    with new_case(tmp_path_factory, base.folder, secret_run) as case:
        apply_all(case, changes)
        loaded = check(lambda: RunRecord.load(case.input), case)
        if isinstance(loaded, RunRecord):
            assert isinstance(loaded.to_dict(), dict)


def _report(folder: Path) -> Any:
    from probes.runs.experiment import report_experiment

    return report_experiment(folder)


@fuzz_settings(40)
@given(data=st.data())
def test_probes_report_of_a_mutated_run_json_writes_the_report_or_raises_the_input_error(
        run_folder: Base, secret_run: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    changes = data.draw(mutations(run_folder.only(RUN_FILE)), label="mutations")
    with new_case(tmp_path_factory, run_folder.folder, secret_run) as case:
        apply_all(case, changes)
        check(lambda: _report(case.input), case)


@fuzz_settings(25)
@given(data=st.data())
def test_probes_report_of_a_mutated_run_folder_writes_the_report_or_raises_the_input_error(
        run_folder: Base, secret_run: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    changes = data.draw(mutations(run_folder.infos), label="mutations")
    with new_case(tmp_path_factory, run_folder.folder, secret_run) as case:
        apply_all(case, changes)
        check(lambda: _report(case.input), case)


@pytest.mark.parametrize("how", REPLACEMENTS)
def test_a_run_folder_file_that_is_not_a_regular_file_inside_the_folder_is_refused_with_the_input_error(
        how: str, run_folder: Base, secret_run: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each file of the run folder replaced by a pipe, a folder, ``/dev/zero``, a link out to a valid twin ...:
    ``probes report`` (and, for run.json, the record's reader) refuse it without reading what it names."""
    for name in run_folder.infos:
        with new_case(tmp_path_factory, run_folder.folder, secret_run) as case:
            Replace(name, how).apply(case)
            if name == RUN_FILE:
                assert isinstance(check(lambda: RunRecord.load(case.input), case), InputError), name
            assert isinstance(check(lambda: _report(case.input), case), InputError), name


@pytest.mark.parametrize("how", PATH_FORMS)
def test_a_unit_path_leading_out_of_the_run_folder_is_refused_with_the_input_error(
        how: str, run_folder: Base, secret_run: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The unit's path made absolute, ``../``, a link out ...: refused before the valid twin it names is read."""
    with new_case(tmp_path_factory, run_folder.folder, secret_run) as case:
        JsonSet(RUN_FILE, ("units", 0, "path"), PathOf(how)).apply(case)
        assert isinstance(check(lambda: _report(case.input), case), InputError)
