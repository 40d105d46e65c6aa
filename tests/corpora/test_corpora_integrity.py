"""Input that parses but must not be read quietly: control characters, repeated ids, self-bridges, bad heads."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from probes.corpora import ReadReport, read_documents, read_treebank
from probes.corpora.integrity import IdRegister, control_char, shown
from probes.errors import AnnotationError, FormatError, SkippedItemWarning

CORPORA = Path(__file__).resolve().parents[1] / "fixtures" / "corpora"


def _sentence(sent_id: str, words: list[str], *, rel: str = "dep", misc: list[str] | None = None,
              newdoc: str | None = None, header: str | None = None) -> str:
    """A small CoNLL-U block: word 1 is the root, every other word hangs on it."""
    lines = [f"# newdoc id = {newdoc}"] if newdoc else []
    lines += [f"# global.Entity = {header}"] if header else []
    lines.append(f"# sent_id = {sent_id}")
    for i, word in enumerate(words, 1):
        head, label = (0, "root") if i == 1 else (1, rel)
        m = misc[i - 1] if misc else "_"
        lines.append(f"{i}\t{word}\t_\tX\t_\t_\t{head}\t{label}\t_\t{m}")
    return "\n".join(lines) + "\n\n"


def _write(tmp_path: Path, name: str, *blocks: str) -> Path:
    path = tmp_path / name
    path.write_text("".join(blocks), encoding="utf-8")
    return path


def _located(path: Path, line: int) -> str:
    return "^" + re.escape(f"{path}:{line}: ")


def test_nul_in_a_word_names_file_line_sentence_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, "nul.conllu", _sentence("s1", ["ok", "fine"]), _sentence("s2", ["a", "b\x00c"]))
    with pytest.raises(FormatError, match=_located(path, 7)) as info:
        list(read_treebank(path))
    message = str(info.value)
    assert "sentence 's2'" in message and "FORM (column 2)" in message
    assert "U+0000 at character 2" in message and "'b\\x00c'" in message and "\x00" not in message


def test_control_character_in_deprel(tmp_path: Path) -> None:
    path = _write(tmp_path, "esc.conllu", _sentence("s1", ["a", "b"], rel="ob\x1bj"))
    with pytest.raises(FormatError, match=_located(path, 3)) as info:
        list(read_treebank(path))
    assert "sentence 's1'" in str(info.value) and "DEPREL (column 8)" in str(info.value)
    assert "U+001B" in str(info.value)


@pytest.mark.parametrize(
    ("block", "line", "where"),
    [
        ("# sent_id = s\x001\n1\ta\t_\tX\t_\t_\t0\troot\t_\t_\n", 1, "'# sent_id' comment"),
        ("# sent_id = s1\n1\ta\ta\x7f\tX\t_\t_\t0\troot\t_\t_\n", 2, "column 3"),  # LEMMA, bad column count
        ("# sent_id = s1\n1\ta\t_\tX\t_\t_\t0\troot\t_\tEntity=(1-x)\x85\n", 2, "MISC (column 10)"),
        ("# sent_id = s1\n1\ta\r\tb\tX\t_\t_\t0\troot\t_\t_\n", 2, "FORM (column 2)"),  # lone CR mid-line
    ],
)
def test_control_characters_in_every_field_and_comment(tmp_path: Path, block: str, line: int, where: str) -> None:
    path = tmp_path / "c.conllu"
    path.write_bytes(block.encode("utf-8"))
    with pytest.raises(FormatError, match=_located(path, line)) as info:
        list(read_treebank(path))
    assert where in str(info.value) and "control characters" in str(info.value)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", str(info.value))  # the message itself is clean


def test_tab_in_a_comment_and_format_characters_are_still_accepted(tmp_path: Path) -> None:
    # soft hyphen (U+00AD) and zero-width joiner (U+200D) are Cf, not Cc: real treebanks (EWT, GUM) hold them
    path = _write(tmp_path, "ok.conllu", "# text = a\tb\n" + _sentence("s1", ["co\u00adop", "a\u200db"]))
    (sent,) = read_treebank(path)
    assert sent.words == ("co\u00adop", "a\u200db")


def test_control_character_in_conllx(tmp_path: Path) -> None:
    path = tmp_path / "c.conllx"
    path.write_text("1\tGo\tgo\tV\tVB\t_\t0\tROOT\t_\t_\n2\t!\t!\t.\t.\t_\t1\tP\x07\t_\t_\n", encoding="utf-8")
    with pytest.raises(FormatError, match=_located(path, 2)) as info:
        list(read_treebank(path))
    assert "DEPREL (column 8)" in str(info.value) and "U+0007" in str(info.value)


def test_duplicate_sent_id(tmp_path: Path) -> None:
    path = _write(tmp_path, "dup.conllu", _sentence("s1", ["a"]), _sentence("s2", ["b"]), _sentence("s1", ["c"]))
    with pytest.raises(AnnotationError, match=_located(path, 7)) as info:
        list(read_treebank(path))
    assert "sentence 's1'" in str(info.value) and "first in the block at line 1" in str(info.value)
    with pytest.raises(AnnotationError, match=_located(path, 7)):
        list(read_documents(path))


def test_duplicate_newdoc_id(tmp_path: Path) -> None:
    path = _write(tmp_path, "docs.conllu", _sentence("a-1", ["x"], newdoc="A"), _sentence("b-1", ["y"], newdoc="B"),
                  _sentence("a-2", ["z"], newdoc="A"))
    with pytest.raises(AnnotationError, match=_located(path, 9)) as info:
        list(read_documents(path))
    assert "document 'A'" in str(info.value) and "newdoc id" in str(info.value)
    assert "first in the block at line 1" in str(info.value)


def test_self_bridge(tmp_path: Path) -> None:
    misc = ["Entity=(e1-thing-1)", "Entity=(e2-thing-1)|Bridge=e2<e2"]
    path = _write(tmp_path, "bridge.conllu", _sentence("b1", ["a", "b"], misc=misc, newdoc="D"))
    with pytest.raises(AnnotationError, match=_located(path, 4)) as info:
        list(read_documents(path))
    assert "sentence 'b1'" in str(info.value) and "entity e2 linked to itself" in str(info.value)
    ok = _write(tmp_path, "ok.conllu", _sentence("b1", ["a", "b"], misc=[misc[0], "Entity=(e2-thing-1)|Bridge=e1<e2"]))
    (doc,) = read_documents(ok)
    assert [b.antecedent_entity for b in doc.bridges] == ["e1"]
    split = _write(tmp_path, "split.conllu", _sentence("b1", ["a", "b"], misc=[misc[0], "Entity=(e2-t-1)|SplitAnte=e2<e2"]))
    with pytest.raises(AnnotationError, match=_located(split, 3) + ".*SplitAnte=e2<e2 .entity e2 linked to itself"):
        list(read_documents(split))


@pytest.mark.parametrize(
    ("header", "opening", "value"),
    [
        (None, "(e1-thing-3", "'3'"),  # default eid-etype-head-other: head 3 of a 2-word mention
        (None, "(e1-thing-0", "'0'"),
        (None, "(e1-thing-x", "'x'"),
        ("GRP-etype-infstat-salience-centering-minspan-link-identity", "(e1-thing-new-nnnnn-cf1-1,5-sgl", "'1,5'"),
    ],
)
def test_out_of_range_entity_head(tmp_path: Path, header: str | None, opening: str, value: str) -> None:
    misc = [f"Entity={opening}", "Entity=e1)", "_"]
    path = _write(tmp_path, "head.conllu", _sentence("h1", ["a", "b", "c"], misc=misc, newdoc="D", header=header))
    line = 3 if header is None else 4
    with pytest.raises(AnnotationError, match=_located(path, line)) as info:
        list(read_documents(path))
    assert "sentence 'h1'" in str(info.value) and "entity e1" in str(info.value)
    assert "positions 1..2" in str(info.value) and value in str(info.value)


def test_entity_heads_inside_the_mention_are_accepted(tmp_path: Path) -> None:
    misc = ["Entity=(e1-thing-2", "Entity=e1)", "Entity=(e2-thing-1)"]
    path = _write(tmp_path, "h.conllu", _sentence("h1", ["a", "b", "c"], misc=misc))
    (doc,) = read_documents(path)
    assert [(m.entity, m.words) for m in doc.mentions] == [("e1", (0, 1)), ("e2", (2,))]


def test_an_empty_node_counts_towards_the_head_bound(tmp_path: Path) -> None:
    # mention = word 1, empty node 1.1, word 2: head 3 is the third node (CorefUD counts empty nodes)
    text = ("# sent_id = e1\n1\ta\t_\tX\t_\t_\t0\troot\t_\tEntity=(e1-thing-3\n1.1\t_\t_\t_\t_\t_\t_\t_\t_\t_\n"
            "2\tb\t_\tX\t_\t_\t1\tdep\t_\tEntity=e1)\n")
    path = _write(tmp_path, "empty.conllu", text)
    (doc,) = read_documents(path)
    assert doc.mentions[0].words == (0, 1)


def test_skip_mode_counts_and_names_each_case(tmp_path: Path) -> None:
    good = _sentence("ok-1", ["fine", "words"], newdoc="OK")
    path = _write(
        tmp_path, "mixed.conllu",
        good,
        _sentence("n-1", ["nul\x00"], newdoc="N"),
        _sentence("r-1", ["a", "b"], rel="d\x01ep", newdoc="R"),
        _sentence("ok-1", ["again"], newdoc="S"),  # repeated sent_id
        _sentence("x-1", ["x"], newdoc="OK"),  # repeated newdoc id
        _sentence("b-1", ["a", "b"], misc=["Entity=(e1-t-1)", "Entity=(e2-t-1)|Bridge=e1<e1"], newdoc="B"),
        _sentence("h-1", ["a"], misc=["Entity=(e1-t-4)"], newdoc="H"),
    )
    report = ReadReport()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedItemWarning)
        docs = list(read_documents(path, on_error="skip", report=report))
    assert [d.doc_id for d in docs] == ["OK"]
    assert report.documents == 1 and report.n_skipped == 6
    assert report.reasons() == {"FormatError": 2, "AnnotationError": 4}
    named = [str(e) for e in report.skipped]
    for ident, text in [("n-1", "FORM"), ("r-1", "DEPREL"), ("ok-1", "sent_id"), ("OK", "newdoc id"),
                        ("b-1", "linked to itself"), ("h-1", "head field")]:
        assert any(f"'{ident}'" in m and text in m and m.startswith(f"{path}:") for m in named), (ident, named)
    assert len([w for w in caught if issubclass(w.category, SkippedItemWarning)]) == 6
    assert "skipped 6 (4 AnnotationError, 2 FormatError)" in report.summary()

    report = ReadReport()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedItemWarning)
        sents = list(read_treebank(path, on_error="skip", report=report))
    # a treebank read has no coreference: the self-bridge and bad head are not its business
    assert [s.sent_id for s in sents] == ["ok-1", "b-1", "h-1"]
    assert report.reasons() == {"FormatError": 2, "AnnotationError": 2}


def test_conll2012_duplicate_document_and_control_character(tmp_path: Path) -> None:
    text = (CORPORA / "sample.v4_gold_conll").read_text(encoding="utf-8")
    trees = _write(tmp_path, "trees.conllu", _sentence("t1", "The president met his staff .".split()),
                   _sentence("t2", "He thanked them .".split()))
    twice = tmp_path / "twice.v4_gold_conll"
    twice.write_text(text + text, encoding="utf-8")
    start = len(text.splitlines()) + 1
    with pytest.raises(AnnotationError, match=_located(twice, start)) as info:
        list(read_documents(twice, trees=trees))
    assert "document 'nw/test/00/test_0001_000'" in str(info.value) and "first at line 1" in str(info.value)
    bad = tmp_path / "nul.v4_gold_conll"
    bad.write_text(text.replace("president", "presi\x00dent", 1), encoding="utf-8")
    with pytest.raises(FormatError, match=_located(bad, 3)) as info:
        list(read_documents(bad, trees=trees))
    assert "document 'nw/test/00/test_0001_000'" in str(info.value) and "U+0000" in str(info.value)


def test_helpers() -> None:
    assert control_char("ab\x00") == "U+0000 at character 3" and control_char("a\tb") is None
    assert control_char("\x9f") == "U+009F at character 1" and control_char("\xa0") is None
    assert shown("a\x00b\x1b") == "a\\x00b\\x1b" and shown("x" * 70).endswith("...")
    register = IdRegister()
    assert register.first_line("s", 3) is None and register.first_line("t", 5) is None
    assert register.first_line("s", 9) == 3 and register.first_line("s", 12) == 3
