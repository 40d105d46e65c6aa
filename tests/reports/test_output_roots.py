"""Where a run may write is carried by its OutputFolder, not kept in a process-wide list of output roots.

The old list (``probes.reports.atomic.output_root``) refused, while any run was writing, every file written
through :mod:`probes.reports.atomic` outside every active run folder, from any thread (a write that was not
the run's included), before it existed. The folder now carries its own root: it checks the paths it hands out
before anything is written and every file added to it, and a write that is not the run's is left alone. A
writer that writes to a path it built itself, outside the folder, without adding it, is no longer stopped.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from probes.errors import ConfigError
from probes.reports import atomic
from probes.reports.tables import write_csv
from probes.reports.writer import OutputFolder, write_output


def test_no_process_wide_roots_are_left() -> None:
    assert not hasattr(atomic, "output_root")
    assert not [name for name, value in vars(atomic).items()
                if not name.startswith("__") and isinstance(value, (dict, list, set))]


def test_a_write_elsewhere_while_a_run_writes_is_not_the_run_s_business(tmp_path: Path) -> None:
    """What the old roots refused wrongly: a table written by another thread, outside the run's folder, while
    the run wrote (the list was the process', not the run's)."""
    written: list[Path] = []

    def other_thread() -> None:
        written.append(write_csv([{"a": 1}], tmp_path / "mine" / "table.csv"))

    def write(folder: OutputFolder) -> dict:
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        folder.text("notes.md", "inside\n")
        return {"command": "test"}

    files = write_output(tmp_path / "out", "test", write)
    assert written == [tmp_path / "mine" / "table.csv"] and written[0].read_text() == "a\n1\n"
    assert set(files) == {"notes.md", "run.json"}


def test_a_path_handed_out_is_inside_the_folder_before_anything_is_written(tmp_path: Path) -> None:
    folder = OutputFolder(tmp_path / "out")
    with pytest.raises(ConfigError):
        folder.path("../victim.csv")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "figures").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ConfigError, match="outside the output folder"):
        folder.path("figures/victim.png")
    assert not (tmp_path / "victim.csv").exists() and not (tmp_path / "victim.png").exists()
