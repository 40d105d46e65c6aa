"""The fuzz suite's own machinery (tests/fuzz/fuzzlib.py) catches what it is there to catch: a loader that reads
outside its folder, hangs on a pipe, raises anything but the input error, or writes beside its folder; and its
mutations write what they say."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from probes.errors import FormatError
from tests.fuzz.fuzzlib import (
    MARKER,
    SECRET,
    Case,
    Deep,
    Hang,
    JsonSet,
    PathOf,
    PutInt,
    Replace,
    check,
    new_case,
    toml_dumps,
)


@pytest.fixture
def case(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Case:
    base, secret = tmp_path / "base", tmp_path / "secret"
    base.mkdir(), secret.mkdir()
    (base / "a.json").write_text(json.dumps({"path": "b.txt", "n": 1}), encoding="utf-8")
    (base / "b.txt").write_text("inside", encoding="utf-8")
    (secret / "b.txt").write_text(MARKER, encoding="utf-8")
    with new_case(tmp_path_factory, base, secret) as made:
        yield made


def _follow(folder: Path) -> str:
    """A careless loader: reads the file ``a.json`` names, wherever it is."""
    named = json.loads((folder / "a.json").read_text(encoding="utf-8"))["path"]
    return (folder / named).read_text(encoding="utf-8")


def test_the_careless_loader_passes_on_the_valid_input(case: Case) -> None:
    assert check(lambda: _follow(case.input), case) == "inside"


@pytest.mark.parametrize("how", ["up", "absolute", "link", "climb"])
def test_a_read_outside_the_folder_fails_the_property(case: Case, how: str) -> None:
    JsonSet("a.json", ("path",), PathOf(how)).apply(case)
    with pytest.raises(AssertionError, match="outside its input folder"):
        check(lambda: _follow(case.input), case)


def test_a_link_out_fails_the_property_and_the_input_error_passes_it(case: Case) -> None:
    Replace("b.txt", "outside").apply(case)
    with pytest.raises(AssertionError, match="outside its input folder"):
        check(lambda: _follow(case.input), case)
    refused = FormatError("refused", path=case.input)
    assert check(lambda: (_ for _ in ()).throw(refused), case) is refused


def test_another_exception_fails_the_property(case: Case) -> None:
    JsonSet("a.json", ("path",), 17).apply(case)
    with pytest.raises(TypeError):
        check(lambda: _follow(case.input), case)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need a POSIX system")
def test_a_loader_blocked_on_a_pipe_fails_the_property_as_a_hang(case: Case) -> None:
    Replace("b.txt", "fifo").apply(case)
    with pytest.raises(Hang):
        check(lambda: _follow(case.input), case, seconds=1)


def test_a_write_beside_the_folder_fails_the_property(case: Case) -> None:
    def write_beside() -> None:
        (case.root / SECRET / "new.txt").write_text("x", encoding="utf-8")

    with pytest.raises(AssertionError, match="outside its input folder"):
        check(write_beside, case)


def test_returned_or_written_secret_text_fails_the_property(case: Case) -> None:
    with pytest.raises(AssertionError, match="read from outside"):
        check(lambda: {"found": [MARKER]}, case)
    with pytest.raises(AssertionError, match="read from outside"):
        check(lambda: (case.input / "report.md").write_text(MARKER, encoding="utf-8"), case)


def test_mutations_write_what_they_say(case: Case) -> None:
    JsonSet("a.json", ("n",), Deep(5000)).apply(case)
    text = (case.input / "a.json").read_text(encoding="utf-8")
    assert "[" * 5000 + "0" + "]" * 5000 in text
    (case.input / "c.bin").write_bytes(bytes(16))
    PutInt("c.bin", 4, 8, -1).apply(case)
    assert (case.input / "c.bin").read_bytes() == bytes(4) + b"\xff" * 8 + bytes(4)


def test_the_toml_writer_round_trips() -> None:
    doc = {"top": 1, "experiment": {"name": "x\x7f\"y", "n": 3, "f": 0.5, "b": True, "l": [1, "a", [2]],
                                     "t": {"k": "v", "": 2}},
           "models": {"a.b": "c"}}
    assert tomllib.loads(toml_dumps(doc)) == doc
