"""Every result type saves to a folder and loads back exactly (probes.results).

Adding a result type: add one line to ``CASES`` (name -> factory building a real instance);
:func:`test_every_result_type_has_a_round_trip_case` fails until you do.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import pkgutil
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import probes
from probes.corpora import ReadReport, read_documents, read_treebank
from probes.corpora.types import Sentence
from probes.errors import InputError, SkippedItemWarning
from probes.extraction.attention import WordAttention
from probes.extraction.windows import document_windows
from probes.results import ARRAYS_FILE, RESULT_FILE, Result, equal, load

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SAMPLE = Path(probes.__file__).resolve().parent / "corpora" / "sample" / "sample-dev.conllu"


# ----------------------------------------------------------------------------- real instances
def random_attention(rng: np.random.Generator, n_words: int, layers=(0, 1), heads=(0, 1, 2)) -> WordAttention:
    """``(L, H, n+2, n+2)`` random maps over [CLS] words [SEP]."""
    size = n_words + 2
    w = rng.random((len(layers), len(heads), size, size)).astype(np.float32)
    special = np.zeros(size, dtype=bool)
    special[[0, -1]] = True
    return WordAttention(w, special, tuple(layers), tuple(heads))


@functools.cache
def sentence_pairs() -> tuple[tuple[Sentence, WordAttention], ...]:
    """Twelve sample sentences, each with random attention of 2 layers x 3 heads."""
    rng = np.random.default_rng(0)
    sentences = list(read_treebank(SAMPLE))[:12]
    return tuple((s, random_attention(rng, s.n_words)) for s in sentences)


def feed(analysis, pairs):
    for item, attention in pairs:
        analysis.update(item, attention)
    return analysis.compute()


@functools.cache
def head_scores():
    from probes.analysis.dependency import HeadAccuracy

    scores = feed(HeadAccuracy(), sentence_pairs())
    # metadata exercises the JSON side: nested dicts, NaN, tuples, int keys
    return dataclasses.replace(scores, metadata={"model": "random", "ci": float("nan"), "layers": (0, 1),
                                                 "by_offset": {-1: 0.5, 2: 1}, "note": None})


def head_scores_without_units():
    from probes.analysis.dependency import HeadAccuracy

    return feed(HeadAccuracy(keep_units=False), sentence_pairs())


@functools.cache
def baseline_scores():
    from probes.analysis.baselines import OffsetBaseline

    return feed(OffsetBaseline(), sentence_pairs())


@functools.cache
def gum_windows():
    """Windows of the tiny GUM fixture, each with random attention of 2 layers x 3 heads."""
    rng = np.random.default_rng(1)
    docs = list(read_documents(FIXTURES / "coref" / "tiny_gum.conllu"))
    windows = [w for d in docs for w in document_windows(d, lambda words: len(words) + 2, 12)]
    return tuple((w, random_attention(rng, w.n_words)) for w in windows)


def coref_result():
    from probes.analysis.coreference import AntecedentAccuracy

    return feed(AntecedentAccuracy(), gum_windows())


def bridging_result():
    from probes.analysis.bridging import BridgingScores

    return feed(BridgingScores(), gum_windows())


@functools.cache
def per_head_scores():
    from probes.probing.per_head import PerHeadProbe, fit_evaluate
    from probes.probing.synthetic import planted_pairs

    train = list(planted_pairs(40, random_state=0))
    test = list(planted_pairs(15, random_state=1))
    return fit_evaluate(PerHeadProbe(progress=False), train, test)


def parser_row():
    from probes.probing.parser_scores import ParserScorer
    from probes.probing.parsers import RightBranching
    from probes.probing.synthetic import planted_pairs
    from probes.runs.probing import ParserRow

    pairs = list(planted_pairs(10, random_state=2))
    scores = feed(ParserScorer(RightBranching().fit(pairs)), pairs)
    return ParserRow("right-branching", **scores, control_uas=float("nan"), selectivity=float("nan"),
                     train_sentences=0, attention_from="-")


def extraction_report():
    from probes.extraction.extractor import ExtractionReport

    return ExtractionReport(max_tokens=512, n_items=5, n_yielded=4, skipped=["s3"], truncated=["s1"], windowed=[])


def read_report():
    report = ReadReport()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("bad_id.conllu", "cycle.conllu"):
            list(read_treebank(FIXTURES / "corpora" / "malformed" / name, on_error="skip", report=report))
    list(read_treebank(SAMPLE, report=report))
    report.dropped["mention made of empty nodes"] += 2
    return report


def stream_result():
    from probes.analysis.baselines import OffsetBaseline
    from probes.analysis.dependency import HeadAccuracy
    from probes.analysis.driver import stream

    (sentence, attention), *rest = sentence_pairs()
    cut = dataclasses.replace(attention, meta={"truncated": 2})  # skipped by the driver, named in the result
    with pytest.warns(SkippedItemWarning):
        return stream([(sentence, cut), *rest], {"heads": HeadAccuracy(), "baselines": OffsetBaseline()})


def leaderboard():
    from probes.runs.leaderboard import leaderboard_from_pairs

    pairs = sentence_pairs()
    return leaderboard_from_pairs(pairs[:8], select_pairs=pairs[8:], report_name="first", select_name="rest",
                                  record={"model": "random"}, min_count=3)


def coreference_run():
    from probes.runs.coreference import CoreferenceRun

    return CoreferenceRun(coref_result(), coref_result(), {"options": {"corpus": "tiny_gum.conllu"}}, n_resamples=50)


def bridging_run():
    from probes.runs.coreference import BridgingRun

    return BridgingRun(bridging_result(), None, {"options": {"corpus": "tiny_gum.conllu"}}, n_resamples=50)


def specials_result():
    from probes.analysis.attention_to_specials import AttentionToSpecials

    return feed(AttentionToSpecials(), sentence_pairs())


@functools.cache
def probe_run():
    from probes.probing.synthetic import planted_pairs
    from probes.runs.probing import run_probes

    train, test = list(planted_pairs(40, random_state=0)), list(planted_pairs(15, random_state=1))
    return run_probes(train, test, kinds=("per-head", "label", "attn", "right-branching"), min_count=5,
                      record={"model": "planted"}, progress=False)


def key_type_gradients():
    from probes.extraction.gradients import KEY_TYPES, KeyTypeGradients

    importance = np.random.default_rng(0).random((2, 3, len(KEY_TYPES)))
    importance[:, :, 0] = np.nan  # a decoder without an end special: no sep keys
    return KeyTypeGradients((0, 1), (0, 1, 2), KEY_TYPES, importance, np.array([0, 5, 4, 5], np.int64), 5, 1,
                            "causal-lm", "tiny-gpt2", 0)


def pattern_result():
    from probes.analysis.patterns import PATTERNS, PatternResult

    counts = np.random.default_rng(0).integers(0, 5, (2, 3, len(PATTERNS)))
    return PatternResult((0, 1), (0, 1, 2), counts, int(counts.sum(-1).max()), 2)


def token_pairs():
    """The sentence pairs with token maps (one token per word) attached, as ``keep_tokens=True`` gives."""
    from probes.extraction.attention import TokenAttention

    out = []
    for sentence, wa in sentence_pairs():
        n = wa.is_special.shape[0]
        start, end = np.arange(n) == 0, np.arange(n) == n - 1
        word_of = np.where(wa.is_special, -1, np.arange(n) - 1)
        tokens = TokenAttention(wa.weights, ("[CLS]",) + sentence.words + ("[SEP]",), word_of, start, end)
        out.append((sentence, dataclasses.replace(wa, tokens=tokens)))
    return out


def surface_result():
    from probes.analysis.surface import SurfaceStats

    return feed(SurfaceStats(), token_pairs())


def sink_result():
    from probes.analysis.sinks import AttentionSinks

    return feed(AttentionSinks(), token_pairs())


def roles_result():
    from probes.analysis.roles import HeadRoles, word_frequencies

    return feed(HeadRoles(word_frequencies(s for s, _ in sentence_pairs()), top_common=20), token_pairs())



def distance_result():
    from probes.analysis.head_distances import HeadDistances

    return feed(HeadDistances(max_items=8), token_pairs())


def distance_result_with_items():
    from probes.analysis.head_distances import HeadDistances

    return feed(HeadDistances(max_items=8, keep_items=True), token_pairs())


def cross_result(keep_items: bool = False):
    from probes.analysis.cross_distances import CrossDistances

    analysis = CrossDistances(keep_items=keep_items)
    for item, word in token_pairs():
        analysis.update(item, word)
    return analysis.compute()


def match_run():
    from probes.compare.matching import match_heads
    from probes.runs.match import MatchRun

    distances = cross_result(keep_items=True)
    matching = match_heads(distances.per_row(), shape_a=distances.shape_a, shape_b=distances.shape_b)
    return MatchRun(matching, distances, roles_a=("",) * 6, roles_b=("x",) * 6, summary={"D_match": 0.0},
                    profile_dropped={"to_sep": "constant"}, record={"command": "probes match"})


def head_type_scores():
    from probes.analysis.head_types import CAUSAL_TYPES, HeadTypeScores

    return HeadTypeScores((0, 1), (0, 1, 2), CAUSAL_TYPES, np.random.default_rng(0).random((3, 2, 3)),
                          np.array([0.95, 0.5, 0.5]), n_sequences=4, length=10, seed=3, prefix=(1,), causal=True,
                          exclude_bos=True, rule="r")


def comparison():
    """A comparison of two fake models (one with planted perfect heads) on the sample corpus."""
    from probes.compare import Unit, compare
    from tests.compare.fakes import fake_atlas

    models = {"trained": {"kind": "trained", "spec": "package:x", "base": "package:x", "seed": None},
              "random": {"kind": "random-init", "spec": "random-init:package:x@1", "base": "package:x", "seed": 1}}
    units = [Unit("atlas", "atlas", "trained", "dev", fake_atlas((2, 3), frozenset({1}), seed=0)),
             Unit("atlas", "atlas", "random", "dev", fake_atlas((2, 3), seed=1))]
    return compare(units, models, n_resamples=50)


def lab_tables():
    """The training lab's tables of two synthetic cells (identical heads; heads coming apart), with a planted match."""
    from probes.compare.lab import lab_tables as make
    from probes.compare.types import Unit
    from tests.compare import lab_fakes as F

    steps = [0, 1, 2, 4, 8]
    apart = F.symmetric(np.linspace(1e-6, 0.2, 5)[:, None] * np.ones((1, 2)), 2)
    units = [F.train_unit("identical", 1, F.train_result(steps, F.symmetric(np.zeros((5, 2)), 2)), 2, "identical"),
             F.train_unit("noise", 1, F.train_result(steps, apart), 2, "identical+noise:0.01")]
    roles = {1: [[0, 1], [4, 5]], 2: [[1, 0], [5, 4]]}
    maps = {s: F.planted(r, s, n_sentences=10) for s, r in roles.items()}
    units.append(Unit("match-seeds", "match", "noise-s1~noise-s2", "dev", F.match_run(maps[1], maps[2], 20)))
    models = {f"noise-s{s}": F.lab_model("noise", s, 2, "identical+noise:0.01", last_step=8) for s in (1, 2)}
    return make(units, models, n_resamples=20)


def relation_profile():
    from probes.heads.profile import best_relations

    board = leaderboard()
    return best_relations(board.report, board.report_baselines, [r.relation for r in board.rows],
                          select=board.select, select_baselines=board.select_baselines)


def atlas_result():
    from probes.analysis.patterns import AttentionPatterns
    from probes.heads.groups import cluster_heads, mds_layout
    from probes.runs.atlas import Atlas

    distances = distance_result()
    pairs = token_pairs()
    return Atlas(board=leaderboard(), surface=surface_result(), roles=roles_result(),
                 patterns=feed(AttentionPatterns(), pairs), distances=distances, profile=relation_profile(),
                 layout=mds_layout(distances.distance), clusters=cluster_heads(distances.distance, 3),
                 gradients=key_type_gradients(), coref_accuracy=np.full((2, 3), 0.25), example_id=pairs[0][0].sent_id,
                 example_words=pairs[0][0].words, example=pairs[0][1].tokens, record={"model": "random"})

#: One line per result type (or variant, ``Type/variant``): a factory building a real instance.
def _role_lab_comparison() -> Result:
    """The role lab's comparison of a planted grid (tests/compare/test_role_lab.py)."""
    planted = importlib.import_module("tests.compare.test_role_lab")._experiment()
    return importlib.import_module("probes.compare.role_lab").role_lab(*planted, n_permutations=200, seed=0)


CASES: dict[str, Callable[[], Result]] = {
    "HeadScores": head_scores,
    "HeadScores/no-units": head_scores_without_units,
    "UnitCounts": lambda: head_scores().units,
    "BaselineScores": baseline_scores,
    "CorefResult": coref_result,
    "BridgingResult": bridging_result,
    "PerHeadScores": per_head_scores,
    "ParserRow": parser_row,
    "ExtractionReport": extraction_report,
    "ReadReport": read_report,
    "StreamResult": stream_result,
    "Leaderboard": leaderboard,
    "CoreferenceRun": coreference_run,
    "BridgingRun": bridging_run,
    "SpecialsResult": specials_result,
    "SurfaceResult": surface_result,
    "SinkResult": sink_result,
    "RolesResult": roles_result,
    "PatternResult": pattern_result,
    "DistanceResult": distance_result,
    "DistanceResult/items": distance_result_with_items,
    "HeadTypeScores": head_type_scores,
    "CrossDistanceResult": cross_result,
    "CrossDistanceResult/items": lambda: cross_result(keep_items=True),
    "HeadMatching": lambda: match_run().matching,
    "MatchRun": match_run,
    "Comparison": comparison,
    "LabTables": lab_tables,
    "ExperimentRun": lambda: importlib.import_module("probes.runs.experiment").ExperimentRun(
        comparison=comparison(), record={"command": "probes run", "experiment": {"name": "x"}, "units": []}),
    "ProbeRun": probe_run,
    "LabelScores": lambda: probe_run().label,
    "KeyTypeGradients": key_type_gradients,
    "RelationProfile": relation_profile,
    "Atlas": atlas_result,
    "ImportanceResult": lambda: importlib.import_module("tests.importance.cases").importance_result(),
    "PruningResult": lambda: importlib.import_module("tests.importance.cases").pruning_result(),
    "OnePerLayer": lambda: importlib.import_module("tests.importance.cases").one_per_layer(),
    "FunctionTests": lambda: importlib.import_module("tests.importance.test_function_ablations").function_result(),
    **{name: (lambda name=name: importlib.import_module("tests.compare.test_seed_families").case(name))
       for name in ("MultiBootstrap", "MultiBootstrapDifference", "RoleStability", "FamilyRoles")},
    "HeadImportance": lambda: importlib.import_module("probes.runs.importance").HeadImportance(
        model="package:tiny", result=importlib.import_module("tests.importance.cases").importance_result(),
        record={"command": "probes importance", "options": {"objective": "representation"}}),
    "Pruning": lambda: importlib.import_module("probes.runs.importance").Pruning(
        model="package:tiny", curves=importlib.import_module("tests.importance.cases").pruning_result(),
        start=importlib.import_module("tests.importance.cases").importance_result(),
        leaderboard={"rows": [{"relation": "nsubj", "direction": "dep_to_head", "layer": 1, "head": 2,
                               "accuracy_unpruned": 0.5, "accuracy_pruned": 0.25}], "n_pruned": 3, "fraction": 0.5,
                     "rule": "r"}, record={"command": "probes prune"}),
    "TrainingCurves": lambda: importlib.import_module("probes.training.curves").TrainingCurves(
        steps=np.array([0, 1, 2, 4], dtype=np.int64), tokens_seen=np.array([0, 64, 128, 256], dtype=np.int64),
        train_loss=np.array([np.nan, 5.1, 4.8, 4.2]), dev_loss=np.array([5.3, 5.0, 4.7, 4.4]), unigram_dev_loss=4.9),
    "HeadSymmetry": lambda: importlib.import_module("probes.training.symmetry").HeadSymmetry(
        steps=np.array([0, 8], dtype=np.int64), param_distance=np.random.default_rng(0).random((2, 1, 2, 2)),
        attention_distance=np.random.default_rng(1).random((2, 1, 2, 2)), n_sentences=3),
    "LabRun": lambda: importlib.import_module("probes.runs.experiment_train").LabRun(
        cell="identical", seed=2, curves=CASES["TrainingCurves"](), symmetry=CASES["HeadSymmetry"](), seconds=1.5,
        tokens_per_second=4096.0, last_step=4, folder="train/identical/seed-2", resumed_from=None),
    "LabRun/no-symmetry": lambda: importlib.import_module("probes.runs.experiment_train").LabRun(
        cell="heads-1", seed=1, curves=CASES["TrainingCurves"](), symmetry=None, seconds=0.5,
        tokens_per_second=100.0, last_step=4, folder="train/heads-1/seed-1", resumed_from=2),
    "LabModelAnalysis": lambda: importlib.import_module("tests.compare.test_role_lab")._experiment()[0][0],
    "RoleLabComparison": lambda: _role_lab_comparison(),
    "ShareComparison": lambda: importlib.import_module("tests.compare.test_sources_compare")._share_comparison(),
    "AttentionMaps": lambda: importlib.import_module("probes.runs.attention_maps").AttentionMaps(
        tokens=("[CLS]", "a", "[SEP]"), source="norm", maps=np.full((2, 2, 3, 3), 1 / 3, dtype=np.float32),
        totals=np.ones((2, 2, 3), dtype=np.float32), layer_maps=np.full((2, 3, 3), 1 / 3, dtype=np.float32),
        rollout=np.full((2, 3, 3), 1 / 3, dtype=np.float32), identity=0.5, flow=None, model="tiny"),
    "SourcesRun": lambda: importlib.import_module("tests.compare.test_sources_compare")._sources_run(),
    "RoleLabRun": lambda: importlib.import_module("probes.runs.role_lab").RoleLabRun(
        comparison=_role_lab_comparison(), families=(CASES["FamilyRoles"](),),
        record={"command": "probes run", "experiment": {"name": "lab", "kind": "role-lab"}}),
    "TrainReport": lambda: importlib.import_module("probes.runs.train").TrainReport(
        run=importlib.import_module("probes.training.trainer").TrainingRun(
            out=Path("runs/t"), config=importlib.import_module("probes.training.config").TrainConfig(
                arch="bert", layers=1, heads=2, hidden=32, treebank=("sample:dev",), steps=4),
            checkpoints={0: Path("runs/t/checkpoints/step-0"), 4: Path("runs/t/checkpoints/step-4")},
            resumed_from=None, stopped="finished", seconds=1.5, tokens_per_second=4096.0,
            training=None),  # a real record round-trips in tests/training/test_train_report_result.py
        curves=CASES["TrainingCurves"](), record={"command": "probes train"}, symmetry=CASES["HeadSymmetry"]()),
}


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_is_exact(name: str, tmp_path: Path) -> None:
    original = CASES[name]()
    assert type(original).__name__ == name.split("/")[0]
    folder = original.save(tmp_path / "saved")
    assert folder == tmp_path / "saved"
    assert sorted(p.name for p in folder.iterdir()) == [ARRAYS_FILE, RESULT_FILE]
    loaded = load(folder)
    assert type(loaded) is type(original)
    assert equal(loaded, original)
    assert equal(type(original).load(folder), original)
    assert equal(Result.load(folder), original)
    # saving what was loaded gives the same files (nothing drifts on a second trip)
    again = loaded.save(tmp_path / "again")
    assert (again / RESULT_FILE).read_text() == (folder / RESULT_FILE).read_text()
    with np.load(folder / ARRAYS_FILE, allow_pickle=False) as a, np.load(again / ARRAYS_FILE) as b:
        assert a.files == b.files
        assert all(equal(a[k], b[k]) for k in a.files)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tables_and_notebook_view(name: str) -> None:
    result = CASES[name]()
    table = result.to_pandas()
    assert len(table) > 0
    assert type(result).__name__ in result._repr_html_()


def test_every_result_type_has_a_round_trip_case() -> None:
    """Import every probes module, then require a CASES entry for each Result subclass found."""
    for module in pkgutil.walk_packages(probes.__path__, "probes."):
        if module.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as exc:  # an optional dependency that is not installed
            if (exc.name or "").startswith("probes"):
                raise
    covered = {name.split("/")[0] for name in CASES}
    found = {cls.__name__: cls for cls in _subclasses(Result) if cls.__module__.startswith("probes.")}
    missing = sorted(f"{cls.__module__}.{name}" for name, cls in found.items() if name not in covered)
    assert not missing, f"result types without a round-trip case in tests/test_results.py CASES: {missing}"
    assert set(CASES) and {"HeadScores", "CorefResult", "BridgingResult"} <= set(found)


def _subclasses(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


def test_types_survive_in_detail(tmp_path: Path) -> None:
    """The things JSON alone would lose: tuples, int keys, NaN, None, dtypes, a Counter, exceptions."""
    scores = load(head_scores().save(tmp_path / "h"))
    assert isinstance(scores.relations, tuple) and isinstance(scores.layers, tuple)
    assert scores.metadata["by_offset"] == {-1: 0.5, 2: 1} and type(scores.metadata["by_offset"][2]) is int
    assert math.isnan(scores.metadata["ci"]) and scores.metadata["note"] is None
    assert scores.correct.dtype == np.int64 and scores.units.correct.dtype == np.uint16
    assert np.array_equal(scores.accuracy(), head_scores().accuracy(), equal_nan=True)
    base = load(baseline_scores().save(tmp_path / "b"))
    assert base.positions == baseline_scores().positions
    assert all(type(p) is int for hist in base.positions.values() for p in hist)
    assert base.most_frequent_position("ALL") == baseline_scores().most_frequent_position("ALL")
    report = load(read_report().save(tmp_path / "r"))
    assert type(report.dropped) is Counter and report.dropped["mention made of empty nodes"] == 2
    assert [type(e).__name__ for e in report.skipped] == ["FormatError", "AnnotationError"]
    assert str(report.skipped[0]) == str(read_report().skipped[0]) and report.skipped[0].line == 3
    assert load(head_scores_without_units().save(tmp_path / "n")).units is None
    doc = json.loads((tmp_path / "h" / RESULT_FILE).read_text())
    assert doc["type"] == f"{type(scores).__module__}:HeadScores" and doc["format"] == 1
    assert doc["fields"]["correct"] == {"__array__": "correct"}


def test_equal_is_strict() -> None:
    assert equal((1, 2.0, float("nan")), (1, 2.0, float("nan")))
    assert not equal((1, 2), [1, 2])
    assert not equal(1, 1.0)
    assert not equal({1: "a"}, {"1": "a"})
    assert not equal(np.zeros(3, np.int64), np.zeros(3, np.int32))
    assert not equal(np.zeros((1, 3)), np.zeros(3))
    assert not equal(np.array([0.0]), np.array([-0.0]))
    assert equal(np.array([np.nan]), np.array([np.nan]))
    assert not equal(Counter(a=1), {"a": 1})
    changed = dataclasses.replace(head_scores(), correct=head_scores().correct + 1)
    assert not equal(changed, head_scores())


# ----------------------------------------------------------------------------- tables
def test_head_scores_table() -> None:
    scores = head_scores()
    table = scores.to_pandas()
    assert list(table.columns) == ["relation", "count", "direction", "layer", "head", "head_name", "correct",
                                   "accuracy"]
    assert len(table) == scores.correct.size
    row = table[(table.relation == "ALL") & (table.direction == scores.directions[1])
                & (table["layer"] == 2) & (table["head"] == 3)].iloc[0]
    r = scores.index("ALL")
    assert row.head_name == "2-3" and row["count"] == scores.total[r]
    assert row.correct == scores.correct[1, 1, 2, r] and row.accuracy == scores.accuracy()[1, 1, 2, r]


def test_coref_and_bridging_tables() -> None:
    from probes.analysis.coreference import DISTANCE_BANDS, MENTION_TYPES

    coref = coref_result()
    table = coref.to_pandas()
    assert list(table.columns)[:5] == ["type", "band", "layer", "head", "head_name"]
    assert len(table) == len(MENTION_TYPES) * len(DISTANCE_BANDS) * 2 * 3
    assert table.correct.sum() == coref.correct.sum() and set(table.layer) == {1, 2}
    pooled = table.groupby(["layer", "head"]).correct.sum().to_numpy() / coref.total.sum()
    assert np.allclose(pooled, coref.accuracy().reshape(-1))
    bridging = bridging_result()
    table = bridging.to_pandas()
    assert list(table.columns)[:4] == ["band", "layer", "head", "head_name"]
    assert table.hits.sum() == bridging.hits.sum() and table.total.max() == bridging.total.sum(axis=0).max()


def test_generic_table_names_layer_and_head_axes() -> None:
    @dataclasses.dataclass(frozen=True)
    class Grid(Result):
        layers: tuple[int, ...]
        heads: tuple[int, ...]
        score: np.ndarray

    table = Grid((4, 5), (0, 1, 2), np.arange(6.0).reshape(2, 3)).to_pandas()
    assert list(table.columns) == ["array", "layer", "head", "value"]
    assert table.iloc[5].tolist() == ["score", 6, 3, 5.0]


def test_notebook_view_without_pandas(monkeypatch: pytest.MonkeyPatch) -> None:
    import probes.results

    def missing() -> None:
        raise ImportError("no pandas")

    monkeypatch.setattr(probes.results, "require_pandas", missing)
    text = extraction_report()._repr_html_()
    assert "<pre>" in text and "n_items: 5" in text


# ----------------------------------------------------------------------------- errors
def test_loading_what_is_not_a_result(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such folder") as err:
        load(tmp_path / "missing")
    assert str(tmp_path / "missing") in str(err.value)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(InputError, match="found a file"):
        load(tmp_path / "file.txt")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "scores.csv").write_text("x")
    with pytest.raises(InputError, match=r"expected result\.json, found scores\.csv"):
        load(tmp_path / "other")


def test_loading_the_wrong_type(tmp_path: Path) -> None:
    from probes.analysis.dependency import HeadScores

    folder = coref_result().save(tmp_path / "coref")
    with pytest.raises(InputError, match="expected a saved HeadScores, found a saved CorefResult") as err:
        HeadScores.load(folder)
    assert str(folder) in str(err.value)


def test_damaged_folders(tmp_path: Path) -> None:
    folder = extraction_report().save(tmp_path / "r")
    doc = json.loads((folder / RESULT_FILE).read_text())
    for change, message in [
        ({"type": "collections:Counter"}, "field 'type': unknown type 'collections:Counter'"),
        ({"type": "probes.nowhere:Thing"}, "field 'type': unknown type 'probes.nowhere:Thing'"),
        ({"type": "probes.heads.selection:LeaderboardRow"}, "field 'type': expected a Result type"),
        ({"format": 99}, "expected format 1 or older"),
        ({"fields": {**doc["fields"], "extra": 1}}, "has no field"),
    ]:
        (folder / RESULT_FILE).write_text(json.dumps({**doc, **change}))
        with pytest.raises(InputError, match=message):
            load(folder)
    (folder / RESULT_FILE).write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load(folder)
    scores = head_scores().save(tmp_path / "h")
    (scores / ARRAYS_FILE).unlink()
    with pytest.raises(InputError, match="arrays.npz is missing"):
        load(scores)


def test_saving_refuses_what_would_need_pickle(tmp_path: Path) -> None:
    bad = dataclasses.replace(head_scores(), metadata={"objects": np.array([object()])})
    with pytest.raises(TypeError, match="pickle"):
        bad.save(tmp_path / "bad")
    with pytest.raises(TypeError, match="metadata.when"):
        dataclasses.replace(head_scores(), metadata={"when": object()}).save(tmp_path / "bad2")
