"""Output folders: one run at a time, checked writable before any work, an unfinished run's folder reused."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from probes.errors import ConfigError, FolderLockedError, WriteError
from probes.locks import LOCK_NAME
from probes.reports import atomic
from probes.reports.outdir import MARKER, release_out_dir
from probes.reports.writer import OutputFolder, check_out_dir, out_dir_content, write_output

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "probes" / "corpora" / "sample" / "sample-test.conllu"


def _record(folder: OutputFolder) -> dict:
    folder.text("report.md", "done\n")
    return {"command": "probes test"}


def test_a_finished_run_leaves_no_bookkeeping_behind(tmp_path):
    paths = write_output(tmp_path / "out", "probes test", _record)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.md", "run.json"]
    assert json.loads(paths["run.json"].read_text())["files"] == ["report.md", "run.json"]


def test_an_interrupted_run_is_reused_by_its_command_and_refused_by_others(tmp_path, caplog):
    out = tmp_path / "out"

    def interrupted(folder: OutputFolder) -> dict:
        folder.text("tables/a.csv", "a\n1\n")
        raise KeyboardInterrupt  # Ctrl-C while writing

    with pytest.raises(KeyboardInterrupt):
        write_output(out, "probes test", interrupted)
    assert not (out / "run.json").exists() and (out / MARKER).is_file() and not (out / LOCK_NAME).exists()
    with pytest.raises(ConfigError, match="unfinished output of 'probes test'"):
        check_out_dir(out, "probes atlas")
    with caplog.at_level(logging.WARNING, logger="probes"):
        write_output(out, "probes test", _record)  # no --overwrite needed
    assert "reusing the unfinished" in caplog.text
    assert (out / "run.json").is_file() and not (out / MARKER).exists()


def test_a_failed_check_leaves_a_folder_as_it_was(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("precious")
    with pytest.raises(ConfigError, match="other files"):
        check_out_dir(folder, "probes test")
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    check_out_dir(tmp_path / "new", "probes test")  # claimed: created and locked ...
    assert (tmp_path / "new" / LOCK_NAME).is_file()
    release_out_dir(tmp_path / "new")  # ... and, the run ending before writing, removed again
    assert not (tmp_path / "new").exists()


def test_a_read_only_folder_is_found_before_any_work(tmp_path, monkeypatch):
    """The check writes (and the lock writes) a file in the folder: refused at once, naming the folder."""
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "replace", read_only)
    with pytest.raises(WriteError, match="read-only") as caught:
        check_out_dir(tmp_path / "out", "probes leaderboard")
    assert str(tmp_path / "out") in str(caught.value) and "\n" not in str(caught.value)
    assert atomic.remove_temporary(tmp_path) == []  # no temporary file left


def test_the_cli_refuses_a_read_only_out_before_loading_the_model(tmp_path, monkeypatch, capsys):
    from probes.cli import main

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "replace", read_only)
    from probes.extraction import extractor, loading

    def no_model(*args, **kwargs):  # "before loading the model": checked by what is called, not by the clock
        raise AssertionError("the model was loaded before the output folder was checked")

    monkeypatch.setattr(loading, "load_resolved", no_model)
    monkeypatch.setattr(extractor, "load_resolved", no_model)
    code = main(["leaderboard", "--model", str(tmp_path / "no-such-model"), "--treebank", str(SAMPLE),
                 "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert "read-only" in err[0] and str(tmp_path / "out") in err[0] and "no-such-model" not in err[0]


_HOLDER = textwrap.dedent('''
    import sys, time
    from probes.reports.writer import check_out_dir
    check_out_dir(sys.argv[1], "probes leaderboard")
    print("held", flush=True)
    time.sleep(60)
''')


@pytest.mark.subprocess
def test_a_second_run_into_a_folder_stops_at_once_and_a_dead_holder_is_taken_over(tmp_path, caplog):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(out)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.MonkeyPatch.context() as patch:  # "at once": it never waits for the holder (no sleep)
            patch.setattr(time, "sleep", lambda *a: pytest.fail("waited for the folder's holder"))
            with pytest.raises(FolderLockedError) as caught:
                check_out_dir(out, "probes leaderboard")
        message = str(caught.value)
        assert str(out) in message and f"pid {holder.pid}" in message and "since" in message
        assert "probes leaderboard" in message and "\n" not in message
        with pytest.raises(FolderLockedError):
            write_output(out, "probes leaderboard", _record)  # the library's write stops too
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert (out / LOCK_NAME).is_file()  # killed: its lock stays behind, stale
    with caplog.at_level(logging.WARNING, logger="probes"):
        paths = write_output(out, "probes leaderboard", _record)
    assert "taking over the lock" in caplog.text
    assert paths["run.json"].is_file() and not (out / LOCK_NAME).exists()


def test_lock_and_temporary_files_are_no_content(tmp_path):
    (tmp_path / LOCK_NAME).write_text("{}")
    (tmp_path / ".report.md.tmp-123-4").write_text("half")
    (tmp_path / MARKER).write_text("{}")
    assert out_dir_content(tmp_path) == []
    (tmp_path / "report.md").write_text("x")
    assert out_dir_content(tmp_path) == [tmp_path / "report.md"]


def test_a_run_failing_before_writing_leaves_a_previous_output_as_it_was(tmp_path):
    """A model that fails to load after the check: the old finished output keeps no marker and stays."""
    out = tmp_path / "out"
    write_output(out, "probes test", _record)
    before = sorted(p.name for p in out.iterdir())
    check_out_dir(out, "probes test")
    release_out_dir(out)  # the command failed before writing
    assert sorted(p.name for p in out.iterdir()) == before == ["report.md", "run.json"]


def test_an_unfinished_folder_stays_reusable_when_the_rerun_fails_before_writing(tmp_path):
    out = tmp_path / "out"

    def interrupted(folder: OutputFolder) -> dict:
        folder.text("a.txt", "1\n")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_output(out, "probes test", interrupted)
    check_out_dir(out, "probes test")
    release_out_dir(out)  # this rerun failed too, before writing
    assert (out / MARKER).is_file()
    write_output(out, "probes test", _record)  # still its own
    assert (out / "run.json").is_file()
