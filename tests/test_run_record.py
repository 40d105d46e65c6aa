"""The typed run record: built in one place, kept in order, saved and loaded like results."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from probes.errors import InputError
from probes.results import equal, load
from probes.run_record import Commit, Invocation, RunRecord
from probes.runs.record import run_record

ROOT = Path(__file__).resolve().parents[1]

#: A record as a leaderboard writes it: typed fields and the command's own, in a deliberate (not sorted) order.
GIVEN = {
    "command": "probes leaderboard", "model": "m", "data": {"report": {"sentences": 4}},
    "options": {"min_count": 3, "exclude": ["root"]}, "reported_on": "dev", "selection": {"mode": "split"},
    "counts": {"report": {"sentences": 4}}, "inputs": {"report": {"seen": 4}}, "timings": {"scoring_s": 0.5},
    "world": None, "versions": {"python": "3.12"},
    "invocation": {"cwd": "/x", "argv": ["probes", "leaderboard"], "probes_version": "0.1.0",
                   "git": {"commit": "a" * 40, "dirty": False}},
}


def test_fields_are_typed_and_the_order_is_kept() -> None:
    record = RunRecord.of(GIVEN)
    assert record.command == "probes leaderboard" and record.options == {"min_count": 3, "exclude": ["root"]}
    assert record.inputs == {"report": {"seen": 4}} and record.world is None and record.timings["scoring_s"] == 0.5
    assert record.invocation == Invocation("/x", ("probes", "leaderboard"), "0.1.0", Commit("a" * 40, False))
    assert record.commit == "a" * 40 and record.reported_on == "dev" and record.selected_on == "dev"
    assert record.selection == {"mode": "split"} and record.counts["report"]["sentences"] == 4
    assert record.details.leaderboard.halves is None and record.has("world") and not record.has("halves")
    assert record.to_dict() == GIVEN and list(record.to_dict()) == list(GIVEN)  # same keys, same order
    assert json.dumps(record.to_dict()) == json.dumps(GIVEN)


def test_updated_merges_as_a_dict_would() -> None:
    record = RunRecord.of(GIVEN)
    changed = record.updated({"selection": {"mode": "same"}}, significance={"n_tests": 2})
    assert list(changed.to_dict()) == list({**GIVEN, "selection": 0, "significance": 0})  # old keys stay in place
    assert changed.selection == {"mode": "same"} and changed.details.significance == {"n_tests": 2}
    assert record.selection == {"mode": "split"}  # frozen: the original is unchanged
    timed = record.with_timings(writing_s=1.0)
    assert timed.timings == {"scoring_s": 0.5, "writing_s": 1.0} and record.timings == {"scoring_s": 0.5}
    assert record.with_options({"limit": 2}).options == {**GIVEN["options"], "limit": 2}
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.command = "other"  # type: ignore[misc]


def test_only_the_given_keys_are_written() -> None:
    assert RunRecord().to_dict() == {} and RunRecord.of(None).to_dict() == {}
    assert RunRecord.of({"model": "m"}).to_dict() == {"model": "m"}
    assert RunRecord.of({"options": None}).to_dict() == {"options": None}
    assert RunRecord.of({"model": {"model": "x"}}).model_name == "x"
    assert RunRecord.of({"model_name": "shown", "model": "m"}).model_name == "shown"


def test_the_builder_adds_versions_and_invocation() -> None:
    record = run_record("probes x", options={"a": 1})
    assert list(record.to_dict()) == ["command", "options", "versions", "invocation"]
    assert record.versions["python"] and record.invocation is not None and record.invocation.argv


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    record = RunRecord.of(GIVEN)
    path = record.save(tmp_path)
    assert path == tmp_path / "run.json" and json.loads(path.read_text(encoding="utf-8")) == GIVEN
    again = RunRecord.load(tmp_path)
    assert again == record and again.to_dict() == GIVEN
    assert not [p for p in tmp_path.iterdir() if p.name != "run.json"]  # no temporary file left
    assert set(record.to_pandas()["field"]) >= {"command", "options.min_count", "invocation.git.commit"}


@pytest.mark.parametrize("text, found", [(None, "found none"), ("{", "unreadable"), ("[1]", "found list")])
def test_a_bad_run_json_is_named(tmp_path: Path, text: str | None, found: str) -> None:
    if text is not None:
        (tmp_path / "run.json").write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=found) as err:
        RunRecord.load(tmp_path)
    assert "run.json" in str(err.value)


def test_a_record_is_not_a_mapping() -> None:
    with pytest.raises(TypeError, match="not a mapping"):
        dict(RunRecord.of(GIVEN))  # type: ignore[call-overload]
    with pytest.raises(InputError, match="expected a mapping"):
        RunRecord.of({"options": 3})


def test_a_result_saves_its_record_as_the_plain_mapping(tmp_path: Path) -> None:
    """result.json holds the record exactly as a plain dict was held (same bytes); loading gives a RunRecord."""
    from probes.runs.experiment import ExperimentRun

    typed = ExperimentRun(comparison=None, record=RunRecord.of(GIVEN))
    plain = ExperimentRun(comparison=None, record=GIVEN)  # type: ignore[arg-type]  # a mapping is made a record
    assert isinstance(plain.record, RunRecord) and equal(typed, plain)
    typed.save(tmp_path / "typed")
    text = (tmp_path / "typed" / "result.json").read_text(encoding="utf-8")
    assert f'"record": {json.dumps(GIVEN, ensure_ascii=False)}' in text
    again = load(tmp_path / "typed")
    assert isinstance(again.record, RunRecord) and again.record.to_dict() == GIVEN and equal(again, typed)


def test_no_record_lookup_by_key_outside_the_run_record_module() -> None:
    """Every record is read through RunRecord; a key is spelled in one module only."""
    lookup = re.compile(r"record\[|record\.get\(")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "probes").rglob("*.py")) if path.name != "run_record.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if lookup.search(line)]
    assert not found, "run-record lookups by key outside probes/run_record.py:\n" + "\n".join(found)
