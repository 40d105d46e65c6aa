"""probes.safe_read, the base of every reader of an outside file: each refusal is an InputError naming the file,
and nothing is read from a device, a pipe or a path outside its folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from probes.errors import FormatError, InputError
from probes.safe_read import (
    MAX_DEPTH,
    check_depth,
    inside_folder,
    load_json,
    load_toml,
    loads_json,
    read_bytes,
    regular_file,
)


def test_a_valid_json_and_toml_file_load_as_the_standard_parsers_read_them(tmp_path: Path) -> None:
    value = {"a": [1, 2.5, None, {"b": "[not a bracket"}], "nan": float("nan")}
    (tmp_path / "x.json").write_text(json.dumps(value), encoding="utf-8")
    loaded = load_json(tmp_path / "x.json")
    assert loaded["a"] == value["a"] and loaded["nan"] != loaded["nan"]  # NaN, as results write it
    (tmp_path / "x.toml").write_text('a = [1, [2, [3]]]\n[t]\nb = "c"\n', encoding="utf-8")
    assert load_toml(tmp_path / "x.toml") == {"a": [1, [2, [3]]], "t": {"b": "c"}}


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000, 200_000])
def test_nesting_past_the_limit_is_one_format_error_never_a_recursion_error(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * depth + "]" * depth, encoding="utf-8")
    with pytest.raises(FormatError, match="nested at most") as info:
        load_json(path)
    assert info.value.path == str(path)
    assert load_json(_write(tmp_path / "ok.json", "[" * MAX_DEPTH + "]" * MAX_DEPTH)) is not None


def test_depth_is_counted_as_the_parsed_value_nests() -> None:
    assert check_depth([[[]]], path=None, limit=3) == [[[]]]
    with pytest.raises(FormatError):
        check_depth({"a": [{"b": [1]}]}, path=None, limit=3)


def test_syntax_errors_name_the_line_and_bad_bytes_name_theirs(tmp_path: Path) -> None:
    with pytest.raises(FormatError) as info:
        load_json(_write(tmp_path / "bad.json", '{\n"a": 1,\n"b": }\n'))
    assert info.value.line == 3 and "invalid JSON" in str(info.value)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{\n"a":\n"caf\xe9"}')
    with pytest.raises(FormatError, match="0xe9") as bad:
        load_json(latin)
    assert bad.value.line == 3
    with pytest.raises(FormatError, match="4300 digits|cannot be read"):
        loads_json("1" * 5_000)


def test_devices_pipes_and_folders_are_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # opening it would block: the refusal must come from stat alone
    for path, kind in [(zero, "character device"), (fifo, "named pipe"), (tmp_path, "folder")]:
        with pytest.raises(InputError, match=kind) as info:
            load_json(path)
        assert info.value.path == str(path)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(InputError, match="cannot be read"):
        regular_file(loop)


def test_a_file_over_the_limit_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = _write(tmp_path / "big.json", "0" * 1000)
    assert read_bytes(path, limit=1000) == b"0" * 1000
    with pytest.raises(InputError, match="at most 999 bytes"):
        read_bytes(path, limit=999)


@pytest.mark.parametrize("relative", ["../x", "/etc/passwd", "a/../../x", "", "a\x00b", 17, None])
def test_a_path_from_a_file_that_leaves_its_folder_is_refused(tmp_path: Path, relative: object) -> None:
    with pytest.raises(InputError) as info:
        inside_folder(tmp_path, relative, what="units[0].path", source=tmp_path / "run.json")
    assert "units[0].path" in str(info.value) and str(tmp_path / "run.json") in str(info.value)


def test_a_link_leading_out_is_refused_and_one_inside_is_kept(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    (folder / "unit").mkdir(parents=True)
    (folder / "out").symlink_to(tmp_path)
    (folder / "in").symlink_to(folder / "unit")
    assert inside_folder(folder, "in") == (folder / "unit").resolve()
    assert inside_folder(folder, "unit/result.json") == (folder / "unit" / "result.json").resolve()
    with pytest.raises(InputError, match="leads outside"):
        inside_folder(folder, "out/secret")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
