"""The first-steps notebook (docs/notebooks/first-steps.ipynb) runs from top to bottom, so it never goes stale.

It is stored without outputs; here a Jupyter kernel (nbclient, ipykernel: the test extra) executes every cell
offline, from a folder that is not the checkout, with an empty cache, and the test fails on any cell's error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebooks" / "first-steps.ipynb"
#: Seconds one cell may take before the run fails (the whole notebook takes well under a minute on 2 cores).
CELL_TIMEOUT_S = 300


def test_the_notebook_is_stored_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_notebook_runs(minilm_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cell runs without an error (the demo model package present: minilm_path skips, saying so, without
    it); the leaderboard, atlas and match show their notebook views, and the three figures are drawn."""
    for name, value in {"PROBES_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(NOTEBOOK.parents[2]),
                                                                    os.environ.get("PYTHONPATH")]))}.items():
        monkeypatch.setenv(name, value)  # the kernel is a child process: it inherits this environment
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as err:  # the failing cell and its traceback, without the terminal's colour codes
        pytest.fail(re.sub(r"\x1b\[[0-9;]*m", "", str(err))[-6000:], pytrace=False)
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    views = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    for kind in ("Leaderboard", "Atlas", "MatchRun"):
        assert any(f"<b>{kind}</b>" in view for view in views), f"no notebook view of a {kind}"
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 3
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "Leaderboard loaded back: True" in text and "D_match" in text
