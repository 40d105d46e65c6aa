"""Experiment files from a hostile or careless hand: one ConfigError naming the file (and the line), never a hang,
a memory blow-up, a RecursionError or an error line without the file.

The crafted inputs are those a second attack found: ``/dev/zero`` or a named pipe as the experiment file, TOML
nested thousands deep, a latin-1 file, ``n_resamples = 1e9`` (which the schema allowed), ``[train]`` sizes of
10^8, and a NUL in ``out`` or a data path. Every numeric option of the schema is bounded, and the bounds are the
ones docs/commands/run.md lists.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import pytest

from probes.errors import ConfigError
from probes.runs import option_rules
from probes.runs.config import MAX_CONFIG_BYTES, load_config
from probes.runs.experiment_lab import _RULES as LAB_RULES
from probes.runs.experiment_schema import EXPERIMENT_RULES, KINDS
from probes.runs.experiment_spec import read_experiment
from probes.runs.option_rules import analysis_rules
from tests.guards import watchdog

DOCS = Path(__file__).resolve().parents[2] / "docs" / "commands" / "run.md"

GOOD = """\
[experiment]
title = "t"
out = "runs/t"
n_resamples = 200

[models]
base = "some/folder"

[data.sample]
treebank = "sample:test"

[analyses.leaderboard]
min_count = 20
"""
#: Lines of GOOD's keys (1-based).
LINE = {"out": 3, "n_resamples": 4, "base": 7, "treebank": 10, "min_count": 13}

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need a POSIX system")
needs_dev_zero = pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero on this system")


def no_hang(seconds: int = 20) -> contextlib.AbstractContextManager[None]:
    """Fail the test (instead of hanging the suite) if the block waits on a pipe: a guard, not a timing check."""
    return watchdog(seconds, lambda: AssertionError("blocked reading a named pipe"))


def _write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _refused(path: Path | str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read_experiment(path)
    assert str(info.value).startswith(f"{path}"), info.value
    return info.value


# ------------------------------------------------------------------------------------------ the file itself
@needs_dev_zero
def test_dev_zero_is_refused_before_a_byte_is_read() -> None:
    error = _refused("/dev/zero")
    assert "cannot read the experiment file" in error.reason and "character device" in error.reason


@needs_fifo
def test_a_named_pipe_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "exp.toml"
    os.mkfifo(fifo)
    with no_hang():
        error = _refused(fifo)
    assert "named pipe" in error.reason


def test_a_folder_and_a_missing_file_are_refused(tmp_path: Path) -> None:
    assert "found a folder" in _refused(tmp_path).reason
    assert "found no such file" in _refused(tmp_path / "none.toml").reason


def test_a_file_over_the_size_bound_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD + "#" * MAX_CONFIG_BYTES + "\n")
    error = _refused(path)
    assert f"at most {MAX_CONFIG_BYTES:,} bytes" in error.reason


@pytest.mark.parametrize("deep", [
    "a = " + "[" * 5000 + "]" * 5000,  # arrays: tomllib recurses once per level
    "a = " + "{b = " * 3000 + "1" + "}" * 3000,  # inline tables
    "[" + ".".join(["t"] * 200) + "]\nx = 1",  # a table header 200 keys deep (no brackets to count)
])
def test_deep_nesting_is_a_format_error_naming_the_file(deep: str, tmp_path: Path) -> None:
    """Not a RecursionError: the nesting is bounded before (brackets) and after (the parsed value) tomllib runs."""
    error = _refused(_write(tmp_path, deep + "\n"))
    assert "nested at most 64 deep" in error.reason


def test_a_latin1_file_names_the_file_and_the_line_of_the_first_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "exp.toml"
    path.write_bytes(GOOD.replace('title = "t"', 'title = "café"').encode("latin-1"))
    error = _refused(path)
    assert error.line == 2 and str(error).startswith(f"{path}:2: ")
    assert "byte 0xe9 that is not UTF-8" in error.reason


def test_a_config_file_is_read_the_same_way(tmp_path: Path) -> None:
    """``--config FILE`` goes through the same reader: a latin-1 option file names its file and line."""
    path = tmp_path / "c.toml"
    path.write_bytes('treebank = "x"\nmodel = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match=rf"^{path}:2: .*byte 0xe9"):
        load_config(path, {"treebank", "model"})


def test_a_syntax_error_names_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD.replace("n_resamples = 200", "n_resamples = "))
    error = _refused(path)
    assert error.line == LINE["n_resamples"] and "syntax error" in error.reason


# ------------------------------------------------------------------------------------------ numeric bounds
@pytest.mark.parametrize(("old", "new", "line", "message"), [
    ("n_resamples = 200", "n_resamples = 1000000000", LINE["n_resamples"],
     "experiment.n_resamples: expected a whole number from 1 to 100000, found 1000000000"),
    ("n_resamples = 200", "n_resamples = 1e9", LINE["n_resamples"],
     "experiment.n_resamples: expected a whole number from 1 to 100000, found 1000000000.0"),
    ("n_resamples = 200", "n_resamples = true", LINE["n_resamples"], "found true"),
    ("n_resamples = 200", "tolerance = inf", LINE["n_resamples"],
     "experiment.tolerance: expected a number in [0, 1), found inf"),
    ("n_resamples = 200", "tolerance = nan", LINE["n_resamples"], "found nan"),
    ("n_resamples = 200", "seed = 4294967296", LINE["n_resamples"],
     "experiment.seed: expected a whole number from 0 to 4294967295, found 4294967296"),
    ("min_count = 20", "batch_size = 65537", LINE["min_count"],
     "analyses.leaderboard.batch_size: expected a whole number from 1 to 65536, found 65537"),
])
def test_out_of_range_values_name_file_line_key_range_and_value(old: str, new: str, line: int, message: str,
                                                                tmp_path: Path) -> None:
    error = _refused(_write(tmp_path, GOOD.replace(old, new, 1)))
    assert error.line == line, error
    assert message in error.reason, error


@pytest.mark.parametrize(("table", "message"), [
    ("[analyses.atlas]\nhead_type_sequences = 100000000",
     "analyses.atlas.head_type_sequences: expected a whole number from 0 to 10000"),
    ("[analyses.probe]\nseeds = 5000", "analyses.probe.seeds: expected a whole number from 1 to 1000"),
    ("[analyses.prune]\nrandom_seeds = [0, 100000000]", "analyses.prune.random_seeds: expected a list of whole "
                                                        "numbers from 0 to 1000"),
    ("[analyses.coreference]\nwindow = 100000000", "analyses.coreference.window: expected a whole number from 1 "
                                                  "to 16777216"),
    ("[analyses.importance]\nn_resamples = 1000000", "analyses.importance.n_resamples: expected a whole number "
                                                     "from 1 to 100000"),
    ("[analyses.importance]\nmax_batch_tokens = 100000000000", "analyses.importance.max_batch_tokens: expected a "
                                                               "whole number from 16 to 16777216"),
])
def test_options_that_size_an_allocation_are_bounded(table: str, message: str, tmp_path: Path) -> None:
    text = GOOD.replace("[data.sample]\ntreebank", "[data.sample]\ntrain = \"sample:dev\"\ntreebank")
    error = _refused(_write(tmp_path, text + "\n" + table + "\n"))
    assert message in error.reason and error.line == text.count("\n") + 3, error


LAB = """\
[train]
arch = "gpt2"
layers = 2
heads = 2
hidden = 16
treebank = "sample:dev"
[train.a]
"""


@pytest.mark.parametrize(("old", "new", "message"), [
    ("layers = 2", "layers = 100000000", "train.layers: expected a whole number from 1 to 1024, found 100000000"),
    ("heads = 2", "heads = 100000", "train.heads: expected a whole number from 1 to 1024"),
    ("hidden = 16", "hidden = 1000000000", "train.hidden: expected a whole number from 1 to 65536"),
    ("hidden = 16", "hidden = 16\nintermediate = 10000000", "train.intermediate: expected a whole number from 1 "
                                                           "to 262144"),
    ("hidden = 16", "hidden = 16\nlearning_rate = inf", "train.learning_rate: expected a number >= 0, found inf"),
])
def test_train_sizes_are_bounded(old: str, new: str, message: str, tmp_path: Path) -> None:
    lab = LAB.replace(old, new, 1)
    text = f'{lab}\n[data.sample]\ntreebank = "sample:test"\n\n[analyses.leaderboard]\n'
    error = _refused(_write(tmp_path, text))
    key = message.split(":")[0].split(".")[1]
    assert message in error.reason, error
    assert error.line == next(k for k, line in enumerate(text.splitlines(), 1) if line.startswith(key)), error


def _numeric_rules() -> list[tuple[str, str, option_rules.Rule]]:
    rules = [("experiment", k, r) for k, r in EXPERIMENT_RULES.items()]
    rules += [("train", k, r) for k, r in LAB_RULES.items()]
    rules += [(kind, k, r) for kind in KINDS for k, r in analysis_rules(kind).items()]
    return [(table, key, rule) for table, key, rule in rules if rule.kind in ("count", "counts", "number")]


@pytest.mark.parametrize(("table", "key", "rule"), _numeric_rules(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_numeric_option_is_bounded_finite_and_not_a_flag(table: str, key: str, rule: option_rules.Rule) -> None:
    """A whole number has a finite upper bound; a number refuses inf and nan; neither takes true or false."""
    probe = [True] if rule.kind == "counts" else True
    assert not rule.allows(probe)
    if rule.kind == "number":
        assert not rule.allows(math.inf) and not rule.allows(math.nan)
    else:
        assert rule.most is not None and rule.most <= max(option_rules.MAX_COUNT, option_rules.SEED.most)
        too_big = int(rule.most) + 1
        assert not rule.allows([too_big] if rule.kind == "counts" else too_big)


def test_the_documented_ranges_are_the_rules() -> None:
    """docs/commands/run.md lists the bounds the schema applies (a changed bound must change the page)."""
    text = DOCS.read_text(encoding="utf-8")
    lab = [LAB_RULES[key].most for key in ("layers", "heads", "hidden", "intermediate", "seq_len", "batch_size")]
    for bound in (option_rules.MAX_RESAMPLES, option_rules.MAX_BATCH, option_rules.MAX_TOKENS, option_rules.MAX_SEEDS,
                  option_rules.MAX_SEQUENCES, option_rules.MAX_COUNT, option_rules.SEED.most, *lab):
        assert f"{int(bound):,}" in text, bound
    assert f"{MAX_CONFIG_BYTES >> 20} MiB" in text


# ------------------------------------------------------------------------------------------ paths
@pytest.mark.parametrize(("old", "new", "line", "message"), [
    ('out = "runs/t"', 'out = "runs/a\\u0000b"', LINE["out"], "experiment.out: expected a non-empty string, found "
                                                              "a NUL character in"),
    ('out = "runs/t"', 'out = "runs/a\\nb"', LINE["out"], "found a control character (U+000A)"),
    ('treebank = "sample:test"', 'treebank = "data/a\\u0000b.conllu"', LINE["treebank"],
     "data.sample.treebank: expected a file, folder or model name, found a NUL character in"),
    ('base = "some/folder"', 'base = "some/\\u001bfolder"', LINE["base"],
     "models.base: expected a file, folder or model name, found a control character (U+001B)"),
])
def test_a_nul_or_control_character_in_a_path_is_one_config_error(old: str, new: str, line: int, message: str,
                                                                  tmp_path: Path) -> None:
    error = _refused(_write(tmp_path, GOOD.replace(old, new, 1)))
    assert error.line == line and message in error.reason, error


def test_a_control_character_from_an_environment_variable_is_refused(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROBES_TEST_OUT", "runs/a\x1b[31mb")
    error = _refused(_write(tmp_path, GOOD.replace('out = "runs/t"', 'out = "${PROBES_TEST_OUT}"')))
    assert error.line == LINE["out"] and "experiment.out: expected a folder path" in error.reason, error


def test_a_nul_in_the_out_argument_is_refused_before_any_folder_is_made(tmp_path: Path) -> None:
    from probes.runs.experiment import run_experiment

    path = _write(tmp_path, GOOD)
    with pytest.raises(ConfigError, match="output folder: expected a folder path, found a NUL character"):
        run_experiment(path, out=tmp_path / "a\x00b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.toml"]
