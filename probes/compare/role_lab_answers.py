"""(i) The role lab's five short answers (issue 39, point 8), read off the tables of a
:class:`~probes.compare.role_lab_types.RoleLabComparison`: :func:`answers`.

Each answer is 2-4 sentences and at most :data:`MAX_CHARS` characters: the finding with its numbers, the test and its
p-value it rests on (never intervals overlapping), and what it cannot tell. Layers and heads are 1-based. Where a
table is empty (a cell not run), the answer says what is missing instead of guessing.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from probes.compare.role_lab_types import (
    ALPHA,
    INDUCTION,
    PREVIOUS,
    FunctionRow,
    LabCell,
    RoleLabComparison,
)

__all__ = ["answers", "main_cell", "MAX_CHARS", "QUESTIONS"]

#: The longest answer.
MAX_CHARS = 600
#: The five questions, in answer order.
QUESTIONS: tuple[str, ...] = (
    "Does initialisation make heads differ, and what decides?",
    "Ensemble or division of labour?",
    "Capacity: what do more heads buy?",
    "When do roles form?",
    "How does it carry to MiniLM and SmolLM2?",
)


def _p(p: float) -> str:
    """``p = 0.031`` (``p < 0.001``; ``no test`` for NaN); ``[4:]`` drops the ``p = ``."""
    if not np.isfinite(p):
        return "no test"
    return "p < 0.001" if p < 0.001 else f"p = {p:.3g}"


def _q(p: float) -> str:
    """A p-value's number alone (``<0.001``; ``none`` for NaN)."""
    if not np.isfinite(p):
        return "none"
    return "<0.001" if p < 0.001 else f"{p:.3g}"


def _compose(required: Sequence[str], optional: Sequence[str] = ()) -> str:
    """The required sentences, then optional ones while the answer stays within 4 sentences and MAX_CHARS."""
    text = " ".join(required)
    count = len(required)
    for extra in optional:
        if count < 4 and len(text) + 1 + len(extra) <= MAX_CHARS:
            text, count = f"{text} {extra}", count + 1
    return text if len(text) <= MAX_CHARS else text[:MAX_CHARS - 3].rstrip() + "..."


def _short(role: str) -> str:
    return role.removeprefix("std:").replace("_", "-")


def _list(values: Sequence[int], most: int = 6) -> str:
    shown = ", ".join(str(v + 1) for v in values[:most])
    return shown + (", ..." if len(values) > most else "") if values else "none"


def main_cell(comparison: RoleLabComparison) -> LabCell | None:
    """The cell the answers lead with: induction, one model of 4 heads (else the most), independent, no dropout."""
    chosen = [c for c in comparison.cells if c.kind == "lab" and c.task == "induction" and c.members == 1
              and c.init == "independent" and c.attention_dropout == 0]
    if not chosen:
        return None
    four = [c for c in chosen if c.heads == 4]
    return four[0] if four else max(chosen, key=lambda c: c.heads)


def _initialisation(comparison: RoleLabComparison) -> str:
    same = [r for r in comparison.symmetry if r.starts_identical and r.stays_identical]
    broke = [r for r in comparison.symmetry if r.starts_identical and not r.stays_identical]
    steps = max((r.n_steps for r in same), default=0)
    first = (f"Identical heads stay exactly identical ({', '.join(r.cell for r in same) or 'no cell'}: distance 0 at "
             f"{max((r.n_checkpoints for r in same), default=0)} checkpoints"
             + (f" and {steps} steps" if steps else "") + "); dropout and noise break the tie "
             + (f"(param distance up to {max(r.max_param for r in broke):.3g})." if broke else "(none run)."))
    # what the heads compute first (the attention distance), the parameters where no attention was measured
    tests = ([t for t in comparison.growth_tests if t.distance == "attention" and np.isfinite(t.p)]
             or [t for t in comparison.growth_tests if t.distance == "param"])
    if not tests:
        return _compose([first, "No pair of noise sizes with distances at every step was run, so what decides is "
                                "not tested; staying identical is a measurement, not a test."])
    a = tests[0]
    rates = "; ".join(f"layer {t.layer + 1} {t.rate_a:.3g} vs {t.rate_b:.3g} per step, {_p(t.p_holm)}" for t in tests)
    second = (f"Linear-regime growth of the log {a.distance} distance, noise {a.noise_a:g} vs {a.noise_b:g} "
              f"(permutation test, {a.n_a} + {a.n_b} seeds, Holm): {rates}.")
    onset = "; ".join(f"layer {t.layer + 1} {_step(t.onset_a)} vs {_step(t.onset_b)}" for t in tests)
    differs = [t for t in tests if np.isfinite(t.p_holm) and t.p_holm < ALPHA]
    third = (f"The rate depends on the noise size in layer {', '.join(str(t.layer + 1) for t in differs)} (onset "
             f"steps {onset})." if differs else
             f"No test finds a rate that depends on the noise, and the smaller noise starts later (onset steps "
             f"{onset}): the unstable symmetric state decides.")
    cannot = "A p >= 0.05 does not prove equal rates."
    return _compose([first, second, third, cannot])


def _verdict_word(row: FunctionRow) -> str:
    return _verdict(row.relative, row.p_holm)


def _top_role(comparison: RoleLabComparison, cell: str, layer: int) -> tuple[str, float]:
    """The role with the most carriers per seed in a layer of a cell, and that mean."""
    counts: dict[str, list[int]] = {}
    for row in comparison.roles:
        if row.cell == cell and row.layer == layer:
            counts.setdefault(row.role, []).append(row.n_carriers)
    if not counts:
        return "", float("nan")
    role = max(counts, key=lambda r: (np.mean(counts[r]), r in (PREVIOUS, INDUCTION)))
    return role, float(np.mean(counts[role]))


def _division(comparison: RoleLabComparison) -> str:
    cell = main_cell(comparison)
    rows = [r for r in comparison.function if cell is not None and r.cell == cell.name]
    if cell is None or not rows:
        return _compose(["No independent induction cell with tests of function was run, so ensemble against "
                         "division of labour is not answered.", "Nothing here can tell either way."])
    parts = []
    for r in rows:
        role, mean = _top_role(comparison, cell.name, r.layer)
        parts.append(f"layer {r.layer + 1} {r.relative:+.2f} ({_p(r.p_t)}, Holm {_q(r.p_holm)}: {_verdict_word(r)}; "
                     f"{mean:.1f} {_short(role)} carriers a seed)")
    n_tests = sum(1 for f in comparison.function if np.isfinite(f.p_t))
    first = (f"In {cell.name} ({cell.heads} heads, {rows[0].n_seeds} seeds) the relative pair interaction (t test "
             f"over seeds, Holm over {n_tests} tests) is " + ", ".join(parts) + ".")
    words = {_verdict_word(r) for r in rows}
    named = {"additive not rejected": "division of labour (additive)", "redundant": "redundancy",
             "saturating": "saturation"}
    differ = ("The layers differ: " + ", ".join(f"{named[_verdict_word(r)]} in layer {r.layer + 1}" for r in rows)
              + ".") if len(words) > 1 else ""
    cannot = (f"A p >= {ALPHA} does not prove additivity, and last-step ablations cannot tell how heads got "
              "there.")
    extra = [e for e in [differ, _ensemble_sentence(comparison)] if e]
    return _compose([first, cannot], extra)


def _ensemble_sentence(comparison: RoleLabComparison) -> str:
    if not comparison.ensemble:
        return ""
    e = comparison.ensemble[0]
    return (f"The literal ensemble ({e.members} x {e.heads // e.members} heads) ends at loss {e.loss_ensemble:.3g}, "
            f"one {e.heads}-head model at {e.loss_reference:.3g} (permutation test over seeds, {_p(e.p)}).")


def _capacity(comparison: RoleLabComparison) -> str:
    rows = [r for r in comparison.capacity if r.task == "induction"] or list(comparison.capacity)
    if not rows:
        return _compose(["No capacity cells were run.", "Nothing here can tell what more heads buy."])
    losses = ", ".join(f"{r.heads} head{'' if r.heads == 1 else 's'} {r.loss:.3g}" for r in rows)
    heads = {r.cell: r.heads for r in rows}
    tests = ", ".join(f"{r.heads} vs {heads.get(r.compared_with, '?')} {_p(r.p_holm)}" for r in rows if r.compared_with)
    first = (f"Final held-out loss on {rows[0].task}: {losses} (each vs the next smaller count, exact permutation "
             f"test over seeds, Holm: {tests or 'no pair'}).")
    roles = []
    for cell in dict.fromkeys(r.cell for r in comparison.role_capacity):
        mine = [r for r in comparison.role_capacity if r.cell == cell]
        carried = [_short(r.role) for r in mine if r.seeds_with_carrier]
        roles.append(f"{mine[0].heads} heads ({mine[0].relation}): {', '.join(carried) or 'none'}")
    n_roles = comparison.role_capacity[0].n_roles if comparison.role_capacity else 0
    second = (f"Roles task ({n_roles} roles), roles with a carrier in some seed: " + "; ".join(roles) + ".") \
        if roles else ""
    cannot = ("Roles cells have 3 seeds, so their role losses are described, not tested (smallest exact p 0.1); a "
              "loss difference does not say which heads changed.")
    return _compose([first, second, cannot] if second else [first, cannot])


def _formation(comparison: RoleLabComparison) -> str:
    cell = main_cell(comparison)
    test = next((t for t in comparison.formation_tests if cell is not None and t.cell == cell.name), None)
    if cell is None or test is None:
        return _compose(["No independent induction cell was run, so when roles form is not answered.",
                         "Nothing here can tell."])
    rows = [r for r in comparison.formation if r.cell == cell.name]
    before = float(np.nanmedian([r.loss_before for r in rows]))
    after = float(np.nanmedian([r.loss_after for r in rows]))
    first = (f"In {cell.name} the held-out loss drops most at a median step {test.phase_step:.0f} (median "
             f"{before:.2f} -> {after:.2f} nats over that checkpoint interval).")
    untied = test.previous_first + test.induction_first
    tested = (f"exact sign test over the {untied} untied seeds, {_p(test.p)}, Holm {_q(test.p_holm)}"
              if untied else "no untied seed: no test")
    second = (f"The previous-token head reaches the threshold first in {test.previous_first} of {test.n_seeds} seeds, "
              f"the induction head first in {test.induction_first}, at the same checkpoint in {test.ties} ({tested}).")
    cannot = "Steps are only as fine as the checkpoints: heads that form within one interval count as ties."
    return _compose([first, second, cannot])


def _step(value: float) -> str:
    """A median onset step, or ``none`` when the seeds' distances never reached the threshold."""
    return f"{value:.0f}" if np.isfinite(value) else "none"


def _pretrained_roles(comparison: RoleLabComparison, model: str) -> str:
    found = {r.role: r for r in comparison.pretrained_roles if r.model == model}
    parts = [f"{found[role].n_carriers} {_short(role)} (layers {_list(found[role].layers, 4)})"
             for role in (PREVIOUS, INDUCTION) if role in found]
    total = next(iter(found.values())).n_heads if found else 0
    return f"{model} {' and '.join(parts) or 'no'} carriers of {total} heads"


def _pretrained(comparison: RoleLabComparison) -> str:
    models = list(dict.fromkeys(r.model for r in comparison.pretrained_roles))
    if not models:
        return _compose(["No pretrained model was probed.", "Nothing here can tell how the lab carries over."])
    first = "On the induction probe: " + "; ".join(_pretrained_roles(comparison, m) for m in models) + "."
    second = ""
    for row in comparison.pretrained_function:
        effects = [e for e in comparison.pretrained_effects if e.model == row.model]
        shown = ", ".join(f"{e.name} {e.effect:.2f}" for e in effects[:3])
        if not row.relative_per_layer:  # single heads only: no pair was ablated
            second = (f"{row.model}'s top induction heads cost {shown} nats alone ({row.n_heads_with_effect} heads "
                      "cost at least 0.01); its pairs were not ablated, so redundancy there is not tested.")
            break
        second = (f"{row.model}'s top induction heads cost {shown} nats alone; its {row.n_heads_with_effect} heads "
                  f"with effect interact by {row.relative:+.2f} relative ({_verdict(row.relative, row.p)}; sign-flip "
                  f"test over {len(row.relative_per_layer)} layers, not seeds: {_p(row.p)}).")
        break
    cannot = ("The probe is repeated random tokens, not text, and one model has no seeds: it cannot tell whether "
              "these heads are arbitrary.")
    return _compose([first, second, cannot] if second else [first, cannot])


def _verdict(relative: float, p: float) -> str:
    if not np.isfinite(p) or p >= ALPHA:
        return "additive not rejected"
    return "redundant" if relative > 0 else "saturating"


def answers(comparison: RoleLabComparison) -> tuple[str, ...]:
    """The five short answers (:data:`QUESTIONS`), each 2-4 sentences and at most :data:`MAX_CHARS` characters, with
    its numbers, its test and p-value, and what it cannot tell."""
    return (_initialisation(comparison), _division(comparison), _capacity(comparison), _formation(comparison),
            _pretrained(comparison))
