"""Markdown reports of head importance and pruning: what was computed, the top heads, agreement, curves.

- :func:`importance_markdown`: the summary (objective, data, normalisation, ablation, bootstrap), the 10 most
  important heads and the 10 largest leave-one-out effects with intervals, and Spearman's rho with its interval;
- :func:`pruning_markdown`: the summary (where curves were measured and orders chosen), per curve the
  fraction of heads removable within 5% (:meth:`PruningResult.removable`), where each non-random curve lies
  against the random band step by step (:func:`band_positions`), the one-head-per-layer table and the curves.

Numbers are written with 4 significant digits (:func:`number`); layers and heads are 1-based (``layer-head``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from probes.errors import InputError
from probes.reports.escape import md_code
from probes.reports.prose import opening, pack
from probes.reports.tables import markdown_table, md_heading, md_text
from probes.run_record import RunRecord

if TYPE_CHECKING:  # pragma: no cover
    from probes.importance.pruning import OnePerLayer, PruningResult
    from probes.importance.scores import ImportanceResult

__all__ = ["importance_markdown", "pruning_markdown", "importance_findings", "pruning_findings", "band_positions",
           "band_summary", "rank_sentence", "number", "TOP_K", "TOLERANCE", "BAND_RULE"]

#: Heads listed in each top table.
TOP_K = 10
#: Tolerance of :meth:`PruningResult.removable` in the report (relative to the unpruned value).
TOLERANCE = 0.05
#: How a curve is placed against the random band, printed with the report.
BAND_RULE = ("against the random band: per step, 'below' when the curve's value is under the lowest random order's, "
             "'above' when over the highest's, else 'within' (values equal to an edge count as within); the first "
             "and last steps (nothing / every head pruned) are the same for every order and are not counted")
_INDEXING = "Layers and heads are 1-based (`layer-head`)."


def number(value: Any) -> str:
    """A number for the report: 4 significant digits (``0.001234``, ``12.35``), ``-`` for NaN or None."""
    if value is None:
        return "-"
    value = float(value)
    return "-" if not np.isfinite(value) else format(value, ".4g")


def _name(layers: Any, heads: Any, layer: int, head: int) -> str:
    """``layer-head`` (1-based) of the 0-based positions ``layer, head`` in a result's axes."""
    return f"{int(layers[layer]) + 1}-{int(heads[head]) + 1}"


def _percent(confidence: float) -> str:
    return f"{100 * confidence:g}%"


def _inputs(record: RunRecord) -> list[str]:
    """Lines naming the sentences skipped or cut, from the record's ``inputs`` section (when it has one)."""
    from probes.reports.inputs import inputs_lines

    inputs = RunRecord.of(record).inputs
    if not isinstance(inputs, Mapping) or not inputs:
        return []
    try:
        return [f"- {md_text(line)}" for line in inputs_lines(RunRecord.of(record), limit=None)]
    except (KeyError, TypeError, AttributeError):  # a record in another shape: say nothing rather than fail
        return []


# ---------------------------------------------------------------------------------------------- importance
def _top_rows(result: ImportanceResult, key: npt.NDArray[np.float64]) -> list[dict[str, str]]:
    """The :data:`TOP_K` heads highest on ``key`` (L, H), ties by head index, NaN never listed."""
    flat = np.where(np.isfinite(key), key, -np.inf).ravel()
    order = [i for i in np.argsort(-flat, kind="stable")[:TOP_K] if np.isfinite(flat[i])]
    rows = []
    for rank, index in enumerate(order, start=1):
        layer, head = (int(i) for i in np.unravel_index(index, key.shape))
        rows.append({"rank": str(rank), "head": _name(result.layers, result.heads, layer, head),
                     "importance": number(result.importance[layer, head]),
                     "raw importance": number(result.raw_importance[layer, head]),
                     "loo effect": number(result.loo_effect[layer, head]),
                     "loo low": number(result.loo_low[layer, head]),
                     "loo high": number(result.loo_high[layer, head])})
    return rows


def rank_sentence(result: ImportanceResult) -> str:
    """The rank correlation of importance and leave-one-out effect, with its interval, in one sentence."""
    n_heads = len(result.layers) * len(result.heads)
    if not np.isfinite(result.rank_correlation):
        return (f"Rank correlation of importance and leave-one-out effect over the {n_heads} heads: not computed "
                "(leave-one-out was not run, or every head has the same value).")
    return (f"Spearman's rank correlation of importance and leave-one-out effect over the {n_heads} heads: "
            f"rho = {number(result.rank_correlation)} ({_percent(result.confidence)} interval "
            f"{number(result.rank_low)} to {number(result.rank_high)}; both measures recomputed in each of "
            f"{result.n_resamples} bootstrap resamples of the sentences)." + _abs_rank(result))


def _abs_rank(result: ImportanceResult) -> str:
    """The rank correlation with the size of the effect (importance is unsigned), when computed."""
    if not np.isfinite(result.abs_rank_correlation):
        return ""
    helped = int((np.asarray(result.loo_effect) < 0).sum())
    text = (f" With the size of the effect, |leave-one-out|: rho = {number(result.abs_rank_correlation)} "
            f"({_percent(result.confidence)} interval {number(result.abs_rank_low)} to "
            f"{number(result.abs_rank_high)}); importance is unsigned, and removing {helped} of the heads alone "
            "lowers the loss.")
    if np.isfinite(result.raw_rank_correlation):
        text += (f" With the importance before the layer normalisation (comparable across layers): rho = "
                 f"{number(result.raw_rank_correlation)} ({_percent(result.confidence)} interval "
                 f"{number(result.raw_rank_low)} to {number(result.raw_rank_high)}).")
    return text


def _importance_summary(result: ImportanceResult, record: RunRecord) -> list[str]:
    from probes.importance.scores import GAUSS_NEWTON_RULE, IMPORTANCE_RULE

    n_layers, n_heads = len(result.layers), len(result.heads)
    loo_run = bool(np.isfinite(np.asarray(result.loo_effect, float)).any())
    lines = [f"- objective: {md_code(result.objective)}; data: {md_text(result.data)} ({result.n_sentences} sentences); "
             "base loss "
             f"of the unmodified model: {number(result.base_loss)}",
             f"- {n_layers * n_heads} heads ({n_layers} layers x {n_heads} heads), every head scored on the same "
             "data (no head is chosen on it)",
             f"- {GAUSS_NEWTON_RULE if result.criterion == 'gauss-newton' else IMPORTANCE_RULE}; normalisation used "
             f"here: {md_code(result.normalization)}",
             (f"- leave-one-out: each head alone removed by {md_code(result.ablation)} ablation; effect = mean over "
              "sentences of the loss change (positive: the loss rises without the head)") if loo_run else
             "- leave-one-out: not run",
             f"- intervals: {_percent(result.confidence)} percentile bootstrap over sentences, {result.n_resamples} "
             "resamples"]
    return lines + _inputs(record)


def importance_findings(result: ImportanceResult) -> list[str]:
    """Head importance in short: the most important heads, the largest leave-one-out effect, and how far the two
    agree (Spearman's rho with its interval)."""
    importance = np.asarray(result.importance, dtype=float)
    top = _top_rows(result, importance)[:5]
    found = [f"The most important heads ({md_code(result.normalization)} gradient importance on "
             f"{md_text(result.data)}, {result.n_sentences} sentences): "
             + ", ".join(f"{r['head']} ({r['importance']})" for r in top) + "." if top else
             "No head has a finite importance."]
    loo = np.asarray(result.loo_effect, dtype=float)
    if np.isfinite(loo).any():
        first = _top_rows(result, loo)[0]
        found.append(f"The largest leave-one-out effect (the loss change with the head alone removed) is head "
                     f"{first['head']}'s: {first['loo effect']} ({_percent(result.confidence)} interval "
                     f"{first['loo low']} to {first['loo high']}, over sentences).")
    if np.isfinite(result.rank_correlation):
        found.append(f"Importance and the leave-one-out effect agree by Spearman's rho = "
                     f"{number(result.rank_correlation)} ({_percent(result.confidence)} interval "
                     f"{number(result.rank_low)} to {number(result.rank_high)}; {result.n_resamples} bootstrap "
                     "resamples of the sentences).")
    return [*found, _INDEXING]


def importance_markdown(result: ImportanceResult, *, model: str, record: RunRecord) -> str:
    """``importance.md``: the answers in short, what was computed, the top heads by importance and by
    leave-one-out effect, rank correlation."""
    importance = np.asarray(result.importance, dtype=float)
    loo = np.asarray(result.loo_effect, dtype=float)
    columns = ["rank", "head", "importance", "raw importance", "loo effect", "loo low", "loo high"]
    parts = [f"# Head importance: {md_heading(model)}, {md_heading(result.objective)} objective on {md_heading(result.data)}\n",
             *opening(importance_findings(result)),
             "## What was computed\n", *_importance_summary(result, record), "",
             f"## The {TOP_K} most important heads (gradient importance)\n",
             markdown_table(_top_rows(result, importance), columns)]
    if np.isfinite(loo).any():
        parts += [f"## The {TOP_K} largest leave-one-out effects\n", markdown_table(_top_rows(result, loo), columns)]
    parts += ["## Agreement\n", *(f"{p}\n" for p in pack(rank_sentence(result)))]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- pruning
def _metric_index(result: PruningResult, metric: str) -> int:
    if metric not in result.metrics:
        raise InputError(f"metric: expected one of {', '.join(result.metrics)}, found {metric!r}")
    return result.metrics.index(metric)


def band_positions(result: PruningResult, name: str, metric: str = "loss") -> npt.NDArray[np.str_]:
    """``(S,)`` where curve ``name`` lies against the random band at each step: ``below``, ``within``, ``above``
    (``n/a`` where the curve or the band is NaN).

    Values equal to a band edge (within 1e-12 relative) count as within. Raises InputError when the result has
    no random curves.
    """
    _metric_index(result, metric)
    if not any(c.startswith("random:") for c in result.curves):
        raise InputError(f"no random curves to compare with; found curves {', '.join(result.curves)}")
    low, _, high = (np.asarray(a, dtype=float) for a in result.random_band(metric))
    values = np.asarray(result.curve(name, metric), dtype=float)
    slack = 1e-12 * np.maximum(1.0, np.abs(values))
    position = np.where(values < low - slack, "below", np.where(values > high + slack, "above", "within"))
    return np.where(np.isnan(values) | np.isnan(low) | np.isnan(high), "n/a", position)


def _steps_text(result: PruningResult, steps: list[int]) -> str:
    """``10%, 20% pruned`` for step indices (the fraction pruned at each, in %)."""
    return ", ".join(f"{number(100 * result.fractions[s])}%" for s in steps) + " pruned"


def band_summary(result: PruningResult, name: str, metric: str = "loss") -> str:
    """One sentence: at which inner steps curve ``name`` is below, within and above the random band (and which
    side is better for ``metric``)."""
    index = _metric_index(result, metric)
    positions = band_positions(result, name, metric)
    inner = list(range(1, len(positions) - 1))
    if not inner:
        return f"{md_code(name)} ({md_text(metric)}): no step between nothing and every head pruned to compare."
    better = "above" if result.higher_is_better[index] else "below"
    parts = []
    for where in ("below", "within", "above", "n/a"):
        steps = [s for s in inner if positions[s] == where]
        if steps:
            parts.append(f"{where} at {len(steps)} of {len(inner)} steps ({_steps_text(result, steps)})")
    stays = all(positions[s] == better for s in inner)
    verdict = f"{'stays' if stays else 'does not stay'} {better} the random band at every step"
    return (f"{md_code(name)} ({md_text(metric)}; {better} the band is better than every random order): " + "; ".join(parts)
            + f". It {verdict}.")


def _removable_rows(result: PruningResult) -> list[dict[str, str]]:
    rows = []
    for name in result.curves:
        row = {"curve": name}
        for metric in result.metrics:
            fraction = result.removable(name, metric, TOLERANCE, rule="base")
            hit = np.flatnonzero(np.isclose(np.asarray(result.fractions, float), fraction))
            heads = f" ({int(result.n_pruned[hit[0]])} heads)" if hit.size else ""
            row[f"removable ({metric})"] = number(fraction) + heads
        rows.append(row)
    return rows


def _curve_tables(result: PruningResult) -> list[str]:
    """Per metric a table: one row per step, the random band (min, median, max) and every other curve."""
    randoms = [c for c in result.curves if c.startswith("random:")]
    others = [c for c in result.curves if not c.startswith("random:")]
    out = []
    for metric in result.metrics:
        band = result.random_band(metric) if randoms else None
        curves = {name: result.curve(name, metric) for name in others}
        rows = []
        for s, fraction in enumerate(result.fractions):
            row = {"fraction pruned": number(fraction), "heads pruned": str(int(result.n_pruned[s]))}
            if band is not None:
                row.update({"random min": number(band[0][s]), "random median": number(band[1][s]),
                            "random max": number(band[2][s])})
            row.update({name: number(values[s]) for name, values in curves.items()})
            rows.append(row)
        out += [f"### {md_heading(metric)}\n", markdown_table(rows, list(rows[0]))]
    return out


def _one_per_layer_table(result: OnePerLayer) -> list[str]:
    rows = []
    for l in range(len(result.loss_delta)):
        row = {"layer": str(int(result.layers[l]) + 1), "kept head": _name(result.layers, result.heads, l,
                                                                            int(result.kept[l])),
               "loss change": number(result.loss_delta[l]), "low": number(result.loss_low[l]),
               "high": number(result.loss_high[l])}
        row.update({metric: number(result.values[l, m]) for m, metric in enumerate(result.metrics)})
        rows.append(row)
    base = ", ".join(f"{metric} {number(result.base[m])}" for m, metric in enumerate(result.metrics))
    return ["## One head per layer (Michel et al. §3.3)\n",
            f"Each layer alone reduced to its most important head (chosen by importance on the selection data), "
            f"every other layer intact. Unmodified model: {base}. Loss change: mean over sentences, with its "
            "bootstrap interval over sentences.\n", markdown_table(rows, list(rows[0]))]


def _pruning_summary(result: PruningResult, record: RunRecord) -> list[str]:
    from probes.importance.pruning import PRUNING_RULE

    n_layers, n_heads = len(result.layers), len(result.heads)
    randoms = [c for c in result.curves if c.startswith("random:")]
    scores = [c for c in result.curves if c != "importance" and not c.startswith("random:")]
    sides = ", ".join(f"{m} ({'higher' if h else 'lower'} is better)" for m, h in zip(result.metrics,
                                                                                      result.higher_is_better))
    return [f"- objective: {md_code(result.objective)}; curves measured on {md_text(result.data)}; importance and orders "
            f"chosen on {md_text(result.selection)}",
            f"- {n_layers * n_heads} heads ({n_layers} layers x {n_heads} heads); {len(result.fractions)} steps of "
            f"{number(100 * result.step)}% of the heads; removed heads: {md_code(result.ablation)} ablation",
            f"- curves: {', '.join(md_code(c) for c in result.curves)} ({len(randoms)} random orders; score orders: "
            f"{', '.join(md_text(c) for c in scores) or 'none'}); importance order: {md_code(result.importance)}",
            f"- metrics: {sides}; each value is the mean over the sentences of {md_text(result.data)}",
            f"- {PRUNING_RULE}", f"- {BAND_RULE}", *_inputs(record)]


def pruning_findings(result: PruningResult) -> list[str]:
    """Pruning in short: per order the heads removable within the tolerance (against the random orders), and
    where the importance order lies against the random band."""
    metric = result.metrics[0]
    rows = {r["curve"]: r[f"removable ({metric})"] for r in _removable_rows(result)}
    orders = [c for c in result.curves if not c.startswith("random:")]
    randoms = [result.removable(c, metric, TOLERANCE, rule="base") for c in result.curves if c.startswith("random:")]
    found = [f"Heads removable before the {md_text(metric)} is worse than unpruned by more than {100 * TOLERANCE:g}%: "
             + "; ".join(f"{md_code(c)} order {rows[c]}" for c in orders)
             + (f"; random orders {number(min(randoms))} to {number(max(randoms))} ({len(randoms)} orders)."
                if randoms else ".")]
    if randoms and orders:
        positions = band_positions(result, orders[0], metric)[1:-1]
        better = "above" if result.higher_is_better[result.metrics.index(metric)] else "below"
        found.append(f"The {md_code(orders[0])} order is {better} the random band (better than every random order) at "
                     f"{int((positions == better).sum())} of {len(positions)} steps between nothing and every head "
                     f"pruned ({md_text(metric)}; orders chosen on {md_text(result.selection)}, measured on "
                     f"{md_text(result.data)}).")
    return [*found, _INDEXING]


def pruning_markdown(result: PruningResult, *, model: str, record: RunRecord) -> str:
    """``pruning.md``: the answers in short, what was computed, fraction removable per curve, the curves against the
    random band, one head per layer, and the curves."""
    removable = markdown_table(_removable_rows(result), ["curve", *[f"removable ({m})" for m in result.metrics]])
    parts = [f"# Pruning curves: {md_heading(model)}, {md_heading(result.objective)} objective on {md_heading(result.data)}\n",
             *opening(pruning_findings(result)),
             "## What was computed\n", *_pruning_summary(result, record), "",
             f"## Heads removable within {100 * TOLERANCE:g}%\n",
             f"The largest fraction of heads pruned such that it and every smaller step are no worse than the "
             f"unpruned value by more than {100 * TOLERANCE:g}% of it (an absolute {TOLERANCE:g} when it is 0; a "
             "better value always qualifies, a missing one never).\n",
             removable]
    others = [c for c in result.curves if not c.startswith("random:")]
    if others and any(c.startswith("random:") for c in result.curves):
        parts += ["## Against the random band\n",
                  *[f"- {band_summary(result, name, metric)}" for name in others for metric in result.metrics], ""]
    if result.one_per_layer is not None:
        parts += _one_per_layer_table(result.one_per_layer)
    parts += ["## Curves\n", "Random orders as their band (min, median, max over the orders); each order's own "
              "values are in `pruning.csv` (`PruningResult.to_pandas`).\n", *_curve_tables(result)]
    return "\n".join(parts)
