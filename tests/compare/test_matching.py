"""Head matching between models: a permuted copy recovered exactly, a planted pair, the nulls, roles and profiles."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from probes.analysis.cross_distances import CrossDistances, word_rows
from probes.compare.head_profiles import profile_cost, profile_self_distance, role_recurrence
from probes.compare.matching import (
    HeadMatching,
    bootstrap_pairs,
    label_permutation_null,
    match_heads,
    null_model_intervals,
    random_assignment_mean,
    within_layer_distance,
)
from probes.errors import AlignmentError, ConfigError
from probes.extraction.attention import WordAttention
from probes.results import equal, load

# ---------------------------------------------------------------------------------------------- the distance

def slow_js(p: np.ndarray, q: np.ndarray) -> float:
    """Reference: JS(P, Q) = ½KL(P‖M) + ½KL(Q‖M), float64, natural log."""
    m = (p + q) / 2
    return float(0.5 * np.sum(p * np.log(p / m)) + 0.5 * np.sum(q * np.log(q / m)))


def specials_maps(rng: np.random.Generator, shape: tuple[int, int], n: int) -> WordAttention:
    """Word maps over [CLS] w1..wn [SEP] with random peaked rows (specials included, rows sum to 1)."""
    w = rng.random((*shape, n + 2, n + 2)) ** 3
    w /= w.sum(-1, keepdims=True)
    special = np.zeros(n + 2, bool)
    special[[0, -1]] = True
    return WordAttention(w.astype(np.float32), special, tuple(range(shape[0])), tuple(range(shape[1])),
                         {"truncated": 0})


def test_word_rows_drop_specials_renormalise_and_smooth() -> None:
    rng = np.random.default_rng(0)
    maps = specials_maps(rng, (1, 2), 4)
    rows = word_rows(maps, smoothing=0.01, dtype="float64")  # (2, 4, 4)
    words = maps.weights[..., 1:-1, 1:-1].astype(np.float64).reshape(2, 4, 4)
    expected = 0.99 * words / words.sum(-1, keepdims=True) + 0.01 / 4
    assert np.allclose(rows, expected) and np.allclose(rows.sum(-1), 1.0)


def test_cross_distances_match_a_slow_reference() -> None:
    rng = np.random.default_rng(1)
    sizes = [3, 5, 2]
    pairs = [(specials_maps(rng, (2, 2), n), specials_maps(rng, (1, 3), n)) for n in sizes]
    analysis = CrossDistances(dtype="float64")
    expected, rows = np.zeros((4, 3)), 0
    for k, (a, b) in enumerate(pairs):
        analysis.update(SimpleNamespace(sent_id=f"s{k}"), a, b)
        ra, rb = word_rows(a), word_rows(b)
        for i, j in itertools.product(range(4), range(3)):
            expected[i, j] += sum(slow_js(ra[i, r], rb[j, r]) for r in range(ra.shape[1]))
        rows += ra.shape[1]
    result = analysis.compute()
    assert result.n_rows == rows == sum(sizes) and result.n_items == 3
    assert np.allclose(result.sums, expected, rtol=1e-9, atol=1e-12)
    assert np.allclose(result.per_row(), expected / rows)
    assert np.allclose(result.half_sums.sum(axis=0), result.sums)


def test_identical_heads_are_at_exactly_zero_and_merge_equals_one_pass(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    maps = [specials_maps(rng, (2, 3), n) for n in (4, 6, 3, 5)]
    one = CrossDistances(keep_items=True)
    for k, m in enumerate(maps):
        one.update(SimpleNamespace(sent_id=f"s{k}"), m)  # A against itself
    whole = one.compute()
    assert np.all(np.diag(whole.sums) == 0.0) and np.all(whole.sums[~np.eye(6, dtype=bool)] > 0)
    assert np.allclose(whole.within("a"), whole.per_row())  # the within-model sums are the same divergences
    left, right = CrossDistances(keep_items=True), CrossDistances(keep_items=True)
    for k, m in enumerate(maps):
        (left if k < 2 else right).update(SimpleNamespace(sent_id=f"s{k}"), m)
    left.merge(right)
    merged = left.compute()
    assert np.allclose(merged.sums, whole.sums) and merged.item_ids == whole.item_ids
    assert equal(load(merged.save(tmp_path / "r")), merged)


def test_models_must_read_the_same_words() -> None:
    rng = np.random.default_rng(3)
    with pytest.raises(AlignmentError, match="same sentences"):
        CrossDistances().update(SimpleNamespace(sent_id="x"), specials_maps(rng, (1, 2), 3), specials_maps(rng, (1, 2), 4))
    partial = specials_maps(rng, (1, 2), 3)
    cut = WordAttention(partial.weights, partial.is_special, partial.layers, partial.heads, {"truncated": 2})
    analysis = CrossDistances()
    analysis.update(SimpleNamespace(sent_id="x"), cut, partial)
    assert analysis.compute().n_partial == 1 and analysis.compute().n_items == 0


# ---------------------------------------------------------------------------------------------- matching

def test_matching_within_and_across_layers_on_a_hand_matrix() -> None:
    # 2 layers x 2 heads each; across layers, A's 1-1 goes with B's 2-2 and A's 2-2 with B's 1-2 (cost 0)
    cost = np.array([[5, 4, 9, 0],
                     [1, 6, 9, 9],
                     [9, 9, 2, 3],
                     [9, 0, 8, 1]], dtype=float)
    within = match_heads(cost, within_layers=True, shape_a=(2, 2), shape_b=(2, 2))
    assert within.partner() == {0: 1, 1: 0, 2: 2, 3: 3} and within.mean_distance == pytest.approx((4 + 1 + 2 + 1) / 4)
    across = match_heads(cost, shape_a=(2, 2), shape_b=(2, 2))
    assert across.partner() == {0: 3, 1: 0, 2: 2, 3: 1} and across.mean_distance == pytest.approx((0 + 1 + 2 + 0) / 4)
    table = across.to_pandas()
    assert table[["layer_a", "head_a", "layer_b", "head_b"]].values.tolist()[0] == [1, 1, 2, 2]  # 1-based
    assert np.array_equal(within.to_pandas()["distance"], [4, 1, 2, 1])
    four_d = match_heads(cost.reshape(2, 2, 2, 2), within_layers=True)
    assert four_d.partner() == within.partner()


def test_within_layers_refuses_different_shapes() -> None:
    with pytest.raises(ConfigError, match=r"2 x 3 \(model A\) and 3 x 2 \(model B\)"):
        match_heads(np.zeros((6, 6)), within_layers=True, shape_a=(2, 3), shape_b=(3, 2))
    rectangular = match_heads(np.arange(12.0).reshape(3, 4))  # across layers: min(N_A, N_B) pairs
    assert rectangular.n_pairs == 3 and len(set(rectangular.head_b.tolist())) == 3


def test_random_assignment_mean_is_the_mean_over_every_assignment() -> None:
    rng = np.random.default_rng(4)
    cost = rng.random((6, 6))
    shape = (2, 3)
    means = []
    for p0, p1 in itertools.product(itertools.permutations(range(3)), repeat=2):
        cols = [p0[h] for h in range(3)] + [3 + p1[h] for h in range(3)]
        means.append(cost[np.arange(6), cols].mean())
    assert random_assignment_mean(cost, shape, shape, True) == pytest.approx(np.mean(means))
    all_perms = [cost[np.arange(6), list(p)].mean() for p in itertools.permutations(range(6))]
    assert random_assignment_mean(cost, shape, shape, False) == pytest.approx(np.mean(all_perms))


def test_label_permutation_null_is_for_within_layer_matchings() -> None:
    cost = np.full((4, 4), 1.0)
    cost[[0, 1, 2, 3], [1, 0, 3, 2]] = 0.0  # each head's partner sits in its own layer
    within = match_heads(cost, within_layers=True, shape_a=(2, 2), shape_b=(2, 2))
    low, high, means = label_permutation_null(cost, within, n_permutations=300)
    assert np.all(within.distance == 0) and np.all(high == 1.0)  # shuffled, the partner is often in another layer
    assert 0 < means.mean() < 1
    with pytest.raises(ConfigError, match="within layers only"):
        label_permutation_null(cost, match_heads(cost, shape_a=(2, 2), shape_b=(2, 2)))


def test_within_layer_distance_by_hand() -> None:
    d = np.array([[0, 1, 7, 7], [1, 0, 7, 7], [7, 7, 0, 3], [7, 7, 3, 0]], dtype=float)
    assert within_layer_distance(d, (2, 2)).tolist() == [1.0, 3.0]


# ---------------------------------------------------------------------------------------------- planted pair

LAYERS, HEADS = 2, 4
#: A's heads: a fixed relative offset each (row i puts 0.9 on word i + offset, clipped), all different.
OFFSETS = [[-1, 1, -2, 2], [0, -3, 3, 4]]
#: B's heads: (layer, head of B) -> head of A it copies; the others are unshared.
SHARED = {(0, 2): 0, (0, 0): 3, (1, 3): 1, (1, 1): 0}


def offset_rows(n: int, offset: int) -> np.ndarray:
    rows = np.full((n, n), 0.1 / n)
    rows[np.arange(n), np.clip(np.arange(n) + offset, 0, n - 1)] += 0.9
    return rows


def planted(n_sentences: int = 60, seed: int = 5) -> list[tuple[SimpleNamespace, WordAttention, WordAttention,
                                                                WordAttention]]:
    """Sentences read by A (offset heads), B (copies of some of A's heads, sharp random ones) and a null model
    (broad random maps)."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_sentences):
        n = int(rng.integers(6, 14))
        a = np.array([[offset_rows(n, o) for o in layer] for layer in OFFSETS])  # (L, H, n, n)
        b = np.empty_like(a)
        for layer, head in itertools.product(range(LAYERS), range(HEADS)):
            if (layer, head) in SHARED:
                b[layer, head] = a[layer, SHARED[(layer, head)]]
            else:  # sharp on a random word per row
                b[layer, head] = np.full((n, n), 0.1 / n)
                b[layer, head][np.arange(n), rng.integers(0, n, n)] += 0.9
        null = rng.dirichlet(np.full(n, 5.0), size=(LAYERS, HEADS, n))  # broad random rows
        maps = [WordAttention(x, np.zeros(n, bool), tuple(range(LAYERS)), tuple(range(HEADS)), {"truncated": 0})
                for x in (a, b, null)]
        out.append((SimpleNamespace(sent_id=f"s{k}"), *maps))
    return out


def test_planted_pair_shared_heads_match_and_unshared_sit_above_the_null() -> None:
    cross, null = CrossDistances(keep_items=True), CrossDistances(keep_items=True)
    for item, a, b, n in planted():
        cross.update(item, a, b)
        null.update(item, a, n)
    ab, an = cross.compute(), null.compute()
    matching = match_heads(ab.per_row(), within_layers=True, shape_a=ab.shape_a, shape_b=ab.shape_b)
    _, sums, rows = ab.unit_sums("item")
    _, null_sums, null_rows = an.unit_sums("item")
    low, high, _ = bootstrap_pairs(sums, rows, matching, n_resamples=200)
    null_low, null_high, point, _ = null_model_intervals(matching, null_sums, null_rows, an.shape_b, n_resamples=100)
    partner = matching.partner()
    shared = {layer * HEADS + head_a: layer * HEADS + head_b for (layer, head_b), head_a in SHARED.items()}
    for k, a in enumerate(matching.head_a.tolist()):
        if a in shared:
            assert partner[a] == shared[a], f"shared head {a} matched to {partner[a]}"
            assert matching.distance[k] == 0.0 and high[k] == 0.0 and matching.distance[k] < null_low[k]
        else:
            assert matching.distance[k] > null_high[k] > 0, f"unshared head {a}: {matching.distance[k]} vs {null_high[k]}"
    assert np.isfinite(point).all() and np.all(null_low <= null_high)


# ---------------------------------------------------------------------------------------------- permuted copy

def _permuted_copy(source: Path, target: Path, perms: list[np.ndarray]) -> None:
    """Save ``source``'s BERT with the heads of layer l permuted by ``perms[l]`` (copy head h = original perms[l][h])."""
    import torch
    from transformers import BertModel

    shutil.copytree(source, target)
    model = BertModel.from_pretrained(source)
    d = model.config.hidden_size // model.config.num_attention_heads
    with torch.no_grad():
        for layer, perm in zip(model.encoder.layer, perms):
            index = torch.as_tensor(np.concatenate([np.arange(p * d, (p + 1) * d) for p in perm]))
            for lin in (layer.attention.self.query, layer.attention.self.key, layer.attention.self.value):
                lin.weight.copy_(lin.weight[index])
                lin.bias.copy_(lin.bias[index])
            dense = layer.attention.output.dense
            dense.weight.copy_(dense.weight[:, index])
    model.save_pretrained(target)


@pytest.fixture(scope="module")
def permuted_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[np.ndarray]]:
    """A tiny BERT with sharpened attention (W_Q, W_K x 10, so heads differ clearly) and a copy of it whose heads
    are permuted in every layer."""
    import torch
    from transformers import BertModel

    from tests.tiny_models import build

    root = tmp_path_factory.mktemp("permuted")
    original = build("bert", root / "built")
    model = BertModel.from_pretrained(original)
    with torch.no_grad():
        for layer in model.encoder.layer:
            for lin in (layer.attention.self.query, layer.attention.self.key):
                lin.weight.mul_(10.0)
                lin.bias.mul_(10.0)
    sharp = root / "sharp"
    shutil.copytree(original, sharp)
    model.save_pretrained(sharp)
    perms = [np.array([2, 0, 3, 1]), np.array([3, 2, 1, 0])]
    _permuted_copy(sharp, root / "copy", perms)
    return sharp, root / "copy", perms


def test_the_permuted_copy_computes_the_same_function(permuted_pair) -> None:
    import torch
    from transformers import BertModel

    sharp, copy, _ = permuted_pair
    ids = torch.tensor([[2, 7, 8, 9, 10, 3]])
    with torch.no_grad():
        out = [BertModel.from_pretrained(p).eval()(ids).last_hidden_state for p in (sharp, copy)]
    assert torch.allclose(out[0], out[1], atol=1e-5)


@pytest.mark.parametrize("within_layers", [True, False], ids=["within", "across"])
def test_matching_a_permuted_copy_recovers_the_permutation(permuted_pair, within_layers: bool) -> None:
    from probes.runs.match import match_models

    sharp, copy, perms = permuted_pair
    run = match_models(sharp, copy, "sample:dev", within_layers=within_layers, limit=25, n_resamples=20)
    expected = {layer * HEADS + int(p): layer * HEADS + h for layer, perm in enumerate(perms) for h, p in enumerate(perm)}
    assert run.matching.partner() == expected
    assert np.all(run.matching.distance < 1e-6)
    distance = run.distances.per_row()
    unmatched = np.ones(distance.shape, bool)
    unmatched[run.matching.head_a, run.matching.head_b] = False
    assert distance[unmatched].min() > 1e-3  # every other pair is clearly apart
    assert run.summary["identity_share"] < 1 and run.summary["half_agreement"] == 1.0
    assert all(run.roles_a[a] == run.roles_b[b] for a, b in expected.items())  # a copy's heads keep their roles


# ---------------------------------------------------------------------------------------------- roles, profiles

def test_role_recurrence_by_hand() -> None:
    roles_a = ["to next", "broad", None, "to [CLS]", "to next"]
    roles_b = ["broad", "", "to prev", "to next", "to next"]
    matching = HeadMatching((1, 5), (1, 5), False, np.arange(5), np.array([3, 0, 1, 2, 4]),
                            np.zeros(5))
    score = role_recurrence(roles_a, roles_b, matching)
    assert score.share == pytest.approx(2 / 3) and score.found == ("broad", "to next")
    assert score.missing == ("to [CLS]",)
    # pairs: (to next, to next) yes, (broad, broad) yes, (None, "") no role, (to [CLS], to prev) no, (to next, to next)
    assert score.n_matched == 4 and score.matched_share == pytest.approx(3 / 4)
    assert np.isnan(role_recurrence([None, ""], ["x"]).share)


def test_profile_cost_by_hand() -> None:
    pandas = pytest.importorskip("pandas")
    a = pandas.DataFrame({"layer": [1, 1], "head": [1, 2], "to_cls": [0.0, 1.0], "entropy": [2.0, 2.0],
                          "to_sep": [np.nan, 0.5], "kind": ["x", "y"], "only_a": [1.0, 2.0]})
    b = pandas.DataFrame({"layer": [1, 1], "head": [1, 2], "to_cls": [1.0, 2.0], "entropy": [2.0, 2.0],
                          "to_sep": [0.1, 0.2], "kind": ["x", "y"]})
    cost = profile_cost(a, b)
    assert cost.columns == ("to_cls",)
    assert set(cost.dropped) == {"entropy", "to_sep", "kind", "only_a"}
    assert "constant" in cost.dropped["entropy"] and "missing in model B" in cost.dropped["only_a"]
    values = np.array([0.0, 1.0, 1.0, 2.0])
    z = (values - values.mean()) / values.std()
    assert np.allclose(cost.cost, np.abs(z[:2, None] - z[None, 2:]))
    half = pandas.DataFrame({"to_cls": [0.5, 1.0]})
    assert np.allclose(profile_self_distance(cost, a, half), np.abs(np.array([0.0, 1.0]) - [0.5, 1.0]) / values.std())


def test_head_matching_round_trip(tmp_path: Path) -> None:
    m = match_heads(np.array([[0.0, 1.0], [1.0, 0.2]]), distance_name="attention")
    saved = load(m.save(tmp_path / "m"))
    assert equal(saved, m) and saved.partner() == {0: 0, 1: 1}


def test_zip_streams_keeps_the_sentences_every_model_read() -> None:
    from probes.runs.match import zip_streams

    sentences = [SimpleNamespace(sent_id=f"s{k}") for k in range(6)]
    a = iter([(s, f"a{k}") for k, s in enumerate(sentences) if k != 2])  # A skipped s2
    b = iter([(s, f"b{k}") for k, s in enumerate(sentences) if k not in (4, 5)])  # B skipped s4 and s5
    zipped = list(zip_streams([a, b], sentences))  # type: ignore[list-item]
    assert [(s.sent_id, maps) for s, maps in zipped] == [("s0", ("a0", "b0")), ("s1", ("a1", "b1")),
                                                        ("s3", ("a3", "b3"))]
