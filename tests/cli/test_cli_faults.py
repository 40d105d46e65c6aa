"""Faults and bad input on the command line (issue 11): Ctrl-C, usage errors, options checked before the
model loads, hub names offline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probes.cli import main
from probes.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "probes" / "corpora" / "sample"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny random BERT and a corpus big enough to keep it busy for seconds (the sample dev split x 40)."""
    from tests.tiny_models import build

    root = tmp_path_factory.mktemp("faults")
    blocks = (SAMPLE / "sample-dev.conllu").read_text(encoding="utf-8").strip().split("\n\n")
    big = [b.replace("# sent_id = ", f"# sent_id = r{i}-") for i in range(40) for b in blocks]
    corpus = root / "big.conllu"
    corpus.write_text("\n\n".join(big) + "\n\n", encoding="utf-8")
    return build("bert", root), corpus


def _interrupt(args: list[str], cwd: Path) -> tuple[int, str]:
    """Start ``python -m probes ARGS``, send SIGINT once its progress bar counts sentences (its plain first line,
    ``LABEL: 0/N sentences``: stderr is a pipe); (exit code, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    # Ctrl-C's default disposition in the child, as in a terminal: a test run launched in the background
    # without job control (`cmd &` in a script) ignores SIGINT, and an ignored signal stays ignored across exec.
    proc = subprocess.Popen([sys.executable, "-m", "probes", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    seen, deadline = b"", time.monotonic() + 120
    while b" sentences\n" not in seen and proc.poll() is None and time.monotonic() < deadline:  # a bar started
        seen += proc.stderr.read() or b""
        time.sleep(0.05)
    assert proc.poll() is None, f"finished before it could be interrupted: {seen.decode(errors='replace')}"
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    return proc.returncode, (seen + rest).decode(errors="replace")


def _last_line(stderr: str) -> str:
    lines = [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _check_interrupted(code: int, stderr: str, message: str) -> None:
    assert code == 130, stderr[-2000:]
    assert "terminate called" not in stderr and "Traceback" not in stderr and "Aborted" not in stderr
    assert _last_line(stderr) == message
    assert stderr.count("interrupted") == 1


# ------------------------------------------------------------------------------------ item 1: Ctrl-C
# One real interrupted process per kind of command: the leaderboard (the model in a worker thread), extract (a
# store to resume) and the demo (the real model).
@pytest.mark.slow
@pytest.mark.subprocess
def test_sigint_during_leaderboard_exits_130_with_one_line(tiny, tmp_path: Path) -> None:
    """The model runs in a worker thread; Ctrl-C used to abort the interpreter (134, "terminate called")."""
    model, corpus = tiny
    out = tmp_path / "out"
    code, stderr = _interrupt(["leaderboard", "-m", str(model), "-t", str(corpus), "--device", "cpu",
                               "--batch-size", "4", "--out", str(out), "--no-figures"], tmp_path)
    _check_interrupted(code, stderr, "error: interrupted")
    assert not (out / "run.json").exists()  # nothing that looks like a finished output


@pytest.mark.slow
@pytest.mark.subprocess
def test_sigint_during_extract_says_how_to_resume(tiny, tmp_path: Path) -> None:
    from probes.errors import StoreError
    from probes.extraction.store import open_store

    model, corpus = tiny
    store = tmp_path / "store"
    args = ["extract", "-m", str(model), "-t", str(corpus), "--store", str(store), "--device", "cpu",
            "--shard-size", "64"]
    code, stderr = _interrupt([*args, "--batch-size", "4"], tmp_path)
    _check_interrupted(code, stderr, "error: interrupted; run the same command again to resume "
                                     "(finished shards are kept)")
    with pytest.raises(StoreError, match="incomplete"):
        open_store(store)
    assert main([*args, "--no-progress"]) == 0  # the resumed run finishes the store
    assert len(open_store(store)) == 40 * 82


@pytest.mark.slow
@pytest.mark.subprocess
def test_sigint_during_demo(tmp_path: Path, minilm_path: Path) -> None:
    code, stderr = _interrupt(["demo", "--out", str(tmp_path / "demo"), "--progress"], tmp_path)
    _check_interrupted(code, stderr, "error: interrupted")
    assert not (tmp_path / "demo" / "run.json").exists()


# ------------------------------------------------------------------------------------ item 8: usage errors, --debug
@pytest.mark.parametrize("args, expected", [
    (["leaderboard", "--no-such-flag"], "error: No such option: --no-such-flag"),
    (["leaderboard", "--batch-size", "0", "-m", "x", "-t", "y"], "error: Invalid value for '--batch-size'"),
    (["extract", "--treebank", "sample:dev"], "error: Missing option '--model'"),
    (["no-such-command"], "error: No such command 'no-such-command'"),
])
def test_usage_errors_are_one_line_and_exit_2(args: list[str], expected: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(expected), err
    assert "--help" in err and "Usage:" not in err and "╭" not in err


def test_debug_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`probes leaderboard --debug ...` works as `probes --debug leaderboard ...`: a traceback, not one line."""
    args = ["--model", str(tmp_path / "missing"), "--treebank", "sample:dev", "--out", str(tmp_path / "o"),
            "--no-progress"]  # no stage lines ("reading treebank ...") before the error line
    assert main(["leaderboard", *args]) == 1
    assert capsys.readouterr().err.startswith("error: model")
    for argv in (["--debug", "leaderboard", *args], ["leaderboard", *args, "--debug"]):
        with pytest.raises(ConfigError, match="expected a model folder"):
            main(argv)


# ------------------------------------------------------------------------------------ item 4: options first
@pytest.fixture
def no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a model is loaded."""
    from probes.extraction import extractor, loading

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(loading, "load_resolved", fail)
    monkeypatch.setattr(extractor, "load_resolved", fail)


@pytest.mark.parametrize("args, message", [
    (["extract", "--store", "{tmp}/s", "--dtype", "float64"], "expected one of float32, float16, bfloat16"),
    (["extract", "--store", "{tmp}/s", "--from-pool", "median"], "from"),
    (["extract", "--store", "{tmp}/s", "--device", "gpu"], "device"),
    (["extract", "--store", "{tmp}/s", "--device", "cuda:99"], "cuda:99"),
    (["leaderboard", "--device", "cuda:99"], "cuda:99"),
    (["leaderboard", "--on-long", "drop"], "on-long"),
    (["leaderboard", "--limit", "0"], "limit"),
    (["probe", "--eval", "sample:test", "--device", "cuda:99"], "cuda:99"),
])
def test_bad_options_fail_before_the_model_loads(no_loading: None, tiny, tmp_path: Path, args: list[str],
                                                 message: str, capsys: pytest.CaptureFixture[str]) -> None:
    model, _ = tiny
    data = ["--train", "sample:dev"] if args[0] == "probe" else ["--treebank", "sample:dev"]
    code = main([args[0], "--model", str(model), *data, *[a.format(tmp=tmp_path) for a in args[1:]]])
    err = capsys.readouterr().err
    assert code in (1, 2) and err.startswith("error:") and err.count("\n") == 1, err
    assert message in err and "internal error" not in err


@pytest.mark.parametrize("command", ["coref", "bridging"])
def test_n_resamples_checked_before_the_model_loads(no_loading: None, command: str) -> None:
    from probes.runs import coreference as runs

    with pytest.raises(ConfigError, match="n_resamples must be a whole number >= 1"):
        getattr(runs, "coreference" if command == "coref" else "bridging")(
            "bert-base-uncased", SAMPLE / "sample-dev.conllu", n_resamples=0)


@pytest.mark.parametrize("options, message", [
    ({"dtype": "float64"}, "dtype must be one of"), ({"on_long": "drop"}, "on_long must be one of"),
    ({"from_pool": "median"}, "from_pool must be one of"), ({"batch_size": 0}, "batch_size must be"),
    ({"max_length": 1}, "max_length must be"), ({"device": "cuda:99"}, "cuda:99"), ({"device": "gpu"}, "device"),
])
def test_extractor_checks_options_before_loading(no_loading: None, options: dict, message: str) -> None:
    """Python callers get the same checks: AttentionExtractor.from_pretrained and the run functions."""
    from probes.extraction.extractor import AttentionExtractor
    from probes.runs.leaderboard import leaderboard

    with pytest.raises(ConfigError, match=message):
        AttentionExtractor.from_pretrained("no-such/model", **options)
    if set(options) & {"on_long", "batch_size", "device"}:  # the extractor options leaderboard() takes
        with pytest.raises(ConfigError, match=message):
            leaderboard("no-such/model", "sample:dev", **options)


# ------------------------------------------------------------------------------------ item 5: hub names offline
def test_hub_name_not_cached_fails_fast_with_advice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub name that is not in the (empty) cache, with the hub out of reach, fails at the reachability check,
    saying how to use a local model: the hub client (and its retries, 49 s before) is never asked.

    Checked by what is called, not by the clock, so it holds on a loaded machine.
    """
    from probes.extraction import loading

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    real_load, loads, probes_of_hub = loading._load, [], []

    def load(name: str, kwargs: dict, *args: object) -> object:
        loads.append(dict(kwargs))
        assert kwargs.get("local_files_only") is True, "the hub was asked for the model (retries follow)"
        return real_load(name, kwargs, *args)

    def unreachable(url: str, timeout: float = loading._CONNECT_TIMEOUT_S) -> bool:
        probes_of_hub.append((url, timeout))
        return False

    monkeypatch.setattr(loading, "_load", load)
    monkeypatch.setattr(loading, "_reachable", unreachable)
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache.*local model folder.*package:NAME"):
        loading.load_pretrained("probes-test/no-such-model-anywhere", progress=False)
    assert len(loads) == 1 and len(probes_of_hub) == 1  # the cache once, the hub's host once, nothing more
    assert probes_of_hub[0][1] <= 10  # the one network probe is bounded by a short connect timeout


@pytest.mark.slow
@pytest.mark.subprocess
def test_cli_hub_name_offline_in_a_subprocess(tmp_path: Path) -> None:
    """The whole CLI, hub out of reach: exit 1 with the fast check's advice (not the hub client's error after its
    retries). The subprocess timeout only guards against a hang; the time taken is not asserted."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
           "HF_ENDPOINT": "http://127.0.0.1:9",  # the discard port: refused at once, a machine with no hub
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-m", "probes", "leaderboard", "-m", "probes-test/no-such-model-anywhere",
                           "-t", "sample:dev", "--out", str(tmp_path / "o")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "not in the local Hugging Face cache" in proc.stderr  # stopped at the check, before any download
    assert "package:NAME" in proc.stderr and "local model folder" in proc.stderr
