"""Sided relations for causal decoders: heads and baselines against slow references written from the rule.

A decoder's word attends only to itself and earlier words, so a relation's words are split by the side of the
gold word: on the left the dependent's row can find it (dep_to_head), on the right only the column can
(head_to_dep). Roots are left out; the unseen direction never counts, even through a tie among zeros.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest

from probes.analysis.baselines import offset_baseline
from probes.analysis.dependency import head_accuracy
from probes.analysis.relations import plain_name, sided_name
from probes.corpora.types import Sentence
from probes.extraction.attention import WordAttention
from probes.heads.selection import listed_relations
from tests.analysis.test_scoring import random_sentence


def causal_attention(rng: np.random.Generator, n: int, layers=(0, 1), heads=(0, 1, 2)) -> WordAttention:
    """Row-stochastic lower-triangular maps over BOS + n words (BOS is the only special)."""
    size = n + 1
    w = rng.random((len(layers), len(heads), size, size)).astype(np.float32) * np.tril(np.ones((size, size)))
    w /= w.sum(-1, keepdims=True)
    special = np.zeros(size, dtype=bool)
    special[0] = True
    return WordAttention(w, special, tuple(layers), tuple(heads))


def reference(pairs):
    """Loops: each non-root word in its side's relations, correct only in the direction that sees its head."""
    correct, total = defaultdict(int), defaultdict(int)
    for sent, att in pairs:
        w = att.weights[:, :, 1:, 1:]  # (L, H, m, m) words only
        m = sent.n_words
        for i in range(m):
            head = sent.heads[i]
            if head == 0:
                continue
            side = "left" if head < i + 1 else "right"
            label = sent.relations[i]
            base = label.split(":")[0]
            keys = [label, base + ":*", "ALL"] + (["ALL-nopunct"] if base != "punct" else [])
            for key in keys:
                total[sided_name(key, side)] += 1
            for li, hi in itertools.product(range(w.shape[0]), range(w.shape[1])):
                for d in range(2):
                    if (d == 0) != (side == "left"):
                        continue
                    vals = [(w[li, hi, i, j] if d == 0 else w[li, hi, j, i], -j) for j in range(m) if j != i]
                    pred = -max(vals)[1] + 1 if vals else -1  # the left-most maximum
                    for key in keys:
                        correct[(d, li, hi, sided_name(key, side))] += pred == head
    return correct, total


def test_sided_scores_match_the_reference_on_random_causal_maps() -> None:
    rng = np.random.default_rng(3)
    pairs = [(random_sentence(rng, int(n), k), causal_attention(rng, int(n))) for k, n in
             enumerate(rng.integers(1, 11, 40))]
    scores = head_accuracy(pairs, poss_rule=False, sided=True)
    ref_correct, ref_total = reference(pairs)
    for key, n in ref_total.items():
        if key not in scores.relations:  # pooled names that repeat the plain label are pruned
            assert plain_name(key).endswith(":*")
            continue
        r = scores.index(key)
        assert scores.total[r] == n, key
        for d, li, hi in itertools.product(range(2), range(2), range(3)):
            assert scores.correct[d, li, hi, r] == ref_correct[(d, li, hi, key)], (key, d, li, hi)
    assert set(scores.relations) <= set(ref_total)
    non_root = sum(h != 0 for s, _ in pairs for h in s.heads)  # words attached to ROOT are left out
    assert scores.count("ALL (head left)") + scores.count("ALL (head right)") == non_root < sum(
        s.n_words for s, _ in pairs)


def test_the_unseen_direction_never_scores_through_a_tie() -> None:
    # "The dog": det The -> dog (right). The first word's row sees nothing but BOS: all its word weights are 0,
    # and numpy's argmax would pick word 2 = dog, its head; sided scoring must not count that.
    sent = Sentence("t", ("The", "dog"), (2, 0), ("det", "root"))
    w = np.zeros((1, 1, 3, 3), np.float32)
    w[0, 0, 1, 0] = 1.0  # The -> BOS
    w[0, 0, 2, 1] = 1.0  # dog -> The: the head finds its dependent (head_to_dep)
    att = WordAttention(w, np.array([True, False, False]), (0,), (0,))
    plain = head_accuracy([(sent, att)], poss_rule=False)
    sided = head_accuracy([(sent, att)], poss_rule=False, sided=True)
    assert plain.correct[0, 0, 0, plain.index("det")] == 1  # the tie credits the unseen direction
    r = sided.index("det (head right)")
    assert sided.correct[:, 0, 0, r].tolist() == [0, 1]


def test_baselines_are_scored_on_the_same_sided_words() -> None:
    rng = np.random.default_rng(5)
    sentences = [random_sentence(rng, int(n), k) for k, n in enumerate(rng.integers(2, 12, 50))]
    pairs = [(s, causal_attention(rng, s.n_words)) for s in sentences]
    heads = head_accuracy(pairs, poss_rule=False, sided=True)
    base = offset_baseline(sentences, poss_rule=False, sided=True)
    for rel in heads.relations:
        assert base.total[base.index(rel)] == heads.count(rel)
    # on the left side only negative offsets can be right, on the right side only positive ones (the edge rule,
    # which moves a prediction past the sentence's edge to the nearest other word, must not cross sides)
    acc = base.accuracy()
    for rel in base.relations:
        offsets = np.asarray(base.offsets)
        wrong_side = offsets >= 0 if rel.endswith("(head left)") else offsets <= 0
        assert (acc[wrong_side, base.index(rel)] == 0).all(), rel
    # hand check: offset -1 on "(head left)" words = the words whose head is the word before
    ref = sum(1 for s in sentences for i, h in enumerate(s.heads) if h != 0 and h == i)  # head at 1-based i
    k = base.offsets.index(-1)
    assert base.correct[k, base.index("ALL (head left)")] == ref


def test_a_plain_relation_name_lists_both_of_its_sides() -> None:
    rng = np.random.default_rng(9)
    pairs = [(random_sentence(rng, int(n), k), causal_attention(rng, int(n))) for k, n in
             enumerate(rng.integers(3, 12, 60))]
    scores = head_accuracy(pairs, poss_rule=False, sided=True)
    assert listed_relations(scores, relations=["obj"]) == [r for r in scores.relations if plain_name(r) == "obj"]
    listed = listed_relations(scores, min_count=1)
    assert listed[:4] == ["ALL (head left)", "ALL (head right)", "ALL-nopunct (head left)",
                          "ALL-nopunct (head right)"]
    assert not any(plain_name(r) in ("punct", "punct:*") for r in listed)
    with pytest.raises(ValueError, match="do not occur"):
        listed_relations(scores, relations=["nope"])


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_the_leaderboard_of_a_decoder_is_sided_and_says_so(tmp_path, family) -> None:
    from probes.runs.leaderboard import leaderboard
    from tests.tiny_models import build

    board = leaderboard(build(family, tmp_path / family), "sample:dev", limit=60, min_count=5)
    sided = family == "gpt2"
    assert board.record.options["sided"] is sided
    assert bool(board.report.metadata.get("sided")) is sided
    assert all((plain_name(r.relation) != r.relation) is sided for r in board.rows)
    if sided:  # each row reports the one direction that can see its words, and no root
        assert all(r.direction == ("dep_to_head" if r.relation.endswith("(head left)") else "head_to_dep")
                   for r in board.rows if r.accuracy > 0)
        assert not any(plain_name(r) == "root" for r in board.report.relations)
    board.write(tmp_path / f"out-{family}", figures=False)
    text = (tmp_path / f"out-{family}" / "leaderboard.md").read_text()
    assert ("Decoder: a word attends only to itself and earlier words" in text) is sided


def test_a_sided_pool_is_redundant_when_its_side_has_no_subtype() -> None:
    from probes.analysis.relations import redundant_pools

    names = ["compound (head right)", "compound:* (head right)", "compound:prt (head left)",
             "compound:* (head left)", "compound (head left)", "obj", "obj:*", "nmod:poss", "nmod:*"]
    assert redundant_pools(names) == {"compound:* (head right)", "obj:*"}


def test_sided_relations_get_plain_figure_names() -> None:
    from probes.reports.names import safe_names

    names = safe_names(["amod (head left)", "nmod:* (head right)", "nmod:poss"])
    assert names == {"amod (head left)": "amod_head-left", "nmod:* (head right)": "nmod_all_head-right",
                     "nmod:poss": "nmod_poss"}
