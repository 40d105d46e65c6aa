"""Fuzz: mutated attention stores open, stream and verify, or raise the input error (issue 36).

A valid store of six sentences in two shards (two sentences skipped as over-long) is written by
:func:`probes.extraction.store.extract_to_store` with a tiny BERT; every example mutates a copy: the manifest and
the shard indexes as JSON (shard names turned into ``../secret/...``, absolute paths and links, negative offsets,
huge counts ...), the sentences as JSON lines, the ``.npy`` shards as bytes and through their headers, any file
replaced by a link, a pipe, a folder. With :class:`Rehash` last, the manifest and the indexes are given the sha256
of the mutated shards, so that the readers behind the hash check are reached too. Then
:func:`~probes.extraction.store.verify_store` (``probes verify``), :func:`~probes.extraction.store.open_store`
streamed to the end, and ``open_store(verify=True)`` must each return, or raise
:class:`~probes.errors.InputError`, within the watchdog, opening nothing outside the store
(see :mod:`tests.fuzz.fuzzlib`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from probes.corpora.types import Sentence
from probes.errors import InputError
from probes.extraction.store import open_store, verify_store
from tests.fuzz.fuzzlib import (
    MARKER,
    PATH_FORMS,
    REPLACEMENTS,
    Base,
    Case,
    JsonSet,
    Mutation,
    PathOf,
    Replace,
    apply_all,
    check,
    fuzz_settings,
    mutations,
    new_case,
)

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "and", "a", "cat", "sat", "on",
         "the", "mat"]


def _corpus(n: int, marker: str = "") -> list[Sentence]:
    out = []
    for i in range(n):
        k = 1 + (i * 7) % len(WORDS)
        words = tuple(marker or WORDS[(i + j) % len(WORDS)] for j in range(k))
        out.append(Sentence(f"s{i}{marker}", words, tuple(range(k)), ("dep",) * k, upos=("X",) * k, line=i + 1))
    return out


def _store(model: Path, folder: Path, marker: str = "") -> Path:
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.store import extract_to_store

    extractor = AttentionExtractor.from_pretrained(model, progress=False, max_length=14 if not marker else 64)
    extract_to_store(extractor, _corpus(6, marker), folder, shard_size=3)
    return folder


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def store(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Base:
    return Base("store", _store(model, tmp_path_factory.mktemp("store") / "store"))


@pytest.fixture(scope="module")
def secret_store(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid store of sentences that hold the marker: what a mutated store may point at, never read."""
    return _store(model, tmp_path_factory.mktemp("secret") / "store", MARKER)


def _lines_sha256(data: bytes) -> str:
    return hashlib.sha256(data[:-1] if data.endswith(b"\n") else data).hexdigest()


@dataclass(frozen=True)
class Rehash(Mutation):
    """Give every shard entry of the manifest, and each shard's index, the sha256 of the shard's files as they
    are now (what a hostile store that is consistent with itself holds)."""

    file: str = "manifest.json"

    def apply(self, case: Case) -> None:
        def plain(path: Path) -> bool:
            return path.is_file() and not path.is_symlink()

        try:
            if not plain(case.input / "manifest.json"):
                return
            manifest = json.loads((case.input / "manifest.json").read_text(encoding="utf-8"))
            shards = manifest["shards"]
            for shard in shards:
                name = shard["name"]
                npy, lines = case.input / f"{name}.npy", case.input / f"{name}.sentences.jsonl"
                if plain(npy) and plain(lines):
                    shard["npy_sha256"] = hashlib.sha256(npy.read_bytes()).hexdigest()
                    shard["data_sha256"] = _lines_sha256(lines.read_bytes())
                index_path = case.input / f"{name}.json"
                if not plain(index_path):
                    continue
                index = json.loads(index_path.read_text(encoding="utf-8"))
                index["npy_sha256"], index["data_sha256"] = shard["npy_sha256"], shard["data_sha256"]
                index_path.write_text(json.dumps(index), encoding="utf-8")
        except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError):
            return  # an earlier mutation left nothing to rehash
        (case.input / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def _stream(path: Path) -> list[Any]:
    """Every (sentence, attention) of the store, read to the end."""
    return [(sentence, attention.weights.shape) for sentence, attention in open_store(path)]


def _read_every_way(case: Case) -> None:
    check(lambda: verify_store(case.input), case)
    check(lambda: _stream(case.input), case)
    check(lambda: open_store(case.input, verify=True), case)


@fuzz_settings(120)
@given(data=st.data())
def test_a_mutated_store_streams_and_verifies_or_raises_the_input_error(
        store: Base, secret_store: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    changes = data.draw(mutations(store.infos), label="mutations")
    if data.draw(st.booleans(), label="rehash"):
        changes = [*changes, Rehash()]
    with new_case(tmp_path_factory, store.folder, secret_store) as case:
        apply_all(case, changes)
        _read_every_way(case)


@fuzz_settings(100)
@given(data=st.data())
def test_a_store_with_mutated_json_and_consistent_hashes_streams_or_raises_the_input_error(
        store: Base, secret_store: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Only the JSON files (manifest, indexes, sentences) mutated, then rehashed: the readers past the hashes."""
    files = [name for name in store.infos if name.endswith((".json", ".jsonl"))]
    changes = data.draw(mutations(store.only(*files), replacements=()), label="mutations")
    with new_case(tmp_path_factory, store.folder, secret_store) as case:
        apply_all(case, [*changes, Rehash()])
        _read_every_way(case)


@pytest.mark.parametrize("how", REPLACEMENTS)
def test_a_store_file_that_is_not_a_regular_file_inside_the_store_is_refused_with_the_input_error(
        how: str, store: Base, secret_store: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each file of the store replaced by a pipe, a folder, ``/dev/zero``, a link out to a valid twin ...:
    ``probes verify`` lists it or refuses the store, and opening the store refuses it, without reading it."""
    for name in store.infos:
        with new_case(tmp_path_factory, store.folder, secret_store) as case:
            Replace(name, how).apply(case)
            found = check(lambda: verify_store(case.input), case)
            assert isinstance(found, InputError) or found.damage, name
            assert isinstance(check(lambda: _stream(case.input), case), InputError), name
            assert isinstance(check(lambda: open_store(case.input, verify=True), case), InputError), name


@pytest.mark.parametrize("how", PATH_FORMS)
def test_a_shard_name_leading_out_of_the_store_is_refused_with_the_input_error(
        how: str, store: Base, secret_store: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A shard's name made absolute, ``../``, a link out ...: refused before the valid twin it names is read."""
    with new_case(tmp_path_factory, store.folder, secret_store) as case:
        JsonSet("manifest.json", ("shards", 0, "name"), PathOf(how)).apply(case)
        found = check(lambda: verify_store(case.input), case)
        assert isinstance(found, InputError) or found.damage
        assert isinstance(check(lambda: _stream(case.input), case), InputError)
