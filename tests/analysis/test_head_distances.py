"""Clark §6 head distances: hand value, slow reference, symmetry, identical heads, budget, merge."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import probes.analysis.head_distances as hd
from probes.analysis.head_distances import DEFAULT_JS_SENTENCES, DistanceResult, HeadDistances
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import TokenAttention, WordAttention
from probes.results import equal


def token_pair(weights: np.ndarray, sent_id: str = "s", *, layers: tuple[int, ...] | None = None,
               heads: tuple[int, ...] | None = None) -> tuple[Any, WordAttention]:
    """An item and its WordAttention carrying hand-made token maps ``weights`` (L, H, T, T): [CLS] x.. [SEP]."""
    n_layers, n_heads, n_tok = weights.shape[0], weights.shape[1], weights.shape[-1]
    word_of = np.r_[-1, np.arange(n_tok - 2), -1].astype(np.intp)
    start, end = np.zeros(n_tok, bool), np.zeros(n_tok, bool)
    start[0], end[-1] = True, True
    tokens = TokenAttention(weights.astype(np.float32), tuple(f"t{i}" for i in range(n_tok)), word_of, start, end)
    layers = layers or tuple(range(n_layers))
    heads = heads or tuple(range(n_heads))
    word = WordAttention(weights.astype(np.float32), start | end, layers, heads, {"truncated": 0}, tokens)
    return SimpleNamespace(sent_id=sent_id), word


def random_maps(rng: np.random.Generator, n_tok: int, shape: tuple[int, int] = (2, 3)) -> np.ndarray:
    w = rng.random((*shape, n_tok, n_tok)) ** 3  # peaked rows, some near 0
    return (w / w.sum(-1, keepdims=True)).astype(np.float32)


def slow_distance(maps: list[np.ndarray], smoothing: float = 0.001) -> np.ndarray:
    """Reference: per pair, per item, per row, JS = ½KL(P‖M) + ½KL(Q‖M) in float64."""
    n_layers, n_heads = maps[0].shape[:2]
    n = n_layers * n_heads
    out = np.zeros((n, n))
    for w in maps:
        t = w.shape[-1]
        flat = w.astype(np.float64).reshape(n, t, t) * (1 - smoothing) + smoothing / t
        for a in range(n):
            for b in range(n):
                for i in range(t):
                    p, q = flat[a, i], flat[b, i]
                    m = (p + q) / 2
                    out[a, b] += 0.5 * np.sum(p * np.log(p / m)) + 0.5 * np.sum(q * np.log(q / m))
    return out


def run(analysis: HeadDistances, pairs: list[tuple[Any, WordAttention]]) -> DistanceResult:
    for item, word in pairs:
        analysis.update(item, word)
    return analysis.compute()


def test_hand_value_two_opposite_heads() -> None:
    # T = 2, every row of head 1 is [1, 0], of head 2 [0, 1]; smoothed: [0.9995, 0.0005] and its mirror,
    # M = [0.5, 0.5], so JS = ln 2 - H(0.9995, 0.0005) = 0.693147 - 0.004300 = 0.688847 per row, 2 rows.
    w = np.zeros((1, 2, 2, 2), np.float32)
    w[0, 0, :, 0] = 1
    w[0, 1, :, 1] = 1
    result = run(HeadDistances(dtype="float64"), [token_pair(w)])
    h = -(0.9995 * math.log(0.9995) + 0.0005 * math.log(0.0005))
    assert h == pytest.approx(0.0043003, abs=1e-7)
    assert result.distance[0, 1] == pytest.approx(2 * (math.log(2) - h), abs=1e-12)
    assert result.distance[0, 1] == pytest.approx(1.377694, abs=1e-6)
    assert result.n_rows == 2 and result.n_items == 1
    assert result.per_row()[0, 1] == pytest.approx(math.log(2) - h, abs=1e-12)


@pytest.mark.parametrize("chunk", [hd.CHUNK_ELEMENTS, 40])  # 40: one pair per chunk, many chunks
def test_matches_slow_reference(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(hd, "CHUNK_ELEMENTS", chunk)
    rng = np.random.default_rng(0)
    maps = [random_maps(rng, t) for t in (3, 5, 8, 4)]
    result = run(HeadDistances(dtype="float64"), [token_pair(w, f"s{i}") for i, w in enumerate(maps)])
    reference = slow_distance(maps)
    np.testing.assert_allclose(result.distance, reference, rtol=0, atol=1e-9)
    fast = run(HeadDistances(), [token_pair(w, f"s{i}") for i, w in enumerate(maps)])  # float32 per item
    np.testing.assert_allclose(fast.distance, reference, rtol=2e-5, atol=1e-6)
    assert result.distance.dtype == np.float64 and result.distance.shape == (6, 6)
    assert result.n_rows == 3 + 5 + 8 + 4 and result.n_items == 4
    np.testing.assert_array_equal(result.distance, result.distance.T)
    assert np.all(np.diag(result.distance) == 0) and np.all(result.distance[~np.eye(6, dtype=bool)] > 0)


def test_other_smoothing_matches_reference() -> None:
    rng = np.random.default_rng(1)
    maps = [random_maps(rng, 6)]
    result = run(HeadDistances(smoothing=0.05, dtype="float64"), [token_pair(maps[0])])
    np.testing.assert_allclose(result.distance, slow_distance(maps, 0.05), rtol=0, atol=1e-9)


def test_identical_heads_are_at_zero_and_order_is_layer_major() -> None:
    rng = np.random.default_rng(2)
    pairs = []
    for i, t in enumerate((4, 7, 9)):
        w = random_maps(rng, t, (3, 4))
        w[2, 1] = w[0, 3]  # head 3-2 planted equal to head 1-4
        pairs.append(token_pair(w, f"s{i}"))
    result = run(HeadDistances(), pairs)
    a, b = 0 * 4 + 3, 2 * 4 + 1  # head index = layer * H + head
    assert result.distance[a, b] == 0.0 and result.distance[b, a] == 0.0
    off = result.distance[~np.eye(12, dtype=bool)]
    assert (off > 0).sum() == off.size - 2
    assert result.head_labels()[a] == "1-4" and result.head_labels()[b] == "3-2"
    table = result.to_pandas()
    assert len(table) == 12 * 11 // 2
    row = table[(table.head_a == "1-4") & (table.head_b == "3-2")]
    assert len(row) == 1 and row.distance.iloc[0] == 0.0


def test_budget_ids_and_items_without_tokens() -> None:
    rng = np.random.default_rng(3)
    with_tokens = [token_pair(random_maps(rng, t), f"s{i}") for i, t in enumerate((4, 5, 6, 7))]
    item, word = with_tokens[0]
    bare = (SimpleNamespace(sent_id="bare"), WordAttention(word.weights, word.is_special, word.layers, word.heads))
    capped = run(HeadDistances(max_items=2), [bare, *with_tokens])
    first_two = run(HeadDistances(max_items=None), with_tokens[:2])
    np.testing.assert_array_equal(capped.distance, first_two.distance)
    assert (capped.n_items, capped.n_rows, capped.n_without_tokens, capped.n_unused) == (2, 9, 1, 2)
    chosen = run(HeadDistances(ids={"s1", "s3"}), [bare, *with_tokens])
    expected = run(HeadDistances(), [with_tokens[1], with_tokens[3]])
    np.testing.assert_array_equal(chosen.distance, expected.distance)
    assert (chosen.n_items, chosen.n_unused, chosen.n_without_tokens) == (2, 2, 1)
    only_bare = run(HeadDistances(), [bare])
    assert only_bare.n_items == 0 and only_bare.n_without_tokens == 1 and only_bare.distance.shape == (0, 0)
    assert DEFAULT_JS_SENTENCES == HeadDistances().max_items


def test_merge_of_shards_equals_one_pass() -> None:
    rng = np.random.default_rng(4)
    pairs = [token_pair(random_maps(rng, t), f"s{i}") for i, t in enumerate((3, 6, 5, 8, 4))]
    whole = run(HeadDistances(), pairs)
    a, b = HeadDistances(), HeadDistances()
    run(a, pairs[:2])
    run(b, pairs[2:])
    a.merge(b)
    merged = a.compute()
    np.testing.assert_allclose(merged.distance, whole.distance, rtol=1e-12, atol=0)
    assert (merged.n_items, merged.n_rows) == (whole.n_items, whole.n_rows)
    fresh = HeadDistances()
    fresh.merge(a)
    fresh.merge(HeadDistances())
    assert equal(fresh.compute(), merged)
    with pytest.raises(ConfigError, match="max_items"):
        HeadDistances().merge(HeadDistances(max_items=3))


def test_checks() -> None:
    rng = np.random.default_rng(5)
    analysis = HeadDistances()
    analysis.update(*token_pair(random_maps(rng, 4)))
    with pytest.raises(AlignmentError, match="layers"):
        analysis.update(*token_pair(random_maps(rng, 4, (1, 3))))
    with pytest.raises(ConfigError, match="max_items"):
        HeadDistances(max_items=0)
    with pytest.raises(ConfigError, match="smoothing"):
        HeadDistances(smoothing=0.0)


def test_nearly_identical_heads_never_give_a_negative_distance() -> None:
    """Near-uniform heads differ by rounding only: float32 H(M) - (H(P) + H(Q))/2 may fall a hair below 0."""
    rng = np.random.default_rng(11)
    t = 30
    base = np.full((t, t), 1.0 / t, np.float32)
    w = np.stack([base + rng.normal(0, 1e-7, (t, t)).astype(np.float32) for _ in range(6)]).reshape(2, 3, t, t)
    w /= w.sum(-1, keepdims=True)
    result = run(HeadDistances(), [token_pair(w)])
    assert (result.distance >= 0).all()
    assert result.distance.max() < 1e-5


def test_kept_items_sum_to_the_distances_and_hold_each_item_alone() -> None:
    rng = np.random.default_rng(7)
    maps = [random_maps(rng, t) for t in (4, 6, 5)]
    pairs = [token_pair(w, f"s{i}") for i, w in enumerate(maps)]
    bare = (SimpleNamespace(sent_id="bare"), WordAttention(maps[0], pairs[0][1].is_special, (0, 1), (0, 1, 2)))
    result = run(HeadDistances(keep_items=True, max_items=2), [pairs[0], bare, pairs[1], pairs[2]])
    assert result.item_ids == ("s0", "s1") and result.item_rows.tolist() == [4, 6]  # the budget: 2 items
    first, second = hd.pair_index(6)
    assert result.item_pairs.shape == (2, 15) and result.item_pairs.dtype == np.float32
    np.testing.assert_allclose(result.item_pairs.sum(0), result.distance[first, second], rtol=1e-6)
    alone = run(HeadDistances(), [pairs[1]])  # an item's row is the distance of that item alone
    np.testing.assert_allclose(result.item_pairs[1], alone.distance[first, second], rtol=1e-6)
    np.testing.assert_allclose(result.item_pairs[0], slow_distance([maps[0]])[first, second], rtol=1e-4)
    plain = run(HeadDistances(max_items=2), [pairs[0], bare, pairs[1], pairs[2]])
    assert plain.item_pairs is None and plain.item_rows is None and plain.item_ids == ()
    np.testing.assert_array_equal(plain.distance, result.distance)


def test_merge_keeps_every_item_of_both_shards() -> None:
    rng = np.random.default_rng(8)
    pairs = [token_pair(random_maps(rng, t), f"s{i}") for i, t in enumerate((3, 6, 5, 8, 4))]
    whole = run(HeadDistances(keep_items=True), pairs)
    a, b = HeadDistances(keep_items=True), HeadDistances(keep_items=True)
    run(a, pairs[:2])
    run(b, pairs[2:])
    a.merge(b)
    merged = a.compute()
    assert merged.item_ids == tuple(f"s{i}" for i in range(5)) and merged.item_rows.tolist() == [3, 6, 5, 8, 4]
    np.testing.assert_array_equal(merged.item_pairs, whole.item_pairs)
    np.testing.assert_allclose(merged.distance, whole.distance, rtol=1e-12, atol=0)
    with pytest.raises(ConfigError, match="keep_items"):
        HeadDistances().merge(HeadDistances(keep_items=True))
    empty = HeadDistances(keep_items=True).compute()
    assert empty.item_pairs.shape == (0, 0) and empty.item_rows.shape == (0,)
