"""Numeric options: a value that is not a number, out of range or absurdly large is one clear usage error.

Before, ``--limit 100000000000000000000000`` (1e23 written out) passed the option parser and failed deep in the
run with an internal ``ValueError`` from ``itertools.islice``; ``prune --seeds`` of that size with an internal
``OverflowError``. Every count option is now bounded by :data:`probes.runs.option_rules.MAX_COUNT`, and the
bounds the command line declares are those the experiment files are checked against.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from probes.cli import app, main
from probes.runs.option_rules import MAX_COUNT, analysis_rules

HUGE = "100000000000000000000000"  # 1e23 written out: a valid integer, far too large for any count
SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample" / "sample-test.conllu"


@pytest.mark.parametrize(("command", "flag", "value"), [
    ("run", "--limit", "1e23"), ("run", "--limit", HUGE), ("run", "--limit", "-3"), ("run", "--limit", "abc"),
    ("run", "--limit", "0"), ("leaderboard", "--limit", HUGE), ("leaderboard", "--batch-size", HUGE),
    ("leaderboard", "--min-count", HUGE), ("leaderboard", "--max-batch-tokens", HUGE),
    ("leaderboard", "--max-attention-mb", "nan"), ("prune", "--seeds", HUGE), ("prune", "--step", "nan"),
    ("importance", "--select-limit", HUGE), ("probe", "--max-train", HUGE), ("probe", "--max-eval", HUGE),
    ("extract", "--shard-size", HUGE),
])
def test_bad_numbers_are_one_usage_error(command: str, flag: str, value: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Refused while parsing (exit 2), before any file is read or model loaded: the model does not exist."""
    if command == "run":
        experiment = tmp_path / "never-read.toml"  # parsing stops before the file would be read
        args = ["run", str(experiment), "--out", str(tmp_path / "out")]
    elif command == "probe":
        args = ["probe", "--model", str(tmp_path / "none"), "--train", str(SAMPLE), "--eval", str(SAMPLE)]
    elif command == "extract":
        args = ["extract", "--model", str(tmp_path / "none"), "--treebank", str(SAMPLE), "--store",
                str(tmp_path / "store")]
    else:
        args = [command, "--model", str(tmp_path / "none"), "--treebank", str(SAMPLE), "--out", str(tmp_path / "o")]
    code = main([*args, flag, value, "--no-progress"] if command != "extract" else [*args, flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: ") and flag in err[0], err
    assert "internal error" not in err[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


def test_the_largest_count_is_accepted_by_the_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``MAX_COUNT`` itself passes the parser: the run then stops at the missing file (exit 1), not at the option."""
    code = main(["run", str(tmp_path / "missing.toml"), "--limit", str(MAX_COUNT), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot read the experiment file" in err


#: Experiment kinds -> the command that runs the same analysis.
_COMMANDS = {"leaderboard": "leaderboard", "baselines": "baselines", "atlas": "atlas", "coreference": "coref",
             "bridging": "bridging", "probe": "probe", "importance": "importance", "prune": "prune"}
#: Options whose command-line form differs from the library's (the flag counts the library's list).
_DIFFERENT = {("prune", "random_seeds"): "seeds"}


def _bounds(param: object) -> tuple[float | None, float | None] | None:
    """A parameter's ``(min, max)`` (typer's own parameters hold them; click's in their type); None: unbounded."""
    owner = param if hasattr(param, "min") else getattr(param, "type", None)
    low, high = getattr(owner, "min", None), getattr(owner, "max", None)
    return None if low is None and high is None else (low, high)


@pytest.mark.parametrize("kind", list(_COMMANDS))
def test_experiment_rules_are_the_command_lines(kind: str) -> None:
    """Every numeric bound a command declares is the bound its experiment-file option is checked against."""
    command = typer.main.get_command(app).commands[_COMMANDS[kind]]  # type: ignore[attr-defined]
    params = {p.name: p for p in command.params}
    rules = analysis_rules(kind)
    compared = 0
    for option, rule in rules.items():
        param = params.get(_DIFFERENT.get((kind, option), option))
        bounds = None if param is None else _bounds(param)
        if bounds is None:
            continue
        compared += 1
        assert bounds == (rule.least, rule.most), (kind, option, bounds, rule)
    assert compared >= 2  # every command has counted options (limit, batch size, resamples ...)
    for name, param in params.items():  # and every bounded option of the command is bounded above too
        bounds = _bounds(param)
        if bounds is not None and name in rules:
            assert bounds[1] is not None, (kind, name, bounds)


@pytest.mark.parametrize(("line", "message"), [
    ('min-count = "twenty"', 'min-count: expected a whole number (--min-count), found "twenty"'),
    ("min-count = -5", f"min-count: expected a whole number from 1 to {MAX_COUNT} (--min-count), found -5"),
    ("limit = 1e23", "limit: expected a whole number (--limit), found 1e+23"),
    (f"limit = {HUGE}", f"limit: expected a whole number from 1 to {MAX_COUNT} (--limit), found {HUGE}"),
    ("batch-size = true", "batch-size: expected a whole number (--batch-size), found true"),
    ("out = 42", "out: expected a string (a path) (--out), found 42"),
    ('progress = "no"', 'progress: expected true or false (--progress), found "no"'),
    ('relations = ["nsubj", 3]', 'relations: expected a string or a list of strings (--relations)'),
    ('on-long = "wind"', "on-long: expected one of skip, truncate, window"),
])
def test_bad_config_values_name_the_file_and_line(line: str, message: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--config FILE`` values follow the options' rules, refused at their line before any work (exit 1)."""
    path = tmp_path / "c.toml"
    path.write_text(f'[leaderboard]\nmodel = "{tmp_path / "none"}"\ntreebank = "{SAMPLE}"\n{line}\n', encoding="utf-8")
    assert main(["leaderboard", "--config", str(path), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}:4: {message}"), err
    assert not (tmp_path / "o").exists()


def test_good_config_values_still_reach_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lists for text options (joined by commas), whole numbers for float options, flags: all accepted as before."""
    import probes.runs.leaderboard as leaderboard

    seen: dict[str, object] = {}

    def stop(*args: object, **kwargs: object) -> None:
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(leaderboard, "leaderboard", stop)
    path = tmp_path / "c.toml"
    path.write_text(f'model = "m"\ntreebank = "{SAMPLE}"\nexclude = ["root", "punct"]\nrelations = "nsubj"\n'
                    f"min-count = 7\nmax-attention-mb = 512\nposs-rule = false\n", encoding="utf-8")
    main(["leaderboard", "--config", str(path), "--out", str(tmp_path / "o"), "--no-figures"])
    assert seen["min_count"] == 7 and seen["poss_rule"] is False and list(seen["relations"]) == ["nsubj"]
    assert list(seen["exclude"]) == ["root", "punct"]
