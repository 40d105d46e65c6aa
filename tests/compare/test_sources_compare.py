"""The test of the findings under attention sources (probes.compare.sources): shares against hand-computed maps, the
paired sign-flip test against simulations with a known answer, Holm over the table, the verdicts, and the
leaderboard comparison on hand-built boards."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.compare.role_lab_stats import sign_flip_test
from probes.compare.sources import (
    ShareComparison,
    ShareSums,
    TokenShares,
    compare_boards,
    compare_shares,
    coref_pick,
    token_shares,
)
from probes.errors import ConfigError
from probes.extraction.attention import TokenAttention, WordAttention
from probes.heads.inference import holm
from probes.heads.selection import LeaderboardRow


def _tokens(maps: np.ndarray, tokens: tuple[str, ...], start: list[bool], end: list[bool]) -> TokenAttention:
    return TokenAttention(np.asarray(maps, dtype=np.float32), tokens, np.arange(len(tokens)) - 1,
                          np.asarray(start), np.asarray(end))


def test_shares_of_a_hand_made_encoder_map() -> None:
    # [CLS] a . b [SEP]; one layer, two heads
    tokens = ("[CLS]", "a", ".", "b", "[SEP]")
    head1 = np.tile([0.5, 0.1, 0.1, 0.1, 0.2], (5, 1))  # every row: 0.5 on [CLS], 0.2 on [SEP], 0.1 on "."
    head2 = np.eye(5)  # each token on itself: [CLS] row 1 on [CLS], "." row 1 on ".", [SEP] row 1 on [SEP]
    maps = np.stack([head1, head2])[None]  # (1, 2, 5, 5)
    sums, rows = token_shares(_tokens(maps, tokens, [True, False, False, False, False],
                                      [False, False, False, False, True]), causal=False)
    assert rows == 5
    # per category: sum over the 5 rows of the mean over the two heads
    cls = 5 * 0.5 / 2 + 1 / 2  # head 1: 0.5 in each row; head 2: 1 in the [CLS] row only
    sep = 5 * 0.2 / 2 + 1 / 2
    punct = 5 * 0.1 / 2 + 1 / 2
    np.testing.assert_allclose(sums, [[cls, sep, cls + sep, punct]])
    assert sums[0, 0] / rows == pytest.approx(0.35)  # the mean share on [CLS] over every row, specials included


def test_shares_of_a_decoder_take_the_first_token_and_never_count_it_twice() -> None:
    tokens = ("Ġ.", "Ġa", "Ġ,", "Ġb")  # the first token is "." itself: it counts as the first token only
    maps = np.tril(np.ones((4, 4)))
    maps = (maps / maps.sum(axis=1, keepdims=True))[None, None]  # (1, 1, 4, 4) uniform over the past
    sums, rows = token_shares(_tokens(maps, tokens, [False] * 4, [False] * 4), causal=True)
    first = 1 + 1 / 2 + 1 / 3 + 1 / 4
    punct = 1 / 3 + 1 / 4  # "Ġ," from rows 3 and 4
    np.testing.assert_allclose(sums, [[first, punct]])
    assert rows == 4


def test_token_shares_equal_a_loop_over_rows_and_heads() -> None:
    rng = np.random.default_rng(0)
    n_layers, n_heads, t = 3, 4, 9
    maps = rng.random((n_layers, n_heads, t, t))
    maps /= maps.sum(axis=-1, keepdims=True)
    tokens = ("[CLS]", "x", ",", "y", ".", "z", "[SEP]", "w", "[SEP]")
    start = [i == 0 for i in range(t)]
    end = [tok == "[SEP]" for tok in tokens]
    sums, _ = token_shares(_tokens(maps, tokens, start, end), causal=False)
    masks = {"cls": start, "sep": end, "cls+sep": [a or b for a, b in zip(start, end)],
             "punct": [tok in (".", ",") for tok in tokens]}
    for layer, (c, mask) in itertools.product(range(n_layers), enumerate(masks.values())):
        total = 0.0
        for row in range(t):
            total += sum(sum(maps[layer, h, row, j] for j in range(t) if mask[j]) for h in range(n_heads)) / n_heads
        assert sums[layer, c] == pytest.approx(total)


def test_the_analysis_keeps_each_sentence_and_counts_those_without_token_maps() -> None:
    from probes.corpora.types import Sentence

    tokens = _tokens(np.full((1, 1, 3, 3), 1 / 3), ("[CLS]", "a", "[SEP]"), [True, False, False],
                     [False, False, True])
    pair = WordAttention(np.full((1, 1, 3, 3), 1 / 3), np.array([True, False, True]), (0,), (0,), tokens=tokens)
    analysis = TokenShares(causal=False)
    analysis.update(Sentence("s1", ("a",), (0,), ("root",), doc_id="d1"), pair)
    analysis.update(Sentence("s2", ("a",), (0,), ("root",), doc_id="d1"), replace(pair, tokens=None))
    got = analysis.compute()
    assert got.item_ids == ("s1",) and got.doc_ids == ("d1",) and got.n_without_tokens == 1
    np.testing.assert_allclose(got.sums[0], [[1.0, 1.0, 2.0, 0.0]])


def _brute_force_p(d: np.ndarray) -> float:
    observed = abs(d.sum())
    sums = [abs(np.dot(signs, d)) for signs in itertools.product((1.0, -1.0), repeat=len(d))]
    return float(np.mean([s >= observed - 1e-12 for s in sums]))


def test_the_exact_sign_flip_p_is_the_share_of_sign_patterns_at_least_as_extreme() -> None:
    from probes.compare.sources import sign_flip_sums

    d = np.array([[0.3, 0.0], [0.1, 0.0], [-0.05, 0.0], [0.2, 0.0], [0.15, 0.0], [0.25, 0.0]])
    p, draws, exact = sign_flip_sums(d)
    assert exact and draws == 2 ** 6
    assert p[0] == pytest.approx(_brute_force_p(d[:, 0]))
    assert p[0] == pytest.approx(sign_flip_test(d[:, 0]).p)  # the role lab's test of the mean: the same p
    assert p[1] == 1.0  # no difference at all


def test_the_sign_flip_test_holds_its_level_under_no_difference_and_finds_a_planted_one() -> None:
    from probes.compare.sources import sign_flip_sums

    rng = np.random.default_rng(1)
    null = rng.normal(0.0, 1.0, size=(30, 400))  # 400 simulated tables of 30 units, no difference
    p, draws, exact = sign_flip_sums(null, n_permutations=400, seed=2)
    assert not exact and draws == 400
    assert 0.02 <= float((p < 0.05).mean()) <= 0.09  # about 5% rejections
    assert 0.44 <= float(p.mean()) <= 0.56  # p about uniform
    planted = rng.normal(0.8, 1.0, size=(30, 50))
    p_planted, _, _ = sign_flip_sums(planted, n_permutations=400, seed=2)
    assert (p_planted < 0.01).mean() >= 0.95


def test_compare_shares_pairs_sentences_by_id_resamples_documents_and_applies_holm() -> None:
    rng = np.random.default_rng(3)
    n, layers = 60, 3
    ids = [f"s{i}" for i in range(n)]
    docs = [f"d{i // 4}" for i in range(n)]  # 15 documents of 4 sentences
    weights = ShareSums(("first", "punct"), True, tuple(ids), tuple(docs), rng.uniform(2, 4, (n, layers, 2)),
                        np.full(n, 10, dtype=np.int64))
    effect = np.zeros((n, layers, 2))
    effect[:, 0, 0] = -1.0  # lower in layer 1 only, first-token category
    effect[:, 1, 0] = -0.002 * rng.standard_normal(n)  # layer 2: noise
    norm_sums = weights.sums + effect
    order = rng.permutation(n)  # the norm pass yields the same sentences in another order
    norm = ShareSums(weights.categories, True, tuple(ids[k] for k in order), tuple(docs[k] for k in order),
                     norm_sums[order], weights.rows[order])
    got = compare_shares({"weights": weights, "norm": norm}, n_resamples=200, n_permutations=2000)
    assert got.sources == ("weights", "norm") and got.unit == "documents" and got.n_units == 15
    assert got.n_sentences == n and got.n_rows == 10 * n
    np.testing.assert_allclose(got.mean[0], weights.sums.sum(axis=0) / (10 * n))
    np.testing.assert_allclose(got.diff[1], effect.sum(axis=0) / (10 * n), atol=1e-12)
    assert np.isnan(got.p[0]).all() and got.n_tests == layers * 2
    np.testing.assert_allclose(got.p_holm[1], holm(got.p[1].reshape(-1)).reshape(layers, 2))
    assert got.p_holm[1, 0, 0] < 0.05 and got.diff_high[1, 0, 0] < 0
    assert got.p_holm[1, 2, 0] == 1.0  # no difference at all in layer 3
    assert got.low[0, 0, 0] <= got.mean[0, 0, 0] <= got.high[0, 0, 0]
    assert got.lower("norm", "first").tolist() == [True, False, False]
    assert got.verdict("norm") == "partly" and got.verdict("norm", "punct") == "no"


def test_the_verdict_is_yes_when_every_layer_is_lower_and_no_when_none_is() -> None:
    rng = np.random.default_rng(4)
    n = 40
    ids, docs = [f"s{i}" for i in range(n)], [None] * n
    weights = ShareSums(("first", "punct"), True, tuple(ids), tuple(docs), rng.uniform(2, 4, (n, 2, 2)),
                        np.full(n, 10, dtype=np.int64))
    lower = replace(weights, sums=weights.sums - np.array([1.0, 0.0]))
    higher = replace(weights, sums=weights.sums + np.array([1.0, 0.0]))
    assert compare_shares({"weights": weights, "norm": lower}, n_resamples=50).verdict("norm") == "yes"
    got = compare_shares({"weights": weights, "norm": higher}, n_resamples=50)
    assert got.verdict("norm") == "no" and (got.p_holm[1, :, 0] < 0.05).all()  # significant, the other way
    assert got.unit == "sentences"


def test_compare_shares_refuses_sources_that_ran_other_tokens() -> None:
    weights = ShareSums(("first", "punct"), True, ("a", "b"), (None, None), np.ones((2, 1, 2)),
                        np.array([3, 4], dtype=np.int64))
    with pytest.raises(ConfigError, match="other tokens"):
        compare_shares({"weights": weights, "norm": replace(weights, rows=np.array([3, 5], dtype=np.int64))})
    with pytest.raises(ConfigError, match="at least one other source"):
        compare_shares({"weights": weights})


def _row(relation: str, layer: int, head: int, direction: str = "dep_to_head", *, beats: bool = False,
         accuracy: float = 0.5) -> LeaderboardRow:
    return LeaderboardRow(relation, 100, layer, head, direction, accuracy, accuracy - 0.1, accuracy + 0.1, -1, 0.3, 1,
                          0.4, "position", accuracy - 0.4, 0.0, 0.2, beats, accuracy, "dev", 0.01, 0.02)


def test_boards_say_which_relations_keep_their_head_and_which_move() -> None:
    weights = [_row("nsubj", 3, 8, beats=True), _row("det", 1, 2), _row("amod", 4, 4), _row("obj", 2, 2)]
    norm = [_row("det", 1, 2, beats=True, accuracy=0.6), _row("nsubj", 3, 8, "head_to_dep"), _row("amod", 5, 1),
            _row("case", 0, 0)]
    got = compare_boards({"norm": norm, "weights": weights}, reported_on="dev", selected_on="test", mode="separate")
    assert got.sources == ("weights", "norm")
    places = {r.relation: r.place("norm") for r in got.relations}
    assert places == {"nsubj": "kept, other direction", "det": "kept", "amod": "moved", "obj": "-", "case": "-"}
    det = next(r for r in got.relations if r.relation == "det")
    assert det.pick("norm").accuracy == 0.6 and det.pick("norm").beats_baseline
    assert det.pick("weights").baseline_accuracy == 0.4  # the position baseline was the best one
    assert det.pick("weights").name == "2-3"  # 1-based where a person reads it
    assert got.counts("norm") == {"kept": 1, "kept, other direction": 1, "moved": 1, "beats_baseline": 1,
                                  "relations": 5}
    assert got.n_tests == (4, 4)


def test_the_coreference_pick_is_the_best_head_on_all_mentions() -> None:
    rows = [{"kind": "baseline", "mention_type": "all", "head": ""},
            {"kind": "head", "mention_type": "pronoun", "head": "2-3", "accuracy": 0.9},
            {"kind": "head", "mention_type": "all", "head": "4-11", "accuracy": 0.61, "ci_low": 0.5, "ci_high": 0.7,
             "baseline": "Nearest mention", "baseline_accuracy": 0.4, "p_holm": 0.001, "significant": True, "n": 80}]
    pick = coref_pick("norm", rows)
    assert (pick.layer, pick.head, pick.name) == (3, 10, "4-11")
    assert pick.accuracy == 0.61 and pick.significant and pick.mentions == 80
    assert coref_pick("norm", rows[:1]).name == "-"


def _share_comparison() -> ShareComparison:
    """A small real comparison (tests/test_results.py round-trips it)."""
    rng = np.random.default_rng(5)
    ids = tuple(f"s{i}" for i in range(12))
    weights = ShareSums(("first", "punct"), True, ids, (None,) * 12, rng.uniform(2, 4, (12, 2, 2)),
                        np.full(12, 10, dtype=np.int64))
    return compare_shares({"weights": weights, "norm": replace(weights, sums=weights.sums - 0.5)}, n_resamples=20,
                          n_permutations=50)


def _sources_run() -> Any:
    """A small real run of two sources (tests/test_results.py round-trips it)."""
    from probes.runs.sources import SourcesRun

    shares = _share_comparison()
    boards = compare_boards({"weights": [_row("det", 1, 2)], "norm": [_row("det", 1, 3)]}, reported_on="dev",
                            selected_on="test", mode="separate")
    rows = [{"kind": "head", "mention_type": "all", "head": "1-2", "accuracy": 0.5, "ci_low": 0.4, "ci_high": 0.6}]
    return SourcesRun(shares, boards, (coref_pick("weights", rows), coref_pick("norm", rows)), (), ("| a |",) * 2,
                      ("| b |",) * 2, {"command": "probes sources", "options": {"model": "tiny"}})


def test_a_run_says_its_verdicts_and_round_trips(tmp_path: Path) -> None:
    from probes.results import equal, load

    run = _sources_run()
    assert equal(load(run.save(tmp_path / "run")), run)
    text = run.format()
    assert "norm vs weights: share on first token (sink)" in text and "det" not in text
    assert "best head 1-2, 50.0%" in text
