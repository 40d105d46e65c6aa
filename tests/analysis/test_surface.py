"""Surface statistics (probes.analysis.surface) against hand computations on hand-made maps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probes.analysis.surface import SURFACE_KEYS, SurfaceResult, SurfaceStats
from probes.corpora.types import Sentence
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import TokenAttention, WordAttention
from probes.results import equal, load

# Example 1: [CLS] a . [SEP]; head 0 below, head 1 uniform (0.25 everywhere).
A1 = [[0.50, 0.20, 0.10, 0.20],
      [0.10, 0.30, 0.40, 0.20],
      [0.00, 0.60, 0.20, 0.20],
      [0.25, 0.25, 0.00, 0.50]]
# Example 2: [CLS] b [SEP]; both heads attend to themselves (identity).


def token_pair(maps: list, tokens: tuple[str, ...], start: list[bool], end: list[bool],
               words: tuple[str, ...] | None = None) -> tuple[Sentence, WordAttention]:
    """A sentence and attention whose token maps are ``maps`` ``(H, T, T)`` (one layer)."""
    w = np.asarray(maps, dtype=np.float32)[None]  # (1, H, T, T)
    start_a, end_a = np.array(start), np.array(end)
    word_of = np.where(start_a | end_a, -1, np.cumsum(~(start_a | end_a)) - 1)
    words = words or tuple(t for t, s in zip(tokens, start_a | end_a) if not s)
    ta = TokenAttention(w, tokens, word_of, start_a, end_a)
    heads = tuple(range(w.shape[1]))
    wa = WordAttention(w, start_a | end_a, (0,), heads, {"truncated": 0}, ta)
    sentence = Sentence("s", words, tuple(0 for _ in words), tuple("dep" for _ in words))
    return sentence, wa


def example_1() -> tuple[Sentence, WordAttention]:
    return token_pair([A1, np.full((4, 4), 0.25)], ("[CLS]", "a", ".", "[SEP]"),
                      [True, False, False, False], [False, False, False, True])


def example_2() -> tuple[Sentence, WordAttention]:
    return token_pair([np.eye(3), np.eye(3)], ("[CLS]", "b", "[SEP]"), [True, False, False], [False, False, True])


def smoothed_entropy(row: list[float]) -> float:
    """Entropy in nats of one row smoothed as 0.9999 a + 0.0001 / n (plain Python)."""
    n = len(row)
    total = 0.0
    for a in row:
        p = 0.9999 * a + 0.0001 / n
        total -= p * math.log(p)
    return total


# Hand numbers of example 1, head 0 (n = 4):
#   to_cls   = column 0 = (0.5 + 0.1 + 0.0 + 0.25) / 4 = 0.2125
#   to_sep   = column 3 = (0.2 + 0.2 + 0.2 + 0.5) / 4  = 0.275
#   to_punct = column 2 = (0.1 + 0.4 + 0.2 + 0.0) / 4  = 0.175
#   to_self  = (0.5 + 0.3 + 0.2 + 0.5) / 4             = 0.375
#   to_next  = (A01 + A12 + A23) = (0.2 + 0.4 + 0.2) / 4 = 0.2
#   to_prev  = (A10 + A21 + A32) = (0.1 + 0.6 + 0.0) / 4 = 0.175
#   sep_to_sep = A33 / 1 = 0.5;  other_to_sep = (0.2 + 0.2 + 0.2) / 3 = 0.2
# Head 1 (uniform): every mass 0.25, next/prev 3 x 0.25 / 4 = 0.1875, entropy ln 4 = 1.386294.
# Example 2 (identity, n = 3): to_cls = to_sep = 1/3, punct 0, self 1, next = prev = 0,
#   sep_to_sep = 1, other_to_sep = 0; entropy = entropy_first = e3 = the smoothed one-hot's (~0.000754:
#   2 x (0.0001/3) ln(3/0.0001) + 0.99993 x 0.0000667).
E3 = smoothed_entropy([1.0, 0.0, 0.0])
HAND_1 = {
    "to_cls": (0.2125, 0.25), "to_sep": (0.275, 0.25), "to_punct": (0.175, 0.25), "to_self": (0.375, 0.25),
    "to_next": (0.2, 0.1875), "to_prev": (0.175, 0.1875),
    "entropy": (sum(smoothed_entropy(r) for r in A1) / 4, math.log(4)),
    "entropy_first": (smoothed_entropy(A1[0]), math.log(4)), "sep_to_sep": (0.5, 0.25), "other_to_sep": (0.2, 0.25),
}
HAND_2 = {"to_cls": 1 / 3, "to_sep": 1 / 3, "to_punct": 0.0, "to_self": 1.0, "to_next": 0.0, "to_prev": 0.0,
          "entropy": E3, "entropy_first": E3, "sep_to_sep": 1.0, "other_to_sep": 0.0}


def run(analysis: SurfaceStats, pairs) -> SurfaceResult:
    for item, attention in pairs:
        analysis.update(item, attention)
    return analysis.compute()


def test_every_key_equals_the_hand_computation_on_one_example() -> None:
    # by hand, unsmoothed rows: 1.2206, 1.2799, 0.9503, 1.0397 nats; the two zeros add ~0.00026 each
    assert abs(HAND_1["entropy"][0] - 1.1228) < 1e-4 and abs(E3 - 0.000754) < 1e-6
    result = run(SurfaceStats(), [example_1()])
    assert set(result.keys) == set(SURFACE_KEYS) == set(HAND_1)
    for key, expected in HAND_1.items():
        np.testing.assert_allclose(result.mean(key), [expected], rtol=1e-5, atol=1e-7, err_msg=key)
    assert result.uniform_entropy == pytest.approx(math.log(4), abs=1e-9)
    assert result.n_examples == 1 and result.n_without_tokens == 0 and result.level == "token"


def test_examples_are_averaged_without_weights() -> None:
    result = run(SurfaceStats(), [example_1(), example_2()])
    for key in SURFACE_KEYS:
        expected = [(HAND_1[key][0] + HAND_2[key]) / 2, (HAND_1[key][1] + HAND_2[key]) / 2]
        np.testing.assert_allclose(result.mean(key), [expected], rtol=1e-5, atol=1e-7, err_msg=key)
    assert result.uniform_entropy == pytest.approx((math.log(4) + math.log(3)) / 2, abs=1e-9)
    table = result.to_pandas()
    assert list(table["head_name"]) == ["1-1", "1-2"] and list(table.columns[3:]) == list(SURFACE_KEYS)
    assert table.loc[0, "to_sep"] == pytest.approx((0.275 + 1 / 3) / 2, rel=1e-5)


def test_decoder_without_end_special_gives_empty_sep_statistics() -> None:
    # BOS a b c (a decoder: lower-triangular rows); no end special
    w = [[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.3, 0.5, 0], [0.1, 0.2, 0.3, 0.4]]
    bos = token_pair([w], ("<s>", "a", "b", "c"), [True, False, False, False], [False] * 4)
    result = run(SurfaceStats(), [bos])
    for key in ("to_sep", "sep_to_sep", "other_to_sep"):
        assert np.isnan(result.mean(key)).all(), key
    assert result.mean("to_cls")[0, 0] == pytest.approx((1 + 0.5 + 0.2 + 0.1) / 4)
    assert result.mean("to_prev")[0, 0] == pytest.approx((0.5 + 0.3 + 0.3) / 4)
    assert result.mean("entropy_first")[0, 0] == pytest.approx(E4 := smoothed_entropy([1, 0, 0, 0]), rel=1e-4)
    assert E4 < 0.01
    no_bos = token_pair([w], ("a", "b", "c", "d"), [False] * 4, [False] * 4)
    result = run(SurfaceStats(), [no_bos])
    assert np.isnan(result.mean("to_cls")).all() and np.isnan(result.mean("entropy_first")).all()
    assert result.mean("to_self")[0, 0] == pytest.approx((1 + 0.5 + 0.5 + 0.4) / 4)


def test_items_without_token_maps_are_counted_and_skipped() -> None:
    sentence, wa = example_1()
    bare = WordAttention(wa.weights, wa.is_special, wa.layers, wa.heads)
    result = run(SurfaceStats(), [(sentence, bare), example_1(), (sentence, bare)])
    assert result.n_without_tokens == 2 and result.n_examples == 1
    np.testing.assert_allclose(result.mean("to_sep"), [[0.275, 0.25]], rtol=1e-5)
    empty = run(SurfaceStats(), [(sentence, bare)])
    assert np.isnan(empty.mean("entropy")).all() and np.isnan(empty.uniform_entropy)


def test_word_level_uses_word_maps_and_word_forms() -> None:
    # word maps over [CLS] w1 , w2 [SEP]: head 0 puts row mass on "," only, except the specials' rows
    n = 5
    w = np.zeros((1, 1, n, n), dtype=np.float32)
    w[0, 0, :, 2] = 1.0
    w[0, 0, 0] = [1, 0, 0, 0, 0]
    w[0, 0, 4] = [0, 0, 0, 0.5, 0.5]
    special = np.array([True, False, False, False, True])
    sentence = Sentence("s", ("x", ",", "y"), (0, 1, 1), ("root", "punct", "dep"))
    result = run(SurfaceStats(level="word"), [(sentence, WordAttention(w, special, (0,), (0,)))])
    # to_punct = column 2 = 3 / 5; to_cls = 1 / 5; to_sep = 0.5 / 5; to_self = (1 + 1 + 0.5) / 5 (rows 0, 2, 4)
    # to_next = A12 = 1 / 5; to_prev = A32 + A43 = 1.5 / 5; sep_to_sep = 0.5; other_to_sep = 0
    hand = {"to_punct": 0.6, "to_cls": 0.2, "to_sep": 0.1, "to_self": 0.5, "to_next": 0.2, "to_prev": 0.3,
            "sep_to_sep": 0.5, "other_to_sep": 0.0}
    for key, value in hand.items():
        assert result.mean(key)[0, 0] == pytest.approx(value, abs=1e-7), key
    assert result.level == "word" and result.n_without_tokens == 0
    with pytest.raises(AlignmentError, match="3 word positions, the item has 2 words"):
        SurfaceStats(level="word").update(Sentence("s", ("x", "y"), (0, 1), ("a", "b")),
                                          WordAttention(w, special, (0,), (0,)))


def random_pair(rng: np.random.Generator, n_words: int, layers: int = 2, heads: int = 3):
    t = n_words + 2
    w = rng.random((layers, heads, t, t)) ** 4
    w = (w / w.sum(-1, keepdims=True)).astype(np.float32)
    start = np.zeros(t, dtype=bool)
    end = np.zeros(t, dtype=bool)
    start[0], end[-1] = True, True
    tokens = ("[CLS]",) + tuple(rng.choice(["a", ".", ",", "b"], n_words)) + ("[SEP]",)
    return _multi(w, tokens, start, end)


def _multi(w, tokens, start, end):
    word_of = np.where(start | end, -1, np.cumsum(~(start | end)) - 1)
    ta = TokenAttention(w, tokens, word_of, start, end)
    wa = WordAttention(w, start | end, tuple(range(w.shape[0])), tuple(range(w.shape[1])), {}, ta)
    words = tuple(tok for tok, s in zip(tokens, start | end) if not s)
    return Sentence("r", words, tuple(0 for _ in words), tuple("dep" for _ in words)), wa


@pytest.mark.parametrize("level", ["token", "word"])
def test_merge_of_two_shards_equals_one_pass_exactly(level: str, tmp_path) -> None:
    rng = np.random.default_rng(0)
    pairs = [random_pair(rng, int(k)) for k in rng.integers(1, 12, 20)]
    whole = run(SurfaceStats(level), pairs)
    a, b = SurfaceStats(level), SurfaceStats(level)
    run(a, pairs[:7])
    run(b, pairs[7:])
    a.merge(b)
    assert equal(a.compute(), whole)  # fixed-point sums: bit-identical
    assert equal(load(whole.save(tmp_path / "s")), whole)
    # and the mean is the plain mean of per-example values (slow reference)
    single = [run(SurfaceStats(level), [p]).mean("to_prev") for p in pairs]
    np.testing.assert_allclose(whole.mean("to_prev"), np.mean(single, axis=0), atol=1e-9)
    with pytest.raises(ConfigError, match="level"):
        SurfaceStats("word").merge(SurfaceStats("token"))


def test_bad_options_and_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match="expected one of token, word, found 'sentence'"):
        SurfaceStats("sentence")
    with pytest.raises(ConfigError, match="found 'to_foo'"):
        run(SurfaceStats(), [example_1()]).mean("to_foo")
