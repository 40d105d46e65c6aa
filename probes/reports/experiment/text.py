"""The experiment report in words: a short answer per seed question, table footers and the limits of the evidence.

Every number a person reads in ``report.md`` / ``report.html`` goes through :func:`fmt` (one helper, so a test
can format a :class:`~probes.compare.types.Comparison`'s fields the same way and find them in the report):
accuracies, distances and rho with 3 decimals, fractions as percentages with 0 decimals, intervals as
``[low, high]``, p-values as ``<0.001`` or 3 decimals, NaN as ``n/a``.

Each answer is decided from the Comparison's numbers by the rule written next to it (:data:`ANSWER_RULES`):
a verdict from the report's Holm-corrected tests of that question (each test ``yes``, ``no`` or
``inconclusive``: :func:`probes.compare.tests.verdict_of`), given against each kind of random-init twin
separately (default twins, sharpness-matched twins: ``Test.twins``), with how many tests are significant and the
range of their differences; every model's numbers are in the question's tables. Layers and heads are 0-based in
the Comparison and 1-based (``layer-head``) in every sentence here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from probes.compare.consistency import NESTED_RULE, RELIABILITY_RULE
from probes.compare.inputs import depth
from probes.compare.spread import STRUCTURE_RULE, STRUCTURE_SILHOUETTE
from probes.compare.tests import VERDICT_RULE, verdict_of
from probes.compare.types import Comparison, Test
from probes.errors import ConfigError
from probes.heads.naming import INDEXING_NOTE
from probes.importance.pruning import AREA_RULE, TOLERANCE_RULES

__all__ = ["fmt", "QUESTIONS", "ANSWER_RULES", "TEST_KINDS", "answers", "verdict", "verdict_sentences", "twin_groups",
           "peaks", "ROLES", "footer", "footer_notes", "limits", "trained_models", "random_models", "INDEXING_NOTE", "ALPHA"]

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


def _one_test(test: Test, kind: str) -> str:
    """A test's difference with its interval, as the answers print it."""
    return fmt(test.value, kind, test.low, test.high)


def _tests_note(question: str, tests: Sequence[Test]) -> str:
    """How many of ``tests`` are significant after Holm over the report, and their smallest and largest difference."""
    kind = TEST_KINDS.get(question, "value")
    ordered = sorted(tests, key=lambda t: (math.isnan(t.value), t.value))
    low, high = _one_test(ordered[0], kind), _one_test(ordered[-1], kind)
    span = (f"difference {low}" if len(ordered) == 1 else f"differences all {low}" if low == high else
            f"differences {low} to {high}")
    return f"{sum(t.significant for t in tests)} of {len(tests)} tests significant after Holm, {span}"


def verdict_sentences(comparison: Comparison, question: str) -> list[str]:
    """One sentence per kind of random-init twin the tests of ``question`` compare with: the verdict, how many tests
    are significant and the range of their differences, trained minus random-init (see :data:`ANSWER_RULES`)."""
    groups = twin_groups(comparison, question)
    if not groups:
        return [f"{_OPENINGS[question]['untested']}: no test against a random-init model."]
    out = []
    for label, tests in groups.items():
        opening = _OPENINGS[question][verdict(tests)]
        if label:
            opening = f"Against {label}: {opening[:1].lower()}{opening[1:]}"
        out.append(f"{opening}; {_tests_note(question, tests)}.")
    return out


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


def _range(values: Iterable[float], kind: str) -> str:
    """``a`` or ``a to b``: the smallest and largest of ``values`` (NaN left out) as :func:`fmt` prints them."""
    finite = sorted(v for v in (float(x) for x in values) if not math.isnan(v))
    if not finite:
        return fmt(math.nan, kind)
    low, high = fmt(finite[0], kind), fmt(finite[-1], kind)
    return low if low == high else f"{low} to {high}"


def answer_q1(comparison: Comparison) -> str:
    """Q1 in short: the verdict against each kind of twin with its tests, and how many models show clusters."""
    if not comparison.spread:
        return _missing(comparison, "spread")
    rows = comparison.spread
    clustered = sum(bool(r.structure) for r in rows)
    return " ".join([*verdict_sentences(comparison, "q1"),
                     f"Cluster structure (best silhouette >= {STRUCTURE_SILHOUETTE:g}) in {clustered} of {len(rows)} "
                     f"model/data pairs."])


def answer_q2(comparison: Comparison) -> str:
    """Q2 in short: the verdict against each kind of twin with its tests, and the trained models' fractions."""
    if not comparison.specialisation:
        return _missing(comparison, "specialisation")
    trained = set(trained_models(comparison))
    mine = [r for r in comparison.specialisation if r.model in trained] or list(comparison.specialisation)
    return " ".join([*verdict_sentences(comparison, "q2"),
                     f"Specialised heads in the trained models: {_range((r.fraction for r in mine), 'fraction')} "
                     "(held out, Holm over each model's heads)."])


def _goes_last(rows: Sequence[Any]) -> str:
    """Whether specialised heads go last in the trained models, by the rho-margin rule of Q3."""
    finite = [r for r in rows if not math.isnan(r.rho_margin_low)]
    if not finite:
        return "whether specialised heads go last cannot be said (no margin correlation)"
    above = [r for r in finite if r.rho_margin_low > 0]
    if len(above) == len(finite):
        return "specialised heads go last"
    return ("specialised heads do not clearly go last" if not above else
            f"specialised heads go last in {len(above)} of {len(finite)} model/objective pairs")


def answer_q3(comparison: Comparison) -> str:
    """Q3 in short: whether specialised heads go last, the removable fractions against random orders, the tests."""
    if not comparison.redundancy:
        return _missing(comparison, "redundancy")
    rows = comparison.redundancy
    trained = set(trained_models(comparison))
    mine = [r for r in rows if r.model in trained]
    above = sum(not math.isnan(r.rho_margin_low) and r.rho_margin_low > 0 for r in mine)
    tests = [t for t in comparison.tests if t.question == "q3"]
    tested = f"{_tests_note('q3', tests)}." if tests else "No test against a random-init model."
    return (f"In the trained models {_goes_last(mine)}: the interval of rho between importance and the "
            f"specialisation margin lies above 0 in {above} of {len(mine)} model/objective pairs. In importance order "
            f"{_range((r.removable.get('importance', math.nan) for r in rows), 'fraction')} of the heads can be "
            f"removed within the tolerance, against random orders' medians of "
            f"{_range((r.random_median for r in rows), 'fraction')}. {tested}")


def answer_q4(comparison: Comparison) -> str:
    """Q4 in short: the verdict against each kind of twin with its tests, and the trained models' rho."""
    if not comparison.consistency:
        return _missing(comparison, "consistency")
    trained = set(trained_models(comparison))
    mine = [r for r in comparison.consistency if r.model in trained] or list(comparison.consistency)
    return " ".join([*verdict_sentences(comparison, "q4"),
                     f"Rho between the two sides in the trained models: {_range((r.rho for r in mine), 'value')}; "
                     f"the same best head for {_range((r.same_head for r in mine), 'fraction')} of relations."])


#: The roles whose peak depth Q5 gives, as its table names them.
ROLES = ("specialised", "positional", "broad")


def peaks(comparison: Comparison) -> list[dict[str, Any]]:
    """Where each role (and each model's commonest pattern) peaks, per model and data: ``model``, ``data``, ``role``,
    ``layer`` (0-based), ``n_layers``, ``depth`` and ``share`` (layer None where no layer has any), first layer on
    ties."""
    out = []
    for (model, data), rows in _by_model_data(comparison.layers).items():
        rows = sorted(rows, key=lambda r: r.layer)
        names = list(rows[0].patterns)
        common = max(names, key=lambda p: sum(r.patterns.get(p, 0.0) for r in rows)) if names else None
        shares = {f"{k.replace('_', '-')} heads": [getattr(r, k) for r in rows] for k in ROLES}
        if common is not None:
            shares[f"'{common}' maps"] = [r.patterns.get(common, 0.0) for r in rows]
        for role, values in shares.items():
            layer = None
            if values and max(values) > 0 and not all(math.isnan(v) for v in values):
                layer = max(range(len(values)), key=lambda k: (values[k], -k))
            out.append({"model": model, "data": data, "role": role, "n_layers": len(rows),
                        "layer": None if layer is None else rows[layer].layer,
                        "depth": math.nan if layer is None else depth(rows[layer].layer, len(rows)),
                        "share": math.nan if layer is None else values[layer]})
    return out


def answer_q5(comparison: Comparison) -> str:
    """Q5 in short: over the trained models, the relative depth where each role peaks."""
    if not comparison.layers:
        return _missing(comparison, "layers")
    trained = set(trained_models(comparison))
    found = [p for p in peaks(comparison) if p["model"] in trained] or peaks(comparison)
    parts = []
    for k, role in enumerate(f"{k} heads" for k in ROLES):
        mine = [p["depth"] for p in found if p["role"] == role and p["layer"] is not None]
        where = f"{'at depth ' if k == 0 else 'at '}{_range(mine, 'depth')}" if mine else "in no layer"
        parts.append(f"{role} {'are most common ' if k == 0 else ''}{where}")
    pairs = len({(p["model"], p["data"]) for p in found})
    return (f"By relative depth (0 first layer, 1 last), over {pairs} model/data pair{'s' if pairs != 1 else ''}: "
            f"{', '.join(parts[:-1])} and {parts[-1]} (descriptive, no test).")


def _by_model_data(rows: Iterable[Any]) -> dict[tuple[str, str], list[Any]]:
    """Rows grouped by ``(model, data)``, in order of first appearance."""
    out: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        out.setdefault((row.model, row.data), []).append(row)
    return out


def answers(comparison: Comparison) -> dict[str, str]:
    """The short answer to each seed question, by key ``q1`` .. ``q5``: its verdict, its test and its numbers in a
    few sentences (see :data:`ANSWER_RULES`; the numbers of every model are in the question's tables)."""
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


def footer_notes(table: str, comparison: Comparison) -> list[str]:
    """The notes under one table: where heads were selected, how intervals were made, how many tests."""
    rows = list(getattr(comparison, table, ()))
    source = comparison.specialisation if table in ("head_kinds", "layers") else rows
    parts = [p for p in (_selection(source), f"intervals: {_interval_text(table, rows)}",
                         f"tests: {_tests_text(table, comparison, rows)}") if p]
    if table in ("best_heads", "layers", "head_kinds"):
        parts.append(INDEXING_NOTE)
    return parts


def footer(table: str, comparison: Comparison) -> str:
    """The footer line of one table: its notes (:func:`footer_notes`) in one line."""
    return "; ".join(footer_notes(table, comparison)) + "."


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
