"""Tests of probes.probing: features, decoding, per-head probes, parsers, controls, vectors.

Known answers come from synthetic attention with one planted head that points at
the gold head (probes.probing.synthetic), and from slow loop references written
here independently of the vectorised code.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from probes.corpora.types import Sentence
from probes.errors import AlignmentError, ConfigError, FormatError, SkippedItemWarning
from probes.extraction.attention import WordAttention
from probes.probing import (
    AttnEmbParser,
    AttnParser,
    DistancesEmbParser,
    GloveVectors,
    HeadSelectionProbe,
    OffsetControlTask,
    PerHeadEvaluator,
    PerHeadLabelProbe,
    PerHeadProbe,
    RightBranching,
    attention_features,
    distance_features,
    max_spanning_tree,
    pair_features,
    random_init_copy,
    selectivity,
    uas_counts,
    uuas_counts,
)
from probes.probing.per_head import POOLED, fit_evaluate
from probes.probing.synthetic import planted_pairs

PLANTED = (1, 2)  # 0-based (layer, head); "2-3" in outputs


# ----------------------------------------------------------------------------- helpers
def _random_attention(m: int, *, lead: int = 1, trail: int = 1, n_layers: int = 2, n_heads: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = lead + m + trail
    weights = rng.dirichlet(np.ones(n), size=(n_layers, n_heads, n)).astype(np.float32)
    special = np.zeros(n, dtype=bool)
    special[:lead] = True
    special[lead + m:] = True
    return WordAttention(weights, special, tuple(range(n_layers)), tuple(range(n_heads)))


def _sentence(heads, relations=None, words=None) -> Sentence:
    m = len(heads)
    return Sentence(
        sent_id="s",
        words=tuple(words or [f"w{i}" for i in range(m)]),
        heads=tuple(heads),
        relations=tuple(relations or ["dep"] * m),
    )


def _vectors(vocab_size: int = 40, dim: int = 8, seed: int = 0) -> GloveVectors:
    rng = np.random.default_rng(seed)
    return GloveVectors({f"w{i}": i for i in range(vocab_size)},
                        rng.normal(size=(vocab_size, dim)).astype(np.float32), "synthetic")


@pytest.fixture(scope="module")
def planted():
    """300 training and 100 held-out synthetic sentences, head 2-3 planted."""
    return list(planted_pairs(300, planted=PLANTED, random_state=0)), list(planted_pairs(100, planted=PLANTED,
                                                                                          random_state=1))


# ----------------------------------------------------------------------------- features
@pytest.mark.parametrize("lead,trail", [(1, 1), (2, 0), (0, 2)])
def test_attention_features_match_loop_reference(lead, trail):
    m = 5
    att = _random_attention(m, lead=lead, trail=trail, seed=lead * 3 + trail)
    pa = attention_features(att)
    w = att.weights
    n_layers, n_heads, n = w.shape[:3]
    words = list(range(lead, lead + m))
    start, end = list(range(lead)), list(range(lead + m, n))
    lh = n_layers * n_heads
    assert pa.words.shape == (2 * lh, m, m) and pa.root.shape == (2 * lh, m, 2)
    for layer in range(n_layers):
        for head in range(n_heads):
            k = layer * n_heads + head
            for i in range(m):
                for c in range(m):
                    assert pa.words[k, i, c] == pytest.approx(w[layer, head, words[i], words[c]])
                    assert pa.words[lh + k, i, c] == pytest.approx(w[layer, head, words[c], words[i]])
                assert pa.root[k, i, 0] == pytest.approx(sum(w[layer, head, words[i], s] for s in start))
                assert pa.root[k, i, 1] == pytest.approx(sum(w[layer, head, words[i], s] for s in end))
                assert pa.root[lh + k, i, 0] == pytest.approx(sum(w[layer, head, s, words[i]] for s in start))
                assert pa.root[lh + k, i, 1] == pytest.approx(sum(w[layer, head, s, words[i]] for s in end))


def test_distance_features_match_clark_channels():
    m = 6
    f = distance_features(m)
    assert f.shape == (m, m + 1, 8)
    for i in range(1, m + 1):
        assert list(f[i - 1, 0]) == [0, 0, 0, 0, 0, 0, 0, 1]  # ROOT column: only the ROOT indicator
        for c in range(1, m + 1):
            expected = [(c - i) / m if c > i else 0, (i - c) / m if c < i else 0, c == i, c == i - 1, c == i + 1,
                        c == i - 2, c == i + 2, 0]
            assert f[i - 1, c] == pytest.approx(np.asarray(expected, dtype=np.float32))


def test_pair_features_rows_and_labels():
    s = _sentence([2, 0, 2])
    att = _random_attention(3)
    batch = pair_features(s, att, group_offset=10)
    assert batch.X.shape == (3 * 4, 8 + 3 * 8)  # K=8 maps, 2K ROOT channels, 8 distance channels
    assert list(batch.groups) == [10] * 4 + [11] * 4 + [12] * 4
    assert batch.y.reshape(3, 4).argmax(1).tolist() == [2, 0, 2]
    assert batch.y.sum() == 3


def test_mismatched_attention_raises_with_location():
    s = Sentence("s1", ("a", "b", "c"), (2, 0, 2), ("x", "root", "y"), path="data.conllu", line=7)
    with pytest.raises(AlignmentError, match=r"^data\.conllu:7: .*expected attention over its 3 words, found 2"):
        pair_features(s, _random_attention(2))


# ----------------------------------------------------------------------------- decoding and metrics
def _brute_force_mst_weight(w: np.ndarray) -> float:
    n = w.shape[0]
    best = -math.inf
    edges = [(i, j) for i in range(n) for j in range(i + 1, n)]
    for tree in itertools.combinations(edges, n - 1):
        parent = list(range(n))

        def find(x, parent=parent):
            while parent[x] != x:
                x = parent[x]
            return x

        ok = True
        for i, j in tree:
            a, b = find(i), find(j)
            if a == b:
                ok = False
                break
            parent[a] = b
        if ok:
            best = max(best, sum(w[i, j] for i, j in tree))
    return best


@pytest.mark.parametrize("seed", range(8))
def test_max_spanning_tree_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 6))
    w = rng.normal(size=(n, n))
    w = w + w.T
    edges = max_spanning_tree(w)
    assert len(edges) == n - 1 and len(set(edges)) == n - 1
    assert sum(w[i, j] for i, j in edges) == pytest.approx(_brute_force_mst_weight(w))


def test_uas_excludes_punct_and_counts_root():
    s = _sentence([2, 0, 2, 2], ["nsubj", "root", "obj", "punct"])
    assert uas_counts(np.array([2, 0, 1, 2]), s) == (2, 3)  # word 3 wrong; the punct word is not scored


def test_uuas_by_hand():
    # gold: 1 <- 2 -> 3, 4 is punct attached to 2; predicted scores favour edges (1,2) and (1,3).
    s = _sentence([2, 0, 2, 2], ["nsubj", "root", "obj", "punct"])
    scores = np.full((4, 5), -10.0)
    scores[0, 2] = 0.0  # word1 -> word2
    scores[2, 1] = 0.0  # word3 -> word1
    correct, total = uuas_counts(scores, s)
    assert (correct, total) == (1, 2)  # gold non-punct edges {(0,1), (1,2)}; predicted tree {(0,1), (0,2)}


# ----------------------------------------------------------------------------- per-head probes
@pytest.fixture(scope="module")
def per_head_scores(planted):
    train, test = planted
    return fit_evaluate(PerHeadProbe(progress=False), train, test)


def test_per_head_probe_ranks_planted_head_first(per_head_scores):
    sc = per_head_scores
    acc = sc.accuracy  # (R, L, H)
    for r, rel in enumerate(sc.relations):
        if rel == "root":
            continue  # the root relation is solved by position alone (the ROOT indicator)
        best = np.unravel_index(np.argmax(acc[r]), acc[r].shape)
        assert best == PLANTED, rel
        assert acc[r][PLANTED] > 0.95
        assert sc.floor_accuracy[r] < 0.4  # the position-only probe cannot do it
    # the other heads attend at random: about the positional floor
    i = sc.relations.index(POOLED)
    others = np.delete(acc[i].ravel(), PLANTED[0] * acc.shape[2] + PLANTED[1])
    assert others.max() < sc.floor_accuracy[i] + 0.08


def test_per_head_argmax_counts_match_loop_reference(planted, per_head_scores):
    _, test = planted
    i = per_head_scores.relations.index(POOLED)
    expected = np.zeros((2, 2, 3))
    for s, a in test:
        w = a.words_only()
        for layer, head in itertools.product(range(2), range(3)):
            for d, mat in enumerate((w[layer, head], w[layer, head].T)):
                for dep in range(s.n_words):
                    if s.relations[dep] == "punct":
                        continue
                    row = [(-math.inf if c == dep else mat[dep, c]) for c in range(s.n_words)]
                    pred = int(np.argmax(row)) + 1
                    expected[d, layer, head] += pred == s.heads[dep]
    assert np.array_equal(per_head_scores.argmax_correct[i], expected)


def test_per_head_evaluator_merge_equals_one_pass(planted):
    train, test = planted
    probe = PerHeadProbe(progress=False).fit(train[:60])
    one, a, b = PerHeadEvaluator(probe), PerHeadEvaluator(probe), PerHeadEvaluator(probe)
    for k, (s, att) in enumerate(test[:30]):
        one.update(s, att)
        (a if k % 2 else b).update(s, att)
    a.merge(b)
    x, y = one.compute(), a.compute()
    assert np.array_equal(x.correct, y.correct) and np.array_equal(x.counts, y.counts)
    assert np.array_equal(x.argmax_correct, y.argmax_correct)


def test_selectivity_high_for_planted_head_near_zero_for_random_head():
    # A large vocabulary makes the control behaviours follow the gold offset distribution token by token,
    # so a head without information scores about the same on task and control.
    train = list(planted_pairs(400, planted=PLANTED, vocab_size=5000, random_state=2))
    test = list(planted_pairs(200, planted=PLANTED, vocab_size=5000, random_state=3))
    control = OffsetControlTask(random_state=0).fit(s for s, _ in train)  # the floor-adjusted form is about it
    task = fit_evaluate(PerHeadProbe(progress=False), train, test)
    ctl = fit_evaluate(PerHeadProbe(progress=False), [(control.relabel(s), a) for s, a in train],
                       [(control.relabel(s), a) for s, a in test])
    i, j = task.relations.index(POOLED), ctl.relations.index(POOLED)
    sel = selectivity(task.accuracy[i], ctl.accuracy[j], task.floor_accuracy[i], ctl.floor_accuracy[j])  # (L, H)
    assert sel[PLANTED] > 0.6
    others = np.delete(sel.ravel(), PLANTED[0] * 3 + PLANTED[1])
    assert np.abs(others).max() < 0.08
    # raw selectivity (accuracy - control accuracy) of an uninformative head is the difference of the floors
    raw = np.delete((task.accuracy[i] - ctl.accuracy[j]).ravel(), PLANTED[0] * 3 + PLANTED[1])
    assert np.allclose(raw, task.floor_accuracy[i] - ctl.floor_accuracy[j], atol=0.08)


def test_per_head_unseen_relations_are_counted_not_scored(planted):
    train, test = planted
    probe = PerHeadProbe(progress=False).fit(train[:40])
    s, a = test[0]
    odd = Sentence(s.sent_id, s.words, s.heads, tuple("never-seen" for _ in s.words))
    ev = PerHeadEvaluator(probe)
    ev.update(odd, a)
    assert ev.compute().n_unseen == s.n_words


# ----------------------------------------------------------------------------- label probes
def _label_pairs(n: int, seed: int):
    """Label A: the planted head attends 0.9 to the gold head; label B: it attends at random."""
    rng = np.random.default_rng(seed)
    for s, a in planted_pairs(n, planted=PLANTED, random_state=seed):
        labels = rng.choice(["A", "B"], size=s.n_words)
        w = a.weights.copy()
        for i, lab in enumerate(labels):
            if lab == "B":
                w[PLANTED[0], PLANTED[1], i + 1] = rng.dirichlet(np.ones(w.shape[-1]))
        yield Sentence(s.sent_id, s.words, s.heads, tuple(labels)), WordAttention(w, a.is_special, a.layers, a.heads)


def test_label_probe_finds_planted_head():
    train, test = list(_label_pairs(200, 0)), list(_label_pairs(80, 1))
    probe = PerHeadLabelProbe(progress=False).fit(train)
    acc = probe.score(test)  # (L*H + 1,), floor last
    assert acc.shape == (7,)
    planted = PLANTED[0] * 3 + PLANTED[1]
    assert acc[planted] > 0.9
    assert np.delete(acc[:-1], planted).max() < 0.65 and acc[-1] < 0.65


def test_label_probe_reservoir_is_bounded():
    probe = PerHeadLabelProbe(max_arcs=50, progress=False).fit(list(_label_pairs(40, 0)))
    assert probe.n_arcs_used_ == 50 and probe.n_arcs_seen_ > 50


# ----------------------------------------------------------------------------- parsers
def test_attn_parser_reaches_near_perfect_uas(planted):
    train, test = planted
    parser = AttnParser(epochs=4, progress=False).fit(train)
    assert parser.score(test) > 0.97
    w = parser.head_weights()  # (2, L, H): the planted map, dependent-to-head direction, weighs most
    assert np.unravel_index(np.argmax(w), w.shape) == (0, *PLANTED)


def test_attn_emb_parser_reaches_near_perfect_uas(planted):
    train, test = planted
    parser = AttnEmbParser(_vectors(), epochs=4, progress=False).fit(train)
    assert parser.score(test) > 0.95


def _slow_clark_logits(F_words, F_root, theta_fn, root_scalars):
    """Loop reference of p(c|i) logits: sum_k theta_k(i, c) F[k, i, c]; ROOT via the two scalars."""
    K, m, _ = F_words.shape
    out = np.zeros((m, m + 1))
    for i in range(m):
        for k in range(K):
            out[i, 0] += theta_fn(i, None, k) * (root_scalars[0] * F_root[k, i, 0] + root_scalars[1] * F_root[k, i, 1])
            for c in range(m):
                out[i, c + 1] += theta_fn(i, c, k) * F_words[k, i, c]
    return out


def test_attn_and_attn_emb_logits_follow_the_paper_formula(planted):
    import torch

    s, a = planted[0][0]
    vec = _vectors()
    pa = attention_features(a)
    attn = AttnParser(progress=False).fit(planted[0][:3])
    theta = attn.module_.theta.detach().numpy()
    scal = attn.module_.root.detach().numpy()
    ref = _slow_clark_logits(pa.words, pa.root, lambda i, c, k: theta[k], scal)
    with torch.no_grad():
        got = attn._logits(s, a).numpy()
    assert np.allclose(got, ref, atol=1e-4)

    emb = AttnEmbParser(vec, progress=False).fit(planted[0][:3])
    W = emb.module_.dense.weight.detach().numpy()
    b = emb.module_.dense.bias.detach().numpy()
    V = vec(s.words)
    d = V.shape[1]

    def theta_fn(i, c, k):  # W_k . [v_c ; v_i] + b_k, ROOT candidate = zero vector; candidate c gets word c's vector
        v_c = np.zeros(d) if c is None else V[c]
        return float(W[k] @ np.concatenate([v_c, V[i]]) + b[k])

    ref = _slow_clark_logits(pa.words, pa.root, theta_fn, emb.module_.root.detach().numpy())
    with torch.no_grad():
        got = emb._logits(s, a).numpy()
    assert np.allclose(got, ref, atol=1e-3)


def test_distances_emb_logits_match_mlp_reference(planted):
    import torch

    s, a = planted[0][0]
    vec = _vectors()
    p = DistancesEmbParser(vec, hidden=5, progress=False).fit(planted[0][:3])
    W1, b1 = p.module_.hidden.weight.detach().numpy(), p.module_.hidden.bias.detach().numpy()
    W2, b2 = p.module_.out.weight.detach().numpy(), p.module_.out.bias.detach().numpy()
    V, D = vec(s.words), distance_features(s.n_words)
    m = s.n_words
    ref = np.zeros((m, m + 1))
    for i in range(m):
        for c in range(m + 1):
            v_c = np.zeros(V.shape[1]) if c == 0 else V[c - 1]
            x = np.concatenate([D[i, c], v_c, V[i]])
            ref[i, c] = (W2 @ np.tanh(W1 @ x + b1) + b2)[0]
    with torch.no_grad():
        assert np.allclose(p._logits(s, a).numpy(), ref, atol=1e-4)


def test_distances_emb_learns_a_positional_rule():
    rng = np.random.default_rng(0)
    pairs = []
    for k in range(120):  # every word's head is the next word, the last word is the root
        m = int(rng.integers(3, 9))
        pairs.append((_sentence(list(range(2, m + 1)) + [0], words=[f"w{int(x)}" for x in rng.integers(0, 40, m)]),
                      _random_attention(m, seed=k)))
    parser = DistancesEmbParser(_vectors(), epochs=3, progress=False).fit(pairs[:100])
    assert parser.score(pairs[100:]) > 0.95


def test_right_branching_predicts_next_word_clipped():
    s = _sentence([2, 3, 0])
    rb = RightBranching().fit()
    assert rb.predict([(s, _random_attention(3))])[0].tolist() == [2, 3, 3]
    assert rb.score([(s, _random_attention(3))]) == pytest.approx(2 / 3)


def test_parsers_count_and_warn_about_skipped_sentences(planted):
    train = planted[0][:20]
    s, a = train[0]
    bad = (Sentence(s.sent_id, s.words[:-1], s.heads[:-1], s.relations[:-1]), a)
    with pytest.warns(SkippedItemWarning, match="skipped 1 sentence"):
        parser = AttnParser(progress=False).fit(train + [bad])
    assert parser.n_skipped_ == 1 and parser.n_sentences_seen_ == 20


def test_parser_parameter_errors(planted):
    with pytest.raises(ConfigError, match="'epochs' parameter of AttnParser must be an int >= 1. Got 0"):
        AttnParser(epochs=0).fit(planted[0])
    with pytest.raises(ConfigError, match="re-iterable"):
        AttnParser(epochs=2, progress=False).fit(iter(planted[0]))
    with pytest.raises(ConfigError, match="needs static word vectors"):
        AttnEmbParser(progress=False).fit(planted[0][:2])


def test_same_seed_same_parser(planted):
    a = AttnParser(progress=False).fit(planted[0][:50]).module_.theta.detach().numpy()
    b = AttnParser(progress=False).fit(planted[0][:50]).module_.theta.detach().numpy()
    assert np.array_equal(a, b)


def test_head_selection_probe_on_pair_features(planted):
    train, test = planted
    rows = [pair_features(s, a) for s, a in train[:80]]
    X = np.concatenate([r.X for r in rows])
    y = np.concatenate([r.y for r in rows])
    probe = HeadSelectionProbe(C=10.0, max_iter=500, random_state=0).fit(X, y)
    correct = total = 0
    for s, a in test[:40]:
        b = pair_features(s, a)
        _, heads = probe.select_heads(b.X, b.groups, b.candidates)
        correct += int((heads == np.asarray(s.heads)).sum())
        total += s.n_words
    assert correct / total > 0.95


# ----------------------------------------------------------------------------- controls
def test_offset_control_task_is_type_consistent_and_follows_gold_offsets():
    sents = [s for s, _ in planted_pairs(300, vocab_size=3000, random_state=5)]
    ctl = OffsetControlTask(random_state=1).fit(sents)
    assert ctl.probabilities_.sum() == pytest.approx(1.0)
    # the same type always gets the same behaviour, in any sentence
    assert len({ctl.behaviour("w7") for _ in range(3)}) == 1
    assert ctl.behaviour("W7") == ctl.behaviour("w7")  # lowercased types
    again = OffsetControlTask(random_state=1).fit(sents)
    assert [again.heads(s) for s in sents[:20]] == [ctl.heads(s) for s in sents[:20]]
    # behaviours over many types follow the fitted distribution
    draws = np.array([ctl.behaviour(f"type{k}") for k in range(20000)])
    for off, p in zip(ctl.offsets_, ctl.probabilities_):
        assert abs((draws == off).mean() - p) < 0.015
    for s in sents[:50]:
        heads = ctl.heads(s)
        assert all(0 <= h <= s.n_words and h != i for i, h in enumerate(heads, start=1))


def test_offset_control_heads_by_hand():
    ctl = OffsetControlTask(random_state=0)
    ctl._counts.update({2: 1})  # only behaviour: offset +2
    ctl.finalize()
    s = _sentence([0, 1, 1, 1], words=["a", "b", "c", "d"])
    assert ctl.heads(s) == (3, 4, 4, 0)  # clipped to the last word; the last word would attach to itself -> ROOT


def test_random_init_copy_keeps_only_word_and_position_embeddings():
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=32))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fresh, kept = random_init_copy(model, random_state=3)
    again, _ = random_init_copy(model, random_state=3)
    assert sorted(kept) == ["embeddings.position_embeddings.weight", "embeddings.word_embeddings.weight"]
    new = fresh.state_dict()
    for name, value in before.items():
        assert torch.equal(model.state_dict()[name], value)  # the original is untouched
        assert torch.equal(again.state_dict()[name], new[name])  # seeded
        if name in kept:
            assert torch.equal(new[name], value)
        elif name.endswith("attention.self.query.weight"):
            assert not torch.equal(new[name], value)
            assert float(new[name].std()) == pytest.approx(0.02, rel=0.3)


# ----------------------------------------------------------------------------- vectors
def test_glove_vectors_lowercase_zero_oov_and_header(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("2 3\nthe 1 2 3\nCat 0.5 0 1\n", encoding="utf-8")
    vec = GloveVectors.load(path)
    out = vec(["The", "cat", "dog"])
    assert vec.dim == 3
    assert out.tolist() == [[1, 2, 3], [0.5, 0, 1], [0, 0, 0]]


def test_glove_vectors_bad_line_has_location(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("the 1 2 3\ncat 1 2\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"v\.txt:2: expected 3 numbers after the word .* found 2"):
        GloveVectors.load(path)


def test_model_input_vectors_mean_pool_subwords(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from probes.probing import ModelInputVectors

    vocab = {"[UNK]": 0, "play": 1, "##ing": 2, "the": 3, "game": 4}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")
    matrix = np.arange(15, dtype=np.float32).reshape(5, 3)
    out = ModelInputVectors(matrix, fast)(["playing", "the", "game"])
    assert np.allclose(out[0], (matrix[1] + matrix[2]) / 2)
    assert np.allclose(out[1], matrix[3]) and np.allclose(out[2], matrix[4])
