"""Tests of probes.analysis.bridging on a hand-worked document and against a slow reference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from probes.analysis.bridging import BridgingScores
from probes.corpora.types import Bridge, Document, Mention, Sentence
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import WordAttention
from probes.extraction.windows import document_windows
from probes.heads.intervals import bootstrap_ci

WORDS = [["We", "saw", "a", "house", "."], ["The", "door", "was", "red", "."], ["Its", "roof", "leaked", "."]]
#        offsets 0-4                          5-9                                10-13
HOUSE = Mention("house", (2, 3), 3, 0)
DOOR = Mention("door", (5, 6), 6, 1)  # bridging anaphor, one sentence after its antecedent
ROOF = Mention("roof", (10, 11), 11, 2)  # bridging anaphor, two sentences after
ITS = Mention("house", (10,), 10, 2)


def make_doc(doc_id: str = "b") -> Document:
    sents = tuple(Sentence(f"{doc_id}-{s}", tuple(ws), tuple([0] + [1] * (len(ws) - 1)),
                           ("root",) + ("dep",) * (len(ws) - 1)) for s, ws in enumerate(WORDS))
    return Document(doc_id, sents, (HOUSE, DOOR, ITS, ROOF),
                    (Bridge(DOOR, "house", HOUSE), Bridge(ROOF, "house", HOUSE)))


def count(words: Sequence[str]) -> int:
    return len(words) + 2


def attention(n: int) -> WordAttention:
    """``(1, 2, n+2, n+2)`` over [CLS] words [SEP]; specials get 0.1 each on every row.

    Head 0: uniform over the words (0.8 / n each). Head 1: rows 5 and 6 (The door) put 0.4 on
    word 2 (a) and word 3 (house) respectively, the remaining 0.4 spread evenly over the other
    words; other rows uniform.
    """
    w = np.zeros((1, 2, n + 2, n + 2))
    w[0, :, 1:-1, 1:-1] = 0.8 / n
    for i, t in ((5, 2), (6, 3)):
        row = np.full(n, 0.4 / (n - 1))
        row[t] = 0.4
        w[0, 1, i + 1, 1:-1] = row
    w[0, :, :, [0, -1]] = 0.1
    special = np.zeros(n + 2, bool)
    special[[0, -1]] = True
    return WordAttention(w, special, (0,), (0, 1))


def test_hand_worked_scores() -> None:
    doc = make_doc()
    (win,) = document_windows(doc, count, 512)
    acc = BridgingScores()
    acc.update(win, attention(win.n_words))
    res = acc.compute()
    n = 14
    assert res.counts["scored"] == {"0": 0, "1": 1, "2": 1, "3-5": 0, "6+": 0}
    # door -> house, band 1. Head 0: uniform, ratio = 2 words / 14; argmax ties -> word 0 ('We'): wrong.
    # Head 1: rows 5 and 6 each give (0.4 + 0.4/13) of their 0.8 word mass to {a, house}.
    np.testing.assert_allclose(res.mass_ratio("1")[0], [2 / n, (0.4 + 0.4 / 13) / 0.8])
    np.testing.assert_array_equal(res.accuracy("1")[0], [0, 1])  # row 6 (door) -> 3 (house)
    # roof -> house, band 2: both heads uniform on rows 10, 11
    np.testing.assert_allclose(res.mass_ratio("2")[0], [2 / n, 2 / n])
    np.testing.assert_array_equal(res.accuracy("2")[0], [0, 0])
    np.testing.assert_allclose(res.mass_ratio()[0], [2 / n, ((0.4 + 0.4 / 13) / 0.8 + 2 / n) / 2])
    assert res.chance_mass() == pytest.approx(2 / n)  # both antecedent spans are 2 of 14 words
    _, mass, n_units = res.sums()
    lo, hi = bootstrap_ci(mass[:, 0, 1], n_units)
    assert lo <= res.mass_ratio()[0, 1] <= hi


def test_links_across_windows_are_not_scorable() -> None:
    doc = make_doc()
    acc = BridgingScores()
    for win in document_windows(doc, count, 12, stride=100):  # windows: sentences 0-1, then 2
        acc.update(win, attention_small(win.n_words))
    res = acc.compute()
    assert res.counts["scored"]["1"] == 1 and res.counts["not_scorable"]["2"] == 1
    assert res.total.sum() == 1


def attention_small(n: int) -> WordAttention:
    w = np.full((1, 2, n + 2, n + 2), 1.0 / (n + 2))
    return WordAttention(w, np.r_[True, np.zeros(n, bool), True], (0,), (0, 1))


def slow_reference(doc: Document, att: np.ndarray, direction: str) -> tuple[np.ndarray, np.ndarray]:
    """Mean mass ratio and argmax accuracy per head, with plain loops (words-only maps)."""
    n_layers, n_heads, n, _ = att.shape
    mass, hits = np.zeros((n_layers, n_heads)), np.zeros((n_layers, n_heads))
    for b in doc.bridges:
        src, dst = (b.anaphor, b.antecedent) if direction == "anaphor_to_antecedent" else (b.antecedent, b.anaphor)
        for layer in range(n_layers):
            for head in range(n_heads):
                ratios = [sum(att[layer, head, i, j] for j in dst.words) / sum(att[layer, head, i, :])
                          for i in src.words]
                mass[layer, head] += sum(ratios) / len(ratios)
                i = b.anaphor.head
                col = [(att[layer, head, i, j] if direction == "anaphor_to_antecedent" else att[layer, head, j, i], -j)
                       for j in range(n) if j != i]
                hits[layer, head] += -max(col)[1] == b.antecedent.head
    return mass / len(doc.bridges), hits / len(doc.bridges)


@pytest.mark.parametrize("direction", ["anaphor_to_antecedent", "antecedent_to_anaphor"])
def test_matches_slow_reference(direction: str) -> None:
    rng = np.random.default_rng(4)
    doc = make_doc()
    (win,) = document_windows(doc, count, 512)
    raw = rng.random((2, 3, 16, 16))
    raw /= raw.sum(-1, keepdims=True)
    wa = WordAttention(raw, np.r_[True, np.zeros(14, bool), True], (0, 1), (0, 1, 2))
    acc = BridgingScores(direction=direction)
    acc.update(win, wa)
    mass, hits = slow_reference(doc, wa.words_only(), direction)
    res = acc.compute()
    np.testing.assert_allclose(res.mass_ratio(), mass)
    np.testing.assert_allclose(res.accuracy(), hits)


def test_merge_reset_and_errors() -> None:
    a, b, whole = BridgingScores(), BridgingScores(), BridgingScores()
    for acc, doc_id in ((a, "x"), (b, "y")):
        doc = make_doc(doc_id)
        (win,) = document_windows(doc, count, 512)
        acc.update(win, attention(14))
        whole.update(win, attention(14))
    a.merge(b)
    np.testing.assert_allclose(a.compute().mass, whole.compute().mass)
    assert a.compute().counts == whole.compute().counts
    whole.reset()
    assert whole.compute().total.shape == (0, 5)
    with pytest.raises(ConfigError, match="direction"):
        BridgingScores(direction="sideways")
    with pytest.raises(AlignmentError, match="expected attention over 14 words"):
        BridgingScores().update(win, attention_small(3))


# ---------------------------------------------------------------------------------- any-mention credit (issue 10)
# offsets: We 0 saw 1 a 2 house 3 . 4 | The 5 house 6 had 7 a 8 garden 9 . 10 | The 11 door 12 was 13 red 14 . 15
ANY_WORDS = [["We", "saw", "a", "house", "."], ["The", "house", "had", "a", "garden", "."],
             ["The", "door", "was", "red", "."]]
A_HOUSE, THE_HOUSE = Mention("house", (2, 3), 3, 0), Mention("house", (5, 6), 6, 1)
GARDEN, THE_DOOR = Mention("garden", (8, 9), 9, 1), Mention("door", (11, 12), 12, 2)


def any_doc() -> Document:
    sents = tuple(Sentence(f"any-{s}", tuple(ws), tuple([0] + [1] * (len(ws) - 1)),
                           ("root",) + ("dep",) * (len(ws) - 1)) for s, ws in enumerate(ANY_WORDS))
    # the reader's antecedent of 'The door' is the nearest house mention starting before it: 'The house'
    return Document("any", sents, (A_HOUSE, THE_HOUSE, GARDEN, THE_DOOR), (Bridge(THE_DOOR, "house", THE_HOUSE),))


def pointing(n: int, row: int, targets: Sequence[int | None]) -> WordAttention:
    """``(1, len(targets), n+2, n+2)``: head h's row ``row`` puts 0.5 on word targets[h] (None: uniform rows)."""
    w = np.full((1, len(targets), n + 2, n + 2), 0.5 / (n + 2))
    for h, t in enumerate(targets):
        if t is not None:
            w[0, h, row + 1, t + 1] = 0.5
    return WordAttention(w, np.r_[True, np.zeros(n, bool), True], (0,), tuple(range(len(targets))))


@pytest.mark.parametrize(("credit", "accuracy", "floor", "hit_offsets"),
                         [("any", [1, 1, 0], 2 / 15, [-9, -6]), ("nearest", [0, 1, 0], 1 / 15, [-6])])
def test_any_mention_credit_on_a_hand_made_document(credit: str, accuracy: list[float], floor: float,
                                                   hit_offsets: list[int]) -> None:
    """'The door' bridges to the house, mentioned twice before it: 'a house' (head 3) and 'The house' (head 6).

    Head 0 attends from 'door' (12) to the first 'house' (3), head 1 to the second (6), head 2 is uniform
    (ties left-most: 'We'). Any-mention credit (default) rewards heads 0 and 1; the old rule only head 1.
    """
    doc = any_doc()
    (win,) = document_windows(doc, count, 512)
    acc = BridgingScores(credit=credit)
    acc.update(win, pointing(win.n_words, 12, [3, 6, None]))
    res = acc.compute()
    assert res.options["credit"] == credit and res.links("1") == res.links() == 1
    np.testing.assert_array_equal(res.accuracy("1")[0], accuracy)
    # uniform attention over the 15 candidate words (16 words but the anaphor head) hits a credited head
    assert res.uniform_floor() == pytest.approx(floor)
    # nearest mention before 'The door' is 'a garden' (starts last): wrong under both rules
    assert res.nearest_accuracy() == 0.0
    hits = [o for o, a in zip(res.offsets, res.offset_accuracy()) if a == 1]
    assert hits == hit_offsets and res.offset_accuracy().sum() == len(hit_offsets)
    # the mass ratio stays on the reader's antecedent span (2 of 16 words for a uniform head)
    assert res.chance_mass() == pytest.approx(2 / 16)


def test_nearest_mention_baseline_hits_when_the_antecedent_is_nearest() -> None:
    doc = any_doc()
    doc = Document("any", doc.sentences, (A_HOUSE, THE_HOUSE, THE_DOOR), doc.bridges)  # no garden in between
    (win,) = document_windows(doc, count, 512)
    acc = BridgingScores()
    acc.update(win, pointing(win.n_words, 12, [None]))
    assert acc.compute().nearest_accuracy() == 1.0


def test_bands_merge_until_each_has_enough_links() -> None:
    from probes.analysis.bridging import merge_bands

    groups = merge_bands([0, 12, 25, 40, 3], 30)
    assert [(g.label, g.bands, g.links, g.enough) for g in groups] == [
        ("0-2", ("0", "1", "2"), 37, True), ("3+", ("3-5", "6+"), 43, True)]
    assert [(g.label, g.links, g.enough) for g in merge_bands([1, 2, 0, 0, 0], 30)] == [("0+", 3, False)]
    assert [g.label for g in merge_bands([30, 30, 30, 30, 30], 30)] == ["0", "1", "2", "3-5", "6+"]
    with pytest.raises(ConfigError):
        merge_bands([1, 2], 30)
    with pytest.raises(ConfigError, match="credit"):
        BridgingScores(credit="all")
