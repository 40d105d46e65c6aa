"""``probes train`` hardened (issue 36, class 5 and the model sizes of class 4; issue 38, point 4).

The same command resumes a run stopped by an error, Ctrl-C or SIGKILL (a killed checkpoint write included) and ends
byte-identical to one that never stopped; ``--overwrite`` starts over; other options, other data or a foreign
``training.json`` are refused naming what differs; a full disk is the one-line write error naming the folder;
half-written temporaries are removed before a run resumes; sizes no machine holds are refused before anything is
read or built.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from probes.cli import main
from probes.errors import ConfigError, WriteError
from probes.training.config import TrainConfig

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SIZE = ["--arch", "bert", "--layers", "1", "--heads", "2", "--hidden", "32", "--tokenizer", "train:200"]
RUN = [*SIZE, "--treebank", "sample:dev", "--steps", "4", "--batch-size", "2", "--seq-len", "16",
       "--attention-dropout", "0.1", "--symmetry-sentences", "0", "--no-progress"]


def _train(out: Path, *extra: str) -> int:
    """``probes train`` in this process; its exit code (the caller reads its output with capfd)."""
    return main(["train", *RUN, *extra, "--out", str(out)])


def _weights(run: Path) -> dict[str, bytes]:
    """Every checkpoint's model.safetensors, by step folder."""
    return {p.parent.name: p.read_bytes() for p in sorted((run / "checkpoints").glob("step-*/model.safetensors"))}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The checkpoints of a run that never stopped."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("reference") / "run"
    assert _train(out) == 0
    return _weights(out)


def _fail_at(monkeypatch: pytest.MonkeyPatch, step: int, error: BaseException) -> None:
    """Raise ``error`` at the end of training step ``step`` (after the checkpoint at step 2 is written)."""
    from probes.training.callbacks import Checkpointer

    before = Checkpointer.on_step_end

    def on_step_end(self: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == step:
            raise error
        before(self, args, state, control, **kwargs)

    monkeypatch.setattr(Checkpointer, "on_step_end", on_step_end)


# ------------------------------------------------------------------------------------------ resume
@pytest.mark.parametrize("error", [RuntimeError("a crash mid-run"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_the_same_command_resumes_after_an_error_or_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd,
                                                          reference: dict[str, bytes], error: BaseException):
    """Before, the claim's marker went with the interrupted process and the same command was refused ("output
    folder is not empty"); only --overwrite resumed. Now the run's own training.json makes the folder its own."""
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        _fail_at(patch, 3, error)
        code = _train(out)
    err = capfd.readouterr().err
    assert code == (130 if isinstance(error, KeyboardInterrupt) else 1), err
    if isinstance(error, KeyboardInterrupt):
        assert "run the same command again to resume" in err
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000000", "step-000001", "step-000002"]
    assert not (out / ".probes-run.json").exists()  # the marker is gone: what refused the rerun before
    assert _train(out) == 0
    captured = capfd.readouterr()
    assert "resumed from step 2" in captured.out, captured.err
    assert _weights(out) == reference  # byte-identical to the run that never stopped
    assert not (out / "resume").exists() and json.loads((out / "run.json").read_text())["command"] == "probes train"


def test_stale_temporaries_are_removed_before_the_run_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capfd, reference: dict[str, bytes]):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        _fail_at(patch, 3, RuntimeError("stop"))
        assert _train(out) == 1
    # what runs killed at the wrong moment leave: a checkpoint being written (today's probes.atomic_io name, and the
    # names of earlier versions), the record and the tokenizer being written, a Trainer state whose
    # trainer_state.json was cut short
    from probes.atomic_io import temporary_path

    stale = [temporary_path(out / "checkpoints" / "step-000004"), out / "checkpoints" / ".step-000004.tmp-4242-0",
             out / "checkpoints" / ".step-000004-k3x_9qzA", temporary_path(out / "tokenizer"),
             out / ".tokenizer.tmp-4242-0", out / "resume" / "checkpoint-3"]
    for folder in stale:
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"half")
    (out / ".training.json.tmp-4242-7").write_text("{", encoding="utf-8")
    record_tmp = temporary_path(out / "training.json")
    record_tmp.write_text("{", encoding="utf-8")
    (out / "resume" / "checkpoint-3" / "trainer_state.json").write_text('{"global_st', encoding="utf-8")
    kept = out / "checkpoints" / "notes-step-000004"  # not a temporary name of the run: left alone
    kept.mkdir()
    capfd.readouterr()
    assert _train(out) == 0
    captured = capfd.readouterr()
    assert "resumed from step 2" in captured.out, captured.err
    assert not any(p.exists() for p in [*stale, out / ".training.json.tmp-4242-7", record_tmp])
    assert kept.is_dir()
    assert _weights(out) == reference


_KILLER = textwrap.dedent("""
    import os, signal, sys
    import torch
    import probes.training.checkpoints as checkpoints
    from probes.cli import main

    save = checkpoints._save

    def killed_while_writing(tmp, model, tokenizer, training):
        if training.step == 4:  # the model is in the temporary folder, the checkpoint not yet in place
            model.save_pretrained(tmp)
            os.kill(os.getpid(), signal.SIGKILL)
        save(tmp, model, tokenizer, training)

    checkpoints._save = killed_while_writing
    torch.set_num_threads(1)
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.subprocess
def test_a_run_killed_while_writing_a_checkpoint_resumes_with_the_same_command(tmp_path: Path, capfd):
    """SIGKILL in the middle of the checkpoint at step 4 of 8 (in `probes train` itself, so its folder lock and
    marker stay behind too): the same command removes the hidden temporary folder, resumes from the Trainer's state
    at step 4, writes the missing checkpoint and ends byte-identical to a run that never stopped."""
    args = ["train", *RUN, "--steps", "8", "--hidden-dropout", "0.1"]
    script = tmp_path / "killer.py"
    script.write_text(_KILLER, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, str(script), *args, "--out", str(out)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    left = sorted((out / "checkpoints").iterdir())
    assert [p.name for p in left if not p.name.startswith(".")] == ["step-000000", "step-000001", "step-000002"]
    hidden = [p for p in left if p.name.startswith(".")]
    assert len(hidden) == 1 and hidden[0].name.startswith(".step-000004.tmp-")  # the killed write's folder
    from probes.atomic_io import parse_temporary

    assert parse_temporary(hidden[0].name).target == "step-000004"
    assert (hidden[0] / "model.safetensors").is_file()
    assert main([*args, "--out", str(out)]) == 0
    captured = capfd.readouterr()
    assert "resumed from step 4" in captured.out, captured.err
    assert not hidden[0].exists()
    assert main([*args, "--out", str(tmp_path / "straight")]) == 0
    assert _weights(out) == _weights(tmp_path / "straight")
    assert list(_weights(out)) == ["step-000000", "step-000001", "step-000002", "step-000004", "step-000008"]


def test_a_finished_run_is_not_trained_again(tmp_path: Path, capfd):
    out = tmp_path / "run"
    assert _train(out) == 0
    stamps = {p: p.stat().st_mtime_ns for p in (out / "checkpoints").rglob("model.safetensors")}
    capfd.readouterr()
    assert _train(out) == 0  # exit 0: nothing to train, the report made again
    assert "training already finished (nothing to train" in capfd.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in (out / "checkpoints").rglob("model.safetensors")} == stamps


# ------------------------------------------------------------------------------------------ refusals
def test_other_options_are_refused_naming_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        _fail_at(patch, 3, RuntimeError("stop"))
        assert _train(out) == 1
    before = _weights(out)
    capfd.readouterr()
    assert _train(out, "--seed", "5") == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out}: holds a training run with other options"), err
    assert "--seed: 0 -> 5" in err[0] and "--overwrite to start over" in err[0]
    assert _weights(out) == before and (out / "resume").is_dir()  # nothing of the run touched


def test_other_data_are_refused_naming_the_file(tmp_path: Path, capfd):
    text = tmp_path / "words.txt"
    text.write_text("\n".join(f"sentence {k} of a few plain words to train on" for k in range(200)), encoding="utf-8")
    out = tmp_path / "run"
    args = [*SIZE, "--treebank", str(text), "--steps", "2", "--batch-size", "2", "--seq-len", "16",
            "--max-minutes", "1e-9", "--symmetry-sentences", "0", "--no-progress", "--out", str(out)]
    assert main(["train", *args]) == 0  # stopped at once by --max-minutes, resumable
    text.write_text(text.read_text(encoding="utf-8") + "\none more line", encoding="utf-8")
    capfd.readouterr()
    assert main(["train", *args]) == 1
    err = capfd.readouterr().err
    assert "the data changed since the run started" in err and str(text) in err and "sha256" in err


def test_a_foreign_training_json_is_refused_and_left_alone_even_with_overwrite(tmp_path: Path, capfd):
    out = tmp_path / "theirs"
    (out / "checkpoints").mkdir(parents=True)
    (out / "training.json").write_text('{"epochs": 3}', encoding="utf-8")
    (out / "checkpoints" / "step-000001").mkdir()
    for extra in ([], ["--overwrite"]):
        assert _train(out, *extra) == 1
        err = capfd.readouterr().err
        assert "training.json that is not the record of a `probes train` run" in err and "internal" not in err
    assert (out / "training.json").read_text(encoding="utf-8") == '{"epochs": 3}'
    assert (out / "checkpoints" / "step-000001").is_dir()


def test_overwrite_starts_over_removing_only_what_the_run_wrote(tmp_path: Path, capfd):
    out = tmp_path / "run"
    first = [*SIZE, "--treebank", "sample:dev", "--steps", "2", "--batch-size", "2", "--seq-len", "64",
             "--symmetry-sentences", "2", "--no-progress", "--out", str(out)]  # sentences fit 64 tokens
    assert main(["train", *first]) == 0
    assert (out / "symmetry").is_dir() and (out / "figures" / "symmetry.png").is_file()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    capfd.readouterr()
    assert _train(out, "--seed", "7", "--overwrite") == 0
    captured = capfd.readouterr()
    assert "training finished: step 4" in captured.out and "resumed" not in captured.out, captured.err
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine"  # not the run's: kept
    assert not (out / "symmetry").exists() and not (out / "figures" / "symmetry.png").exists()  # the old report's
    assert json.loads((out / "training.json").read_text())["config"]["seed"] == 7
    assert _train(tmp_path / "fresh", "--seed", "7") == 0
    assert _weights(out) == _weights(tmp_path / "fresh")


# ------------------------------------------------------------------------------------------ full disk
def _full(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_a_checkpoint_is_one_write_error_then_the_run_resumes(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch, capfd,
                                                                            reference: dict[str, bytes]):
    from transformers import PreTrainedModel

    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(PreTrainedModel, "save_pretrained", _full)
        assert _train(out) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [f"error: {out / 'checkpoints' / 'step-000000'}: cannot write (the disk is full: free space or "
                   "write elsewhere)"], err
    assert list((out / "checkpoints").iterdir()) == []  # no half checkpoint, no temporary folder
    assert _train(out) == 0
    assert _weights(out) == reference


@pytest.mark.parametrize("raised", [
    lambda: __import__("safetensors").SafetensorError("Error while serializing: I/O error: No space left on device "
                                                      "(os error 28)"),
    lambda: RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"),
], ids=["safetensors", "torch.save"])
def test_a_full_disk_in_the_trainers_state_is_one_write_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capfd, raised):
    """What safetensors and torch really raise on a full disk (measured on a 600 KiB tmpfs): not OSErrors, so
    they were internal errors."""
    from transformers import Trainer

    import probes.training.checkpoints as checkpoints

    def full(*args: Any, **kwargs: Any) -> None:
        raise raised()

    out = tmp_path / "run"
    monkeypatch.setattr(Trainer, "_save_optimizer_and_scheduler", full)
    monkeypatch.setattr(checkpoints, "_disk_full", lambda path: True)
    assert _train(out) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [f"error: {out / 'resume'}: cannot write (the disk is full: free space or write elsewhere)"], err


def test_a_full_disk_while_writing_the_report_names_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capfd):
    import probes.reports.tables as tables

    out = tmp_path / "run"
    monkeypatch.setattr(tables, "write_csv", _full)
    assert _train(out) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out}") and "the disk is full" in err[0], err


def test_write_failure_tells_write_errors_from_others(tmp_path: Path):
    from probes.training.checkpoints import write_failure

    error = write_failure(OSError(errno.EROFS, "Read-only file system"), tmp_path)
    assert isinstance(error, WriteError) and "read-only" in str(error) and str(tmp_path) in str(error)
    assert write_failure(RuntimeError("I/O error: Disk quota exceeded (os error 122)"), tmp_path).errno == 122
    assert write_failure(RuntimeError("shapes do not match"), tmp_path) is None  # a bug stays a bug
    assert write_failure(ValueError("bad value"), tmp_path) is None


# ------------------------------------------------------------------------------------------ sizes
@pytest.mark.parametrize(("flag", "value", "most"), [("--hidden", "1000000000", 65536), ("--layers", "100000000", 1024),
                                                     ("--heads", "5000", 1024), ("--seq-len", "10000000", 65536),
                                                     ("--batch-size", "10000000", 65536),
                                                     ("--intermediate", "1000000000", 262144)])
def test_sizes_out_of_range_are_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd, flag: str,
                                             value: str, most: int):
    import probes.training.data as data

    monkeypatch.setattr(data, "read_corpus", lambda *a, **k: pytest.fail("the data were read"))
    assert main(["train", *SIZE, "--treebank", "sample:dev", flag, value, "--out", str(tmp_path / "out")]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and str(most) in err[0], err  # the bound, in click's words
    assert not (tmp_path / "out").exists()


def test_a_model_the_machine_cannot_hold_is_refused_before_anything_is_built(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch, capfd):
    import probes.training.data as data
    import probes.training.models as models

    monkeypatch.setattr(data, "read_corpus", lambda *a, **k: pytest.fail("the data were read"))
    monkeypatch.setattr(models, "build_model", lambda *a, **k: pytest.fail("the model was built"))
    size = ["--arch", "bert", "--layers", "1024", "--heads", "16", "--hidden", "65536", "--treebank", "sample:dev"]
    assert main(["train", *size, "--out", str(tmp_path / "out")]) == 1
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal" not in err[0], err
    assert "--layers 1024" in err[0] and "--hidden 65536" in err[0] and " parameters and needs about " in err[0]
    assert "GiB to train" in err[0] and ", found " in err[0]
    assert not (tmp_path / "out").exists()  # refused before the folder was claimed
    config = TrainConfig(arch="gpt2", layers=1024, heads=16, hidden=65536, treebank=("sample:dev",))
    from probes.runs.train import train_model
    from probes.training.trainer import train

    for call in (train_model, train):  # the library (and an experiment's [train] units) refuse it the same way
        with pytest.raises(ConfigError, match="parameters and needs about"):
            call(config, tmp_path / "lib", progress=False)
    assert not (tmp_path / "lib").exists()


def test_the_memory_check_compares_the_estimate_with_what_is_available():
    from probes.training.memory import check_memory, estimate_memory

    config = TrainConfig(arch="bert", layers=2, heads=2, hidden=64, treebank=("sample:dev",), tokenizer="train:200",
                         batch_size=4, seq_len=32)
    need = estimate_memory(config)
    assert need.state == 16 * need.parameters and need.activations > 0
    assert check_memory(config, available={"host": (need.total, "test")}) == need
    with pytest.raises(ConfigError, match=r"found 0\.0 GiB \(test\)"):
        check_memory(config, available={"host": (need.total - 1, "test")})
    # on a GPU the device holds the training, the host the weights built first
    check_memory(config, available={"device": (need.total, "gpu"), "host": (need.weights, "host")})
    with pytest.raises(ConfigError, match="of host memory to build its weights"):
        check_memory(config, available={"device": (need.total, "gpu"), "host": (need.weights - 1, "host")})
    check_memory(config, available={})  # nothing known: nothing refused


@pytest.mark.parametrize(("arch", "extra"), [("bert", {}), ("gpt2", {"intermediate": 48}),
                                             ("llama", {"kv_heads": 2})])
def test_the_parameter_count_is_what_transformers_builds(arch: str, extra: dict[str, int]):
    from probes.training.memory import count_parameters
    from probes.training.models import build_model
    from probes.training.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["a few words to train on"] * 4, arch, 200 if arch == "bert" else 300, 16)
    config = TrainConfig(arch=arch, layers=2, heads=4, hidden=32, treebank=("sample:dev",), seq_len=16, **extra)
    assert count_parameters(config, len(tokenizer)) == build_model(config, tokenizer).num_parameters()


def test_symmetry_sentences_load_the_tokenizer_without_remote_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import transformers

    import probes.runs.train as train_run

    seen: dict[str, Any] = {}

    def from_pretrained(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", from_pretrained)
    config = TrainConfig(arch="bert", layers=1, heads=2, hidden=32, treebank=("sample:dev",), tokenizer="train:200")
    with pytest.raises(RuntimeError, match="stop here"):
        train_run._symmetry_texts(config, tmp_path, 2)
    assert seen["trust_remote_code"] is False


def test_a_text_file_that_is_a_device_or_not_utf8_is_one_input_error(tmp_path: Path) -> None:
    """Plain-text training data is read as a bounded regular file: /dev/zero is refused before a byte is read
    (it would otherwise grow without end), and a latin-1 byte is a FormatError naming the line."""
    from probes.errors import FormatError, InputError
    from probes.training.data import read_texts

    link = tmp_path / "zero.txt"
    link.symlink_to("/dev/zero")
    with pytest.raises(InputError, match="character device") as info:
        read_texts(str(link))
    assert str(link) in str(info.value)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"one line\ncaf\xe9 au lait\n")
    with pytest.raises(FormatError, match="not UTF-8") as bad:
        read_texts(str(latin))
    assert bad.value.line == 2
