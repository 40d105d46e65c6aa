"""Options that contradict each other are refused while the command line is read (issue 38): exit 2, one line naming
both options, before any data is read or any model looked for (``--within-layers --across-layers`` used to do one
of them silently; ``--store`` with ``--model`` exited 1 after the checks of the run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.cli import main

SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample" / "sample-dev.conllu"
TB = str(SAMPLE)


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Fail the test if a model is resolved or loaded, or a treebank read; returns what was touched."""
    from probes.extraction import extractor, loading
    from probes.runs import inputs

    touched: list[str] = []

    def refuse(what: str):  # type: ignore[no-untyped-def]  # a stand-in taking any arguments
        def call(*args: object, **kwargs: object) -> None:
            touched.append(what)
            raise AssertionError(f"{what} before the options were checked")
        return call

    monkeypatch.setattr(loading, "load_resolved", refuse("model loaded"))
    monkeypatch.setattr(extractor, "load_resolved", refuse("model loaded"))
    monkeypatch.setattr(loading.ResolvedModel, "of", refuse("model resolved"))
    monkeypatch.setattr(inputs, "read_sentences", refuse("treebank read"))
    return touched


#: (command line, the two options named) for every pair that contradicts itself.
PAIRS = [
    (["match", "-m", "a", "-m", "b", "-t", TB, "--within-layers", "--across-layers"],
     ("--within-layers", "--across-layers")),
    (["leaderboard", "--store", "s", "--model", "m"], ("--store", "--model")),
    (["leaderboard", "--model", "m", "--store", "s", "-t", TB], ("--store", "--model")),
    (["leaderboard", "--store", "s", "--treebank", TB], ("--store", "--treebank")),
    (["leaderboard", "--store", "s", "--device", "cpu"], ("--store", "--device")),
    (["leaderboard", "--store", "s", "--dtype", "float16"], ("--store", "--dtype")),
    (["leaderboard", "--store", "s", "--batch-size", "8"], ("--store", "--batch-size")),
    (["leaderboard", "--store", "s", "--select-on", TB], ("--store", "--select-on")),
    (["leaderboard", "--store", "s", "--select-store", "t", "--select-on", "same"], ("--select-store", "--select-on")),
    (["leaderboard", "-m", "m", "-t", TB, "--select-store", "t"], ("--select-store", "--model")),
    (["probe", "-m", "m", "--train", TB, "--store-train", "s", "--eval", TB], ("--store-train", "--train")),
    (["probe", "-m", "m", "--train", TB, "--eval", TB, "--store-eval", "s"], ("--store-eval", "--eval")),
    (["probe", "-m", "m", "--train", TB, "--eval", TB, "--select-on", TB, "--store-select", "s"],
     ("--store-select", "--select-on")),
    (["probe", "-m", "m", "--train", TB, "--eval", TB, "--no-control", "--control-task", "offset"],
     ("--no-control", "--control-task")),
    (["prune", "-m", "m", "-t", TB, "--no-leaderboard", "--leaderboard-at", "0.3"],
     ("--leaderboard-at", "--no-leaderboard")),
]


@pytest.mark.parametrize(("args", "flags"), PAIRS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else None)
def test_contradictory_options_are_a_usage_error(args: list[str], flags: tuple[str, str], nothing_runs: list[str],
                                                 tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([*args, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ") and "cannot be used together" in err, err
    assert all(flag in err for flag in flags), err
    assert nothing_runs == [] and not (tmp_path / "out").exists()


def test_a_contradiction_between_the_config_file_and_the_command_line(
        nothing_runs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "board.toml"
    config.write_text('[leaderboard]\nmodel = "m"\n', encoding="utf-8")
    assert main(["leaderboard", "--config", str(config), "--store", "s"]) == 2
    err = capsys.readouterr().err
    assert "--store and --model cannot be used together" in err and nothing_runs == []


@pytest.mark.parametrize("args", [
    ["match", "-m", "a", "-m", "b", "-t", TB, "--across-layers"],
    ["leaderboard", "--store", "{tmp}/no-store", "--select-on", "same"],  # same-data selection is a store's choice
    ["probe", "--store-train", "{tmp}/no-store", "--store-eval", "{tmp}/no-store", "--no-control"],
    ["prune", "-m", "m", "-t", TB, "--no-leaderboard"],
])
def test_options_that_agree_pass_the_parser(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """They reach the run (which stops at the missing model or store: exit 1), not the parser."""
    monkeypatch.chdir(tmp_path)
    code = main([a.format(tmp=tmp_path) for a in args])
    err = capsys.readouterr().err
    assert code == 1 and "cannot be used together" not in err, err


def test_the_choices_the_cli_repeats_are_the_library_s() -> None:
    from probes.analysis import bridging, coreference, mentions
    from probes.cli import coref, probe
    from probes.probing.controls import CONTROL_KINDS

    assert coref.CANDIDATES == coreference.CANDIDATE_SETS and coref.ANTECEDENTS == coreference.ANTECEDENT_SCOPES
    assert coref.SINGLETONS == coreference.SINGLETONS and coref.SPLIT_ANTECEDENTS == coreference.SPLIT_ANTECEDENTS
    assert coref.DIRECTIONS == tuple(mentions.COREF_DIRECTIONS) and coref.CREDITS == bridging.CREDITS
    assert probe.CONTROL_TASKS == CONTROL_KINDS


@pytest.mark.parametrize(("flag", "value"), [("--candidates", "some"), ("--direction", "backwards"),
                                             ("--singletons", "maybe")])
def test_coref_choices_are_checked_while_parsing(flag: str, value: str, nothing_runs: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["coref", "-m", "m", "-t", TB, flag, value]) == 2
    err = capsys.readouterr().err
    assert flag in err and value in err and nothing_runs == []
