"""The extractor under each attention source, on tiny models of every family: its word maps are the slow reference
pooling of the source's token maps computed by hand (weights times the norm of each head's transformed value), for
kept layers and heads, whatever path the model's attention takes (hooks, or output_attentions for DeBERTa); rows
asked for alone still get the source's full maps; the source is in the extractor's info."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.corpora.types import Sentence
from probes.errors import ConfigError
from probes.extraction.extractor import AttentionExtractor
from tests.extraction.test_align import reference_pool
from tests.tiny_models import build, perturb, tiny_families

torch = pytest.importorskip("torch")

TEXTS = ["The quick brown fox jumps over the lazy dog .", "A cat sat on the mat", "x"]
CORPUS = [Sentence(f"s{i}", tuple(t.split()), tuple(range(len(t.split()))), ("dep",) * len(t.split()))
          for i, t in enumerate(TEXTS)]


@pytest.fixture(scope="module", params=tiny_families())
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model of one family saved with every parameter perturbed (biases nonzero)."""
    from transformers import AutoModel

    path = build(request.param, tmp_path_factory.mktemp("source-models"))
    model = AutoModel.from_pretrained(path)
    perturb(model, 3)
    model.save_pretrained(path)
    return path


def _reference(extractor: AttentionExtractor, words: tuple[str, ...], layers: list[int], heads: list[int]) -> Any:
    """The norm source's word maps of one sentence by hand: weights from output_attentions, each head's values from
    the value module's output sliced by hand (GQA: the group's kv head), W_O^h sliced from the output projection,
    then the slow reference pooling."""
    from probes.extraction import families

    model = extractor.model
    enc = extractor.tokenizer(list(words), is_split_into_words=True, return_tensors="pt")
    value_sites, head_sites = families.value_sites(model), families.head_sites(model)
    outputs: dict[int, Any] = {}
    handles = [site.module.register_forward_hook(lambda m, a, o, layer=site.layer: outputs.__setitem__(layer, o))
               for site in value_sites]
    try:
        with torch.no_grad():
            out = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    maps = []
    for layer in layers:
        site, head = value_sites[layer], head_sites[layer]
        v = outputs[layer][0].double()  # (T, width)
        if site.fused is not None:
            part, parts = site.fused
            width = v.shape[-1] // parts
            v = v[:, part * width:(part + 1) * width]
        w = head.module.weight.detach().double()
        w = w if type(head.module).__name__ == "Conv1D" else w.t()  # (H*d, D)
        d, group = site.head_dim, site.n_heads // site.n_kv_heads
        alpha = out.attentions[layer][0].double()  # (H, T, T)
        per_head = []
        for h in heads:
            g = h // group
            f = v[:, g * d:(g + 1) * d] @ w[h * d:(h + 1) * d]  # (T, D)
            raw = alpha[h] * f.norm(dim=-1)[None, :]
            per_head.append(raw / raw.sum(-1, keepdim=True))
        maps.append(torch.stack(per_head))
    return reference_pool(torch.stack(maps).numpy(), enc.word_ids(), extractor.from_pool)


def test_norm_word_maps_equal_the_slow_reference_for_kept_layers_and_heads(folder: Path):
    extractor = AttentionExtractor.from_pretrained(folder, batch_size=2, source="norm", layers=[1], heads=[0, 2, 3],
                                                   progress=False, keep_tokens=True)
    assert extractor.info()["attention_source"] == "norm"
    for sentence, attention in extractor.iter_attention(CORPUS):
        expected = _reference(extractor, sentence.words, [1], [0, 2, 3])
        np.testing.assert_allclose(attention.weights, expected, rtol=1e-4, atol=1e-6)
        assert attention.tokens is not None
        np.testing.assert_allclose(attention.tokens.weights.sum(-1), 1.0, rtol=1e-5)


def test_asking_for_some_rows_still_gives_the_sources_maps(folder: Path):
    """Rows-only extraction computes weights; under another source the extractor runs full maps instead."""
    extractor = AttentionExtractor.from_pretrained(folder, batch_size=3, source="contribution", progress=False)
    weights = AttentionExtractor.from_pretrained(folder, batch_size=3, progress=False)
    rows = {s.sent_id: [0] for s in CORPUS}
    asked = list(extractor.iter_words(CORPUS, lambda s: s.words, rows=lambda s: rows[s.sent_id]))
    whole = list(extractor.iter_words(CORPUS, lambda s: s.words))
    plain = list(weights.iter_words(CORPUS, lambda s: s.words))
    for (_, a), (_, b), (_, w) in zip(asked, whole, plain):
        np.testing.assert_allclose(a.word_rows([0]), b.word_rows([0]), rtol=1e-6)
        if b.n_words > 1:  # a one-word decoder map is [[1]] under every source
            assert not np.allclose(b.weights, w.weights)  # the contribution is not the weights


def test_an_unknown_source_is_refused_before_loading():
    with pytest.raises(ConfigError, match="attention source: expected one of weights, norm"):
        AttentionExtractor.from_pretrained("/nonexistent/folder", source="norms")
