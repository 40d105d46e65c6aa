"""Distributed runs: ``torchrun --nproc-per-node 2 ...`` (gloo, CPU) gives one process' results.

The two-process runs are real ``torchrun`` launches of the command line on a tiny random BERT
(tests/tiny_models.py), compared file by file with the same command run in this process. Starting the
launcher and its two ranks costs more than these commands on a tiny model, so one launch runs them all
(``leaderboard``, ``coref``, ``atlas``, ``extract``, through tests/runs/torchrun_commands.py, one after
another, each joining and leaving the process group as a launch of that command alone does) and every
test here reads its own command's output from it. Stores are sharded by index; that path runs here on
ranks simulated by threads (tests/test_world.py).
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import probes.corpora
from probes.atomic_io import is_temporary
from probes.cli import main
from probes.results import equal
from probes.world import World
from tests.analysis.test_analysis_contract import canonical
from tests.runs.torchrun_commands import MARKER
from tests.test_world import run_ranks

# one worker runs this module, so the launch and the tiny model are made once
pytestmark = pytest.mark.xdist_group("torchrun")

REPO = Path(__file__).resolve().parents[2]
SAMPLE = Path(probes.corpora.__file__).resolve().parent / "sample"
COREF = REPO / "tests" / "fixtures" / "coref" / "tiny_gum_halves.conllu"  # 3 documents: 1 and 2 per rank
COMMANDS = REPO / "tests" / "runs" / "torchrun_commands.py"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("tiny"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun(target: list[str], cwd: Path, n: int = 2) -> subprocess.CompletedProcess[str]:
    """``python -m torch.distributed.run --nproc-per-node n TARGET`` on a free port (generous timeout);
    ``TARGET`` is ``["-m", "probes", ARGS...]`` or a script and its arguments."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PROBES_DIST_TIMEOUT_MIN": "5"}
    env.pop("WORLD_SIZE", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n), "--master-addr",
               "127.0.0.1", "--master-port", str(free_port()), *target]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def args_of(model: Path) -> dict[str, list[str]]:
    """Each command's arguments but its output folder, as the launch and the one-process runs give them."""
    return {
        "leaderboard": ["leaderboard", "-m", str(model), "-t", "sample:dev", "--min-count", "5", "--no-progress"],
        "coref": ["coref", "-m", str(model), "-t", str(COREF), "--no-progress", "--n-resamples", "50"],
        "atlas": ["atlas", "-m", str(model), "-t", "sample:dev", "--js-sentences", "8", "--clusters", "2",
                  "--grad-sentences", "0", "--no-progress"],
        "extract": ["extract", "-m", str(model), "-t", str(SAMPLE / "sample-dev.conllu"), "--shard-size", "20",
                    "--no-progress"],
        "train": TRAIN,
    }


#: A tiny masked-LM trained by ``probes train`` (no model to load: the launch trains one).
TRAIN = ["train", "--arch", "bert", "--layers", "1", "--heads", "2", "--hidden", "32", "--steps", "6",
         "--batch-size", "4", "--seq-len", "32", "--tokenizer", "train:200", "--treebank", "sample:dev",
         "--symmetry-sentences", "4", "--no-progress"]


def out_flag(command: str, folder: Path) -> list[str]:
    return ["--store" if command == "extract" else "--out", str(folder)]


@dataclass(frozen=True)
class Launch:
    """The one ``torchrun`` launch: its output folders (one per command) and what rank 0 printed for each."""

    root: Path
    stdout: dict[str, str]

    def folder(self, command: str) -> Path:
        return self.root / command


@pytest.fixture(scope="module")
def launch(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> Launch:
    """Every command of :func:`args_of` run by two ranks of one ``torchrun`` launch."""
    root = tmp_path_factory.mktemp("two")
    commands = [[*args, *out_flag(name, root / name)] for name, args in args_of(tiny_bert).items()]
    done = torchrun([str(COMMANDS), json.dumps(commands)], root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    parts = done.stdout.split(MARKER)[1:]
    stdout = {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts}
    assert list(stdout) == list(args_of(tiny_bert)), list(stdout)
    return Launch(root, stdout)


@pytest.mark.subprocess
def test_torchrun_leaderboard_equals_one_process(launch: Launch, tiny_bert: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*args_of(tiny_bert)["leaderboard"], "--out", str(tmp_path / "one")]) == 0
    printed = capsys.readouterr().out
    a, b = launch.folder("leaderboard"), tmp_path / "one"
    assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())
    for name in ("leaderboard.csv", "scores.csv", "leaderboard.md"):  # every head's scores, rows and intervals
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert json.loads((a / "leaderboard.json").read_text())["rows"] == json.loads((b / "leaderboard.json").read_text())["rows"]
    two = launch.stdout["leaderboard"]
    assert two.count("Report:") == 1  # rank 0 alone prints ...
    assert two.split("Time:")[0] == printed.split("Time:")[0]  # ... the same table and notes
    run_a, run_b = (json.loads((d / "run.json").read_text()) for d in (a, b))
    for key in ("counts", "inputs", "halves", "selection", "significance", "extraction_report", "data"):
        assert run_a[key] == run_b[key], key
    world = run_a["world"]
    assert world["world_size"] == 2 and world["backend"] == "gloo"
    n = run_b["data"]["report"]["sentences"]
    blocks = [r["inputs"]["report"] for r in world["ranks"]]
    assert [r["rank"] for r in world["ranks"]] == [0, 1]
    assert blocks[0]["range"] == [0, n // 2] and blocks[1]["range"] == [n // 2, n]
    assert blocks[0]["count"] + blocks[1]["count"] == n and blocks[0]["first"] == "sample-001"
    assert run_b["world"]["world_size"] == 1 and run_b["world"]["ranks"][0]["inputs"]["report"]["range"] == [0, n]


@pytest.mark.subprocess
def test_torchrun_coref_equals_one_process(launch: Launch, tiny_bert: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*args_of(tiny_bert)["coref"], "--out", str(tmp_path / "one")]) == 0
    capsys.readouterr()
    a, b = launch.folder("coref"), tmp_path / "one"
    for name in ("scores.csv", "coref_leaderboard.csv", "coref_leaderboard.md"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert read_csv(a / "scores.csv") and launch.stdout["coref"].count("Report:") == 1
    assert json.loads((a / "coref_leaderboard.json").read_text())["rows"] == \
        json.loads((b / "coref_leaderboard.json").read_text())["rows"]
    run_a, run_b = (json.loads((d / "run.json").read_text()) for d in (a, b))
    for key in ("counts", "inputs", "selection", "significance", "extraction_report"):
        assert run_a[key] == run_b[key], key
    assert {k: v for k, v in run_a["data"].items() if k != "seconds"} == \
        {k: v for k, v in run_b["data"].items() if k != "seconds"}
    ranks = run_a["world"]["ranks"]  # whole documents: 1 to rank 0, 2 to rank 1
    assert [r["inputs"]["report"] for r in ranks] == [
        {"range": [0, 1], "count": 1, "first": "tiny_story", "last": "tiny_story"},
        {"range": [1, 3], "count": 2, "first": "tiny_note", "last": "tiny_extra"}]


#: heads.csv columns holding sums of float32 attention values (means, entropies, distances, the MDS layout):
#: added in another order across ranks, so equal to one process only to float32 rounding.
FLOAT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


@pytest.mark.subprocess
def test_torchrun_atlas_equals_one_process(launch: Launch, tiny_bert: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Counts, leaderboard and head groups exactly; float means of attention within float32 rounding."""
    import numpy as np

    assert main([*args_of(tiny_bert)["atlas"], "--out", str(tmp_path / "one")]) == 0
    capsys.readouterr()
    two, one = launch.folder("atlas"), tmp_path / "one"
    a, b = read_csv(two / "heads.csv"), read_csv(one / "heads.csv")
    assert [list(r) for r in a] == [list(r) for r in b] and len(a) == len(b) > 0
    for row_a, row_b in zip(a, b):
        for key, value in row_a.items():
            try:
                x, y = float(value), float(row_b[key])
            except ValueError:  # names, kinds, flags: exactly
                assert value == row_b[key], key
                continue
            # the MDS layout is fitted iteratively to the distances: their rounding moves it a little more
            tolerance = {**FLOAT_TOLERANCE, "atol": 1e-5} if key.startswith("mds_") else FLOAT_TOLERANCE
            assert np.isclose(x, y, **tolerance) or (np.isnan(x) and np.isnan(y)), (key, value, row_b[key])
    for name in ("leaderboard.csv", "scores.csv"):
        assert (two / "leaderboard" / name).read_bytes() == (one / "leaderboard" / name).read_bytes(), name
    run = json.loads((two / "run.json").read_text())
    assert run["world"]["world_size"] == 2 and launch.stdout["atlas"].count("Report:") == 1


@pytest.mark.subprocess
def test_torchrun_extract_writes_the_one_process_store(launch: Launch, tiny_bert: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`torchrun --nproc-per-node 2 -m probes extract ...` (gloo) writes the store `probes extract` writes."""
    printed = launch.stdout["extract"]
    assert printed.count("store:") == 1 and "written by 2 ranks" in printed  # rank 0 alone prints
    assert main([*args_of(tiny_bert)["extract"], "--store", str(tmp_path / "one")]) == 0
    capsys.readouterr()
    two, one = launch.folder("extract"), tmp_path / "one"
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    assert {p.name: p.read_bytes() for p in two.iterdir()} == {p.name: p.read_bytes() for p in one.iterdir()}


@pytest.mark.parametrize("rank", ["0", "1"])
def test_under_torchrun_commands_that_do_not_run_distributed_refuse(rank: str, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """What each rank of ``torchrun --nproc-per-node 2 -m probes probe ...`` does (the environment torchrun gives
    its ranks): refuse before joining the process group, rank 0 alone saying so, in one line."""
    import torch.distributed as dist

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: pytest.fail("joined the process group"))
    assert main(["probe", "-m", "nothing", "--train", "sample:dev"]) == 1
    line = ("error: probes probe does not run distributed (WORLD_SIZE=2); under torchrun run leaderboard, coref, "
            "bridging, atlas, extract, train, or run probe as one process\n")
    assert capsys.readouterr().err == (line if rank == "0" else "")


@pytest.fixture(scope="module")
def stores(tiny_bert: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stores")
    out = {}
    for split in ("dev", "test"):
        out[split] = root / split
        assert main(["extract", "--model", str(tiny_bert), "--treebank", str(SAMPLE / f"sample-{split}.conllu"),
                     "--store", str(out[split]), "--device", "cpu", "--no-progress"]) == 0
    return out


def test_store_pairs_are_sharded_by_index(stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.runs.leaderboard import leaderboard

    options: dict[str, Any] = {"store": stores["test"], "select_store": stores["dev"], "min_count": 5, "limit": 30}
    one = leaderboard(**options)
    here = threading.local()
    monkeypatch.setattr(World, "current", classmethod(lambda cls: getattr(here, "world", World())))

    def rank(world: World) -> Any:
        here.world = world
        return leaderboard(**options)

    boards = run_ranks(2, rank)
    for board in boards:
        assert board.rows == one.rows
        for name in ("report", "select", "report_baselines", "select_baselines"):
            assert equal(canonical(getattr(board, name)), canonical(getattr(one, name))), name
        assert board.record.inputs == one.record.inputs
    ranks = boards[0].record.world["ranks"]
    assert [r["inputs"]["report"]["range"] for r in ranks] == [[0, 15], [15, 30]]
    assert [r["inputs"]["select"]["count"] for r in ranks] == [15, 15]
    assert ranks[1]["inputs"]["report"]["first"] != ranks[0]["inputs"]["report"]["last"]
    assert one.record.world["ranks"][0]["inputs"]["report"]["range"] == [0, 30]


@pytest.mark.subprocess
def test_torchrun_train_is_data_parallel(launch: Launch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`torchrun --nproc-per-node 2 -m probes train ...`: the Trainer's data-parallel run, written once by rank 0.

    Each step sees both ranks' blocks (tokens seen = steps x batch x 2 x seq_len); rank 0 alone prints, writes
    the checkpoints and measures the symmetry; a run of two processes does not resume in one.
    """
    from safetensors.torch import load_file

    from probes.extraction.trained_runs import list_checkpoints
    from probes.training.checkpoints import read_training

    out = launch.folder("train")
    assert launch.stdout["train"].count("Curves:") == 1  # rank 0 alone prints
    found = list_checkpoints(out)
    assert sorted(found) == [0, 1, 2, 4, 6]
    last = read_training(found[6])
    assert last.run.processes == 2 and last.tokens_seen == 6 * 4 * 2 * 32
    first, trained = load_file(found[0] / "model.safetensors"), load_file(found[6] / "model.safetensors")
    assert any(not (first[k] == trained[k]).all() for k in first)  # it trained
    run = json.loads((out / "run.json").read_text())
    assert run["world"]["world_size"] == 2 and run["symmetry"]["steps"] == [0, 1, 2, 4, 6]
    assert not (out / "resume").exists() and not [p for p in out.rglob(".*") if is_temporary(p.name)]
    code = main([*TRAIN, "--steps", "8", "--out", str(out)])  # one process cannot resume a run of two
    assert code == 1 and "processes: 2 -> 1" in capsys.readouterr().err
