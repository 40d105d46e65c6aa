"""probes.atomic_io: the one atomic write (files and folders), its temporary names, and that nothing else renames."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from probes import atomic_io
from probes.atomic_io import (
    TEMP_PATTERN,
    atomic_file,
    atomic_folder,
    atomic_open,
    is_temporary,
    parse_temporary,
    temporary_path,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from probes.errors import WriteError

PACKAGE = Path(__file__).resolve().parents[1] / "probes"


def test_writes_are_the_bytes_asked_for(tmp_path: Path) -> None:
    assert write_bytes_atomic(tmp_path / "a.bin", b"\x00\x01") == tmp_path / "a.bin"
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"
    write_text_atomic(tmp_path / "sub" / "a.txt", "é\nb\r\n")  # the folder is made; no newline translation
    assert (tmp_path / "sub" / "a.txt").read_bytes() == "é\nb\r\n".encode()
    value = {"b": 1, "a": [1.5, "é"]}
    write_json_atomic(tmp_path / "a.json", value, indent=2, sort_keys=True, ensure_ascii=False)
    assert (tmp_path / "a.json").read_text(encoding="utf-8") == json.dumps(
        value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    with atomic_open(tmp_path / "b.txt", fsync=True) as handle:
        handle.write("x")
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "x"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.bin", "a.json", "a.txt", "b.txt", "sub"]


def test_an_interrupted_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    write_text_atomic(target, "old\n")
    with pytest.raises(KeyboardInterrupt), atomic_open(target) as handle:
        handle.write("half")
        raise KeyboardInterrupt
    with pytest.raises(RuntimeError, match="boom"), atomic_file(target) as tmp:
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("boom")
    assert target.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "disk is full"), (errno.EDQUOT, "quota"),
                                         (errno.EROFS, "read-only"), (errno.EACCES, "permission denied")])
def test_a_disk_error_is_one_write_error_naming_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        code: int, words: str) -> None:
    def failing(*args: object, **kwargs: object) -> None:
        raise OSError(code, "os says no")

    monkeypatch.setattr(atomic_io.os, "replace", failing)
    target = tmp_path / "a.json"
    with pytest.raises(WriteError, match=words) as caught:
        write_json_atomic(target, {"a": 1})
    assert caught.value.path == str(target) and caught.value.errno == code
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_in_the_write_itself_is_a_write_error(tmp_path: Path) -> None:
    target = tmp_path / "a.bin"
    with pytest.raises(WriteError, match="disk is full") as caught, atomic_file(target) as tmp:
        tmp.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.path == str(target) and list(tmp_path.iterdir()) == []


def test_atomic_folder_appears_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "cache" / "model"
    with atomic_folder(target) as tmp:
        assert is_temporary(tmp.name) and tmp.parent == target.parent and tmp.is_dir()
        (tmp / "config.json").write_text("{}", encoding="utf-8")
    assert [p.name for p in target.parent.iterdir()] == ["model"] and (target / "config.json").is_file()

    with pytest.raises(ValueError, match="convert failed"), atomic_folder(tmp_path / "other") as tmp:
        (tmp / "half.safetensors").write_bytes(b"half")
        raise ValueError("convert failed")
    with pytest.raises(WriteError, match="disk is full") as caught, atomic_folder(tmp_path / "full") as tmp:
        raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.path == str(tmp_path / "full")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]


def test_atomic_folder_replaces_or_keeps_what_is_there(tmp_path: Path) -> None:
    target = tmp_path / "step-000001"
    target.mkdir()
    (target / "old").write_text("old", encoding="utf-8")
    with pytest.raises(WriteError), atomic_folder(target) as tmp:  # a folder is there: the rename fails
        (tmp / "new").write_text("new", encoding="utf-8")
    assert [p.name for p in target.iterdir()] == ["old"]
    with atomic_folder(target, keep_existing=lambda f: (f / "old").is_file()) as tmp:  # another writer's: kept
        (tmp / "new").write_text("new", encoding="utf-8")
    assert [p.name for p in target.iterdir()] == ["old"]
    with atomic_folder(target, replace=True) as tmp:
        (tmp / "new").write_text("new", encoding="utf-8")
    assert [p.name for p in target.iterdir()] == ["new"]
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]


def test_is_temporary_recognises_exactly_the_names_made_here(tmp_path: Path) -> None:
    made = [temporary_path(tmp_path / name) for name in ("a.json", "step-000004", ".hidden", "x.tmp-1-2")]
    assert len({p.name for p in made}) == len(made)  # each call a fresh name
    for path, name in zip(made, ("a.json", "step-000004", ".hidden", "x.tmp-1-2")):
        assert is_temporary(path.name) and TEMP_PATTERN.match(path.name)
        parsed = parse_temporary(path.name)
        assert parsed is not None and parsed.target == name and parsed.host == atomic_io.host_tag()
    others = ["a.json", "a.json.tmp", ".a.json.tmp", ".a.json.tmp-12-0", "a.json.tmp-0123abcd-12-0",
              ".a.json.tmp-0123abcd-12", ".a.json.tmp-0123ABCD-12-0", ".step-000004-k3x_9qzA",
              ".probes.lock.12-34.tmp", "result.json.tmp", ".a.converting-0123abcd-12-xyz", ".tmp-0123abcd-1-2"]
    assert not [name for name in others if is_temporary(name) or parse_temporary(name)]


#: Renames in probes/ that are no temporary-file-and-rename write, with the reason (none today).
ALLOWED_RENAMES: dict[str, str] = {}


def test_no_module_but_atomic_io_renames_into_place() -> None:
    """Every temp-and-rename write goes through probes.atomic_io: no other module calls os.replace / .rename."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        if relative == "probes/atomic_io.py" or relative in ALLOWED_RENAMES:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            # a rename, or a temporary folder made beside its place (mkdtemp with dir=): a write of its own
            if "os.replace(" in code or "os.rename(" in code or ".rename(" in code or ("mkdtemp(" in code and "dir=" in code):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, "write through probes.atomic_io instead:\n" + "\n".join(found)
