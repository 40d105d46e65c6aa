"""Word alignment and pooling (probes.extraction.align) against a slow, independently written reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from probes.errors import AlignmentError, ConfigError
from probes.extraction import align
from probes.extraction.align import FROM_POOLS, Alignment, align_words, alignment_from_word_ids, pool_batch
from tests.tiny_models import build


def reference_pool(attn: np.ndarray, word_ids: list[int | None], from_pool: str) -> np.ndarray:
    """Clark et al. §4.1 with plain loops: (L, H, T, T) token map -> (L, H, n, n) position map."""
    groups: list[list[int]] = []
    last = object()
    for t, w in enumerate(word_ids):
        if w is None or w != last:
            groups.append([t])
        else:
            groups[-1].append(t)
        last = w if w is not None else object()
    n_layers, n_heads = attn.shape[:2]
    out = np.zeros((n_layers, n_heads, len(groups), len(groups)))
    for layer in range(n_layers):
        for head in range(n_heads):
            for i, rows in enumerate(groups):
                merged = [[sum(attn[layer, head, r, c] for c in cols) for cols in groups] for r in rows]
                if from_pool == "mean":
                    row = [sum(m[j] for m in merged) / len(rows) for j in range(len(groups))]
                elif from_pool == "first":
                    row = merged[0]
                else:
                    row = [max(m[j] for m in merged) for j in range(len(groups))]
                    row = [v / sum(row) for v in row]
                out[layer, head, i] = row
    return out


def random_maps(rng: np.random.Generator, n_tokens: int, layers: int = 2, heads: int = 3) -> np.ndarray:
    logits = rng.normal(size=(layers, heads, n_tokens, n_tokens))
    e = np.exp(logits)
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)  # (L, H, T, T), rows sum to 1


def word_ids_of(token_counts: list[int], lead: int, trail: int) -> list[int | None]:
    ids: list[int | None] = [None] * lead
    for w, c in enumerate(token_counts):
        ids += [w] * c
    return ids + [None] * trail


@pytest.fixture(params=["product", "gather"])
def columns_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of pooling columns: a product with the 0/1 matrix (short inputs) and gathers (long ones)."""
    monkeypatch.setattr(align, "_GATHER_TOKENS", 10**9 if request.param == "product" else 0)
    return request.param


@pytest.mark.usefixtures("columns_by")
@pytest.mark.parametrize("from_pool", ["mean", "first", "max"])
def test_pool_matches_reference_loop(from_pool: str) -> None:
    rng = np.random.default_rng(0)
    ids = word_ids_of([1, 3, 1, 2, 1], lead=1, trail=1)
    attn = random_maps(rng, len(ids))
    al = alignment_from_word_ids(list(range(len(ids))), ids, ["w"] * 5)
    got = pool_batch(torch.from_numpy(attn)[None], [al], from_pool)[0].numpy()
    np.testing.assert_allclose(got, reference_pool(attn, ids, from_pool), atol=1e-6)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)


@pytest.mark.usefixtures("columns_by")
@pytest.mark.parametrize("from_pool", ["mean", "first", "max"])
def test_padded_batch_equals_single(from_pool: str) -> None:
    """Zero-padded maps (what masked keys give) in a batch pool exactly as the items alone."""
    rng = np.random.default_rng(1)
    shapes = [([2, 1, 1], 1, 1), ([1, 1, 4, 1, 2, 1], 1, 1), ([3], 0, 0)]
    items = []
    for counts, lead, trail in shapes:
        ids = word_ids_of(counts, lead, trail)
        items.append((ids, random_maps(rng, len(ids))))
    t_max = max(len(ids) for ids, _ in items)
    batch = np.zeros((len(items), 2, 3, t_max, t_max), dtype=np.float32)
    for b, (ids, attn) in enumerate(items):
        batch[b, :, :, : len(ids), : len(ids)] = attn
    als = [alignment_from_word_ids(list(range(len(ids))), ids, ["w"] * (max(i for i in ids if i is not None) + 1))
           for ids, _ in items]
    pooled = pool_batch(torch.from_numpy(batch), als, from_pool).numpy()
    for b, (ids, attn) in enumerate(items):
        n = als[b].n_positions
        np.testing.assert_allclose(pooled[b, :, :, :n, :n], reference_pool(attn, ids, from_pool), atol=1e-6)
        assert not pooled[b, :, :, n:, :].any() and not pooled[b, :, :, :, n:].any()


def model_like_batch(rng: np.random.Generator, items: list[list[int | None]], layers: int = 2,
                     heads: int = 3) -> np.ndarray:
    """(B, L, H, T, T) maps as a model gives them: padding keys get 0, padding queries attend real keys."""
    t_max = max(len(ids) for ids in items)
    logits = 3 * rng.normal(size=(len(items), layers, heads, t_max, t_max))
    for b, ids in enumerate(items):
        logits[b, ..., len(ids):] = -np.inf
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.usefixtures("columns_by")
@pytest.mark.parametrize("from_pool", FROM_POOLS)
def test_random_padded_batches_match_reference(from_pool: str) -> None:
    """Random batches of words of 1 to 9 tokens, with and without specials, padded as a model pads."""
    rng = np.random.default_rng(7)
    for _ in range(3):
        items = [word_ids_of(rng.choice([1, 1, 1, 2, 3, 9], size=int(rng.integers(1, 12))).tolist(),
                             lead=int(rng.integers(0, 2)), trail=int(rng.integers(0, 3))) for _ in range(4)]
        batch = model_like_batch(rng, items)
        als = [alignment_from_word_ids(list(range(len(ids))), ids, ["w"] * (max(i for i in ids if i is not None) + 1))
               for ids in items]
        pooled = pool_batch(torch.from_numpy(batch), als, from_pool).numpy()
        for b, ids in enumerate(items):
            n = als[b].n_positions
            want = reference_pool(batch[b, :, :, : len(ids), : len(ids)], ids, from_pool)
            np.testing.assert_allclose(pooled[b, :, :, :n, :n], want, rtol=1e-5, atol=1e-7)
            assert not pooled[b, :, :, n:, :].any() and not pooled[b, :, :, :, n:].any()


@pytest.mark.usefixtures("columns_by")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_maps_are_summed_in_float32(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(3)
    items = [word_ids_of([1, 4, 2, 1], 1, 1), word_ids_of([2, 1], 1, 1)]
    als = [alignment_from_word_ids(list(range(len(ids))), ids, ["w"] * (max(i for i in ids if i is not None) + 1))
           for ids in items]
    maps = torch.from_numpy(model_like_batch(rng, items)).to(dtype)  # (B, L, H, T, T)
    got = pool_batch(maps, als, "mean")
    assert got.dtype == torch.float32
    np.testing.assert_array_equal(got.numpy(), pool_batch(maps.float(), als, "mean").numpy())


@settings(max_examples=40, deadline=None)
@given(counts=st.lists(st.integers(1, 4), min_size=1, max_size=8), lead=st.integers(0, 2),
       trail=st.integers(0, 2), seed=st.integers(0, 10**6))
def test_rows_sum_to_one_and_specials_flagged(counts: list[int], lead: int, trail: int, seed: int) -> None:
    ids = word_ids_of(counts, lead, trail)
    al = alignment_from_word_ids(list(range(len(ids))), ids, ["w"] * len(counts))
    assert al.n_positions == lead + len(counts) + trail
    assert al.is_special.tolist() == [True] * lead + [False] * len(counts) + [True] * trail
    assert al.word_tokens.tolist() == counts
    attn = random_maps(np.random.default_rng(seed), len(ids), 1, 2)
    got = pool_batch(torch.from_numpy(attn)[None], [al], "mean")[0].numpy()
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got, reference_pool(attn, ids, "mean"), atol=1e-6)


def test_word_without_token_raises_alignment_error() -> None:
    with pytest.raises(AlignmentError, match=r"corpus.conllu:12: sentence 's-7': word 2 \(1-based\) '\\u200b'"):
        alignment_from_word_ids([1, 5, 6, 2], [None, 0, 2, None], ["a", "\u200b", "b"], item_id="s-7",
                                path="corpus.conllu", line=12)


def test_non_contiguous_word_raises() -> None:
    with pytest.raises(AlignmentError, match="not contiguous"):
        alignment_from_word_ids([1, 2, 3], [0, 1, 0], ["a", "b"], item_id="x")


@pytest.fixture(scope="module")
def bert_tokenizer(tmp_path_factory: pytest.TempPathFactory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build("bert", tmp_path_factory.mktemp("tok")))


def test_align_words_wordpiece(bert_tokenizer) -> None:
    al = align_words(bert_tokenizer, ["The", "unbelievable", "fox", "!"])
    # [CLS] the un ##believ ##able fox ! [SEP]
    assert al.word_tokens.tolist() == [1, 3, 1, 1]
    assert al.token_position.tolist() == [0, 1, 2, 2, 2, 3, 4, 5]
    assert al.is_special.tolist() == [True, False, False, False, False, True]
    assert isinstance(al, Alignment) and al.n_words == 4 and al.n_special_tokens == 2


def test_align_words_zero_width_word(bert_tokenizer) -> None:
    with pytest.raises(AlignmentError, match=r"sentence 'd1': word 2 \(1-based\)"):
        align_words(bert_tokenizer, ["the", "\u200b", "fox"], item_id="d1")


def test_slow_tokenizer_rejected() -> None:
    class Slow:
        is_fast = False

    with pytest.raises(ConfigError, match="use_fast=True"):
        align_words(Slow(), ["a"])


def test_pool_names_are_checked() -> None:
    al = alignment_from_word_ids([1], [0], ["a"])
    with pytest.raises(ConfigError, match="from_pool must be one of"):
        pool_batch(torch.ones(1, 1, 1, 1, 1), [al], "median")


def test_tiny_model_folder_is_hub_style(tmp_path: Path) -> None:
    """The tiny-model folder is a hub-style folder (from_pretrained works on it)."""
    folder = build("bert", tmp_path)
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
