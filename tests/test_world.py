"""probes.world and the driver's merge across ranks, without torchrun: ranks simulated by threads.

A :class:`ThreadWorld` is a :class:`~probes.world.World` whose ``gather`` exchanges pickled values
between threads through a barrier, as ``all_gather_object`` does between processes, so the same
code paths (pickling, merging in rank order, every rank computing) run in one test process.
"""

from __future__ import annotations

import pickle
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import probes.corpora
from probes.analysis.baselines import OffsetBaseline
from probes.analysis.bridging import BridgingScores
from probes.analysis.coreference import AntecedentAccuracy
from probes.analysis.dependency import HeadAccuracy
from probes.analysis.driver import stream
from probes.analysis.offload import Offloaded
from probes.analysis.split import Half
from probes.corpora import read_documents, read_treebank
from probes.errors import ConfigError, DistributedError
from probes.extraction.attention import WordAttention
from probes.extraction.windows import document_windows
from probes.results import equal
from probes.world import World, block_record, init_world, merge_analyses, timeout, world_record
from tests.analysis.test_analysis_contract import canonical  # rows of a unit in relation order

SAMPLE = Path(probes.corpora.__file__).resolve().parent / "sample" / "sample-dev.conllu"
COREF = Path(__file__).resolve().parent / "fixtures" / "coref"


class _Hub:
    """What the simulated ranks share: one slot per rank and a barrier."""

    def __init__(self, size: int) -> None:
        self.slots: list[bytes] = [b""] * size
        self.barrier = threading.Barrier(size, timeout=60)


@dataclass(frozen=True)
class ThreadWorld(World):
    """A rank of a world of threads: ``gather`` pickles like ``all_gather_object`` and returns rank order."""

    hub: Any = None

    def gather(self, value: Any, step: str = "") -> list[Any]:
        self.hub.slots[self.rank] = pickle.dumps(value)
        self.hub.barrier.wait()
        out = [pickle.loads(b) for b in self.hub.slots]
        self.hub.barrier.wait()  # nobody overwrites a slot before every rank has read them
        return out

    def barrier(self, step: str = "") -> None:
        self.hub.barrier.wait()


def run_ranks(size: int, work: Callable[[World], Any]) -> list[Any]:
    """``work(world)`` on ``size`` simulated ranks at once; their results in rank order (errors re-raised)."""
    hub, out, errors = _Hub(size), [None] * size, []

    def one(rank: int) -> None:
        try:
            out[rank] = work(ThreadWorld(rank, size, 0, "threads", hub))
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            hub.barrier.abort()

    threads = [threading.Thread(target=one, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def attention(rng: np.random.Generator, n_words: int, truncated: int = 0) -> WordAttention:
    """Random rows summing to 1 over ``[CLS] words [SEP]`` (2 layers, 3 heads), with ties."""
    n = n_words + 2
    w = rng.random((2, 3, n, n))
    w[..., : n // 3] = np.round(w[..., : n // 3], 1)
    w = (w / w.sum(-1, keepdims=True)).astype(np.float32)
    special = np.zeros(n, dtype=bool)
    special[0] = special[-1] = True
    return WordAttention(w, special, (0, 1), (0, 1, 2), {"truncated": truncated})


@pytest.fixture(scope="module")
def sentence_pairs() -> list[tuple[Any, WordAttention]]:
    rng = np.random.default_rng(3)
    sentences = list(read_treebank(SAMPLE))
    # two items cut by the extractor (one in each rank's block of a 2-rank world): fed to no analysis
    cut = {3, len(sentences) - 4}
    return [(s, attention(rng, s.n_words, truncated=int(k in cut))) for k, s in enumerate(sentences)]


@pytest.fixture(scope="module")
def window_pairs() -> list[tuple[Any, WordAttention]]:
    rng = np.random.default_rng(4)
    docs = [d for name in ("tiny_gum.conllu", "tiny_gum_halves.conllu", "split_antecedents.conllu")
            for d in read_documents(COREF / name)]
    return [(w, attention(rng, w.n_words)) for d in docs for w in document_windows(d, lambda ws: len(ws) + 2, 14,
                                                                                     stride=6)]


def sentence_analyses() -> dict[str, Any]:
    return {"heads": HeadAccuracy(buffer=5), "baselines": OffsetBaseline(),
            "heads_select": Half(HeadAccuracy(), "select"), "baselines_report": Half(OffsetBaseline(), "report")}


def window_analyses() -> dict[str, Any]:
    return {"coref": AntecedentAccuracy(), "bridging": BridgingScores(),
            "coref_select": Half(AntecedentAccuracy(), "select")}


# ---------------------------------------------------------------------------------- shards
@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
def test_blocks_cover_every_item_once_in_order(size: int) -> None:
    for n in range(0, 23):
        items = [f"s{k}" for k in range(n)]
        worlds = [World(rank, size) for rank in range(size)]
        blocks = [w.take(items) for w in worlds]
        assert [i for b in blocks for i in b] == items  # every item once, in input order
        assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
        ranges = [w.shard(n) for w in worlds]
        assert ranges[0].start == 0 and ranges[-1].stop == n
        assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:]))


def test_block_record_names_range_count_and_ends() -> None:
    ids = ["a", "b", "c", "d", "e"]
    assert block_record(World(0, 2), ids) == {"range": [0, 2], "count": 2, "first": "a", "last": "b"}
    assert block_record(World(1, 2), ids) == {"range": [2, 5], "count": 3, "first": "c", "last": "e"}
    assert block_record(World(0, 4), ids[:2]) == {"range": [0, 0], "count": 0, "first": None, "last": None}


def test_world_record_gathers_every_rank_in_order() -> None:
    ids = [f"d{k}" for k in range(7)]
    records = run_ranks(3, lambda w: world_record(w, {"report": block_record(w, ids)}))
    assert records[0] == records[1] == records[2]
    assert records[0]["world_size"] == 3 and records[0]["backend"] == "threads"
    assert [r["inputs"]["report"]["range"] for r in records[0]["ranks"]] == [[0, 2], [2, 4], [4, 7]]
    one = world_record(World(), {"report": block_record(World(), ids)})
    assert one == {"world_size": 1, "backend": None,
                   "ranks": [{"rank": 0, "inputs": {"report": {"range": [0, 7], "count": 7, "first": "d0",
                                                               "last": "d6"}}}]}


def test_one_process_world_and_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert init_world() == World() and not World().distributed and World().gather(5) == [5]
    monkeypatch.delenv("PROBES_DIST_TIMEOUT_MIN", raising=False)
    assert timeout().total_seconds() == 600  # 10 minutes by default, as the scale-out guide says
    monkeypatch.setenv("PROBES_DIST_TIMEOUT_MIN", "2.5")
    assert timeout().total_seconds() == 150
    monkeypatch.setenv("PROBES_DIST_TIMEOUT_MIN", "soon")
    with pytest.raises(ConfigError, match="PROBES_DIST_TIMEOUT_MIN: expected a positive number of minutes"):
        timeout()


# ---------------------------------------------------------------------------------- failed collective steps
#: What torch raises when a collective times out (gloo) and when a peer process is gone.
TIMED_OUT = "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 600000ms for recv"
CLOSED = "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500"


def _raise(kind: type[Exception], text: str) -> Callable[..., None]:
    def fail(*args: Any, **kwargs: Any) -> None:
        raise kind(text)
    return fail


def test_a_barrier_that_times_out_is_one_probes_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.delenv("PROBES_DIST_TIMEOUT_MIN", raising=False)
    monkeypatch.setattr(dist, "barrier", _raise(dist.DistBackendError, TIMED_OUT))
    with pytest.raises(DistributedError) as got:
        World(1, 2, 0, "gloo").barrier("the end of the run")
    assert str(got.value) == ("the other ranks did not reach the end of the run within 10 min (a rank is stopped or "
                              "hung; see its own error line); set PROBES_DIST_TIMEOUT_MIN to wait longer")
    assert isinstance(got.value, RuntimeError) and "\n" not in str(got.value)


def test_a_gather_whose_peer_died_names_the_step_and_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    monkeypatch.setattr(dist, "all_gather_object", _raise(RuntimeError, CLOSED))
    with pytest.raises(DistributedError, match=r"^another rank left the run before the run record \(it failed or "
                                                r"was stopped; see its own error line\): Connection closed by peer"):
        world_record(World(0, 2, 0, "gloo"), {})
    monkeypatch.setattr(dist, "all_gather_object", _raise(RuntimeError, TIMED_OUT))
    monkeypatch.setenv("PROBES_DIST_TIMEOUT_MIN", "0.5")
    with pytest.raises(DistributedError, match="did not reach the merge of the analyses within 0.5 min"):
        merge_analyses({"heads": HeadAccuracy()}, World(0, 2, 0, "gloo"))


def test_a_rank_failing_at_the_final_barrier_prints_one_line(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's last step under torchrun: the other rank died, so this one's barrier fails (no process group
    needed: the command and the group are stood in for)."""
    import torch.distributed as dist

    import probes.cli as cli

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("PROBES_DIST_TIMEOUT_MIN", raising=False)
    monkeypatch.setattr(cli, "init_world", lambda device=None: World(1, 2, 0, "gloo"))
    monkeypatch.setattr(cli, "_main", lambda args: 0)  # the command itself succeeded
    monkeypatch.setattr(dist, "barrier", _raise(dist.DistBackendError, TIMED_OUT))
    monkeypatch.setattr(dist, "destroy_process_group", _raise(AssertionError, "not after a failed barrier"))
    assert cli.main(["leaderboard", "--model", "m"]) == 1
    err = capsys.readouterr().err
    assert err == ("error: rank 1 of 2: the other ranks did not reach the end of the run within 10 min (a rank is "
                   "stopped or hung; see its own error line); set PROBES_DIST_TIMEOUT_MIN to wait longer\n")
    monkeypatch.setattr(dist, "barrier", _raise(RuntimeError, CLOSED))
    assert cli.main(["leaderboard", "--model", "m"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: rank 1 of 2: another rank left the run before the end of the run")


# ---------------------------------------------------------------------------------- merging
def test_merge_analyses_with_a_gather_of_two_states() -> None:
    rng = np.random.default_rng(5)
    pairs = [(s, attention(rng, s.n_words)) for s in list(read_treebank(SAMPLE))[:30]]
    shards = []
    for block in (pairs[:12], pairs[12:]):
        analyses = {"heads": HeadAccuracy(), "half": Half(HeadAccuracy(), "report")}
        for item, att in block:
            for a in analyses.values():
                a.update(item, att)
        shards.append(analyses)

    class Two(World):
        def gather(self, value: Any, step: str = "") -> list[Any]:
            return [pickle.loads(pickle.dumps(s)) for s in shards]

    merged = merge_analyses(shards[1], Two(1, 2))
    whole = {"heads": HeadAccuracy(), "half": Half(HeadAccuracy(), "report")}
    for item, att in pairs:
        for a in whole.values():
            a.update(item, att)
    assert equal(canonical(merged["heads"].compute()), canonical(whole["heads"].compute()))
    assert equal(canonical(merged["half"].compute()), canonical(whole["half"].compute()))
    assert merged["half"].n_seen == whole["half"].n_seen > 0


@pytest.mark.parametrize("size", [2, 3])
def test_stream_across_ranks_equals_one_process(size: int, sentence_pairs: list[Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one_analyses = sentence_analyses()
        one = stream(sentence_pairs, one_analyses, overlap=False)

        def rank(world: World) -> Any:
            analyses = sentence_analyses()
            done = stream(world.take(sentence_pairs), analyses, world=world)
            return done, analyses["heads_select"].n_seen

        ranks = run_ranks(size, rank)
    for done, n_seen in ranks:  # every rank holds the merged results
        assert done.n_items == one.n_items == len(sentence_pairs)
        assert done.skipped == one.skipped and len(one.skipped) == 2  # every rank's, in input order
        assert n_seen == one_analyses["heads_select"].n_seen  # the caller's analyses hold the merged state
        for name in one.results:  # per-sentence counts in input order
            assert equal(canonical(done[name]), canonical(one[name])), name


def test_stream_across_ranks_on_document_windows(window_pairs: list[Any]) -> None:
    one = stream(window_pairs, window_analyses(), overlap=False)
    ranks = run_ranks(2, lambda w: stream(w.take(window_pairs), window_analyses(), world=w))
    for done in ranks:
        for name in one.results:
            assert equal(canonical(done[name]), canonical(one[name])), name
    assert ranks[0]["coref"].units == one["coref"].units  # documents in input order


def test_stream_across_ranks_fetches_offloaded_state(sentence_pairs: list[Any]) -> None:
    pairs = [p for p in sentence_pairs if not p[1].meta["truncated"]][:24]
    one = stream(pairs, {"heads": HeadAccuracy()}, overlap=False)
    ranks = run_ranks(2, lambda w: stream(w.take(pairs), {"off": Offloaded({"heads": HeadAccuracy()})}, world=w))
    for done in ranks:
        assert equal(canonical(done["off"]["heads"]), canonical(one["heads"]))


def test_offloaded_inside_a_half_is_refused_across_ranks(sentence_pairs: list[Any]) -> None:
    with pytest.raises(ConfigError, match="Offloaded analysis cannot run inside another one"):
        run_ranks(2, lambda w: stream(w.take(sentence_pairs[:4]), {
            "x": Half(Offloaded({"heads": HeadAccuracy()}), "report")}, world=w))  # type: ignore[arg-type]
