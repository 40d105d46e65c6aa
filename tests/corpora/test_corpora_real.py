"""Exact counts on the real corpora (UD English EWT and GUM in ../shared/data), checked independently."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from probes.corpora import ReadReport, read_documents, read_treebank, write_conllu

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("split", "n_sents", "n_words"),
    [("train", 12544, 204577), ("dev", 2001, 25147), ("test", 2077, 25094)],
)
def test_ewt_counts(ewt: Path, split: str, n_sents: int, n_words: int) -> None:
    report = ReadReport()
    sents = read_treebank(ewt / f"en_ewt-ud-{split}.conllu", report=report)
    assert sum(1 for _ in sents) == n_sents
    assert (report.sentences, report.words, report.n_skipped) == (n_sents, n_words, 0)


def _raw_words(path: Path) -> list[list[str]]:
    """Independent reference: integer-id token lines, split on blank lines."""
    out, cur = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if cur:
                out.append(cur)
            cur = []
        elif re.match(r"^\d+\t", line):
            cur.append(line.split("\t")[1])
    if cur:
        out.append(cur)
    return out


def test_ewt_dev_words_match_reference_and_round_trip(ewt: Path, tmp_path: Path) -> None:
    path = ewt / "en_ewt-ud-dev.conllu"
    sents = list(read_treebank(path))
    assert [list(s.words) for s in sents] == _raw_words(path)
    out = tmp_path / "dev.conllu"
    out.write_text(write_conllu(sents), encoding="utf-8")
    again = list(read_treebank(out))
    def key(s: Any) -> tuple[Any, ...]:
        return (
            s.sent_id,
            s.words,
            s.heads,
            s.relations,
            s.upos,
            s.misc,
            s.doc_id,
            s.text,
        )

    assert [key(s) for s in again] == [key(s) for s in sents]


def test_gum_dev_documents_mentions_bridges(gum: Path) -> None:
    path = gum / "en_gum-ud-dev.conllu"
    report = ReadReport()
    docs = list(read_documents(path, report=report))
    assert len(docs) == 30
    assert sum(len(d.sentences) for d in docs) == 1575
    assert sum(len(d.bridges) for d in docs) == 232
    # independent count: '(' openings inside Entity= values (GUM has no discontinuous parts)
    text = path.read_text(encoding="utf-8")
    entity_values = re.findall(r"[\t|]Entity=([^|\t\n]*)", text)
    assert sum(v.count("(") for v in entity_values) == sum(len(d.mentions) for d in docs) == 7897
    assert report.n_skipped == 0
    assert not report.dropped  # SplitAnte links are kept, nothing else is dropped in GUM dev


def test_gum_dev_split_antecedents(gum: Path) -> None:
    """Every ``SplitAnte=ante<ana`` link of GUM dev, counted with a regex per document, is kept."""
    path = gum / "en_gum-ud-dev.conllu"
    docs = list(read_documents(path))
    expected: dict[str, dict[str, list[str]]] = {}  # doc -> anaphor -> parts in file order
    values = 0
    doc = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# newdoc id = "):
            doc = line.split("= ", 1)[1]
        for value in re.findall(r"[\t|]SplitAnte=([^|\t\n]*)", line):
            values += 1
            for ante, ana in re.findall(r"([^,<]+)<([^,<]+)", value):
                parts = expected.setdefault(doc, {}).setdefault(ana, [])
                parts += [] if ante in parts else [ante]
    got = {d.doc_id: {s.entity: list(s.parts) for s in d.split_antecedents} for d in docs if d.split_antecedents}
    assert values == 15
    assert got == expected
    assert sum(len(p) for d in expected.values() for p in d.values()) == 33  # links (15 anaphor entities)
    for d in docs:  # every part and anaphor entity has a mention in its document
        entities = {m.entity for m in d.mentions}
        assert all({s.entity, *s.parts} <= entities for s in d.split_antecedents)


def test_gum_dev_heads_agree_with_minspan(gum: Path) -> None:
    """Cross-check the tree-based mention head with GUM's own minspan field (1-based in the span).

    The definitions differ (minspan is annotated, the tree head is computed), so
    agreement is high but not total; a wrong offset convention would break it.
    """
    path = gum / "en_gum-ud-dev.conllu"
    docs = list(read_documents(path))
    # independent: (doc, start offset, entity) -> minspan for single-head minspans
    expected: dict[tuple[str, int, str], int] = {}
    doc, offset = None, 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# newdoc id = "):
            doc, offset = line.split("= ", 1)[1], 0
        if not re.match(r"^\d+\t", line):
            continue
        misc = line.split("\t")[9]
        m = re.search(r"Entity=([^|]*)", misc)
        if m:
            for chunk in re.findall(r"\([^()]+\)?|[^()]+\)", m.group(1)):
                if chunk.startswith("("):
                    fields = chunk.strip("()").split("-")
                    if fields[5].isdigit():
                        expected[(doc, offset, fields[0])] = offset + int(fields[5]) - 1
        offset += 1
    agree = total = 0
    for d in docs:
        for mention in d.mentions:
            want = expected.get((d.doc_id, mention.start, mention.entity))
            if want is not None:
                total += 1
                agree += want == mention.head
    assert total > 7000
    assert agree / total > 0.98, (agree, total)  # measured: 7,116 of 7,163 (99.3%)


def test_gum_test_reads_whole_under_the_integrity_checks(gum: Path) -> None:
    """No real document trips the control-character, repeated-id, self-bridge or Entity-head checks.

    GUM's ``minspan`` field is checked against every mention's length; the independent count of
    ``# newdoc id`` lines and ``# sent_id`` lines is what is read.
    """
    path = gum / "en_gum-ud-test.conllu"
    text = path.read_text(encoding="utf-8")
    report = ReadReport()
    docs = list(read_documents(path, report=report))
    assert report.n_skipped == 0
    assert len(docs) == text.count("# newdoc id = ") == 30
    assert report.sentences == text.count("# sent_id = ") == 1464
