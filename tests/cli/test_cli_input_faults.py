"""Crafted input on the command line, in-process: each is one line on stderr naming the file or the option, exit 1
for bad input and 2 for a usage error, and never "internal error" or a traceback.

The inputs: an experiment or option file that is ``/dev/zero``, a named pipe, a folder, nested thousands deep or
latin-1; ``n_resamples`` of 10^9; numeric options out of their bounds; a NUL or a control character in ``--out``
or any other path option (before, ``ValueError: embedded null byte`` as an internal error); ``probes data add``
given ``/dev/zero``, a pipe, a folder or a huge file; a broken registry or ``checksums.json``; an output folder
whose ``run.json`` is a pipe or lists files outside the folder.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from probes.cli import main
from tests.guards import watchdog

SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample" / "sample-test.conllu"
HUGE = "100000000000000000000000"

GOOD = """\
[experiment]
out = "runs/t"
n_resamples = 200

[models]
base = "some/folder"

[data.sample]
treebank = "sample:test"

[analyses.leaderboard]
"""

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need a POSIX system")
needs_dev_zero = pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero on this system")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command runs in a scratch folder with a scratch cache: nothing lands in the checkout."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PROBES_CACHE", str(tmp_path / "cache"))


def no_hang(seconds: int = 20) -> contextlib.AbstractContextManager[None]:
    """Fail (instead of hanging the suite) if the command blocks on a pipe: a guard, not a timing check."""
    return watchdog(seconds, lambda: AssertionError("blocked reading a named pipe"))


def one_error(args: list[str], capsys: pytest.CaptureFixture[str], code: int, *names: str) -> str:
    """Run ``probes ARGS``: it exits ``code`` with exactly one error line naming each of ``names``; that line."""
    with no_hang():
        got = main(args)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert got == code, err
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert "internal error" not in err[0] and "Traceback" not in err[0], err
    for name in names:
        assert name in err[0], (name, err)
    return err[0]


# ------------------------------------------------------------------------------------ experiment files
@needs_dev_zero
def test_run_dev_zero(capsys: pytest.CaptureFixture[str]) -> None:
    one_error(["run", "/dev/zero", "--no-progress"], capsys, 1, "/dev/zero", "character device")


@needs_fifo
def test_run_a_named_pipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "exp.toml")
    one_error(["run", "exp.toml", "--no-progress"], capsys, 1, "exp.toml", "named pipe")


def test_run_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.toml").mkdir()
    one_error(["run", "exp.toml", "--no-progress"], capsys, 1, "exp.toml", "a folder")


@pytest.mark.parametrize(("text", "found"), [
    ("a = " + "[" * 5000 + "]" * 5000 + "\n", "nested at most 64 deep"),
    (GOOD.replace("n_resamples = 200", "n_resamples = 1000000000"),
     "experiment.n_resamples: expected a whole number from 1 to 100000, found 1000000000"),
    (GOOD.replace('out = "runs/t"', 'out = "runs/a\\u0000b"'), "exp.toml:2: experiment.out"),
])
def test_run_bad_experiment_files(text: str, found: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.toml").write_text(text, encoding="utf-8")
    one_error(["run", "exp.toml", "--no-progress"], capsys, 1, "exp.toml", found)
    assert not (tmp_path / "runs").exists()


def test_run_a_latin1_file_names_the_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.toml").write_bytes(GOOD.replace("[models]", "# café\n[models]").encode("latin-1"))
    one_error(["run", "exp.toml", "--no-progress"], capsys, 1, "exp.toml:5:", "byte 0xe9")


@pytest.mark.parametrize("command", ["leaderboard", "atlas"])
def test_config_files_go_through_the_same_reader(command: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.toml").write_bytes(f'[{command}]\nmodel = "m"\ntreebank = "caf\xe9"\n'.encode("latin-1"))
    one_error([command, "--config", "c.toml"], capsys, 1, "c.toml:3:", "not UTF-8")


def test_a_nul_from_a_config_file_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.toml").write_text(f'model = "m"\ntreebank = "{SAMPLE}"\nout = "a\\u0000b"\n', encoding="utf-8")
    one_error(["leaderboard", "--config", "c.toml"], capsys, 1, "c.toml:3: out:", "NUL character")
    assert [p.name for p in tmp_path.iterdir()] == ["c.toml"]


# ------------------------------------------------------------------------------------ path options
@pytest.mark.parametrize("args", [
    ["leaderboard", "--model", "m", "--treebank", str(SAMPLE), "--out", "a\x00b"],
    ["atlas", "--model", "m", "--treebank", str(SAMPLE), "--out", "a\x00b"],
    ["coref", "--model", "m", "--treebank", str(SAMPLE), "--out", "a\x00b"],
    ["importance", "--model", "m", "--treebank", str(SAMPLE), "--out", "a\x00b"],
    ["match", "--model", "a", "--model", "b", "--treebank", str(SAMPLE), "--out", "a\x00b"],
    ["probe", "--model", "m", "--train", str(SAMPLE), "--eval", str(SAMPLE), "--out", "a\x00b"],
    ["run", "exp.toml", "--out", "a\x00b"],
    ["report", "runs/x", "--out", "a\x00b"],
    ["demo", "--out", "a\x00b"],
])
def test_a_nul_in_out_is_one_usage_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error(args, capsys, 2, "'--out'", "expected a folder path, found a NUL character")
    assert "\x00" not in line  # shown escaped, never written raw to the terminal


@pytest.mark.parametrize(("args", "name"), [
    (["leaderboard", "--model", "m\x00", "--treebank", str(SAMPLE)], "'--model'"),
    (["leaderboard", "--model", "m", "--treebank", "a\x00.conllu"], "'--treebank'"),
    (["leaderboard", "--model", "m", "--treebank", str(SAMPLE), "--select-on", "\x00"], "'--select-on'"),
    (["leaderboard", "--store", "s\x00"], "'--store'"),
    (["leaderboard", "--model", "m", "--treebank", str(SAMPLE), "--config", "c\x00.toml"], "'--config'"),
    (["leaderboard", "--model", "m", "--treebank", str(SAMPLE), "--device", "cpu\x00"], "'--device'"),
    (["leaderboard", "--model", "m", "--treebank", str(SAMPLE), "--out", "runs/\x1b[2Jx"], "U+001B"),
    (["extract", "--model", "m", "--treebank", str(SAMPLE), "--store", "s\x00"], "'--store'"),
    (["probe", "--train", "t\x00"], "'--train'"),
    (["probe", "--store-train", "s\x00"], "'--store-train'"),
    (["probe", "--vectors", "v\x00"], "'--vectors'"),
    (["atlas", "--model", "m", "--treebank", str(SAMPLE), "--counts", "c\x00"], "'--counts'"),
    (["atlas", "--model", "m", "--treebank", str(SAMPLE), "--corpus", "c\x00"], "'--corpus'"),
    (["match", "--model", "a", "--model", "b", "--treebank", str(SAMPLE), "--null-model", "n\x00"], "'--null-model'"),
    (["run", "exp\x00.toml"], "'EXPERIMENT.toml'"),
    (["report", "runs\x00"], "'RUN_DIR'"),
    (["verify", "store\x00"], "store"),
    (["data", "add", "ud:en_ewt:dev", "a\x00"], "'PATH'"),
])
def test_a_nul_or_control_character_in_any_path_option(args: list[str], name: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    one_error(args, capsys, 2, name, "found a")


# ------------------------------------------------------------------------------------ numeric options
@pytest.mark.parametrize(("command", "flag", "value"), [
    ("coref", "--n-resamples", "100001"), ("bridging", "--n-resamples", "100001"),
    ("importance", "--n-resamples", "100001"), ("match", "--n-resamples", "100001"),
    ("coref", "--window", "0"), ("coref", "--window", HUGE), ("bridging", "--stride", HUGE),
    ("prune", "--seeds", "1001"), ("probe", "--seeds", "1001"), ("probe", "--seed", "-1"),
    ("probe", "--seed", "4294967296"), ("atlas", "--head-type-sequences", "10001"),
    ("leaderboard", "--batch-size", "65537"), ("leaderboard", "--max-attention-mb", "inf"),
    ("leaderboard", "--max-batch-tokens", "16777217"), ("extract", "--max-length", HUGE),
])
def test_numeric_options_out_of_bounds_are_usage_errors(command: str, flag: str, value: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    if command == "match":
        args = ["match", "--model", "a", "--model", "b", "--treebank", str(SAMPLE)]
    elif command == "probe":
        args = ["probe", "--model", "m", "--train", str(SAMPLE), "--eval", str(SAMPLE)]
    elif command == "extract":
        args = ["extract", "--model", "m", "--treebank", str(SAMPLE), "--store", "s"]
    else:
        args = [command, "--model", "m", "--treebank", str(SAMPLE)]
    one_error([*args, flag, value], capsys, 2, flag)


def test_the_cli_bounds_are_the_schema_bounds() -> None:
    """The command line's --n-resamples and the experiment file's n_resamples share one bound."""
    import typer

    from probes.cli import app
    from probes.runs.option_rules import MAX_RESAMPLES, N_RESAMPLES

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for name in ("coref", "bridging", "importance", "match"):
        param = next(p for p in commands[name].params if p.name == "n_resamples")
        assert (param.min, param.max) == (N_RESAMPLES.least, N_RESAMPLES.most) == (1, MAX_RESAMPLES), name


# ------------------------------------------------------------------------------------ probes data add
@needs_dev_zero
def test_data_add_dev_zero(capsys: pytest.CaptureFixture[str]) -> None:
    one_error(["data", "add", "ud:en_ewt:dev", "/dev/zero"], capsys, 1, "/dev/zero", "character device")


@needs_fifo
def test_data_add_a_named_pipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "dev.conllu")
    one_error(["data", "add", "ud:en_ewt:dev", "dev.conllu"], capsys, 1, "dev.conllu", "named pipe")


@needs_fifo
def test_data_add_a_folder_holding_a_pipe_by_the_registry_name(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "UD").mkdir()
    os.mkfifo(tmp_path / "UD" / "en_ewt-ud-dev.conllu")
    one_error(["data", "add", "ud:en_ewt:dev", "UD"], capsys, 1, "en_ewt-ud-dev.conllu", "named pipe")


def test_data_add_a_folder_without_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "UD").mkdir()
    one_error(["data", "add", "ud:en_ewt:dev", "UD"], capsys, 1, "UD", "holds none of the files")


def test_data_add_a_file_over_the_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused from its size alone, before it is hashed (the bound made small so the test writes little)."""
    import probes.corpora.registry as registry

    def never(path: object) -> str:
        raise AssertionError("a file over the bound was hashed")

    monkeypatch.setattr(registry, "MAX_TREEBANK_BYTES", 1000)
    monkeypatch.setattr(registry, "file_sha256", never)
    (tmp_path / "dev.conllu").write_bytes(b"#" * 1001)
    one_error(["data", "add", "ud:en_ewt:dev", "dev.conllu"], capsys, 1, "dev.conllu", "at most 1,000 bytes")


@pytest.mark.parametrize("content", ["[", "[1, 2]", '{"url": 5}', "[" * 10000])
def test_data_add_with_a_broken_checksums_file(content: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """``en_pud:test`` pins no sha256, so its cache's recorded hashes are read: a broken file is named."""
    folder = tmp_path / "cache" / "en_pud"
    folder.mkdir(parents=True)
    (folder / "checksums.json").write_text(content, encoding="utf-8")
    (tmp_path / "test.conllu").write_text(SAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    one_error(["data", "add", "ud:en_pud:test", "test.conllu"], capsys, 1, "checksums.json", "start afresh")


@pytest.mark.parametrize(("content", "found"), [
    ('{"treebanks": [1]}', 'expected a JSON object with a "treebanks" object'),
    ('{"treebanks": {"tb": {"files": {"dev": {"url": 3}}}}}', "treebanks.tb.files.dev: expected an object"),
    ('{"treebanks": ' * 3000, "nested at most"),
    ("", "invalid JSON"),
])
def test_a_broken_registry_is_one_line(content: str, found: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import probes.corpora.registry as registry

    (tmp_path / "registry.json").write_text(content, encoding="utf-8")
    monkeypatch.setattr(registry, "REGISTRY_PATH", tmp_path / "registry.json")
    one_error(["data", "list"], capsys, 1, "registry.json", found)


# ------------------------------------------------------------------------------------ the output folder
@needs_fifo
def test_an_output_folder_whose_run_json_is_a_pipe_is_refused_at_once(tmp_path: Path) -> None:
    from probes.errors import ConfigError
    from probes.reports.outdir import check_out_dir

    (tmp_path / "out").mkdir()
    os.mkfifo(tmp_path / "out" / "run.json")
    with no_hang(), pytest.raises(ConfigError, match="output folder is not empty"):
        check_out_dir(tmp_path / "out", "probes leaderboard")


def test_a_previous_record_never_removes_files_outside_its_folder(tmp_path: Path) -> None:
    """``files`` of a previous run.json of the same command: only regular files inside the folder go."""
    from probes.reports.outdir import prepare_out_dir, release_out_dir

    out, victim = tmp_path / "out", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("keep me", encoding="utf-8")
    (out / "old.csv").write_text("old", encoding="utf-8")
    (out / "link").symlink_to(victim)
    listed = ["old.csv", "../victim.txt", str(victim), "link", "a\x00b", 7, None]
    (out / "run.json").write_text(json.dumps({"command": "probes leaderboard", "files": listed}), encoding="utf-8")
    prepare_out_dir(out, "probes leaderboard")
    release_out_dir(out)
    assert victim.read_text(encoding="utf-8") == "keep me"
    assert not (out / "old.csv").exists() and (out / "link").is_symlink()


@pytest.mark.parametrize("files", ["old.csv", {"old.csv": 1}, 5])
def test_a_previous_record_whose_files_is_not_a_list_removes_nothing(files: object, tmp_path: Path) -> None:
    from probes.reports.outdir import out_dir_content, prepare_out_dir, release_out_dir

    out = tmp_path / "out"
    out.mkdir()
    for name in ("o", "l", "d", "old.csv"):
        (out / name).write_text("x", encoding="utf-8")
    (out / "run.json").write_text(json.dumps({"command": "probes leaderboard", "files": files}), encoding="utf-8")
    prepare_out_dir(out, "probes leaderboard")
    release_out_dir(out)
    assert sorted(p.name for p in out_dir_content(out)) == ["d", "l", "o", "old.csv", "run.json"]
