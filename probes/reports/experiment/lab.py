"""The training lab's section of the experiment report: a short answer per lab question (a)-(d) with its numbers
(the report opens with them), and ``## Training lab`` with, per question, the rule it follows, what the evidence
cannot tell, its figures and tables; and ``tables/lab_*.csv``.

Everything comes from ``comparison.lab`` (:class:`~probes.compare.lab_types.LabTables`); numbers go through
:func:`probes.reports.experiment.text.fmt`, except distances between heads, printed with 3 significant digits
(:func:`sig`: the saddle's distances start near 1e-6, which 3 decimals would print as 0); layers and heads are 1-based in everything printed here (0-based in
the tables' fields) and every table's footer says so, with where heads were selected, how its intervals were made
and how many tests it holds. The blocks use the report's own block kinds and :class:`Table` type (passed in by
:mod:`probes.reports.experiment.report`, which imports this module).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from probes.compare.lab_types import LAB_TABLES, NOT_WITHIN, LabTables
from probes.heads.inference import ALPHA
from probes.heads.naming import INDEXING_NOTE
from probes.reports.experiment.text import fmt
from probes.reports.prose import clauses

__all__ = ["lab_blocks", "draw_lab", "write_lab_csv", "lab_answers", "lab_table", "sig", "division_verdict_text", "OLD_GROWTH",
           "LAB_QUESTIONS", "LAB_LIMITS", "UNTESTED_OLD"]

#: The lab's questions, as the report asks them.
LAB_QUESTIONS: dict[str, str] = {
    "a": "Does random initialisation make heads differ?",
    "b": "Ensemble or division of labour?",
    "c": "Capacity: what do 1, 2, 4 and 8 heads at a fixed hidden size give?",
    "d": "When do roles form?",
}
#: What each answer's evidence cannot tell.
LAB_LIMITS: dict[str, str] = {
    "a": ("exactly 0 is measured at the saved checkpoints only, for this optimiser (AdamW) and these dropouts; a "
          "few seeds of one small architecture on one corpus; the growth rate is the peak local slope of the log "
          "excess distance, a fitted slope and not a measured eigenvalue of the saddle; on log-spaced checkpoints "
          "a window of 3 spans steps s to 4s, so it cannot resolve a rate faster than their spacing (symmetry_steps "
          "measures every step); the attention distance also grows when heads only sharpen, the parameter distance "
          "does not"),
    "b": ("one distance (word-level attention maps) on one held-out sample; 'no difference found' between D_cross "
          "and D_within is what an ensemble of alike heads predicts, but also a division of labour whose roles recur "
          "exactly, so distances cannot tell those two apart (function can: the role lab's ablations, kind = "
          "\"role-lab\"); a layer of H heads has C(2H, H) / 2 regroupings (3 for 2 heads, too few for any p below "
          "0.05; 35 for 4 heads, p at least 0.029); layers are tested without correction across layers or cells; "
          "the shuffled-layers null of D_match mostly tests whether the layers differ"),
    "c": ("more heads at a fixed hidden size means smaller heads (head size = hidden / heads), so heads and head "
          "size change together; one training length; head counts are from one held-out half of the atlas data"),
    "d": ("checkpoints are log-spaced, so a first step is only known to lie after the checkpoint before it; "
          "role counts at a checkpoint come from an atlas on that checkpoint, so roles are looked for only where "
          "checkpoint models were exposed"),
}
_INTERVALS = {
    "final_loss": "range over seeds (min to max), not a confidence interval",
    "verdicts": "none (largest distance over every checkpoint, layer, pair of heads and seed)",
    "growth": "range over seeds of the per-seed peak rates (min to max), not a confidence interval",
    "symmetry": "range over seeds (min to max)",
    "division": ("D_match and D_null: the widest of the seed pairs' 95% percentile bootstrap intervals over "
                 "sentences (over label permutations for the shuffle null) and the pairs' range; D_within and the "
                 "identity share: range over seeds / pairs; descriptive only, no verdict is read off them"),
    "capacity": "range over seeds (min to max)",
    "formation": "none (first checkpoint step)",
}
_TESTS = {
    "capacity": ("the specialised counts come from each model's head tests (paired test against the best baseline, "
                 "Holm over the model's heads, alpha 0.05), not part of the report's family"),
    "formation": "the relation steps come from each checkpoint model's head tests (Holm within the model)",
    "division": ("per layer a permutation test of D_cross - D_within over regroupings of the heads (pairs of seeds "
                 "combined by an intersection-union test: the largest p), 0.05 per layer, no correction across "
                 "layers or cells; beside it D_match against the shuffled-layers null (label permutations, the "
                 "largest p over pairs) and the identity share (exact binomial, one-sided); none of them in the "
                 "report's family"),
    "growth": ("none (a measured rate; whether it depends on the noise size is tested in the role lab, kind = "
               "\"role-lab\")"),
}


def sig(value: Any, low: Any = None, high: Any = None) -> str:
    """A distance with 3 significant digits (``n/a`` for NaN or None), with `` [low, high]`` when given."""
    def one(v: Any) -> str:
        return "n/a" if v is None or not math.isfinite(float(v)) else f"{float(v):.3g}"
    return one(value) if low is None and high is None else f"{one(value)} [{one(low)}, {one(high)}]"


def _sig(value: Any, low: Any = None, high: Any = None) -> tuple[str, Any]:
    return sig(value, low, high), value


def _cell(kind: str, value: Any, low: Any = None, high: Any = None) -> tuple[str, Any]:
    return fmt(value, kind, low, high), value


def _step(value: int, last: int | None = None) -> tuple[str, Any]:
    if value == NOT_WITHIN:
        return (f"not within {last} steps" if last is not None else "not within the steps looked at"), None
    return str(value), value


#: The verdict printed for a division row saved before the lab's tests (its verdict came from intervals).
UNTESTED_OLD = "untested (saved before the tests: run the experiment again, which re-uses its units)"


#: What (a) says of growth rows saved before the peak rate (a fit across warm-up and saturation).
OLD_GROWTH = ("The growth rates saved with this comparison are least-squares fits across the whole rise, not the peak "
              "local rate, and are not reported: run the experiment again (its units are re-used).")


def division_verdict_text(row: Any) -> str:
    """A division row's verdict as printed: its tested verdict, or :data:`UNTESTED_OLD` for a row saved before the
    tests."""
    return str(row.verdict) if getattr(row, "tested", False) else UNTESTED_OLD


def _measured_on(row: Any) -> str:
    """Where a growth row's rate was measured (a row saved before the peak rate says so)."""
    if not row.source:
        return "a fit across the whole rise (saved before the peak rate; not the local rate)"
    return row.source + (f", window {row.window}" if row.window else "")


def _layer_tests(row: Any) -> str:
    """``layer 1: +0.012 (p 0.029); ...`` (1-based), or why untested."""
    parts = [f"layer {k + 1}: {d:+.3g} (p {fmt(p, 'p')})"
             for k, (d, p) in enumerate(zip(row.cross_minus_within, row.p_cross)) if math.isfinite(p)]
    return "; ".join(parts) or (row.cross_test or "-")


def _columns(table: str) -> list[tuple[str, Callable[[Any], tuple[str, Any]]]]:
    """The printed columns of one lab table (layers 1-based)."""
    def text(name: str) -> Callable[[Any], tuple[str, Any]]:
        return lambda r: (str(getattr(r, name)), str(getattr(r, name)))

    layer = ("layer (1-based)", lambda r: (str(r.layer + 1), r.layer + 1))
    columns: dict[str, list[tuple[str, Callable[[Any], tuple[str, Any]]]]] = {
        "final_loss": [("cell", text("cell")), ("heads", lambda r: _cell("count", r.heads)), ("init", text("init")),
                       ("attention dropout", lambda r: _cell("value", r.attention_dropout)),
                       ("seeds", lambda r: _cell("count", r.n_seeds)), ("last step", lambda r: _cell("count", r.last_step)),
                       ("held-out loss [range]", lambda r: _cell("value", r.loss, r.low, r.high)),
                       ("unigram", lambda r: _cell("value", r.unigram))],
        "verdicts": [("cell", text("cell")), ("attention dropout", lambda r: _cell("value", r.attention_dropout)),
                     ("seeds", lambda r: _cell("count", r.n_seeds)),
                     ("checkpoints", lambda r: _cell("count", r.n_checkpoints)),
                     ("max parameter distance", lambda r: (f"{r.max_param:.3g}", r.max_param)),
                     ("max attention distance", lambda r: (f"{r.max_attention:.3g}", r.max_attention)),
                     ("stays identical (measured)", lambda r: ("yes" if r.stays_identical else "no", r.stays_identical)),
                     ("predicted", lambda r: ("yes" if r.expected else "no", r.expected)), ("reason", text("reason"))],
        "growth": [("cell", text("cell")), layer, ("distance", text("distance")),
                   ("measured on", lambda r: (_measured_on(r), r.source)),
                   ("seeds", lambda r: _cell("count", r.n_seeds)),
                   ("rate per step [range]", lambda r: (f"{r.rate:.4g} [{r.low:.4g}, {r.high:.4g}]", r.rate)),
                   ("doubling (steps)", lambda r: _cell("seconds", r.doubling)), ("min R²", lambda r: _cell("value", r.r2)),
                   ("window per seed", lambda r: (", ".join(f"seed {k}: {v}" for k, v in r.windows.items()), ""))],
        "symmetry": [("cell", text("cell")), layer, ("step", lambda r: _cell("count", r.step)),
                     ("attention [range]", lambda r: _sig(r.attention, r.attention_low, r.attention_high)),
                     ("parameters [range]", lambda r: _sig(r.param, r.param_low, r.param_high))],
        "division": [("cell", text("cell")), ("heads", lambda r: _cell("count", r.heads)),
                     ("seed pairs", lambda r: _cell("count", r.n_pairs)),
                     ("D_within [seeds]", lambda r: _sig(r.d_within, r.d_within_low, r.d_within_high)),
                     ("D_cross", lambda r: _sig(r.d_cross)),
                     ("D_cross - D_within per layer (p)", lambda r: (_layer_tests(r), _layer_tests(r))),
                     ("regroupings", lambda r: _cell("count", r.n_regroupings)),
                     ("D_self", lambda r: _sig(r.d_self)),
                     ("D_match [sentences]", lambda r: _sig(r.d_match, r.d_match_low, r.d_match_high)),
                     ("D_null [sentences]", lambda r: _sig(r.d_null, r.d_null_low, r.d_null_high)),
                     ("D_match vs null: p (draws)", lambda r: (f"{fmt(r.p_match, 'p')} ({r.n_null_draws})",
                                                               r.p_match)),
                     ("identity share [pairs]", lambda r: _cell("fraction", r.identity_share, r.identity_low,
                                                                r.identity_high)),
                     ("kept / matched (binomial p)", lambda r: (f"{r.identity_kept} / {r.identity_pairs} "
                                                                f"(p {fmt(r.p_identity, 'p')})", r.p_identity)),
                     ("chance", lambda r: _cell("fraction", r.chance)),
                     ("profile D_match / D_self", lambda r: (f"{sig(r.profile_d_match)} / {sig(r.profile_d_self)}",
                                                             r.profile_d_match)),
                     ("verdict", lambda r: (division_verdict_text(r), division_verdict_text(r))),
                     ("why", text("why"))],
        "capacity": [("heads per layer", lambda r: _cell("count", r.heads)), ("cell", text("cell")),
                     ("seeds", lambda r: _cell("count", r.n_seeds)),
                     ("held-out loss [range]", lambda r: _cell("value", r.loss, r.loss_low, r.loss_high)),
                     ("all heads", lambda r: _cell("count", r.n_heads)),
                     ("carry a relation [range]", lambda r: _cell("count", r.specialised, r.specialised_low,
                                                                  r.specialised_high)),
                     ("positional [range]", lambda r: _cell("count", r.positional, r.positional_low, r.positional_high)),
                     ("previous/next token [range]", lambda r: _cell("count", r.prev_next, r.prev_next_low,
                                                                     r.prev_next_high))],
        "formation": [("cell", text("cell")), ("seed", lambda r: _cell("count", r.seed)),
                      ("heads apart at step", lambda r: _step(r.apart_step, r.last_step)),
                      ("in layer (1-based)", lambda r: ("-" if r.apart_layer == NOT_WITHIN else str(r.apart_layer + 1),
                                                        r.apart_layer + 1)),
                      ("first previous/next-token head", lambda r: _step(r.positional_step, r.last_step)),
                      ("first relation head", lambda r: _step(r.relation_step, r.last_step)),
                      ("atlas steps", lambda r: (", ".join(map(str, r.steps_checked)) or "-", len(r.steps_checked)))],
    }
    return columns[table]


def _footer(table: str, lab: LabTables) -> tuple[str, ...]:
    """The notes under a lab table: where heads were selected, how intervals were made, how many tests, the rule,
    the indexing."""
    where = {"capacity": "heads' relations chosen on the selection half of the atlas data and tested on the other "
                         "half", "formation": "as in the capacity table, at each checkpoint model",
             "division": "heads matched one-to-one within layers, on the same held-out sentences for every distance"}
    parts = [where.get(table, "no heads selected (every head of every layer)"), f"intervals: {_INTERVALS[table]}",
             f"tests: {_TESTS.get(table, 'none')}", *(f"rule: {r}" for r in clauses(lab.rules.get(table, '-'))),
             INDEXING_NOTE]
    return tuple(p for p in parts if p)


def lab_table(table: str, lab: LabTables, table_type: type) -> Any:
    """One lab table as the report's :class:`Table` (``table_type``)."""
    columns = _columns(table)
    rows = list(getattr(lab, table))
    pairs = [[fn(row) for _, fn in columns] for row in rows]
    empty = "" if rows else lab.missing.get(table, "no rows were computed (no reason recorded)")
    return table_type(f"lab_{table}", LAB_TABLES[table], tuple(h for h, _ in columns),
                      tuple(tuple(t for t, _ in p) for p in pairs), tuple(tuple(s for _, s in p) for p in pairs),
                      _footer(table, lab) if rows else (), empty)


def _growth_text(rows: Sequence[Any]) -> str:
    """``every 6.9 (parameters) / 5.1 (attention) steps in noise layer 1 (every step, window 10, R² >= 0.98)``."""
    groups: dict[tuple[str, int], list[Any]] = {}
    for g in rows:
        if g.source and math.isfinite(g.doubling):  # a row saved before the peak rate has no source
            groups.setdefault((g.cell, g.layer), []).append(g)
    parts = []
    for (cell, layer), mine in groups.items():
        names = {"param": "parameters", "attention": "attention"}
        every = " / ".join(f"{fmt(g.doubling, 'seconds')} ({names.get(g.distance, g.distance)})" for g in mine)
        r2 = min(g.r2 for g in mine)
        how = mine[0].source + (f", window {mine[0].window}" if mine[0].window else "")
        parts.append(f"every {every} steps in {cell} layer {layer + 1} ({how}, R² >= {fmt(r2)})")
    return "; ".join(parts)


def _answer_a(lab: LabTables) -> str:
    """(a) in short: per cell whether identical heads stay identical (largest attention distance), and how fast
    near-identical heads come apart at their fastest."""
    parts = [f"{v.cell}: heads that start identical {'stay identical' if v.stays_identical else 'come apart'} "
             f"(largest attention distance {v.max_attention:.3g} over {v.n_checkpoints} checkpoints x {v.n_seeds} "
             f"seeds, {'as' if v.stays_identical == v.expected else 'against what'} the reason predicts)"
             for v in lab.verdicts]
    growth = _growth_text(lab.growth)
    old = any(not g.source for g in lab.growth)
    if not parts and not growth and not old:
        return "(a) Not answered: " + lab.missing.get("verdicts", "no identical or identical+noise cell") + "."
    sentences = ["; ".join(parts) + "." if parts else "",
                 f"At its fastest (peak local growth rate) the excess distance between nearly identical heads doubles "
                 f"{growth}." if growth else "", OLD_GROWTH if old else ""]
    return "(a) " + " ".join(s for s in sentences if s)


def _one_division(d: Any) -> str:
    """One tested cell's sentence of (b): its verdict and the tests behind it (layers 1-based)."""
    layers = [f"layer {k + 1} {x:+.3g} (p {fmt(p, 'p')})"
              for k, (x, p) in enumerate(zip(d.cross_minus_within, d.p_cross)) if math.isfinite(p)]
    text = f"Cell {d.cell}: {d.verdict} "
    text += (f"(D_cross - D_within {', '.join(layers)}; {d.n_pairs} pair(s) of seeds, {d.n_regroupings} "
             "regroupings each)" if layers else f"({d.cross_test})")
    if math.isfinite(d.p_match):
        shown = "below" if d.p_match < ALPHA else "not shown below"
        text += (f"; D_match {shown} the shuffled-layers null (p {fmt(d.p_match, 'p')}, {d.n_null_draws} "
                 "permutations)")
    else:
        text += f"; D_match {d.match_test}"
    if d.identity_pairs and d.d_within_high != 0.0:
        text += (f"; {d.identity_kept} of {d.identity_pairs} matched heads keep their number against chance "
                 f"1/{d.heads} (binomial p {fmt(d.p_identity, 'p')})")
    return text + "."


def _answer_b(lab: LabTables) -> str:
    """(b) in short: each cell's verdict from its tests, with their p-values."""
    if not lab.division:
        return "(b) Not answered: " + lab.missing.get("division", "no match units") + "."
    old = [d.cell for d in lab.division if not getattr(d, "tested", False)]
    sentences = [_one_division(d) for d in lab.division if getattr(d, "tested", False)]
    if old:
        sentences.append(f"{'Cells' if len(old) > 1 else 'Cell'} {', '.join(old)}: {UNTESTED_OLD}.")
    return ("(b) Each verdict comes from a permutation test of D_cross against D_within per layer, never from "
            "intervals. " + " ".join(sentences))


def _answer_c(lab: LabTables) -> str:
    """(c) in short: held-out loss and heads carrying a relation against the number of heads."""
    if not lab.capacity:
        return "(c) Not answered: " + lab.missing.get("capacity", "no capacity cells") + "."
    rows = lab.capacity
    heads = " / ".join(str(c.heads) for c in rows)
    return (f"(c) With {heads} heads per layer the held-out loss is {' / '.join(fmt(c.loss) for c in rows)} nats, and "
            f"{' / '.join(fmt(c.specialised, 'count') for c in rows)} of {' / '.join(str(c.n_heads) for c in rows)} "
            "heads carry a relation (means over seeds; held out, Holm over each model's heads).")


def _steps_by_cell(rows: Sequence[Any], name: str) -> str:
    """Cells grouped by their steps of ``name`` (one per seed, ``/``-joined when the seeds differ):
    ``64 (independent, heads-2), 128 (noise)``."""
    by_cell: dict[str, list[Any]] = {}
    for row in rows:
        by_cell.setdefault(row.cell, []).append(row)
    groups: dict[str, list[str]] = {}
    for cell, mine in by_cell.items():
        steps = list(dict.fromkeys(_step(getattr(r, name), r.last_step)[0] for r in mine))
        groups.setdefault("/".join(steps), []).append(cell)
    def at(steps: str) -> str:
        return f"at step {steps}" if steps[:1].isdigit() else steps

    if len(groups) == 1:
        return f"{at(next(iter(groups)))} in every cell"
    ordered = sorted(groups, key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0))  # numbers first
    return ", ".join(f"{at(steps)} ({', '.join(groups[steps])})" for steps in ordered)


def _answer_d(lab: LabTables) -> str:
    """(d) in short: the step heads come apart, and the first relation and previous/next-token heads, by cell."""
    if not lab.formation:
        return "(d) Not answered: " + lab.missing.get("formation", "no checkpoints") + "."
    rows = lab.formation
    return (f"(d) Heads come apart {_steps_by_cell(rows, 'apart_step')}. The first relation head appears "
            f"{_steps_by_cell(rows, 'relation_step')}; the first previous/next-token head "
            f"{_steps_by_cell(rows, 'positional_step')} (one step per seed, a/b/c, where the seeds differ).")


def lab_answers(lab: LabTables) -> dict[str, str]:
    """The lab's short answers, one per question, each with its numbers (layers 1-based; every number is in the
    question's tables)."""
    return {"a": _answer_a(lab), "b": _answer_b(lab), "c": _answer_c(lab), "d": _answer_d(lab)}


_PARTS = {"a": (("final_loss", "verdicts", "growth", "symmetry"), ("lab_symmetry", "lab_loss")),
          "b": (("division",), ("lab_division",)), "c": (("capacity",), ("lab_capacity",)),
          "d": (("formation",), ())}
_RULE_OF = {"a": "verdicts", "b": "division", "c": "capacity", "d": "formation"}


def lab_blocks(comparison: Any, figures: Mapping[str, tuple[str, Path]], table_type: type) -> list[tuple[str, Any]]:
    """``## Training lab``: per question how its answer is decided, what the evidence cannot tell, its figures and
    tables (its answer in short opens the report; nothing without a lab)."""
    lab = getattr(comparison, "lab", None)
    if lab is None:
        return []
    blocks: list[tuple[str, Any]] = [("h2", "Training lab"), (
        "p", "Models trained from scratch under controlled initialisation, cells of seeds; each question's answer "
             f"opens the report. Intervals over seeds are ranges: {lab.interval}.")]
    for key, question in LAB_QUESTIONS.items():
        tables, stems = _PARTS[key]
        rules = clauses(lab.rules.get(_RULE_OF[key], "-"))
        if key == "a":
            rules += [f"growth: {rule}" for rule in clauses(lab.rules.get("growth", "-"))]
        blocks += [("h3", f"({key}) {question}"), ("p", "How the answer is decided:"), ("list", rules),
                   ("p", f"What the evidence cannot tell: {LAB_LIMITS[key]}.")]
        blocks += [("figure", figures[s]) for s in stems if s in figures]
        blocks += [("table", lab_table(t, lab, table_type)) for t in tables]
    return blocks


def draw_lab(comparison: Any, folder: Path, suffix: str, name: str) -> dict[str, tuple[str, Path]]:
    """The lab's figures as ``suffix`` files: ``stem -> (caption, path)`` (none without a lab)."""
    from probes.reports.experiment import lab_figures as lf

    lab = getattr(comparison, "lab", None)
    if lab is None:
        return {}
    jobs = [("lab_symmetry", lab.symmetry, "Lab (a): mean distance between a layer's heads against the step, per "
             "cell (log step; shaded: range over seeds; layers 1-based)", lf.write_lab_symmetry),
            ("lab_loss", lab.final_loss, "Lab: held-out loss at the last step per cell", lf.write_lab_loss),
            ("lab_capacity", lab.capacity, "Lab (c): held-out loss and heads with a role against heads per layer",
             lf.write_lab_capacity),
            ("lab_division", lab.division, "Lab (b): D_within, D_self, D_match and D_null per cell (descriptive; "
             "the verdicts come from the tests in the table)",
             lf.write_lab_division)]
    out = {}
    for stem, rows, caption, draw in jobs:
        if rows:
            out[stem] = (caption, draw(rows, folder / f"{stem}.{suffix}", title=f"{name}: {caption}"))
    return out


def write_lab_csv(comparison: Any, out: Path) -> dict[str, Path]:
    """``tables/lab_<table>.csv`` for every lab table with rows: every field, layers 1-based, dicts flattened."""
    from probes.reports.tables import flat_row, write_csv

    lab = getattr(comparison, "lab", None)
    paths: dict[str, Path] = {}
    for table in LAB_TABLES if lab is not None else ():
        rows = [flat_row(asdict(row), ("layer", "apart_layer"), keep=NOT_WITHIN) for row in getattr(lab, table)]
        if rows:
            paths[f"tables/lab_{table}.csv"] = write_csv(rows, out / "tables" / f"lab_{table}.csv")
    return paths
