"""Rows-only attention (``probes.extraction.rows``): only the word rows a stream asks for are computed.

The reference is the same extractor with ``selective=False`` (eager attention, full maps, the path the
hooked-capture tests pin to ``output_attentions=True``): the rows asked for must equal it to float
rounding (the model's own attention runs through SDPA, which rounds differently from eager attention),
every other row must be NaN (never a silent zero), and whatever the mode cannot serve (``max`` pooling,
kept token maps, an item asking for every row, a model whose attention it does not model) must come back
as full maps, equal to the reference.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.analysis.split import Half, half_of
from probes.corpora.types import Sentence
from probes.errors import AlignmentError, ConfigError
from probes.extraction import rows as row_attention
from probes.extraction.align import BatchPooler, alignment_from_word_ids
from probes.extraction.attention import WordAttention
from probes.extraction.extractor import AttentionExtractor
from tests.tiny_models import build, tiny_families, uses_attention_interface

WORDS = ("the quick brown fox jumps over the lazy dog and the cat sat on the mat , "
         "she did n't know whether the results were right : un-believ-able !").split()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rows_models")
    return {name: build(name, root) for name in tiny_families()}


def _sentences(lengths: list[int]) -> list[Sentence]:
    out = []
    for i, n in enumerate(lengths):
        words = tuple((WORDS * (n // len(WORDS) + 1))[i % 5: i % 5 + n])
        out.append(Sentence(f"s{i + 1}", words, tuple(range(n)), ("dep",) * n))
    return out


def _asked(sentence: Sentence) -> list[int]:
    """Every third word from the item's own offset (the first item: none at all)."""
    k = int(sentence.sent_id[1:])
    return [] if k == 1 else list(range(k % 3, len(sentence.words), 3))


def _pairs(extractor: AttentionExtractor, items: list[Sentence], rows: Any = _asked
           ) -> list[tuple[Sentence, WordAttention]]:
    return list(extractor.iter_words(items, words=lambda s: s.words, rows=rows))


def _twins(folder: Path, **options: Any) -> tuple[AttentionExtractor, AttentionExtractor]:
    options = {"batch_size": 3, **options}
    selective = AttentionExtractor.from_pretrained(folder, device="cpu", progress=False, **options)
    full = AttentionExtractor(selective.model, selective.tokenizer, device="cpu", progress=False, selective=False,
                              **options)
    return selective, full


def _check_rows(got: list[tuple[Sentence, WordAttention]], want: list[tuple[Sentence, WordAttention]],
                atol: float = 2e-5) -> None:
    """Rows-only pairs hold exactly the rows asked for, equal to the full maps' to ``atol``, and nothing else."""
    assert [s.sent_id for s, _ in got] == [s.sent_id for s, _ in want] and got
    for (sentence, a), (_, b) in zip(got, want):
        asked = _asked(sentence)
        assert a.row_positions is not None and a.row_weights is not None
        np.testing.assert_array_equal(a.row_positions, a.word_index[asked])  # the rows asked for, no more
        np.testing.assert_allclose(a.word_rows(asked), b.word_rows(asked), rtol=0, atol=atol)
        assert a.weights.shape == b.weights.shape and np.isnan(a.weights).all()  # nothing computed there
        assert not a.weights.flags.writeable and b.row_positions is None
        others = sorted(set(range(len(sentence.words))) - set(asked))
        if others:
            with pytest.raises(AlignmentError, match="were not computed"):
                a.word_rows(others[:1])
        with pytest.raises(AlignmentError, match="word_rows"):
            a.words_only()


# --------------------------------------------------------------------------- the rows asked for
@pytest.mark.parametrize("family", tiny_families())
@pytest.mark.parametrize("from_pool", ["mean", "first"])
def test_rows_asked_for_equal_full_maps(models: dict[str, Path], family: str, from_pool: str) -> None:
    if not uses_attention_interface(models[family]):
        pytest.skip("no attention interface: full maps (test_a_model_without_the_attention_interface_...)")
    items = _sentences([5, 14, 9, 22, 3, 17, 11])
    selective, full = _twins(models[family], from_pool=from_pool)
    got, want = _pairs(selective, items), _pairs(full, items)
    _check_rows(got, want)
    assert selective.report.n_rows_only == len(got)
    assert full.report.n_rows_only == 0
    assert selective.model.config._attn_implementation == "eager", "the model must be left as it was loaded"


def test_windowed_inputs_keep_the_rows_asked_for(models: dict[str, Path]) -> None:
    items = _sentences([40, 7])  # 40 words run in windows of at most 24 tokens
    selective, full = _twins(models["bert"], max_length=24, on_long="window")
    got, want = _pairs(selective, items), _pairs(full, items)
    assert "windows" in got[0][1].meta and got[0][1].meta["windows"] == want[0][1].meta["windows"]
    _check_rows(got, want)


def test_a_subset_of_layers_and_heads(models: dict[str, Path]) -> None:
    items = _sentences([8, 13, 6])
    selective, full = _twins(models["llama"], layers=[1], heads=[0, 3])
    got, want = _pairs(selective, items), _pairs(full, items)
    assert got[0][1].weights.shape[:2] == (1, 2)
    _check_rows(got, want)


@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="accelerate is not installed")
def test_rows_through_a_device_map_with_a_layer_on_disk(models: dict[str, Path]) -> None:
    items = _sentences([7, 12, 5])
    device_map = {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "disk", "pooler": "cpu"}
    selective = AttentionExtractor.from_pretrained(models["bert"], progress=False, batch_size=3,
                                                   device_map=device_map)
    full = AttentionExtractor.from_pretrained(models["bert"], progress=False, batch_size=3, selective=False)
    got, want = _pairs(selective, items), _pairs(full, items)
    assert selective.report.n_rows_only == len(items)
    _check_rows(got, want)


@pytest.mark.parametrize("device, dtype, tolerance", [
    ("cpu", "bfloat16", 2.0**-7),  # as tests/extraction/test_gpu_paths.py: two bfloat16 steps
    pytest.param("cuda", "float32", 1e-5, marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                  reason="needs a CUDA GPU")),
    pytest.param("cuda", "bfloat16", 2.0**-7, marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                      reason="needs a CUDA GPU")),
])
def test_rows_on_other_devices_and_dtypes(models: dict[str, Path], device: str, dtype: str,
                                          tolerance: float) -> None:
    items = _sentences([7, 12, 5, 18])
    for family in ("bert", "llama"):
        selective = AttentionExtractor.from_pretrained(models[family], progress=False, batch_size=3, device=device,
                                                       dtype=dtype)
        full = AttentionExtractor.from_pretrained(models[family], progress=False, batch_size=3, device="cpu",
                                                  selective=False)
        got, want = _pairs(selective, items), _pairs(full, items)
        assert selective.report.n_rows_only == len(got)
        _check_rows(got, want, atol=tolerance)


# --------------------------------------------------------------------------- full maps where rows cannot serve
@pytest.mark.parametrize("options", [{"from_pool": "max"}, {"keep_tokens": True}])
def test_modes_that_need_whole_maps_get_them(models: dict[str, Path], options: dict[str, Any]) -> None:
    items = _sentences([6, 10])
    selective, full = _twins(models["bert"], **options)
    got, want = _pairs(selective, items), _pairs(full, items)
    assert selective.report.n_rows_only == 0
    for (_, a), (_, b) in zip(got, want):
        np.testing.assert_array_equal(a.weights, b.weights)


def test_an_item_asking_for_every_row_gets_its_batch_full(models: dict[str, Path]) -> None:
    items = _sentences([6, 10, 7])
    selective, full = _twins(models["bert"])
    got = _pairs(selective, items, rows=lambda s: None if s.sent_id == "s2" else [0])
    want = _pairs(full, items)
    assert selective.report.n_rows_only == 0  # one batch of 3: every item full
    for (_, a), (_, b) in zip(got, want):
        np.testing.assert_array_equal(a.weights, b.weights)


def test_a_model_without_the_attention_interface_gets_full_maps(models: dict[str, Path]) -> None:
    items = _sentences([6, 10])
    [family] = [name for name, folder in models.items() if not uses_attention_interface(folder)]  # DeBERTa-v2
    selective, full = _twins(models[family])
    got, want = _pairs(selective, items), _pairs(full, items)
    assert selective.report.n_rows_only == 0
    for (_, a), (_, b) in zip(got, want):
        np.testing.assert_array_equal(a.weights, b.weights)


def test_attention_it_does_not_model_falls_back_to_eager(models: dict[str, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AttentionInterface

    items = _sentences([6, 10, 4, 9])
    selective, full = _twins(models["bert"], batch_size=2)
    row_attention.register()

    def capped(module: Any, *args: Any, **kwargs: Any) -> Any:
        return row_attention.rows_attention(module, *args, softcap=30.0, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, row_attention.IMPLEMENTATION, capped)
    got, want = _pairs(selective, items), _pairs(full, items)
    assert selective._rows_ok is False and selective.report.n_rows_only == 0
    assert selective.model.config._attn_implementation == "eager"
    for (_, a), (_, b) in zip(got, want):
        np.testing.assert_array_equal(a.weights, b.weights)


def test_rows_outside_the_item_are_refused(models: dict[str, Path]) -> None:
    selective, _ = _twins(models["bert"])
    with pytest.raises(ConfigError, match=r"s1: rows asked for must be word indices in 0\.\.4, found 0\.\.5"):
        _pairs(selective, _sentences([5]), rows=lambda s: [0, 5])


# --------------------------------------------------------------------------- pooling rows
@pytest.mark.parametrize("from_pool", ["mean", "first"])
@pytest.mark.parametrize("n_tok", [20, 200])  # below and above the gather threshold of column pooling
def test_pool_rows_equals_whole_map_pooling(from_pool: str, n_tok: int) -> None:
    gen = np.random.default_rng(0)
    alignments = []
    for length in (n_tok, n_tok - 7):
        word_ids, w = [None], 0
        while len(word_ids) < length - 1:
            word_ids.extend([w] * int(gen.integers(1, 4)))
            w += 1
        word_ids = word_ids[: length - 1] + [None]
        n_words = max(i for i in word_ids if i is not None) + 1
        alignments.append(alignment_from_word_ids(list(range(length)), word_ids, ["w"] * n_words))
    heads = 3
    attn = torch.softmax(torch.from_numpy(gen.normal(size=(2, heads, n_tok, n_tok)).astype(np.float32)), -1)
    pooler = BatchPooler(alignments, n_tok, from_pool)
    whole = pooler.pool(attn)  # (B, H, n, n)
    asked_words = [np.array([0, 2, 3]), np.array([1])]
    tokens, targets = [], []
    for al, words in zip(alignments, asked_words):
        positions = np.flatnonzero(~al.is_special)[words]
        keep = np.isin(al.token_position, positions)
        if from_pool == "first":
            keep[1:] &= al.token_position[1:] != al.token_position[:-1]
        tokens.append(np.flatnonzero(keep))
        targets.append(al.token_position[keep])
    width = max(len(t) for t in tokens)
    tok = np.zeros((2, width), dtype=np.int64)
    tgt = np.full((2, width), pooler.n_pos, dtype=np.int64)
    for b in range(2):
        tok[b, : len(tokens[b])], tgt[b, : len(targets[b])] = tokens[b], targets[b]
    rows = attn.gather(2, torch.from_numpy(tok)[:, None, :, None].expand(2, heads, width, n_tok))
    targets_t = torch.from_numpy(tgt)
    got = pooler.pool_rows(rows, targets_t).numpy()  # (B, H, P, n)
    held = pooler.row_positions(targets_t)
    for b, al in enumerate(alignments):
        positions = np.flatnonzero(~al.is_special)[asked_words[b]]
        np.testing.assert_array_equal(held[b], positions)
        np.testing.assert_allclose(got[b][:, : len(positions)], whole[b][:, positions].numpy(), rtol=0, atol=1e-6)
        assert not got[b][:, len(positions):].any()  # padding slots are zero rows


# --------------------------------------------------------------------------- what analyses ask for
def test_half_asks_nothing_for_the_other_half() -> None:
    class Asks:
        def rows(self, item: Any) -> list[int]:
            return [1, 2]

    sentences = _sentences([4] * 12)
    select = Half(Asks(), "select")  # type: ignore[arg-type]
    for s in sentences:
        assert select.rows(s) == ([1, 2] if half_of(s.sent_id) == "select" else [])


# --------------------------------------------------------------------------- whole pipelines
def _arrays(result: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(result).items() if isinstance(v, (np.ndarray, dict))}


@pytest.mark.parametrize("kind", ["coref", "bridging"])
@pytest.mark.parametrize("direction", ["anaphor_to_antecedent", "antecedent_to_anaphor"])
def test_coreference_and_bridging_tables_are_unchanged(models: dict[str, Path], kind: str, direction: str) -> None:
    """Both halves (selection and report) of a GUM fixture, rows only vs full maps: the same counts."""
    from probes.runs.coreference import bridging, coreference

    corpus = Path(__file__).parents[1] / "fixtures" / "coref" / "tiny_gum_halves.conllu"
    run = coreference if kind == "coref" else bridging
    selective, full = _twins(models["bert"], batch_size=4)
    got = run(selective, corpus, direction=direction, n_resamples=10, progress=False)
    want = run(full, corpus, direction=direction, n_resamples=10, progress=False)
    rows_only = got.record.details.extraction_report["n_rows_only"]
    assert rows_only == (got.record.details.extraction_report["n_yielded"] if direction == "anaphor_to_antecedent" else 0)
    assert rows_only or direction != "anaphor_to_antecedent"
    for mine, theirs in ((got.result, want.result), (got.selection, want.selection)):
        a, b = _arrays(mine), _arrays(theirs)
        assert a.keys() == b.keys() and a
        for key in a:
            if isinstance(a[key], dict):
                assert a[key] == b[key], key
            elif np.issubdtype(a[key].dtype, np.integer):
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            else:
                np.testing.assert_allclose(a[key], b[key], rtol=0, atol=1e-5, err_msg=key)
        if kind == "coref":
            assert a["total"].sum() > 0


def test_reading_a_row_not_computed_is_an_error() -> None:
    from probes.analysis.mentions import word_rows

    is_special = np.array([True, False, False, False, True])  # [CLS] w0 w1 w2 [SEP]
    rows = np.full((1, 1, 2, 5), 0.1, dtype=np.float32)
    rows[0, 0, 1, 3] = 0.6  # the row of w2 (position 3), to w2
    nothing = np.broadcast_to(np.float32(np.nan), (1, 1, 5, 5))
    wa = WordAttention(nothing, is_special, (0,), (0,), row_weights=rows, row_positions=np.array([1, 3]))
    np.testing.assert_allclose(word_rows(wa, np.array([2, 0])), [[[[0.1, 0.1, 0.6], [0.1, 0.1, 0.1]]]])
    with pytest.raises(AlignmentError, match=r"rows of words \[1\] were not computed"):
        word_rows(wa, np.array([0, 1]))
    empty = WordAttention(nothing, is_special, (0,), (0,), row_weights=rows[:, :, :0], row_positions=np.array([], int))
    with pytest.raises(AlignmentError, match=r"words \[0\]"):
        empty.word_rows([0])


# --------------------------------------------------------------------------- stopping after the last kept layer
@pytest.mark.parametrize("selective", [True, False])
def test_the_pass_stops_after_the_last_kept_layer(models: dict[str, Path], selective: bool) -> None:
    """Layers above the last one kept are never run (rows only and full maps alike), and the maps equal
    those of a pass that runs every layer (``output_attentions=True``, the fallback path)."""
    items = _sentences([6, 11])
    extractor = AttentionExtractor.from_pretrained(models["bert"], device="cpu", progress=False, layers=[0],
                                                   selective=selective)
    reference = AttentionExtractor(extractor.model, extractor.tokenizer, device="cpu", progress=False, layers=[0],
                                   selective=False)
    reference._sites = False  # output_attentions=True: the whole model runs
    ran: list[str] = []
    handle = extractor.model.encoder.layer[1].register_forward_hook(lambda *args: ran.append("layer 2"))
    try:
        got = _pairs(extractor, items)
        assert ran == [], "the layer above the last kept one ran"
        want = _pairs(reference, items)
        assert ran, "the control: a full pass runs it"
    finally:
        handle.remove()
    for (sentence, a), (_, b) in zip(got, want, strict=True):
        asked = _asked(sentence)
        np.testing.assert_allclose(a.word_rows(asked), b.word_rows(asked), rtol=0, atol=2e-5)
