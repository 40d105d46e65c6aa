"""Fuzz: mutated GGUF files are read and converted, or refused with the input error (issue 36).

A tiny Llama (2 layers, 4 query heads sharing 2 key/value heads, a byte-level BPE vocabulary) is written as an
F32 GGUF file the way llama.cpp does (tests/extraction/test_gguf.py). Every example mutates a copy: bytes
(flipped, inserted, deleted, truncated), every count, length, type and offset field of the layout overwritten with
a drawn integer (:class:`~tests.fuzz.fuzzlib.PutInt` on the fields :func:`gguf_fields` finds), and, through a
small writer of the format here, metadata values replaced by other types and values (zero heads, head counts that
do not divide, huge widths, a vocabulary of another size, merges of unknown tokens ...), tensor infos changed.

Two entry points: the header checks that run before any conversion (``read_gguf_header``, ``read_gguf_info``,
``check_model``), and :func:`probes.extraction.gguf.gguf_model_folder`, the conversion `probes` runs on a GGUF
model name (into a cache folder inside the example). Each must return, or raise
:class:`~probes.errors.InputError`, within the watchdog; a refused conversion leaves no temporary folder.
"""

from __future__ import annotations

import importlib.util
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from probes.errors import InputError
from tests.fuzz.fuzzlib import (
    INTS,
    REPLACEMENTS,
    Base,
    Case,
    FileInfo,
    Mutation,
    Replace,
    apply_all,
    check,
    fuzz_settings,
    mutations,
    new_case,
    weighted,
)

pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("gguf", "accelerate")),
                                reason="GGUF loading needs gguf and accelerate: pip install gguf accelerate")

FILE = "tiny-llama.gguf"

# --------------------------------------------------------------------------- the format, as the fuzzer sees it

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0
        self.fields: list[tuple[int, int, str]] = []

    def take(self, code: str, note: str | None = None) -> Any:
        size = struct.calcsize("<" + code)
        if self.pos + size > len(self.data):
            raise ValueError("truncated")
        if note is not None:
            self.fields.append((self.pos, size, note))
        value = struct.unpack_from("<" + code, self.data, self.pos)[0]
        self.pos += size
        return value

    def string(self, note: str) -> bytes:
        n = self.take("Q", f"{note} length")
        if self.pos + n > len(self.data):
            raise ValueError("truncated")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw

    def value(self, kind: int, note: str, depth: int = 0) -> Any:
        if kind in _SCALARS:
            return self.take(_SCALARS[kind], note)
        if kind == _STRING:
            return self.string(note).decode("utf-8")
        if kind == _ARRAY and depth < 4:
            element = self.take("I", f"{note} element type")
            count = self.take("Q", f"{note} count")
            keep = count <= 8  # the fields of the first elements only: a vocabulary has hundreds
            return (element, [self.value(element, f"{note}[{i}]" if keep or i < 3 else None if element in _SCALARS
                                         else f"{note}[{i}]", depth + 1) for i in range(count)])
        raise ValueError(f"value type {kind}")


@dataclass
class GGUF:
    """A parsed GGUF file: metadata ``(key, type, value)`` in order, tensor infos, the data after the padding."""

    version: int
    metadata: list[tuple[str, int, Any]]
    tensors: list[tuple[str, tuple[int, ...], int, int]]
    data: bytes
    fields: list[tuple[int, int, str]] = field(default_factory=list)

    @classmethod
    def parse(cls, data: bytes) -> GGUF:
        reader = _Reader(data)
        if data[:4] != b"GGUF":
            raise ValueError("not GGUF")
        reader.pos = 4
        version = reader.take("I", "version")
        n_tensors = reader.take("Q", "tensor_count")
        n_kv = reader.take("Q", "metadata_kv_count")
        metadata = []
        for index in range(n_kv):
            key = reader.string(f"key {index}").decode("utf-8")
            kind = reader.take("I", f"{key} type")
            metadata.append((key, kind, reader.value(kind, key)))
        tensors = []
        for index in range(n_tensors):
            name = reader.string(f"tensor {index} name").decode("utf-8")
            n_dims = reader.take("I", f"{name} n_dims")
            dims = tuple(reader.take("Q", f"{name} dim {d}") for d in range(n_dims))
            tensors.append((name, dims, reader.take("I", f"{name} type"), reader.take("Q", f"{name} offset")))
        alignment = next((v for k, t, v in metadata if k == "general.alignment" and t == 4), 32)
        start = -(-reader.pos // alignment) * alignment
        return cls(version, metadata, tensors, data[start:], reader.fields)

    def dumps(self) -> bytes:
        out = [b"GGUF", struct.pack("<IQQ", self.version, len(self.tensors), len(self.metadata))]
        for key, kind, value in self.metadata:
            out += [_string(key), struct.pack("<I", kind), _encode(kind, value)]
        for name, dims, kind, offset in self.tensors:
            out += [_string(name), struct.pack("<I", len(dims)), *(struct.pack("<Q", d % 2**64) for d in dims),
                    struct.pack("<IQ", kind % 2**32, offset % 2**64)]
        head = b"".join(out)
        alignment = next((v for k, t, v in self.metadata if k == "general.alignment" and t == 4 and v > 0), 32)
        return head + b"\0" * (-len(head) % alignment) + self.data


def _string(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(raw)) + raw


def _encode(kind: int, value: Any) -> bytes:
    if kind in _SCALARS:
        code = _SCALARS[kind]
        if code in "fd":
            return struct.pack("<" + code, float(value))
        if code == "?":
            return struct.pack("<B", int(value) % 256)
        bits = 8 * struct.calcsize(code)
        return (int(value) % 2**bits).to_bytes(bits // 8, "little")
    if kind == _STRING:
        return _string(str(value))
    element, items = value
    return struct.pack("<IQ", element, len(items)) + b"".join(_encode(element, item) for item in items)


def gguf_fields(name: str, data: bytes) -> list[tuple[int, int, str]]:
    """The count, length, type, dimension and offset fields of a GGUF file (for :class:`PutInt`)."""
    if not name.endswith(".gguf"):
        return []
    fields = GGUF.parse(data).fields
    return [(pos, width, note) for pos, width, note in fields if note]


def _edit(case: Case, file: str, change: Any) -> None:
    path = case.input / file
    if not path.is_file() or path.is_symlink():
        return
    try:
        parsed = GGUF.parse(path.read_bytes())
    except (ValueError, UnicodeDecodeError, struct.error, OverflowError, MemoryError):
        return  # an earlier mutation broke the layout: nothing to edit
    if change(parsed) is not False:
        path.write_bytes(parsed.dumps())


@dataclass(frozen=True)
class SetMeta(Mutation):
    """Set the metadata ``key`` to ``value`` of GGUF type ``kind`` (added when absent; removed when ``kind`` is
    None). An array value is ``(element type, [items])``."""

    file: str
    key: str
    kind: int | None
    value: Any = None

    def apply(self, case: Case) -> None:
        def change(parsed: GGUF) -> None:
            rest = [entry for entry in parsed.metadata if entry[0] != self.key]
            if self.kind is not None:
                at = next((i for i, entry in enumerate(parsed.metadata) if entry[0] == self.key), len(rest))
                rest.insert(at, (self.key, self.kind, self.value))
            parsed.metadata = rest

        _edit(case, self.file, change)


@dataclass(frozen=True)
class EditArray(Mutation):
    """Set item ``index`` (modulo the length) of the array ``key`` to ``value``, or delete it (``value`` None), or
    cut the array to its first ``index`` items (``value`` ``"cut"``)."""

    file: str
    key: str
    index: int
    value: Any

    def apply(self, case: Case) -> None:
        def change(parsed: GGUF) -> bool | None:
            for position, (key, kind, value) in enumerate(parsed.metadata):
                if key == self.key and kind == _ARRAY and value[1]:
                    items = list(value[1])
                    at = self.index % len(items)
                    if self.value is None:
                        del items[at]
                    elif self.value == "cut":
                        items = items[:at]
                    else:
                        items[at] = self.value if value[0] == _STRING else int(self.value) if \
                            isinstance(self.value, int) else items[at]
                    parsed.metadata[position] = (key, kind, (value[0], items))
                    return None
            return False

        _edit(case, self.file, change)


@dataclass(frozen=True)
class SetTensor(Mutation):
    """Change tensor ``index`` (modulo the count): its ``dims``, ggml ``type``, data ``offset`` or ``name``; or
    ``drop`` it, or ``repeat`` it."""

    file: str
    index: int
    what: str
    value: Any = None

    def apply(self, case: Case) -> None:
        def change(parsed: GGUF) -> bool | None:
            if not parsed.tensors:
                return False
            at = self.index % len(parsed.tensors)
            name, dims, kind, offset = parsed.tensors[at]
            if self.what == "drop":
                del parsed.tensors[at]
            elif self.what == "repeat":
                parsed.tensors.insert(at, parsed.tensors[at])
            else:
                new = {"dims": lambda: (name, tuple(self.value), kind, offset),
                       "type": lambda: (name, dims, self.value, offset),
                       "offset": lambda: (name, dims, kind, self.value),
                       "name": lambda: (self.value, dims, kind, offset)}
                parsed.tensors[at] = new[self.what]()
            return None

        _edit(case, self.file, change)


#: Metadata keys the fuzzer sets besides those of the file: what the checks and transformers' loader read.
EXTRA_KEYS = ("llama.attention.key_length", "llama.attention.value_length", "general.alignment",
              "llama.expert_count", "llama.attention.sliding_window", "tokenizer.chat_template", "general.type",
              "llama.rope.scaling.type")
#: Token texts an array edit puts in the vocabulary or the merges.
TOKENS = ("", " ", "a", "a b", "a  b", "<s>", "</s>", "\u0120the", "\u0120 t", "zz qq", "a b c", "\x00", "\ud800")
#: Numbers of heads, layers and widths: none, one, odd, not a divisor, huge, negative.
COUNTS = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, 7, 8, 16, 32, 64, 10**4, 10**8, 2**31 - 1, 2**32 - 1, 2**63,
                                    -1]), INTS)


def _meta_values(kind: int) -> st.SearchStrategy[Any]:
    if kind in (6, 12):
        return st.floats(allow_nan=True, allow_infinity=True, width=32 if kind == 6 else 64)
    if kind == 7:
        return st.integers(0, 255)
    if kind == _STRING:
        return st.one_of(st.sampled_from(["", "llama", "gpt2", "bert", "not-an-arch", "x" * 10**5, "\ud800"]),
                         st.text(max_size=8))
    if kind == _ARRAY:
        return st.one_of(
            st.tuples(st.sampled_from([4, 5, 10]), st.lists(COUNTS.map(lambda v: v % 2**31), max_size=4)),
            st.tuples(st.just(_STRING), st.lists(st.sampled_from(TOKENS), max_size=4)),
            st.tuples(st.just(_ARRAY), st.just([])),
        )
    return COUNTS


def _semantic(info: FileInfo, keys: tuple[str, ...]) -> st.SearchStrategy[Mutation]:
    kinds = st.sampled_from([4, 5, 10, 11, 0, 2, 6, 12, 7, _STRING, _ARRAY])
    set_meta = st.tuples(st.sampled_from(keys + EXTRA_KEYS), kinds).flatmap(
        lambda pair: st.builds(SetMeta, st.just(info.name), st.just(pair[0]), st.just(pair[1]),
                               _meta_values(pair[1])))
    same_type = st.sampled_from(["llama.attention.head_count", "llama.attention.head_count_kv", "llama.block_count",
                                 "llama.embedding_length", "llama.feed_forward_length", "llama.vocab_size",
                                 "llama.context_length", "llama.rope.dimension_count",
                                 "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                 "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id"]).flatmap(
        lambda key: st.builds(SetMeta, st.just(info.name), st.just(key), st.just(4), COUNTS))
    remove = st.builds(SetMeta, st.just(info.name), st.sampled_from(keys), st.none())
    arrays = st.builds(EditArray, st.just(info.name),
                       st.sampled_from(["tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                                        "tokenizer.ggml.scores"]),
                       st.integers(0, 1000), st.one_of(st.none(), st.just("cut"), st.sampled_from(TOKENS), INTS))
    tensors = st.one_of(
        st.builds(SetTensor, st.just(info.name), st.integers(0, 30), st.just("dims"),
                  st.lists(st.sampled_from([0, 1, 2, 3, 31, 32, 33, 64, 299, 300, 10**6, 2**32, 2**63]),
                           min_size=0, max_size=5)),
        st.builds(SetTensor, st.just(info.name), st.integers(0, 30), st.just("type"),
                  st.sampled_from([0, 1, 2, 8, 12, 30, 39, 41, 99, 2**32 - 1])),
        st.builds(SetTensor, st.just(info.name), st.integers(0, 30), st.just("offset"), INTS),
        st.builds(SetTensor, st.just(info.name), st.integers(0, 30), st.just("name"),
                  st.sampled_from(["", "token_embd.weight", "output.weight", "blk.0.attn_q.weight", "x" * 70000])),
        st.builds(SetTensor, st.just(info.name), st.integers(0, 30), st.sampled_from(["drop", "repeat"])),
    )
    return weighted([(3, set_meta), (3, same_type), (1, remove), (2, arrays), (2, tensors)])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Base:
    """A folder holding the tiny Llama's GGUF file alone."""
    from tests.extraction.test_gguf import _source_model, _tokenizer, write_llama_gguf

    folder = tmp_path_factory.mktemp("gguf")
    tok = _tokenizer()
    write_llama_gguf(_source_model(tok.get_vocab_size()), tok, folder / FILE)
    return Base("tiny llama GGUF", folder, None)


@pytest.fixture(scope="module")
def described(tiny: Base) -> Base:
    from tests.fuzz.fuzzlib import describe

    return Base(tiny.name, tiny.folder, describe(tiny.folder, extra_fields=gguf_fields))


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("secret")


def _strategy(base: Base) -> st.SearchStrategy[list[Mutation]]:
    keys = tuple(key for key, _, _ in GGUF.parse((base.folder / FILE).read_bytes()).metadata)
    # the file named as the model may be a link anywhere: only the replacements that are not a regular file
    kinds = [kind for kind in REPLACEMENTS if kind != "outside"]
    return mutations(base.infos, replacements=kinds, extra=lambda info: _semantic(info, keys))


def _convert(case: Case) -> Any:
    """The conversion of the example's file into a cache inside it; no temporary folder is left either way."""
    from probes.extraction.gguf import gguf_model_folder

    cache = case.root / "cache"
    result = check(lambda: gguf_model_folder(case.input / FILE, cache=cache), case, seconds=30)
    from probes.atomic_io import is_temporary

    left = sorted(p.name for p in cache.rglob("*") if is_temporary(p.name) or ".converting-" in p.name)
    assert not left, f"a conversion left temporary folders: {left}"
    if isinstance(result, Path):
        assert result.is_dir() and (result / "config.json").is_file()
    return result


def _header_checks(path: Path) -> Any:
    from probes.extraction.gguf import read_gguf_info
    from probes.extraction.gguf_checks import check_model
    from probes.extraction.gguf_header import read_gguf_header

    header = read_gguf_header(path)
    read_gguf_info(path, header)
    check_model(header)
    return header


def test_the_fuzzers_writer_gives_back_the_valid_file_byte_for_byte(tiny: Base) -> None:
    """The writer the semantic mutations use changes nothing it is not asked to."""
    data = (tiny.folder / FILE).read_bytes()
    assert GGUF.parse(data).dumps() == data


@fuzz_settings(250)
@given(data=st.data())
def test_a_mutated_gguf_header_is_read_or_refused_with_the_input_error(
        described: Base, secret: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    changes = data.draw(_strategy(described), label="mutations")
    with new_case(tmp_path_factory, described.folder, secret) as case:
        apply_all(case, changes)
        check(lambda: _header_checks(case.input / FILE), case)


@fuzz_settings(60)
@given(data=st.data())
def test_a_gguf_file_with_mutated_metadata_converts_or_is_refused_with_the_input_error_leaving_no_temporary_folder(
        described: Base, secret: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Only the edits that keep the layout valid (metadata, tensor infos): what passes the header reaches
    transformers' loader, the tokenizer and ``save_pretrained``."""
    keys = tuple(key for key, _, _ in GGUF.parse((described.folder / FILE).read_bytes()).metadata)
    changes = data.draw(st.lists(_semantic(described.infos[FILE], keys), min_size=1, max_size=2), label="mutations")
    with new_case(tmp_path_factory, described.folder, secret, writable=("cache",)) as case:
        apply_all(case, changes)
        _convert(case)


@pytest.mark.parametrize("how", [kind for kind in REPLACEMENTS if kind != "outside"])
def test_a_gguf_file_that_is_not_a_regular_file_is_refused_with_the_input_error(
        how: str, tiny: Base, secret: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    with new_case(tmp_path_factory, tiny.folder, secret, writable=("cache",)) as case:
        Replace(FILE, how).apply(case)
        assert isinstance(check(lambda: _header_checks(case.input / FILE), case), InputError)
        assert isinstance(_convert(case), InputError)
