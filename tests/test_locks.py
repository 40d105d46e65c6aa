"""FolderLock: one run per folder, a live holder respected, a dead one's lock taken over."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from probes.errors import FolderLockedError, WriteError
from probes.locks import LOCK_NAME, FolderLock, pid_alive


def test_lock_file_names_the_holder_and_is_removed_on_exit(tmp_path: Path) -> None:
    with FolderLock(tmp_path / "out", what="probes leaderboard"):
        holder = json.loads((tmp_path / "out" / LOCK_NAME).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        assert holder["what"] == "probes leaderboard" and holder["since"]
    assert list((tmp_path / "out").iterdir()) == []


def test_nesting_in_one_thread_keeps_the_lock_until_the_outermost_exit(tmp_path: Path) -> None:
    with FolderLock(tmp_path):
        with FolderLock(tmp_path):
            pass
        assert (tmp_path / LOCK_NAME).exists()
    assert not (tmp_path / LOCK_NAME).exists()


def test_threads_racing_for_one_folder_get_it_once(tmp_path: Path) -> None:
    gate = threading.Barrier(4)
    done = threading.Event()  # the holder keeps the lock until every other thread has tried
    won, refused = [], []

    def work() -> None:
        gate.wait()
        try:
            with FolderLock(tmp_path):
                won.append(1)
                done.wait(timeout=5)
        except FolderLockedError as exc:
            refused.append(str(exc))
            if len(refused) == 3:
                done.set()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(refused) == 3
    assert all(f"in use by pid {os.getpid()}" in message for message in refused)


@pytest.mark.parametrize("content, expected", [
    ({"pid": 1, "host": "elsewhere.example", "since": "2024-01-01T00:00:00"}, "on host elsewhere.example"),
    ("not json", "unreadable lock file"),
])
def test_a_lock_that_cannot_be_checked_is_respected(tmp_path: Path, content: object, expected: str) -> None:
    (tmp_path / LOCK_NAME).write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(FolderLockedError, match=rf"{expected}.*remove {tmp_path / LOCK_NAME}"):
        FolderLock(tmp_path).acquire()
    assert (tmp_path / LOCK_NAME).exists()


def test_a_dead_holder_is_taken_over_and_a_stolen_lock_is_not_removed(tmp_path: Path) -> None:
    dead = max(2, 2**22 + 12345)  # above the default pid_max: never alive
    assert not pid_alive(dead)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": dead, "host": socket.gethostname(), "since": "x"}))
    lock = FolderLock(tmp_path)
    lock.acquire()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "other"}))  # someone else's now
    lock.release()
    assert json.loads((tmp_path / LOCK_NAME).read_text())["host"] == "other"


def test_a_folder_that_cannot_be_created_is_a_write_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(WriteError, match=r"file/out: cannot write"):
        FolderLock(tmp_path / "file" / "out").acquire()
