"""Issue 36, corpus readers: bad multiword ranges and empty nodes, repeated bridging links, files that are not
treebanks (devices, pipes, folders, latin-1, endless lines, huge sentences, compression bombs), numbers past
Python's limits, and a Hypothesis fuzz suite over mutated fixtures and the shipped sample: every mutation loads
or raises an InputError, never anything else."""

from __future__ import annotations

import logging
import os
import re
import stat
import threading
import warnings
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Self

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probes.corpora import ReadReport, blocks, coref, read_documents, read_treebank, spacy_docs
from probes.corpora.types import Document, Sentence
from probes.errors import AnnotationError, FormatError, InputError, SkippedItemWarning

CORPORA = Path(__file__).resolve().parents[1] / "fixtures" / "corpora"
SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample"


def _word(i: int, head: int | str, misc: str = "_", form: str | None = None) -> str:
    return "\t".join((str(i), form or f"w{i}", "_", "X", "_", "_", str(head), "root" if head in (0, "0") else "dep",
                      "_", misc))


def _node(tid: str, misc: str = "_") -> str:
    """A multiword-token range or empty-node line (no head)."""
    return f"{tid}\txy\t_\t_\t_\t_\t_\t_\t_\t{misc}"


def _write(tmp_path: Path, *lines: str, name: str = "t.conllu", sent_id: str = "s1") -> Path:
    path = tmp_path / name
    path.write_text("\n".join((f"# sent_id = {sent_id}", *lines)) + "\n", encoding="utf-8")
    return path


def _refused(path: Path, cls: type[InputError], line: int, *parts: str,
             reader: Callable[..., Iterator[object]] = read_treebank) -> InputError:
    """Read ``path``; assert the exact error class, ``path:line:`` and every part of the message."""
    with pytest.raises(InputError) as info:
        list(reader(path))
    err = info.value
    assert type(err) is cls, f"{type(err).__name__}: {err}"
    assert str(err).startswith(f"{path}:{line}: "), str(err)
    for part in parts:
        assert part in str(err), str(err)
    return err


# ---- multiword-token ranges and empty nodes ----


def test_valid_ranges_and_empty_nodes_still_load(tmp_path: Path) -> None:
    path = _write(tmp_path, _node("0.1"), _node("1-2"), _word(1, 0), _word(2, 1), _node("2.1"), _node("2.2"),
                  _node("3-4"), _word(3, 1), _word(4, 1), _word(5, 1), _node("5.1"))
    (sent,) = read_treebank(path)
    assert sent.words == ("w1", "w2", "w3", "w4", "w5")
    assert sent.heads == (0, 1, 1, 1, 1)


def test_overlapping_ranges_are_refused_with_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, _node("1-2"), _word(1, 0), _node("2-3"), _word(2, 1), _word(3, 1))
    _refused(path, FormatError, 4, "sentence 's1'", "'2-3'", "overlapping the range '1-2' at line 2")


@pytest.mark.parametrize(
    ("lines", "line", "what"),
    [
        ([_node("1-2"), _word(1, 0), _word(2, 1), _node("3-4"), _word(3, 1)], 5,
         "'3-4' to end by the sentence's last word 3"),  # extends past the last word
        ([_word(1, 0), _node("2-3")], 3, "'2-3' to end by the sentence's last word 1"),  # its words are missing
        ([_node("0-1"), _word(1, 0), _word(2, 1)], 2, "numbered from 1, found '0-1'"),  # starts at 0
        ([_node("2-1"), _word(1, 0), _word(2, 1)], 2, "two words or more (such as 2-3), found '2-1'"),  # end < start
        ([_node("1-1"), _word(1, 0), _word(2, 1)], 2, "two words or more (such as 1-2), found '1-1'"),
        ([_word(1, 0), _node("1-2"), _word(2, 1)], 3, "'1-2' right before its first word 1, found it after word 1"),
        ([_node("2-3"), _word(1, 0), _word(2, 1), _word(3, 1)], 2, "'2-3' right before its first word 2"),
    ],
    ids=["past-end", "words-missing", "starts-at-0", "end-before-start", "one-word", "after-its-word",
         "ahead-of-its-word"],
)
def test_out_of_range_or_misplaced_ranges_are_refused(tmp_path: Path, lines: list[str], line: int,
                                                      what: str) -> None:
    _refused(_write(tmp_path, *lines), FormatError, line, "sentence 's1'", "multiword token range", what)


@pytest.mark.parametrize(
    ("lines", "line", "what"),
    [
        ([_word(1, 0), _node("3.1"), _word(2, 1)], 3, "expected empty node 1.1 (after word 1), found '3.1'"),
        ([_word(1, 0), _node("1.2"), _word(2, 1)], 3, "expected empty node 1.1 (after word 1), found '1.2'"),
        ([_word(1, 0), _node("1.1"), _node("1.1"), _word(2, 1)], 4, "expected empty node 1.2"),
        ([_word(1, 0), _node("2-3"), _node("1.1"), _word(2, 1), _word(3, 1)], 4,
         "before the multiword token range '2-3'"),
    ],
    ids=["wrong-word", "skips-a-number", "repeated", "after-a-range"],
)
def test_misplaced_empty_nodes_are_refused(tmp_path: Path, lines: list[str], line: int, what: str) -> None:
    _refused(_write(tmp_path, *lines), FormatError, line, what)


def test_misplaced_empty_node_does_not_move_coreference(tmp_path: Path) -> None:
    """An empty node's brackets sit where its id says: one out of place is refused in the document reader too."""
    path = _write(tmp_path, "# newdoc id = d", _word(1, 0), _node("3.1", "Entity=(e1-x)"), _word(2, 1))
    _refused(path, FormatError, 4, "found '3.1'", reader=read_documents)


@pytest.mark.parametrize(
    ("line", "cls", "what"),
    [
        (_word(2, 1).replace("2\t", "99999999999999999999\t", 1), FormatError, "expected word id 2"),
        (_node("2-99999999999999999999"), FormatError, "a number of more than"),
        (_node("1.99999999999999999999"), FormatError, "a number of more than"),
        (_word(2, 99999999999999999999), AnnotationError, "expected the head of word 2"),
        (_word(2, "9" * 5000), AnnotationError, "a number of more than"),  # past int()'s 4,300 digits
        (_word(2, -1), AnnotationError, "expected the head of word 2 in 0..2, found -1"),
        (_word(2, 0).replace("\t0\t", "\t+1\t"), FormatError, "expected an integer head for word 2"),
        (_word(2, 0).replace("\t0\t", "\t١\t"), FormatError, "expected an integer head for word 2"),
    ],
    ids=["huge-id", "huge-range", "huge-empty-node", "huge-head", "5000-digit-head", "negative-head",
         "signed-head", "arabic-digit-head"],
)
def test_huge_and_odd_numbers_are_input_errors(tmp_path: Path, line: str, cls: type[InputError], what: str) -> None:
    err = _refused(_write(tmp_path, _word(1, 0), line), cls, 3, what)
    assert len(str(err)) < 400  # the huge number is cut, not printed whole


def test_conllx_treats_a_range_as_a_bad_id(tmp_path: Path) -> None:
    path = _write(tmp_path, _node("1-2"), _word(1, 0), _word(2, 1), name="t.conllx")
    _refused(path, FormatError, 2, "expected an integer word id, found '1-2'")


# ---- coreference: repeated bridging links, repeated Entity=, discontinuous parts, nesting bombs ----


def _story(tmp_path: Path, bridge_misc: str, extra: str = "_") -> Path:
    lines = ["# newdoc id = d", "# global.Entity = eid-etype-head-other",
             _word(1, 2, "Entity=(e2-animal-1)"), _word(2, 0), _word(3, 4, f"Entity=(e3-object-1|{bridge_misc}"),
             _word(4, 2, "Entity=e3)"), _word(5, 2, extra)]
    return _write(tmp_path, *lines)


@pytest.mark.parametrize("misc", ["Bridge=e2<e3,e2<e3", "Bridge=e2<e3|Bridge=e2<e3",
                                  "Bridge=e2<e3:part,e2<e3:whole"], ids=["in-one-value", "key-twice", "relations"])
def test_repeated_bridge_link_counts_once_with_a_note(tmp_path: Path, misc: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    path = _story(tmp_path, misc)
    report = ReadReport()
    with caplog.at_level(logging.WARNING, logger="probes"):
        (doc,) = read_documents(path, report=report)
    assert [(b.antecedent_entity, b.anaphor.entity, b.anaphor.words) for b in doc.bridges] == [("e2", "e3", (2, 3))]
    assert report.dropped == {coref.REPEATED_BRIDGE: 1}
    assert "1 repeated bridging links (counted once)" in report.summary()
    assert report.n_skipped == 0
    notes = [r.getMessage() for r in caplog.records if "Bridge=e2<e3" in r.getMessage()]
    assert notes and notes[0].startswith(f"note: {path}:6: document 'd'"), notes


def test_same_pair_on_two_anaphor_mentions_is_two_links(tmp_path: Path) -> None:
    """As in GUM (``Bridge=53<54`` on 'Drew' and on 'Devin'): two mentions, two links, no note."""
    path = _write(tmp_path, "# newdoc id = d", _word(1, 2, "Entity=(e2-x-1)"), _word(2, 0),
                  _word(3, 2, "Bridge=e2<e3|Entity=(e3-x-1)"), _word(4, 2, "Bridge=e2<e3|Entity=(e3-x-1)"))
    report = ReadReport()
    (doc,) = read_documents(path, report=report)
    assert [b.anaphor.words for b in doc.bridges] == [(2,), (3,)]
    assert not report.dropped


def test_two_entity_values_on_a_word_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "# newdoc id = d", _word(1, 0, "Entity=(e1-x)|Entity=(e2-x)"))
    _refused(path, AnnotationError, 3, "expected one Entity= in MISC, found 2", reader=read_documents)


@pytest.mark.parametrize(
    ("misc", "what"),
    [
        (("Entity=(e4[2/2]-x)", "_"), "expected part 1/2 of a mention of entity e4 before part 2/2"),
        (("Entity=(e4[1/2]-x)", "Entity=(e4[1/3]-x)|Entity=(e4[2/3]-x)"), "expected one Entity="),
        (("Entity=(e4[1/2]-x)(e4[2/2]-x)(e4[2/2]-x)", "_"), "expected part 1/2 of a mention"),
        (("Entity=(e4[1/2]-x)", "Entity=(e4[2/3]-x)"), "expected part 2/2 of the mention of entity e4"),
        (("Entity=(e4[1/2]-x", "Entity=(e4[2/2]-x)e4[1/2])"), "expected part 2/2 of the mention of entity e4"),
        (("Entity=(e4[1/9999999]-x)", "_"), "expected a part [k/n] with 1 <= k <= n"),
        (("Entity=(-x)", "_"), "expected an entity id"),
        (("Entity=(e1-x-99999999999)", "_"), "expected the head field of the mention of entity e1"),
    ],
    ids=["part-2-first", "two-entity-keys", "part-twice", "other-n", "part-2-inside-part-1", "huge-n", "no-id",
         "huge-head-field"],
)
def test_malformed_entity_brackets_are_annotation_errors(tmp_path: Path, misc: tuple[str, str], what: str) -> None:
    path = _write(tmp_path, "# newdoc id = d", _word(1, 0, misc[0]), _word(2, 1, misc[1]))
    with pytest.raises(AnnotationError, match=rf"^{re.escape(str(path))}:[34]: .*{re.escape(what)}"):
        list(read_documents(path))


def test_brackets_nested_past_the_bound_are_refused_before_expanding(tmp_path: Path) -> None:
    """1,000 mentions nested over 1,000 words (a 30 KB file) would expand to a million word offsets: refused at
    the first mention past :data:`coref.MENTION_WORDS_PER_WORD` words per word (+ the floor)."""
    n = coref.MAX_CHUNKS
    lines = ["# newdoc id = d", _word(1, 0, "Entity=" + "(1" * n)]
    lines += [_word(i, 1) for i in range(2, n)] + [_word(n, 1, "Entity=" + "1)" * n)]
    path = _write(tmp_path, *lines)
    bound = coref.MENTION_WORDS_PER_WORD * n + coref.MENTION_WORDS_FLOOR
    assert n * n > bound  # what the file asks for is past the bound
    _refused(path, AnnotationError, 3, "expected mentions covering at most", reader=read_documents)


def test_too_many_brackets_or_links_on_one_word_are_refused(tmp_path: Path) -> None:
    many = coref.MAX_CHUNKS + 1
    path = _write(tmp_path, "# newdoc id = d", _word(1, 0, "Entity=" + "(1)" * many))
    _refused(path, AnnotationError, 3, f"found {many:,}", reader=read_documents)
    links = ",".join(f"e{k}<e0" for k in range(many))
    path = _write(tmp_path, "# newdoc id = d", _word(1, 0, f"Entity=(e0)|Bridge={links}"))
    _refused(path, AnnotationError, 3, f"at most {coref.MAX_CHUNKS:,} Bridge links", reader=read_documents)


# ---- only regular files; UTF-8; bounded lines, sentences and inflated sizes ----


@pytest.mark.parametrize("fmt", [None, "conllx", "spacy", "conll2012"])
def test_dev_zero_is_refused_before_reading(fmt: str | None) -> None:
    if not stat.S_ISCHR(os.stat("/dev/zero").st_mode):
        pytest.skip("no /dev/zero character device here")
    with pytest.raises(InputError, match=r"^/dev/zero: expected a corpus file \(a regular file\), found a character"):
        read_treebank("/dev/zero", format=fmt) if fmt != "conll2012" else read_documents("/dev/zero", format=fmt)
    with pytest.raises(InputError, match="found a character device"):
        list(spacy_docs.read_docbin("/dev/zero"))


def test_fifo_and_folder_are_refused_before_opening(tmp_path: Path) -> None:
    """A reader that opened the pipe would block until a writer came: a writer is waiting, so such a reader gets
    an empty file (a FormatError), and the test fails rather than hangs."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    fifo = tmp_path / "pipe.conllu"
    os.mkfifo(fifo)

    def writer() -> None:  # opens once a reader opens (released at the end otherwise)
        with open(fifo, "wb"):
            pass

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for reader in (read_treebank, read_documents):
            with pytest.raises(InputError) as info:
                list(reader(fifo))
            assert type(info.value) is InputError and "found a named pipe" in str(info.value)
        with pytest.raises(InputError, match="found a folder"):
            list(read_treebank(tmp_path))
    finally:
        release = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer's open return
        thread.join()
        os.close(release)


def test_latin1_file_names_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin.conllu"
    path.write_bytes("# sent_id = s1\n1\tCafé\t_\t_\t_\t_\t0\troot\t_\t_\n".encode("latin-1"))
    _refused(path, FormatError, 2, "expected UTF-8 text, found byte 0xe9 at column 6")
    _refused(path, FormatError, 2, "byte 0xe9", reader=read_documents)


class _Spy:
    """A binary file that records the length of every line it hands out."""

    def __init__(self, handle: BinaryIO, sizes: list[int]) -> None:
        self.handle, self.sizes = handle, sizes

    def readline(self, size: int = -1) -> bytes:
        line = self.handle.readline(size)
        self.sizes.append(len(line))
        return line

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.handle.close()


def test_a_line_past_the_bound_is_refused_not_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path, _word(1, 0), "# " + "x" * (3 * blocks.MAX_LINE_BYTES), _word(2, 1))
    sizes: list[int] = []
    opened = blocks._opened
    monkeypatch.setattr(blocks, "_opened", lambda p: _Spy(opened(p), sizes))
    _refused(path, FormatError, 3, f"expected lines of at most {blocks.MAX_LINE_BYTES:,} bytes")
    assert max(sizes) == blocks.MAX_LINE_BYTES + 1  # the 3 MiB line was never read whole


def test_a_sentence_past_the_bound_is_one_bad_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "MAX_BLOCK_LINES", 6)
    long = [_word(1, 0)] + [_word(i, 1) for i in range(2, 10)]
    text = "# sent_id = long\n" + "\n".join(long) + "\n\n# sent_id = short\n" + _word(1, 0) + "\n"
    path = tmp_path / "t.conllu"
    path.write_text(text, encoding="utf-8")
    _refused(path, FormatError, 7, "sentence 'long'", "at most 6 lines", "from line 1")
    report = ReadReport()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedItemWarning)
        sents = list(read_treebank(path, on_error="skip", report=report))
    assert [s.sent_id for s in sents] == ["short"] and report.n_skipped == 1


def test_conll2012_sentence_past_the_bound_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocks, "MAX_BLOCK_LINES", 3)
    path = tmp_path / "x.v4_gold_conll"
    path.write_text((CORPORA / "sample.v4_gold_conll").read_text(encoding="utf-8"), encoding="utf-8")
    trees = _write(tmp_path, _word(1, 0), name="trees.conllu")
    with pytest.raises(FormatError, match=rf"^{re.escape(str(path))}:4: .*at most 3 lines"):
        list(read_documents(path, trees=trees))


def test_docbin_that_inflates_past_the_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spacy_docs, "MAX_DOCBIN_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.spacy"
    bomb.write_bytes(zlib.compress(b"\0" * (4 << 20), 9))  # 4 KB on disk
    with pytest.raises(FormatError, match=r"bomb\.spacy: .*inflates to at most 1,048,576 bytes"):
        list(read_treebank(bomb))
    junk = tmp_path / "junk.spacy"
    junk.write_bytes(b"not zlib at all")
    with pytest.raises(FormatError, match=r"junk\.spacy: .*not zlib-compressed"):
        list(read_treebank(junk))


# ---- fuzz: mutations of valid files load or raise an InputError, nothing else ----

_GARBAGE = "()|=-<>,:[]/._ e0123456789\t#"
_IDS = ["0", "1", "2-3", "3-2", "0-1", "1-1", "2.1", "0.1", "1.0", "-1", "99999999999999999999", "1-" + "9" * 30,
        "٣", "1e3", "", "_"]
_HEADS = ["0", "-1", "_", "x", "99999999999999999999", "9" * 5000, "+1", "٣", "1.5", ""]
_MISC = ["Entity=(e1-x", "Entity=e1)", "Entity=(e1-x)", "Entity=(e9[1/2]-x", "Entity=(e9[2/2]-x)",
         "Entity=(e9[1/99999999999]-x)", "Entity=((", "Entity=)", "Entity=(e1-x-99999999999)", "Entity=(e1-x-0)",
         "Bridge=e1<e2", "Bridge=e1<e1", "Bridge=<", "Bridge=e1<e2,e1<e2", "SplitAnte=e1<e2,e1<e2",
         "SplitAnte=<e2", "Entity=(e1)|Entity=(e2)", "Bridge=e1<e2|Bridge=e1<e2", "_", ""]

_op = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("duplicate"), st.integers(0, 10_000)),
    st.tuples(st.just("swap-lines"), st.integers(0, 10_000), st.integers(0, 10_000)),
    st.tuples(st.just("swap-fields"), st.integers(0, 10_000), st.integers(0, 11), st.integers(0, 11)),
    st.tuples(st.just("bytes"), st.integers(0, 10_000), st.integers(0, 200), st.binary(min_size=1, max_size=4)),
    st.tuples(st.just("id"), st.integers(0, 10_000), st.sampled_from(_IDS)),
    st.tuples(st.just("head"), st.integers(0, 10_000), st.sampled_from(_HEADS)),
    st.tuples(st.just("misc"), st.integers(0, 10_000), st.sampled_from(_MISC) | st.text(_GARBAGE, max_size=12)),
    st.tuples(st.just("entity"), st.integers(0, 10_000), st.text(_GARBAGE, max_size=16)),
    st.tuples(st.just("last"), st.integers(0, 10_000), st.text(_GARBAGE, max_size=16)),  # conll2012: coreference
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.integers(0, 200)),
    st.tuples(st.just("blank"), st.integers(0, 10_000)),
)


def _field(lines: list[bytes], i: int, col: int, value: bytes) -> None:
    cols = lines[i].split(b"\t")
    if len(cols) > col:
        cols[col] = value
        lines[i] = b"\t".join(cols)


def _mutate(original: list[bytes], ops: list[tuple]) -> bytes:  # type: ignore[type-arg]
    lines = list(original)
    for op in ops:
        if not lines:
            break
        kind, i = op[0], op[1] % len(lines)
        if kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap-lines":
            j = op[2] % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "swap-fields":
            cols = lines[i].split(b"\t")
            a, b = op[2] % len(cols), op[3] % len(cols)
            cols[a], cols[b] = cols[b], cols[a]
            lines[i] = b"\t".join(cols)
        elif kind == "bytes":
            at = min(op[2], len(lines[i]))
            lines[i] = lines[i][:at] + op[3] + lines[i][at:]
        elif kind in ("id", "head"):
            _field(lines, i, 0 if kind == "id" else 6, op[2].encode())
        elif kind == "misc":
            _field(lines, i, 9, op[2].encode())
        elif kind == "entity":
            _field(lines, i, 9, b"Entity=" + op[2].encode())
        elif kind == "last":
            _field(lines, i, lines[i].count(b"\t"), op[2].encode())
        elif kind == "truncate":
            lines[i] = lines[i][: op[2]]
        else:
            lines.insert(i, b"")
    return b"\n".join(lines)


def _head_of(path: Path, n_blocks: int) -> list[bytes]:
    """The first ``n_blocks`` blank-line separated blocks of ``path``, as lines."""
    text = path.read_bytes().split(b"\n\n")[:n_blocks]
    return b"\n\n".join(text).split(b"\n")


_SOURCES = {
    "mwt_empty": (CORPORA / "mwt_empty.conllu", 10),
    "coref": (CORPORA / "coref.conllu", 10),
    "languages": (CORPORA / "languages" / "empty_nodes_enhanced.conllu", 10),
    "multiword": (CORPORA / "languages" / "multiword_tokens.conllu", 10),
    "sample": (SAMPLE / "sample-dev.conllu", 4),
    "conllx": (CORPORA / "sample.conllx", 10),
}

_FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _read_all(path: Path, reader: Callable[..., Iterator[Sentence | Document]]) -> None:
    """Read ``path`` raising, then skipping: each ends or raises an InputError naming ``path``."""
    for on_error in ("raise", "skip"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SkippedItemWarning)
                for _ in reader(path, on_error=on_error):
                    pass
        except InputError as err:
            assert err.path == str(path), str(err)
            assert err.line is not None or "empty file" in str(err) or "blank line" in str(err), str(err)


@pytest.mark.parametrize("source", sorted(_SOURCES))
@_FUZZ
@given(ops=st.lists(_op, min_size=1, max_size=4))
def test_mutated_treebanks_load_or_raise_input_errors(tmp_path: Path, source: str, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    original, n_blocks = _SOURCES[source]
    path = tmp_path / f"fuzz{original.suffix}"
    path.write_bytes(_mutate(_head_of(original, n_blocks), ops))
    _read_all(path, read_treebank)
    if original.suffix == ".conllu":
        _read_all(path, read_documents)


@_FUZZ
@given(ops=st.lists(_op, min_size=1, max_size=4))
def test_mutated_conll2012_loads_or_raises_input_errors(tmp_path: Path, ops: list[tuple]) -> None:  # type: ignore[type-arg]
    trees = tmp_path / "trees.conllu"
    if not trees.exists():
        first, second = ["The", "president", "met", "his", "staff", "."], ["He", "thanked", "them", "."]
        trees.write_text("\n".join(
            ["# sent_id = t1", *(_word(i, 0 if i == 3 else 3, form=w) for i, w in enumerate(first, 1)), "",
             "# sent_id = t2", *(_word(i, 0 if i == 2 else 2, form=w) for i, w in enumerate(second, 1))]) + "\n",
            encoding="utf-8")
    original = (CORPORA / "sample.v4_gold_conll").read_bytes().split(b"\n")
    path = tmp_path / "fuzz.v4_gold_conll"
    path.write_bytes(_mutate([line.replace(b"   ", b"\t") for line in original], ops).replace(b"\t", b"   "))

    def reader(p: Path, on_error: str) -> Iterator[Document]:
        return read_documents(p, trees=trees, on_error=on_error)

    _read_all(path, reader)
