"""The run record's details, typed (issue 37): read by attribute, written back byte for byte, one run.json writer.

The files in ``tests/fixtures/run_records/`` are the ``run.json`` of every command that writes one, as the version
before typed details wrote them (``probes leaderboard``, ``demo``, ``atlas`` and its board, ``coref`` (same data and
halves), ``bridging``, ``probe``, ``importance``, ``prune``, ``match``, ``train``, ``run`` with and without a lab,
a lab's training unit and an unfinished ``run``), absolute paths replaced by neutral ones.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from probes.errors import InputError
from probes.run_details import ExperimentUnit, Selection, UnitOptions, placed_keys
from probes.run_record import RUN_FILE, RunRecord

ROOT = Path(__file__).resolve().parents[1]
RECORDS = Path(__file__).resolve().parent / "fixtures" / "run_records"
#: The modules that know the keys of run.json.
RECORD_MODULES = {"run_record.py", "run_details.py"}
#: Reads of a record by key: ``record.detail("x")``, ``record.options.get("x")``, ``unit.options["x"]``,
#: ``record.timings["x"]`` ... (a local dict that happens to be called ``options`` is not a record).
KEY_READS = re.compile(r"\.detail\(|\.options\.get\(|\.options\[|"
                       r"record\.(details|timings|inputs|options|selection|extractor)(\.get\(|\[)")


def _fixtures() -> list[Path]:
    return sorted(RECORDS.glob("*.json"))


def test_there_is_a_fixture_of_every_command() -> None:
    commands = {json.loads(p.read_text(encoding="utf-8"))["command"] for p in _fixtures()}
    assert commands == {"probes leaderboard", "probes demo", "probes atlas", "coref", "bridging", "probes probe",
                        "probes importance", "probes prune", "probes match", "probes train", "probes run"}


def test_no_record_is_read_by_key_outside_the_record_modules() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "probes").rglob("*.py")) if path.name not in RECORD_MODULES
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if KEY_READS.search(line)]
    assert not found, "records read by key outside probes/run_record.py and run_details.py:\n" + "\n".join(found)
    assert not hasattr(RunRecord, "detail")  # details are read by attribute only


def test_the_key_pattern_catches_what_it_should() -> None:
    """The grep above is only as good as its pattern: it finds each kind of key read, and not a local dict."""
    for line in ('record.detail("units")', 'board.record.options.get("bootstrap")', 'unit.options["cell"]',
                 'record.timings["scoring_s"]', 'record.details.get("x")', 'record.inputs["report"]',
                 'self.record.selection.get("mode")', 'record.extractor["device"]'):
        assert KEY_READS.search(line), line
    for line in ('options.get("limit")', 'record.details.run.units', 'record.options.bootstrap',
                 'record.selection.mode'):
        assert not KEY_READS.search(line), line


def test_every_key_has_one_place() -> None:
    """A key is a shared field or belongs to one command's section, so a record splits and joins without loss."""
    places = placed_keys()
    assert not {key: where for key, where in places.items() if len(where) > 1}
    assert {"selection", "units", "halves", "leaderboard"} <= set(places)  # "leaderboard" too: the atlas' board
    assert places["leaderboard"] == ["atlas"] and places["units"] == ["run"] and places["selection"] == ["shared"]


@pytest.mark.parametrize("fixture", _fixtures(), ids=lambda p: p.stem)
def test_every_commands_run_json_is_written_back_byte_for_byte(fixture: Path, tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    source = tmp_path / "in" / RUN_FILE
    shutil.copyfile(fixture, source)
    record = RunRecord.load(tmp_path / "in")
    written = record.save(tmp_path / RUN_FILE)
    assert written.read_bytes() == fixture.read_bytes()
    assert list(record.to_dict()) == list(json.loads(fixture.read_text(encoding="utf-8")))  # same keys, same order
    assert RunRecord.of(record.to_dict()) == record and RunRecord.of(record.to_dict()).to_dict() == record.to_dict()


def _load(name: str) -> RunRecord:
    return RunRecord.load(RECORDS / f"{name}.json")


def test_what_a_command_adds_is_read_by_attribute() -> None:
    board = _load("atlas_leaderboard")
    assert board.selection.mode == "split" and isinstance(board.selection, Selection)
    assert board.details.leaderboard.halves == {"select": 13, "report": 7}
    assert board.details.leaderboard.held_out_selection is True and board.options.sided is False
    assert board.options.bootstrap is not None and board.options.bootstrap["unit"] == "sentences"
    assert board.timings.extraction_s is not None and board.timings.extraction_s > 0
    assert board.extractor.device == "cpu"
    coref = _load("coref")
    assert coref.options.corpus is not None and coref.options.corpus.endswith("tiny_gum.conllu")
    assert coref.model_name == "/runs/tiny/bert"  # the extractor's model, as coref records it
    assert _load("demo").model_name == "sentence-transformers/all-MiniLM-L6-v2"
    atlas = _load("atlas")
    assert atlas.details.atlas.leaderboard is not None and atlas.details.atlas.leaderboard.selection is not None
    assert atlas.details.atlas.leaderboard.selection.mode == "split"
    assert _load("match").details.match.distance is not None
    train = _load("lab_train_unit").details
    assert train.train.training is not None and train.train.training.last_step == 20
    assert train.run.experiment is not None and train.run.experiment.cell == "identical"


def test_an_experiments_units_are_typed() -> None:
    run = _load("lab_run").details.run
    assert run.units is not None and all(isinstance(u, ExperimentUnit) for u in run.units)
    trained = [u for u in run.units if u.kind == "train"]
    assert trained and all(isinstance(u.options, UnitOptions) and u.options.cell for u in trained)
    assert {u.options.seed for u in trained if u.options is not None} == {1, 2}
    match = next(u for u in run.units if u.kind == "match")
    assert match.options is not None and match.options.other is not None and "~" not in match.model
    assert run.report_options is not None and run.report_options.n_resamples == 20
    unfinished = _load("run_unfinished")
    assert unfinished.details.run.units is None and unfinished.details.run.status is not None


def _with_unknown_keys(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with keys no version of probes wrote: at the top (not last), in ``options``, ``timings`` and
    ``selection``, and in the first unit and its options."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        out[key] = value
        if key == "command":
            out["from_the_future"] = {"nested": [1, 2.5, None], "text": "é"}
    out["options"] = {**doc.get("options", {}), "new_option": [1, 2]}
    out["timings"] = {"new_s": 0.25, **doc["timings"]}
    if "selection" in doc:
        out["selection"] = {**doc["selection"], "new_rule": "x"}
    if "units" in doc:
        first = {**doc["units"][0], "new_unit_key": True}
        first["options"] = {**first.get("options", {}), "new_unit_option": "y"}
        out["units"] = [first, *doc["units"][1:]]
    return out


@pytest.mark.parametrize("name", ["leaderboard", "lab_run"])
def test_a_key_no_class_names_survives_load_and_save(name: str, tmp_path: Path) -> None:
    doc = _with_unknown_keys(json.loads((RECORDS / f"{name}.json").read_text(encoding="utf-8")))
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    (tmp_path / RUN_FILE).write_text(text, encoding="utf-8")
    record = RunRecord.load(tmp_path)
    assert record.details.extra["from_the_future"] == {"nested": [1, 2.5, None], "text": "é"}
    assert record.options.extra["new_option"] == [1, 2] and record.timings.extra["new_s"] == 0.25
    assert list(record.to_dict()).index("from_the_future") == 1
    if name == "lab_run":
        unit = (record.details.run.units or ())[0]
        assert unit.extra["new_unit_key"] is True and unit.options is not None
        assert unit.options.extra["new_unit_option"] == "y"
    else:
        assert record.selection.extra["new_rule"] == "x"
    assert record.save(tmp_path / "again.json").read_text(encoding="utf-8") == text


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(selection=3), "selection"),
    (lambda d: d["selection"].update(mode=["split"]), "selection.mode"),
    (lambda d: d["options"].update(sided="yes"), "sided"),
    (lambda d: d["timings"].update(extraction_s="slow"), "extraction_s"),
    (lambda d: d.update(halves=[13, 7]), "halves"),
    (lambda d: d.update(files="run.json"), "files"),
])
def test_a_field_of_the_wrong_type_is_one_input_error_naming_it(change: Any, field: str, tmp_path: Path) -> None:
    doc = json.loads((RECORDS / "leaderboard.json").read_text(encoding="utf-8"))
    change(doc)
    (tmp_path / RUN_FILE).write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(field)) as err:
        RunRecord.load(tmp_path)
    assert str(err.value).startswith(str(tmp_path / RUN_FILE))


def test_a_unit_without_its_path_is_refused() -> None:
    doc = json.loads((RECORDS / "run.json").read_text(encoding="utf-8"))
    del doc["units"][2]["path"]
    with pytest.raises(InputError, match=r"units\[2\]\.path"):
        RunRecord.of(doc)


def test_a_null_mapping_field_is_written_back_as_null() -> None:
    record = RunRecord.of({"command": "x", "options": None, "timings": None})
    assert record.options == {} and record.options.device is None and record.timings.writing_s is None
    assert record.to_dict() == {"command": "x", "options": None, "timings": None}


def test_every_run_json_is_written_by_run_record_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command's run.json comes from RunRecord.save (the one writer), and equals what that record saves."""
    from probes.runs.leaderboard import leaderboard_from_pairs
    from tests.test_results import sentence_pairs

    saved: list[Path] = []
    real = RunRecord.save

    def spy(record: RunRecord, path: Any) -> Path:
        saved.append(real(record, path))
        return saved[-1]

    monkeypatch.setattr(RunRecord, "save", spy)
    pairs = sentence_pairs()
    board = leaderboard_from_pairs(pairs[:8], select_pairs=pairs[8:], report_name="first", select_name="rest",
                                   record={"command": "probes leaderboard", "model": "m"}, min_count=3)
    board.write(tmp_path / "board", figures=False)
    assert saved == [tmp_path / "board" / RUN_FILE]
    again = RunRecord.load(tmp_path / "board").save(tmp_path / "again.json")
    assert again.read_bytes() == (tmp_path / "board" / RUN_FILE).read_bytes()


def test_no_module_writes_run_json_by_hand() -> None:
    """Only run_record.py writes a run.json: no other module passes that name to a file writer."""
    writes = re.compile(r"(write_text|write_json|write_json_atomic|write_bytes|open|json\.dump)\(.*run\.json")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "probes").rglob("*.py")) if path.name != "run_record.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if writes.search(line)]
    assert not found, "\n".join(found)


def test_a_result_keeps_its_record_byte_for_byte(tmp_path: Path) -> None:
    """result.json holds the record as run.json does: saved, loaded and saved again, the bytes are the same."""
    from probes.results import load
    from probes.runs.leaderboard import leaderboard_from_pairs
    from tests.test_results import sentence_pairs

    pairs = sentence_pairs()
    record = json.loads((RECORDS / "leaderboard.json").read_text(encoding="utf-8"))
    board = leaderboard_from_pairs(pairs, report_name="all", record=_with_unknown_keys(record), min_count=3)
    board.save(tmp_path / "first")
    loaded = load(tmp_path / "first")
    assert loaded.record == board.record and loaded.record.details.extra["from_the_future"]["text"] == "é"
    loaded.save(tmp_path / "second")
    assert (tmp_path / "second" / "result.json").read_bytes() == (tmp_path / "first" / "result.json").read_bytes()
