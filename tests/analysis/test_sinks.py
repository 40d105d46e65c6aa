"""Attention sinks (probes.analysis.sinks): hand-built maps, a numpy reference, merging, and the atlas's table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from probes.analysis.sinks import AttentionSinks, SinkResult, sink_heads, sink_rate, token_share
from probes.errors import ConfigError
from probes.extraction.attention import TokenAttention, WordAttention
from probes.results import equal, load

UNIFORM = 0.25  # T = 4


def hand_maps() -> np.ndarray:
    """``(2, 3, 4, 4)``: heads 1-1 and 2-3 (1-based) put half of every row on token 0, head 2-1 half of rows 0-1
    and a quarter of rows 2-3 (mean 0.375), the rest are uniform (0.25 on every token)."""
    maps = np.full((2, 3, 4, 4), UNIFORM)
    for layer, head in ((0, 0), (1, 2)):
        maps[layer, head] = [[0.5, 0.5 / 3, 0.5 / 3, 0.5 / 3]] * 4
    maps[1, 0] = [[0.5, 0.5, 0, 0], [0.5, 0, 0.5, 0], [0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]]
    return maps


def test_sink_rate_of_hand_built_maps() -> None:
    maps = hand_maps()
    sinks, share = sink_heads(maps)
    assert sinks.tolist() == [[True, False, False], [True, False, True]]
    assert share[0, 0] == 0.5 and share[1, 0] == 0.375 and share[0, 1] == UNIFORM
    assert sink_rate(maps) == 3 / 6
    assert sink_rate(maps, eps=0.4) == 2 / 6  # 0.375 is not above 0.4
    assert sink_rate(maps, eps=UNIFORM) == 3 / 6  # strictly above: uniform heads at exactly 0.25 are not sinks
    assert sink_rate(maps, token=1, eps=0.4) == 0.0


def test_token_share_is_the_mean_over_query_rows() -> None:
    rng = np.random.default_rng(0)
    maps = rng.random((2, 3, 5, 5))
    maps = np.tril(maps)
    maps /= maps.sum(axis=-1, keepdims=True)  # causal, rows sum to 1
    np.testing.assert_allclose(token_share(maps, token=2), maps[..., :, 2].mean(axis=-1), rtol=1e-12)
    # causal: Gu et al. divide by the T - k rows that can see token k (rows 2, 3, 4 here)
    np.testing.assert_allclose(token_share(maps, token=2, causal=True), maps[..., 2:, 2].sum(axis=-1) / 3, rtol=1e-12)
    np.testing.assert_allclose(token_share(maps, causal=True), token_share(maps), rtol=1e-15)  # the same for k = 0
    with pytest.raises(ConfigError, match=r"token must be a position in 0..4, found 5"):
        sink_rate(maps, token=5)
    with pytest.raises(ConfigError, match=r"\(layers, heads, T, T\)"):
        sink_rate(maps[0])


def pair(rng: np.random.Generator, n: int, *, start: int, end: int, tokens: bool = True) -> tuple[None, WordAttention]:
    """A random input of ``n`` tokens (``start`` leading and ``end`` trailing specials), about half the heads
    sinks of token 0, as the ``(item, WordAttention)`` pair the atlas's pass gives."""
    maps = rng.random((2, 3, n, n)) ** 2
    maps[..., 0] += rng.random((2, 3, 1)) * n * (rng.random((2, 3, 1)) < 0.5)
    maps /= maps.sum(axis=-1, keepdims=True)
    position = np.arange(n)
    first, last = position < start, position >= n - end
    word_of = np.where(first | last, -1, position - start)
    token_maps = TokenAttention(maps.astype(np.float32), tuple(f"t{i}" for i in range(n)), word_of, first, last)
    return None, WordAttention(maps.astype(np.float32), first | last, (0, 1), (0, 1, 2),
                               tokens=token_maps if tokens else None)


def corpus() -> list[tuple[None, WordAttention]]:
    rng = np.random.default_rng(1)
    pairs = [pair(rng, n, start=s, end=e) for n, s, e in ((6, 1, 1), (9, 1, 2), (5, 0, 0), (7, 2, 1), (4, 1, 0))]
    return [*pairs, pair(rng, 5, start=1, end=1, tokens=False), *[pair(rng, 8, start=1, end=1) for _ in range(4)]]


def reference(pairs: list[tuple[None, WordAttention]], eps: float = 0.3) -> dict[str, object]:
    """The per-head means by plain numpy, input by input."""
    first, cls, sep, sinks = [], [], [], []
    for _, attention in pairs:
        tokens = attention.tokens
        if tokens is None:
            continue
        maps = tokens.weights.astype(np.float64)
        share = maps[..., :, 0].mean(axis=-1)  # (L, H) mean over query rows
        first.append(share)
        sinks.append(share > eps)
        if tokens.start_special.any():
            cls.append(maps[..., tokens.start_special].sum(axis=-1).mean(axis=-1))
        if tokens.end_special.any():
            sep.append(maps[..., tokens.end_special].sum(axis=-1).mean(axis=-1))
    return {"to_first": np.mean(first, axis=0), "to_cls": np.mean(cls, axis=0), "to_sep": np.mean(sep, axis=0),
            "sink_share": np.mean(sinks, axis=0), "n": (len(first), len(cls), len(sep))}


def feed(pairs: list[tuple[None, WordAttention]], analysis: AttentionSinks | None = None) -> AttentionSinks:
    analysis = AttentionSinks() if analysis is None else analysis
    for item, attention in pairs:
        analysis.update(item, attention)
    return analysis


def test_accumulator_equals_a_numpy_reference() -> None:
    pairs = corpus()
    result = feed(pairs).compute()
    ref = reference(pairs)
    for name in ("to_first", "to_cls", "to_sep", "sink_share"):
        np.testing.assert_allclose(getattr(result, name), ref[name], rtol=1e-8, atol=1e-9, err_msg=name)
    assert (result.n_inputs, result.n_start, result.n_end) == ref["n"] == (9, 8, 7)
    assert result.n_without_tokens == 1
    assert 0 < result.sink_rate < 1 and result.sink_rate == pytest.approx(float(np.mean(ref["sink_share"])))
    table = result.to_pandas()
    assert table["head_name"].tolist()[:4] == ["1-1", "1-2", "1-3", "2-1"]  # 1-based
    per_layer = result.per_layer()
    assert per_layer["layer"].tolist() == [1, 2]
    np.testing.assert_allclose(per_layer["sink_rate"], ref["sink_share"].mean(axis=1), rtol=1e-12)


def test_merge_of_two_halves_equals_one_pass(tmp_path: Path) -> None:
    pairs = corpus()
    whole = feed(pairs).compute()
    a, b = feed(pairs[:4]), feed(pairs[4:])
    a.merge(b)
    assert equal(a.compute(), whole)  # exact: the sums are fixed point
    empty = AttentionSinks()
    empty.merge(a)
    assert equal(empty.compute(), whole)
    with pytest.raises(ConfigError, match="eps"):
        AttentionSinks().merge(AttentionSinks(eps=0.5))
    assert equal(load(whole.save(tmp_path / "sinks")), whole)


def test_a_decoder_without_end_specials_has_an_empty_sep_mean() -> None:
    rng = np.random.default_rng(2)
    result = feed([pair(rng, 6, start=0, end=0), pair(rng, 7, start=0, end=0)]).compute()
    assert np.isnan(result.to_sep).all() and np.isnan(result.to_cls).all() and result.n_end == 0
    assert not np.isnan(result.to_first).any()
    nothing = AttentionSinks().compute()
    assert isinstance(nothing, SinkResult) and nothing.n_inputs == 0 and np.isnan(nothing.sink_rate)


# ----------------------------------------------------------------------------- the atlas
@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny BERT with head 1-1 made a sink of [CLS]: position 0's embedding gets a large part along ``w`` (the
    first 8 dimensions, head 1's), and the head's query is the constant ``4 w`` against keys equal to the input, so
    every row's score is largest at position 0. The other heads of layer 1 attend uniformly (query 0)."""
    import torch
    from transformers import AutoModel

    from tests.tiny_models import build

    folder = build("bert", tmp_path_factory.mktemp("bert"))
    model = AutoModel.from_pretrained(folder)
    with torch.no_grad():
        w = torch.zeros(model.config.hidden_size)
        w[:8] = torch.tensor([1.0, -1.0] * 4)
        model.embeddings.position_embeddings.weight[0] += 50 * w
        attention = model.encoder.layer[0].attention.self
        attention.query.weight.zero_()
        attention.query.bias.copy_(4 * w)
        attention.key.weight.copy_(torch.eye(model.config.hidden_size))
        attention.key.bias.zero_()
    model.save_pretrained(folder)
    return folder


def test_the_atlas_reports_the_sinks_of_its_maps(tiny_bert: Path, tmp_path: Path) -> None:
    from probes.runs.atlas import atlas
    from probes.runs.inputs import load_extractor, read_sentences

    result = atlas(tiny_bert, "sample:dev", limit=12, js_sentences=4, clusters=2, grad_sentences=0,
                   head_type_sequences=0)
    assert result.sinks is not None
    _, sentences = read_sentences("sample:dev", 12)
    extractor = load_extractor(tiny_bert, keep_tokens=True, progress=False)
    alone = feed(list(extractor.iter_attention(sentences))).compute()  # the same maps, fed to the accumulator
    assert alone.n_inputs == 12 and alone.n_start == alone.n_end == 12
    assert alone.sink_share[0, 0] == 1.0 and alone.sink_rate == 1 / 8  # head 1-1 alone, in every input
    assert equal(result.sinks, alone)
    table = result.heads_table()
    np.testing.assert_array_equal(table["sink_share"], alone.sink_share.ravel())
    np.testing.assert_array_equal(table["to_first"], alone.to_first.ravel())
    # BERT's first token is [CLS], its only start special: both means are the surface statistics' to_cls
    np.testing.assert_allclose(table["to_first"], table["to_cls"], rtol=1e-6)
    text = result.write(tmp_path / "out", figures=False)["atlas.md"].read_text()
    section = text.split("## Attention sinks (eps = 0.3)")[1]
    rows = alone.per_layer().to_dict("records")
    for row in rows:  # the table's numbers are the accumulator's, in percent
        cells = [str(row["layer"])] + [f"{100 * row[k]:.1f}" for k in ("to_first", "to_cls", "to_sep", "sink_rate")]
        assert "| " + " | ".join(cells) + " |" in section, cells
