"""Probing reports: the tables, figures and terminal summary of a probing run.

Written from the rows and arrays a :class:`probes.runs.probing.ProbeRun` computes (never the
reverse): ``parsers.{md,csv,json}`` (UAS / UUAS per parser), ``per_head.{md,csv,json}`` and
``per_head_scores.csv`` (per-head relation probes), ``label.{md,csv}`` (per-head label probes) and
``figures/``. Heads are printed 1-based (``layer-head``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.heads.inference import ALPHA, CORRECTION, Correction
from probes.heads.intervals import bootstrap_ci
from probes.heads.naming import DIRECTIONS, INDEXING_NOTE, head_name
from probes.reports.escape import md_document
from probes.reports.inputs import inputs_lines
from probes.reports.prose import opening, sentences
from probes.reports.tables import format_p, markdown_table, md_heading, md_text, text_table, write_csv, write_json
from probes.reports.writer import OutputFolder
from probes.run_record import RunRecord

__all__ = ["PARSER_COLUMNS", "PER_HEAD_COLUMNS", "COMPARISON_COLUMNS", "selection_note", "write_parsers", "write_per_head", "per_head_figures", "write_probes", "comparison_correction",
           "attn_weight_figure", "label_rows", "write_label", "format_summary"]

Rows = list[dict[str, Any]]

#: Columns of ``parsers.csv``.
PARSER_COLUMNS = ("probe", "uas", "uas_sd", "uas_ci_low", "uas_ci_high", "uuas", "uuas_sd", "uuas_ci_low",
                  "uuas_ci_high", "control_uas", "control_uas_sd", "selectivity", "selectivity_sd",
                  "selectivity_ci_low", "selectivity_ci_high", "n_seeds", "train_sentences", "attention_from")
#: Columns of ``comparisons.csv``.
COMPARISON_COLUMNS = ("a", "b", "difference", "ci_low", "ci_high", "z", "p", "p_holm", "significant", "n_sentences")
#: Columns of ``per_head.csv``.
PER_HEAD_COLUMNS = ("relation", "count", "head", "select_accuracy", "accuracy", "accuracy_sd", "ci_low", "ci_high",
                    "position_only", "gain", "p", "p_holm", "significant", "near_ties",
                    "argmax_accuracy_same_head", "argmax_head", "argmax_direction", "argmax_accuracy",
                    "control_accuracy", "control_accuracy_sd", "control_position_only", "selectivity",
                    "selectivity_sd", "selectivity_ci_low", "selectivity_ci_high", "selectivity_floor_adjusted")

_INTERVALS = ("95% percentile bootstrap intervals over sentences (1000 resamples) of the mean over seeds; "
              "differences paired (the same resampled sentences for both sides)")
_CONTROL = ("Control task (Hewitt & Liang 2019): each word type is given, once and at random, one of: attach to "
            "itself, to the first word, to the last word of the sentence (the mapping varies with the seed)")
_PARSERS_NOTE = (
    "\nUAS: argmax head per word, punctuation (gold relation `punct`) excluded (Clark et al. 2019 §5.4). "
    "UUAS: undirected maximum spanning tree over non-punctuation words (Hewitt & Manning 2019). "
    "Selectivity = UAS - control-task UAS (Hewitt & Liang 2019), with a paired interval; right-branching learns "
    "nothing, so it has no control. " + _CONTROL + ". "
    + _INTERVALS + ". ")
_PER_HEAD_NOTE = (
    "\nPer-head probes: for each head and relation, a log-linear probe over that head's attention "
    "(both directions, ROOT from the special tokens) plus relative-position features, trained on the "
    "training split; accuracy = share of the relation's words whose gold head it picks among ROOT + the "
    "words. 'position only': the same probe without attention; 'sig.': the gain of the head's probe over "
    "the position-only probe, paired test over sentences, Holm-corrected over the listed rows. 'ties': heads "
    "not significantly worse than the chosen one on the report data (paired test, uncorrected; all in "
    "per_head.csv). 'argmax': Clark et al.'s parameter-free argmax (best head and direction, chosen on the "
    "same data as the probe's head). 'control acc.': the head's probe trained and scored on the control task; "
    "'selectivity': acc. - control acc. (headline; paired interval). The floor-adjusted variant, (acc. - "
    "position only) - (control acc. - control position only), is in per_head.csv as "
    "selectivity_floor_adjusted. ALL excludes punctuation. " + _CONTROL + ". " + _INTERVALS + ". "
    f"{INDEXING_NOTE}.\n")


def selection_note(selection: Mapping[str, Any] | None) -> str:
    """One sentence: where the heads were chosen and where they are reported."""
    sel = dict(selection or {})
    mode = sel.get("mode")
    if mode == "same":
        return (f"Heads chosen and reported on the same data ({sel.get('reported_on')}; mode same, as Clark et al.): "
                "optimistic, so no row is tested or marked significant.")
    text = (f"Heads chosen on {sel.get('selected_on')} and reported on {sel.get('reported_on')} (mode {mode}; "
            "every number in the row is from the report data).")
    return text + (f" Split rule: {sel['rule']}." if mode == "split" and sel.get("rule") else "")


def _seeds_note(seeds: Sequence[int]) -> str:
    return (f"Seeds: {', '.join(str(s) for s in seeds)} ({len(seeds)}; each sets the probes' initialisation and "
            "training order, the control task's mapping and the random-init model); values are means over seeds, "
            "'sd' their standard deviation.")


def _write_text(path: Path, text: str) -> Path:
    from probes.reports.atomic import write_text  # whole or not at all

    return write_text(path, md_document(text))


def _inputs_note(inputs: Sequence[str]) -> str:
    """Markdown lines saying what happened to the inputs of each split (ids skipped, truncated, windowed)."""
    if not inputs:
        return ""
    return "\nInputs (a sentence over the model's maximum is skipped, or truncated and then not used):\n\n" + \
        "".join(f"- {md_text(line)}\n" for line in inputs)


def _notes(text: str) -> str:
    """A note of several sentences as a Markdown list, one sentence per item."""
    return "".join(f"- {sentence}\n" for sentence in sentences(text))


def _pct(value: Any) -> str:
    """A share as the tables print it: percent with 1 decimal (``-`` for NaN or None)."""
    return "-" if value is None or value != value else f"{100 * float(value):.1f}"


def parser_findings(rows: Sequence[Mapping[str, Any]], comparisons: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """The parsers in short: the best UAS, the selectivity of the parsers with a control task, the paired tests."""
    if not rows:
        return ["No parser was trained."]
    best = max(rows, key=lambda r: -1.0 if r["uas"] != r["uas"] else r["uas"])
    found = [f"The best parser is {best['probe']}: UAS {_pct(best['uas'])}% [{_pct(best['uas_ci_low'])}, "
             f"{_pct(best['uas_ci_high'])}], UUAS {_pct(best['uuas'])}% (means over seeds, 95% intervals over "
             "sentences)."]
    controlled = [r for r in rows if r.get("selectivity") == r.get("selectivity") and "selectivity" in r]
    if controlled:
        found.append("Selectivity, UAS minus the control task's UAS (points): " + "; ".join(
            f"{r['probe']} {_pct(r['selectivity'])} [{_pct(r['selectivity_ci_low'])}, {_pct(r['selectivity_ci_high'])}]"
            for r in controlled) + ".")
    if comparisons:
        better = [c for c in comparisons if c.get("significant")]
        shown = "; ".join(f"{c['a']} over {c['b']} by {_pct(c['difference'])} points (Holm p "
                          f"{format_p(c['p_holm'])})" for c in better[:4])
        found.append(f"{len(better)} of {len(comparisons)} paired comparisons find a better than b (paired over "
                     f"sentences, Holm over the table){': ' + shown if shown else ''}"
                     f"{' and more' if len(better) > 4 else ''}.")
    return found


def write_parsers(rows: Sequence[Mapping[str, Any]], out_dir: Path, control: bool,
                  inputs: Sequence[str] = (), *, comparisons: Sequence[Mapping[str, Any]] = (),
                  correction: Any = None, seeds: Sequence[int] = (0,), subject: str = "") -> dict[str, Path]:
    """``parsers.{md,csv,json}`` (one row per parser; ``control``: with control UAS and selectivity columns) and,
    with ``comparisons``, ``comparisons.csv`` and their table in ``parsers.md``; ``inputs``: lines on what
    happened to the inputs, at the end of ``parsers.md``; ``subject`` (model and data) in its title."""
    dicts = [dict(r) for r in rows]
    cols = ["probe", "uas", "uas_sd", "uas_ci_low", "uas_ci_high", "uuas"] + (
        ["control_uas", "selectivity", "selectivity_ci_low", "selectivity_ci_high"] if control else [])
    heads = ["probe", "UAS", "sd", "UAS 95% low", "UAS 95% high", "UUAS (MST)"] + (
        ["control UAS", "selectivity", "sel. 95% low", "sel. 95% high"] if control else [])
    md = "\n".join([f"# Parsers from attention{': ' + md_heading(subject) if subject else ''}", "",
                    *opening(md_text(f) for f in parser_findings(dicts, comparisons)), "## The parsers", ""])
    md += "\n" + markdown_table(dicts, cols, headers=heads, percent=[c for c in cols if c != "probe"])
    md += "\n" + _notes(_PARSERS_NOTE + _seeds_note(seeds))
    out = {}
    if comparisons:
        md += "\n## Paired comparisons\n\nUAS of a minus UAS of b, on the same sentences; a parser against its " \
              "control task is its selectivity.\n\n" + comparison_table(comparisons)
        md += "\n" + _notes(f"{correction.footer() if correction is not None else ''} {_INTERVALS}.")
        out["comparisons.csv"] = write_csv(list(comparisons), out_dir / "comparisons.csv", COMPARISON_COLUMNS)
    out.update({"parsers.md": _write_text(out_dir / "parsers.md", md + _inputs_note(inputs)),
                "parsers.csv": write_csv(dicts, out_dir / "parsers.csv", PARSER_COLUMNS),
                "parsers.json": write_json(dicts, out_dir / "parsers.json")})
    return out


def comparison_table(comparisons: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown table of paired comparisons."""
    rows = [{**c, "sig": "yes" if c.get("significant") else "no", "p_cell": format_p(c["p_holm"])} for c in comparisons]
    return markdown_table(rows, ["a", "b", "difference", "ci_low", "ci_high", "p_cell", "sig", "n_sentences"],
                          headers=["a", "b", "a - b", "95% low", "95% high", "p (Holm)", "sig.", "sentences"],
                          percent=["difference", "ci_low", "ci_high"])


def per_head_findings(rows: Rows, selection: Mapping[str, Any] | None = None) -> list[str]:
    """The per-head probes in short: for how many relations a head's probe beats the position-only probe, the
    ALL row and the largest gain."""
    if not rows:
        return ["No relation had enough words to be listed."]
    same = (selection or {}).get("mode") == "same"
    wins = sum(r.get("significant") == "yes" for r in rows)
    found = ["No row is tested: heads were chosen and reported on the same data." if same else
             f"A head's probe beats the position-only probe for {wins} of {len(rows)} relations (gain in accuracy, "
             f"paired test over sentences, Holm over the {len(rows)} listed rows)."]
    first = rows[0]
    selectivity = ("" if _pct(first.get("selectivity")) == "-" else
                   f"; selectivity {_pct(first.get('selectivity'))} points [{_pct(first.get('selectivity_ci_low'))}, "
                   f"{_pct(first.get('selectivity_ci_high'))}]")
    found.append(f"On {first['relation']}, head {first['head']}'s probe is right for {_pct(first['accuracy'])}% "
                 f"[{_pct(first['ci_low'])}, {_pct(first['ci_high'])}] of the words, against "
                 f"{_pct(first['position_only'])}% for the position-only probe{selectivity}.")
    best = max(rows, key=lambda r: -1.0 if r["gain"] != r["gain"] else r["gain"])
    test = "" if same else f", Holm p {format_p(best['p_holm'])}"
    found.append(f"The largest gain: {best['relation']}, head {best['head']}, {_pct(best['accuracy'])}% against "
                 f"{_pct(best['position_only'])}% ({_pct(best['gain'])} points{test}).")
    return found


def write_per_head(rows: Rows, full: Rows, out_dir: Path, inputs: Sequence[str] = (), *,
                   selection: Mapping[str, Any] | None = None, correction: Mapping[str, Any] | None = None,
                   seeds: Sequence[int] = (0,), subject: str = "") -> dict[str, Path]:
    """``per_head.{md,csv,json}`` (the listed relations) and ``per_head_scores.csv`` (every relation and head);
    ``selection``, ``correction`` (``Correction.as_dict()``) and ``seeds`` go into the notes; ``inputs``: lines
    on what happened to the inputs, at the end of ``per_head.md``; ``subject`` (model and data) in its title."""
    shown = [{**r, "ties": _ties_cell(r.get("near_ties", []))} for r in rows]
    cols = ["relation", "count", "head", "accuracy", "accuracy_sd", "ci_low", "ci_high", "position_only",
            "significant", "ties", "argmax_head", "argmax_accuracy", "control_accuracy", "selectivity",
            "selectivity_ci_low", "selectivity_ci_high"]
    heads = ["relation", "count", "best head", "probe acc.", "sd", "95% low", "95% high", "position only",
             "sig.", "ties", "argmax head", "argmax acc.", "control acc.", "selectivity", "sel. 95% low",
             "sel. 95% high"]
    md = "\n".join([f"# Per-head relation probes{': ' + md_heading(subject) if subject else ''}", "",
                    *opening(md_text(f) for f in [*per_head_findings(rows, selection), INDEXING_NOTE[:1].upper()
                                                  + INDEXING_NOTE[1:] + "."]), "## The best head per relation", ""])
    md += "\n" + markdown_table(shown, cols, headers=heads, percent=[c for c in cols if c not in (
        "relation", "count", "head", "argmax_head", "significant", "ties")])
    footer = selection_note(selection)
    if correction is not None:
        n = correction.get("n_tests", 0)
        footer += f" Significance: {correction.get('test')}; {n} test{'s' if n != 1 else ''} in this table."
    md += "\n" + _notes(footer + _PER_HEAD_NOTE + _seeds_note(seeds))
    csv_rows = [{**r, "near_ties": " ".join(r.get("near_ties", []))} for r in rows]
    return {"per_head.md": _write_text(out_dir / "per_head.md", md + _inputs_note(inputs)),
            "per_head.csv": write_csv(csv_rows, out_dir / "per_head.csv", PER_HEAD_COLUMNS),
            "per_head.json": write_json(rows, out_dir / "per_head.json"),
            "per_head_scores.csv": write_csv(full, out_dir / "per_head_scores.csv")}


def _ties_cell(ties: Sequence[str], shown: int = 3) -> str:
    """``count: first few`` of a row's near ties."""
    if not ties:
        return "0"
    more = f" +{len(ties) - shown}" if len(ties) > shown else ""
    return f"{len(ties)}: {', '.join(ties[:shown])}{more}"


def per_head_figures(accuracy: npt.NDArray[np.float64], floor: float, selectivity: npt.NDArray[np.float64] | None,
                     out_dir: Path, *, subject: str = "", fmt: str = "png", where: str = "") -> dict[str, Path]:
    """Heatmaps of the per-head probes on ALL: ``accuracy`` ``(L, H)`` and, with a control task, ``selectivity``.

    ``subject`` (model and data) and ``where`` (which data) go into each title; ``fmt``: png, svg or pdf.
    """
    from probes.reports.figures import head_heatmap

    on = f" ({subject})" if subject else ""
    name = f"figures/probe_per_head_ALL.{fmt}"
    out = {name: head_heatmap(
        accuracy, out_dir / name,
        title=f"Per-head probe accuracy, ALL ({where or 'evaluation data'}){on}\nposition-only probe: {floor:.3f}")}
    if selectivity is not None:
        name = f"figures/probe_selectivity_ALL.{fmt}"
        out[name] = head_heatmap(
            selectivity, out_dir / name, title=f"Per-head probe selectivity, ALL{on}: "
            "accuracy - control-task accuracy", label="selectivity", vmin=None)
    return out


def attn_weight_figure(weights: npt.NDArray[np.floating], out_dir: Path, *, subject: str = "",
                       fmt: str = "png") -> dict[str, Path]:
    """The Attn parser's weight of each map, ``weights`` ``(2, L, H)`` (dep_to_head, head_to_dep);
    ``subject`` (model and data) in the title; ``fmt``: png, svg or pdf."""
    from probes.reports.figures import overview_figure

    bound = float(np.abs(weights).max()) or 1.0
    name = f"figures/probe_attn_weights.{fmt}"
    path = overview_figure({d: weights[k] for k, d in enumerate(DIRECTIONS)}, out_dir / name,
                           suptitle="Attn parser: weight of each map" + (f" ({subject})" if subject else ""),
                           ncols=2, vmin=-bound, vmax=bound)
    return {name: path}


def label_rows(correct: npt.NDArray[np.int64], total: npt.NDArray[np.int64], n_heads: int, *,
               select: tuple[Any, Any] | None = None) -> tuple[Rows, Rows, npt.NDArray[np.float64]]:
    """Top-10 rows (with bootstrap intervals), one row per head, and ``(P,)`` accuracy of the label probes.

    ``correct`` is ``(n_sentences, P)`` with the position-only probe last, ``total`` ``(n_sentences,)``, both on
    the report data; heads are ranked on ``select`` = ``(correct, total)`` of the selection data (default: the
    report data itself).
    """
    acc = correct.sum(0) / max(int(total.sum()), 1)  # (P,)
    sel_c, sel_t = select if select is not None and select[0] is not None else (correct, total)
    sel_acc = sel_c.sum(0) / max(int(sel_t.sum()), 1)
    lh = len(acc) - 1
    floor = float(acc[-1])
    order = np.argsort(-sel_acc[:lh], kind="stable")
    low, high = bootstrap_ci(correct[:, order[:10]], total)
    rows = [{"rank": k + 1, "head": head_name(*divmod(int(p), n_heads)), "select_accuracy": float(sel_acc[p]),
             "accuracy": float(acc[p]), "ci_low": float(lo), "ci_high": float(hi), "position_only": floor,
             "gain": float(acc[p] - floor)} for k, (p, lo, hi) in enumerate(zip(order[:10], low, high))]
    full = [{"layer": p // n_heads + 1, "head": p % n_heads + 1, "head_name": head_name(*divmod(p, n_heads)),
             "accuracy": float(acc[p]), "select_accuracy": float(sel_acc[p]), "position_only": floor}
            for p in range(lh)]
    return rows, full, acc


def write_label(rows: Rows, full: Rows, accuracy: npt.NDArray[np.float64], facts: Mapping[str, int],
                out_dir: Path, figures: bool, *, subject: str = "", fmt: str = "png",
                selection: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """``label.{md,csv}`` and, with ``figures``, the heatmap of the label probes' ``accuracy`` ``(P,)``
    (``subject``, model and data, in its title; ``fmt``: png, svg or pdf; ``selection``: where heads were ranked).

    ``facts``: ``n_layers``, ``n_heads``, ``n_labels``, ``train_arcs_used``, ``train_arcs_seen``.
    """
    floor = float(accuracy[-1])
    found = [f"The best label probe is head {rows[0]['head']}'s: it names the relation of {_pct(rows[0]['accuracy'])}% "
             f"[{_pct(rows[0]['ci_low'])}, {_pct(rows[0]['ci_high'])}] of the gold arcs ({facts['n_labels']} labels), "
             f"against {_pct(floor)}% for the position-only probe ({_pct(rows[0]['gain'])} points; heads ranked on "
             "the selection data, 95% interval over sentences, no test)." if rows else "No head was ranked.",
             f"{INDEXING_NOTE[:1].upper()}{INDEXING_NOTE[1:]}."]
    md = "\n".join([f"# Per-head label probes{': ' + md_heading(subject) if subject else ''}", "",
                    *opening(md_text(f) for f in found), "## The 10 best heads", ""])
    md += "\n" + markdown_table(rows, ["rank", "head", "accuracy", "ci_low", "ci_high", "position_only", "gain"],
                                headers=["rank", "head", "label acc.", "95% low", "95% high", "position only",
                                         "gain"], percent=["accuracy", "ci_low", "ci_high", "position_only", "gain"])
    note = (f"Label probes: given the gold arc, one LogisticRegression per head predicts its relation "
            f"({facts['n_labels']} labels) from that head's attention on the arc plus its relative position; "
            f"trained on {facts['train_arcs_used']} of {facts['train_arcs_seen']} training arcs (reservoir sample; "
            f"first seed only). Top 10 heads, ranked on the selection data. {selection_note(selection)} "
            "95% percentile bootstrap intervals over sentences (1000 resamples).")
    out = {"label.md": _write_text(out_dir / "label.md", md + "\n" + _notes(note)),
           "label.csv": write_csv(full, out_dir / "label.csv")}
    if figures:
        from probes.reports.figures import head_heatmap

        on = f" ({subject})" if subject else ""
        name = f"figures/probe_label.{fmt}"
        out[name] = head_heatmap(
            accuracy[:-1].reshape(facts["n_layers"], facts["n_heads"]), out_dir / name,
            title=f"Per-head label probe accuracy (report data){on}\nposition-only probe: {floor:.3f}", vmin=None)
    return out


def format_summary(parsers: Rows | None, per_head: Rows | None, timings: Mapping[str, float], *,
                   comparisons: Rows | None = None, selection: Mapping[str, Any] | None = None,
                   n_seeds: int = 1) -> str:
    """Terminal text of a probing run: the parsers, their comparisons, the per-head probes' listed relations,
    the timings."""
    text = ""
    if parsers:
        cols = ["probe", "uas", "uas_sd", "uas_ci_low", "uas_ci_high", "uuas", "control_uas", "selectivity",
                "selectivity_ci_low", "selectivity_ci_high"]
        text += f"Parsers (mean over {n_seeds} seed{'s' if n_seeds != 1 else ''}; 95% intervals over sentences):\n"
        text += text_table(parsers, cols, headers=["probe", "UAS", "sd", "low", "high", "UUAS", "control UAS",
                                                   "selectivity", "low", "high"], percent=cols[1:])
    if comparisons:
        text += "\nPaired comparisons (Holm-corrected):\n"
        text += text_table([{**c, "sig": "yes" if c["significant"] else "no", "p_cell": format_p(c["p_holm"])}
                            for c in comparisons],
                           ["a", "b", "difference", "ci_low", "ci_high", "p_cell", "sig"],
                           headers=["a", "b", "a - b", "low", "high", "p (Holm)", "sig."],
                           percent=["difference", "ci_low", "ci_high"])
    if per_head is not None:
        cols = ["relation", "count", "head", "accuracy", "position_only", "significant", "argmax_head",
                "argmax_accuracy", "selectivity"]
        text += f"\nPer-head relation probes (best head per relation). {selection_note(selection)}\n"
        text += text_table(per_head, cols, headers=["relation", "count", "head", "probe", "position", "sig.",
                                                    "argmax head", "argmax", "selectivity"],
                           percent=["accuracy", "position_only", "argmax_accuracy", "selectivity"])
    text += (f"\nTimings: training {timings['train_s']:.1f} s, evaluation {timings['eval_s']:.1f} s"
             + (f", random-init control {timings['random_init_s']:.1f} s" if "random_init_s" in timings else "")
             + " (extraction included). Layers and heads are 1-based (layer-head).\n")
    return text


# ---------------------------------------------------------------------------------- the run's files
def comparison_correction(comparisons: Sequence[Mapping[str, Any]]) -> Correction:
    """The Holm correction of a probe run's comparison table (the tests with a p-value)."""
    tested = [r for r in comparisons if r.get("p_holm") == r.get("p_holm")]
    return Correction(CORRECTION, len(tested), ALPHA)


def _where(selection: Mapping[str, Any]) -> str:
    """Where the per-head numbers were measured, for figure titles."""
    mode = selection.get("mode")
    if mode == "same":
        return "heads chosen on the same data: optimistic"
    if mode == "split":
        return "report half of the evaluation data"
    return f"reported on {selection.get('reported_on')}"


def _write_label(label: Any, out: Path, figures: bool, results: dict[str, Any],
                 look: Mapping[str, str] | None = None, selection: Mapping[str, Any] | None = None
                 ) -> dict[str, Path]:
    """Write the label probes' table (and figure: ``look`` = subject and format); their summary goes into
    ``results["label"]``."""
    rows, full, acc = label_rows(label.correct, label.total, label.n_heads,
                                 select=(label.select_correct, label.select_total))
    facts = {"n_layers": label.n_layers, "n_heads": label.n_heads, "n_labels": label.n_labels,
             "train_arcs_used": label.train_arcs_used, "train_arcs_seen": label.train_arcs_seen}
    paths = write_label(rows, full, acc, facts, out, figures, selection=selection, **(look or {}))
    results["label"] = {"top": rows, "position_only": float(acc[-1]), "n_labels": label.n_labels,
                        "train_arcs_used": label.train_arcs_used, "train_arcs_seen": label.train_arcs_seen}
    return paths


def write_probes(folder: OutputFolder, run: Any) -> RunRecord:
    """Write a :class:`~probes.runs.probing.ProbeRun`'s tables and (with ``folder.figures``) heatmaps into
    ``folder``; the run record to write last."""
    out, figures = folder.root, folder.figures
    results: dict[str, Any] = RunRecord.of(run.record).to_dict()  # the record's fields, with the tables' added
    look = {"subject": run.subject(), "fmt": folder.figure_format}
    inputs = inputs_lines(RunRecord.of(run.record), limit=None)
    seeds = {"seeds": list(run.seeds)}
    if run.parsers:
        results["parsers"] = run.parser_rows()
        results["comparisons"] = list(run.comparisons)
        correction = comparison_correction(run.comparisons) if run.comparisons else None
        folder.add_all(write_parsers(results["parsers"], out, run.control, inputs=inputs,
                                     comparisons=list(run.comparisons), correction=correction, subject=run.subject(),
                                     **seeds).values())
    if run.per_head:
        rows, full = run.per_head_rows()
        results["per_head"] = {"listed": rows, "n_unseen_relation_words": run.per_head[0].n_unseen}
        correction = run.significance()["per_head"]
        folder.add_all(write_per_head(rows, full, out, inputs=inputs, selection=run.selection,
                                      correction=correction, subject=run.subject(), **seeds).values())
        if figures:
            accuracy, floor, selectivity = run.per_head_figure_data()
            folder.add_all(per_head_figures(accuracy, floor, selectivity, out, where=_where(run.selection),
                                            **look).values())
        if run.attn_weights is not None and figures:
            folder.add_all(attn_weight_figure(run.attn_weights, out, **look).values())
    if run.label is not None:
        folder.add_all(_write_label(run.label, out, figures, results, look, run.selection).values())
    folder.save("probe", run)  # the run itself: probes.load(out_dir) reads it back
    results.update(run.facts)
    results["selection"] = dict(run.selection)
    results["significance"] = run.significance()
    results["timings"] = {**run.facts["timings"], "writing_s": folder.seconds()}
    return RunRecord.of(results)
