"""Attention store: round trip, resume after a kill (same bytes), verification, errors, stores written per rank."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.corpora.types import Sentence
from probes.errors import DamagedStoreError, StoreError
from probes.extraction.extractor import AttentionExtractor
from probes.extraction.store import extract_to_store, open_store
from probes.world import World
from tests.tiny_models import build

REPO = Path(__file__).resolve().parents[2]
WORDS = "the quick brown fox jumps over the lazy dog and a cat sat on the mat".split()


def corpus(n: int) -> list[Sentence]:
    """``n`` sentences of varied lengths (1..16 words), deterministic."""
    out = []
    for i in range(n):
        k = 1 + (i * 7) % len(WORDS)
        words = tuple(WORDS[(i + j) % len(WORDS)] for j in range(k))
        out.append(Sentence(f"s{i}", words, tuple(range(k)), ("dep",) * k, upos=("X",) * k, line=i + 1))
    return out


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("bert", tmp_path_factory.mktemp("models"))


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def test_round_trip_equals_live_extraction(bert: Path, tmp_path: Path) -> None:
    sents = corpus(23)
    ex = AttentionExtractor.from_pretrained(bert, batch_size=4, progress=False)
    store = extract_to_store(ex, sents, tmp_path / "store", shard_size=5)
    assert len(store) == 23 and store.info["n_sentences"] == 23 and store.info["complete"]
    assert store.info["model"] == str(bert) and len(store.info["weights_sha256"]) == 64
    live = list(AttentionExtractor.from_pretrained(bert, batch_size=4, progress=False).iter_attention(sents))
    stored = list(open_store(tmp_path / "store"))
    assert [s for s, _ in stored] == sents  # Sentences come back whole (all fields)
    for (_, a), (_, b) in zip(live, stored, strict=True):
        assert b.weights.dtype == np.float32 and b.layers == a.layers and b.heads == a.heads
        np.testing.assert_allclose(b.weights, a.weights, atol=1e-3)  # float16 on disk
        assert (b.is_special == a.is_special).all()
    assert len(list((tmp_path / "store").glob("shard-*.npy"))) == 5


def test_store_reports_skipped(bert: Path, tmp_path: Path) -> None:
    sents = corpus(6)
    ex = AttentionExtractor.from_pretrained(bert, max_length=10, progress=False)
    store = extract_to_store(ex, sents, tmp_path / "s", shard_size=4)
    n_long = sum(ex.count_tokens(s.words) > 10 for s in sents)
    assert n_long > 0
    assert len(store) == 6 - n_long and store.report["n_skipped"] == n_long
    assert [s.sent_id for s, _ in store] == [s.sent_id for s in sents if ex.count_tokens(s.words) <= 10]


def interrupted_store(make: Callable[[], AttentionExtractor], sents: list[Sentence], tmp_path: Path,
                      shard_size: int) -> None:
    """The whole store in ``tmp_path/full``, and in ``tmp_path/resumed`` one interrupted after its first two shards."""
    extract_to_store(make(), sents, tmp_path / "full", shard_size=shard_size)

    def stop_after_two(number: int) -> None:
        if number == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        extract_to_store(make(), sents, tmp_path / "resumed", shard_size=shard_size, on_shard=stop_after_two)


def test_resume_after_callback_interrupt_gives_same_bytes(bert: Path, tmp_path: Path) -> None:
    sents = corpus(30)
    make = lambda: AttentionExtractor.from_pretrained(bert, batch_size=3, progress=False)  # noqa: E731
    interrupted_store(make, sents, tmp_path, shard_size=7)
    with pytest.raises(StoreError, match="incomplete"):
        open_store(tmp_path / "resumed")
    finished = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "resumed").glob("shard-*.npy")}
    assert sorted(finished) == ["shard-00000.npy", "shard-00001.npy"]
    redone: list[int] = []
    ex = make()
    extract_to_store(ex, sents, tmp_path / "resumed", shard_size=7, on_shard=redone.append)
    assert ex.report.n_items == 30 - 14  # finished shards were not extracted again
    for name, mtime in finished.items():
        assert (tmp_path / "resumed" / name).stat().st_mtime_ns == mtime
    assert folder_bytes(tmp_path / "full") == folder_bytes(tmp_path / "resumed")


_KILL_SCRIPT = """
import sys
sys.path.insert(0, {repo!r})
from probes.extraction.extractor import AttentionExtractor
from probes.extraction.store import extract_to_store
from tests.extraction.test_store import corpus
ex = AttentionExtractor.from_pretrained({model!r}, batch_size=4, progress=False)
extract_to_store(ex, corpus(160), {out!r}, shard_size=4)
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_resume_after_sigkill_gives_same_bytes(bert: Path, tmp_path: Path) -> None:
    """Kill a real extraction process midway with SIGKILL, resume it, compare with an uninterrupted run."""
    out = tmp_path / "killed"
    script = _KILL_SCRIPT.format(repo=str(REPO), model=str(bert), out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (out / "shard-00002.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, f"extraction ended before it could be killed: {proc.stderr.read().decode()}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_done = len(list(out.glob("shard-*.json")))
    assert 3 <= n_done < 40
    with pytest.raises(StoreError, match="incomplete"):
        open_store(out)
    sents = corpus(160)
    ex = AttentionExtractor.from_pretrained(bert, batch_size=4, progress=False)
    extract_to_store(ex, sents, out, shard_size=4)
    assert ex.report.n_items <= 160 - 4 * n_done
    full = AttentionExtractor.from_pretrained(bert, batch_size=4, progress=False)
    extract_to_store(full, sents, tmp_path / "full", shard_size=4)
    assert folder_bytes(out) == folder_bytes(tmp_path / "full")


def test_damaged_shard_is_redone(bert: Path, tmp_path: Path) -> None:
    sents = corpus(10)
    make = lambda: AttentionExtractor.from_pretrained(bert, progress=False)  # noqa: E731
    extract_to_store(make(), sents, tmp_path / "s", shard_size=5)
    good = folder_bytes(tmp_path / "s")
    npy = tmp_path / "s" / "shard-00001.npy"
    raw = bytearray(npy.read_bytes())
    raw[-1] ^= 0xFF
    npy.write_bytes(bytes(raw))
    ex = make()
    extract_to_store(ex, sents, tmp_path / "s", shard_size=5)
    assert ex.report.n_items == 5 and folder_bytes(tmp_path / "s") == good


def test_resume_refuses_other_data_or_options(bert: Path, tmp_path: Path) -> None:
    sents = corpus(6)
    extract_to_store(AttentionExtractor.from_pretrained(bert, progress=False), sents, tmp_path / "s", shard_size=3)
    with pytest.raises(StoreError, match="other sentences"):
        extract_to_store(AttentionExtractor.from_pretrained(bert, progress=False), corpus(7)[1:], tmp_path / "s",
                         shard_size=3)
    with pytest.raises(StoreError, match="another model or other options"):
        extract_to_store(AttentionExtractor.from_pretrained(bert, from_pool="first", progress=False), sents,
                         tmp_path / "s", shard_size=3)


def test_open_store_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no attention store here"):
        open_store(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": 1,\n oops}')
    with pytest.raises(StoreError, match=r"manifest.json:2: expected a JSON manifest"):
        open_store(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(StoreError, match="expected format"):
        open_store(tmp_path)


def test_reading_is_streamed(bert: Path, tmp_path: Path) -> None:
    """Iterating yields one sentence at a time from memory-mapped shards (nothing read up front)."""
    store = extract_to_store(AttentionExtractor.from_pretrained(bert, progress=False), corpus(12), tmp_path / "s",
                             shard_size=4)
    it = iter(store)
    first = next(it)
    (tmp_path / "s" / "shard-00002.npy").unlink()  # a later shard is not touched yet
    assert first[0].sent_id == "s0" and next(it)[0].sent_id == "s1"
    with pytest.raises(DamagedStoreError, match=r"shard-00002\.npy: .*expected a \.npy file, found none"):
        list(it)


CONLLU = """# sent_id = a1
# text = The fox jumps .
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tfox\tfox\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tjumps\tjump\tVERB\tVBZ\t_\t0\troot\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = a2
# text = A cat sat on the mat and the dog barked .
1\tA\ta\tDET\tDT\t_\t2\tdet\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_
4\ton\ton\tADP\tIN\t_\t6\tcase\t_\t_
5\tthe\tthe\tDET\tDT\t_\t6\tdet\t_\t_
6\tmat\tmat\tNOUN\tNN\t_\t3\tobl\t_\t_
7\tand\tand\tCCONJ\tCC\t_\t10\tcc\t_\t_
8\tthe\tthe\tDET\tDT\t_\t9\tdet\t_\t_
9\tdog\tdog\tNOUN\tNN\t_\t10\tnsubj\t_\t_
10\tbarked\tbark\tVERB\tVBD\t_\t3\tconj\t_\t_
11\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

"""


def test_cli_extract(bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    treebank = tmp_path / "tiny.conllu"
    treebank.write_text(CONLLU, encoding="utf-8")
    code = main(["extract", "--model", str(bert), "--treebank", str(treebank), "--store", str(tmp_path / "st"),
                 "--layers", "2", "--heads", "1,3-4", "--max-length", "12", "--on-long", "truncate",
                 "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 read, 2 stored" in out and "1 truncated" in out and "truncated: a2" in out
    store = open_store(tmp_path / "st")
    assert store.layers == (1,) and store.heads == (0, 2, 3)
    assert store.info["source"] == str(treebank) and len(store.info["source_sha256"]) == 64
    (s1, w1), (s2, w2) = list(store)
    assert s1.words == ("The", "fox", "jumps", ".") and w1.weights.shape == (1, 3, 6, 6)
    assert w2.meta["truncated"] == 11 - w2.n_words > 0


def test_cli_extract_bad_layers(bert: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    treebank = tmp_path / "tiny.conllu"
    treebank.write_text(CONLLU, encoding="utf-8")
    code = main(["extract", "--model", str(bert), "--treebank", str(treebank), "--store", str(tmp_path / "st"),
                 "--layers", "0", "--no-progress"])
    assert code == 1
    assert "error: --layers expects 1-based numbers" in capsys.readouterr().err


@pytest.mark.parametrize("other", [corpus(7)[1:], corpus(4), corpus(9)], ids=["other", "fewer", "more"])
def test_rejected_extract_leaves_a_finished_store_unchanged(bert: Path, tmp_path: Path,
                                                             other: list[Sentence]) -> None:
    """Issue 11 item 2: other sentences are refused before anything is written, so the store still reads."""
    make = lambda: AttentionExtractor.from_pretrained(bert, progress=False)  # noqa: E731
    extract_to_store(make(), corpus(6), tmp_path / "s", shard_size=3)
    before = folder_bytes(tmp_path / "s")
    with pytest.raises(StoreError, match="finished store of other sentences.*left unchanged"):
        extract_to_store(make(), other, tmp_path / "s", shard_size=3)
    assert folder_bytes(tmp_path / "s") == before
    assert len(open_store(tmp_path / "s")) == 6


def test_cli_rejected_extract_keeps_store_usable(bert: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`probes extract` of another treebank into a finished store fails, and `leaderboard --store` still works."""
    from probes.cli import main

    sample = REPO / "probes" / "corpora" / "sample"
    store = tmp_path / "st"
    args = ["extract", "--model", str(bert), "--store", str(store), "--no-progress", "--device", "cpu"]
    assert main([*args, "--treebank", str(sample / "sample-dev.conllu")]) == 0
    manifest = (store / "manifest.json").read_bytes()
    capsys.readouterr()
    assert main([*args, "--treebank", str(sample / "sample-test.conllu")]) == 1
    assert "finished store of other sentences" in capsys.readouterr().err
    assert (store / "manifest.json").read_bytes() == manifest
    assert main(["leaderboard", "--store", str(store), "--out", str(tmp_path / "out"), "--no-figures",
                 "--min-count", "5", "--no-progress"]) == 0, capsys.readouterr().err
    assert "Report:" in capsys.readouterr().out


# ---------------------------------------------------------------- stores written per rank (issue 15)

def run_ranks(size: int, work: Callable[[World], Any]) -> list[Any]:
    """``work(world)`` for every rank of a simulated world of ``size``, in threads meeting at real barriers.

    Each rank gets its own world (``World(rank=r, size=size)``) whose ``barrier`` is a thread barrier, so the
    ranks run at the same time, as under torchrun; returns each rank's result (or raised exception) by rank.
    Models are loaded before the threads start (``loaded``): transformers' loading switches torch's default
    device process-wide and is not thread-safe (two loads at once can leave it on ``meta`` for later tests).
    """
    gate = threading.Barrier(size, timeout=120)

    @dataclasses.dataclass(frozen=True)
    class ThreadWorld(World):
        def barrier(self) -> None:
            gate.wait()

    results: list[Any] = [None] * size

    def run(rank: int) -> None:
        try:
            results[rank] = work(ThreadWorld(rank=rank, size=size))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            results[rank] = exc
            gate.abort()  # the other ranks fail at their next barrier instead of waiting

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    return results


@pytest.mark.parametrize("size", [2, 3])
def test_ranks_write_one_store(bert: Path, tmp_path: Path, size: int) -> None:
    """Each rank writes its block of whole shards; the folder is byte for byte the one-process store."""
    sents = corpus(23)
    make = lambda: AttentionExtractor.from_pretrained(bert, batch_size=4, max_length=12, progress=False)  # noqa: E731
    single = extract_to_store(make(), sents, tmp_path / "one", shard_size=5)
    assert single.report["n_skipped"] > 0  # skipped ids come from several ranks' shards
    written: list[tuple[int, int]] = []

    extractors = [make() for _ in range(size)]  # loaded here, not in the rank threads (see run_ranks)

    def rank_run(world: World) -> tuple[int, int]:
        extractor = extractors[world.rank]
        store = extract_to_store(extractor, sents, tmp_path / "ranks", shard_size=5, world=world,
                                 on_shard=lambda number: written.append((world.rank, number)))
        return extractor.report.n_items, len(store)

    results = run_ranks(size, rank_run)
    assert not any(isinstance(r, BaseException) for r in results), results
    blocks = [World(rank, size).shard(5) for rank in range(size)]  # 5 shards of 5, 5, 5, 5, 3 sentences
    assert sorted(written) == [(rank, n) for rank, block in enumerate(blocks) for n in block]
    assert [n for n, _ in results] == [sum(min(5, 23 - 5 * n) for n in block) for block in blocks]
    assert {length for _, length in results} == {len(single)}  # every rank returns the whole store
    assert folder_bytes(tmp_path / "ranks") == folder_bytes(tmp_path / "one")
    stored, reference = list(open_store(tmp_path / "ranks")), list(single)
    assert [s for s, _ in stored] == [s for s, _ in reference]
    for (_, a), (_, b) in zip(stored, reference, strict=True):
        np.testing.assert_array_equal(a.weights, b.weights)


def test_ranks_resume_a_one_process_store(bert: Path, tmp_path: Path) -> None:
    """A store interrupted in one process is finished by two ranks, which redo only the missing shards."""
    sents = corpus(30)
    make = lambda: AttentionExtractor.from_pretrained(bert, batch_size=3, progress=False)  # noqa: E731
    interrupted_store(make, sents, tmp_path, shard_size=5)
    extractors = [make() for _ in range(2)]  # loaded here, not in the rank threads (see run_ranks)

    def rank_run(world: World) -> int:
        extractor = extractors[world.rank]
        extract_to_store(extractor, sents, tmp_path / "resumed", shard_size=5, world=world)
        return extractor.report.n_items

    assert run_ranks(2, rank_run) == [5, 15]  # rank 0: shards 0-2 (0, 1 kept), rank 1: shards 3-5
    assert folder_bytes(tmp_path / "resumed") == folder_bytes(tmp_path / "full")


def test_ranks_refuse_other_sentences_in_a_finished_store(bert: Path, tmp_path: Path) -> None:
    make = lambda: AttentionExtractor.from_pretrained(bert, progress=False)  # noqa: E731
    extract_to_store(make(), corpus(6), tmp_path / "s", shard_size=3)
    before = folder_bytes(tmp_path / "s")
    extractors = [make() for _ in range(2)]  # loaded here, not in the rank threads (see run_ranks)
    results = run_ranks(2, lambda world: extract_to_store(extractors[world.rank], corpus(7)[1:], tmp_path / "s",
                                                          shard_size=3, world=world))
    assert all(isinstance(r, StoreError) and "finished store of other sentences" in str(r) for r in results)
    assert folder_bytes(tmp_path / "s") == before


# `torchrun --nproc-per-node 2 -m probes extract` against `probes extract`: tests/runs/test_distributed.py (its one
# torchrun launch runs every distributed command).
