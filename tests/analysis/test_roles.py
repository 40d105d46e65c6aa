"""Voita head roles (probes.analysis.roles): hand computations and planted heads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from probes.analysis.roles import HeadRoles, RolesResult, read_counts, word_frequencies
from probes.corpora.types import Sentence
from probes.errors import ConfigError, InputError
from probes.extraction.attention import TokenAttention, WordAttention
from probes.results import equal, load


def make_pair(token_maps: np.ndarray, words: tuple[str, ...], word_maps: np.ndarray | None = None,
              tokens: bool = True) -> tuple[Sentence, WordAttention]:
    """[CLS] words [SEP], one token per word; ``token_maps`` ``(L, H, T, T)``; word maps default to the same."""
    t = len(words) + 2
    start = np.zeros(t, dtype=bool)
    end = np.zeros(t, dtype=bool)
    start[0], end[-1] = True, True
    word_of = np.array([-1] + list(range(len(words))) + [-1])
    w = np.asarray(token_maps, dtype=np.float32)
    ta = TokenAttention(w, ("[CLS]",) + words + ("[SEP]",), word_of, start, end) if tokens else None
    layers, heads = tuple(range(w.shape[0])), tuple(range(w.shape[1]))
    wm = w if word_maps is None else np.asarray(word_maps, dtype=np.float32)
    sentence = Sentence("s", words, tuple(0 for _ in words), tuple("dep" for _ in words))
    return sentence, WordAttention(wm, start | end, layers, heads, {}, ta)


def run(analysis: HeadRoles, pairs) -> RolesResult:
    for item, attention in pairs:
        analysis.update(item, attention)
    return analysis.compute()


def test_confidence_and_offsets_by_hand() -> None:
    # [CLS] a b [SEP]: rows 1 and 2 count; the [SEP] column is never the max
    w = np.array([[[[0.7, 0.1, 0.1, 0.1],
                    [0.1, 0.2, 0.3, 0.4],    # max without [SEP]: 0.3 at column 2 -> offset +1
                    [0.5, 0.3, 0.1, 0.1],    # 0.5 at column 0 -> offset -2
                    [0.0, 0.0, 0.0, 1.0]]]])
    result = run(HeadRoles(max_offset=2), [make_pair(w, ("a", "b"))])
    assert result.n_rows == 2 and result.confidence()[0, 0] == pytest.approx((0.3 + 0.5) / 2, abs=1e-7)  # float32 maps
    assert result.offset_counts[0, 0].tolist() == [1, 0, 0, 1, 0]  # offsets -2 -1 0 +1 +2
    assert result.positional_share()[0, 0] == 0.5 and result.positional()[0, 0] == 0  # 0.5 < 0.9: none
    assert result.positional(share=0.5)[0, 0] == -2  # ties go to the more negative offset
    assert np.isnan(result.rare_rate()).all() and not result.has_frequencies  # no frequencies, no rare-word


def planted_corpus(seed: int = 0, n: int = 60):
    """Random peaky maps over 2 x 3 heads; head 1-2 (0, 1) attends to the previous token in ~95% of
    rows, head 2-1 (1, 0) to the next token in ~70% of rows, head 2-3 (1, 2) to the rarest word."""
    rng = np.random.default_rng(seed)
    common, rare = ["the", "a", "of", "and", "to", "in"], ["zebra", "quokka", "axolotl", "tapir"]
    frequencies = {w: 1000 - 10 * k for k, w in enumerate(common)} | {w: 1 + k for k, w in enumerate(rare)}
    pairs = []
    for _ in range(n):
        m = int(rng.integers(4, 14))
        words = list(rng.choice(common, m))
        for pos, form in zip(rng.choice(m, 2, replace=False), rng.choice(rare, 2, replace=False)):
            words[pos] = str(form)
        words = [w.upper() if rng.random() < 0.2 else w for w in words]  # frequencies are of lower-cased forms
        t = m + 2
        w = rng.random((2, 3, t, t)) ** 3
        rows = np.arange(1, t - 1)
        prev_rows = rows[rng.random(rows.size) < 0.95]
        w[0, 1, prev_rows, prev_rows - 1] += 5.0
        next_rows = rows[rng.random(rows.size) < 0.7]
        w[1, 0, next_rows, next_rows + 1] += 5.0  # the last word's next is [SEP]: excluded, so not planted there
        w[1, 0, t - 2, t - 1] -= 5.0 * (t - 2 in next_rows)
        order = sorted(range(m), key=lambda k: (frequencies[words[k].lower()], k))
        w[1, 2, :, order[0] + 1] += 5.0  # every row to the rarest word (its own row cannot count)
        w[1, 2, order[0] + 1, order[1] + 1] += 6.0  # the rarest's own row to the second rarest
        w = (w / w.sum(-1, keepdims=True)).astype(np.float32)
        pairs.append(make_pair(w, tuple(words)))
    return frequencies, pairs


def test_positional_head_is_found_on_a_planted_head_and_not_elsewhere() -> None:
    frequencies, pairs = planted_corpus()
    result = run(HeadRoles(frequencies, top_common=6), pairs)
    positional = result.positional()
    assert positional[0, 1] == -1 and positional.tolist() == [[0, -1, 0], [0, 0, 0]]
    share = result.positional_share()
    assert share[0, 1] >= 0.9 and 0.6 < share[1, 0] < 0.85  # the 70% head is not positional
    assert (np.delete(share.ravel(), [1, 3]) < 0.5).all()
    assert result.positional(share=0.6)[1, 0] == 1  # a lower bar finds the next-token head
    conf = result.confidence()
    assert conf[0, 1] > 0.6 and conf[0, 1] == conf.max()


def test_rare_word_head_is_found_on_a_planted_head_and_not_elsewhere() -> None:
    frequencies, pairs = planted_corpus()
    result = run(HeadRoles(frequencies, top_common=6), pairs)
    assert result.n_rare_sentences == len(pairs) and result.rare_rows == sum(p[0].n_words for p in pairs)
    rate, rate2, chance, chance2 = result.rare_rate(), result.rare2_rate(), result.rare_chance(), result.rare2_chance()
    # the planted head hits the rarest word from every row but the rarest's own: (m - 1) / m of the rows
    expected = sum(p[0].n_words - 1 for p in pairs) / result.rare_rows
    assert rate[1, 2] == pytest.approx(expected) and rate2[1, 2] == 1.0
    others = np.delete(rate.ravel(), 5)
    assert (others < chance.ravel()[0] + 0.1).all() and (np.delete(rate2.ravel(), 5) < 0.5).all()
    # chance = mean over rows of |R - {i}| / (m - 1): 1 / m and 2 / m per sentence, pooled over rows
    assert chance[0, 0] == pytest.approx(len(pairs) / result.rare_rows)
    assert chance2[0, 0] == pytest.approx(2 * len(pairs) / result.rare_rows)
    # a sentence whose rarest word is among the common ones is not counted
    all_common = run(HeadRoles(frequencies, top_common=10), pairs)
    assert all_common.n_rare_sentences == 0 and np.isnan(all_common.rare_rate()).all()


def test_rare_word_rates_and_chance_by_hand() -> None:
    # words: the zebra of cat; counts the 100, of 50, cat 5, zebra 1; top 2 common: the, of
    # rarest = zebra (word 1), two rarest = {zebra, cat}. Word rows (self excluded from the argmax):
    #   row 0 -> zebra (hit, hit2); row 1 -> the (miss); row 2 -> cat (hit2 only); row 3 -> the (miss)
    # rare_rate 1/4, rare2_rate 2/4; chance per row 1/3, 0, 1/3, 1/3 -> 1/4; two rarest 2/3, 1/3, 2/3, 1/3 -> 2/4
    words = np.array([[0.1, 0.5, 0.2, 0.2], [0.1, 0.9, 0.0, 0.0], [0.1, 0.1, 0.5, 0.3], [0.4, 0.3, 0.2, 0.1]])
    maps = np.zeros((1, 1, 6, 6))
    maps[0, 0, 1:5, 1:5] = words
    maps[0, 0, 0, 0] = maps[0, 0, 5, 5] = 1.0
    freq = {"the": 100, "of": 50, "cat": 5, "zebra": 1}
    result = run(HeadRoles(freq, top_common=2), [make_pair(maps, ("The", "zebra", "of", "cat"), tokens=False)])
    assert (result.rare_rate()[0, 0], result.rare2_rate()[0, 0]) == (0.25, 0.5)
    assert (result.rare_chance()[0, 0], result.rare2_chance()[0, 0]) == (0.25, 0.5)
    assert result.n_without_tokens == 1 and result.n_rows == 0 and np.isnan(result.confidence()).all()


def slow_token_roles(weights: np.ndarray, start: np.ndarray, end: np.ndarray, max_offset: int):
    """Per-row Python reference: confidence sum and offset histogram ``(L, H, 2k+1)``, rows counted."""
    n_layers, n_heads, t, _ = weights.shape
    conf = np.zeros((n_layers, n_heads))
    hist = np.zeros((n_layers, n_heads, 2 * max_offset + 1), dtype=np.int64)
    rows = [i for i in range(t) if not (start[i] or end[i])]
    for layer in range(n_layers):
        for head in range(n_heads):
            for i in rows:
                best, top = -1, -1.0
                for j in range(t):
                    if not end[j] and weights[layer, head, i, j] > top:  # strict: the first max wins
                        best, top = j, float(weights[layer, head, i, j])
                conf[layer, head] += top
                if abs(best - i) <= max_offset:
                    hist[layer, head, best - i + max_offset] += 1
    return conf, hist, len(rows)


@pytest.mark.parametrize("layout", ["bert", "pair", "decoder"])
def test_token_roles_match_a_slow_per_row_reference(layout: str) -> None:
    rng = np.random.default_rng(5)
    t = 11
    start, end = np.zeros(t, dtype=bool), np.zeros(t, dtype=bool)
    if layout != "decoder":
        start[0], end[-1] = True, True
    if layout == "pair":
        end[5] = True  # [CLS] a b c d [SEP] e f g h [SEP]: rows are not contiguous
    w = np.round(rng.random((2, 3, t, t)), 1).astype(np.float32)  # many ties
    if layout == "decoder":
        w = np.tril(w)
    word_of = np.where(start | end, -1, np.cumsum(~(start | end)) - 1)
    tokens = TokenAttention(w, tuple("t" * t), word_of, start, end)
    wa = WordAttention(w, start | end, (0, 1), (0, 1, 2), {}, tokens)
    result = run(HeadRoles(max_offset=3), [(None, wa)])
    conf, hist, n_rows = slow_token_roles(w, start, end, 3)
    assert result.n_rows == n_rows
    np.testing.assert_allclose(result.confidence_sum, conf, atol=1e-6)
    np.testing.assert_array_equal(result.offset_counts, hist)


def test_rare_word_hits_match_a_slow_per_row_reference() -> None:
    rng = np.random.default_rng(6)
    freq = {"a": 50, "b": 40, "c": 3, "d": 2, "e": 1}
    pairs, expected = [], np.zeros((2, 2, 3), dtype=np.int64)
    for _ in range(8):
        m = int(rng.integers(2, 8))
        words = tuple(str(x) for x in rng.choice(list(freq) + ["zz"], m))
        item, wa = make_pair(np.round(rng.random((2, 3, m + 2, m + 2)), 1), words)  # ties
        order = sorted(range(m), key=lambda k: (freq.get(words[k], 0), k))
        if words[order[0]] in ("a", "b"):
            continue
        for layer in range(2):
            for head in range(3):
                for i in range(m):
                    row = [(wa.weights[layer, head, i + 1, j + 1], -j) for j in range(m) if j != i]
                    best = -max(row)[1]  # largest weight, then the smallest column
                    expected[0, layer, head] += best == order[0]
                    expected[1, layer, head] += best in order[:2]
        pairs.append((item, wa))
    result = run(HeadRoles(freq, top_common=2), pairs)
    assert result.n_rare_sentences == len(pairs) >= 3
    np.testing.assert_array_equal(result.rare_hits, expected[0])
    np.testing.assert_array_equal(result.rare2_hits, expected[1])


def test_rare_word_on_a_decoder_counts_earlier_words_only() -> None:
    # a decoder's lower-triangular word maps over: the zebra of cat (rarest zebra, two rarest zebra and cat)
    #   row 0 sees no earlier word: not counted
    #   row 1 -> the (miss); chance 0 (zebra is not before it), two rarest 0
    #   row 2 -> zebra (hit, hit2) among {the, zebra}; chance 1/2, two rarest 1/2
    #   row 3 -> of (0.3, miss) among {the, zebra, of}; chance 1/3, two rarest 1/3 (cat is the row itself)
    # rates 1/3 and 1/3 over 3 rows; chance (0 + 1/2 + 1/3) / 3 = 5/18 for both
    words = np.array([[1.0, 0, 0, 0], [0.6, 0.4, 0, 0], [0.2, 0.5, 0.3, 0], [0.1, 0.2, 0.3, 0.4]])
    freq = {"the": 100, "of": 50, "cat": 5, "zebra": 1}
    item = Sentence("d", ("the", "zebra", "of", "cat"), (0, 1, 1, 1), ("root", "dep", "dep", "dep"))
    wa = WordAttention(words[None, None].astype(np.float32), np.zeros(4, dtype=bool), (0,), (0,))  # no specials
    result = run(HeadRoles(freq, top_common=2), [(item, wa)])
    assert result.rare_rows == 3 and result.rare_hits[0, 0] == 1 and result.rare2_hits[0, 0] == 1
    assert result.rare_chance()[0, 0] == pytest.approx(5 / 18, abs=1e-9)
    assert result.rare2_chance()[0, 0] == pytest.approx(5 / 18, abs=1e-9)


def test_merge_of_two_shards_equals_one_pass(tmp_path: Path) -> None:
    frequencies, pairs = planted_corpus(seed=1, n=30)
    pairs[3] = make_pair(pairs[3][1].weights, pairs[3][0].words, tokens=False)
    whole = run(HeadRoles(frequencies, top_common=6), pairs)
    a, b = HeadRoles(frequencies, top_common=6), HeadRoles(frequencies, top_common=6)
    run(a, pairs[:11])
    run(b, pairs[11:])
    a.merge(b)
    assert equal(a.compute(), whole) and whole.n_without_tokens == 1
    assert equal(load(whole.save(tmp_path / "roles")), whole)
    table = whole.to_pandas()
    assert list(table["head_name"]) == ["1-1", "1-2", "1-3", "2-1", "2-2", "2-3"]
    assert table.loc[1, "positional"] == -1 and table.loc[5, "rare2_rate"] == 1.0
    with pytest.raises(ConfigError, match="frequencies_digest"):
        HeadRoles(frequencies).merge(HeadRoles({"x": 1}))
    with pytest.raises(ConfigError, match="max_offset >= 1"):
        HeadRoles(max_offset=0)


def test_word_frequencies_and_counts_file(tmp_path: Path) -> None:
    sentences = [Sentence("1", ("The", "cat", "."), (2, 0, 2), ("det", "root", "punct")),
                 Sentence("2", ("the", "dog"), (2, 0), ("det", "root"))]
    assert word_frequencies(sentences) == {"the": 2, "cat": 1, ".": 1, "dog": 1}
    good = tmp_path / "counts.tsv"
    good.write_text("the\t10\nCat\t3\n\ncat\t2\n", encoding="utf-8")
    assert read_counts(good) == {"the": 10, "cat": 5}
    bad = tmp_path / "bad.tsv"
    bad.write_text("the\t10\ndog 3\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.tsv:2: expected 'word<TAB>count'.*found 'dog 3'"):
        read_counts(bad)
    bad.write_text("the\t-1\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.tsv:1:"):
        read_counts(bad)
    with pytest.raises(InputError, match="cannot read the counts file"):
        read_counts(tmp_path / "missing.tsv")
