"""CoNLL-U / CoNLL-X reading, writing and error reporting (fixtures in tests/fixtures/corpora)."""

from __future__ import annotations

import random
import re
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probes.corpora import (
    ReadReport,
    detect_format,
    read_conllu,
    read_documents,
    read_treebank,
    write_conllu,
)
from probes.corpora.types import Sentence
from probes.corpora.validate import find_cycle
from probes.errors import (
    AnnotationError,
    ConfigError,
    FormatError,
    ProbesError,
    SkippedItemWarning,
)

CORPORA = Path(__file__).resolve().parents[1] / "fixtures" / "corpora"
BAD = CORPORA / "malformed"


def test_multiword_tokens_and_empty_nodes_are_skipped_words_kept() -> None:
    first, second = read_treebank(CORPORA / "mwt_empty.conllu")
    assert first.words == ("They", "did", "n't", "go", "home", ".")
    assert first.heads == (3, 4, 4, 0, 4, 4)
    assert first.relations[4] == "obl:unmarked"
    assert first.base_relations[4] == "obl"
    assert (first.sent_id, first.doc_id, first.line) == ("a-1", "doc-a", 1)
    assert first.text == "They didn't go home."
    assert first.misc[4] == "SpaceAfter=No"
    assert second.words == ("Mary", "'s", "cat", "slept", ",", "and", "Bob", "too", ".")
    assert second.heads[7] == 7  # 'too' -> Bob: ids after the empty node 7.1 unchanged
    assert second.relations[0] == "nmod:poss"
    assert second.line == 12
    assert second.doc_id == "doc-a"


def test_conllx_columns() -> None:
    sents = list(read_treebank(CORPORA / "sample.conllx"))
    assert [s.words for s in sents] == [("The", "dog", "barks", "."), ("Hi",)]
    assert sents[0].upos == ("DT", "NN", "VB", ".")
    assert sents[0].xpos == ("DT", "NN", "VBZ", ".")
    assert sents[0].misc == ()
    assert sents[1].sent_id == "sample.conllx#2"
    assert sents[1].line == 6


def test_format_detection() -> None:
    assert detect_format("x.conllu") == "conllu"
    assert detect_format("x.conll") == "conllx"
    assert detect_format("a/b/cctv_0001.v4_gold_conll") == "conll2012"
    assert detect_format("x.spacy") == "spacy"
    assert detect_format("x.txt", "CoNLL-U") == "conllu"
    with pytest.raises(ConfigError, match="expected one of"):
        detect_format("x.conllu", "xml")


# (file, error class, line) for every malformed case of issue 2, item 6
MALFORMED = [
    ("bad_columns", FormatError, 3, "expected 10 tab-separated columns, found 9"),
    ("non_integer_head", FormatError, 3, "expected an integer head for word 2, found 'x'"),
    ("head_out_of_range", AnnotationError, 2, r"expected the head of word 1 in 0\.\.2, found 7"),
    ("cycle", AnnotationError, 5, r"found a cycle of heads 4 -> 5 -> 4"),
    (
        "missing_root",
        AnnotationError,
        2,
        "expected exactly one word with head 0 .root., found none",
    ),
    ("two_roots", AnnotationError, 3, "found 2 .words 1, 2."),
    ("bad_id", FormatError, 3, "expected word id 2, found '3'"),
    ("unclosed_entity", AnnotationError, 3, r"expected a closing bracket 'e1\)'"),
    ("never_opened_entity", AnnotationError, 4, "never opened"),
    ("unknown_bridge", AnnotationError, 3, "expected bridging entity e9 to have a mention"),
    ("bad_entity_chunk", AnnotationError, 3, "expected Entity brackets"),
    ("empty_file", FormatError, 1, "found an empty file"),
    ("blank_only", FormatError, 1, "found only 3 blank line"),
    ("wrong_encoding", FormatError, 3, "expected UTF-8 text, found byte 0xe9 at column 6"),
]


@pytest.mark.parametrize(("name", "cls", "line", "what"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_input_names_file_and_line(name: str, cls: type, line: int, what: str) -> None:
    path = BAD / f"{name}.conllu"
    reader = read_documents if "entity" in name or "bridge" in name else read_treebank
    with pytest.raises(cls, match=rf"^{re.escape(str(path))}:{line}: .*{what}") as info:
        list(reader(path))
    assert isinstance(info.value, ValueError)  # InputError double base
    assert info.value.line == line


def test_skip_mode_counts_and_warns(tmp_path: Path) -> None:
    good = (CORPORA / "mwt_empty.conllu").read_text(encoding="utf-8")
    bad = (BAD / "two_roots.conllu").read_text(encoding="utf-8")
    again = good.replace("= doc-a", "= doc-b").replace("= a-", "= b-")  # ids may not repeat in a file
    path = tmp_path / "mixed.conllu"
    path.write_text(good + "\n" + bad + "\n" + again, encoding="utf-8")
    report = ReadReport()
    with pytest.warns(SkippedItemWarning, match=r"mixed\.conllu:\d+: sentence 's1'"):
        sents = list(read_treebank(path, on_error="skip", report=report))
    assert len(sents) == 4
    assert report.n_skipped == 1
    assert report.reasons() == {"AnnotationError": 1}
    assert report.sentences == 4 and report.words == 2 * (6 + 9)
    assert "skipped 1 (1 AnnotationError)" in report.summary()
    with pytest.raises(AnnotationError):
        list(read_treebank(path))
    with pytest.raises(ConfigError):
        list(read_treebank(path, on_error="ignore"))


def test_bom_crlf_no_final_newline_and_extra_blank_lines(tmp_path: Path) -> None:
    text = (CORPORA / "mwt_empty.conllu").read_text(encoding="utf-8")
    messy = "\ufeff" + text.replace("\n\n", "\n\n\n \n").rstrip("\n").replace("\n", "\r\n")
    path = tmp_path / "messy.conllu"
    path.write_bytes(messy.encode("utf-8"))
    assert list(read_treebank(path)) == [
        s.__class__(**{**_fields(s), "path": str(path)})
        for s in read_treebank(CORPORA / "mwt_empty.conllu")
    ][:1] + [
        s.__class__(**{**_fields(s), "path": str(path), "line": 14})
        for s in list(read_treebank(CORPORA / "mwt_empty.conllu"))[1:]
    ]


def _fields(s: Sentence) -> dict:
    return {k: getattr(s, k) for k in s.__dataclass_fields__}


def test_silver_comment_sentence_and_document_level(tmp_path: Path) -> None:
    text = (CORPORA / "mwt_empty.conllu").read_text(encoding="utf-8")
    path = tmp_path / "silver.conllu"
    path.write_text(
        text.replace("# newdoc id = doc-a\n", "# newdoc id = doc-a\n# global.annotation = silver\n")
    )
    assert [s.silver for s in read_treebank(path)] == [True, True]
    path.write_text(text.replace("# sent_id = a-2\n", "# sent_id = a-2\n# annotation = silver\n"))
    sents = list(read_treebank(path))
    assert [s.silver for s in sents] == [False, True]
    again = list(read_conllu(_write(tmp_path, write_conllu(sents))))
    assert [s.silver for s in again] == [False, True]


def _write(tmp_path: Path, text: str, name: str = "out.conllu") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_find_cycle_against_brute_force() -> None:
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 8)
        heads = [rng.randint(0, n) for _ in range(n)]
        # brute force: a word is on a cycle if following heads n times from it comes back
        on_cycle = set()
        for i in range(1, n + 1):
            j = i
            for _ in range(n):
                j = heads[j - 1] if j else 0
                if j == i:
                    on_cycle.add(i)
                    break
        cycle = find_cycle(heads)
        assert (cycle is None) == (not on_cycle)
        if cycle:
            assert set(cycle) <= on_cycle
            assert all(heads[a - 1] == b for a, b in zip(cycle, cycle[1:] + cycle[:1]))


# ---- property test: random valid trees round-trip through write_conllu/read_conllu ----

_CELL = (
    st.text(
        alphabet=st.characters(
            blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters="\t\n\r"
        ),
        min_size=1,
        max_size=8,
    )
    .map(str.strip)
    .filter(bool)
)
_LABEL = st.sampled_from(
    ["nsubj", "obj", "nmod:poss", "acl:relcl", "obl:tmod", "det", "punct", "dep"]
)


@st.composite
def trees(draw: st.DrawFn) -> Sentence:
    n = draw(st.integers(1, 12))
    order = draw(st.permutations(range(1, n + 1)))
    heads = [0] * n
    root = order[0]
    for k, word in enumerate(order[1:], 1):  # attach each word to an earlier one: a tree
        heads[word - 1] = order[draw(st.integers(0, k - 1))]
    rels = [draw(_LABEL) if heads[i] else "root" for i in range(n)]
    col = lambda: tuple(draw(st.one_of(st.just("_"), _CELL)) for _ in range(n))  # noqa: E731
    assert heads[root - 1] == 0
    return Sentence(
        sent_id=draw(_CELL),
        words=tuple(draw(_CELL) for _ in range(n)),
        heads=tuple(heads),
        relations=tuple(rels),
        upos=col(),
        xpos=col(),
        lemmas=col(),
        feats=col(),
        misc=col(),
        doc_id=draw(st.one_of(st.none(), _CELL)),
        silver=draw(st.booleans()),
        text=draw(st.one_of(st.none(), _CELL)),
    )


def _unique_ids(sents: list[Sentence]) -> list[Sentence]:
    """Sentence ids made unique, and no document id reused after another document (both are read as errors)."""
    out: list[Sentence] = []
    seen: set[str] = set()
    current: str | None = None  # the drawn id of the document in force, and its id as written
    written: str | None = None
    for k, s in enumerate(sents):
        if s.doc_id is not None and s.doc_id != current:
            written = s.doc_id
            while written in seen:
                written += "~"
            seen.add(written)
            current = s.doc_id
        out.append(replace(s, sent_id=f"{s.sent_id}-{k}", doc_id=written if s.doc_id is not None else None))
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(trees(), min_size=1, max_size=4).map(_unique_ids))
def test_round_trip_random_trees(tmp_path: Path, sents: list[Sentence]) -> None:
    path = _write(tmp_path, write_conllu(sents))
    back = list(read_conllu(path))
    # doc ids only persist forward: a sentence with doc_id None after a document keeps it
    expected, current = [], None
    for s in sents:
        current = s.doc_id if s.doc_id is not None else current
        expected.append({**_fields(s), "doc_id": current, "path": None, "line": None})
    assert [{**_fields(s), "path": None, "line": None} for s in back] == expected


# ---- fuzz: any corruption reads or raises a ProbesError, never another exception ----


def _corrupt(lines: list[bytes], rng: random.Random) -> list[bytes]:
    lines = list(lines)
    for _ in range(rng.randint(1, 3)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        op = rng.randrange(7)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[i])
        elif op == 2:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        elif op == 3:
            cols = lines[i].split(b"\t")
            if len(cols) > 1:
                a, b = rng.sample(range(len(cols)), 2)
                cols[a], cols[b] = cols[b], cols[a]
                lines[i] = b"\t".join(cols)
        elif op == 4:
            pos = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:pos] + bytes(rng.randrange(256) for _ in range(3)) + lines[i][pos:]
        elif op == 5:
            lines[i] = (
                lines[i].replace(b"(", b"", 1)
                if rng.random() < 0.5
                else lines[i].replace(b")", b"", 1)
            )
        else:
            cols = lines[i].split(b"\t")
            if len(cols) == 10:
                cols[6] = str(rng.randint(-2, 30)).encode()
                lines[i] = b"\t".join(cols)
    return lines


@pytest.mark.parametrize("source", ["mwt_empty.conllu", "coref.conllu", "sample.conllx"])
def test_fuzzed_files_read_or_fail_with_probes_error(tmp_path: Path, source: str) -> None:
    original = (CORPORA / source).read_bytes().split(b"\n")
    rng = random.Random(source)
    suffix = Path(source).suffix
    outcomes = {"read": 0, "error": 0}
    for k in range(150):
        path = tmp_path / f"fuzz{k}{suffix}"
        path.write_bytes(b"\n".join(_corrupt(original, rng)))
        for reader in (read_treebank, read_documents) if suffix == ".conllu" else (read_treebank,):
            try:
                list(reader(path))
                outcomes["read"] += 1
            except ProbesError as err:
                assert re.match(rf"{re.escape(str(path))}:\d+: ", str(err)), str(err)
                outcomes["error"] += 1
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SkippedItemWarning)
                try:
                    list(reader(path, on_error="skip"))
                except ProbesError as err:  # file-level errors (e.g. empty) still raise
                    assert re.match(rf"{re.escape(str(path))}:\d+: ", str(err)), str(err)
    assert outcomes["error"] > 20 and outcomes["read"] > 5  # both paths were exercised
