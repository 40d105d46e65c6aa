"""GUM/CorefUD coreference reading: mentions, heads, discontinuity, bridging (hand-written fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.corpora import ReadReport, read_documents
from probes.corpora.coref import parse_entity_chunks, tree_head
from probes.errors import AnnotationError

CORPORA = Path(__file__).resolve().parent / "fixtures" / "corpora"


@pytest.fixture(scope="module")
def story():
    report = ReadReport()
    (doc,) = read_documents(CORPORA / "coref.conllu", report=report)
    return doc, report


def test_mentions_hand_checked(story) -> None:
    doc, _ = story
    got = {(m.entity, m.words, m.head, m.sentence, m.etype) for m in doc.mentions}
    # offsets: sentence starts 0, 8, 17, 21 (8 + 9 + 4 + 2 words)
    assert doc.sentence_starts == (0, 8, 17, 21)
    assert got == {
        ("e1", (0, 1, 2), 2, 0, "person"),  # The old man -> man
        ("e9", (0, 1, 2, 3, 4, 5), 2, 0, "person"),  # nested, same start, longer
        ("e2", (4, 5), 5, 0, "animal"),  # his dog -> dog
        ("e1", (4,), 4, 0, "person"),  # his
        ("e3", (8, 9), 9, 1, "object"),
        ("e4", (10, 11, 15), 10, 1, "event"),  # discontinuous: wagged , ... happily
        ("e1", (12,), 12, 1, "person"),
        ("e5", (17,), 17, 2, "person"),
        ("e6", (19, 20, 21, 22), 19, 2, "event"),  # crosses into sentence 4; two roots: leftmost
    }
    assert [m.start for m in doc.mentions] == sorted(m.start for m in doc.mentions)
    assert doc.mentions[0].entity == "e9"  # longer mention first at the same start


def test_bridge_resolves_to_closest_preceding_mention(story) -> None:
    doc, _ = story
    (bridge,) = doc.bridges
    assert bridge.antecedent_entity == "e2"
    assert bridge.anaphor.words == (8, 9)
    assert bridge.antecedent.words == (4, 5)


def test_dropped_things_are_counted(story) -> None:
    _, report = story
    assert report.dropped == {
        "mentions of empty nodes only (no word)": 1,
        "SplitAnte links (read, not kept)": 2,
    }
    assert report.documents == 1 and report.sentences == 4


def test_entity_chunks() -> None:
    assert parse_entity_chunks("(7-a-new(3-a-giv)") == ["(7-a-new", "(3-a-giv)"]
    assert parse_entity_chunks("7)6)(2-x") == ["7)", "6)", "(2-x"]
    with pytest.raises(ValueError):
        parse_entity_chunks("(7-a)x")


def test_tree_head_rule() -> None:
    # words 0..3: 0->1, 1->ROOT, 2->1, 3->2 ; span {2,3}: 2's head (1) is outside
    heads, depth = [1, -1, 1, 2], [2, 1, 2, 3]
    assert tree_head((2, 3), heads, depth) == 2
    assert tree_head((0, 2), heads, depth) == 0  # both heads outside, same depth: leftmost
    assert tree_head((1, 2, 3), heads, depth) == 1


def test_skip_bad_document_whole(tmp_path: Path) -> None:
    good = (CORPORA / "coref.conllu").read_text(encoding="utf-8")
    bad = (CORPORA / "malformed" / "unclosed_entity.conllu").read_text(encoding="utf-8")
    path = tmp_path / "two.conllu"
    path.write_text(bad + "\n" + good, encoding="utf-8")
    report = ReadReport()
    with pytest.warns(UserWarning, match="expected a closing bracket"):
        docs = list(read_documents(path, on_error="skip", report=report))
    assert [d.doc_id for d in docs] == ["story"]
    assert report.n_skipped == 1 and report.documents == 1
    with pytest.raises(AnnotationError, match=r"two\.conllu:3:"):
        list(read_documents(path))
