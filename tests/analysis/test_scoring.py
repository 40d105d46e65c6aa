"""HeadAccuracy against a slow nested-loop reference written from the paper's description."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest

from probes.analysis.dependency import HeadAccuracy, head_accuracy
from probes.corpora.types import Sentence
from probes.extraction.attention import WordAttention

LABELS = ["nsubj", "nsubj:pass", "obj", "det", "case", "nmod:poss", "punct", "root", "amod", "poss"]
WORDS = ["the", "dog", "'s", "’s", "'", "bone", ".", "ran", "s"]


def random_sentence(rng: np.random.Generator, n: int, k: int) -> Sentence:
    words = tuple(rng.choice(WORDS, size=n).tolist())
    rels = list(rng.choice(LABELS, size=n).tolist())
    heads = [int(rng.choice([j for j in range(n + 1) if j != i + 1])) for i in range(n)]
    return Sentence(f"s{k}", words, tuple(heads), tuple(rels))


def random_attention(rng: np.random.Generator, n: int, layers=(0, 1), heads=(0, 1, 2), ties=False) -> WordAttention:
    size = n + 2
    if ties:  # few distinct values: many ties, so the left-most rule matters
        w = rng.integers(0, 3, size=(len(layers), len(heads), size, size)).astype(np.float32)
    else:
        w = rng.random((len(layers), len(heads), size, size)).astype(np.float32)
    special = np.zeros(size, dtype=bool)
    special[[0, size - 1]] = True
    return WordAttention(w, special, tuple(layers), tuple(heads))


def reference(pairs, poss_rule=True):
    """Slow reference: loops over layers, heads, words and candidates (Clark et al. §4.2)."""
    correct, total = defaultdict(int), defaultdict(int)
    for sent, att in pairs:
        pos = [p for p in range(len(att.is_special)) if not att.is_special[p]]
        m = len(pos)
        for li in range(att.weights.shape[0]):
            for hi in range(att.weights.shape[1]):
                for d in range(2):
                    pred = []
                    for i in range(m):
                        best, best_v = None, -np.inf
                        for j in range(m):
                            if j == i:
                                continue
                            v = att.weights[li, hi, pos[i], pos[j]] if d == 0 else att.weights[li, hi, pos[j], pos[i]]
                            if v > best_v:  # strict: the left-most maximum wins
                                best, best_v = j, v
                        pred.append(-1 if best is None else best + 1)
                    for i in range(m):
                        label = sent.relations[i]
                        base = label.split(":")[0]
                        keys = [label, base + ":*", "ALL"] + (["ALL-nopunct"] if base != "punct" else [])
                        for key in keys:
                            ok = pred[i] == sent.heads[i]
                            if (poss_rule and key == label and label in ("nmod:poss", "poss") and i + 1 < m
                                    and sent.words[i + 1] in ("'s", "’s", "'", "’")
                                    and sent.relations[i + 1] in ("case", "possessive")):
                                ok = pred[i + 1] == sent.heads[i]
                            correct[(d, li, hi, key)] += ok
                            if d == 0 and li == 0 and hi == 0:
                                total[key] += 1
    return correct, total


def check_equal(scores, ref_correct, ref_total):
    for key, n in ref_total.items():
        if key not in scores.relations:  # pooled names that repeat the plain label are pruned
            assert key.endswith(":*") and key[:-2] in scores.relations
            continue
        r = scores.index(key)
        assert scores.total[r] == n, key
        for d, li, hi in itertools.product(range(2), range(len(scores.layers)), range(len(scores.heads))):
            assert scores.correct[d, li, hi, r] == ref_correct[(d, li, hi, key)], (key, d, li, hi)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("poss_rule", [True, False])
def test_matches_reference_on_random_attention(ties, poss_rule):
    rng = np.random.default_rng(1 + ties + 2 * poss_rule)
    pairs = []
    for k in range(40):
        n = int(rng.integers(1, 12))
        pairs.append((random_sentence(rng, n, k), random_attention(rng, n, ties=ties)))
    scores = head_accuracy(pairs, poss_rule=poss_rule)
    check_equal(scores, *reference(pairs, poss_rule=poss_rule))
    assert scores.n_units == 40


def test_poss_rule_hand_example():
    # "the dog 's bone": dog (nmod:poss) -> bone (4); 's (case) -> dog (2)
    sent = Sentence("p", ("the", "dog", "'s", "bone"), (2, 4, 2, 0), ("det", "nmod:poss", "case", "root"))
    w = np.zeros((1, 1, 4, 4), dtype=np.float32)
    w[0, 0, 0, 1] = 1  # the -> dog (correct)
    w[0, 0, 1, 0] = 1  # dog -> the (wrong on its own)
    w[0, 0, 2, 3] = 1  # 's -> bone: with the rule, dog counts correct
    w[0, 0, 3, 1] = 1
    att = WordAttention(w, np.zeros(4, bool), (0,), (0,))
    on = head_accuracy([(sent, att)], poss_rule=True)
    off = head_accuracy([(sent, att)], poss_rule=False)
    r = on.index("nmod:poss")
    assert on.correct[0, 0, 0, r] == 1 and off.correct[0, 0, 0, off.index("nmod:poss")] == 0
    # aggregates never use the rule: ALL sees "the" correct only
    assert on.correct[0, 0, 0, on.index("ALL")] == off.correct[0, 0, 0, off.index("ALL")] == 1


def test_merge_of_halves_equals_one_pass():
    rng = np.random.default_rng(7)
    pairs = [(random_sentence(rng, n, k), random_attention(rng, n)) for k, n in enumerate(rng.integers(2, 10, 30))]
    whole = head_accuracy(pairs)
    a, b = HeadAccuracy(), HeadAccuracy()
    for s, att in pairs[:13]:
        a.update(s, att)
    for s, att in pairs[13:]:
        b.update(s, att)
    a.merge(b)
    merged = a.compute()
    for rel in whole.relations:
        assert np.array_equal(merged.correct[..., merged.index(rel)], whole.correct[..., whole.index(rel)])
        assert merged.count(rel) == whole.count(rel)
    # per-sentence counts survive the merge, in order
    c1, t1 = whole.units.columns([whole.index("ALL")], [(0, 1, 2)])
    c2, t2 = merged.units.columns([merged.index("ALL")], [(0, 1, 2)])
    assert np.array_equal(c1, c2) and np.array_equal(t1, t2)
    assert c1.sum() == whole.correct[0, 1, 2, whole.index("ALL")]


def test_root_is_never_predicted_and_single_word_sentence_is_wrong():
    sent = Sentence("one", ("Hi",), (0,), ("root",))
    att = WordAttention(np.ones((1, 1, 3, 3), np.float32), np.array([True, False, True]), (0,), (0,))
    scores = head_accuracy([(sent, att)])
    assert scores.correct.sum() == 0 and scores.count("root") == 1


def test_length_mismatch_is_an_alignment_error():
    from probes.errors import AlignmentError

    sent = Sentence("x", ("a", "b"), (2, 0), ("det", "root"), path="f.conllu", line=3)
    att = WordAttention(np.ones((1, 1, 3, 3), np.float32), np.zeros(3, bool), (0,), (0,))
    with pytest.raises(AlignmentError, match=r"^f\.conllu:3: .*expected attention over 2 words, found 3"):
        HeadAccuracy().update(sent, att)


@pytest.mark.slow
def test_matches_reference_on_real_minilm_attention(ewt, minilm_path):
    from probes.corpora import read_treebank
    from probes.extraction.extractor import AttentionExtractor

    sents = list(itertools.islice(read_treebank(ewt / "en_ewt-ud-dev.conllu"), 12))
    extractor = AttentionExtractor.from_pretrained(minilm_path, device="cpu", progress=False)
    pairs = list(extractor.iter_attention(sents))
    pairs = [(s, WordAttention(a.weights[:2, :4], a.is_special, a.layers[:2], a.heads[:4])) for s, a in pairs]
    scores = head_accuracy(pairs)
    check_equal(scores, *reference(pairs))
    assert scores.correct.sum() > 0


@pytest.mark.parametrize("buffer", [1, 3, 1000])
def test_batched_scoring_does_not_depend_on_buffer(buffer):
    """Sentences are scored in batches of same-length stacks; any batch size gives the reference counts."""
    rng = np.random.default_rng(11)
    pairs = [(random_sentence(rng, int(n), k), random_attention(rng, int(n), ties=bool(k % 2)))
             for k, n in enumerate(rng.integers(1, 9, 25))]
    acc = HeadAccuracy(buffer=buffer)
    for s, att in pairs[:10]:
        acc.update(s, att)
    other = HeadAccuracy(buffer=buffer)
    for s, att in pairs[10:]:
        other.update(s, att)
    acc.merge(other)  # both still hold unscored sentences here when buffer > 10
    scores = acc.compute()
    check_equal(scores, *reference(pairs))
    assert scores.n_units == 25 and scores.units.n_units == 25
    rel = scores.index("ALL")
    c, _ = scores.units.columns([rel], [(1, 0, 2)])
    assert c[:, 0].tolist() == [reference([p])[0][(1, 0, 2, "ALL")] for p in pairs]  # per sentence, in order
