"""The experiment schema: every bad value is a ConfigError at ``file:line:``, before any model work.

The bad values are those a user met: ``min_count = "twenty"`` ran the whole model pass and then failed with an
internal TypeError naming no file; ``min_count = -5`` was accepted though the command line refuses it; ``out =
42`` wrote to ``./42``; an analysis with ``models = []`` exited 0 with an empty report.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from probes.errors import ConfigError
from probes.runs.experiment_schema import KINDS
from probes.runs.experiment_spec import analysis_function, read_experiment
from probes.runs.option_rules import MAX_COUNT, Rule, analysis_rules, shown
from probes.runs.toml_lines import KeyLines

GOOD = """\
[experiment]
title = "t"
out = "runs/t"

[models]
base = "some/folder"
twin = "random-init:some/folder@4"

[data.sample]
treebank = "sample:test"
select_on = "sample:dev"

[analyses.syntax]
kind = "leaderboard"
min_count = 20
relations = ["nsubj", "obj"]

[analyses.prune]
step = 0.25
random_seeds = [0, 1]
"""
#: Lines of GOOD's keys (1-based).
LINE = {"out": 3, "twin": 7, "select_on": 11, "syntax": 13, "kind": 14, "min_count": 15, "relations": 16,
        "prune": 18, "step": 19, "random_seeds": 20}


def _read(tmp_path: Path, old: str, new: str) -> ConfigError:
    assert old in GOOD
    path = tmp_path / "exp.toml"
    path.write_text(GOOD.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_experiment(path)
    assert str(info.value).startswith(f"{path}:"), info.value
    return info.value


@pytest.mark.parametrize(("old", "new", "line", "message"), [
    ("min_count = 20", 'min_count = "twenty"', LINE["min_count"],
     f'analyses.syntax.min_count: expected a whole number from 1 to {MAX_COUNT}, found "twenty"'),
    ("min_count = 20", "min_count = -5", LINE["min_count"], "analyses.syntax.min_count: expected a whole number"),
    ("min_count = 20", "min_count = 10000000000000000000000", LINE["min_count"], "found 10000000000000000000000"),
    ("min_count = 20", "min_count = true", LINE["min_count"], "found true"),
    ('out = "runs/t"', "out = 42", LINE["out"], "experiment.out: expected a non-empty string, found 42"),
    ('kind = "leaderboard"', 'kind = "leaderboard"\nmodels = []', LINE["kind"] + 1,
     "analyses.syntax.models: expected a model name or a non-empty list of them, found []"),
    ('kind = "leaderboard"', 'kind = "leaderboard"\ndata = []', LINE["kind"] + 1,
     "analyses.syntax.data: expected a data name or a non-empty list of them, found []"),
    ('kind = "leaderboard"', 'kind = "leaderboard"\nmodels = ["bass"]', LINE["kind"] + 1,
     "analyses.syntax.models: unknown model 'bass'; expected one of base, twin"),
    ('kind = "leaderboard"', 'kind = "leaderboard"\ndata = "ewt"', LINE["kind"] + 1, "unknown data 'ewt'"),
    ('kind = "leaderboard"', 'kind = "leaderboard"\nmodels = ["base", "base"]', LINE["kind"] + 1,
     "model 'base' is named twice"),
    ("min_count = 20", "min_cuont = 20", LINE["min_count"], "analyses.syntax.min_cuont: unknown option for leaderboard"),
    ('title = "t"', 'titel = "t"', 2, "experiment.titel: unknown key"),
    ('kind = "leaderboard"', 'kind = "leaderbord"', LINE["kind"], "expected a kind, one of leaderboard"),
    ('relations = ["nsubj", "obj"]', 'relations = ["nsubj", 3]', LINE["relations"],
     'analyses.syntax.relations: expected a list of strings, found ["nsubj", 3]'),
    ("random_seeds = [0, 1]", 'random_seeds = [0, "1"]', LINE["random_seeds"], "expected a list of whole numbers"),
    ("step = 0.25", "step = 0.75", LINE["step"], "analyses.prune.step: expected a number in [0.01, 0.5], found 0.75"),
    ("step = 0.25", "step = nan", LINE["step"], "found nan"),
    ('select_on = "sample:dev"', "select_on = {path = 1}", LINE["select_on"],
     "data.sample.select_on: expected a file or treebank name, or a non-empty list of them"),
    ('select_on = "sample:dev"', "select_on = []", LINE["select_on"], "found []"),
    ('twin = "random-init:some/folder@4"', "twin = 4", LINE["twin"], "models.twin: expected a model name"),
    ('twin = "random-init:some/folder@4"', 'twin = "random-init:some/folder@x"', LINE["twin"],
     "the seed after '@' must be a whole number >= 0"),
    ('title = "t"', 'title = "t"\nseed_questions = "yes"', 3, 'experiment.seed_questions: expected true or false'),
    ('title = "t"', 'title = "t"\ntolerance = 1', 3, "experiment.tolerance: expected a number in [0, 1), found 1"),
    ('title = "t"', 'title = "t"\nseed = -1', 3, "experiment.seed: expected a whole number from 0 to"),
    ("[analyses.prune]", "[analyses.prune]\nobjective = \"loss\"", LINE["prune"] + 1,
     "analyses.prune.objective: expected one of lm, representation, probe, found \"loss\""),
    ("[analyses.prune]", "[analyses.prune]\nextraction = {dtype = \"float16\"}", LINE["prune"] + 1, "unknown option"),
])
def test_each_bad_value_is_an_error_at_its_line(tmp_path: Path, old: str, new: str, line: int, message: str) -> None:
    error = _read(tmp_path, old, new)
    assert error.line == line, error
    assert message in str(error), error


def test_library_checks_are_reused_at_the_line(tmp_path: Path) -> None:
    """What a rule cannot say (which extra analyses a leaderboard runs) is the library's own check, at the line."""
    error = _read(tmp_path, "min_count = 20", 'min_count = 20\nanalyses = ["nope"]')
    assert error.line == LINE["min_count"] + 1
    assert "analyses.syntax.analyses: unknown analysis 'nope'" in str(error)


def test_an_analysis_with_nothing_to_run_on_is_refused(tmp_path: Path) -> None:
    error = _read(tmp_path, 'treebank = "sample:test"\nselect_on = "sample:dev"', 'corpus = "ud:en_gum:test"')
    assert "analyses.syntax: no data to run on: a leaderboard needs a dataset with a treebank" in str(error)
    assert error.line == LINE["syntax"] - 1  # the replacement took one line out


def test_a_key_given_with_dashes_and_underscores_is_refused(tmp_path: Path) -> None:
    error = _read(tmp_path, 'select_on = "sample:dev"', 'select_on = "sample:dev"\nselect-on = "sample:test"')
    assert "data.sample.select-on: given twice" in str(error) and error.line == LINE["select_on"]


def test_a_bad_value_stops_the_run_before_any_model_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``probes run``: the schema error comes first; no model is resolved or loaded, no folder is made."""
    import probes.extraction.loading as loading
    import probes.runs.experiment as experiment
    import probes.runs.inputs as inputs

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("model work started before the experiment file was checked")

    monkeypatch.setattr(loading, "resolve_model", never)
    monkeypatch.setattr(inputs, "load_extractor", never)
    monkeypatch.setattr(experiment, "_compute", never)
    monkeypatch.setattr(experiment._Hashes, "model", never)
    path = tmp_path / "exp.toml"
    out = tmp_path / "out"
    path.write_text(GOOD.replace('out = "runs/t"', f'out = "{out}"').replace("min_count = 20", 'min_count = "twenty"'),
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"exp.toml:{LINE['min_count']}: analyses.syntax.min_count"):
        experiment.run_experiment(path, progress=False)
    assert not out.exists()


def test_the_cli_prints_one_line_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    path = tmp_path / "exp.toml"
    path.write_text(GOOD.replace('out = "runs/t"', f'out = "{tmp_path / "out"}"').replace("step = 0.25", "step = -1"),
                    encoding="utf-8")
    assert main(["run", str(path), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {path}:{LINE['step']}: analyses.prune.step: expected a number in [0.01, 0.5], found -1"]


def test_shipped_experiments_validate() -> None:
    """Every experiment file in experiments/ (those with [analyses]; the others are --config files) reads."""
    import tomllib

    root = Path(__file__).resolve().parents[2] / "experiments"
    files = [p for p in sorted(root.glob("*.toml")) if "analyses" in tomllib.loads(p.read_text(encoding="utf-8"))]
    assert len(files) >= 2
    for path in files:
        assert read_experiment(path).analyses


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_option_of_every_kind_has_a_rule(kind: str) -> None:
    """The rules name exactly the library function's options (those the experiment does not fill in itself, and
    ``extraction``, an object no TOML value makes, whose ``attention_source`` is the one extraction option a file
    sets: the experiment turns it into the function's ``extraction``), so a new option cannot go unchecked."""
    managed = {"model", "treebank", "corpus", "select_on", "train_data", "eval_data", "train_store", "eval_store",
               "select_store", "store", "name", "select_name", "progress", "record", "extraction",
               "model_a", "model_b", "null_model"}  # a match's pair and null model: its pairs and null
    parameters = set(inspect.signature(analysis_function(kind)).parameters)
    options = parameters - managed | ({"attention_source"} if "extraction" in parameters else set())
    assert set(analysis_rules(kind)) == options


def test_defaults_of_the_library_follow_their_rules() -> None:
    """Each function default is a value its rule accepts (tuples read as the lists TOML gives), so the rules are
    not stricter than the library where the library works."""
    for kind in KINDS:
        rules = analysis_rules(kind)
        for name, param in inspect.signature(analysis_function(kind)).parameters.items():
            default = param.default
            if name not in rules or default is None or default is inspect.Parameter.empty:
                continue
            value = list(default) if isinstance(default, tuple) else default
            assert rules[name].allows(value), (kind, name, default)


def test_rules() -> None:
    count = Rule("count", 1, 10)
    assert count.allows(1) and count.allows(10) and not count.allows(11) and not count.allows(0)
    assert not count.allows(True) and not count.allows(2.0) and not count.allows("2")
    fraction = Rule("number", 0, 1, below=True)
    assert fraction.allows(0) and fraction.allows(0.5) and not fraction.allows(1) and not fraction.allows(float("nan"))
    assert fraction.expected() == "a number in [0, 1)" and count.expected() == "a whole number from 1 to 10"
    assert Rule("flag-or-choice", choices=("a",)).allows(False) and not Rule("flag-or-choice", choices=("a",)).allows("b")
    assert shown("tw\"o") == '"tw\\"o"' and shown([1, True, "x"]) == '[1, true, "x"]' and len(shown("x" * 500)) == 60


def test_key_lines() -> None:
    text = """\
top = 1
[data.ewt]
treebank = "a"   # a comment
"select-on" = "b"
[analyses."two words"]
kind = "atlas"
text = \"\"\"
min_count = 3
\"\"\"
a.b = 2
inline = {x = 1}
[[runs]]
id = 1
"""
    lines = KeyLines(text)
    assert lines.line("top") == 1 and lines.line("data") == 2 and lines.line("data", "ewt", "treebank") == 3
    assert lines.line("data", "ewt", "select_on") == 4  # '-' and '_' alike, quoted keys unquoted
    assert lines.line("analyses", "two words", "kind") == 6
    assert lines.line("analyses", "two words", "min_count") == 5  # inside a string: falls back to the table
    assert lines.line("analyses", "two words", "a", "b") == 10 and lines.line("analyses", "two words", "a") == 10
    assert lines.line("analyses", "two words", "inline", "x") == 11  # inline tables: the key's own line
    assert lines.line("runs", "id") == 13 and lines.line("nowhere") is None
