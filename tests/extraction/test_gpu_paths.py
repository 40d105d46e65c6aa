"""GPU paths on any machine: device maps (accelerate), half-precision models, float32 pooling.

Device maps are exercised on the CPU: ``{"": "cpu"}``, a dict naming each layer, and a dict that
offloads a layer to disk (accelerate then dispatches the model with hooks, as it does over several
GPUs). Tests that need CUDA are skipped without it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from probes.errors import ConfigError
from probes.extraction import loading
from probes.extraction.align import pool_batch
from probes.extraction.extractor import AttentionExtractor
from tests.tiny_models import build

HAS_ACCELERATE = importlib.util.find_spec("accelerate") is not None
needs_accelerate = pytest.mark.skipif(not HAS_ACCELERATE,
                                      reason="accelerate is not installed (pip install 'probes-attention[gpu]')")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())")

SENTENCES = [s.split() for s in ("the quick brown fox jumps over the lazy dog",
                                 "a cat sat on the mat and the dog barked at it",
                                 "unbelievable results , she did know", "x")]
#: bfloat16 keeps 8 significant bits: probabilities near 1 are 2^-8 apart and the model's own arithmetic
#: (logits, softmax) is rounded to that grid, so word-level values (sums of a few token probabilities)
#: may differ from float32 by about one such step; 2^-7 allows two (measured: at most 0.0014 on the tiny
#: BERT, GPT-2 and Llama). float16 keeps 11 bits: 2^-10 likewise (measured: at most 0.00025).
TOLERANCE = {"bfloat16": 2.0**-7, "float16": 2.0**-10}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {family: build(family, root / family) for family in ("bert", "llama")}


def weights(extractor: AttentionExtractor) -> list[np.ndarray]:
    """Word-level attention of :data:`SENTENCES`, in order: (L, H, n, n) each."""
    return [wa.weights for _, wa in extractor.iter_words(SENTENCES, words=lambda words: words)]


def plain(folder: Path, **options: Any) -> list[np.ndarray]:
    return weights(AttentionExtractor.from_pretrained(folder, progress=False, **options))


#: Device maps of the tiny BERT: one device, every module named, and layer 2 offloaded to disk (dispatched
#: with accelerate's hooks: the layer's weights are loaded onto the CPU only while it runs).
BERT_MAPS = {
    "one device": {"": "cpu"},
    "per layer": {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "cpu", "pooler": "cpu"},
    "layer on disk": {"embeddings": "cpu", "encoder.layer.0": "cpu", "encoder.layer.1": "disk", "pooler": "cpu"},
}


@needs_accelerate
@pytest.mark.parametrize("name", list(BERT_MAPS))
def test_device_map_equals_plain_path(models: dict[str, Path], name: str, tmp_path: Path) -> None:
    device_map = BERT_MAPS[name]
    reference = plain(models["bert"])
    extractor = AttentionExtractor.from_pretrained(models["bert"], progress=False, device_map=device_map)
    assert extractor.device == torch.device("cpu")  # inputs go to the input embeddings' device
    assert extractor.info()["device_map"] == device_map  # recorded (stores, run records)
    if name == "layer on disk":  # really dispatched: hooks, and the offloaded weights are not in memory
        assert extractor.model.hf_device_map == device_map
        assert hasattr(extractor.model.encoder.layer[1], "_hf_hook")
        assert extractor.model.encoder.layer[1].attention.self.query.weight.device.type == "meta"
    for expected, found in zip(reference, weights(extractor), strict=True):
        np.testing.assert_array_equal(found, expected)


@needs_accelerate
def test_device_map_on_a_decoder(models: dict[str, Path]) -> None:
    reference = plain(models["llama"])
    extractor = AttentionExtractor.from_pretrained(models["llama"], progress=False, device_map="auto")
    assert extractor.info()["device_map"] == "auto" and extractor.info()["device"] == "cpu"
    for expected, found in zip(reference, weights(extractor), strict=True):
        np.testing.assert_array_equal(found, expected)


@needs_accelerate
def test_device_mapped_model_is_never_moved(models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer, _ = loading.load_pretrained(models["bert"], device_map={"": "cpu"}, progress=False)
    moves: list[Any] = []
    monkeypatch.setattr(model, "to", lambda *a, **k: moves.append((a, k)) or model)
    AttentionExtractor(model, tokenizer, device="cpu", progress=False)
    assert moves == []
    plain_model, plain_tokenizer, _ = loading.load_pretrained(models["bert"], progress=False)
    monkeypatch.setattr(plain_model, "to", lambda *a, **k: moves.append((a, k)) or plain_model)
    AttentionExtractor(plain_model, plain_tokenizer, device="cpu", progress=False)
    assert moves == [((), {"device": torch.device("cpu"), "dtype": torch.float32})]  # the control: moved


@needs_accelerate
def test_device_mapped_model_in_another_dtype_is_refused(models: dict[str, Path]) -> None:
    model, tokenizer, _ = loading.load_pretrained(models["bert"], device_map={"": "cpu"}, dtype=torch.bfloat16,
                                                  progress=False)
    with pytest.raises(ConfigError, match="device map in bfloat16.*expected dtype bfloat16, found float32"):
        AttentionExtractor(model, tokenizer, progress=False)
    assert AttentionExtractor(model, tokenizer, dtype="bfloat16", progress=False).info()["dtype"] == "bfloat16"


def test_device_map_without_accelerate_names_the_extra(models: dict[str, Path],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "accelerate" else real(name, *a))
    with pytest.raises(ConfigError, match=r'needs accelerate.*pip install "probes-attention\[gpu\]"'):
        AttentionExtractor.from_pretrained(models["bert"], progress=False, device_map="auto")


def test_device_map_checks() -> None:
    if HAS_ACCELERATE:
        assert loading.check_device_map('{"": "cpu"}') == {"": "cpu"}  # --device-map as JSON text
        assert loading.check_device_map("balanced") == "balanced"
    assert loading.check_device_map(None) is None
    with pytest.raises(ConfigError, match="expected one of auto, balanced.*found 'everywhere'"):
        loading.check_device_map("everywhere")
    with pytest.raises(ConfigError, match="expected JSON"):
        loading.check_device_map("{'': 'cpu'}")
    with pytest.raises(ConfigError, match="non-empty dict of module name -> device"):
        loading.check_device_map({"": 1.5})


def test_device_with_device_map_is_refused_before_loading(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="give device or device_map, not both"):
        AttentionExtractor.from_pretrained(tmp_path / "never-read", device="cpu", device_map="auto")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_close_to_float32(models: dict[str, Path], dtype: str) -> None:
    for family in ("bert", "llama"):
        reference = plain(models[family])
        found = plain(models[family], dtype=dtype)
        for expected, got in zip(reference, found, strict=True):
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, expected, rtol=0, atol=TOLERANCE[dtype])
        assert max(np.abs(a - b).max() for a, b in zip(reference, found)) > 0  # really ran in half precision


def test_half_precision_maps_are_pooled_in_float32(models: dict[str, Path]) -> None:
    """The word-level result of a bfloat16 model is its bfloat16 token maps, cast to float32, then pooled."""
    extractor = AttentionExtractor.from_pretrained(models["bert"], dtype="bfloat16", keep_tokens=True,
                                                   progress=False)
    for words, (_, wa) in zip(SENTENCES, extractor.iter_words(SENTENCES, words=lambda w: w)):
        maps = wa.tokens.weights  # (L, H, T, T): the model's bfloat16 probabilities, as float32
        assert torch.equal(torch.from_numpy(maps).bfloat16().float(), torch.from_numpy(maps))  # bf16 values
        alignment = extractor._align([words], [None])[0]
        pooled = pool_batch([torch.from_numpy(layer)[None] for layer in maps], [alignment])[0].numpy()
        np.testing.assert_allclose(wa.weights, pooled, rtol=0, atol=1e-6)


def test_pool_batch_sums_half_precision_in_float32() -> None:
    """Pooling a bfloat16 map equals pooling its float32 copy exactly; summing in bfloat16 would not."""
    from probes.extraction.align import alignment_from_word_ids

    generator = torch.Generator().manual_seed(0)
    n_tok = 40  # [CLS] + 38 word pieces of 2 words + [SEP]
    word_ids = [None] + [0] * 19 + [1] * 19 + [None]
    alignment = alignment_from_word_ids(list(range(n_tok)), word_ids, ["a", "b"])
    attention = torch.softmax(torch.randn(1, 2, n_tok, n_tok, generator=generator), -1).bfloat16()  # (B, H, T, T)
    pooled = pool_batch([attention], [alignment])  # (1, 1, 2, 4, 4)
    assert pooled.dtype == torch.float32
    assert torch.equal(pooled, pool_batch([attention.float()], [alignment]))
    in_bf16 = attention[0, :, 1:20, 1:20].sum(-1, dtype=torch.bfloat16).float().mean(-1)  # rows of word 1
    assert not torch.allclose(in_bf16, pooled[0, 0, :, 1, 1], rtol=0, atol=1e-6)  # the control: it would differ


@needs_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_cuda_close_to_cpu(models: dict[str, Path], dtype: str) -> None:
    tolerance = TOLERANCE.get(dtype, 1e-5)  # float32: kernels differ in summation order only
    for family in ("bert", "llama"):
        reference = plain(models[family], device="cpu")
        extractor = AttentionExtractor.from_pretrained(models[family], device="cuda", dtype=dtype, progress=False)
        assert extractor.info()["device"].startswith("cuda")
        for expected, got in zip(reference, weights(extractor), strict=True):
            np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance)


@needs_cuda
@needs_accelerate
def test_cuda_device_map_auto(models: dict[str, Path]) -> None:
    reference = plain(models["llama"], device="cpu")
    extractor = AttentionExtractor.from_pretrained(models["llama"], device_map="auto", progress=False)
    assert extractor.device.type == "cuda"
    for expected, got in zip(reference, weights(extractor), strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
