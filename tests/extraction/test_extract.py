"""AttentionExtractor on tiny local models of every tokenizer family, and on the real MiniLM."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from probes.corpora.types import Sentence
from probes.errors import ConfigError, ModelOutputError
from probes.extraction import families
from probes.extraction.extractor import AttentionExtractor
from tests.extraction.test_align import reference_pool
from tests.tiny_models import build, tiny_families

SENTENCES = [
    "The quick brown fox jumps over the lazy dog .",
    "She didn't know !",
    "In 2019 , Clark et al. looked at BERT 's attention maps .",
    "A cat sat .",
    "Tokenization splits unbelievable words into pieces : un-believ-able , again and again .",
    "Researchers study what attention heads do",
    "x",
]


def sentence(i: int, text: str) -> Sentence:
    words = tuple(text.split())
    return Sentence(f"s{i}", words, tuple(range(len(words))), ("dep",) * len(words))


CORPUS = [sentence(i, t) for i, t in enumerate(SENTENCES)]


@pytest.fixture(scope="module", params=tiny_families())
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(request.param, tmp_path_factory.mktemp("models"))


def reference_word_attention(extractor: AttentionExtractor, words: tuple[str, ...]) -> np.ndarray:
    """One sentence alone, straight through the model, pooled with the slow loop reference."""
    enc = extractor.tokenizer(list(words), is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        out = extractor.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                              output_attentions=True)
    attn = torch.stack(out.attentions, 1)[0].double().numpy()  # (L, H, T, T)
    return reference_pool(attn, enc.word_ids(), extractor.from_pool)


@pytest.mark.parametrize("from_pool", ["mean", "first", "max"])
def test_matches_reference_and_rows_sum_to_one(tiny: Path, from_pool: str) -> None:
    ex = AttentionExtractor.from_pretrained(tiny, batch_size=4, from_pool=from_pool, progress=False)
    pairs = list(ex.iter_attention(CORPUS))
    assert [s.sent_id for s, _ in pairs] == [s.sent_id for s in CORPUS]  # input order kept
    for sent, wa in pairs:
        assert wa.n_words == len(sent.words)
        assert wa.weights.shape == (2, 4, len(wa.is_special), len(wa.is_special))
        np.testing.assert_allclose(wa.weights.sum(-1), 1.0, atol=1e-3)
        np.testing.assert_allclose(wa.weights, reference_word_attention(ex, sent.words), atol=1e-5)


def test_specials_flagged_per_family(tiny: Path) -> None:
    ex = AttentionExtractor.from_pretrained(tiny, progress=False)
    _, wa = next(ex.iter_attention(CORPUS[:1]))
    mask = ex.tokenizer(list(CORPUS[0].words), is_split_into_words=True,
                        return_special_tokens_mask=True)["special_tokens_mask"]  # the tokenizer's own account
    lead, trail = mask.index(0), mask[::-1].index(0)
    by_hand = {"bert": (1, 1), "gpt2": (0, 0), "llama": (1, 0)}  # [CLS] .. [SEP]; nothing; BOS ..
    assert (lead, trail) == by_hand.get(tiny.name, (lead, trail))
    n_words = len(CORPUS[0].words)
    assert wa.is_special.tolist() == [True] * lead + [False] * n_words + [True] * trail
    if families.FAMILIES[tiny.name].decoder:  # causal: nothing above the diagonal
        assert not np.triu(wa.weights, 1).any()


def test_batched_equals_unbatched(tiny: Path) -> None:
    batched = AttentionExtractor.from_pretrained(tiny, batch_size=8, progress=False)
    single = AttentionExtractor.from_pretrained(tiny, batch_size=1, progress=False)
    corpus = CORPUS * 3
    for (s1, a), (s2, b) in zip(batched.iter_attention(corpus), single.iter_attention(corpus), strict=True):
        assert s1 is s2
        np.testing.assert_allclose(a.weights, b.weights, atol=1e-5, rtol=0)
        assert (a.is_special == b.is_special).all()


def test_layers_and_heads_restricted(tmp_path: Path) -> None:
    folder = build("llama", tmp_path)
    full = AttentionExtractor.from_pretrained(folder, progress=False)
    part = AttentionExtractor.from_pretrained(folder, layers=[1], heads=[3, 0], progress=False)
    for (_, a), (_, b) in zip(full.iter_attention(CORPUS), part.iter_attention(CORPUS), strict=True):
        assert b.layers == (1,) and b.heads == (3, 0)
        np.testing.assert_allclose(b.weights, a.weights[[1]][:, [3, 0]], atol=1e-6)
    with pytest.raises(ConfigError, match=r"layers: expected distinct 0-based indices in 0..1 \(the model has 2"):
        AttentionExtractor.from_pretrained(folder, layers=[2], progress=False)


def test_iter_words_any_item(tmp_path: Path) -> None:
    ex = AttentionExtractor.from_pretrained(build("bert", tmp_path), progress=False)
    items = [("doc-a", ["the", "fox"]), ("doc-b", ["a", "cat", "sat", "on", "the", "mat"])]
    out = list(ex.iter_words(items, words=lambda item: item[1]))
    assert [item[0] for item, _ in out] == ["doc-a", "doc-b"]
    assert [wa.n_words for _, wa in out] == [2, 6]


def test_count_tokens_and_info(tmp_path: Path) -> None:
    folder = build("bert", tmp_path)
    ex = AttentionExtractor.from_pretrained(folder, progress=False)
    assert ex.count_tokens(["the", "unbelievable"]) == 6  # [CLS] the un ##believ ##able [SEP]
    assert ex.max_tokens == 64 and ex.n_layers == 2 and ex.n_heads == 4
    info = ex.info()
    assert info["model"] == str(folder) and info["attn_implementation"] == "eager"
    assert len(info["weights_sha256"]) == 64 and info["from_pool"] == "mean"


def test_sdpa_model_is_switched_to_eager(tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    folder = build("bert", tmp_path)
    model = AutoModel.from_pretrained(folder, attn_implementation="sdpa")
    ex = AttentionExtractor(model, AutoTokenizer.from_pretrained(folder), progress=False)
    _, wa = next(ex.iter_attention(CORPUS[:1]))
    np.testing.assert_allclose(wa.weights.sum(-1), 1.0, atol=1e-5)


def test_missing_attentions_raise_model_output_error(tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    folder = build("bert", tmp_path)
    model = AutoModel.from_pretrained(folder, attn_implementation="eager")
    model.forward = lambda *a, **k: SimpleNamespace(attentions=None)  # what SDPA gives
    ex = AttentionExtractor(model, AutoTokenizer.from_pretrained(folder), progress=False)
    with pytest.raises(ModelOutputError, match="attn_implementation='eager'"):
        list(ex.iter_attention(CORPUS[:1]))


def test_bad_options(tmp_path: Path) -> None:
    folder = build("bert", tmp_path)
    for kwargs, msg in [({"dtype": "float64"}, "dtype must be one of"), ({"on_long": "drop"}, "on_long must"),
                        ({"from_pool": "sum"}, "from_pool must"), ({"max_length": 1000}, "over the model's")]:
        with pytest.raises(ConfigError, match=msg):
            AttentionExtractor.from_pretrained(folder, progress=False, **kwargs)


# ---------------------------------------------------------------- long inputs
LONG = sentence(99, " ".join(["the quick brown fox jumps over the lazy dog ."] * 3))  # 30 words


def test_on_long_skip_counts_and_reports(tmp_path: Path) -> None:
    ex = AttentionExtractor.from_pretrained(build("bert", tmp_path), max_length=20, progress=False)
    out = list(ex.iter_attention([CORPUS[3], LONG, CORPUS[1]]))
    assert [s.sent_id for s, _ in out] == ["s3", "s1"]
    assert ex.report.skipped == ["s99"] and ex.report.n_items == 3 and ex.report.n_yielded == 2
    assert "1 skipped" in ex.report.summary() and "s99" in ex.report.summary()


def test_on_long_truncate_keeps_longest_prefix(tmp_path: Path) -> None:
    ex = AttentionExtractor.from_pretrained(build("bert", tmp_path), max_length=20, on_long="truncate",
                                            progress=False)
    [(_, wa)] = list(ex.iter_attention([LONG]))
    # fox jumps -> "jump ##s": 11 tokens per 10 words; 18 token budget -> 17 words (18 tokens).
    kept = wa.n_words
    assert ex.count_tokens(LONG.words[:kept]) <= 20 < ex.count_tokens(LONG.words[: kept + 1])
    assert wa.meta["truncated"] == len(LONG.words) - kept and ex.report.truncated == ["s99"]
    np.testing.assert_allclose(wa.weights, reference_word_attention(ex, LONG.words[:kept]), atol=1e-5)


def test_on_long_window_rule(tmp_path: Path) -> None:
    ex = AttentionExtractor.from_pretrained(build("bert", tmp_path), max_length=14, on_long="window",
                                            progress=False)
    [(_, wa)] = list(ex.iter_attention([LONG]))
    n = len(LONG.words)
    assert wa.n_words == n and wa.is_special.tolist() == [True] + [False] * n + [True]
    np.testing.assert_allclose(wa.weights.sum(-1), 1.0, atol=1e-5)
    windows = wa.meta["windows"]
    assert windows[0][0] == 0 and windows[-1][1] == n and ex.report.windowed == ["s99"]
    assert all(b[0] < a[1] for a, b in zip(windows, windows[1:]))  # overlapping
    for word in range(n):  # the row comes from the window where the word is most central
        dist = [abs(word - (s + e - 1) / 2) if s <= word < e else np.inf for s, e in windows]
        s, e = windows[int(np.argmin(dist))]
        ref = reference_word_attention(ex, LONG.words[s:e])  # (L, H, e-s+2, e-s+2)
        row = wa.weights[:, :, 1 + word]
        np.testing.assert_allclose(row[:, :, 1 + s : 1 + e], ref[:, :, 1 + word - s, 1:-1], atol=1e-5)
        np.testing.assert_allclose(row[:, :, [0, -1]], ref[:, :, 1 + word - s][:, :, [0, -1]], atol=1e-5)
        outside = np.r_[1 : 1 + s, 1 + e : 1 + n]
        assert not row[:, :, outside].any()


# ---------------------------------------------------------------- the real model
@pytest.mark.slow
def test_minilm_reference_rows_and_batching(minilm_path: Path, ewt: Path) -> None:
    import conllu

    sents = []
    with open(ewt / "en_ewt-ud-dev.conllu", encoding="utf-8") as handle:
        for tl in conllu.parse_incr(handle):
            toks = [t for t in tl if isinstance(t["id"], int)]
            sents.append(Sentence(tl.metadata["sent_id"], tuple(t["form"] for t in toks),
                                  tuple(t["head"] for t in toks), tuple(t["deprel"] for t in toks)))
            if len(sents) == 48:
                break
    batched = AttentionExtractor.from_pretrained(minilm_path, batch_size=16, progress=False)
    single = AttentionExtractor.from_pretrained(minilm_path, batch_size=1, progress=False)
    assert (batched.n_layers, batched.n_heads, batched.max_tokens) == (6, 12, 512)
    for i, ((s, a), (_, b)) in enumerate(zip(batched.iter_attention(sents), single.iter_attention(sents),
                                             strict=True)):
        assert a.n_words == len(s.words) and a.is_special[[0, -1]].all()
        np.testing.assert_allclose(a.weights.sum(-1), 1.0, atol=1e-3)
        np.testing.assert_allclose(a.weights, b.weights, atol=1e-5, rtol=0)
        if i < 6:
            np.testing.assert_allclose(a.weights, reference_word_attention(single, s.words), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["ewt", "gum"])
def test_minilm_aligns_every_word_of_dev(corpus: str, minilm_path: Path, request: pytest.FixtureRequest) -> None:
    """Every word of every EWT dev / GUM dev sentence aligned, none skipped at 512 tokens."""
    corpora = pytest.importorskip("probes.corpora")
    folder = request.getfixturevalue(corpus)
    path = folder / f"en_{corpus}-ud-dev.conllu"
    ex = AttentionExtractor.from_pretrained(minilm_path, batch_size=64, layers=[0], heads=[0], progress=False)
    n = 0
    for sent, wa in ex.iter_attention(corpora.read_treebank(path)):
        assert wa.n_words == len(sent.words)
        n += 1
    assert n > 1000 and ex.report.n_items == n and ex.report.skipped == [] and ex.report.truncated == []


def test_keep_tokens_gives_the_model_token_maps(tiny: Path) -> None:
    """keep_tokens: each whole input carries the model's own token maps, token strings, words and specials;
    pooling those maps by the slow reference gives the word maps the extractor yields."""
    ex = AttentionExtractor.from_pretrained(tiny, batch_size=3, progress=False, heads=[1, 3], keep_tokens=True)
    decoder = ex._is_decoder
    for sent, wa in ex.iter_attention(CORPUS):
        tok = wa.tokens
        assert tok is not None
        enc = ex.tokenizer(list(sent.words), is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            out = ex.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], output_attentions=True)
        expected = torch.stack(out.attentions, 1)[0][:, [1, 3]].numpy()  # (L, H', T, T)
        np.testing.assert_allclose(tok.weights, expected, atol=1e-5)
        assert tok.tokens == tuple(ex.tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist()))
        word_ids = [-1 if w is None else w for w in enc.word_ids()]
        assert tok.word_of.tolist() == word_ids
        specials = np.array(word_ids) < 0
        first = int(np.argmax(~specials))
        assert tok.start_special.tolist() == [bool(s and i < first) for i, s in enumerate(specials)]
        assert tok.end_special.tolist() == [bool(s and i > first) for i, s in enumerate(specials)]
        if decoder:
            assert not tok.end_special.any()
        pooled = reference_pool(tok.weights.astype(np.float64), enc.word_ids(), ex.from_pool)
        np.testing.assert_allclose(wa.weights, pooled, atol=1e-5)


def test_keep_tokens_off_by_default_and_none_for_windows(tmp_path: Path) -> None:
    path = build("bert", tmp_path)
    assert all(wa.tokens is None for _, wa in AttentionExtractor.from_pretrained(
        path, progress=False).iter_attention(CORPUS[:2]))
    ex = AttentionExtractor.from_pretrained(path, progress=False, keep_tokens=True, max_length=8, on_long="window")
    pairs = list(ex.iter_attention(CORPUS))
    windowed = set(ex.report.windowed)
    assert windowed
    assert all((wa.tokens is None) == (s.sent_id in windowed) for s, wa in pairs)


def test_punctuation_tokens_of_every_tokenizer_family() -> None:
    """Clark's "." and "," tokens, whatever word-start mark the tokenizer adds (WordPiece none, byte-level BPE "Ġ",
    SentencePiece "▁"); specials never count."""
    from probes.extraction.attention import TokenAttention, is_punct_token

    assert [is_punct_token(t) for t in (".", ",", "Ġ.", "▁,", "Ġ", "..", "##.", "Ġ;", "ĠĠ.")] == \
        [True, True, True, True, False, False, False, False, False]
    tokens = ("<s>", "Ġa", "Ġ.", ",", "</s>")
    special = np.array([True, False, False, False, True])
    maps = np.zeros((1, 1, 5, 5), np.float32)
    attention = TokenAttention(maps, tokens, np.array([-1, 0, 1, 2, -1]), special & (np.arange(5) == 0),
                               special & (np.arange(5) == 4))
    assert attention.punct.tolist() == [False, False, True, True, False]
