"""Tests of probes.analysis.coreference on hand-worked documents and against a slow reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from probes.analysis.coreference import (
    BASELINES,
    SPLIT_ANTECEDENTS,
    AntecedentAccuracy,
    agreement,
    distance_band,
    mention_order,
    mention_type,
)
from probes.corpora.types import Document, Mention, Sentence, SplitAntecedent
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import WordAttention
from probes.extraction.windows import Window, document_windows
from probes.heads.intervals import bootstrap_ci

# (form, UPOS, FEATS) per word; one list per sentence.
SENTENCES = [
    [("John", "PROPN", "Number=Sing"), ("saw", "VERB", "_"), ("Mary", "PROPN", "Number=Sing"), (".", "PUNCT", "_")],
    [("He", "PRON", "Gender=Masc|Number=Sing|Person=3"), ("greeted", "VERB", "_"),
     ("her", "PRON", "Gender=Fem|Number=Sing|Person=3"), ("warmly", "ADV", "_"), (".", "PUNCT", "_")],
    [("The", "DET", "_"), ("old", "ADJ", "_"), ("man", "NOUN", "Number=Sing"), ("smiled", "VERB", "_"),
     (".", "PUNCT", "_")],
    [("Before", "SCONJ", "_"), ("she", "PRON", "_"), ("left", "VERB", "_"), (",", "PUNCT", "_"),
     ("Sue", "PROPN", "Number=Sing"), ("waved", "VERB", "_")],
    [("They", "PRON", "_"), ("met", "VERB", "_"), ("the", "DET", "_"), ("dog", "NOUN", "Number=Sing")],
    [("the", "DET", "_"), ("dog", "NOUN", "Number=Sing"), ("that", "PRON", "_"), ("barked", "VERB", "_")],
]
#                    offsets: John 0, Mary 2 | He 4, her 6 | The old man 9-11 | she 15, Sue 18 |
#                             They 20, the dog 22-23 | the dog that barked 24-27 (nested: the dog 24-25)
MENTIONS = [  # (entity, words, head, sentence)
    ("john", (0,), 0, 0), ("mary", (2,), 2, 0), ("john", (4,), 4, 1), ("mary", (6,), 6, 1),
    ("john", (9, 10, 11), 11, 2),
    ("sue", (15,), 15, 3),  # cataphor: first mention of its entity
    ("sue", (18,), 18, 3),
    ("pair", (20,), 20, 4),  # split antecedent (SplitAnte=john<pair,mary<pair): first mention of its own entity
    ("dog", (22, 23), 23, 4),
    ("dog", (24, 25, 26, 27), 25, 5), ("dog", (24, 25), 25, 5),  # nested, same head word
]


def make_doc(sentences=SENTENCES, mentions=MENTIONS, doc_id: str = "hand") -> Document:
    sents = tuple(
        Sentence(f"{doc_id}-{s}", tuple(w[0] for w in ws), tuple([0] + [1] * (len(ws) - 1)),
                 ("root",) + ("dep",) * (len(ws) - 1), upos=tuple(w[1] for w in ws), feats=tuple(w[2] for w in ws))
        for s, ws in enumerate(sentences))
    ms = tuple(Mention(e, words, head, sent) for e, words, head, sent in mentions)
    return Document(doc_id, sents, ms)


def one_token_per_word(words: Sequence[str]) -> int:
    return len(words) + 2


def pointer_attention(n: int, targets: list[dict[int, dict[int, float]]], *, special: float = 0.6) -> WordAttention:
    """``(1, H, n+2, n+2)`` maps over [CLS] w_0..w_{n-1} [SEP]; head h row i puts targets[h][i] on words.

    Rows not given are uniform over the words. Each special column gets ``special`` (more than any
    word), so a scorer that forgets to drop special tokens fails.
    """
    n_heads = len(targets)
    w = np.full((1, n_heads, n + 2, n + 2), 0.0)
    for h, rows in enumerate(targets):
        for i in range(n):
            row = np.full(n, 0.01)
            for j, v in rows.get(i, {}).items():
                row[j] = v
            w[0, h, i + 1, 1:-1] = row
            w[0, h, i + 1, [0, -1]] = special
    is_special = np.zeros(n + 2, bool)
    is_special[[0, -1]] = True
    return WordAttention(w, is_special, (0,), tuple(range(n_heads)))


def one_window(doc: Document) -> Window:
    (w,) = document_windows(doc, one_token_per_word, 512)
    return w


HEAD_TARGETS = [
    {i: {i - 1: 0.9} for i in range(1, 28)} | {0: {1: 0.9}},  # head 0: previous word
    {4: {0: 0.5}, 6: {7: 0.5, 2: 0.3}, 11: {4: 0.5}, 18: {15: 0.5}, 25: {23: 0.5}},  # head 1: "oracle-ish"
    {},  # head 2: uniform rows: ties go to the left-most word
]


def run(doc: Document, **options: str):
    acc = AntecedentAccuracy(**options)
    w = one_window(doc)
    acc.update(w, pointer_attention(w.n_words, HEAD_TARGETS))
    return acc.compute()


def test_counts_per_type_on_the_hand_worked_document() -> None:
    res = run(make_doc())
    # evaluated: He, her (pronoun); Sue (proper); the old man, the dog that barked, the dog (nominal)
    # no antecedent: she (cataphor), They (split antecedent) | John, Mary | the dog (first)
    assert res.counts == {
        "pronoun": {"evaluated": 2, "no_antecedent": 2, "not_scorable": 0, "cut": 0, "singleton_dropped": 0,
                    "via_split_antecedent": 0},
        "proper": {"evaluated": 1, "no_antecedent": 2, "not_scorable": 0, "cut": 0, "singleton_dropped": 0,
                   "via_split_antecedent": 0},
        "nominal": {"evaluated": 3, "no_antecedent": 1, "not_scorable": 0, "cut": 0, "singleton_dropped": 0,
                    "via_split_antecedent": 0},
    }
    assert res.total.sum() == 6
    # distance to the nearest antecedent: Sue -> she is 0 sentences, all others 1
    assert res.total[0].sum(axis=0).tolist() == [1, 5, 0, 0, 0]


def test_head_accuracy_all_words_candidates() -> None:
    res = run(make_doc())
    acc = res.accuracy()[0]
    # head 0 (previous word): He->'.', her->greeted, man->old, Sue->',', dog(25)->the(24) twice: 0/6
    # head 1: He->John ok, her->warmly wrong (special tokens ignored), man->He ok, Sue->she ok, dog->dog(23) ok x2
    # head 2 (uniform, ties left-most): every row picks John (0): He ok, man ok, others wrong
    np.testing.assert_allclose(acc, [0 / 6, 5 / 6, 2 / 6])
    np.testing.assert_allclose(res.accuracy("pronoun")[0], [0, 1 / 2, 1 / 2])
    np.testing.assert_allclose(res.accuracy("proper")[0], [0, 1, 0])
    np.testing.assert_allclose(res.accuracy("nominal")[0], [0, 1, 1 / 3])
    np.testing.assert_allclose(res.accuracy(band="0")[0], [0, 1, 0])


@pytest.mark.parametrize("candidates, expected_head1", [("earlier", 6 / 6), ("mentions", 6 / 6)])
def test_restricted_candidate_sets_change_the_argmax(candidates: str, expected_head1: float) -> None:
    # her (row 6) puts 0.5 on 'warmly' (later, not a mention head) and 0.3 on Mary: both restrictions fix it
    res = run(make_doc(), candidates=candidates)
    assert res.accuracy()[0, 1] == pytest.approx(expected_head1)


def test_baselines_on_the_hand_worked_document() -> None:
    res = run(make_doc())
    # nearest: He->Mary x, her->He x, man->her x, Sue->she ok, dog->dog ok (x2): 3/6
    # head match: only the two dogs find a mention with head 'dog': 2/6
    # sieve: her agrees with Mary (not He: gender), man agrees with her (no gender on 'man'), Sue agrees
    #        with she, the dogs by head / exact string: 4/6
    assert [res.baseline_accuracy(b) for b in BASELINES] == pytest.approx([3 / 6, 2 / 6, 4 / 6])
    assert [res.baseline_accuracy(b, "pronoun") for b in BASELINES] == pytest.approx([0, 0, 1 / 2])
    assert [res.baseline_accuracy(b, "proper") for b in BASELINES] == pytest.approx([1, 0, 1])
    assert [res.baseline_accuracy(b, "nominal") for b in BASELINES] == pytest.approx([2 / 3, 2 / 3, 2 / 3])


def test_dropping_singletons_changes_only_the_candidates() -> None:
    res = run(make_doc(), singletons="drop")
    # 'They' (entity 'pair') is the only singleton and nobody's nearest candidate: nothing else moves
    assert res.counts["pronoun"]["singleton_dropped"] == 1 and res.counts["pronoun"]["no_antecedent"] == 1
    assert res.total.sum() == 6
    assert [res.baseline_accuracy(b) for b in BASELINES] == pytest.approx([3 / 6, 2 / 6, 4 / 6])
    # a singleton on 'left' (16) sits between 'she' (15) and 'Sue' (18): it becomes Sue's nearest
    # candidate, and it agrees with Sue (a verb has no features), so nearest and the sieve go wrong
    extra = MENTIONS + [("leaving", (16,), 16, 3)]
    keep, drop = run(make_doc(mentions=extra)), run(make_doc(mentions=extra), singletons="drop")
    assert [keep.baseline_accuracy(b) for b in BASELINES] == pytest.approx([2 / 6, 2 / 6, 3 / 6])
    assert [drop.baseline_accuracy(b) for b in BASELINES] == pytest.approx([3 / 6, 2 / 6, 4 / 6])
    np.testing.assert_array_equal(keep.correct, drop.correct)  # heads with candidates="all" do not change
    assert drop.counts["nominal"]["singleton_dropped"] == 1


def test_antecedents_outside_the_window_are_not_scorable_or_wrong() -> None:
    doc = make_doc()
    # windows of about one or two sentences: stride so each sentence starts a window
    windows = document_windows(doc, one_token_per_word, 9, stride=1)
    acc = AntecedentAccuracy()
    doc_scope = AntecedentAccuracy(antecedents="document")
    for w in windows:
        wa = pointer_attention(w.n_words, [{}])
        acc.update(w, wa)
        doc_scope.update(w, wa)
    res, res_doc = acc.compute(), doc_scope.compute()
    # every window holds exactly one sentence: only Sue (antecedent 'she', same sentence) is scorable
    assert [(w.start, w.end) for w in windows] == [(0, 4), (4, 9), (9, 14), (14, 20), (20, 24), (24, 28)]
    assert {t: (c["evaluated"], c["not_scorable"]) for t, c in res.counts.items()} == {
        "pronoun": (0, 2), "proper": (1, 0), "nominal": (0, 3)}
    assert [res.baseline_accuracy(b) for b in BASELINES] == pytest.approx([1, 0, 1])
    # document scope: the five out-of-reach mentions are evaluated and wrong, for heads and baselines
    assert {t: (c["evaluated"], c["not_scorable"]) for t, c in res_doc.counts.items()} == {
        "pronoun": (2, 2), "proper": (1, 0), "nominal": (3, 3)}
    assert [res_doc.baseline_accuracy(b) for b in BASELINES] == pytest.approx([1 / 6, 0, 1 / 6])
    assert np.nanmax(res_doc.accuracy()) <= 1 / 6


def test_mention_crossing_a_window_cut_is_counted_as_cut() -> None:
    sentences = [[("a", "NOUN", "_")] * 3, [("b", "NOUN", "_")] * 3]
    mentions = [("x", (0,), 0, 0), ("x", (2, 3), 3, 0), ("x", (5,), 5, 1)]
    doc = make_doc(sentences, mentions)
    acc = AntecedentAccuracy()
    for w in document_windows(doc, one_token_per_word, 5, stride=100):
        acc.update(w, pointer_attention(w.n_words, [{}]))
    res = acc.compute()
    assert res.counts["nominal"] == {"evaluated": 0, "no_antecedent": 1, "not_scorable": 1, "cut": 1,
                                     "singleton_dropped": 0, "via_split_antecedent": 0}


def slow_reference(doc: Document, att: np.ndarray, candidates: str, direction: str,
                   parts: dict[str, tuple[str, ...]] | None = None) -> np.ndarray:
    """Accuracy per head, written independently with plain loops over one whole-document window.

    ``parts``: split antecedents (anaphor entity -> part entities), used when a mention has no own antecedent.
    """
    ms = sorted(doc.mentions, key=lambda m: (m.start, -m.end, m.head))
    n_layers, n_heads, n, _ = att.shape
    correct = np.zeros((n_layers, n_heads))
    total = 0
    for k, m in enumerate(ms):
        gold = {a.head for a in ms[:k] if a.entity == m.entity and a.end <= m.start}  # preceding mentions
        if not gold and parts:
            gold = {a.head for a in ms[:k] if a.entity in parts.get(m.entity, ()) and a.end <= m.start}
        if not gold:
            continue
        total += 1
        i = m.head
        if candidates == "all":
            cands = [j for j in range(n) if j != i]
        elif candidates == "earlier":
            cands = [j for j in range(i)]
        else:
            cands = sorted({a.head for a in ms if a.end <= m.start} - {i})
        for layer in range(n_layers):
            for head in range(n_heads):
                best, best_j = -1.0, None
                for j in cands:
                    v = att[layer, head, i, j] if direction == "anaphor_to_antecedent" else att[layer, head, j, i]
                    if v > best:
                        best, best_j = v, j
                correct[layer, head] += best_j in gold
    return correct / total


@pytest.mark.parametrize("candidates", ["all", "earlier", "mentions"])
@pytest.mark.parametrize("direction", ["anaphor_to_antecedent", "antecedent_to_anaphor"])
def test_matches_slow_reference_on_random_attention(candidates: str, direction: str) -> None:
    rng = np.random.default_rng(1)
    doc = make_doc()
    w = one_window(doc)
    raw = rng.random((2, 3, w.n_words + 2, w.n_words + 2))
    raw /= raw.sum(-1, keepdims=True)
    special = np.zeros(w.n_words + 2, bool)
    special[[0, -1]] = True
    wa = WordAttention(raw, special, (0, 1), (0, 1, 2))
    acc = AntecedentAccuracy(candidates=candidates, direction=direction)
    acc.update(w, wa)
    expected = slow_reference(doc, wa.words_only(), candidates, direction)
    np.testing.assert_allclose(acc.compute().accuracy(), expected)


@pytest.mark.parametrize("candidates", ["all", "earlier", "mentions"])
@pytest.mark.parametrize("direction", ["anaphor_to_antecedent", "antecedent_to_anaphor"])
def test_split_antecedents_match_slow_reference(candidates: str, direction: str) -> None:
    rng = np.random.default_rng(3)
    doc = dataclasses.replace(make_doc(), split_antecedents=(SplitAntecedent("pair", ("john", "mary")),
                                                             SplitAntecedent("sue", ("dog",))))
    w = one_window(doc)
    raw = rng.random((2, 2, w.n_words + 2, w.n_words + 2))
    special = np.r_[True, np.zeros(w.n_words, bool), True]
    wa = WordAttention(raw, special, (0, 1), (0, 1))
    acc = AntecedentAccuracy(candidates=candidates, direction=direction)
    acc.update(w, wa)
    # 'sue' has its own antecedent for Sue (18) but none for the cataphor 'she' (15): no dog before it either
    parts = {"pair": ("john", "mary"), "sue": ("dog",)}
    np.testing.assert_allclose(acc.compute().accuracy(), slow_reference(doc, wa.words_only(), candidates,
                                                                        direction, parts))
    assert acc.compute().total.sum() == 7


def test_merge_equals_one_pass_and_reset_forgets() -> None:
    docs = [make_doc(doc_id="a"), make_doc(doc_id="b")]
    rng = np.random.default_rng(2)
    pairs = []
    for d in docs:
        w = one_window(d)
        raw = rng.random((1, 2, w.n_words + 2, w.n_words + 2))
        pairs.append((w, WordAttention(raw, np.r_[True, np.zeros(w.n_words, bool), True], (0,), (0, 1))))
    whole, a, b = AntecedentAccuracy(), AntecedentAccuracy(), AntecedentAccuracy()
    for p in pairs:
        whole.update(*p)
    a.update(*pairs[0])
    b.update(*pairs[1])
    a.merge(b)
    r1, r2 = whole.compute(), a.compute()
    assert r1.units == r2.units == ("a", "b")
    np.testing.assert_array_equal(r1.correct, r2.correct)
    np.testing.assert_array_equal(r1.baseline_correct, r2.baseline_correct)
    assert r1.counts == r2.counts
    c, n = r1.head_counts()
    lo, hi = bootstrap_ci(c[:, 0, 1], n)
    assert lo <= r1.accuracy()[0, 1] <= hi
    whole.reset()
    assert whole.compute().total.shape[0] == 0
    with pytest.raises(ConfigError):
        a.merge(AntecedentAccuracy(candidates="earlier"))


def test_bad_options_and_misaligned_attention_are_errors() -> None:
    with pytest.raises(ConfigError, match="candidates: expected one of all, earlier, mentions"):
        AntecedentAccuracy(candidates="nouns")
    with pytest.raises(ConfigError, match="direction"):
        AntecedentAccuracy(direction="up")
    w = one_window(make_doc())
    with pytest.raises(AlignmentError, match="expected attention over 28 words, found 5"):
        AntecedentAccuracy().update(w, pointer_attention(5, [{}]))


def test_small_helpers() -> None:
    assert distance_band([0, 1, 2, 3, 5, 6, 40, -2]).tolist() == [0, 1, 2, 3, 3, 4, 4, 2]
    assert [mention_type(u) for u in ("PRON", "DET", "PROPN", "NOUN", "NUM")] == [
        "pronoun", "pronoun", "proper", "nominal", "nominal"]
    assert agreement("her", "PRON", "_") == ("Sing", "Fem", "3")
    assert agreement("They", "PRON", "_") == ("Plur", None, "3")
    assert agreement("dogs", "NOUN", "Number=Plur") == ("Plur", None, "3")
    assert agreement("I", "PRON", "Number=Sing|Person=1") == ("Sing", None, "1")
    outer, inner = Mention("e", (1, 2, 3), 2, 0), Mention("e", (1, 2), 2, 0)
    assert mention_order([inner, Mention("f", (0,), 0, 0), outer])[1:] == [outer, inner]


# ---------------------------------------------------------------------------------- split antecedents
# tests/fixtures/coref/split_antecedents.conllu, offsets (one sentence per group):
#   Anna 0 met Ben 2 . | She 4 thanked him 6 . | They 8 left together . | Later they 13 returned . |
#   Anna 16 told Ben 18 they 19 won .           entities: 1 = Anna, 2 = Ben, 3 = They (SplitAnte=1<3,2<3)
SPLIT_TARGETS = [
    # head 0: She->Anna ok, him->Ben ok, They->Ben (a part: ok with any-part), they(13)->Anna (wrong: its own
    #         antecedent They is in the window, so only entity 3 counts), Anna(16)->She ok, Ben(18)->told x,
    #         they(19)->they(13) ok
    {4: {0: 0.5}, 6: {2: 0.5}, 8: {2: 0.5}, 13: {0: 0.5}, 16: {4: 0.5}, 18: {17: 0.5}, 19: {13: 0.5}},
    {},  # head 1: uniform rows, ties left-most: everything picks Anna (0)
]


@pytest.fixture()
def split_doc(fixtures_dir: Path) -> Document:
    from probes.corpora import read_documents

    (doc,) = read_documents(fixtures_dir / "coref" / "split_antecedents.conllu")
    assert doc.split_antecedents == (SplitAntecedent("3", ("1", "2")),)
    return doc


def run_split(doc: Document, **options: str):
    acc = AntecedentAccuracy(**options)
    w = one_window(doc)
    acc.update(w, pointer_attention(w.n_words, SPLIT_TARGETS))
    return acc.compute()


def test_split_antecedent_plural_is_evaluated_against_its_parts(split_doc: Document) -> None:
    res = run_split(split_doc)  # default: any-part
    assert res.options["split_antecedents"] == "any-part"
    # pronouns: She, him, They (via its parts Anna, Ben, She, him), they, they; proper: Anna, Ben (second ones)
    assert {t: (c["evaluated"], c["via_split_antecedent"], c["no_antecedent"]) for t, c in res.counts.items()} \
        == {"pronoun": (5, 1, 0), "proper": (2, 0, 2), "nominal": (0, 0, 0)}
    np.testing.assert_allclose(res.accuracy()[0], [5 / 7, 3 / 7])
    # head 1 (all Anna): She ok, him x, They ok (Anna is a part), they x, they x
    np.testing.assert_allclose(res.accuracy("pronoun")[0], [4 / 5, 2 / 5])
    # They: nearest part mention is him (sentence 1), one sentence back; Anna/Ben(16/18): 3 back to She/him
    assert res.total[0].sum(axis=0).tolist() == [0, 5, 0, 2, 0]
    # nearest: She->Ben x, him->She x, They->him ok (part), they->They ok, Anna->they x, Ben->Anna x, they->Ben x
    # head match: they->They, Anna->Anna, Ben->Ben, they->they; the plural They has no 'they' before it
    # sieve: She->Ben x (no gender on Ben), him->Ben ok, They->him ok (no plural agrees: nearest), then the
    #        exact-string matches they, Anna, Ben, they
    assert [res.baseline_accuracy(b) for b in BASELINES] == pytest.approx([2 / 7, 4 / 7, 6 / 7])


def test_ignoring_split_antecedents_is_the_old_rule(split_doc: Document) -> None:
    res = run_split(split_doc, split_antecedents="ignore")
    assert {t: (c["evaluated"], c["via_split_antecedent"], c["no_antecedent"]) for t, c in res.counts.items()} \
        == {"pronoun": (4, 0, 1), "proper": (2, 0, 2), "nominal": (0, 0, 0)}
    np.testing.assert_allclose(res.accuracy()[0], [4 / 6, 2 / 6])
    assert [res.baseline_accuracy(b) for b in BASELINES] == pytest.approx([1 / 6, 4 / 6, 5 / 6])
    # the same document without its SplitAnte links scores identically under both options
    bare = dataclasses.replace(split_doc, split_antecedents=())
    for option in SPLIT_ANTECEDENTS:
        other = run_split(bare, split_antecedents=option)
        np.testing.assert_array_equal(other.correct, res.correct)
        np.testing.assert_array_equal(other.baseline_correct, res.baseline_correct)
        assert other.counts == res.counts


def test_split_antecedents_in_single_sentence_windows(split_doc: Document) -> None:
    windows = document_windows(split_doc, one_token_per_word, 9, stride=1)
    assert [(w.start, w.end) for w in windows] == [(0, 4), (4, 8), (8, 12), (12, 16), (16, 22)]

    def scan(**options: str):
        acc = AntecedentAccuracy(**options)
        for w in windows:
            acc.update(w, pointer_attention(w.n_words, [{}]))
        return acc.compute()

    def counts(res) -> dict[str, tuple[int, ...]]:
        keys = ("evaluated", "via_split_antecedent", "no_antecedent", "not_scorable")
        return {t: tuple(c[k] for k in keys) for t, c in res.counts.items() if t != "nominal"}

    anypart, ignore, document = scan(), scan(split_antecedents="ignore"), scan(antecedents="document")
    # any-part: only they(19) is scorable, through Anna and Ben of its own sentence (own antecedents are
    # outside); They(8) has parts only in earlier windows: not scorable instead of no antecedent
    assert counts(anypart) == {"pronoun": (1, 1, 0, 4), "proper": (0, 0, 2, 2)}
    assert counts(ignore) == {"pronoun": (0, 0, 1, 4), "proper": (0, 0, 2, 2)}
    # document scope: the out-of-window ones are evaluated (and wrong); They(8) and they(19) via their parts
    assert counts(document) == {"pronoun": (5, 2, 0, 4), "proper": (2, 0, 2, 2)}
    # they(19): the uniform head picks Anna(16), a part; nearest picks Ben(18), a part; no 'they' to match;
    # the sieve finds no plural and falls back to nearest
    assert anypart.accuracy()[0, 0] == 1.0
    assert [anypart.baseline_accuracy(b) for b in BASELINES] == pytest.approx([1, 0, 1])
    assert [document.baseline_accuracy(b) for b in BASELINES] == pytest.approx([1 / 7, 0, 1 / 7])


def test_split_antecedents_on_the_first_hand_worked_document() -> None:
    # 'They' (20) = John + Mary: with any-part it is evaluated; heads 1 and 2 pick John (uniform row, left-most)
    doc = dataclasses.replace(make_doc(), split_antecedents=(SplitAntecedent("pair", ("john", "mary")),))
    res = run(doc)
    assert res.counts["pronoun"]["evaluated"] == 3 and res.counts["pronoun"]["via_split_antecedent"] == 1
    np.testing.assert_allclose(res.accuracy()[0], [0 / 7, 6 / 7, 3 / 7])
    # They's nearest earlier mention is Sue (not a part), no 'they' head, nothing plural for the sieve
    assert [res.baseline_accuracy(b) for b in BASELINES] == pytest.approx([3 / 7, 2 / 7, 4 / 7])
    old = run(doc, split_antecedents="ignore")
    np.testing.assert_allclose(old.accuracy()[0], [0 / 6, 5 / 6, 2 / 6])
    # dropping singletons drops the once-mentioned plural too (OntoNotes has no split antecedents)
    drop = run(doc, singletons="drop")
    assert drop.counts["pronoun"]["singleton_dropped"] == 1 and drop.total.sum() == 6


# ---------------------------------------------------------------------------------- enclosing mentions (issue 10)
# offsets: Anna 0 saw 1 her 2 mother 3 . 4 | She 5 hugged 6 her 7 . 8 | Ben 9 , 10 the 11 teacher 12 , 13 smiled 14 . 15
ENCLOSING_SENTENCES = [
    [("Anna", "PROPN", "Number=Sing"), ("saw", "VERB", "_"), ("her", "PRON", "Gender=Fem|Number=Sing|Person=3"),
     ("mother", "NOUN", "Number=Sing"), (".", "PUNCT", "_")],
    [("She", "PRON", "Gender=Fem|Number=Sing|Person=3"), ("hugged", "VERB", "_"),
     ("her", "PRON", "Gender=Fem|Number=Sing|Person=3"), (".", "PUNCT", "_")],
    [("Ben", "PROPN", "Number=Sing"), (",", "PUNCT", "_"), ("the", "DET", "_"), ("teacher", "NOUN", "_"),
     (",", "PUNCT", "_"), ("smiled", "VERB", "_"), (".", "PUNCT", "_")],
]
ENCLOSING_MENTIONS = [
    ("anna", (0,), 0, 0), ("mother", (2, 3), 3, 0), ("anna", (2,), 2, 0),  # [her mother] encloses her
    ("anna", (5,), 5, 1), ("mother", (7,), 7, 1),
    ("ben", (9, 10, 11, 12), 9, 2), ("ben", (11, 12), 12, 2),  # an apposition nested in its own entity's mention
]
ENCLOSING_TARGETS = [{2: {3: 0.9}, 5: {2: 0.9}, 7: {3: 0.9}, 12: {9: 0.9}}]  # one head


def test_baselines_never_choose_a_mention_enclosing_the_anaphor() -> None:
    """"Anna saw [her mother]": the antecedent of "her" is Anna, never the mention holding it.

    Evaluated (antecedent = a mention ending before the anaphor starts): her(2) -> Anna, She -> Anna or her(2),
    her(7) -> her mother. 'the teacher' is nested in 'Ben, the teacher' (its own entity) and has no preceding
    mention: no antecedent. The old rule (any mention starting earlier, other head word) also evaluated it,
    against the enclosing mention, and gave 4 evaluated mentions.
    """
    doc = make_doc(ENCLOSING_SENTENCES, ENCLOSING_MENTIONS, doc_id="enclosing")
    acc = AntecedentAccuracy()
    w = one_window(doc)
    acc.update(w, pointer_attention(w.n_words, ENCLOSING_TARGETS))
    res = acc.compute()
    assert res.counts["pronoun"]["evaluated"] == 3 and res.counts["nominal"] == {
        "evaluated": 0, "no_antecedent": 2, "not_scorable": 0, "cut": 0, "singleton_dropped": 0,
        "via_split_antecedent": 0}
    # nearest: her(2) -> Anna ok (old rule: 'her mother' x), She -> her(2) ok, her(7) -> She x       -> 2/3
    # head match: no preceding mention has head 'her' for her(2) or 'she'; her(7) -> her(2) (Anna) x -> 0/3
    # sieve: her(2) -> Anna (agrees; old rule: 'her mother', which agrees too, x), She -> her(2) by agreement,
    #        her(7) -> her(2) by exact string x                                                      -> 2/3
    # (old rule, 4 evaluated: nearest 2/4 and sieve 2/4, pronouns 1/3 each)
    assert [res.baseline_accuracy(b) for b in BASELINES] == pytest.approx([2 / 3, 0, 2 / 3])
    assert [res.baseline_accuracy(b, "pronoun") for b in BASELINES] == pytest.approx([2 / 3, 0, 2 / 3])
    # the head: her(2) -> mother x, She -> her(2) ok, her(7) -> mother ok; 'the teacher' is no longer
    # credited for attending to the head of the mention that encloses it (old rule: 3/4)
    assert res.accuracy()[0, 0] == pytest.approx(2 / 3)
    # candidates="mentions": her(2) may choose only Anna (the enclosing 'her mother' is no candidate)
    only = AntecedentAccuracy(candidates="mentions")
    only.update(w, pointer_attention(w.n_words, ENCLOSING_TARGETS))
    assert only.compute().accuracy()[0, 0] == pytest.approx(1.0)
