"""Any-language reading: hand-written fixtures of the phenomena real UD treebanks show.

The fixtures in ``tests/fixtures/corpora/languages/`` are invented sentences (no treebank
text is committed) that reproduce what was found reading real UD files of 13 languages
(see docs/analyses/corpora.md): right-to-left scripts, scripts without
spaces, FORMs with spaces, multiword-token ranges of 2-4 words, empty nodes (also ``0.1``
before word 1) with enhanced DEPS, odd comments and cells, combining marks. Every expected
value below was worked out by hand from the fixture text. ``PROBES_UD_SAMPLES=<folder>``
additionally reads every ``.conllu`` file of a folder of real treebanks.
"""

from __future__ import annotations

import os
import random
import re
import warnings
from pathlib import Path

import pytest

from probes.corpora import ReadReport, read_documents, read_treebank, write_conllu
from probes.errors import FormatError, ProbesError, SkippedItemWarning

LANGUAGES = Path(__file__).resolve().parents[1] / "fixtures" / "corpora" / "languages"

Row = tuple[str, "str | None", tuple[str, ...], tuple[int, ...], tuple[str, ...]]

# file -> [(sent_id, doc_id, words, heads (1-based, 0 = ROOT), relations)], hand-computed
EXPECTED: dict[str, list[Row]] = {
    "rtl_arabic_hebrew_persian.conllu": [
        (
            "ar-1",
            "ar-doc",
            ("كتب", "الولد", "رسالة", "ب", "القلم", "."),
            (0, 1, 1, 5, 1, 1),
            ("root", "nsubj", "obj", "case", "obl", "punct"),
        ),
        (  # 3-word range 1-3, root is the last word
            "ar-2",
            "ar-doc",
            ("و", "ب", "البيت", "كبير"),
            (4, 3, 4, 0),
            ("cc", "case", "obl", "root"),
        ),
        (  # 4-word range, FORMs with '_' inside (HTB style)
            "he-1",
            "he-doc",
            ("ב", "בית_", "_של_", "_הוא", "ישן", "."),
            (2, 5, 4, 2, 0, 5),
            ("case", "obl", "case:gen", "nmod:poss", "root", "punct"),
        ),
        (  # zero-width non-joiner inside a word, Arabic-Indic digit
            "fa-1",
            "fa-doc",
            ("من", "۵", "کتاب", "می\u200cخوانم", "."),
            (4, 3, 4, 0, 4),
            ("nsubj", "nummod", "obj", "root", "punct"),
        ),
    ],
    "cjk_no_spaces.conllu": [
        ("zh-1", None, ("我", "喜欢", "猫", "。"), (2, 0, 2, 2), ("nsubj", "root", "obj", "punct")),
        (  # no '# sent_id': file name and block number
            "cjk_no_spaces.conllu#2",
            None,
            ("猫", "が", "好き", "です", "。"),
            (3, 1, 0, 3, 3),
            ("nsubj", "case", "root", "cop", "punct"),
        ),
        (
            "ko-1",
            None,
            ("나는", "학교에", "간다", "."),
            (3, 3, 0, 3),
            ("nsubj", "obl", "root", "punct"),
        ),
    ],
    "vietnamese_spaces_in_form.conllu": [
        (
            "vi-1",
            None,
            ("Sinh viên", "đọc", "sách", "ở", "thư viện", "."),
            (2, 0, 2, 5, 2, 2),
            ("nsubj", "root", "obj", "case", "obl", "punct"),
        ),
        ("vi-2", None, ("Có lẽ", "trời", "mưa"), (3, 3, 0), ("discourse", "nsubj", "root")),
    ],
    "multiword_tokens.conllu": [
        ("tr-1", None, ("Evde", "ydim", "."), (0, 1, 1), ("root", "cop", "punct")),
        (
            "fi-1",
            None,
            ("Sanoin", ",", "että", "ei", "hän", "tule", "."),
            (0, 6, 6, 6, 6, 1, 1),
            ("root", "punct", "mark", "aux", "nsubj", "ccomp", "punct"),
        ),
        (
            "de-1",
            None,
            ("Wir", "sind", "in", "dem", "Haus", "."),
            (5, 5, 5, 5, 0, 5),
            ("nsubj", "cop", "case", "det", "root", "punct"),
        ),
    ],
    "empty_nodes_enhanced.conllu": [
        (  # empty node 5.1 (elided 'likes') is not a word
            "ell-1",
            "ell",
            ("Mary", "likes", "tea", "and", "John", "coffee", "."),
            (2, 0, 2, 5, 2, 5, 2),
            ("nsubj", "root", "obj", "cc", "conj", "orphan", "punct"),
        ),
        (  # empty node 0.1 before word 1 (PDT-style dropped subject)
            "ell-2",
            "ell",
            ("Zavolala", "mu", "."),
            (0, 1, 1),
            ("root", "obl:arg", "punct"),
        ),
        (  # empty node 8.1; DEPS '5:obj|7:nsubj|8.1:nsubj' on word 2
            "ell-3",
            "ell",
            ("The", "dogs", "that", "John", "saw", "yesterday", "barked", "loudly", "."),
            (2, 7, 5, 5, 2, 5, 0, 7, 7),
            ("det", "nsubj", "obj", "nsubj", "acl:relcl", "obl:tmod", "root", "advmod", "punct"),
        ),
    ],
    "odd_comments_and_cells.conllu": [
        (  # '# newdoc' without an id: file name and document number
            "odd/1 ü",
            "odd_comments_and_cells.conllu#doc1",
            ("#tag", "=", "50", "%", "|", "ok"),
            (0, 1, 4, 1, 1, 1),
            ("root", "punct", "nummod", "nmod", "punct", "discourse"),
        ),
        (  # the literal word '_' and no sent_id
            "odd_comments_and_cells.conllu#2",
            "odd_comments_and_cells.conllu#doc1",
            ("_", "yes"),
            (2, 0),
            ("punct", "root"),
        ),
    ],
    "combining_marks.conllu": [
        (
            "hi-1",
            None,
            ("राम", "ने", "किताब", "पढ़ी", "।"),
            (4, 1, 4, 0, 4),
            ("nsubj", "case", "obj", "root", "punct"),
        ),
        ("cu-1", None, ("ч҃лвкъ", "ꙇ҅де"), (2, 0), ("nsubj", "root")),
    ],
}
FILES = sorted(EXPECTED)


def test_every_fixture_is_listed() -> None:
    assert sorted(p.name for p in LANGUAGES.glob("*.conllu")) == FILES


@pytest.mark.parametrize("name", FILES)
def test_language_fixture_reads_exactly(name: str) -> None:
    report = ReadReport()
    sents = list(read_treebank(LANGUAGES / name, report=report))
    got = [(s.sent_id, s.doc_id, s.words, s.heads, s.relations) for s in sents]
    assert got == EXPECTED[name]
    assert report.sentences == len(EXPECTED[name])
    assert report.words == sum(len(e[2]) for e in EXPECTED[name])
    assert not report.skipped
    for sent in sents:  # every column has one value per word
        assert {len(sent.upos), len(sent.xpos), len(sent.lemmas), len(sent.feats)} == {sent.n_words}
        assert len(sent.misc) == sent.n_words


def test_text_comments_keep_scripts_exactly() -> None:
    texts = {s.sent_id: s.text for f in FILES for s in read_treebank(LANGUAGES / f)}
    assert texts["ar-1"] == "كتب الولد رسالة بالقلم."
    assert texts["fa-1"] == "من ۵ کتاب می\u200cخوانم."  # ZWNJ kept
    assert texts["vi-1"] == "Sinh viên đọc sách ở thư viện ."  # '# text =Sinh' (no space)
    assert texts["odd/1 ü"] == "#tag = 50 % | ok"  # '=' and '|' inside the value
    assert texts["odd_comments_and_cells.conllu#2"] is None
    assert texts["cu-1"] == "ч\u0483лвкъ \ua647\u0485де"  # combining marks, not normalised


def test_feature_and_misc_cells_are_kept_verbatim() -> None:
    odd = next(iter(read_treebank(LANGUAGES / "odd_comments_and_cells.conllu")))
    assert odd.feats[3] == "Number[psor]=Sing|Person[psor]=1"
    assert odd.misc[0] == "Gloss=a=b|SpaceAfter=No"
    assert odd.xpos[0] == "$("
    ar = next(iter(read_treebank(LANGUAGES / "rtl_arabic_hebrew_persian.conllu")))
    assert ar.misc[1] == "Gloss=boy,child|Translit=al-waladu"


def test_documents_with_empty_node_mentions() -> None:
    report = ReadReport()
    (doc,) = read_documents(LANGUAGES / "empty_nodes_enhanced.conllu", report=report)
    assert doc.doc_id == "ell"
    assert doc.n_words == 7 + 3 + 9
    # document offsets: ell-1 words 0-6, ell-2 words 7-9, ell-3 words 10-18
    got = sorted((m.entity, m.words, m.head) for m in doc.mentions)
    assert got == [
        ("e1", (0,), 0),  # Mary
        ("e2", (4,), 4),  # John
        ("e2", (8,), 8),  # mu
        ("e2", (13,), 13),  # John in ell-3
        ("e3", (10, 11, 12, 13, 14, 15), 11),  # The dogs that John saw yesterday: head 'dogs'
    ]
    # e1 on empty node 0.1 and e4 on empty node 8.1 have no word: counted, not kept
    assert report.dropped["mentions of empty nodes only (no word)"] == 2


def test_documents_of_rtl_file() -> None:
    docs = list(read_documents(LANGUAGES / "rtl_arabic_hebrew_persian.conllu"))
    assert [(d.doc_id, len(d.sentences), d.n_words) for d in docs] == [
        ("ar-doc", 2, 10),
        ("he-doc", 1, 6),
        ("fa-doc", 1, 5),
    ]


@pytest.mark.parametrize("name", FILES)
def test_round_trip_through_write_conllu(tmp_path: Path, name: str) -> None:
    sents = list(read_treebank(LANGUAGES / name))
    path = tmp_path / name
    path.write_text(write_conllu(sents), encoding="utf-8")
    back = list(read_treebank(path))
    fields = ("sent_id", "doc_id", "words", "heads", "relations", "upos", "xpos", "lemmas")
    fields += ("feats", "misc", "text", "silver")
    assert [[getattr(s, f) for f in fields] for s in back] == [
        [getattr(s, f) for f in fields] for s in sents
    ]


# ---- the reader bug found with real treebanks in mind: empty cells were read as values ----


@pytest.mark.parametrize(
    ("suffix", "column", "name"),
    [
        (".conllu", 2, "FORM"),
        (".conllu", 8, "DEPREL"),
        (".conllu", 10, "MISC"),
        (".conllx", 4, "CPOSTAG"),
        (".conllx", 10, "PDEPREL"),
    ],
)
def test_empty_cell_is_a_format_error(tmp_path: Path, suffix: str, column: int, name: str) -> None:
    cells = ["2", "b", "b", "NOUN", "NN", "_", "1", "obj", "_", "_"]
    cells[column - 1] = ""
    text = "# sent_id = e\n1\ta\ta\tVERB\tVB\t_\t0\troot\t_\t_\n" + "\t".join(cells) + "\n\n"
    path = tmp_path / f"empty{suffix}"
    path.write_text(text, encoding="utf-8")
    pattern = rf"^{re.escape(str(path))}:3: .*expected a value in column {column} \({name};"
    with pytest.raises(FormatError, match=pattern):
        list(read_treebank(path))


# ---- very long sentences: no recursion, no quadratic blow-up, errors still located ----


def _long_sentence(n: int, root: int) -> str:
    """n words from several scripts, all heads pointing along a chain to ``root``."""
    scripts = ("слово", "كلمة", "단어", "शब्द", "word", "λέξη", "単語")
    lines = ["# sent_id = long", "# text = " + " ".join(scripts[i % 7] for i in range(n))]
    for i in range(1, n + 1):
        head = 0 if i == root else (i + 1 if i < root else i - 1)
        rel = "root" if i == root else "dep"
        lines.append(f"{i}\t{scripts[(i - 1) % 7]}\t_\tX\t_\t_\t{head}\t{rel}\t_\t_")
    return "\n".join(lines) + "\n\n"


def test_very_long_sentence(tmp_path: Path) -> None:
    n, root = 3000, 1800
    path = tmp_path / "long.conllu"
    path.write_text(_long_sentence(n, root), encoding="utf-8")
    (sent,) = read_treebank(path)
    assert sent.n_words == n
    assert sent.heads[0] == 2 and sent.heads[root - 1] == 0 and sent.heads[-1] == n - 1
    assert sent.words[7] == "слово"
    (doc,) = read_documents(path)  # tree depths of a 1800-deep chain
    assert doc.n_words == n
    # a cycle deep inside a long sentence is reported at its word's line (2 comment lines)
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[2 + 2000] = lines[2 + 2000].replace("\t2000\t", "\t2002\t")  # word 2001 -> 2002 -> 2001
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(ProbesError, match=rf"^{re.escape(str(path))}:2003: .*cycle"):
        list(read_treebank(path))


# ---- fuzz: any corruption of any language reads or fails with a located ProbesError ----


# a bad range, ranges/empty nodes in odd places, Arabic-Indic and full-width digits, junk
BAD_IDS = (b"3-2", b"0-1", b"1-1", b"2.1", b"0.1", b"3.0", b"\xd9\xa3", b"\xef\xbc\x93", b"1e3")


def _corrupt(lines: list[bytes], rng: random.Random) -> list[bytes]:
    """1-3 random edits: the generic ones and ones seen in multilingual files."""
    lines = list(lines)
    for _ in range(rng.randint(1, 3)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        cols = lines[i].split(b"\t")
        op = rng.randrange(12)
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, lines[i])
        elif op == 2:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
        elif op == 3 and len(cols) > 1:
            a, b = rng.sample(range(len(cols)), 2)
            cols[a], cols[b] = cols[b], cols[a]
            lines[i] = b"\t".join(cols)
        elif op == 4:
            pos = rng.randrange(len(lines[i]) + 1)
            lines[i] = lines[i][:pos] + bytes(rng.randrange(256) for _ in range(3)) + lines[i][pos:]
        elif op == 5:
            lines[i] = lines[i].replace(rng.choice([b"(", b")", b"|", b"="]), b"", 1)
        elif op == 6 and len(cols) == 10:
            cols[6] = str(rng.randint(-2, 30)).encode()
            lines[i] = b"\t".join(cols)
        elif op == 7 and len(cols) == 10:  # ID -> range, empty node, non-ASCII digits, junk
            cols[0] = rng.choice(BAD_IDS)
            lines[i] = b"\t".join(cols)
        elif op == 8 and len(cols) == 10:  # an empty cell
            cols[rng.randrange(10)] = b""
            lines[i] = b"\t".join(cols)
        elif op == 9:  # BOM or NBSP-only line in the middle of the file
            lines.insert(i, rng.choice([b"\xef\xbb\xbf" + lines[i], b"\xc2\xa0", b"\xe2\x80\x8f"]))
        elif op == 10 and len(cols) == 10:  # HEAD in Arabic-Indic or full-width digits
            cols[6] = rng.choice([b"\xd9\xa3", b"\xef\xbc\x91", b"+1", b"01", b"_"])
            lines[i] = b"\t".join(cols)
        elif op == 11:  # a comment line turned into a token line and back
            lines[i] = lines[i][1:] if lines[i].startswith(b"#") else b"#" + lines[i]
    return lines


@pytest.mark.parametrize("name", FILES)
def test_fuzzed_language_fixtures_read_or_fail_located(tmp_path: Path, name: str) -> None:
    original = (LANGUAGES / name).read_bytes().split(b"\n")
    rng = random.Random(name)
    outcomes = {"read": 0, "error": 0}
    for k in range(80):
        path = tmp_path / f"fuzz{k}.conllu"
        path.write_bytes(b"\n".join(_corrupt(original, rng)))
        for reader in (read_treebank, read_documents):
            for on_error in ("raise", "skip"):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", SkippedItemWarning)
                        list(reader(path, on_error=on_error))
                    outcomes["read"] += 1
                except ProbesError as err:  # in skip mode only file-level errors raise
                    assert re.match(rf"{re.escape(str(path))}:\d+: ", str(err)), str(err)
                    outcomes["error"] += 1
    assert outcomes["error"] > 10 and outcomes["read"] > 10  # both paths were exercised


# ---- optional: a folder of real treebanks (PROBES_UD_SAMPLES), never committed ----


def test_real_treebanks_in_probes_ud_samples() -> None:
    folder = os.environ.get("PROBES_UD_SAMPLES")
    if not folder:
        pytest.skip("set PROBES_UD_SAMPLES to a folder of .conllu files to read real treebanks")
    files = sorted(Path(folder).glob("*.conllu"))
    if not files:
        pytest.skip(f"PROBES_UD_SAMPLES={folder} holds no .conllu file")
    for path in files:
        report = ReadReport()
        n = sum(1 for _ in read_treebank(path, report=report))
        assert n > 0 and not report.skipped, path
        assert sum(len(d.sentences) for d in read_documents(path)) == n, path
