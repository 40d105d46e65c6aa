"""Head types (probes.analysis.head_types): TransformerLens' head-detector scores, on hand-built maps and on a
tiny GPT-2 whose weights are set by hand so that layer 1 holds a previous-token head, a duplicate-token head,
and layer 2 an induction head built on the previous-token head (an exact two-layer circuit)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from probes.analysis.head_types import (
    BIDIRECTIONAL_TYPES,
    CAUSAL_TYPES,
    HeadTypeScores,
    duplicate_bidirectional_pattern,
    duplicate_token_pattern,
    head_types,
    ideal_map,
    induction_bidirectional_pattern,
    induction_pattern,
    next_token_pattern,
    ordinary_ids,
    previous_token_pattern,
    repeated_sequences,
    score_maps,
    similarity_score,
    special_ids,
)
from probes.errors import ConfigError
from probes.extraction.extractor import AttentionExtractor

# ----------------------------------------------------------------------------- a literal TransformerLens copy


def _tl_duplicate(tokens: torch.Tensor) -> torch.Tensor:
    """get_duplicate_token_head_detection_pattern, line by line (tokens: (1, pos))."""
    token_pattern = tokens.repeat(tokens.shape[-1], 1).numpy()
    eq_mask = np.equal(token_pattern, token_pattern.T).astype(int)
    np.fill_diagonal(eq_mask, 0)
    return torch.tril(torch.as_tensor(eq_mask.astype(int)).float())


def _tl_patterns(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    n = tokens.shape[-1]
    previous = torch.zeros(n, n)
    previous[1:, :-1] = torch.eye(n - 1)
    duplicate = _tl_duplicate(tokens)
    shifted = torch.roll(duplicate, shifts=1, dims=1)
    induction = torch.cat((torch.zeros(n, 1), shifted[:, 1:]), dim=1)
    return {"previous_token": torch.tril(previous), "duplicate_token": duplicate, "induction": torch.tril(induction)}


def _tl_score(attention: torch.Tensor, detection: torch.Tensor, exclude_bos: bool, exclude_current: bool) -> float:
    """compute_head_attention_similarity_score with error_measure='mul', line by line."""
    attention = attention.clone()
    if exclude_bos:
        attention[:, 0] = 0
    if exclude_current:
        attention.fill_diagonal_(0)
    score = attention * detection
    return (score.sum() / attention.sum()).item()


def _causal_softmax(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    n = shape[-1]
    logits = rng.normal(size=shape) * 2
    logits = np.where(np.tril(np.ones((n, n), dtype=bool)), logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


@pytest.mark.parametrize("exclude_bos", [False, True])
@pytest.mark.parametrize("exclude_current", [False, True])
def test_scores_match_a_literal_transformer_lens_copy_on_random_maps(exclude_bos: bool, exclude_current: bool) -> None:
    rng = np.random.default_rng(7)
    functions = {"previous_token": previous_token_pattern, "duplicate_token": duplicate_token_pattern,
                 "induction": induction_pattern}
    for trial in range(5):
        ids = np.concatenate([[0], rng.integers(1, 6, size=13)])  # few ids: many copies of each
        maps = _causal_softmax(rng, (2, 3, 14, 14)).astype(np.float32)
        patterns = _tl_patterns(torch.as_tensor(ids)[None])
        for name, pattern in patterns.items():
            np.testing.assert_array_equal(functions[name](ids), pattern.numpy())
            ours = similarity_score(maps, functions[name](ids), exclude_bos=exclude_bos,
                                    exclude_current_token=exclude_current)
            theirs = [[_tl_score(torch.as_tensor(maps[a, b]), pattern, exclude_bos, exclude_current)
                       for b in range(3)] for a in range(2)]
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=f"{name} trial {trial}")


def test_scores_match_transformer_lens_itself_when_installed() -> None:
    detector = pytest.importorskip("transformer_lens.head_detector",
                                   reason="transformer_lens is not installed (pip install transformer-lens)")
    rng = np.random.default_rng(3)
    ids = np.concatenate([[0], rng.integers(1, 5, size=9)])
    tokens = torch.as_tensor(ids)[None]
    attention = torch.as_tensor(_causal_softmax(rng, (10, 10)), dtype=torch.float32)
    for name, ours in (("previous_token", previous_token_pattern), ("duplicate_token", duplicate_token_pattern),
                       ("induction", induction_pattern)):
        pattern = getattr(detector, f"get_{name}_head_detection_pattern")(tokens)
        np.testing.assert_array_equal(ours(ids), pattern.numpy())
        for bos, current in ((False, False), (True, True)):
            expected = detector.compute_head_attention_similarity_score(
                attention.clone(), pattern, exclude_bos=bos, exclude_current_token=current, error_measure="mul")
            assert similarity_score(attention.numpy(), ours(ids), exclude_bos=bos,
                                    exclude_current_token=current) == pytest.approx(expected, abs=1e-6)


# ----------------------------------------------------------------------------- hand-built maps


def test_patterns_by_hand() -> None:
    ids = [9, 1, 2, 1, 2]  # BOS, then "1 2" twice
    assert previous_token_pattern(ids)[1:, :-1].trace() == 4 and previous_token_pattern(ids).sum() == 4
    dup = duplicate_token_pattern(ids)
    assert {tuple(c) for c in np.argwhere(dup)} == {(3, 1), (4, 2)}
    assert {tuple(c) for c in np.argwhere(induction_pattern(ids))} == {(3, 2), (4, 3)}  # the token after the copy
    assert {tuple(c) for c in np.argwhere(next_token_pattern(ids))} == {(0, 1), (1, 2), (2, 3), (3, 4)}
    assert {tuple(c) for c in np.argwhere(duplicate_bidirectional_pattern(ids))} == {(3, 1), (4, 2), (1, 3), (2, 4)}
    # row 1 (first "1") looks at the token after the later "1" (position 4); row 2's later copy is last: nothing
    assert {tuple(c) for c in np.argwhere(induction_bidirectional_pattern(ids))} == {(3, 2), (4, 3), (1, 4)}


def test_scores_of_hand_built_maps() -> None:
    ids = [9, 1, 2, 1, 2]
    n = len(ids)
    half = np.eye(n)  # rows 3 and 4 split half on themselves, half on the earlier copy
    half[3] = [0, 0.5, 0, 0.5, 0]
    half[4] = [0, 0, 0.5, 0, 0.5]
    assert similarity_score(half, duplicate_token_pattern(ids)) == pytest.approx(1.0 / 5)  # (0.5 + 0.5) / 5
    # without the diagonal only rows 3 and 4 keep mass (0.5 each), all of it on the copy
    assert similarity_score(half, duplicate_token_pattern(ids), exclude_current_token=True) == pytest.approx(1.0)
    assert similarity_score(np.eye(n), duplicate_token_pattern(ids), exclude_current_token=True) != \
        similarity_score(np.eye(n), duplicate_token_pattern(ids), exclude_current_token=True)  # 0 / 0: NaN
    on_bos = np.zeros((n, n))
    on_bos[:, 0] = 0.75
    on_bos[np.arange(1, n), np.arange(0, n - 1)] += 0.25
    on_bos[0, 0] = 1.0
    # previous token: row 1's previous token is BOS (all its 1.0), rows 2-4 put 0.25 on theirs: 1.75 of 5;
    # without BOS: rows 0 and 1 are gone, rows 2-4 keep 0.25 each, all on the pattern
    assert similarity_score(on_bos, previous_token_pattern(ids)) == pytest.approx((1.0 + 3 * 0.25) / 5)
    assert similarity_score(on_bos, previous_token_pattern(ids), exclude_bos=True) == pytest.approx(1.0)
    # an ideal induction head: rows 3, 4 on their targets, the other rows on themselves: 2 of 5
    ideal = ideal_map(induction_pattern(ids))
    assert similarity_score(ideal, induction_pattern(ids)) == pytest.approx(2 / 5)


def test_score_maps_averages_over_sequences_and_skips_undefined_ones() -> None:
    ids = np.array([[9, 1, 2, 1, 2], [9, 3, 4, 3, 4]])
    first, second = np.eye(5)[None, None], np.tril(np.ones((5, 5)))[None, None]
    second = second / second.sum(-1, keepdims=True)
    scores, ceilings = score_maps([first, second], ids, ["duplicate_token"], exclude_current_token=True)
    # the identity map has nothing left without its diagonal (left out); the uniform one keeps i/(i+1) of row i,
    # of which 1/4 (row 3) and 1/5 (row 4) are on the earlier copy
    assert scores[0, 0, 0] == pytest.approx((1 / 4 + 1 / 5) / (1 / 2 + 2 / 3 + 3 / 4 + 4 / 5))
    assert ceilings[0] == pytest.approx(1.0)


def test_repeated_sequences() -> None:
    seqs = repeated_sequences(np.arange(10, 50), 3, 8, seed=1, prefix=[1], suffix=[2])
    assert seqs.shape == (3, 18) and (seqs[:, 0] == 1).all() and (seqs[:, -1] == 2).all()
    np.testing.assert_array_equal(seqs[:, 1:9], seqs[:, 9:17])
    assert all(len(set(row[1:9])) == 8 and set(row[1:9]) <= set(range(10, 50)) for row in seqs)
    np.testing.assert_array_equal(seqs, repeated_sequences(np.arange(10, 50), 3, 8, seed=1, prefix=[1], suffix=[2]))
    with pytest.raises(ConfigError, match="vocabulary that large"):
        repeated_sequences(np.arange(5), 1, 8)


# ----------------------------------------------------------------------------- a planted two-layer circuit

VOCAB = 40  # ordinary tokens w0 .. w39
TOK, POS, PREV = 0, 64, 128  # residual subspaces: token one-hot, position one-hot, previous token's identity
BETA = 4.0  # sharpness of the planted heads (logit gaps of about 50)


def _tokenizer(folder: Path, bos: bool) -> object:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "<pad>": 2, **{f"w{i}": 3 + i for i in range(VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", unk_token="<unk>", pad_token="<pad>",
                                   model_max_length=64)


def _planted_gpt2() -> object:
    """GPT-2, 2 layers x 4 heads of 64 dims: 1-1 previous token, 1-2 duplicate token, 2-1 induction; the rest
    attend uniformly (zero queries and keys); MLPs and other outputs zero, so the circuit is exact."""
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(vocab_size=3 + VOCAB, n_embd=256, n_layer=2, n_head=4, n_positions=64,
                        attn_implementation="eager")
    model = GPT2Model(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.fill_(1.0 if ".ln_" in name and name.endswith("weight") or name == "ln_f.weight" else 0.0)
        model.wte.weight[:, TOK:TOK + 3 + VOCAB] = torch.eye(3 + VOCAB)
        model.wpe.weight[:, POS:POS + 64] = torch.eye(64)
        d, hd = 256, 64
        qkv0, out0 = model.h[0].attn.c_attn.weight, model.h[0].attn.c_proj.weight  # (d, 3d), (d, d)
        for m in range(64):  # head 1-1: query = own position, key = position + 1 -> attends to i - 1
            qkv0[POS + m, m] = BETA
            if m:
                qkv0[POS + m - 1, d + m] = 1.0
        two_hot = torch.zeros(d)
        two_hot[:2] = 1.0
        sigma = float(torch.sqrt(two_hot.var(unbiased=False) + model.h[0].ln_1.eps))  # ln_1's scale
        for t in range(3 + VOCAB):  # head 1-1 copies the token it attends to into PREV (undoing ln_1's scale)
            qkv0[TOK + t, 2 * d + t] = 1.0
            out0[t, PREV + t] = sigma
        for t in range(3 + VOCAB):  # head 1-2: query and key = own token -> itself and earlier copies
            qkv0[TOK + t, hd + t] = BETA
            qkv0[TOK + t, d + hd + t] = 1.0
        qkv1 = model.h[1].attn.c_attn.weight
        for t in range(3 + VOCAB):  # head 2-1: query = own token, key = the previous token written by 1-1
            qkv1[TOK + t, t] = BETA
            qkv1[PREV + t, d + t] = 1.0
    return model


@pytest.fixture(scope="module", params=[True, False], ids=["bos", "no-bos"])
def planted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> HeadTypeScores:
    tokenizer = _tokenizer(tmp_path_factory.mktemp("tok"), bos=request.param)
    extractor = AttentionExtractor(_planted_gpt2(), tokenizer, device="cpu", progress=False, batch_size=7)
    return head_types(extractor, n_sequences=6, length=12, seed=0)


def _uniform(rows: range) -> float:
    """Score of a uniform causal head whose pattern holds one cell in each of ``rows``: sum of 1/(i+1)."""
    return sum(1.0 / (i + 1) for i in rows)


def test_planted_heads_are_found_with_hand_computed_scores(planted: HeadTypeScores) -> None:
    p = len(planted.prefix)
    length = planted.length
    n = p + 2 * length
    second = range(p + length, n)  # rows of the second copy
    assert planted.types == CAUSAL_TYPES and planted.causal  # a decoder: no bidirectional types
    prev, dup, ind = (planted.score(t) for t in CAUSAL_TYPES)
    # 1-1: every row but the first on its previous token
    assert prev[0, 0] == pytest.approx((n - 1) / n, abs=1e-4)
    assert planted.ceiling[0] == pytest.approx((n - 1) / n)
    # 1-2: rows of the second copy split between themselves and the earlier copy; the others on themselves
    assert dup[0, 1] == pytest.approx(0.5 * length / n, abs=1e-4)
    # 2-1: rows of the second copy on the token after the earlier copy; no BOS: one row (the second copy's first
    # token) also matches position 0, whose "previous token" is itself, and splits its attention
    expected = length / n if p else (length - 0.5) / n
    assert ind[1, 0] == pytest.approx(expected, abs=1e-4)
    assert planted.ceiling[2] == pytest.approx(length / n)
    # uniform heads: hand-computed (one pattern cell per row, weight 1/(i+1))
    others = np.ones((2, 4), dtype=bool)
    others[0, :2] = others[1, 0] = False
    np.testing.assert_allclose(prev[others], _uniform(range(1, n)) / n, atol=1e-5)
    np.testing.assert_allclose(ind[others], _uniform(second) / n, atol=1e-5)
    np.testing.assert_allclose(dup[others], _uniform(second) / n, atol=1e-5)
    # heads of one type score nothing on the others
    assert ind[0, 0] < 1e-4 and ind[0, 1] < 1e-4 and prev[1, 0] < 0.2
    assert planted.found("previous_token") == [(0, 0)]
    assert planted.found("induction") == [(1, 0)]
    # 1-2 gives its copies half of what an ideal head would (the other half stays on itself): at the threshold
    assert planted.relative("duplicate_token")[0, 1] == pytest.approx(0.5, abs=1e-4)
    assert planted.found("duplicate_token", share=0.4) == [(0, 1)]


def test_exclude_current_token_makes_the_duplicate_head_perfect(tmp_path: Path) -> None:
    extractor = AttentionExtractor(_planted_gpt2(), _tokenizer(tmp_path, bos=True), device="cpu", progress=False)
    scores = head_types(extractor, n_sequences=3, length=10, seed=2, exclude_current_token=True, exclude_bos=True)
    assert scores.score("duplicate_token")[0, 1] == pytest.approx(1.0, abs=1e-4)
    # 2-1: the second copy's rows keep all their mass (on the target); a first-copy row i keeps its uniform
    # 1/(i+1) on each of the i - 1 tokens that are neither BOS nor itself, and none of it is on the pattern
    kept = sum((i - 1) / (i + 1) for i in range(1, 11))
    assert scores.score("induction")[1, 0] == pytest.approx(10 / (10 + kept), abs=1e-4)
    assert "exclude_current_token=True" in scores.rule and scores.exclude_bos


def test_encoder_gets_the_bidirectional_types_and_options_are_checked(tmp_path: Path) -> None:
    from tests.tiny_models import build

    extractor = AttentionExtractor.from_pretrained(build("bert", tmp_path), device="cpu", progress=False)
    prefix, suffix = special_ids(extractor.tokenizer)
    assert len(prefix) == 1 and len(suffix) == 1  # [CLS] ... [SEP]
    assert not set(ordinary_ids(extractor.tokenizer)) & set(extractor.tokenizer.all_special_ids)
    scores = head_types(extractor, n_sequences=2, length=8)
    assert scores.types == CAUSAL_TYPES + BIDIRECTIONAL_TYPES and not scores.causal
    assert scores.scores.shape == (6, 2, 4) and np.isfinite(scores.scores).all()
    assert list(scores.to_pandas().columns[:3]) == ["layer", "head", "head_name"]
    with pytest.raises(ConfigError, match="longer than the model takes"):
        head_types(extractor, n_sequences=1, length=40)
    with pytest.raises(ConfigError, match="length must be"):
        head_types(extractor, length=1)


def test_planted_next_token_head_of_an_encoder(tmp_path: Path) -> None:
    """A BERT whose head 1-1 attends from each token to the next one (queries = own position, keys = position - 1);
    every other head has zero queries and keys (uniform over all T tokens)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from tests.tiny_models import build

    tokenizer = AutoTokenizer.from_pretrained(build("bert", tmp_path))
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=256, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
    model = BertModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.fill_(1.0 if "LayerNorm.weight" in name else 0.0)
        model.embeddings.position_embeddings.weight[:, :64] = torch.eye(64)
        query, key = model.encoder.layer[0].attention.self.query.weight, model.encoder.layer[0].attention.self.key.weight
        for m in range(64):  # Linear weights are (out, in)
            query[m, m] = BETA
            if m < 63:
                key[m, m + 1] = 1.0  # key of position j = position j - 1's one-hot: i attends to i + 1
    extractor = AttentionExtractor(model, tokenizer, device="cpu", progress=False)
    scores = head_types(extractor, n_sequences=4, length=8, seed=1)
    n = 1 + 2 * 8 + 1  # [CLS] r r [SEP]
    assert not scores.causal and scores.types == CAUSAL_TYPES + BIDIRECTIONAL_TYPES
    following = scores.score("next_token")
    assert following[0, 0] == pytest.approx((n - 1) / n, abs=1e-4)  # the last row has no next token
    np.testing.assert_allclose(following[0, 1:], (n - 1) / n**2, atol=1e-5)  # uniform: 1/n on the next token
    assert scores.found("next_token") == [(0, 0)] and scores.found("previous_token") == []
