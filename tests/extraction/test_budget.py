"""Per-layer capture and the attention memory budget (issue 15, items 2 and 3).

* Forward hooks on the attention modules give the same word maps as ``output_attentions=True`` (the
  extractor's fallback path, the reference here) for every tiny family.
* ``max_batch_tokens`` bounds the padded tokens of each forward pass.
* ``max_attention_mb``: the largest attention the extractor holds, counted from the tensors it really
  handles, stays within its half of the budget for a model with 4x the heads; inputs over the budget are
  skipped / truncated / windowed by ``on_long`` and named in ``report.over_budget``.
* Coreference windows shrink with the number of heads under a fixed budget.
* The queue to the analyses is bounded by bytes.
"""

from __future__ import annotations

import math
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.analysis import driver
from probes.corpora.types import Sentence
from probes.extraction.align import BatchPooler
from probes.extraction.attention import WordAttention
from probes.extraction.extractor import AttentionExtractor
from tests.tiny_models import build, tiny_families, uses_attention_interface

WORDS = ("the quick brown fox jumps over the lazy dog and the cat sat on the mat , "
         "she did n't know whether the results were right : un-believ-able !").split()


def _sentences(lengths: list[int], prefix: str = "s") -> list[Sentence]:
    out = []
    for i, n in enumerate(lengths):
        words = tuple((WORDS * (n // len(WORDS) + 1))[i % 7: i % 7 + n])
        out.append(Sentence(f"{prefix}{i + 1}", words, tuple(range(n)), ("dep",) * n))
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("budget_models")
    out = {name: build(name, root) for name in tiny_families()}
    out["bert16"] = _with_heads(out["bert"], 16, root / "bert16")
    return out


def _with_heads(folder: Path, heads: int, target: Path) -> Path:
    """The tiny BERT with ``heads`` heads (same hidden size, layers and tokenizer)."""
    from transformers import BertConfig, BertModel

    config = BertConfig.from_pretrained(folder)
    config.num_attention_heads = heads
    torch.manual_seed(1)
    BertModel(config).eval().save_pretrained(target)
    for name in folder.iterdir():
        if name.name.startswith(("tokenizer", "special_tokens", "vocab")):
            shutil.copy(name, target / name.name)
    return target


def _run(extractor: AttentionExtractor, items: list[Sentence]) -> list[tuple[str, WordAttention]]:
    return [(s.sent_id, wa) for s, wa in extractor.iter_attention(items)]


# --------------------------------------------------------------------------- hooks == output_attentions
@pytest.mark.parametrize("family", tiny_families())
def test_hooks_equal_output_attentions(models: dict[str, Path], family: str) -> None:
    items = _sentences([3, 9, 17, 6, 12])
    hooked = AttentionExtractor.from_pretrained(models[family], batch_size=3, device="cpu", progress=False,
                                                keep_tokens=True)
    reference = AttentionExtractor(hooked.model, hooked.tokenizer, batch_size=3, device="cpu", progress=False,
                                   keep_tokens=True)
    reference._sites = False  # the output_attentions=True path
    got, want = _run(hooked, items), _run(reference, items)
    if not uses_attention_interface(models[family]):  # no attention modules to hook (DeBERTa-v2): the fallback
        assert hooked._sites is False
    else:
        assert isinstance(hooked._sites, tuple), "the hooked path must have been used"
    assert [i for i, _ in got] == [i for i, _ in want] == [s.sent_id for s in items]
    for (_, a), (_, b) in zip(got, want):
        np.testing.assert_allclose(a.weights, b.weights, rtol=0, atol=1e-6)
        assert a.tokens is not None and b.tokens is not None
        np.testing.assert_allclose(a.tokens.weights, b.tokens.weights, rtol=0, atol=1e-6)


def test_hooks_with_a_subset_of_layers_and_heads(models: dict[str, Path]) -> None:
    items = _sentences([5, 11, 8])
    hooked = AttentionExtractor.from_pretrained(models["llama"], batch_size=2, device="cpu", progress=False,
                                                layers=[1], heads=[0, 3], from_pool="max")
    reference = AttentionExtractor(hooked.model, hooked.tokenizer, batch_size=2, device="cpu", progress=False,
                                   layers=[1], heads=[0, 3], from_pool="max")
    reference._sites = False
    for (_, a), (_, b) in zip(_run(hooked, items), _run(reference, items)):
        assert a.weights.shape[:2] == (1, 2)
        np.testing.assert_allclose(a.weights, b.weights, rtol=0, atol=1e-6)


def test_a_model_whose_hooks_get_no_weights_falls_back(models: dict[str, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    extractor = AttentionExtractor.from_pretrained(models["bert"], device="cpu", progress=False)
    reference = _run(extractor, _sentences([4, 7]))
    modules, _ = extractor._attention_sites()  # type: ignore[misc]
    extractor._sites = (modules, 5)  # an output index that holds no weights
    again = _run(extractor, _sentences([4, 7]))
    assert extractor._sites is False
    for (_, a), (_, b) in zip(again, reference):
        np.testing.assert_array_equal(a.weights, b.weights)


# --------------------------------------------------------------------------- max_batch_tokens
def _shapes(extractor: AttentionExtractor, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    shapes: list[tuple[int, int]] = []
    forward = extractor._forward

    def recording(alignments, *rest):  # type: ignore[no-untyped-def]
        shapes.append((len(alignments), max(al.n_tokens for al in alignments)))
        return forward(alignments, *rest)

    monkeypatch.setattr(extractor, "_forward", recording)
    return shapes


def test_batches_respect_max_batch_tokens(models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    items = _sentences([4, 6, 8, 10, 12, 14, 16, 18, 20, 40])
    free = AttentionExtractor.from_pretrained(models["bert"], batch_size=16, device="cpu", progress=False)
    free_shapes = _shapes(free, monkeypatch)
    want = _run(free, items)
    bounded = AttentionExtractor(free.model, free.tokenizer, batch_size=16, device="cpu", progress=False,
                                 max_batch_tokens=48)
    shapes = _shapes(bounded, monkeypatch)
    got = _run(bounded, items)
    assert max(b * t for b, t in free_shapes) > 48  # the bound binds
    assert all(b * t <= 48 or b == 1 for b, t in shapes), shapes
    assert any(b == 1 and t > 48 for b, t in shapes)  # the 40-word sentence (over 48 tokens) runs alone
    assert sum(b for b, _ in shapes) == len(items)
    for (i, a), (j, b) in zip(got, want):
        assert i == j
        np.testing.assert_allclose(a.weights, b.weights, rtol=0, atol=1e-5)  # padding differs, not the maps


# --------------------------------------------------------------------------- the budget
def _peak_values(extractor: AttentionExtractor, items: list[Sentence], monkeypatch: pytest.MonkeyPatch) -> int:
    """The most float32 values the extractor held at once, from what it really handled: the finished results of
    the group being run, the token attention being pooled and the batch's pooled output (or a combined
    windowed input)."""
    state: dict[str, Any] = {"jobs": [], "peak": 0}
    kept = len(extractor.layers) * len(extractor.heads)
    run_jobs, pool, combine = extractor._run_jobs, BatchPooler.pool, extractor._combine_windows

    def held() -> int:
        return sum(job.result.size for job in state["jobs"])

    def tracking_run_jobs(jobs, room=math.inf):  # type: ignore[no-untyped-def]
        state["jobs"] = jobs
        return run_jobs(jobs, room)

    def tracking_pool(self, attn, out=None):  # type: ignore[no-untyped-def]
        batch_out = len(self.alignments) * kept * self.n_pos ** 2
        state["peak"] = max(state["peak"], held() + attn.numel() + batch_out)
        return pool(self, attn, out)

    def tracking_combine(jobs, n_words):  # type: ignore[no-untyped-def]
        result = combine(jobs, n_words)
        state["peak"] = max(state["peak"], held() + result.weights.size)
        return result

    monkeypatch.setattr(extractor, "_run_jobs", tracking_run_jobs)
    monkeypatch.setattr(BatchPooler, "pool", tracking_pool)
    monkeypatch.setattr(extractor, "_combine_windows", tracking_combine)
    for _ in extractor.iter_attention(items):
        pass
    return state["peak"]


def test_the_attention_held_stays_within_the_budget_with_4x_the_heads(models: dict[str, Path],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    items = _sentences([30, 25, 12, 30, 28, 8, 30, 20, 30, 30, 16, 30])
    mb = 1.0
    share = mb * 2**20 / 4 / 2  # the extractor's half, in float32 values
    peaks = {}
    for name in ("bert", "bert16"):
        extractor = AttentionExtractor.from_pretrained(models[name], batch_size=8, device="cpu", progress=False,
                                                       max_attention_mb=mb)
        peaks[name] = _peak_values(extractor, items, monkeypatch)
        assert extractor.report.n_yielded == len(items) and not extractor.report.over_budget
        monkeypatch.undo()
    unbounded = AttentionExtractor.from_pretrained(models["bert16"], batch_size=8, device="cpu", progress=False,
                                                   max_attention_mb=None)
    peak_unbounded = _peak_values(unbounded, items, monkeypatch)
    assert peaks["bert"] <= share and peaks["bert16"] <= share, (peaks, share)
    assert peak_unbounded > share  # without the budget, 16 heads hold more: the measure can fail


def _over_budget_extractor(models: dict[str, Path], on_long: str) -> AttentionExtractor:
    """Tiny BERT (2 x 4 heads) whose budget runs 12-word sentences whole but not 40-word ones (max 64 tokens)."""
    extractor = AttentionExtractor.from_pretrained(models["bert"], batch_size=4, device="cpu", progress=False,
                                                   on_long=on_long, max_attention_mb=8000 * 8 / 2**20)
    assert extractor.budget_tokens() == 20 and extractor.max_tokens == 64
    return extractor


def test_over_budget_inputs_are_skipped_and_named(models: dict[str, Path]) -> None:
    extractor = _over_budget_extractor(models, "skip")
    got = _run(extractor, _sentences([12, 40, 10], prefix="b"))
    assert [i for i, _ in got] == ["b1", "b3"]
    assert extractor.report.skipped == ["b2"] and extractor.report.over_budget == ["b2"]
    assert "over the attention budget" in extractor.report.summary()
    assert extractor.report.as_dict()["over_budget"] == ["b2"]


def test_the_leaderboard_says_an_input_was_skipped_for_the_budget_not_its_length(models: dict[str, Path]) -> None:
    """The inputs line names the budget and the inputs over it, not only "over 64 tokens" (which b2 is not)."""
    from probes.runs.leaderboard import leaderboard

    extractor = _over_budget_extractor(models, "skip")
    sentences = _sentences([12, 40, 10, 11, 9, 12], prefix="b")
    board = leaderboard(extractor, sentences, select_on="same", min_count=1)
    report = board.record.inputs["report"]
    assert report["skipped"] == ["b2"] and report["over_budget"] == ["b2"] and report["n_over_budget"] == 1
    assert report["max_attention_mb"] == pytest.approx(8000 * 8 / 2**20)
    line = board.notes()
    assert f"over 64 tokens or the attention budget ({8000 * 8 / 2**20:g} MB): 1 skipped: b2" in line
    assert "1 of them for the budget only: b2" in line
    plain = leaderboard(AttentionExtractor.from_pretrained(models["bert"], batch_size=4, device="cpu", progress=False),
                        sentences, select_on="same", min_count=1)
    assert "over_budget" not in plain.record.inputs["report"] and "budget" not in plain.notes()


def test_over_budget_inputs_are_truncated_to_fit(models: dict[str, Path]) -> None:
    extractor = _over_budget_extractor(models, "truncate")
    got = dict(_run(extractor, _sentences([12, 40, 10], prefix="b")))
    assert extractor.report.truncated == ["b2"] and extractor.report.over_budget == ["b2"]
    wa = got["b2"]
    assert wa.meta["n_tokens"] <= 20 and wa.meta["truncated"] == 40 - (wa.weights.shape[-1] - 2)


def test_a_windowed_input_whose_combined_maps_exceed_the_budget_is_skipped(models: dict[str, Path]) -> None:
    extractor = _over_budget_extractor(models, "window")
    got = _run(extractor, _sentences([12, 40, 10], prefix="b"))
    assert [i for i, _ in got] == ["b1", "b3"]
    assert extractor.report.skipped == ["b2"] and extractor.report.over_budget == ["b2"]
    assert extractor.report.windowed == []


def test_long_inputs_windowed_within_the_budget_are_not_over_it(models: dict[str, Path]) -> None:
    extractor = AttentionExtractor.from_pretrained(models["bert"], batch_size=4, device="cpu", progress=False,
                                                   on_long="window", max_length=24, max_attention_mb=0.5)
    got = dict(_run(extractor, _sentences([40], prefix="w")))
    assert extractor.report.windowed == ["w1"] and extractor.report.over_budget == []
    assert got["w1"].weights.shape[-1] == 42 and len(got["w1"].meta["windows"]) > 1
    np.testing.assert_allclose(got["w1"].weights[:, :, 1:-1].sum(-1), 1.0, atol=1e-5)


def test_budget_tokens_shrink_with_heads_and_coreference_windows_follow(models: dict[str, Path],
                                                                        fixtures_dir: Path) -> None:
    from probes.runs.coreference import coreference

    windows = {}
    for name in ("bert", "bert16"):
        extractor = AttentionExtractor.from_pretrained(models[name], batch_size=4, device="cpu", progress=False,
                                                       max_attention_mb=0.1)
        run = coreference(extractor, fixtures_dir / "coref" / "tiny_gum.conllu", select_on="same", n_resamples=10,
                          progress=False)
        windows[name] = run.record.data["window_tokens"]
        assert windows[name] == extractor.budget_tokens() < extractor.max_tokens
        assert run.record.details.model["budget_tokens"] == windows[name]
        assert run.record.details.model["max_attention_mb"] == 0.1
    assert windows["bert16"] < windows["bert"]


def test_default_budget_leaves_bert_base_windows_whole() -> None:
    """The default budget runs 512-token windows of bert-base (12 x 12) and MiniLM (6 x 12) whole; 1,024 heads
    (a 7B decoder) get shorter ones."""
    for layers, heads, want in ((12, 12, 512), (6, 12, 512), (32, 32, 359)):
        extractor = AttentionExtractor.__new__(AttentionExtractor)  # only the budget arithmetic: no model
        extractor.n_heads, extractor.layers, extractor.heads = heads, tuple(range(layers)), tuple(range(heads))
        extractor.keep_tokens, extractor.max_attention_mb, extractor.max_tokens = False, 2048.0, 512
        assert extractor.budget_tokens() == want


# --------------------------------------------------------------------------- the queue
class _Slow:
    """Pairs of 1 MB each, declaring a 3 MB queue."""

    max_queue_bytes = 3 * 2**20

    def __iter__(self):  # type: ignore[no-untyped-def]
        for i in range(12):
            weights = np.zeros((1, 1, 512, 512), dtype=np.float32)  # 1 MB
            yield f"p{i}", WordAttention(weights, np.zeros(512, dtype=bool), (0,), (0,))


def test_the_queue_is_bounded_by_bytes() -> None:
    producer = driver._Producer(_Slow())
    seen = []
    for item, _ in producer:
        seen.append(item)
        time.sleep(0.02)  # a slow consumer: the producer fills the queue
    assert seen == [f"p{i}" for i in range(12)]
    assert producer.max_bytes == 3 * 2**20
    assert 2 * 2**20 <= producer.peak_bytes <= 3 * 2**20
    assert producer.bytes == 0 and not any(t.name == "probes-extract" and t.is_alive() for t in threading.enumerate())


def test_the_pipelines_keep_the_extractors_queue_bound(models: dict[str, Path]) -> None:
    """The leaderboard's and coreference's wrappers around an extractor's pairs keep its ``max_queue_bytes``
    (a plain generator would lose it, and the queue would fall back to ``driver.QUEUE_BYTES``)."""
    from probes.runs.coreference import _noting
    from probes.runs.leaderboard_inputs import tracked as _tracked

    extractor = AttentionExtractor.from_pretrained(models["bert"], max_attention_mb=8, progress=False)
    sink: dict[str, Any] = {}
    tracked = _tracked(extractor, _sentences([5, 6]), "test", sink, "report")
    assert extractor.max_queue_bytes() == 4 * 2**20 != driver.QUEUE_BYTES
    assert driver._Producer(tracked).max_bytes == extractor.max_queue_bytes()
    noted = _noting(extractor.iter_attention(_sentences([4])), {})
    assert driver._Producer(noted).max_bytes == extractor.max_queue_bytes()
    assert [s.sent_id for s, _ in tracked] == ["s1", "s2"] and sink["report"]["skipped"] == []


# --------------------------------------------------------------------------- the CLI
def test_coref_cli_passes_the_budget_options_to_the_extractor(models: dict[str, Path], fixtures_dir: Path,
                                                              tmp_path: Path) -> None:
    import json

    from probes.cli import main

    out = tmp_path / "coref"
    tiny = str(fixtures_dir / "coref" / "tiny_gum.conllu")
    code = main(["coref", "--model", str(models["bert16"]), "--treebank", tiny,
                 "--select-on", "same", "--max-attention-mb", "0.1", "--max-batch-tokens", "64", "--dtype", "float32",
                 "--n-resamples", "10", "--no-figures", "--no-progress", "--device", "cpu", "--out", str(out)])
    assert code in (0, None)
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert record["model"]["max_attention_mb"] == 0.1 and record["model"]["max_batch_tokens"] == 64
    assert record["data"]["window_tokens"] == record["model"]["budget_tokens"] < record["model"]["max_tokens"]
    bad = main(["coref", "--model", "m", "--treebank", tiny, "--dtype", "float64"])
    assert bad != 0
