"""Model loading hardened (issue 36, classes 1, 6 and 7): no folder's own code ever runs, every fault of a model
name, folder or weight file is one input error naming it, and words that spell special tokens are text.

* a folder whose ``config.json`` (or ``tokenizer_config.json``) has an ``auto_map``, or names a model type
  transformers does not know, is refused before transformers is asked anything: no prompt, no import, for a
  model, ``random-init:<folder>@1`` and the gradient path alike; every transformers call passes
  ``trust_remote_code=False``;
* ``package:`` names and ``random-init:`` seeds out of form are ConfigErrors naming the model string;
* safetensors headers (length, JSON, offsets), shard maps, pickles ``weights_only`` refuses, devices and pipes:
  InputErrors naming the file, checked before transformers reads it;
* for every tiny family, words "[SEP]", "<s>", "<|endoftext|>" ... get no special-token id.
"""

from __future__ import annotations

import builtins
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from probes.errors import ConfigError, FormatError, InputError
from probes.extraction.align import align_words
from probes.extraction.loading import (
    load_pretrained,
    load_tokenizer,
    resolve_model,
    weights_sha256,
)
from probes.extraction.random_init import (
    MAX_SEED,
    parse_random_init,
    parse_random_init_options,
)
from probes.extraction.weight_files import (
    MAX_HEADER_BYTES,
    check_safetensors,
    check_weight_files,
)
from tests.tiny_models import build, tiny_families

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_prompt_and_own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any prompt fails the test (transformers asks with ``input``); random-init twins go to a temporary cache."""
    def refuse(*_: object) -> str:
        pytest.fail("a prompt was shown")

    monkeypatch.setattr(builtins, "input", refuse)
    monkeypatch.setenv("PROBES_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT folder (copied by the tests that change it)."""
    return build("bert", tmp_path_factory.mktemp("hardening"))


def _copy(folder: Path, to: Path) -> Path:
    return Path(shutil.copytree(folder, to))


# ------------------------------------------------------------------------------------- class 1: remote code
def _evil(tmp_path: Path, config: dict[str, Any]) -> tuple[Path, Path]:
    """A folder with ``config`` and an ``evil.py`` that writes a marker when imported; ``(folder, marker)``."""
    folder, marker = tmp_path / "evil", tmp_path / "MARKER"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    trap = f"open({str(marker)!r}, 'w').write('ran')\nclass EvilConfig: pass\nclass EvilModel: pass\n"
    (folder / "evil.py").write_text(trap, encoding="utf-8")
    return folder, marker


EVIL = {"model_type": "evilbert", "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"}}


def test_a_folder_with_its_own_code_is_refused_before_transformers_is_asked(tmp_path: Path) -> None:
    folder, marker = _evil(tmp_path, EVIL)
    with pytest.raises(ConfigError) as err:
        load_pretrained(folder)
    message = str(err.value)
    assert message.startswith(f"{folder / 'config.json'}: auto_map (")
    assert "ships its own Python code, which probes never runs" in message and "\n" not in message
    assert not marker.exists()


def test_a_random_init_twin_of_such_a_folder_is_refused_too(tmp_path: Path) -> None:
    folder, marker = _evil(tmp_path, EVIL)
    with pytest.raises(ConfigError, match="ships its own Python code"):
        resolve_model(f"random-init:{folder}@1")
    assert not marker.exists() and not (tmp_path / "cache").exists()


def test_the_gradient_path_refuses_it_too(tmp_path: Path) -> None:
    from probes.extraction.gradients import load_lm

    folder, marker = _evil(tmp_path, EVIL)
    with pytest.raises(ConfigError, match="ships its own Python code"):
        load_lm(folder)
    assert not marker.exists()


def test_an_auto_map_beside_a_known_model_type_says_how_to_use_transformers_own_classes(tmp_path: Path) -> None:
    folder, marker = _evil(tmp_path, {**EVIL, "model_type": "bert"})
    with pytest.raises(ConfigError, match="remove auto_map from config.json to load it with transformers' own bert"):
        load_pretrained(folder)
    assert not marker.exists()


def test_an_unknown_model_type_is_refused_with_what_was_found(tmp_path: Path) -> None:
    folder, _ = _evil(tmp_path, {"model_type": "evilbert"})
    with pytest.raises(ConfigError, match=r"model_type: expected a model type transformers .* knows .*found 'evilbert'"):
        load_pretrained(folder)


def test_a_tokenizer_with_its_own_code_is_refused(bert: Path, tmp_path: Path) -> None:
    folder = _copy(bert, tmp_path / "m")
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_pretrained(folder)
    assert str(err.value).startswith(f"{folder / 'tokenizer_config.json'}: auto_map (")
    assert "ships its own tokenizer code" in str(err.value)


def test_every_transformers_call_passes_trust_remote_code_false(bert: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    calls: list[tuple[str, Any]] = []

    def spy(cls: Any, method: str) -> None:
        original = getattr(cls, method).__func__

        def recording(klass: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append((f"{cls.__name__}.{method}", kwargs.get("trust_remote_code", "missing")))
            return original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, method, classmethod(recording))

    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModel):
        spy(cls, "from_pretrained")
    spy(transformers.AutoModel, "from_config")
    load_pretrained(bert, progress=False)
    resolve_model(f"random-init:{bert}@1")
    names = {name for name, _ in calls}
    assert {"AutoConfig.from_pretrained", "AutoTokenizer.from_pretrained", "AutoModel.from_pretrained",
            "AutoModel.from_config"} <= names
    assert all(flag is False for _, flag in calls), calls


def test_a_hub_name_in_the_local_cache_is_checked_like_a_folder(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    folder, marker = _evil(tmp_path, EVIL)
    repo = tmp_path / "hub" / "models--someone--evil"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40, encoding="utf-8")
    shutil.copytree(folder, repo / "snapshots" / ("0" * 40))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="ships its own Python code"):
        load_pretrained("someone/evil")
    assert not marker.exists()


@pytest.mark.subprocess
def test_the_cli_refuses_in_one_line_even_when_y_is_piped(tmp_path: Path) -> None:
    folder, marker = _evil(tmp_path, EVIL)
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PROBES_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "probes", "leaderboard", "--model", str(folder), "--treebank",
                           "sample:dev", "--limit", "2", "--out", str(tmp_path / "out")], input="y\n",
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path, check=False)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "ships its own Python code" in lines[0], lines
    assert "internal error" not in lines[0] and "Do you wish" not in proc.stdout + proc.stderr
    assert not marker.exists()


# ------------------------------------------------------------------------------------- class 6: model names
@pytest.mark.parametrize("name", ["NAME.sub", "", ".", "a..b", "../pkg", "a-b", "json.no_such_sub", "x\x00y",
                                  "1abc"])
def test_a_malformed_or_missing_package_name_is_a_config_error_naming_it(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_model(f"package:{name}")
    assert repr(f"package:{name}") in str(err.value) and "expected" in str(err.value)


def test_a_folder_without_init_under_an_unimported_package_is_no_package(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "outerpkg" / "inner").mkdir(parents=True)  # inner: a namespace package (no __init__.py)
    (tmp_path / "outerpkg" / "__init__.py").write_text("raise SystemExit('imported')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "outerpkg", raising=False)
    with pytest.raises(ConfigError, match="no installed package 'outerpkg.inner'"):
        resolve_model("package:outerpkg.inner")  # was a KeyError from importlib
    assert "outerpkg" not in sys.modules


@pytest.mark.parametrize("seed", ["99999999999999999999999", str(MAX_SEED + 1), "-1", "\u00b2", "\u0663", "1e5",
                                  pytest.param("1" + "0" * 5000, id="5001-digits")])  # past int()'s digit limit
def test_a_seed_out_of_range_or_form_is_a_config_error_naming_the_model(seed: str) -> None:
    spec = f"random-init:some/base@{seed}"
    with pytest.raises(ConfigError) as err:
        parse_random_init(spec)
    message = str(err.value)
    assert repr(spec) in message
    assert f"must be a whole number >= 0 (at most {MAX_SEED}" in message


def test_the_largest_seed_is_accepted_and_torch_takes_it() -> None:
    import torch

    assert parse_random_init(f"random-init:b@{MAX_SEED}") == ("b", MAX_SEED)
    assert parse_random_init("random-init:b@" + "0" * 5000 + "7") == ("b", 7)  # leading zeros are read, not int()ed
    torch.manual_seed(MAX_SEED)


@pytest.mark.parametrize("sentences", ["\u00b2", "99999999999", "0", pytest.param("1" + "0" * 5000, id="5001-digits")])
def test_a_sentence_count_out_of_range_or_form_is_a_config_error(sentences: str) -> None:
    with pytest.raises(ConfigError, match="option sentences: expected a whole number >= 1"):
        parse_random_init_options(f"random-init:b@1?qk=match&sentences={sentences}")


# ------------------------------------------------------------------------------------- class 6: weight files
def _safetensors(path: Path, header: dict[str, Any] | bytes, data: bytes = b"", length: int | None = None) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def _tensor(dtype: str, shape: list[int], begin: int, end: int) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


@pytest.mark.parametrize("header, data, length, expected", [
    ({}, b"", 2**62, "found a header length of 4,611,686,018,427,387,904"),
    ({}, b"", 10_000, "found a header length of 10,000"),
    (b"{not json", b"", None, "invalid JSON"),
    (b"[" * 5000 + b"]" * 5000, b"", None, "nested at most"),
    ([1, 2], b"", None, "a JSON object"),
    ({"a": _tensor("F32", [2], 0, 8), "b": _tensor("F32", [2], 4, 12)}, bytes(12), None, "overlaps the tensor"),
    ({"a": _tensor("F32", [2], 0, 8), "b": _tensor("F32", [2], 16, 24)}, bytes(24), None, "leaves bytes 8..16"),
    ({"a": _tensor("F32", [4], 0, 16)}, bytes(8), None, "fill the 8 data bytes after the header, found 16"),
    ({"a": _tensor("F32", [3], 0, 8)}, bytes(8), None, "to take 12 bytes"),
    ({"a": _tensor("F32", [2**40, 2**40], 0, 8)}, bytes(8), None, "to take"),
    ({"a": _tensor("Q9", [2], 0, 8)}, bytes(8), None, "expected dtype one of"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0.0, 8.0]}}, bytes(8), None, "data_offsets"),
    ({"a": {"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]}}, bytes(8), None, "shape"),
    ({"a": _tensor("F32", [2], 8, 0)}, bytes(8), None, "begin <= end"),
    ({"a": _tensor("F32", [-2], 0, 8)}, bytes(8), None, "shape"),
    ({"a": "x"}, b"", None, "expected an object with dtype"),
    ({"__metadata__": {"k": 1}}, b"", None, "__metadata__"),
])
def test_a_crafted_safetensors_header_is_a_format_error_naming_the_file(tmp_path: Path, header: Any, data: bytes,
                                                                        length: int | None, expected: str) -> None:
    path = _safetensors(tmp_path / "model.safetensors", header, data, length)
    with pytest.raises(FormatError) as err:
        check_safetensors(path)
    assert str(err.value).startswith(f"{path}:") and expected in str(err.value)


def test_the_header_limit_holds_even_for_a_large_file(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    with path.open("wb") as handle:  # sparse: the file is larger than the limit, its header length too
        handle.write(struct.pack("<Q", MAX_HEADER_BYTES + 1))
        handle.truncate(MAX_HEADER_BYTES + 64)
    with pytest.raises(FormatError, match=f"at most {MAX_HEADER_BYTES:,} bytes"):
        check_safetensors(path)


def test_real_weight_files_pass(bert: Path) -> None:
    check_weight_files(bert)
    for family in ("gpt2", "llama"):
        folder = build(family, bert.parent / "more")
        check_weight_files(folder)


def test_a_bad_header_stops_loading_before_transformers_reads_it(bert: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    folder = _copy(bert, tmp_path / "m")
    bad = _safetensors(folder / "model.safetensors", {}, b"", 2**62)
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained",
                        classmethod(lambda *a, **k: pytest.fail("transformers was asked")))
    with pytest.raises(FormatError, match=str(bad)):
        load_pretrained(folder)


def test_a_shard_map_pointing_outside_the_folder_is_refused(bert: Path, tmp_path: Path) -> None:
    folder = _copy(bert, tmp_path / "m")
    index = {"metadata": {}, "weight_map": {"embeddings.word_embeddings.weight": "../outside.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    with pytest.raises(InputError) as err:
        load_pretrained(folder)
    assert str(err.value).startswith(str(folder / "model.safetensors.index.json")) and "outside.safetensors" in str(
        err.value)


class _Evil:
    """Unpickling it would write the marker."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_a_malicious_pickle_is_a_format_error_naming_the_file_and_never_runs(bert: Path, tmp_path: Path,
                                                                           how: str) -> None:
    import torch

    folder, marker = _copy(bert, tmp_path / "m"), tmp_path / "MARKER"
    (folder / "model.safetensors").unlink()
    weights = folder / "pytorch_model.bin"
    if how == "pickle":
        weights.write_bytes(pickle.dumps({"x": _Evil(marker)}, protocol=2))
    else:
        torch.save({"x": _Evil(marker)}, weights)
    with pytest.raises(FormatError) as err:
        load_pretrained(folder, progress=False)
    assert str(err.value).startswith(f"{weights}:") and "holds code or objects that are not tensors" in str(err.value)
    assert not marker.exists()


def test_a_cut_short_pickle_is_a_format_error_naming_the_file(bert: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    folder = _copy(bert, tmp_path / "m")
    weights = folder / "pytorch_model.bin"
    torch.save(load_file(folder / "model.safetensors"), weights)
    (folder / "model.safetensors").unlink()
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(FormatError, match=f"{weights}: expected a torch weight file, found one that cannot be read"):
        load_pretrained(folder, progress=False)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer.json"])
def test_a_device_behind_a_link_is_refused_without_reading_it(bert: Path, tmp_path: Path, name: str) -> None:
    folder = _copy(bert, tmp_path / "m")
    (folder / name).unlink()
    (folder / name).symlink_to("/dev/zero")
    with pytest.raises(InputError, match="a character device"):
        load_pretrained(folder)


def test_a_named_pipe_is_refused_and_never_hangs(bert: Path, tmp_path: Path) -> None:
    folder = _copy(bert, tmp_path / "m")
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    with pytest.raises(InputError, match="a named pipe"):
        load_pretrained(folder)
    with pytest.raises(InputError, match="a named pipe"):
        weights_sha256(folder)  # hashed before any load by experiment runs
    with pytest.raises(InputError, match="a named pipe"):
        resolve_model(f"random-init:{folder}@1")


# ------------------------------------------------------------------------------------- class 7: special tokens
#: Words that spell some family's special tokens.
SPELLED = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "<s>", "</s>", "<pad>", "<unk>", "<mask>", "<|endoftext|>"]


def _plain(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The tokenizer as :func:`load_tokenizer` made it before special-token spellings were text."""
    from probes.extraction import loading

    with monkeypatch.context() as patch:
        patch.setattr(loading, "words_as_text", lambda tokenizer: tokenizer)
        return load_tokenizer(str(folder))


@pytest.mark.parametrize("family", tiny_families())
def test_words_that_spell_special_tokens_are_text_in_every_family(family: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder = build(family, tmp_path)
    tokenizer = load_tokenizer(str(folder))
    own = [t for t in tokenizer.all_special_tokens if t not in SPELLED]
    words = ["the", *SPELLED, *own, "a<s>b", "dog"]
    special_ids = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}  # unknown text is the unknown token
    alignment = align_words(tokenizer, words)
    assert alignment.n_words == len(words) and (alignment.word_tokens >= 1).all()
    word_ids = alignment.input_ids[~alignment.is_special[alignment.token_position]]
    assert not set(word_ids.tolist()) & special_ids, (family, word_ids.tolist())
    plain_alignment = align_words(tokenizer, ["the", "dog"])
    assert alignment.n_special_tokens == plain_alignment.n_special_tokens  # the added specials stay as they were
    # without the change, the spelled words became special tokens
    plain = _plain(folder, monkeypatch)
    encoded = plain(words, is_split_into_words=True)
    spelled = [i for i, w in zip(encoded["input_ids"], encoded.word_ids()) if w is not None]
    assert set(spelled) & special_ids


@pytest.mark.parametrize("family", tiny_families())
def test_ordinary_words_are_tokenized_as_before(family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.tiny_models import CORPUS

    folder = build(family, tmp_path)
    tokenizer, plain = load_tokenizer(str(folder)), _plain(folder, monkeypatch)
    steps = (tokenizer.backend_tokenizer.pre_tokenizer.__getstate__(),
             plain.backend_tokenizer.pre_tokenizer.__getstate__())
    assert (steps[0] != steps[1]) == (family == "llama")  # a step only where the model matched "<s>" as a piece
    for sentence in [*CORPUS, "Unseen words: zebra, <, >, |, [ and ]."]:
        words = sentence.split()
        assert tokenizer(words, is_split_into_words=True)["input_ids"] == plain(words, is_split_into_words=True)[
            "input_ids"]


def test_a_saved_tokenizer_keeps_its_ids_and_the_step_once(tmp_path: Path) -> None:
    folder = build("llama", tmp_path)
    tokenizer = load_tokenizer(str(folder))
    words = ["the", "<s>", "</s>", "dog"]
    before = tokenizer(words, is_split_into_words=True)["input_ids"]
    tokenizer.save_pretrained(tmp_path / "saved")
    again = load_tokenizer(str(tmp_path / "saved"))
    assert again(words, is_split_into_words=True)["input_ids"] == before
    assert (len(again), again.all_special_ids) == (len(tokenizer), tokenizer.all_special_ids)
    state = again.backend_tokenizer.pre_tokenizer.__getstate__()
    assert state.count(b'"Split"') == 1


def test_a_tokenizer_handed_to_the_extractor_reads_spelled_words_as_text(bert: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    from probes.corpora.types import Sentence
    from probes.extraction.extractor import AttentionExtractor

    tokenizer = AutoTokenizer.from_pretrained(bert)  # not through load_tokenizer
    words = ["the", "[SEP]", "[MASK]", "[CLS]", "dog"]
    specials = {tokenizer.sep_token_id, tokenizer.mask_token_id, tokenizer.cls_token_id}
    encoded = tokenizer(words, is_split_into_words=True)
    assert {i for i, w in zip(encoded["input_ids"], encoded.word_ids()) if w is not None} & specials
    extractor = AttentionExtractor(AutoModel.from_pretrained(bert), tokenizer, device="cpu", progress=False)
    encoded = extractor.tokenizer(words, is_split_into_words=True)
    assert not {i for i, w in zip(encoded["input_ids"], encoded.word_ids()) if w is not None} & specials
    sentence = Sentence(sent_id="s1", words=tuple(words), heads=(0, 1, 1, 1, 1), relations=("root",) + ("dep",) * 4)
    (_, attention), = list(extractor.iter_attention([sentence]))
    assert attention.is_special.sum() == 2 and attention.n_words == len(words)
