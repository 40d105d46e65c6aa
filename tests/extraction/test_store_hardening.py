"""An attention store from outside: names, offsets and files that would read outside it, hang or crash.

The store is written by the project's own :func:`extract_to_store` with a fake extractor (random maps, no model),
then damaged: a shard name that is absolute or climbs out, a shard file that links out of the store, is a pipe
or ``/dev/zero``, a record whose offset is negative or runs past its shard, a manifest or index of the wrong
shape. Each is refused by ``--store`` (``open_store``) and by ``probes verify`` (exit 1, one line), naming the
file and the field or record; an intact store still reads and verifies.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from probes.corpora.types import Sentence
from probes.errors import DamagedStoreError, InputError, StoreError
from probes.extraction.attention import WordAttention
from probes.extraction.store import extract_to_store, open_store, verify_store

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need a POSIX system")

SECRET = "secret-sentence-4711"
LAYERS, HEADS = (0, 1), (0, 1, 2)


class FakeExtractor:
    """What :func:`extract_to_store` asks of an extractor: info, a report, and maps for each sentence."""

    def __init__(self) -> None:
        self.progress = False
        self.report = SimpleNamespace(skipped=[], truncated=[], windowed=[])

    def info(self) -> dict[str, Any]:
        return {"model": "fake", "revision": None, "weights_sha256": "0" * 64, "tokenizer": "fake",
                "layers": list(LAYERS), "heads": list(HEADS), "dtype": "float32", "max_tokens": 64}

    def iter_attention(self, sentences: Iterable[Sentence]) -> Iterator[tuple[Sentence, WordAttention]]:
        rng = np.random.default_rng(0)
        for sentence in sentences:
            n = len(sentence.words) + 2
            weights = rng.random((len(LAYERS), len(HEADS), n, n)).astype(np.float32)
            special = np.zeros(n, dtype=bool)
            special[[0, -1]] = True
            yield sentence, WordAttention(weights, special, LAYERS, HEADS, {"n_tokens": n})


def _sentences(n: int, prefix: str = "s") -> list[Sentence]:
    return [Sentence(f"{prefix}{i}", ("a", "b", "c")[: 1 + i % 3], (0, 1, 1)[: 1 + i % 3], ("root", "dep", "dep")[
        : 1 + i % 3]) for i in range(n)]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stores")
    extract_to_store(FakeExtractor(), _sentences(6), root / "clean", shard_size=3)  # type: ignore[arg-type]
    extract_to_store(FakeExtractor(), _sentences(3, SECRET), root / "other", shard_size=3)  # type: ignore[arg-type]
    return root / "clean"


@pytest.fixture()
def store(clean: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(clean, tmp_path / "store"))


@pytest.fixture()
def outside(clean: Path, tmp_path: Path) -> Path:
    """A store's worth of shard files outside ``store``, holding :data:`SECRET` sentences."""
    return Path(shutil.copytree(clean.parent / "other", tmp_path / "outside"))


def _manifest(store: Path, change: Callable[[dict[str, Any]], object]) -> None:
    doc = json.loads((store / "manifest.json").read_text(encoding="utf-8"))
    change(doc)
    (store / "manifest.json").write_text(json.dumps(doc), encoding="utf-8")


def _index(store: Path, change: Callable[[dict[str, Any]], object], name: str = "shard-00000") -> None:
    path = store / f"{name}.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    path.write_text(json.dumps(doc), encoding="utf-8")


def _verify_line(store: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`probes verify STORE`'s one error line (it must exit 1)."""
    from probes.cli import main

    assert main(["verify", str(store)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "internal error" not in err[0]
    return err[0]


def test_an_intact_store_reads_and_verifies(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    pairs = list(open_store(store, verify=True))
    assert [s.sent_id for s, _ in pairs] == [f"s{i}" for i in range(6)]
    assert pairs[0][1].weights.shape == (2, 3, 3, 3) and pairs[0][1].is_special.tolist() == [True, False, True]
    assert main(["verify", str(store)]) == 0 and "every file intact" in capsys.readouterr().out


# --- shard names and files that lead out --------------------------------------------------------------------


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
def test_a_shard_name_leading_out_is_refused_by_store_and_verify(store: Path, outside: Path, how: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    name = str(outside / "shard-00000") if how == "absolute" else os.path.relpath(outside / "shard-00000", store)
    entry = json.loads((outside / "manifest.json").read_text(encoding="utf-8"))["shards"][0]

    def change(doc: dict[str, Any]) -> None:
        doc["shards"][0] = {**entry, "name": name}  # checksums of the outside shard: it would pass as intact
    _manifest(store, change)
    for read in (lambda: list(open_store(store)), lambda: verify_store(store)):
        with pytest.raises(StoreError) as err:
            read()
        assert "manifest.json" in str(err.value) and "shards[0].name" in str(err.value)
        assert "expected a relative path inside" in str(err.value) and SECRET not in str(err.value)
    line = _verify_line(store, capsys)
    assert "shards[0].name" in line and "intact" not in line


@pytest.mark.parametrize("suffix", [".npy", ".json", ".sentences.jsonl"])
def test_a_shard_file_linking_out_of_the_store_is_damage(store: Path, outside: Path, suffix: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    (store / f"shard-00000{suffix}").unlink()
    (store / f"shard-00000{suffix}").symlink_to(outside / f"shard-00000{suffix}")
    with pytest.raises(DamagedStoreError, match=rf"shard-00000{suffix.replace('.', '[.]')}: .*link leading outside"):
        list(open_store(store))
    assert main(["verify", str(store)]) == 1
    captured = capsys.readouterr()
    assert "link leading outside" in captured.out and SECRET not in captured.out + captured.err


@needs_fifo
@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_shard_that_is_a_pipe_or_a_device_does_not_hang(store: Path, kind: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from probes.cli import main

    npy = store / "shard-00001.npy"
    npy.unlink()
    if kind == "fifo":
        os.mkfifo(npy)
    else:
        npy.symlink_to("/dev/zero")
    with pytest.raises(DamagedStoreError, match="shard-00001.npy"):
        open_store(store)
    assert main(["verify", str(store)]) == 1
    assert "shard-00001.npy" in capsys.readouterr().out


@needs_fifo
def test_a_manifest_that_is_a_pipe_does_not_hang(store: Path) -> None:
    (store / "manifest.json").unlink()
    os.mkfifo(store / "manifest.json")
    with pytest.raises(StoreError, match="named pipe"):
        open_store(store)


# --- records and headers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("change, message", [
    (lambda d: d["records"][1].__setitem__("offset", -5), "records[1].offset: expected a whole number >= 0, found -5"),
    (lambda d: d["records"][2].__setitem__("offset", 10**6), "records[2].offset: expected a map that ends within"),
    (lambda d: d["records"][0].__setitem__("n", 10**12), "records[0].n: expected a whole number from 1 to"),
    (lambda d: d["records"][0].__setitem__("n", "3"), "records[0].n: expected a whole number"),
    (lambda d: d["records"][0].__setitem__("is_special", [1]), "records[0].is_special: expected 3 flags"),
    (lambda d: d["records"][0].__setitem__("meta", [1]), "records[0].meta: expected a JSON object"),
    (lambda d: d["records"].pop(), "records: expected 3 records (one per sentence of the shard), found 2 records"),
    (lambda d: d.__setitem__("records", {"0": {}}), "records: expected a list"),
    (lambda d: d["records"].__setitem__(0, 7), "records[0]: expected a JSON object, found 7"),
])
def test_a_bad_record_in_a_shard_index_names_the_file_and_record(store: Path, change: Callable[[Any], object],
                                                                  message: str) -> None:
    _index(store, change)  # the manifest holds no hash of the index's records: the store still verifies
    with pytest.raises(StoreError) as err:
        list(open_store(store, verify=True))
    assert type(err.value) is StoreError and str(err.value).startswith(f"{store / 'shard-00000.json'}: ")
    assert message in str(err.value)


def test_a_shard_header_claiming_hundreds_of_gib_is_refused_before_reading(store: Path) -> None:
    npy = store / "shard-00000.npy"
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f2", "fortran_order": False, "shape": (200 << 30,)})
    assert len(header.getvalue()) == 128
    npy.write_bytes(header.getvalue() + bytes(64))
    with pytest.raises(DamagedStoreError, match=r"shard-00000\.npy: .*expected 429496729728 bytes .*found 192 bytes"):
        open_store(store)


def test_an_object_array_shard_is_damage_not_a_pickle(store: Path) -> None:
    npy = store / "shard-00000.npy"
    np.save(npy, np.array([1, "x"], dtype=object), allow_pickle=True)
    with pytest.raises(DamagedStoreError, match="Python objects"):
        open_store(store)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.__setitem__("shards", "shard-00000"), "shards: expected a list"),
    (lambda d: d["shards"][0].__setitem__("name", 5), "shards[0].name: expected a relative path"),
    (lambda d: d["shards"][0].__setitem__("n_sentences", -1), "shards[0].n_sentences: expected a whole number >= 0"),
    (lambda d: d["shards"][0].__setitem__("npy_sha256", None), "shards[0].npy_sha256: expected a string"),
    (lambda d: d["info"].__setitem__("layers", "all"), "info.layers: expected a list"),
    (lambda d: d["info"].__setitem__("heads", [0, -1]), "info.heads[1]: expected a whole number from 0"),
    (lambda d: d["info"].__setitem__("source", ["a"]), "info.source: expected a string or null"),
    (lambda d: d.__setitem__("info", None), "info: expected a JSON object"),
    (lambda d: d.__setitem__("shard_size", 0), "shard_size: expected a whole number >= 1"),
    (lambda d: d.__setitem__("n_stored", 1.5), "n_stored: expected a whole number >= 0"),
    (lambda d: d.__setitem__("report", []), "report: expected a JSON object"),
    (lambda d: d["report"].__setitem__("skipped", "s1"), "report.skipped: expected a list of sentence ids"),
    (lambda d: d.__setitem__("complete", "yes"), "complete: expected true or false"),
])
def test_a_bad_manifest_field_is_a_store_error_naming_it(store: Path, change: Callable[[Any], object],
                                                         message: str, capsys: pytest.CaptureFixture[str]) -> None:
    _manifest(store, change)
    with pytest.raises(StoreError) as err:
        open_store(store)
    assert str(err.value).startswith(f"{store / 'manifest.json'}: ") and message in str(err.value)
    assert message in _verify_line(store, capsys)


@pytest.mark.parametrize("bad", [json.dumps({"sent_id": "x", "bogus": 1}).encode(), b'{"sent_id": "\xff"}', b"[1]"])
def test_a_bad_sentence_line_names_the_file_and_line(store: Path, bad: bytes) -> None:
    lines = store / "shard-00001.sentences.jsonl"
    text = lines.read_bytes().splitlines()
    text[1] = bad
    lines.write_bytes(b"\n".join(text) + b"\n")
    checksum = hashlib.sha256(b"\n".join(text)).hexdigest()  # a crafted store agrees with itself
    _index(store, lambda d: d.__setitem__("data_sha256", checksum), "shard-00001")
    _manifest(store, lambda d: d["shards"][1].__setitem__("data_sha256", checksum))
    with pytest.raises(StoreError, match=r"shard-00001\.sentences\.jsonl:2: expected a stored sentence"):
        list(open_store(store, verify=True))


def test_a_resumed_store_with_a_crafted_index_extracts_the_shard_again(store: Path) -> None:
    _index(store, lambda d: d.pop("n_stored"))  # checksums still match: only the fields are wrong
    resumed = extract_to_store(FakeExtractor(), _sentences(6), store, shard_size=3)  # type: ignore[arg-type]
    assert len(resumed) == 6 and isinstance(json.loads((store / "shard-00000.json").read_text())["n_stored"], int)


def test_shard_like_names_of_other_files_are_left_alone(store: Path) -> None:
    (store / "shard-notes.txt").write_text("mine", encoding="utf-8")
    extract_to_store(FakeExtractor(), _sentences(6), store, shard_size=3)  # type: ignore[arg-type]
    assert (store / "shard-notes.txt").read_text(encoding="utf-8") == "mine"


def test_store_errors_are_input_errors() -> None:
    assert issubclass(StoreError, InputError) and issubclass(DamagedStoreError, InputError)
