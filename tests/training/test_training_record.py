"""``training.json`` through its typed records (issue 37): files written by the version before them load and
write back byte for byte; every field is read by attribute; a missing or mistyped field is one input error naming
the file and the field; the run folder's reader refuses such a record as no run's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from probes.errors import ConfigError, InputError
from probes.training.record import CheckpointRecord, TrainingRecord, record_text, run_parts
from probes.training.schemes import InitScheme
from tests.training.cases import a_record

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training"
#: Written by the trainer before the records were typed: a run's record (gpt2, identical) and a step-0 checkpoint's
#: (bert, identical+noise:0.01, no training loss yet).
RUN_FILE, CHECKPOINT_FILE = FIXTURES / "run-gpt2.json", FIXTURES / "checkpoint-bert-step0.json"


def test_files_of_the_untyped_version_load_and_write_back_byte_for_byte() -> None:
    run_text, checkpoint_text = RUN_FILE.read_text(encoding="utf-8"), CHECKPOINT_FILE.read_text(encoding="utf-8")
    run = TrainingRecord.from_dict(json.loads(run_text), RUN_FILE)
    checkpoint = CheckpointRecord.from_dict(json.loads(checkpoint_text), CHECKPOINT_FILE)
    assert record_text(run) == run_text and record_text(checkpoint) == checkpoint_text
    # read by attribute, typed
    assert run.config.arch == "gpt2" and run.scheme == InitScheme("identical") and run.objective == "causal-LM"
    assert run.data.sources[0].spec == "sample:dev" and len(run.data.sources[0].sha256) == 64
    assert run.tokenizer.kind == "byte-level BPE" and run.processes == 1 and run.optimizer.name == "adamw_torch"
    assert checkpoint.step == 0 and checkpoint.tokens_seen == 0 and checkpoint.train_loss is None
    assert checkpoint.run.scheme == InitScheme("identical+noise", 0.01) and math.isfinite(checkpoint.dev_loss)


def test_round_trip_and_what_run_json_repeats() -> None:
    record = a_record(init="identical+noise:0.01", seed=7)
    data = record.to_dict()
    assert TrainingRecord.from_dict(data) == record
    assert data["scheme"] == InitScheme("identical+noise", 0.01).describe() and data["config"]["init"] == \
        "identical+noise:0.01"
    assert data["seeds"] == {"seed": 7, "data_seed": 0} and data["objective"] == "masked-LM"
    checkpoint = CheckpointRecord(run=record, step=4, tokens_seen=512, train_loss=3.5, dev_loss=3.75)
    assert CheckpointRecord.from_dict(checkpoint.to_dict()) == checkpoint
    assert record_text(checkpoint) == json.dumps(checkpoint.to_dict(), indent=2, sort_keys=True) + "\n"
    parts = run_parts(record)
    assert list(parts) == ["data", "scheme", "tokenizer"]
    assert list(parts["data"]) == ["sources", "train_sentences", "dev_sentences", "dev_rule", "train_blocks",
                                   "dev_blocks"]  # run.json keeps the order a fresh run gives it
    assert run_parts(None) == {"data": None, "scheme": None, "tokenizer": None}


@pytest.mark.parametrize(("damage", "words"), [
    (lambda d: d.pop("tokenizer"), ["expected the field(s) tokenizer", "found none"]),
    (lambda d: d["data"].pop("dev_blocks"), ["data.dev_blocks"]),
    (lambda d: d["data"]["sources"][0].update(sha256=7), ["data.sources[0].sha256", "expected str", "int 7"]),
    (lambda d: d.update(processes="two"), ["'processes'", "expected int", "'two'"]),
    (lambda d: d["config"].update(heads=3), ["field 'config'", "--heads", "found 3"]),
    (lambda d: d["config"].update(init="same"), ["field 'config'", "--init", "'same'"]),
    (lambda d: d.update(step="late"), ["'step'", "expected int", "'late'"]),
    (lambda d: d.update(step=-2), ["'step'", ">= 0", "-2"]),
])
def test_a_damaged_record_names_the_file_and_the_field(damage, words) -> None:
    data = json.loads(CHECKPOINT_FILE.read_text(encoding="utf-8"))
    damage(data)
    with pytest.raises(InputError) as caught:
        CheckpointRecord.from_dict(data, CHECKPOINT_FILE)
    message = str(caught.value)
    assert message.startswith(f"{CHECKPOINT_FILE}: ") and all(w in message for w in words), message


def test_the_run_folder_reader_refuses_a_record_that_is_not_one(tmp_path: Path) -> None:
    from probes.training.runfolder import read_run

    data = json.loads(RUN_FILE.read_text(encoding="utf-8"))
    (tmp_path / "training.json").write_text(RUN_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    found = read_run(tmp_path)
    assert found is not None and found.config.arch == "gpt2"
    del data["data"]
    (tmp_path / "training.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"not the record of a `probes train` run \(expected the field\(s\) data"):
        read_run(tmp_path)
