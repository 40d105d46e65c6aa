"""Fuzz: mutated experiment files are read, or refused with the input error (issue 36).

Valid experiment files (the repository's own under ``experiments/``, and the small ones the tests run) are
mutated as TOML (values replaced by other types, extremes, nesting thousands deep, paths that lead out; keys
removed and added; the document re-written by :func:`tests.fuzz.fuzzlib.toml_dumps`), as text (lines deleted,
repeated, swapped, replaced by fragments) and as bytes (latin-1, NUL, truncation), or replaced by a pipe, a folder,
``/dev/zero``. :func:`probes.runs.experiment_spec.read_experiment` (what ``probes run`` reads first) must return
an experiment or raise :class:`~probes.errors.InputError`, within the watchdog, opening nothing but the file.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from probes.errors import InputError
from probes.runs.experiment_spec import Experiment, read_experiment
from tests.fuzz.fuzzlib import (
    MARKER,
    PATH_FORMS,
    REPLACEMENTS,
    Base,
    JsonSet,
    Long,
    PathOf,
    apply_all,
    check,
    fuzz_settings,
    mutations,
    new_case,
)

REPO = Path(__file__).resolve().parents[2]
FILE = "experiment.toml"

#: The small experiment files of tests/runs (a data folder, a model folder and its random-init twin).
SMALL = '''\
[experiment]
title = "t"
out = "runs/t"
n_resamples = 200
seed_questions = true
tolerance = 0.05

[models]
base = "some/folder"
twin = "random-init:some/folder@1"

[data.sample]
treebank = "sample:test"
select_on = "sample:dev"

[analyses.atlas]
js_sentences = 12
grad_sentences = 0
batch_size = 16

[analyses.leaderboard]
min_count = 20

[analyses.baselines]

[analyses.prune]
objective = "representation"
step = 0.25
random_seeds = [0, 1]
leaderboard_at = 0.5
limit = 24
select_limit = 24
'''

#: The repository's experiment files that ``probes run`` reads (the others are older command configs).
REPOSITORY_FILES = ("demo-compare.toml", "heads-lab.toml", "what-makes-heads-differ.toml")


@pytest.fixture(scope="module")
def experiments(tmp_path_factory: pytest.TempPathFactory) -> list[Base]:
    """Folders holding one valid experiment file each."""
    texts = {"small": SMALL, **{name: (REPO / "experiments" / name).read_text(encoding="utf-8")
                                for name in REPOSITORY_FILES}}
    bases = []
    for name, text in texts.items():
        folder = tmp_path_factory.mktemp("experiment")
        (folder / FILE).write_text(text, encoding="utf-8")
        read_experiment(folder / FILE)  # valid before it is mutated
        bases.append(Base(name, folder))
    return bases


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("secret")
    (folder / FILE).write_text(SMALL.replace('title = "t"', f'title = "{MARKER}"'), encoding="utf-8")
    return folder


@fuzz_settings(250)
@given(data=st.data())
def test_a_mutated_experiment_file_is_read_or_refused_with_the_input_error(
        experiments: list[Base], secret: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(experiments), label="base")
    # the file named on the command line may be a link anywhere: only what it names must stay inside
    kinds = [kind for kind in REPLACEMENTS if kind != "outside"]
    changes = data.draw(mutations(base.infos, replacements=kinds), label="mutations")
    with new_case(tmp_path_factory, base.folder, secret) as case:
        apply_all(case, changes)
        read = check(lambda: read_experiment(case.input / FILE), case)
        assert isinstance(read, Experiment | Exception)


def test_every_text_field_holding_a_hostile_path_or_a_long_name_is_read_or_refused_with_the_input_error(
        experiments: list[Base], secret: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The sweep behind the random search: every text value of the small file, replaced by each path form that
    leads out of its folder, and by names longer than a file system takes (a data path of 1000 characters)."""
    small = experiments[0]
    text_fields = [path for path in small.infos[FILE].paths
                   if isinstance(_at(tomllib.loads((small.folder / FILE).read_text(encoding="utf-8")), path), str)]
    values = [PathOf(how) for how in PATH_FORMS] + [Long(256), Long(1000), Long(5000, "/")]
    with new_case(tmp_path_factory, small.folder, secret) as case:
        for path in text_fields:
            for value in values:
                shutil.copy(small.folder / FILE, case.input / FILE)
                JsonSet(FILE, path, value).apply(case)
                read = check(lambda: read_experiment(case.input / FILE), case)
                assert isinstance(read, Experiment | InputError), (path, value)


def _at(doc: dict[str, Any], path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc
