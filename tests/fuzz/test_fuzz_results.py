"""Fuzz: mutated result folders load, or raise the input error (issue 36).

Valid folders are saved by :meth:`probes.results.Result.save` (a leaderboard with its record, a read report holding
exceptions and counters, an extraction report); every example mutates a copy (``result.json`` as JSON and as text,
``arrays.npz`` as bytes, as a zip and through its ``.npy`` headers, either file replaced by a link, a pipe, a
folder ...) and :func:`probes.results.load` must return a result or raise :class:`~probes.errors.InputError`,
within the watchdog, reading nothing outside the folder (see :mod:`tests.fuzz.fuzzlib`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from probes.errors import InputError
from probes.extraction.outputs import ExtractionReport
from probes.results import Result, load
from tests.fuzz.fuzzlib import (
    MARKER,
    REPLACEMENTS,
    FileInfo,
    Replace,
    apply_all,
    check,
    describe,
    fuzz_settings,
    mutations,
    new_case,
)


def _bases() -> dict[str, Result]:
    from tests.test_results import extraction_report, leaderboard, read_report

    return {"leaderboard": leaderboard(), "read_report": read_report(), "extraction_report": extraction_report()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, FileInfo]]]:
    """Each valid result folder and what the fuzzer knows of its files."""
    root = tmp_path_factory.mktemp("results")
    return {name: (result.save(root / name), describe(root / name)) for name, result in _bases().items()}


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid result folder whose text holds the marker: what a mutated folder may point at, never read."""
    report = ExtractionReport(max_tokens=512, n_items=2, n_yielded=1, skipped=[MARKER], truncated=[], windowed=[])
    return report.save(tmp_path_factory.mktemp("secret") / "result")


@fuzz_settings(150)
@given(data=st.data())
def test_a_mutated_result_folder_loads_or_raises_the_input_error(
        saved: dict[str, tuple[Path, dict[str, FileInfo]]], secret: Path, tmp_path_factory: pytest.TempPathFactory,
        data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(saved)), label="base")
    base, infos = saved[name]
    changes = data.draw(mutations(infos), label="mutations")
    with new_case(tmp_path_factory, base, secret) as case:
        apply_all(case, changes)
        loaded = check(lambda: load(case.input), case)
        assert isinstance(loaded, Result | Exception)


@pytest.mark.parametrize("how", REPLACEMENTS)
def test_a_result_file_that_is_not_a_regular_file_inside_the_folder_is_refused_with_the_input_error(
        how: str, saved: dict[str, tuple[Path, dict[str, FileInfo]]], secret: Path,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each file replaced by a pipe, a folder, ``/dev/zero``, a link out to a valid twin ...: refused, unread."""
    base, infos = saved["leaderboard"]
    for name in infos:
        with new_case(tmp_path_factory, base, secret) as case:
            Replace(name, how).apply(case)
            assert isinstance(check(lambda: load(case.input), case), InputError), name
