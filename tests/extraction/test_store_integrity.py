"""A damaged store is refused by every reader, naming the shard; `probes verify`; one extract per store;
a full disk or an unwritable folder is one line naming the path, with no temporary file left."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from probes import atomic_io
from probes.atomic_io import is_temporary
from probes.corpora import read_treebank
from probes.errors import DamagedStoreError, FolderLockedError, WriteError
from probes.extraction.extractor import AttentionExtractor
from probes.extraction.store import extract_to_store, open_store, verify_store
from probes.locks import LOCK_NAME
from tests.tiny_models import build

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "probes" / "corpora" / "sample"


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("bert", tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def clean(bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished store of 24 sample sentences in 3 shards (built once; tests damage copies of it)."""
    sentences = list(read_treebank(SAMPLE / "sample-dev.conllu"))[:24]
    root = tmp_path_factory.mktemp("stores") / "clean"
    extract_to_store(AttentionExtractor.from_pretrained(bert, progress=False), sentences, root, shard_size=8)
    return root


@pytest.fixture()
def store(clean: Path, tmp_path: Path) -> Path:
    """A copy of the clean store, to damage."""
    return Path(shutil.copytree(clean, tmp_path / "store"))


def flip(path: Path, start: int = 200, stop: int = 600) -> None:
    """Overwrite bytes ``start:stop`` of ``path`` with their complement (same size)."""
    raw = bytearray(path.read_bytes())
    raw[start:stop] = bytes(b ^ 0xFF for b in raw[start:stop])
    path.write_bytes(bytes(raw))


# ---------------------------------------------------------------- damaged stores are refused

def test_byte_flipped_shard_is_refused_by_open_store_naming_it(store: Path) -> None:
    flip(store / "shard-00001.npy")
    opened = open_store(store)  # the size still matches: opening is cheap and passes
    with pytest.raises(DamagedStoreError, match=r"shard-00001\.npy: damaged attention store .*expected sha256 "
                                                r"[0-9a-f]{64}, found sha256 [0-9a-f]{64}.*probes extract .*--store"):
        list(opened)
    with pytest.raises(DamagedStoreError, match=r"shard-00001\.npy"):
        open_store(store, verify=True)  # checked at once on request


def test_intact_shards_before_the_damaged_one_are_read(store: Path) -> None:
    """The hash is checked lazily per shard: shard 0 streams before shard 1 is refused."""
    flip(store / "shard-00001.npy")
    read = []
    with pytest.raises(DamagedStoreError, match="shard-00001"):
        for sentence, _ in open_store(store):
            read.append(sentence.sent_id)
    assert len(read) == 8


@pytest.mark.parametrize("name", ["shard-00002.sentences.jsonl", "shard-00002.json"])
def test_damaged_sentences_or_index_are_refused(store: Path, name: str) -> None:
    path = store / name
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"', "'", 1), encoding="utf-8")  # same size, other bytes
    with pytest.raises(DamagedStoreError, match=name.replace(".", r"\.")):
        list(open_store(store))


def test_truncated_shard_is_refused_on_open_by_size(store: Path) -> None:
    npy = store / "shard-00000.npy"
    size = npy.stat().st_size
    os.truncate(npy, size - 100)
    with pytest.raises(DamagedStoreError, match=rf"shard-00000\.npy: .*expected {size} bytes .*found {size - 100}"):
        open_store(store)  # before any read


def test_missing_shard_file_is_refused_on_open(store: Path) -> None:
    (store / "shard-00002.sentences.jsonl").unlink()
    with pytest.raises(DamagedStoreError, match=r"shard-00002\.sentences\.jsonl: .*found none"):
        open_store(store)


def test_leaderboard_from_a_damaged_store_fails_naming_the_shard(store: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    flip(store / "shard-00002.npy")
    code = main(["leaderboard", "--store", str(store), "--out", str(tmp_path / "out"), "--no-figures",
                 "--min-count", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "shard-00002.npy" in err and "damaged attention store" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "run.json").exists()


def test_select_store_is_checked(bert: Path, store: Path, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    report = tmp_path / "report-store"  # other sentences: the selection store is held out from it
    sentences = list(read_treebank(SAMPLE / "sample-test.conllu"))[:8]
    extract_to_store(AttentionExtractor.from_pretrained(bert, progress=False), sentences, report, shard_size=8)
    flip(store / "shard-00000.npy")
    code = main(["leaderboard", "--store", str(report), "--select-store", str(store), "--out", str(tmp_path / "a"),
                 "--no-figures", "--min-count", "1", "--no-progress"])
    assert code == 1 and "shard-00000.npy" in capsys.readouterr().err


def test_probe_stores_are_checked(store: Path) -> None:
    """`probes probe --store-train` reads its stores through the same checks (its input streams)."""
    from probes.runs.probing_inputs import open_inputs

    flip(store / "shard-00000.npy")
    _, streams, _ = open_inputs(None, {"data": {}}, splits=[("train", None, store, None)])
    with pytest.raises(DamagedStoreError, match=r"shard-00000\.npy"):
        list(streams["train"])


def test_resume_repairs_a_damaged_store_as_the_message_says(bert: Path, store: Path, clean: Path) -> None:
    flip(store / "shard-00001.npy")
    sentences = list(read_treebank(SAMPLE / "sample-dev.conllu"))[:24]
    extractor = AttentionExtractor.from_pretrained(bert, progress=False)
    extract_to_store(extractor, sentences, store, shard_size=8)
    assert extractor.report.n_items == 8  # only the damaged shard was extracted again
    assert not verify_store(store).damage
    assert (store / "shard-00001.npy").read_bytes() == (clean / "shard-00001.npy").read_bytes()


# ---------------------------------------------------------------- probes verify

def test_verify_exit_codes(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    assert main(["verify", str(store)]) == 0
    out = capsys.readouterr().out
    assert "3 shard(s), 24 sentences: every file intact" in out
    flip(store / "shard-00000.npy")
    flip(store / "shard-00002.npy")
    assert main(["verify", str(store)]) == 1
    captured = capsys.readouterr()
    damaged = [line for line in captured.out.splitlines() if line.startswith("damaged: ")]
    assert len(damaged) == 2 and "shard-00000.npy" in damaged[0] and "shard-00002.npy" in damaged[1]
    assert captured.err.startswith("error: ") and "2 damaged file(s) in 2 of 3 shard(s)" in captured.err


def test_verify_of_a_missing_or_unfinished_store(tmp_path: Path, store: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    assert main(["verify", str(tmp_path / "nothing")]) == 1
    assert "no such folder" in capsys.readouterr().err
    manifest = json.loads((store / "manifest.json").read_text())
    (store / "manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    assert main(["verify", str(store)]) == 1
    assert "incomplete" in capsys.readouterr().err


# ---------------------------------------------------------------- one extract per store

@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def plant_lock(folder: Path, pid: int, host: str | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(),
                                                "since": "2024-01-01T00:00:00+00:00", "what": "probes extract"}))


def extract_args(bert: Path, store: Path) -> list[str]:
    return ["extract", "--model", str(bert), "--treebank", str(SAMPLE / "sample-dev.conllu"), "--limit", "4",
            "--store", str(store), "--no-progress", "--device", "cpu"]


@pytest.mark.subprocess
def test_second_extract_into_a_locked_store_stops_at_once(bert: Path, tmp_path: Path, sleeper: subprocess.Popen[bytes],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main
    from probes.runs import inputs

    plant_lock(tmp_path / "st", sleeper.pid)
    monkeypatch.setattr(inputs, "load_extractor", lambda *a, **k: pytest.fail("the model loaded"))
    # "at once": it never loads the model (above) and never waits for the holder (no sleep): checked by what is
    # called, not by the clock, so it holds on a loaded machine
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "sleep", lambda *a: pytest.fail("waited for the lock's holder"))
        code = main(extract_args(bert, tmp_path / "st"))
    err = capsys.readouterr().err
    assert code == 1
    assert f"in use by pid {sleeper.pid} on host {socket.gethostname()} since 2024-01-01" in err
    assert str(tmp_path / "st") in err and len(err.strip().splitlines()) == 1
    assert json.loads((tmp_path / "st" / LOCK_NAME).read_text())["pid"] == sleeper.pid  # the holder's lock stays


def test_library_extract_refuses_a_store_held_by_this_process(bert: Path, tmp_path: Path) -> None:
    """A lock written by a live process (here the test process itself, outside any FolderLock) is respected."""
    plant_lock(tmp_path / "st", os.getpid())
    sentences = list(read_treebank(SAMPLE / "sample-dev.conllu"))[:2]
    with pytest.raises(FolderLockedError, match=f"pid {os.getpid()}"):
        extract_to_store(AttentionExtractor.from_pretrained(bert, progress=False), sentences, tmp_path / "st")
    assert not (tmp_path / "st" / "manifest.json").exists()


@pytest.mark.subprocess
def test_stale_lock_of_a_dead_process_is_taken_over(bert: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    from probes.cli import main

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    plant_lock(tmp_path / "st", dead.pid)
    assert main(extract_args(bert, tmp_path / "st")) == 0, capsys.readouterr().err
    assert f"taking over the lock of pid {dead.pid}" in caplog.text
    assert len(open_store(tmp_path / "st")) == 4
    assert not (tmp_path / "st" / LOCK_NAME).exists()  # released at the end


# ---------------------------------------------------------------- full disk, unwritable folder

def test_full_disk_is_one_line_naming_the_shard_and_leaves_no_temporary_file(
        bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main
    from probes.extraction import store as store_module

    def full(handle: object, data: object) -> None:
        handle.write(b"\x93NUMPY partial")  # type: ignore[attr-defined]
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module, "_save_npy", full)
    code = main(extract_args(bert, tmp_path / "st"))
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert f"error: {tmp_path / 'st' / 'shard-00000.npy'}: cannot write (the disk is full" in err
    assert not [p.name for p in (tmp_path / "st").iterdir()
                if is_temporary(p.name) or p.name.endswith(".tmp") or p.name == LOCK_NAME]


def test_full_disk_from_the_library_is_a_write_error(bert: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:

    real = os.replace

    def replace(src: str, dst: str) -> None:
        if str(dst).endswith(".sentences.jsonl"):
            raise OSError(errno.EROFS, "Read-only file system")
        real(src, dst)

    monkeypatch.setattr(atomic_io.os, "replace", replace)  # the one atomic write the store uses
    sentences = list(read_treebank(SAMPLE / "sample-dev.conllu"))[:2]
    with pytest.raises(WriteError, match=r"shard-00000\.sentences\.jsonl: cannot write \(the file system is read-only"):
        extract_to_store(AttentionExtractor.from_pretrained(bert, progress=False), sentences, tmp_path / "st")
    assert not list((tmp_path / "st").glob("*.tmp")) and not [p for p in (tmp_path / "st").iterdir()
                                                              if is_temporary(p.name)]


def test_unwritable_store_folder_stops_before_the_model_loads(bert: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main
    from probes.runs import inputs

    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setattr(inputs, "load_extractor", lambda *a, **k: pytest.fail("the model loaded"))
    assert main(extract_args(bert, tmp_path / "file" / "st")) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'file' / 'st'}: cannot write") and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions and a non-root user")
def test_read_only_store_folder_stops_before_the_model_loads(bert: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main
    from probes.runs import inputs

    (tmp_path / "st").mkdir()
    (tmp_path / "st").chmod(0o555)
    monkeypatch.setattr(inputs, "load_extractor", lambda *a, **k: pytest.fail("the model loaded"))
    try:
        assert main(extract_args(bert, tmp_path / "st")) == 1
    finally:
        (tmp_path / "st").chmod(0o755)
    assert "permission denied" in capsys.readouterr().err
