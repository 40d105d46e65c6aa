"""Q4: are the same heads chosen on two datasets (the selection and report sides of one run, or two corpora)?

Per relation listed on both sides, nested relations left out (:data:`NESTED_RULE`), the best head on each side
(argmax of accuracy over direction, layer and head, ties as :meth:`HeadScores.best`: lower layer, head,
direction) and Spearman's rho of the D*L*H accuracies between the sides. ``same_head`` compares the (layer,
head) of the two best heads (a head chosen in the other direction counts as the same head); ``rho`` is the mean
over relations, its interval a bootstrap over relations.

A cross-side rho is attenuated by the noise of each side's accuracies (a few words of a relation rank heads
noisily even when the two sides rank the same true accuracies), so each relation's rho is also corrected for
reliability (Spearman's correction for attenuation, seed_methods.md §g): rho / sqrt(r_A r_B), r_A the split-half
rho within side A (:data:`RELIABILITY_RULE`), computed from the per-sentence counts the leaderboard keeps for its
bootstrap (``HeadScores.units``). Both the raw and the corrected mean are reported; a corrected rho beyond 1 is
capped at 1 (it can only come from sampling noise) and counted.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.inputs import board_of
from probes.compare.stats import interval, spearman_rows
from probes.compare.types import Consistency, Unit
from probes.heads.profile import listed_relations

__all__ = ["ConsistencyDraws", "consistency", "model_consistency", "relation_rhos", "unnested", "split_half",
           "spearman_brown", "corrected_rho", "NESTED_RULE", "RELIABILITY_RULE"]

#: Which relations Q4 compares (a relation nested in another counts the same words twice).
NESTED_RULE = ("nested relations left out: the pooled ALL and ALL-nopunct rows always (they hold every other "
               "relation's words; ALL-nopunct sits inside ALL), and a pooled X:* row whenever X or one of its "
               "subtypes X:sub is listed (the pool repeats their words); the plain X and its subtypes, which share "
               "no word, are kept")
#: How a side's reliability is measured.
RELIABILITY_RULE = ("reliability of a side: its sentences split into two halves (alternate documents when the "
                    "sentences carry document ids, else alternate sentences), Spearman's rho r of the D*L*H head "
                    "accuracies between the halves, Spearman-Brown corrected to the whole side: 2r / (1 + r); "
                    "corrected rho = rho / sqrt(r_A r_B) where both are > 0, capped to [-1, 1]")


@dataclass(frozen=True)
class ConsistencyDraws:
    """One comparison of two sides: the row and each relation's rho (``rhos`` by relation, for paired tests),
    and its reliability-corrected rho (``corrected``, NaN where a side's reliability is not > 0)."""

    row: Consistency
    rhos: dict[str, float]
    corrected: dict[str, float] = field(default_factory=dict)


def unnested(relations: Sequence[str]) -> list[str]:
    """``relations`` without nested ones (:data:`NESTED_RULE`), in their order; sided names (``amod (head
    left)``) are nested only with names of the same side."""
    from probes.analysis.relations import ALL, ALL_NOPUNCT, plain_name

    split = [(plain_name(r), r[len(plain_name(r)):]) for r in relations]  # (plain name, side suffix or "")
    members = {(p.split(":", 1)[0], side) for p, side in split if not p.endswith(":*")}
    return [r for r, (p, side) in zip(relations, split)
            if p not in (ALL, ALL_NOPUNCT) and not (p.endswith(":*") and (p[:-2], side) in members)]


def relation_rhos(first: Any, second: Any, relations: Sequence[str]) -> tuple[dict[str, float], dict[str, bool]]:
    """``({relation: rho}, {relation: same best head})`` between two ``HeadScores`` of the same heads."""
    rhos, same = {}, {}
    for rel in relations:
        a = first.accuracy()[..., first.index(rel)].reshape(-1)  # (D*L*H,)
        b = second.accuracy()[..., second.index(rel)].reshape(-1)
        rhos[rel] = float(spearman_rows(a, b)) if np.isfinite(a).all() and np.isfinite(b).all() else float("nan")
        pick_a, pick_b = first.best(rel), second.best(rel)
        same[rel] = (first.layers[pick_a[1]], first.heads[pick_a[2]]) == (second.layers[pick_b[1]],
                                                                          second.heads[pick_b[2]])
    return rhos, same


def _halves(units: Any) -> npt.NDArray[np.bool_]:
    """``(n_units,)`` True for the units of the first half (:data:`RELIABILITY_RULE`)."""
    docs = tuple(getattr(units, "documents", ()) or ())
    order = {d: k for k, d in enumerate(dict.fromkeys(d for d in docs if d))}
    if len(order) >= 2 and all(docs):
        return np.array([order[d] % 2 == 0 for d in docs], dtype=bool)
    return np.arange(units.n_units) % 2 == 0


def spearman_brown(r: float) -> float:
    """The reliability of the whole from the correlation ``r`` of its two halves: 2r / (1 + r) (NaN for r <= -1
    or NaN)."""
    return float(2 * r / (1 + r)) if np.isfinite(r) and r > -1 else float("nan")


def split_half(scores: Any, relations: Sequence[str]) -> dict[str, float]:
    """``{relation: Spearman-Brown split-half reliability}`` of one side's head accuracies (``HeadScores`` with
    per-sentence ``units``; NaN everywhere without them, or where a half has no word of the relation)."""
    units = getattr(scores, "units", None)
    if units is None or units.n_units < 2:
        return {rel: float("nan") for rel in relations}
    first = _halves(units)[units.unit_of_row()]  # (nnz,) the half of each row
    out = {}
    for rel in relations:
        rows = units.relation == scores.index(rel)  # (nnz,)
        sides = []  # (D*L*H,) per half that holds words of the relation
        for half in (rows & first, rows & ~first):
            total = int(units.total[half].sum())
            if total:
                sides.append(units.correct[half].sum(axis=0).reshape(-1) / total)
        out[rel] = spearman_brown(float(spearman_rows(*sides))) if len(sides) == 2 else float("nan")
    return out


def corrected_rho(rho: float, r_first: float, r_second: float) -> tuple[float, bool]:
    """``(rho / sqrt(r_first r_second) capped to [-1, 1], capped?)``; NaN unless both reliabilities are > 0."""
    if not (np.isfinite(rho) and np.isfinite(r_first) and np.isfinite(r_second) and r_first > 0 and r_second > 0):
        return float("nan"), False
    value = rho / np.sqrt(r_first * r_second)
    return float(np.clip(value, -1.0, 1.0)), bool(abs(value) > 1)


def _mean_draws(values: npt.NDArray[np.float64], n_resamples: int, seed: int) -> npt.NDArray[np.float64]:
    """``(R,)`` mean of ``values`` ``(K,)`` over resampled relations (NaN values ignored)."""
    idx = np.random.default_rng(seed).integers(0, len(values), size=(n_resamples, len(values)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a draw of NaN relations only: NaN
        return np.nanmean(values[idx], axis=1)


def _mean_row(values: npt.NDArray[np.float64], n_resamples: int, seed: int) -> tuple[float, float, float]:
    """``(mean, low, high)`` of ``values`` ``(K,)`` over relations (NaN ignored), interval over relations."""
    if not np.isfinite(values).any():
        return float("nan"), float("nan"), float("nan")
    low, high = interval(_mean_draws(values, n_resamples, seed))
    return float(np.nanmean(values)), float(low), float(high)


def _nanmean(values: Sequence[float]) -> float:
    """Mean of the finite ``values`` (NaN without one)."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def consistency(model: str, first: tuple[str, Any], second: tuple[str, Any], relations: Sequence[str], *,
                n_resamples: int = 1000, seed: int = 0) -> ConsistencyDraws | None:
    """Q4 between two named sides ``(name, HeadScores)`` over ``relations`` present on both, nested ones left out
    (None without any)."""
    names = [r for r in unnested(relations) if r in first[1].relations and r in second[1].relations
             and first[1].count(r) > 0 and second[1].count(r) > 0]
    if not names:
        return None
    rhos, same = relation_rhos(first[1], second[1], names)
    rel_a, rel_b = split_half(first[1], names), split_half(second[1], names)
    fixed = {r: corrected_rho(rhos[r], rel_a[r], rel_b[r]) for r in names}
    rho, low, high = _mean_row(np.array([rhos[r] for r in names]), n_resamples, seed)
    c_rho, c_low, c_high = _mean_row(np.array([fixed[r][0] for r in names]), n_resamples, seed)
    row = Consistency(model=model, first=first[0], second=second[0], n_relations=len(names),
                      same_head=float(np.mean([same[r] for r in names])), rho=rho, low=low, high=high,
                      relations=tuple(names), rho_corrected=c_rho, corrected_low=c_low, corrected_high=c_high,
                      reliability_first=_nanmean([rel_a[r] for r in names]),
                      reliability_second=_nanmean([rel_b[r] for r in names]),
                      n_corrected=sum(np.isfinite(fixed[r][0]) for r in names),
                      n_capped=sum(fixed[r][1] for r in names))
    return ConsistencyDraws(row, rhos, {r: fixed[r][0] for r in names})


def model_consistency(units: Sequence[Unit], model: str, datas: Sequence[str], *, n_resamples: int = 1000,
                      seed: int = 0) -> list[ConsistencyDraws]:
    """Q4 for one model: (a) each data's selection side vs its report side, (b) every pair of data, report side
    vs report side (relations listed in both boards' rows)."""
    boards = {d: board_of(units, model, d) for d in datas}
    boards = {d: b for d, b in boards.items() if b is not None}
    out = []
    for board in boards.values():
        if board.select is not None:
            found = consistency(model, (board.selected_on, board.select), (board.reported_on, board.report),
                                listed_relations(board), n_resamples=n_resamples, seed=seed)
            out.append(found)
    names = list(boards)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            theirs = set(listed_relations(boards[b]))
            shared = [r for r in listed_relations(boards[a]) if r in theirs]
            out.append(consistency(model, (boards[a].reported_on, boards[a].report),
                                   (boards[b].reported_on, boards[b].report), shared, n_resamples=n_resamples,
                                   seed=seed))
    return [c for c in out if c is not None]
