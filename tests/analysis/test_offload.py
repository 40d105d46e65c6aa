"""Analyses run in a child process (probes.analysis.offload): same results as in this process, errors come back."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from probes.analysis.driver import stream
from probes.analysis.offload import Offloaded, OffloadError
from probes.analysis.patterns import AttentionPatterns
from probes.analysis.roles import HeadRoles
from probes.analysis.surface import SurfaceStats
from probes.results import equal
from tests.analysis.test_patterns import _pairs


def _analyses() -> dict:
    return {"surface": SurfaceStats(), "patterns": AttentionPatterns(),
            "roles": HeadRoles({"w": 10, "x": 1}, top_common=1)}


def test_offloaded_results_equal_those_run_here() -> None:
    pairs = _pairs(5, 40)
    here = stream(pairs, _analyses()).results
    there = stream(pairs, {"atlas": Offloaded(_analyses())}).results["atlas"]
    assert set(there) == set(here)
    for name in here:
        assert equal(there[name], here[name]), name
    assert there["patterns"].n_maps == 30 and there["patterns"].n_without_tokens == 10


class _Failing(SurfaceStats):
    def update(self, item, word_attention) -> None:  # noqa: ANN001
        raise ValueError(f"bad item {item}")


def test_an_error_in_the_child_is_raised_here_with_its_message() -> None:
    offloaded = Offloaded({"bad": _Failing()})
    with pytest.raises(OffloadError, match="ValueError: bad item s0"):
        stream(_pairs(1, 3), {"atlas": offloaded})
    assert offloaded._process is None  # the child was ended


def test_close_ends_the_child_and_state_already_held_is_merged() -> None:
    first, second = _pairs(2, 8), _pairs(3, 8)
    held = SurfaceStats()
    for item, attention in first:
        held.update(item, attention)
    offloaded = Offloaded({"surface": held})
    for item, attention in second:
        offloaded.update(item, attention)
    result = offloaded.compute()["surface"]
    whole = SurfaceStats()
    for item, attention in first + second:
        whole.update(item, attention)
    assert equal(result, whole.compute())
    again = Offloaded({"surface": SurfaceStats()})
    again.update(*second[0])
    process = again._process
    assert process.is_alive()
    again.close()
    assert not process.is_alive()


def test_a_script_without_a_main_guard_is_not_run_again_in_the_child(tmp_path: Path) -> None:
    """A user's script calling the library at top level (no ``if __name__ == "__main__"``) runs once."""
    marker = tmp_path / "runs.txt"
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        with open({str(marker)!r}, "a") as f:
            f.write("run\\n")
        from probes.analysis.driver import stream
        from probes.analysis.offload import Offloaded
        from probes.analysis.surface import SurfaceStats
        from tests.analysis.test_patterns import _pairs
        result = stream(_pairs(0, 4), {{"atlas": Offloaded({{"surface": SurfaceStats()}})}})
        print(result.results["atlas"]["surface"].n_examples)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3"]
    assert marker.read_text().splitlines() == ["run"]
