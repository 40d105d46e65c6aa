"""The report's family of tests (one per comparison of a trained model with a random-init one, per question),
Holm-corrected together (:func:`probes.heads.inference.holm`).

* q1: trained minus random-init spread statistic (same data); bootstrap over the JS sentences, paired (the
  same draws for both) when both used the same sentence ids, else independent draws.
* q2: trained minus random-init specialised fraction (same data); bootstrap over report sentences with the
  test and correction redone per draw, paired when both cover the same number of report sentences (the same
  data: the same sentences in the same order), else independent draws.
* q3 has no test in the family: the importance order is set against R random orders, and the rank p-value of
  one order among them cannot go below 1 / (R + 1) (1/21 with the default 20 orders), so a correction over the
  report's tests could hardly call it significant. The Q3 table shows the importance order against the random
  band (removable fraction and area) descriptively.
* q4: trained minus random-init mean rho, for each pair of sides both models were compared on; bootstrap over
  the relations both hold, paired.

A random-init model is compared with the trained model(s) of its ``base`` (the trained model whose ``spec`` or
``base`` equals it); with no such model, with every trained model. Random-init models come in kinds of twin
(:func:`twin_kind`: default twins, sharpness-matched twins ``random-init:BASE@SEED?qk=match``, twins with a given
query-key scale ``?qk=S``; seed_methods.md §g): every test carries its twin kind's label (``Test.twins``,
:func:`twin_labels`), so each trained-vs-random answer is given against each kind separately.

Each test's verdict (:func:`verdict_of`, :data:`VERDICT_RULE`): ``yes`` or ``no`` only when its 95% interval
excludes 0 and the Holm-corrected p agrees; an interval that straddles 0 is ``inconclusive``, never ``no``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from probes.compare.stats import BOOTSTRAP_P, bootstrap_p, interval
from probes.compare.types import Test
from probes.heads.inference import ALPHA, holm
from probes.heads.intervals import resample_counts

__all__ = ["raw_test", "partners", "q1_tests", "q2_tests", "q4_tests", "family", "METHODS", "twin_kind",
           "twin_labels", "verdict_of", "VERDICT_RULE", "TWIN_KINDS"]

#: How one test's verdict is decided (:func:`verdict_of`).
VERDICT_RULE = (f"each test: 'yes' when its 95% interval lies above 0 and its Holm-corrected p < {ALPHA} (the "
                "trained model higher), 'no' when the interval lies below 0 and the Holm p < "
                f"{ALPHA} (the trained model lower), otherwise 'inconclusive' (an interval that straddles 0, or a "
                "Holm p that does not agree with the interval)")
#: The kinds of random-init twin, in report order: what each kind's label says.
TWIN_KINDS: dict[str, str] = {"default": "default twins", "matched": "sharpness-matched twins",
                              "scaled": "twins with scaled queries and keys"}

#: The method of each question's tests (``Test.method``).
METHODS: dict[str, str] = {
    "q1": "difference of the spread statistic (trained - random-init); 95% percentile bootstrap over the JS "
          "sentences ({pairing}); " + BOOTSTRAP_P,
    "q2": "difference of the specialised fractions (trained - random-init); 95% percentile bootstrap over report "
          "sentences, the paired test and Holm redone per draw ({pairing}); " + BOOTSTRAP_P,
    "q4": "difference of the mean Spearman rho over relations (trained - random-init); 95% percentile bootstrap "
          "over the {n} relations both hold (paired); " + BOOTSTRAP_P,
}


def raw_test(question: str, name: str, method: str, value: float, low: float, high: float, p_value: float,
             twins: str = "") -> Test:
    """A test before the correction (``p_adjusted`` NaN until :func:`family` sets it); ``twins`` the label of the
    random-init model's kind (:func:`twin_labels`)."""
    return Test(question, name, method, float(value), float(low), float(high), float(p_value), float("nan"), False,
                twins)


def partners(models: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """``(trained, random-init)`` pairs to compare (see the module)."""
    trained = [m for m, info in models.items() if info.get("kind") == "trained"]
    out: list[tuple[str, str]] = []
    for name, info in models.items():
        if info.get("kind") != "random-init":
            continue
        base = info.get("base")
        matched = [t for t in trained if base is not None and base in (models[t].get("spec"), models[t].get("base"))]
        out.extend((t, name) for t in (matched or trained))
    return out


def twin_kind(info: Mapping[str, Any]) -> str:
    """``default``, ``matched`` (``?qk=match``) or ``scaled`` (``?qk=S``): the kind of a random-init model, from its
    ``spec`` (or a recorded ``query_key`` when the spec says nothing)."""
    from probes.errors import ConfigError
    from probes.extraction.random_init import is_random_init, parse_random_init_options

    spec = str(info.get("spec") or "")
    try:
        option = parse_random_init_options(spec) if is_random_init(spec) else None
    except ConfigError:
        option = None
    if option is not None:
        return "matched" if option.scale is None else "scaled"
    recorded = info.get("query_key")
    if isinstance(recorded, Mapping) and recorded.get("scale") is not None:
        return "matched" if recorded.get("target_confidence") is not None else "scaled"
    return "default"


def _scale(info: Mapping[str, Any]) -> float | None:
    """The query-key scale s of a twin: the recorded ``query_key.scale``, else ``?qk=S`` of its spec."""
    recorded = info.get("query_key")
    if isinstance(recorded, Mapping) and recorded.get("scale") is not None:
        return float(recorded["scale"])
    from probes.errors import ConfigError
    from probes.extraction.random_init import is_random_init, parse_random_init_options

    spec = str(info.get("spec") or "")
    try:
        option = parse_random_init_options(spec) if is_random_init(spec) else None
    except ConfigError:
        option = None
    return None if option is None or option.scale is None else float(option.scale)


def twin_labels(models: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """``{random-init model: its kind's label}``: ``default twins``, ``sharpness-matched twins (s = 4.46)`` (the
    scales of every twin of that kind, 3 significant digits; ``s not recorded`` when none is known)."""
    randoms = {m: twin_kind(info) for m, info in models.items() if info.get("kind") == "random-init"}
    labels = {}
    for kind, text in TWIN_KINDS.items():
        names = [m for m, k in randoms.items() if k == kind]
        if kind != "default" and names:
            scales = list(dict.fromkeys(f"{s:.3g}" for s in (_scale(models[m]) for m in names) if s is not None))
            text += f" (s = {', '.join(scales)})" if scales else " (s not recorded)"
        labels.update({m: text for m in names})
    return labels


def verdict_of(test: Test) -> str:
    """``yes``, ``no`` or ``inconclusive`` (:data:`VERDICT_RULE`)."""
    agrees = bool(test.significant)  # Holm-adjusted p < alpha (family)
    if agrees and test.low > 0 and test.value > 0:
        return "yes"
    if agrees and test.high < 0 and test.value < 0:
        return "no"
    return "inconclusive"


def _difference(t_draws: np.ndarray, r_draws: np.ndarray, value: float, question: str, name: str, method: str,
                twins: str) -> Test:
    """A test of ``value`` from paired or independent draws of the two sides."""
    draws = t_draws - r_draws
    low, high = interval(draws)
    return raw_test(question, name, method, float(value), low, high, bootstrap_p(draws, float(value)), twins)


def q1_tests(spreads: Mapping[tuple[str, str], Any], models: Mapping[str, Mapping[str, Any]], *,
             n_resamples: int, seed: int) -> list[Test]:
    """Trained minus random-init spread statistic on each data both have (``spreads``: (model, data) ->
    :class:`~probes.compare.spread.SpreadDraws`)."""
    from probes.compare.spread import statistic_draws

    out = []
    labels = twin_labels(models)
    for trained, random in partners(models):
        for (model, data), t in spreads.items():
            r = spreads.get((random, data))
            if model != trained or r is None:
                continue
            same = len(set(t.item_ids)) == len(t.item_ids) > 0 and sorted(t.item_ids) == sorted(r.item_ids)
            w_t = resample_counts(len(t.item_rows), n_resamples, seed)
            if same:
                order = np.array([r.item_ids.index(i) for i in t.item_ids])
                r_sums, r_rows, w_r = r.item_sums[order], r.item_rows[order], w_t
            else:
                r_sums, r_rows, w_r = r.item_sums, r.item_rows, resample_counts(len(r.item_rows), n_resamples, seed + 1)
            method = METHODS["q1"].format(pairing="paired: the same sentences" if same else "independent draws")
            out.append(_difference(statistic_draws(t.item_sums, t.item_rows, t.n_pairs, w_t),
                                   statistic_draws(r_sums, r_rows, r.n_pairs, w_r), t.row.value - r.row.value,
                                   "q1", f"spread {trained} - {random} ({data})", method, labels.get(random, "")))
    return out


def q2_tests(specs: Mapping[tuple[str, str], Any], models: Mapping[str, Mapping[str, Any]], *,
             n_resamples: int, seed: int) -> list[Test]:
    """Trained minus random-init specialised fraction on each data both have (``specs``: (model, data) ->
    :class:`~probes.compare.specialisation.SpecialisedHeads`)."""
    from probes.compare.specialisation import draw_fractions

    out = []
    labels = twin_labels(models)
    for trained, random in partners(models):
        for (model, data), t in specs.items():
            r = specs.get((random, data))
            if model != trained or r is None:
                continue
            paired = t.n_units == r.n_units
            r_draws = r.draws if paired else draw_fractions(r.diff, r.total, r.testable,
                                                              resample_counts(r.n_units, n_resamples, seed + 1))
            method = METHODS["q2"].format(pairing="paired: the same sentence draws" if paired else "independent draws")
            out.append(_difference(t.draws, r_draws, t.row.fraction - r.row.fraction, "q2",
                                   f"specialised {trained} - {random} ({data})", method, labels.get(random, "")))
    return out


def q4_tests(found: Mapping[str, Sequence[Any]], models: Mapping[str, Mapping[str, Any]], *, n_resamples: int,
             seed: int) -> list[Test]:
    """Trained minus random-init rho for each pair of sides both were compared on (``found``: model -> list of
    :class:`~probes.compare.consistency.ConsistencyDraws`)."""
    out = []
    labels = twin_labels(models)
    for trained, random in partners(models):
        theirs = {(c.row.first, c.row.second): c for c in found.get(random, ())}
        for mine in found.get(trained, ()):
            other = theirs.get((mine.row.first, mine.row.second))
            if other is None:
                continue
            shared = [r for r in mine.rhos if r in other.rhos and np.isfinite(mine.rhos[r])
                      and np.isfinite(other.rhos[r])]
            if not shared:
                continue
            diff = np.array([mine.rhos[r] - other.rhos[r] for r in shared])  # (K,)
            idx = np.random.default_rng(seed).integers(0, len(shared), size=(n_resamples, len(shared)))
            draws = diff[idx].mean(axis=1)
            low, high = interval(draws)
            out.append(raw_test("q4", f"rho {trained} - {random} ({mine.row.first} vs {mine.row.second})",
                               METHODS["q4"].format(n=len(shared)), float(diff.mean()), low, high,
                               bootstrap_p(draws, float(diff.mean())), labels.get(random, "")))
    return out


def family(raw: Sequence[Test], alpha: float = ALPHA) -> tuple[Test, ...]:
    """Every test with its Holm-adjusted p-value over the whole family (significant when adjusted p < ``alpha``)
    and its verdict (:func:`verdict_of`)."""
    adjusted = holm([t.p_value for t in raw]) if raw else np.zeros(0)
    out = [replace(t, p_adjusted=float(a), significant=bool(a < alpha)) for t, a in zip(raw, adjusted)]
    return tuple(replace(t, verdict=verdict_of(t)) for t in out)
