"""GUM/CorefUD coreference reading: mentions, heads, discontinuity, bridging (hand-written fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.corpora import ReadReport, read_documents
from probes.corpora.coref import parse_entity_chunks, tree_head
from probes.corpora.types import SplitAntecedent
from probes.errors import AnnotationError

CORPORA = Path(__file__).resolve().parents[1] / "fixtures" / "corpora"


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
    assert report.dropped == {"mentions of empty nodes only (no word)": 1}  # SplitAnte is kept now
    assert report.documents == 1 and report.sentences == 4


def test_split_antecedents_are_kept(story) -> None:
    doc, _ = story
    # "They both left." carries SplitAnte=e1<e5,e2<e5: entity e5 is the man (e1) plus his dog (e2)
    assert doc.split_antecedents == (SplitAntecedent("e5", ("e1", "e2")),)


SPLIT_DOC = """# newdoc id = pair
# sent_id = pair-1
1\tAnna\t_\tPROPN\t_\t_\t2\tnsubj\t_\tEntity=(a-person-1)
2\tmet\t_\tVERB\t_\t_\t0\troot\t_\t_
3\tBen\t_\tPROPN\t_\t_\t2\tobj\t_\tEntity=(b-person-1)
4\tand\t_\tCCONJ\t_\t_\t5\tcc\t_\t_
5\tCy\t_\tPROPN\t_\t_\t3\tconj\t_\tEntity=(c-person-1)

# sent_id = pair-2
1\tThey\t_\tPRON\t_\t_\t2\tnsubj\t_\tEntity=(g-person-1)|SplitAnte={first}
2\tleft\t_\tVERB\t_\t_\t0\troot\t_\t_
3\tthey\t_\tPRON\t_\t_\t2\tobj\t_\tEntity=(g-person-1)|SplitAnte={second}
"""


def test_split_antecedent_links_of_one_entity_are_merged_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "pair.conllu"
    path.write_text(SPLIT_DOC.format(first="b<g,a<g", second="c<g,a<g"), encoding="utf-8")
    (doc,) = read_documents(path)
    # links on two mentions of g: b, a, then c (a again is not repeated)
    assert doc.split_antecedents == (SplitAntecedent("g", ("b", "a", "c")),)


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ("a<g", "x<g", r"pair\.conllu:12: .*expected split-antecedent entity x to have a mention"),
        ("a<zz", "b<g", r"pair\.conllu:10: .*expected split-antecedent entity zz to have a mention"),
        ("a-g", "b<g", r"pair\.conllu:10: .*expected SplitAnte=antecedent<anaphor, found 'a-g'"),
    ],
)
def test_bad_split_antecedent_is_located(tmp_path: Path, first: str, second: str, message: str) -> None:
    path = tmp_path / "pair.conllu"
    path.write_text(SPLIT_DOC.format(first=first, second=second), encoding="utf-8")
    with pytest.raises(AnnotationError, match=message):
        list(read_documents(path))


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


def test_global_entity_holds_for_the_rest_of_the_file(tmp_path: Path) -> None:
    """``# global.Entity`` is given once per file (or per document, as GUM does): a later document without
    its own comment reads its Entity fields in the file's order, not CorefUD's default order."""
    doc = ("# newdoc id = {doc}\n{header}# sent_id = {doc}-1\n# text = He left.\n"
           "1\tHe\the\tPRON\t_\t_\t2\tnsubj\t_\tEntity=(1-person-new-sssss-cf1-1-coref)\n"
           "2\tleft\tleave\tVERB\t_\t_\t0\troot\t_\t_\n\n")
    header = "# global.Entity = GRP-etype-infstat-salience-centering-minspan-link-identity\n"
    path = tmp_path / "two.conllu"
    path.write_text(doc.format(doc="a", header=header) + doc.format(doc="b", header=""), encoding="utf-8")
    first, second = read_documents(path)
    assert [m.infstat for m in first.mentions] == [m.infstat for m in second.mentions] == ["new"]
    assert [m.etype for m in second.mentions] == ["person"]
    path.write_text(doc.format(doc="b", header=""), encoding="utf-8")  # no comment at all: the default order,
    with pytest.raises(AnnotationError, match=r"two\.conllu:4:.*head field"):  # whose third field is the head
        list(read_documents(path))
