"""The experiment report in words: one sentence per seed question, table footers and the limits of the evidence.

Every number a person reads in ``report.md`` / ``report.html`` goes through :func:`fmt` (one helper, so a test
can format a :class:`~probes.compare.types.Comparison`'s fields the same way and find them in the report):
accuracies, distances and rho with 3 decimals, fractions as percentages with 0 decimals, intervals as
``[low, high]``, p-values as ``<0.001`` or 3 decimals, NaN as ``n/a``.

Each answer is decided from the Comparison's numbers by the rule written next to it (:data:`ANSWER_RULES`):
a verdict from the report's Holm-corrected tests of that question (each test ``yes``, ``no`` or
``inconclusive``: :func:`probes.compare.tests.verdict_of`), given against each kind of random-init twin
separately (default twins, sharpness-matched twins: ``Test.twins``), then the numbers behind it. Layers and
heads are 0-based in the Comparison and 1-based (``layer-head``) in every sentence here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from probes.compare.consistency import NESTED_RULE, RELIABILITY_RULE
from probes.compare.inputs import depth
from probes.compare.spread import STRUCTURE_RULE, structure_text
from probes.compare.tests import VERDICT_RULE, verdict_of
from probes.compare.types import Comparison, LayerProfile, Test
from probes.errors import ConfigError
from probes.heads.naming import INDEXING_NOTE
from probes.importance.pruning import AREA_RULE, TOLERANCE_RULES

__all__ = ["fmt", "QUESTIONS", "ANSWER_RULES", "TEST_KINDS", "answers", "verdict", "twin_groups", "footer", "limits",
           "trained_models", "random_models", "INDEXING_NOTE", "ALPHA"]

#: Significance level of every verdict, on Holm-corrected p-values.
ALPHA = 0.05

#: The seed questions, as the report asks them.
QUESTIONS: dict[str, str] = {
    "q1": "Do heads differ from one another more than at random initialisation?",
    "q2": "How many heads carry a syntactic relation, held out and corrected?",
    "q3": "How many heads can be removed, and do specialised and confident heads go last?",
    "q4": "Are the same heads chosen on two splits and on two corpora?",
    "q5": "Where in depth do the attention patterns and head roles sit?",
}

_VERDICT_RULE = ("verdict from the report's tests of this question (trained minus random-init, Holm over every "
                 "test of the report), given against each kind of random-init twin separately (default twins, "
                 f"sharpness-matched twins); {VERDICT_RULE}; over a kind's tests: 'yes', 'no' or 'inconclusive' when "
                 "all say so, 'mixed' otherwise, 'untested' without tests")

#: How each answer is decided from the Comparison (printed under the answer).
ANSWER_RULES: dict[str, str] = {
    "q1": "statistic: mean Jensen-Shannon divergence per query row over all pairs of distinct heads, interval "
          f"over sentences; clusters: best silhouette of Ward cuts, {STRUCTURE_RULE}; " + _VERDICT_RULE,
    "q2": "a head is specialised when its best relation (chosen on the selection data) beats that relation's best "
          "baseline on the report data, Holm over the model's heads; fraction = specialised / all heads, interval "
          "over report sentences; " + _VERDICT_RULE,
    "q3": f"removable (tolerance tau) = largest fraction of heads pruned in importance order with the loss "
          f"{TOLERANCE_RULES['range']}; {AREA_RULE}; both set against the random orders' median and range; "
          "'specialised heads go last' when the interval of Spearman's rho between importance and specialisation "
          "margin lies above 0; descriptive, no test",
    "q4": "rho = mean over relations of Spearman's rho between all heads' accuracies on the two sides, interval "
          f"over relations ({NESTED_RULE}); corrected rho = the same mean of each relation's rho corrected for "
          f"reliability ({RELIABILITY_RULE}); same head = share of relations whose best head is the same on both "
          "sides; the tests use the raw rho; " + _VERDICT_RULE,
    "q5": "per model, the layer where each role's (and the most common pattern's) share of heads peaks (first "
          "such layer), as 1-based layer and relative depth layer / (L - 1); descriptive, no test",
}

#: How each question's test values are formatted (differences of statistics or of fractions).
TEST_KINDS: dict[str, str] = {"q1": "value", "q2": "fraction", "q3": "fraction", "q4": "value", "q5": "value"}

_DECIMALS = {"value": 3, "depth": 2, "seconds": 1}


def fmt(value: Any, kind: str = "value", low: Any = None, high: Any = None) -> str:
    """``value`` as the report prints it, followed by `` [low, high]`` when an interval is given.

    Kinds: ``value`` (accuracy, rho, distance: 3 decimals), ``fraction`` (a percentage, 0 decimals), ``p``
    (``<0.001`` or 3 decimals), ``depth`` (2 decimals), ``seconds`` (1 decimal), ``count`` (an integer;
    1 decimal when not whole, e.g. a percentile of counts).
    NaN and None print as ``n/a``.
    """
    text = _one(value, kind)
    if low is None and high is None:
        return text
    return f"{text} [{_one(low, kind)}, {_one(high, kind)}]"


def _one(value: Any, kind: str) -> str:
    """One number as :func:`fmt` prints it."""
    if value is None or math.isnan(float(value)):
        return "n/a"
    value = float(value)
    if kind == "fraction":
        return f"{100 * value:.0f}%"
    if kind == "p":
        return "<0.001" if value < 0.001 else f"{value:.3f}"
    if kind == "count":
        return str(int(value)) if value == int(value) else f"{value:.1f}"
    if kind not in _DECIMALS:
        raise ConfigError(f"fmt kind: expected one of value, fraction, p, depth, seconds, count; found {kind!r}")
    return f"{value:.{_DECIMALS[kind]}f}"


def trained_models(comparison: Comparison) -> list[str]:
    """The trained models' names, in the experiment's order."""
    return [m for m, info in comparison.models.items() if info.get("kind", "trained") != "random-init"]


def random_models(comparison: Comparison) -> list[str]:
    """The random-init models' names, in the experiment's order."""
    return [m for m, info in comparison.models.items() if info.get("kind") == "random-init"]


def _groups(rows: Iterable[Any], key: str = "data") -> dict[str, list[Any]]:
    """Rows grouped by one field, groups in order of first appearance."""
    out: dict[str, list[Any]] = {}
    for row in rows:
        out.setdefault(str(getattr(row, key)), []).append(row)
    return out


def verdict(tests: Sequence[Test]) -> str:
    """``yes``, ``no``, ``inconclusive`` (every test says so: :func:`~probes.compare.tests.verdict_of`), ``mixed``
    or ``untested`` (see :data:`ANSWER_RULES`)."""
    if not tests:
        return "untested"
    said = {verdict_of(t) for t in tests}
    return said.pop() if len(said) == 1 else "mixed"


def twin_groups(comparison: Comparison, question: str) -> dict[str, list[Test]]:
    """The tests of ``question`` by the kind of random-init twin they compare with (``Test.twins``), in order of
    first appearance (``""``: tests that name no kind)."""
    out: dict[str, list[Test]] = {}
    for t in comparison.tests:
        if t.question == question:
            out.setdefault(t.twins, []).append(t)
    return out


def _tests_clause(comparison: Comparison, question: str, tests: Sequence[Test] | None = None) -> str:
    """The tests of ``question`` (or ``tests``): each difference with its interval, Holm p and verdict, and how
    many are significant."""
    tests = [t for t in comparison.tests if t.question == question] if tests is None else list(tests)
    if not tests:
        return "no test against a random-init model"
    kind = TEST_KINDS.get(question, "value")
    each = "; ".join(f"{t.name} {fmt(t.value, kind, t.low, t.high)}, Holm p {fmt(t.p_adjusted, 'p')} "
                     f"({verdict_of(t)})" for t in tests)
    n_sig = sum(t.significant for t in tests)
    return (f"trained minus random-init: {each} ({n_sig} of {len(tests)} significant at {ALPHA} after Holm over "
            f"all {len(comparison.tests)} tests of the report)")


def _verdict_sentence(comparison: Comparison, question: str, numbers: str) -> str:
    """The answer: with one kind of twin (or none), ``Opening (against KIND): numbers; tests.``; with several,
    ``Numbers. Against KIND: opening; tests. Against KIND2: ...`` (one verdict per kind)."""
    groups = twin_groups(comparison, question)
    if len(groups) <= 1:
        label, tests = next(iter(groups.items()), ("", []))
        against = f" (against {label})" if label else ""
        return (f"{_OPENINGS[question][verdict(tests)]}{against}: {numbers}; "
                f"{_tests_clause(comparison, question, tests)}.")
    parts = [f"Against {label or 'random-init models'}: {_OPENINGS[question][verdict(tests)]}; "
             f"{_tests_clause(comparison, question, tests)}." for label, tests in groups.items()]
    return " ".join([f"{numbers[:1].upper()}{numbers[1:]}.", *parts])


_OPENINGS = {
    "q1": {"yes": "Yes, heads differ more in the trained models than at random initialisation",
           "no": "No, heads differ less in the trained models than at random initialisation",
           "inconclusive": "Inconclusive: the difference in spread between trained and random-init models is not "
                           "told apart from 0",
           "mixed": "Partly: only some trained/random-init pairs differ significantly in spread",
           "untested": "Untested against random initialisation"},
    "q2": {"yes": "More heads are specialised in the trained models than at random initialisation",
           "no": "Fewer heads are specialised in the trained models than at random initialisation",
           "inconclusive": "Inconclusive: the specialised fractions of trained and random-init models are not told "
                           "apart",
           "mixed": "The specialised fractions differ significantly for only some trained/random-init pairs",
           "untested": "Untested against random initialisation"},
    "q4": {"yes": "The trained models choose the same heads more consistently than random-init ones",
           "no": "The random-init models choose their heads more consistently than the trained ones",
           "inconclusive": "Inconclusive: head choice in trained and random-init models is not told apart in "
                           "consistency",
           "mixed": "Head choice is significantly more consistent for only some trained/random-init pairs",
           "untested": "Untested against random initialisation"},
}


def _missing(comparison: Comparison, table: str) -> str:
    """The sentence for a question that could not be answered."""
    return f"Not answered: {comparison.missing.get(table, f'no {table} rows were computed')}."


def answer_q1(comparison: Comparison) -> str:
    """Q1 in one sentence: the spread per model and data with intervals, and the trained-vs-random tests."""
    if not comparison.spread:
        return _missing(comparison, "spread")
    per_data = "; ".join(f"on {data}, " + ", ".join(
        f"{r.model} {fmt(r.value, 'value', r.low, r.high)} ({structure_text(r.n_clusters, r.silhouette)})"
        for r in rows) for data, rows in _groups(comparison.spread).items())
    return _verdict_sentence(comparison, "q1", f"mean JS divergence per query row between distinct heads {per_data}")


def answer_q2(comparison: Comparison) -> str:
    """Q2 in one sentence: the specialised fraction per model and data with intervals, and the tests."""
    if not comparison.specialisation:
        return _missing(comparison, "specialisation")
    parts = []
    for data, rows in _groups(comparison.specialisation).items():
        side = f"selected on {rows[0].selected_on}, reported on {rows[0].reported_on}"
        parts.append(f"on {data} ({side}), " + ", ".join(
            f"{r.model} {fmt(r.fraction, 'fraction', r.low, r.high)} ({fmt(r.n_specialised, 'count')} of "
            f"{fmt(r.n_heads, 'count')} heads)" for r in rows))
    return _verdict_sentence(comparison, "q2", f"specialised heads {'; '.join(parts)}")


def _goes_last(rows: Sequence[Any]) -> str:
    """Whether specialised heads go last in the trained models, by the rho-margin rule of Q3."""
    finite = [r for r in rows if not math.isnan(r.rho_margin_low)]
    if not finite:
        return "whether specialised heads go last cannot be said (no margin correlation)"
    above = [r for r in finite if r.rho_margin_low > 0]
    if len(above) == len(finite):
        return "specialised heads go last (importance rises with the specialisation margin)"
    return ("specialised heads do not clearly go last" if not above else
            f"specialised heads go last in {len(above)} of {len(finite)} model/objective pairs")


def answer_q3(comparison: Comparison) -> str:
    """Q3 in one sentence: removable fraction by importance against the random orders, and rho with margin."""
    if not comparison.redundancy:
        return _missing(comparison, "redundancy")
    parts = []
    for r in comparison.redundancy:
        parts.append(f"{r.model} on {r.data} ({r.objective}, tolerance {fmt(r.tolerance, 'fraction')}"
                     f"{_range_text(r)}): {fmt(r.removable.get('importance'), 'fraction')} removable by importance "
                     f"against {fmt(r.random_median, 'fraction')} [{fmt(r.random_low, 'fraction')}, "
                     f"{fmt(r.random_high, 'fraction')}] for {_random_orders(r)}, area "
                     f"{fmt(r.area.get('importance'))} against {fmt(r.random_area_median)} "
                     f"[{fmt(r.random_area_low)}, {fmt(r.random_area_high)}], rho with margin "
                     f"{fmt(r.rho_margin, 'value', r.rho_margin_low, r.rho_margin_high)}, with confidence "
                     f"{fmt(r.rho_confidence, 'value', r.rho_confidence_low, r.rho_confidence_high)}")
    trained = set(trained_models(comparison))
    last = _goes_last([r for r in comparison.redundancy if r.model in trained])
    return f"In the trained models {last}: {'; '.join(parts)}; {_tests_clause(comparison, 'q3')}."


def _range_text(row: Any) -> str:
    """`` of the loss range full 1.746 to every head ablated 2.208`` for the relative rule (empty otherwise)."""
    if getattr(row, "rule", "range") != "range":
        return " of the unpruned loss"
    if math.isnan(float(getattr(row, "full_loss", math.nan))):
        return " of the loss range from the full model to every head ablated"
    return (f" of the loss range from the full model {fmt(row.full_loss)} to every head ablated "
            f"{fmt(row.ablated_loss)}")


def _random_orders(row: Any) -> str:
    """``20 random orders`` (or ``random orders`` when the row does not say how many)."""
    n = int(getattr(row, "n_random", 0) or 0)
    return f"{n} random orders" if n else "random orders"


def answer_q4(comparison: Comparison) -> str:
    """Q4 in one sentence: rho between the two sides per model with intervals, same-head share, and the tests."""
    if not comparison.consistency:
        return _missing(comparison, "consistency")
    parts = [f"{r.model} {r.first} vs {r.second}: rho {fmt(r.rho, 'value', r.low, r.high)}{_corrected(r)}, same "
             f"best head for {fmt(r.same_head, 'fraction')} of {fmt(r.n_relations, 'count')} relations"
             for r in comparison.consistency]
    return _verdict_sentence(comparison, "q4", "; ".join(parts))


def _corrected(row: Any) -> str:
    """`` (corrected for reliability 0.912 [0.850, 0.970], reliabilities 0.710 and 0.680)``, with the number of
    relations whose corrected rho was capped at ±1 when there are any."""
    value = float(getattr(row, "rho_corrected", math.nan))
    if math.isnan(value):
        return " (not corrected for reliability: no per-sentence counts or no positive reliability)"
    capped = int(getattr(row, "n_capped", 0))
    flag = f"; {capped} of {row.n_corrected} relations' corrected rho capped at ±1" if capped else ""
    return (f" (corrected for reliability {fmt(value, 'value', row.corrected_low, row.corrected_high)}, "
            f"reliabilities {fmt(row.reliability_first)} and {fmt(row.reliability_second)}{flag})")


def _peak(rows: Sequence[LayerProfile], values: Sequence[float], label: str) -> str:
    """Where one share peaks over a model's layers: depth, 1-based layer and the share there."""
    if not values or max(values) <= 0 or all(math.isnan(v) for v in values):
        return f"no {label}"
    best = max(range(len(values)), key=lambda k: (values[k], -k))
    n_layers = len(rows)
    return (f"{label} peak at depth {fmt(depth(rows[best].layer, n_layers), 'depth')} (layer {rows[best].layer + 1} of {n_layers}, "
            f"{fmt(values[best], 'fraction')})")


def answer_q5(comparison: Comparison) -> str:
    """Q5 in one sentence: per model and data, the depth where each role and the commonest pattern peak."""
    if not comparison.layers:
        return _missing(comparison, "layers")
    parts = []
    for (model, data), rows in _by_model_data(comparison.layers).items():
        rows = sorted(rows, key=lambda r: r.layer)
        names = list(rows[0].patterns)
        common = max(names, key=lambda p: sum(r.patterns.get(p, 0.0) for r in rows)) if names else None
        peaks = [_peak(rows, [getattr(r, k) for r in rows], f"{k.replace('_', '-')} heads")
                 for k in ("specialised", "positional", "broad")]
        if common is not None:
            peaks.append(_peak(rows, [r.patterns.get(common, 0.0) for r in rows], f"'{common}' maps"))
        parts.append(f"in {model} on {data}, " + ", ".join(peaks))
    return f"By relative depth (0 first layer, 1 last): {'; '.join(parts)} (descriptive, no test)."


def _by_model_data(rows: Iterable[Any]) -> dict[tuple[str, str], list[Any]]:
    """Rows grouped by ``(model, data)``, in order of first appearance."""
    out: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        out.setdefault((row.model, row.data), []).append(row)
    return out


def answers(comparison: Comparison) -> dict[str, str]:
    """The one-sentence answer to each seed question, by key ``q1`` .. ``q5`` (see :data:`ANSWER_RULES`)."""
    return {"q1": answer_q1(comparison), "q2": answer_q2(comparison), "q3": answer_q3(comparison),
            "q4": answer_q4(comparison), "q5": answer_q5(comparison)}


_TABLE_QUESTION = {"spread": "q1", "specialisation": "q2", "redundancy": "q3", "consistency": "q4", "layers": "q5"}

_INTERVALS = {
    "best_heads": "accuracy and margin intervals are the leaderboards' 95% percentile bootstrap over sentences",
    "head_kinds": "counts, no intervals",
    "specialisation": "95% percentile bootstrap over report sentences, the test redone on every draw",
    "redundancy": "random orders as median [min, max] over the random orders; rho intervals are 95% percentile "
                  "bootstrap over heads",
    "consistency": "95% percentile bootstrap over relations (raw and corrected rho, the same draws)",
    "layers": "shares of each layer's heads, no intervals",
    "tests": "differences with 95% percentile bootstrap intervals; p by each row's method",
}


def _selection(rows: Sequence[Any]) -> str:
    """Where the rows' heads were selected and reported, from their ``selected_on`` / ``reported_on``."""
    pairs = dict.fromkeys((r.selected_on, r.reported_on) for r in rows if hasattr(r, "selected_on"))
    if not pairs:
        return ""
    return "heads selected on " + "; ".join(
        f"{s}, reported on {r}" if s != r else f"{s} and reported on the same data (optimistic)" for s, r in pairs)


def _interval_text(table: str, rows: Sequence[Any]) -> str:
    """How the table's intervals were made."""
    if table == "spread" and rows:
        draws = ", ".join(dict.fromkeys(f"{r.n_resamples} draws of {r.n_items} sentences" for r in rows))
        return (f"95% percentile bootstrap over sentences ({draws}); clusters: best silhouette of Ward cuts, "
                f"{STRUCTURE_RULE}")
    return _INTERVALS.get(table, "")


def _tests_text(table: str, comparison: Comparison, rows: Sequence[Any]) -> str:
    """How many tests the table holds and how they were corrected."""
    total = len(comparison.tests)
    if table == "best_heads":
        return (f"{len(rows)} tests, one per row (paired test against the best baseline, Holm within each model's "
                "leaderboard; not part of the report's family)")
    if table == "head_kinds":
        return "none of its own ('specialised' counts come from the Q2 head tests)"
    if table == "layers":
        return "none (descriptive; 'specialised' shares come from the Q2 head tests)"
    if table == "tests":
        return f"{total} tests, Holm-corrected together"
    if table == "specialisation":
        heads = sum(r.n_tests for r in rows)
        own = sum(t.question == "q2" for t in comparison.tests)
        return (f"{heads} head tests (Holm within each model), and {own} of the report's {total} tests (Q2, Holm "
                "over the report)")
    question = _TABLE_QUESTION.get(table)
    mine = sum(t.question == question for t in comparison.tests)
    return f"{mine} of the report's {total} tests ({question.upper() if question else '-'}, Holm over the report)"


def footer(table: str, comparison: Comparison) -> str:
    """The footer line of one table: where heads were selected, how intervals were made, how many tests."""
    rows = list(getattr(comparison, table, ()))
    source = comparison.specialisation if table in ("head_kinds", "layers") else rows
    parts = [p for p in (_selection(source), f"intervals: {_interval_text(table, rows)}",
                         f"tests: {_tests_text(table, comparison, rows)}") if p]
    if table in ("best_heads", "layers", "head_kinds"):
        parts.append(INDEXING_NOTE)
    return "; ".join(parts) + "."


def _model_rules(comparison: Comparison) -> list[str]:
    """What the set of models cannot tell (used when the Comparison carries no notes of its own)."""
    trained, randoms = trained_models(comparison), random_models(comparison)
    rules = []
    if len(trained) == 1:
        rules.append(f"Only one trained model ({trained[0]}): nothing here says how other models behave.")
    if randoms and len(randoms) < 5 * max(len(trained), 1):
        rules.append(f"{len(randoms)} random initialisation(s) for {len(trained)} trained model(s): how much the "
                     "random-init numbers vary from seed to seed is not measured.")
    if not randoms:
        rules.append("No random-init model: there is no chance reference for Q1, Q2 and Q4.")
    return rules


def limits(comparison: Comparison, record: Any = None) -> list[str]:
    """What the evidence cannot tell: the Comparison's notes, then rules of this module that apply (deduplicated).

    Rules: when the Comparison has no notes of its own (they describe the models), one trained model (nothing
    generalises across models), fewer than 5 random initialisations per trained model (seed variation
    unmeasured) and no random-init model (no chance reference); always: intervals resample
    sentences, heads or relations, never training runs; no significant test (absence of evidence); what was not
    computed.
    """
    out = list(comparison.notes)
    rules = [] if out else _model_rules(comparison)  # the comparison's notes already describe the models
    rules.append("Intervals resample sentences, heads or relations of this data; they do not cover another training "
                 "run, another corpus or another annotation scheme.")
    if comparison.tests and not any(t.significant for t in comparison.tests):
        rules.append(f"No test is significant after Holm over {len(comparison.tests)} tests: absence of evidence, "
                     "not evidence of absence.")
    if comparison.missing:
        rules.append(f"Not computed: {', '.join(comparison.missing)} (the reasons are at the end of the report).")
    return out + [r for r in rules if r not in out]
