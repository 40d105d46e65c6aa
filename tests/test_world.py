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
from probes.errors import ConfigError
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

    def gather(self, value: Any) -> list[Any]:
        self.hub.slots[self.rank] = pickle.dumps(value)
        self.hub.barrier.wait()
        out = [pickle.loads(b) for b in self.hub.slots]
        self.hub.barrier.wait()  # nobody overwrites a slot before every rank has read them
        return out

    def barrier(self) -> None:
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
    monkeypatch.setenv("PROBES_DIST_TIMEOUT_MIN", "2.5")
    assert timeout().total_seconds() == 150
    monkeypatch.setenv("PROBES_DIST_TIMEOUT_MIN", "soon")
    with pytest.raises(ConfigError, match="PROBES_DIST_TIMEOUT_MIN: expected a positive number of minutes"):
        timeout()


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
        def gather(self, value: Any) -> list[Any]:
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
