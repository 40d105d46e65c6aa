"""spaCy bridge, .spacy DocBin corpora and CoNLL-2012 documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

spacy = pytest.importorskip("spacy")
from spacy.tokens import Doc, DocBin  # noqa: E402
from spacy.vocab import Vocab  # noqa: E402

from probes.corpora import (  # noqa: E402
    ReadReport,
    from_spacy,
    parse_text,
    read_documents,
    read_treebank,
    write_conllu,
)
from probes.errors import AnnotationError, ConfigError, FormatError, SkippedItemWarning  # noqa: E402

CORPORA = Path(__file__).resolve().parents[1] / "fixtures" / "corpora"


def _doc() -> Doc:
    # two sentences; "\n" is a whitespace token attached to "ran"
    words = ["Dogs", "ran", ".", "\n", "Cats", "slept", "."]
    spaces = [True, False, False, False, True, False, False]
    heads = [1, 1, 1, 1, 5, 5, 5]  # absolute indices; a root points at itself
    deps = ["nsubj", "ROOT", "punct", "dep", "nsubj", "ROOT", "punct"]
    sent_starts = [1, 0, 0, 0, 1, 0, 0]
    return Doc(Vocab(), words=words, spaces=spaces, heads=heads, deps=deps, sent_starts=sent_starts)


def test_from_spacy_roots_and_whitespace() -> None:
    first, second = from_spacy(_doc(), doc_id="d")
    assert first.words == ("Dogs", "ran", ".")
    assert first.heads == (2, 0, 2)
    assert first.relations == ("nsubj", "root", "punct")
    assert first.misc == ("_", "SpaceAfter=No", "SpaceAfter=No")
    assert (first.sent_id, first.doc_id, first.silver) == ("d-1", "d", True)
    assert second.words == ("Cats", "slept", ".") and second.heads == (2, 0, 2)
    span = from_spacy(list(_doc().sents)[1], sent_id="x", silver=False)
    assert span == second.__class__(
        **{
            **{f: getattr(second, f) for f in second.__dataclass_fields__},
            "sent_id": "x",
            "doc_id": None,
            "silver": False,
        }
    )


def test_from_spacy_needs_a_parse() -> None:
    with pytest.raises(FormatError, match="dependency parse"):
        from_spacy(Doc(Vocab(), words=["a", "b"]))


def test_docbin_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "corpus.spacy"
    DocBin(docs=[_doc(), Doc(Vocab(), words=["no", "parse"])]).to_disk(path)
    with pytest.raises(FormatError, match=r"corpus\.spacy: doc 2: expected dependency annotation"):
        list(read_treebank(path))
    report = ReadReport()
    with pytest.warns(UserWarning, match="doc 2"):
        sents = list(read_treebank(path, on_error="skip", report=report))
    assert [s.words for s in sents] == [("Dogs", "ran", "."), ("Cats", "slept", ".")]
    assert not sents[0].silver and sents[0].path == str(path)
    assert report.n_skipped == 1
    bad = tmp_path / "bad.spacy"
    bad.write_bytes(b"not a docbin")
    with pytest.raises(FormatError, match=r"bad\.spacy: expected a spaCy DocBin"):
        list(read_treebank(bad))


def test_spacy_docbin_control_character(tmp_path: Path) -> None:
    # a control character in a stored word is refused as in the text formats; under skip the Doc goes whole
    good = Doc(Vocab(), words=["Dogs", "ran"], heads=[1, 1], deps=["nsubj", "ROOT"])
    bad = Doc(Vocab(), words=["Cats", "sl\x00ept"], heads=[1, 1], deps=["nsubj", "ROOT"])
    path = tmp_path / "c.spacy"
    DocBin(docs=[good, bad]).to_disk(path)
    with pytest.raises(FormatError, match=re.escape(f"{path}: doc 2: sentence 'c#2-1'")) as info:
        list(read_treebank(path))
    assert "form of word 2" in str(info.value) and "U+0000" in str(info.value)
    report = ReadReport()
    with pytest.warns(SkippedItemWarning, match="doc 2"):
        sents = list(read_treebank(path, on_error="skip", report=report))
    assert [s.words for s in sents] == [("Dogs", "ran")] and report.n_skipped == 1


def test_conll2012_with_given_trees(tmp_path: Path) -> None:
    # trees from a CoNLL-U file of the same sentences: no spaCy model needed
    from probes.corpora.types import Sentence

    trees = [
        Sentence(
            "t1",
            ("The", "president", "met", "his", "staff", "."),
            (2, 3, 0, 5, 3, 3),
            ("det", "nsubj", "root", "nmod:poss", "obj", "punct"),
        ),
        Sentence(
            "t2", ("He", "thanked", "them", "."), (2, 0, 2, 2), ("nsubj", "root", "obj", "punct")
        ),
    ]
    tree_file = tmp_path / "trees.conllu"
    tree_file.write_text(write_conllu(trees), encoding="utf-8")
    (doc,) = read_documents(CORPORA / "sample.v4_gold_conll", trees=tree_file)
    assert doc.doc_id == "nw/test/00/test_0001_000"
    assert [s.heads for s in doc.sentences] == [t.heads for t in trees]
    assert doc.sentences[0].xpos == ("DT", "NN", "VBD", "PRP$", "NN", ".")
    assert not doc.sentences[0].silver
    assert [(m.entity, m.words, m.head, m.sentence) for m in doc.mentions] == [
        ("0", (0, 1), 1, 0),  # The president -> president
        ("1", (3, 4), 4, 0),  # his staff -> staff
        ("0", (3,), 3, 0),
        ("0", (6,), 6, 1),
        ("1", (8,), 8, 1),
    ]
    wrong = tmp_path / "wrong.conllu"
    wrong.write_text(write_conllu(trees[1:]), encoding="utf-8")
    with pytest.raises(
        AnnotationError, match=r"sample\.v4_gold_conll:2: .*expected the next sentence"
    ):
        list(read_documents(CORPORA / "sample.v4_gold_conll", trees=wrong))


def test_conll2012_malformed(tmp_path: Path) -> None:
    text = (CORPORA / "sample.v4_gold_conll").read_text()
    bad = tmp_path / "x.v4_gold_conll"
    bad.write_text(text.replace("   0)\n", "   -\n", 1))
    with pytest.raises(AnnotationError, match=r"x\.v4_gold_conll:2: .*expected a closing '0\)'"):
        list(read_documents(bad))
    bad.write_text(text.replace("#end document\n", ""))
    with pytest.raises(FormatError, match=r"x\.v4_gold_conll:1: .*expected '#end document'"):
        list(read_documents(bad))


def test_unknown_pipeline_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not installed"):
        parse_text("Hi.", pipeline="no_such_pipeline_xyz")


@pytest.mark.slow
def test_parse_text_and_conll2012_with_spacy() -> None:
    sents = parse_text("The cat sat on the mat. It purred.\n\nThen it slept.", doc_id="t")
    assert [s.words[:2] for s in sents] == [("The", "cat"), ("It", "purred"), ("Then", "it")]
    assert all(s.silver and s.heads.count(0) == 1 for s in sents)
    assert all("\n\n" not in s.words for s in sents)
    (doc,) = read_documents(CORPORA / "sample.v4_gold_conll")
    assert all(s.silver for s in doc.sentences)
    assert [len(s) for s in doc.sentences] == [6, 4]  # one sentence per CoNLL sentence
    assert doc.sentences[0].words[1] == "president"
