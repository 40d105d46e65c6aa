"""compare() end to end on fake models with planted heads: every table, the tests, what is missing, the notes,
the per-layer and per-kind counts by hand, and the saved comparison loading back equal."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from probes.analysis.patterns import PATTERNS, PatternResult
from probes.compare import TABLES, Comparison, Unit, compare
from probes.compare.best_heads import best_head_rows
from probes.compare.kinds import head_kinds, head_masks
from probes.compare.layers import layer_profiles
from probes.errors import ConfigError
from probes.results import equal, load
from probes.runs.importance import Pruning
from tests.compare.fakes import fake_atlas
from tests.importance.cases import importance_result, pruning_result

MODELS = {"trained": {"kind": "trained", "spec": "package:x", "base": "package:x", "seed": None},
          "random": {"kind": "random-init", "spec": "random-init:package:x@1", "base": "package:x", "seed": 1}}
PLANTED = frozenset({1, 6})


@functools.cache
def units() -> tuple[Unit, ...]:
    """An atlas of each model on two data (the sample's dev and test), and a prune unit of the trained one."""
    out = []
    for model, perfect, seed in (("trained", PLANTED, 0), ("random", frozenset(), 1)):
        for data in ("dev", "test"):
            out.append(Unit("atlas", "atlas", model, data, fake_atlas((2, 4), perfect, seed=seed, split=data)))
    curves = dataclasses.replace(pruning_result(), layers=(0, 1), heads=(0, 1, 2, 3),
                                 n_pruned=np.array([0, 3, 5, 8]))  # 8 heads: the last step prunes all of them
    pruning = Pruning(model="x", curves=curves,
                      start=dataclasses.replace(importance_result(), importance=np.arange(8.0).reshape(2, 4)))
    out.append(Unit("prune-repr", "prune", "trained", "dev", pruning))
    return tuple(out)


@functools.cache
def comparison() -> Comparison:
    return compare(units(), MODELS, n_resamples=200)


def test_every_table_is_filled_and_nothing_is_missing_but_the_random_prune() -> None:
    c = comparison()
    assert len(c.best_heads) == sum(len(u.result.board.rows) for u in units() if u.kind == "atlas")
    assert [(k.model, k.data, k.specialised) for k in c.head_kinds] == [
        ("trained", "dev", 2), ("trained", "test", 2), ("random", "dev", 0), ("random", "test", 0)]
    assert len(c.spread) == 4 and len(c.histograms) == 4 and len(c.specialisation) == 4
    assert len(c.layers) == 8 and len(c.redundancy) == 1 and len(c.curves) == 1
    # per model: dev selection vs report, test selection vs report, dev vs test
    assert [(r.model, r.second) for r in c.consistency] == [
        ("trained", "sample:dev"), ("trained", "sample:test"), ("trained", "sample:test")] + [
        ("random", "sample:dev"), ("random", "sample:test"), ("random", "sample:test")]
    assert c.missing == {}
    assert c.models == MODELS


def test_the_planted_model_is_more_specialised_and_tests_are_one_family() -> None:
    c = comparison()
    q2 = [t for t in c.tests if t.question == "q2"]
    assert [t.name for t in q2] == ["specialised trained - random (dev)", "specialised trained - random (test)"]
    assert all(t.value == pytest.approx(0.25) for t in q2)
    assert {t.question for t in c.tests} == {"q1", "q2", "q4"}  # q3 is descriptive: no test can reach 0.05
    raw = np.array([t.p_value for t in c.tests])
    m = np.isfinite(raw).sum()
    smallest = int(np.nanargmin(raw))
    assert c.tests[smallest].p_adjusted == pytest.approx(min(1.0, m * raw[smallest]))  # Holm's first step
    assert all(t.significant == (t.p_adjusted < 0.05) for t in c.tests)


def test_layers_and_kinds_by_hand_on_planted_patterns() -> None:
    atlas = units()[0].result
    counts = np.zeros((2, 4, len(PATTERNS)), dtype=np.int64)
    counts[0, :, PATTERNS.index("vertical")] = 5  # layer 1: all vertical
    counts[1, :3, PATTERNS.index("block")] = 5  # layer 2: three block, one diagonal
    counts[1, 3, PATTERNS.index("diagonal")] = 5
    atlas = dataclasses.replace(atlas, patterns=PatternResult((0, 1), (0, 1, 2, 3), counts, 5, 0))
    specialised = np.array([[True, False, False, False], [True, True, False, False]])
    first, second = layer_profiles(atlas, specialised, "m", "d")
    assert first.patterns["vertical"] == 1.0 and sum(first.patterns.values()) == 1.0
    assert second.patterns["block"] == 0.75 and second.patterns["diagonal"] == 0.25
    assert (first.specialised, second.specialised) == (0.25, 0.5)
    masks = head_masks(atlas)
    assert second.broad == masks["broad"][1].mean() and first.positional == masks["positional"][0].mean()
    assert first.confidence == pytest.approx(atlas.roles.confidence()[0].mean())
    kinds = head_kinds(atlas, specialised, "m", "d")
    assert (kinds.n_heads, kinds.specialised, kinds.broad) == (8, 3, int(masks["broad"].sum()))


def test_best_heads_carry_the_rows_and_relative_depth() -> None:
    board = units()[0].result.board
    rows = best_head_rows(board, "m", "d")
    for row, source in zip(rows, board.rows):
        assert (row.relation, row.layer, row.head, row.accuracy) == (source.relation, source.layer, source.head,
                                                                     source.accuracy)
        assert row.depth == float(source.layer)  # two layers: depth 0 or 1
    perfect = [r for r in rows if r.relation == "nsubj"][0]
    assert perfect.accuracy == 1.0 and perfect.beats_baseline and (perfect.layer, perfect.head) in ((0, 1), (1, 2))


def test_missing_pieces_are_named() -> None:
    atlas = units()[0].result
    bare = dataclasses.replace(atlas, distances=dataclasses.replace(atlas.distances, item_pairs=None,
                                                                    item_rows=None))
    c = compare([Unit("atlas", "atlas", "trained", "dev", bare),
                 Unit("board", "leaderboard", "random", "dev", atlas.board)], MODELS, n_resamples=50)
    assert "js_items=True" in c.missing["spread"]
    assert "random on dev: no atlas" in c.missing["head_kinds"]
    assert "prune" in c.missing["redundancy"]
    assert [t.question for t in c.tests] == ["q2", "q4"]
    light = compare([Unit("atlas", "atlas", "trained", "dev", atlas)], MODELS, seed_questions=False, n_resamples=50)
    assert light.specialisation == () and light.spread == () and light.tests == () and light.head_kinds
    assert light.missing == {}


def test_notes_say_what_the_inputs_cannot_tell() -> None:
    notes = " ".join(comparison().notes)
    assert "1 trained model: trained (2 layers x 4 heads)" in notes
    assert "1 random-init model (random)" in notes
    assert "sample:dev silver" in notes and "CPU only" in notes


def test_the_uniform_attention_note_follows_the_confidence_rule() -> None:
    """The note appears when the random-init heads' mean confidence is under half the trained heads', not else."""
    import types

    from probes.compare.notes import notes

    def with_confidence(unit: Unit, value: float) -> Unit:
        roles = types.SimpleNamespace(confidence=lambda: np.full((2, 4), value))
        return dataclasses.replace(unit, result=dataclasses.replace(unit.result, roles=roles))

    trained, random = units()[0], units()[2]
    assert (trained.model, random.model) == ("trained", "random")
    low = " ".join(notes([with_confidence(trained, 0.5), with_confidence(random, 0.1)], MODELS))
    assert "attend almost uniformly (mean largest weight of a row 0.100, against 0.500" in low
    high = " ".join(notes([with_confidence(trained, 0.5), with_confidence(random, 0.3)], MODELS))
    assert "almost uniformly" not in high
    assert "en_ewt-ud-test.conllu gold" in " ".join(
        notes([dataclasses.replace(trained, result=dataclasses.replace(trained.result, board=dataclasses.replace(
            trained.result.board, record=trained.result.board.record.updated(reported_on="en_ewt-ud-test.conllu"))))],
              MODELS))


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="n_resamples"):
        compare(units(), MODELS, n_resamples=0)
    with pytest.raises(ConfigError, match="describe"):
        compare(units(), {"trained": MODELS["trained"]})
    with pytest.raises(ConfigError, match="kind"):
        compare(units(), {**MODELS, "random": {"kind": "other"}})


def test_round_trip_and_tables(tmp_path) -> None:
    c = comparison()
    assert equal(load(c.save(tmp_path / "comparison")), c)
    for table in TABLES:
        assert len(c.to_pandas(table)) == len(getattr(c, table))


def test_a_real_tiny_atlas_with_js_items_gives_the_spread(tmp_path) -> None:
    """probes.atlas(js_items=True) on a tiny BERT keeps every JS sentence's pair sums; compare reads them."""
    from probes.runs.atlas import atlas
    from tests.tiny_models import build

    result = atlas(build("bert", tmp_path / "bert"), "sample:dev", limit=30, js_sentences=10, js_items=True,
                   grad_sentences=0)
    distances = result.distances
    n = distances.distance.shape[0]
    assert distances.item_pairs.shape == (10, n * (n - 1) // 2) and len(distances.item_ids) == 10
    assert int(distances.item_rows.sum()) == distances.n_rows and result.record.options["js_items"] is True
    first, second = np.triu_indices(n, k=1)
    np.testing.assert_allclose(distances.item_pairs.sum(0), distances.distance[first, second], rtol=1e-5)
    c = compare([Unit("atlas", "atlas", "trained", "dev", load(result.save(tmp_path / "atlas")))], MODELS,
                n_resamples=50)
    (row,) = c.spread
    assert row.value == pytest.approx(distances.per_row()[first, second].mean()) and row.low <= row.value <= row.high
