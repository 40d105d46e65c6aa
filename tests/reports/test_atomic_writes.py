"""Every output file appears whole or not at all: a stopped run never leaves a partial file under its final name."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from probes import atomic_io
from probes.errors import WriteError
from probes.reports.atomic import atomic_open, is_temporary
from probes.reports.writer import OutputFolder, write_output

ROOT = Path(__file__).resolve().parents[2]


def _temporary(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if is_temporary(p.name)]


def test_a_writer_failing_midway_leaves_no_final_name_and_no_temporary_file(tmp_path):
    with pytest.raises(RuntimeError, match="midway"):
        with atomic_open(tmp_path / "table.csv", "w") as fh:
            fh.write("a,b\n" * 1000)
            fh.flush()
            raise RuntimeError("stopped midway")
    assert list(tmp_path.iterdir()) == []


def test_a_figure_failing_midway_leaves_nothing(tmp_path, monkeypatch):
    """savefig writes part of the image to the temporary file, then fails: no figure, no temporary file."""
    from matplotlib.figure import Figure

    from probes.reports.figures import head_heatmap

    def broken(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"\x89PNG\r\n\x1a\n half an image")
        raise KeyboardInterrupt  # Ctrl-C while the figure is written

    monkeypatch.setattr(Figure, "savefig", broken)
    with pytest.raises(KeyboardInterrupt):
        head_heatmap(np.zeros((2, 2)), tmp_path / "figures" / "case.png", title="t")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_figures_are_written_in_the_format_of_their_suffix(tmp_path):
    """The temporary name ends in ``.tmp-...``, so the format is given to savefig explicitly."""
    from probes.reports.figures import HeatmapWriter, head_heatmap

    assert head_heatmap(np.eye(2), tmp_path / "a.svg", title="t").read_text().lstrip().startswith("<?xml")
    assert head_heatmap(np.eye(2), tmp_path / "a.pdf", title="t").read_bytes().startswith(b"%PDF")
    assert HeatmapWriter(2, 2).write(np.eye(2), tmp_path / "b.png", title="t").read_bytes().startswith(b"\x89PNG")
    assert _temporary(tmp_path) == []


def test_a_full_disk_is_one_line_naming_the_file_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    real_write = Path.write_text

    def full(self, text, *args, **kwargs):
        if "report.md" not in self.name:  # the lock and the writable check still fit
            return real_write(self, text, *args, **kwargs)
        real_write(self, text[:10], *args, **kwargs)  # some bytes made it, then the disk was full
        raise OSError(errno.ENOSPC, "No space left on device")

    def write(folder: OutputFolder) -> dict:
        folder.text("report.md", "x" * 10_000)
        return {"command": "test"}

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(WriteError) as caught:
        write_output(tmp_path / "out", "test", write)
    message = str(caught.value)
    assert "\n" not in message
    assert str(tmp_path / "out" / "report.md") in message and "disk is full" in message
    monkeypatch.undo()
    left = sorted(p.name for p in (tmp_path / "out").rglob("*")) if (tmp_path / "out").exists() else []
    assert left == [] or left == [".probes-run.json"]  # no report.md, no temporary file, no run.json
    assert _temporary(tmp_path) == []


def test_a_full_disk_in_a_csv_table_is_a_write_error(tmp_path, monkeypatch):
    from probes.reports.tables import write_csv

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_io.os, "replace", full)  # the one atomic write (probes.atomic_io)
    with pytest.raises(WriteError, match="disk is full") as caught:
        write_csv([{"a": 1}], tmp_path / "t.csv")
    assert caught.value.path == str(tmp_path / "t.csv")
    assert list(tmp_path.iterdir()) == []


_WRITER = textwrap.dedent('''
    import sys, time
    from pathlib import Path
    from probes.reports.atomic import atomic_open
    from probes.reports.writer import write_output

    def write(folder):
        for k in range(40):
            with atomic_open(folder.root / "tables" / f"t{k}.txt", "w") as fh:
                for _ in range(200):  # a slow writer, so that a kill lands inside a file
                    fh.write("x" * 1000)
                    fh.flush()
                    time.sleep(0.0002)
                fh.write("END\\n")
            folder.add(folder.root / "tables" / f"t{k}.txt")
            print(k, flush=True)
        return {"command": "probes test"}

    print("ready", flush=True)
    write_output(sys.argv[1], "probes test", write)
''')


@pytest.mark.subprocess
def test_sigkill_at_any_point_leaves_only_whole_files_and_the_rerun_reuses_the_folder(tmp_path):
    """Three runs killed at different points of writing (in parallel, to keep it short); each folder holds
    only complete files under final names, and a rerun writes into it without ``--overwrite``."""
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    kill_after = {"a": 0, "b": 2, "c": 5}  # files finished before the kill
    procs = {name: subprocess.Popen([sys.executable, str(script), str(tmp_path / name)], stdout=subprocess.PIPE,
                                    text=True, env=env) for name in kill_after}
    for name, after in kill_after.items():
        proc = procs[name]
        assert proc.stdout.readline().strip() == "ready"
        while proc.stdout.readline().strip() != str(after):
            pass
        time.sleep(0.01 * (after + 1))  # somewhere inside the next file
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    expected = 200 * 1000 + 4
    for name in kill_after:
        out = tmp_path / name
        files = [p for p in out.rglob("*") if p.is_file() and not is_temporary(p.name)]
        finals = [p for p in files if p.parent.name == "tables"]
        assert len(finals) > kill_after[name]
        assert all(p.stat().st_size == expected and p.read_text().endswith("END\n") for p in finals)
        assert not (out / "run.json").exists()  # the run did not finish

    def rerun(folder: OutputFolder) -> dict:
        folder.text("tables/t0.txt", "again\n")
        return {"command": "probes test"}

    paths = write_output(tmp_path / "b", "probes test", rerun)  # its own unfinished folder: reused, no --overwrite
    assert set(paths) == {"tables/t0.txt", "run.json"}
    assert _temporary(tmp_path / "b") == []
    assert json.loads((tmp_path / "b" / "run.json").read_text())["files"] == ["tables/t0.txt", "run.json"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir() if p.name.startswith(".")) == []
