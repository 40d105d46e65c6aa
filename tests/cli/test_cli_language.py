"""One CLI language: the same option names, parsing and help text on every command (issue 11, item 8).

The command list comes from the typer app itself, so a new command is checked as soon as it is registered.
Plumbing tests replace the run function with a recorder, so they check what the CLI passes without a model.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer.main

from probes.cli import app, main, options
from probes.run_record import RunRecord

SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample"
DEV = str(SAMPLE / "sample-dev.conllu")
GUM_STYLE = Path(__file__).resolve().parents[1] / "fixtures" / "coref" / "tiny_gum.conllu"

_ALL = typer.main.get_command(app).commands  # name -> click command or group
#: `run` and `report` take an experiment file or a run folder as their argument (the experiment file is their
#: options file); they are checked apart below.
EXPERIMENT_COMMANDS = {"run", "report"}
#: The analysis commands; the `data` group (`data add`, `data list`: the registry cache) reads no options file.
COMMANDS = {name: c for name, c in _ALL.items() if not hasattr(c, "commands") and name not in EXPERIMENT_COMMANDS}
GROUPS = {name for name in _ALL if name not in COMMANDS and name not in EXPERIMENT_COMMANDS}
#: Commands that take a model, that read data, that run a model, and that write an output folder.
TAKES_MODEL = {"leaderboard", "extract", "coref", "bridging", "probe", "atlas", "importance", "prune", "match",
               "sources"}
READS_DATA = {"leaderboard", "baselines", "extract", "coref", "bridging", "probe", "atlas", "importance", "prune",
              "match", "sources"}
RUNS_MODEL = TAKES_MODEL | {"demo"}
WRITES_FOLDER = {"leaderboard", "demo", "coref", "bridging", "probe", "atlas", "importance", "prune", "train",
                 "match", "sources"}


def _opts(command: str) -> dict[str, Any]:
    """Every option string of a command -> its click parameter."""
    return {opt: p for p in COMMANDS[command].params for opt in (*p.opts, *p.secondary_opts)}


def test_the_command_sets_cover_every_command() -> None:
    assert set(COMMANDS) == {"leaderboard", "baselines", "demo", "extract", "coref", "bridging", "probe", "atlas",
                             "importance", "prune", "verify", "models", "train", "match", "sources"}
    assert GROUPS == {"data"}
    assert {c for c in COMMANDS if "--model" in _opts(c)} == TAKES_MODEL
    assert {c for c in COMMANDS if "--on-long" in _opts(c)} == RUNS_MODEL
    assert {c for c in COMMANDS if "--limit" in _opts(c)} == READS_DATA
    assert {c for c in COMMANDS if "--figure-format" in _opts(c)} == WRITES_FOLDER
    assert {c for c in COMMANDS if "--overwrite" in _opts(c)} == WRITES_FOLDER


def test_experiment_commands_share_the_option_language() -> None:
    """`probes run` / `probes report`: an argument instead of --config, and --out / --progress as everywhere."""
    assert EXPERIMENT_COMMANDS <= set(_ALL)
    for name in EXPERIMENT_COMMANDS:
        opts = {opt: p for p in _ALL[name].params for opt in (*p.opts, *p.secondary_opts)}
        assert "--config" not in opts and opts["-o"] is opts["--out"]
        assert opts["--out"].opts == _opts("leaderboard")["--out"].opts
    run_opts = {opt: p for p in _ALL["run"].params for opt in (*p.opts, *p.secondary_opts)}
    assert run_opts["--no-progress"] is run_opts["--progress"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_config_is_read_by_every_command(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "options.toml"
    config.write_text("no-such-option = 1\n", encoding="utf-8")
    assert main([command, "--config", str(config)]) == 1  # the file is read (and checked) before anything else
    err = capsys.readouterr().err
    assert err.startswith(f"error: {config}:1:") and "unknown key 'no-such-option'" in err


def test_config_values_are_used_as_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "baselines.toml"
    config.write_text(f'treebank = "{DEV}"\nlimit = 3\n', encoding="utf-8")
    assert main(["baselines", "--config", str(config)]) == 0
    assert "\n3 sentences;" in capsys.readouterr().out
    assert main(["baselines", "--config", str(config), "--limit", "5"]) == 0  # the command line wins
    assert "\n5 sentences;" in capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(TAKES_MODEL))
def test_model_has_the_short_name(command: str) -> None:
    assert _opts(command)["-m"] is _opts(command)["--model"]
    assert _opts(command)["--model"].help == options.MODEL_HELP


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_data_is_named_treebank_never_corpus(command: str) -> None:
    """The data a command reports on is --treebank. The atlas alone takes a second corpus beside it, a
    coreference corpus for one more column, and issue 12 names that one --corpus; so does `sources`, for its
    coreference heads under each attention source."""
    opts = _opts(command)
    assert "--corpus" not in opts or command in ("atlas", "sources")
    if command in READS_DATA - {"probe"}:  # probe reads two splits: --train and --eval
        assert "--treebank" in opts and opts["-t"] is opts["--treebank"]


@pytest.mark.parametrize("flag", ["--config", "--model", "--figure-format", "--overwrite", "--figures", "--progress",
                                  "--on-long"])
def test_a_shared_option_reads_the_same_on_every_command(flag: str) -> None:
    """One wording per shared option, from options.py (coref and bridging say "windows" for --on-long; importance
    and prune, which score whole sentences, say that they refuse windows)."""
    helps = {c: _opts(c)[flag].help for c in COMMANDS if flag in _opts(c)}
    if flag == "--on-long":
        assert helps.pop("coref") == helps.pop("bridging") and "Windows" in _opts("coref")[flag].help
        assert helps.pop("importance") == helps.pop("prune") and "'window' is refused" in _opts("prune")[flag].help
    assert len(helps) > 1 and len(set(helps.values())) == 1, helps


@pytest.mark.parametrize("command", sorted(RUNS_MODEL))
def test_on_long_is_checked_while_parsing(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--on-long", "drop"]) == 2  # a usage error, before any model or data is touched
    err = capsys.readouterr().err
    assert "--on-long" in err and "skip, truncate, window" in err


def test_choices_are_those_of_the_library() -> None:
    from probes.extraction.extractor import ON_LONG
    from probes.reports.writer import FIGURE_FORMATS

    assert options.ON_LONG == tuple(ON_LONG) and options.FIGURE_FORMATS == tuple(FIGURE_FORMATS)


@pytest.mark.parametrize("command", sorted(WRITES_FOLDER))
def test_figure_format_is_checked_while_parsing(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--figure-format", "jpg"]) == 2
    assert "png, svg, pdf" in capsys.readouterr().err


# ------------------------------------------------------------------ plumbing: what reaches the run function
class _Stop(Exception):
    """Raised by the recorders once they have seen what the CLI passes."""


class _Result:
    """A run result whose ``write`` records its arguments and stops the command."""

    def __init__(self, seen: dict[str, Any]) -> None:
        self.seen = seen
        self.record = RunRecord.of({"model": "m"})
        self.reported_on = "data"

    def write(self, out_dir: Any, **kwargs: Any) -> dict[str, Path]:
        self.seen["write"] = {"out_dir": Path(out_dir), **kwargs}
        raise _Stop


def _recorder(monkeypatch: pytest.MonkeyPatch, module: str, name: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def run(*args: Any, **kwargs: Any) -> _Result:
        seen.update(args=args, kwargs=kwargs)
        return _Result(seen)

    monkeypatch.setattr(f"{module}.{name}", run)
    return seen


_RUNS = {  # command -> (run function, arguments)
    "leaderboard": ("probes.runs.leaderboard", "leaderboard", ["-m", "m", "--treebank", DEV]),
    "coref": ("probes.runs.coreference", "coreference", ["-m", "m", "--treebank", str(GUM_STYLE)]),
    "bridging": ("probes.runs.coreference", "bridging", ["-m", "m", "--treebank", str(GUM_STYLE)]),
    "probe": ("probes.runs.probing", "probe", ["-m", "m", "--train", DEV, "--eval", DEV]),
    "demo": ("probes.runs.demo", "demo", []),
    "importance": ("probes.runs.importance", "importance", ["-m", "m", "--treebank", DEV]),
    "prune": ("probes.runs.importance", "prune", ["-m", "m", "--treebank", DEV]),
}


@pytest.mark.parametrize("command", sorted(_RUNS))
def test_shared_flags_reach_the_run_function_and_write(command: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    module, name, args = _RUNS[command]
    seen = _recorder(monkeypatch, module, name)
    limit = [] if command == "demo" else ["--limit", "7"]
    with pytest.raises(_Stop):  # --debug: main lets the recorder's exception through
        main(["--debug", command, *args, *limit, "--on-long", "window", "--figure-format", "svg", "--overwrite",
              "--out", str(tmp_path / "out")])
    assert seen["kwargs"]["on_long"] == "window"
    if command != "demo":
        assert seen["kwargs"]["limit"] == 7
    assert seen["write"]["figure_format"] == "svg" and seen["write"]["overwrite"] is True
    assert seen["write"]["out_dir"] == tmp_path / "out"


@pytest.mark.parametrize("command", ["coref", "bridging"])
def test_coref_and_bridging_write_a_default_folder(command: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    module, name, args = _RUNS[command]
    seen = _recorder(monkeypatch, module, name)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(_Stop):
        main(["--debug", command, "-m", "models/tiny-bert", "--treebank", str(GUM_STYLE)])
    assert seen["write"]["out_dir"] == Path("runs") / f"{command}-tiny-bert-tiny_gum"
    assert seen["write"]["overwrite"] is False and seen["write"]["figure_format"] == "png"


def test_probe_limit_is_the_default_of_both_split_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.runs import probing, probing_inputs

    seen: dict[str, Any] = {}

    def open_split(extractor: Any, spec: Any, store: Any, limit: Any, split: str, read: Any = None) -> Any:
        seen[split] = limit
        if split == "eval":
            raise _Stop
        return [], {}, []

    monkeypatch.setattr(probing_inputs, "_open_split", open_split)
    with pytest.raises(_Stop):
        extractor = SimpleNamespace(name_or_path="m", info=dict)
        probing.probe(extractor, DEV, DEV, limit=5, max_eval=2, kinds=["per-head"], progress=False)
    assert seen == {"train": 5, "eval": 2}


# ------------------------------------------------------------------ real runs on a tiny model
@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("tiny"))


def test_extract_layers_are_one_based_and_limit_reads_the_first_sentences(
        bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.extraction.store import open_store

    code = main(["extract", "-m", str(bert), "--treebank", DEV, "--store", str(tmp_path / "st"), "--layers", "1",
                 "--heads", "2", "--limit", "3", "--device", "cpu", "--no-progress"])
    assert code == 0, capsys.readouterr()
    store = open_store(tmp_path / "st")
    assert store.layers == (0,) and store.heads == (1,)  # the model's first layer, its second head
    assert len(store) == 3


def test_index_lists_parse_one_based() -> None:
    assert options.parse_indices("1,5-6", "--layers") == [0, 4, 5]
    assert options.parse_indices(None, "--layers") is None
    for bad in ("0", "3-2", "x", "1,,2"):
        with pytest.raises(ValueError, match="--heads expects 1-based numbers"):
            options.parse_indices(bad, "--heads")


def test_leaderboard_limit_and_on_long_reach_the_run(bert: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "board"
    assert main(["leaderboard", "-m", str(bert), "--treebank", DEV, "--limit", "4", "--on-long", "truncate",
                 "--out", str(out), "--min-count", "1", "--no-figures", "--device", "cpu", "--no-progress"]) == 0
    capsys.readouterr()
    run = json.loads((out / "run.json").read_text())
    assert run["data"]["report"]["sentences"] == 4 and run["options"]["limit"] == 4
    assert run["extractor"]["on_long"] == "truncate"


@pytest.mark.slow
def test_coref_writes_its_default_folder_and_prints_it(minilm_path: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["coref", "-m", str(minilm_path), "--treebank", str(GUM_STYLE), "--limit", "1", "--no-progress",
                 "--n-resamples", "20", "--select-on", "same"]) == 0  # one document: no halves
    folder = Path("runs") / f"coref-{minilm_path.name}-tiny_gum"
    assert f"Report: {folder / 'coref_leaderboard.md'}" in capsys.readouterr().out
    assert (tmp_path / folder / "coref_leaderboard.md").is_file()
    run = json.loads((tmp_path / folder / "run.json").read_text())
    assert run["data"]["documents"] == 1 and run["options"]["limit"] == 1


_FOLDER_ARGS = {
    "leaderboard": ["--model", "no/such/model", "--treebank", DEV],
    "demo": [],
    "coref": ["--model", "no/such/model", "--treebank", str(GUM_STYLE)],
    "bridging": ["--model", "no/such/model", "--treebank", str(GUM_STYLE)],
    "probe": ["--model", "no/such/model", "--train", DEV, "--eval", DEV],
    "atlas": ["--model", "no/such/model", "--treebank", DEV],
    "importance": ["--model", "no/such/model", "--treebank", DEV],
    "prune": ["--model", "no/such/model", "--treebank", DEV],
    "match": ["--model", "no/such/model", "--model", "no/such/other", "--treebank", DEV],
    "train": ["--arch", "bert", "--layers", "1", "--heads", "2", "--hidden", "32", "--treebank", DEV],
    "sources": ["--model", "no/such/model", "--treebank", DEV, "--select-on", DEV],
}


@pytest.mark.parametrize("command", sorted(WRITES_FOLDER))
def test_a_folder_of_other_files_is_refused_before_any_work(command: str, tmp_path: Path, monkeypatch,
                                                          capsys) -> None:
    """The output folder is checked first: the model (a missing one here) is never looked for."""
    import probes.runs.demo as demo_module

    monkeypatch.setattr(demo_module, "demo_model_dir", lambda: pytest.fail("the demo model was looked for"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert set(_FOLDER_ARGS) == WRITES_FOLDER
    assert main([command, *_FOLDER_ARGS[command], "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {out}: output folder is not empty") and "--overwrite" in err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
