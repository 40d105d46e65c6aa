"""Rows of a probing run's tables from per-seed, per-sentence counts (no model, no files).

* :func:`parser_summary`: one parser's UAS / UUAS / control UAS / selectivity over seeds: mean and
  sd over seeds, and 95% bootstrap intervals over sentences of the seed mean (selectivity paired).
* :func:`compare_parsers`: paired tests between parsers (and of each parser against its control
  task), Holm-corrected over the table's comparisons.
* :func:`per_head_rows`: the per-head relation probes' best head per relation, chosen on selection
  data and reported on other data (or, mode ``same``, on the same data: optimistic, never tested),
  with mean +- sd over seeds, intervals, the test of the gain over the position-only probe, near
  ties, control accuracy and selectivity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.corpora.types import base_relation
from probes.heads.inference import correct_rows, near_ties, p_from_z, paired_z
from probes.heads.intervals import bootstrap_ci
from probes.heads.naming import DIRECTIONS, head_name
from probes.probing.controls import selectivity as floor_adjusted
from probes.probing.per_head import POOLED, PerHeadScores
from probes.probing.stats import align_units, mean_sd, paired_difference

__all__ = ["Units", "parser_summary", "compare_parsers", "per_head_rows", "COMPARISONS", "N_TIES_SHOWN"]

#: Per seed: ``(sentence ids, (n, 4) counts: UAS correct, UAS total, UUAS correct, UUAS total)``.
Units = tuple[list[str], npt.NDArray[np.int64]]
#: Pairs of parsers compared (when both ran), first minus second.
COMPARISONS: tuple[tuple[str, str], ...] = (
    ("Attn+Emb", "Distances+Emb"), ("Attn+Emb", "Attn"), ("Attn+Emb", "Attn+Emb, random-init model"),
    ("Attn", "right-branching"))
#: Near ties named in a Markdown cell (the CSV/JSON hold them all).
N_TIES_SHOWN = 3


def _stack(per_seed: Sequence[Units], ids: list[str], col: int) -> npt.NDArray[np.float64]:
    """``(n_seeds, len(ids))`` column ``col`` of each seed's counts, aligned on ``ids`` (0 where missing)."""
    out = np.zeros((len(per_seed), len(ids)))
    for k, (seed_ids, counts) in enumerate(per_seed):
        ia, ib = align_units(ids, seed_ids)
        out[k, ia] = counts[ib, col]
    return out


def _accuracy(per_seed: Sequence[Units], col: int) -> list[float]:
    return [float(c[:, col].sum() / c[:, col + 1].sum()) if c[:, col + 1].sum() else float("nan")
            for _, c in per_seed]


def parser_summary(task: Sequence[Units], control: Sequence[Units] | None) -> dict[str, Any]:
    """Scores of one parser over seeds (fractions): mean, sd over seeds, intervals of the seed mean."""
    ids = task[0][0]
    out: dict[str, Any] = {"n_seeds": len(task)}
    for name, col in (("uas", 0), ("uuas", 2)):
        out[name], out[f"{name}_sd"] = mean_sd(_accuracy(task, col))
        correct, total = _stack(task, ids, col).mean(0), _stack(task, ids, col + 1)[0]
        low, high = bootstrap_ci(correct, total) if total.sum() else (np.nan, np.nan)
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = float(low), float(high)
    nan = float("nan")
    out.update(control_uas=nan, control_uas_sd=nan, selectivity=nan, selectivity_sd=nan,
               selectivity_ci_low=nan, selectivity_ci_high=nan)
    if control:
        ctl = _accuracy(control, 0)
        out["control_uas"], out["control_uas_sd"] = mean_sd(ctl)
        out["selectivity"], out["selectivity_sd"] = mean_sd([a - c for a, c in zip(_accuracy(task, 0), ctl)])
        diff = paired_difference(_stack(task, ids, 0), _stack(control, ids, 0), _stack(task, ids, 1)[0])
        out["selectivity_ci_low"], out["selectivity_ci_high"] = diff["ci_low"], diff["ci_high"]
    return out


def compare_parsers(task: Mapping[str, Sequence[Units]], control: Mapping[str, Sequence[Units]],
                    testable: bool = True) -> tuple[list[dict[str, Any]], Any]:
    """Paired comparisons of the parsers' UAS on the evaluation sentences, Holm-corrected together.

    Rows: each pair of :data:`COMPARISONS` that ran (``a`` minus ``b``), then each parser against its
    own control task (``task`` minus ``control task``, i.e. its selectivity). Per-sentence counts are
    averaged over seeds (seeds paired by index); sentences are matched by id.

    Returns:
        ``(rows, correction)``; each row: ``a``, ``b``, ``difference``, ``ci_low``, ``ci_high``, ``z``,
        ``p``, ``p_holm``, ``significant``, ``n_sentences``.
    """
    pairs = [(a, b, task[a], task[b]) for a, b in COMPARISONS if a in task and b in task]
    pairs += [(name, f"{name} [control task]", task[name], control[name]) for name in task if name in control]
    rows = []
    for a, b, ua, ub in pairs:
        theirs = set(ub[0][0])
        ids = [i for i in ua[0][0] if i in theirs]
        total = _stack(ua, ids, 1)[0]
        d = paired_difference(_stack(ua, ids, 0), _stack(ub, ids, 0), total)
        rows.append({"a": a, "b": b, "difference": d["difference"], "ci_low": d["ci_low"], "ci_high": d["ci_high"],
                     "z": d["z"], "p": d["p"], "n_sentences": len(ids)})
    margins = np.asarray([r["difference"] for r in rows])
    adjusted, significant, correction = correct_rows(margins, np.asarray([r["p"] for r in rows]),
                                                     testable=np.full(len(rows), testable))
    for row, p, sig in zip(rows, adjusted, significant):
        row["p_holm"], row["significant"] = float(p), bool(sig)
    return rows, correction


# ---------------------------------------------------------------------------------- per-head probes
def _unit_matrix(scores: PerHeadScores, relation: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(correct (n_units, P), total (n_units,))`` of one relation, one row per unit (0 where absent)."""
    r = scores.relations.index(relation) if relation in scores.relations else -1
    n_probes = scores.correct.shape[1] * scores.correct.shape[2] + 1
    correct = np.zeros((len(scores.unit_correct), n_probes))
    total = np.zeros(len(scores.unit_correct))
    for u, (rel_ids, corr, tot) in enumerate(scores.unit_correct):
        hit = np.flatnonzero(rel_ids == r)
        if hit.size:
            correct[u], total[u] = corr[hit[0]], tot[hit[0]]
    return correct, total


def _pooled(per_seed: Sequence[PerHeadScores], relation: str) -> tuple[npt.NDArray[np.float64], ...]:
    """``(correct (S, n_units, P), total (n_units,))`` of a relation over seeds, units with words only."""
    mats = [_unit_matrix(s, relation) for s in per_seed]
    total = mats[0][1]
    keep = total > 0
    return np.stack([c[keep] for c, _ in mats]), total[keep]


def _count(per_seed: Sequence[PerHeadScores], relation: str) -> int:
    s = per_seed[0]
    return int(s.counts[s.relations.index(relation)]) if relation in s.relations else 0


def _argmax_choice(select: PerHeadScores, report: PerHeadScores, relation: str) -> dict[str, Any]:
    """Clark's argmax: best head and direction on the selection data, its accuracy on the report data."""
    amax_sel = select.argmax_accuracy[select.relations.index(relation)]
    d, al, ah = np.unravel_index(int(np.argmax(np.where(np.isnan(amax_sel), -1, amax_sel))), amax_sel.shape)
    rep = report.argmax_accuracy[report.relations.index(relation)]
    return {"argmax_head": head_name(int(al), int(ah)), "argmax_direction": DIRECTIONS[int(d)],
            "argmax_accuracy": float(rep[d, al, ah])}


def _one_relation(relation: str, select: Sequence[PerHeadScores], report: Sequence[PerHeadScores],
                  control: Sequence[PerHeadScores] | None, n_heads: int) -> dict[str, Any]:
    """The row of one relation: best head on ``select`` (seed-pooled), everything else on ``report``."""
    sel_c, sel_t = _pooled(select, relation)
    sel_acc = sel_c.sum((0, 1))[:-1] / max(sel_t.sum() * len(select), 1)  # (LH,) heads only
    best = int(np.argmax(sel_acc))  # ties: lowest layer, then head
    layer, head = divmod(best, n_heads)
    rep_c, total = _pooled(report, relation)  # (S, n, P), (n,)
    n = total.sum()
    acc_seeds = rep_c[:, :, best].sum(1) / n
    floor_seeds = rep_c[:, :, -1].sum(1) / n
    mean_c = rep_c.mean(0)
    low, high = bootstrap_ci(mean_c[:, best], total)
    z = paired_z((mean_c[:, best] - mean_c[:, -1])[:, None], total)[0]
    ties = near_ties(mean_c[:, :-1], total, best)
    row = {"relation": relation, "count": int(n), "head": head_name(layer, head),
           "select_accuracy": float(sel_acc[best]), "accuracy": float(acc_seeds.mean()),
           "accuracy_sd": mean_sd(acc_seeds)[1], "ci_low": float(low), "ci_high": float(high),
           "position_only": float(floor_seeds.mean()), "gain": float(acc_seeds.mean() - floor_seeds.mean()),
           "p": float(p_from_z(z)), "near_ties": [head_name(*divmod(int(t), n_heads)) for t in ties],
           **_argmax_choice(select[0], report[0], relation)}
    amax = report[0].argmax_accuracy[report[0].relations.index(relation)]
    row["argmax_accuracy_same_head"] = float(np.nanmax(amax[:, layer, head]))
    row.update(_control_columns(relation, best, rep_c, total, control))
    return row


def _control_columns(relation: str, best: int, rep_c: npt.NDArray[np.float64], total: npt.NDArray[np.float64],
                     control: Sequence[PerHeadScores] | None) -> dict[str, Any]:
    """Control accuracy of the chosen head, selectivity (interval: paired bootstrap), floor-adjusted selectivity."""
    nan = float("nan")
    out = {"control_accuracy": nan, "control_accuracy_sd": nan, "control_position_only": nan, "selectivity": nan,
           "selectivity_sd": nan, "selectivity_ci_low": nan, "selectivity_ci_high": nan,
           "selectivity_floor_adjusted": nan}
    if not control or _count(control, relation) == 0:
        return out
    ctl_c, ctl_t = _pooled(control, relation)
    if ctl_c.shape[1] != rep_c.shape[1]:
        return out
    n = total.sum()
    acc, floor = rep_c[:, :, best].sum(1) / n, rep_c[:, :, -1].sum(1) / n
    cacc, cfloor = ctl_c[:, :, best].sum(1) / n, ctl_c[:, :, -1].sum(1) / n
    diff = paired_difference(rep_c[:, :, best], ctl_c[:, :, best], total)
    out.update(control_accuracy=float(cacc.mean()), control_accuracy_sd=mean_sd(cacc)[1],
               control_position_only=float(cfloor.mean()), selectivity=float((acc - cacc).mean()),
               selectivity_sd=mean_sd(acc - cacc)[1], selectivity_ci_low=diff["ci_low"],
               selectivity_ci_high=diff["ci_high"],
               selectivity_floor_adjusted=float(floor_adjusted(acc, cacc, floor, cfloor).mean()))
    return out


def per_head_rows(select: Sequence[PerHeadScores], report: Sequence[PerHeadScores],
                  control: Sequence[PerHeadScores] | None, *, min_count: int, same_data: bool
                  ) -> tuple[list[dict[str, Any]], Any]:
    """Listed rows (best head per relation, ``ALL`` first) and the Holm correction over them.

    Args:
        select, report, control: per seed, the scores on the selection data, on the report data, and of
            the control-task twins on the report data.
        min_count: least report words for a relation to be listed (``root``, ``punct`` never listed).
        same_data: heads chosen on the report data itself (no test: optimistic).
    """
    n_heads = report[0].correct.shape[2]
    rows = []
    for rel in report[0].relations:
        n = _count(report, rel)
        if n == 0 or _count(select, rel) == 0:
            continue
        if rel != POOLED and (n < min_count or base_relation(rel) in ("root", "punct")):
            continue
        rows.append(_one_relation(rel, select, report, control, n_heads))
    rows.sort(key=lambda x: (x["relation"] != POOLED, -x["count"]))
    adjusted, significant, correction = correct_rows(
        np.asarray([r["gain"] for r in rows]), np.asarray([r["p"] for r in rows]),
        testable=np.full(len(rows), not same_data))
    for row, p, sig in zip(rows, adjusted, significant):
        row["p_holm"] = float(p)
        row["significant"] = "n/a (same data)" if same_data else ("yes" if sig else "no")
    return rows, correction


def per_head_full(report: Sequence[PerHeadScores], select: Sequence[PerHeadScores],
                  control: Sequence[PerHeadScores] | None) -> list[dict[str, Any]]:
    """Every relation x head: seed-mean accuracy on the report data (and on the selection data, and control)."""
    def acc(per_seed: Sequence[PerHeadScores] | None, rel: str) -> tuple[Any, Any]:
        if not per_seed or _count(per_seed, rel) == 0:
            return None, None
        idx = [s.relations.index(rel) for s in per_seed]
        return (np.mean([s.accuracy[i] for s, i in zip(per_seed, idx)], axis=0),
                float(np.mean([s.floor_accuracy[i] for s, i in zip(per_seed, idx)])))

    out = []
    for rel in report[0].relations:
        if _count(report, rel) == 0:
            continue
        (a, floor), (sa, _), (ca, cfloor) = acc(report, rel), acc(select, rel), acc(control, rel)
        amax = report[0].argmax_accuracy[report[0].relations.index(rel)]
        n_layers, n_heads = a.shape
        for layer in range(n_layers):
            for head in range(n_heads):
                out.append({"relation": rel, "count": _count(report, rel), "layer": layer + 1, "head": head + 1,
                            "head_name": head_name(layer, head), "accuracy": float(a[layer, head]),
                            "select_accuracy": None if sa is None else float(sa[layer, head]),
                            "position_only": floor, "argmax_dep_to_head": float(amax[0, layer, head]),
                            "argmax_head_to_dep": float(amax[1, layer, head]),
                            "control_accuracy": None if ca is None else float(ca[layer, head]),
                            "control_position_only": cfloor,
                            "selectivity": None if ca is None else float(a[layer, head] - ca[layer, head])})
    return out
