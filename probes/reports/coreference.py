"""Coreference and bridging reports: leaderboard tables, per-head rows and heatmaps.

Made from :class:`~probes.analysis.coreference.CorefResult` and
:class:`~probes.analysis.bridging.BridgingResult` (never the reverse): the rows of
``coref_leaderboard.*`` / ``bridging_leaderboard.*``, the layers x heads ``scores.csv`` and the
heatmaps. Heads are printed 1-based (``layer-head``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.bridging import MIN_LINKS, BridgingResult, merge_bands
from probes.analysis.coreference import BASELINES, DISTANCE_BANDS, MENTION_TYPES, CorefResult
from probes.analysis.split import SPLIT_RULE
from probes.heads.inference import Correction, correct_rows, near_ties, p_from_z, paired_z
from probes.heads.intervals import bootstrap_ci
from probes.heads.naming import INDEXING_NOTE, head_name
from probes.heads.selection import SELECTION_MODES
from probes.reports.attention_source import source_sentence, source_suffix
from probes.reports.escape import md_document
from probes.reports.inputs import inputs_lines
from probes.reports.prose import opening
from probes.reports.tables import format_p, markdown_table, md_heading, md_text, text_table, write_csv, write_json
from probes.reports.writer import OutputFolder
from probes.run_record import RunRecord

__all__ = ["BASELINE_LABELS", "COLUMNS", "SELECTION_MODES", "SelectionInfo", "selection_info", "footer", "coref_tables", "bridging_tables", "head_rows", "coref_columns",
           "bridging_columns", "coref_panels", "bridging_panels", "BRIDGING_SCALES", "write_leaderboard", "write_heatmaps", "write_anaphora",
           "anaphora_findings"]

#: Row labels of the three baselines.
BASELINE_LABELS = {"nearest": "Nearest mention", "head_match": "Head-word match", "rule_sieve": "Rule-based sieve"}
#: Columns of the coreference leaderboard: every mention, then each mention type.
COLUMNS = ("all",) + MENTION_TYPES

Rows = list[dict[str, Any]]


def _cell(acc: float, lo: float | npt.NDArray[np.float64], hi: float | npt.NDArray[np.float64]) -> str:
    """An accuracy and its interval as a table cell (``lo``, ``hi``: floats, or the 0-d arrays of bootstrap_ci)."""
    if not np.isfinite(acc):
        return "-"
    return f"{100 * acc:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def _best(values: np.ndarray) -> tuple[int, int] | None:
    if not np.isfinite(values).any():
        return None
    layer, head = np.unravel_index(np.nanargmax(values), values.shape)
    return int(layer), int(head)


# ---------------------------------------------------------------------------------- selection and tests
@dataclass(frozen=True)
class SelectionInfo:
    """Where the best heads were chosen and where they are reported (written in every table and ``run.json``).

    Attributes:
        mode: ``split`` (halves of the reported data by document id), ``separate`` (another corpus)
            or ``same`` (the reported data itself: optimistic, never tested).
        selected_on, reported_on: the data, in words.
    """

    mode: str
    selected_on: str
    reported_on: str

    def as_dict(self) -> dict[str, Any]:
        """``run.json``'s ``"selection"``."""
        out: dict[str, Any] = {"mode": self.mode, "selected_on": self.selected_on, "reported_on": self.reported_on}
        if self.mode == "split":
            out["rule"] = SPLIT_RULE
        return out

    @property
    def short(self) -> str:
        """The mode as a table cell (``selected_on`` column of the rows)."""
        return {"split": "selection half", "separate": "selection split", "same": "same data (optimistic)"}[self.mode]

    def footer(self) -> str:
        """The selection line of a table's footer."""
        if self.mode == "same":
            return (f"Heads chosen on the reported data itself ({self.reported_on}; same-data selection as in "
                    "Clark et al.): optimistic, and never marked significant.")
        rule = f" ({SPLIT_RULE})" if self.mode == "split" else ""
        return (f"Heads (and the baselines they are tested against) chosen on {self.selected_on}{rule}; "
                f"reported on {self.reported_on}.")


def selection_info(record: RunRecord, has_selection: bool) -> SelectionInfo:
    """The run's :class:`SelectionInfo` from its record (older records: separate with a selection, else same)."""
    sel, options = record.selection, record.options
    if sel.mode in SELECTION_MODES:
        return SelectionInfo(str(sel.mode), str(sel.selected_on if "selected_on" in sel else ""),
                             str(sel.reported_on if "reported_on" in sel else ""))
    corpus = Path(str(options.corpus if "corpus" in options else "the data")).name
    if has_selection:
        return SelectionInfo("separate", Path(str(options.select_on)).name, corpus)
    return SelectionInfo("same", corpus, corpus)


def footer(sel: SelectionInfo, correction: Correction, n_resamples: int, n_documents: int | None = None) -> str:
    """The notes under a table, one per line: selection, intervals (resampling the ``n_documents`` documents:
    coreference and bridging results are per document by construction), test and correction."""
    over = f"{n_documents} documents" if n_documents is not None else "documents"
    return (f"\n- {sel.footer()}\n- Intervals: 95% percentile bootstrap over {over}, {n_resamples} resamples.\n"
            f"- {correction.footer()}\n")


def _test(c_head: np.ndarray, c_base: np.ndarray, n: np.ndarray) -> float:
    """Two-sided p of the paired per-document margin ``sum(c_head - c_base) / sum(n)``."""
    # paired_z counts only documents with items and gives NaN (no test) with fewer than two
    return float(p_from_z(paired_z((c_head - c_base)[:, None], n)[0]))


def _ties(per_unit: np.ndarray, n: np.ndarray, lh: tuple[int, int], layers: Sequence[int],
          heads: Sequence[int]) -> list[str]:
    """``layer-head`` names of the heads not significantly worse than ``lh`` on the report data."""
    if not (np.asarray(n) > 0).any():  # no items at all: no ties to list
        return []
    cols = near_ties(per_unit.reshape(per_unit.shape[0], -1), n, lh[0] * per_unit.shape[2] + lh[1])
    return [head_name(layers[c // per_unit.shape[2]], heads[c % per_unit.shape[2]]) for c in cols]


def _ties_cell(names: Sequence[str], shown: int = 3) -> str:
    if not names:
        return "none"
    return f"{len(names)}: {', '.join(names[:shown])}{', ...' if len(names) > shown else ''}"


def _sig_cells(rows: Rows, sel: SelectionInfo, prefixes: Sequence[str] = ("",)) -> Correction:
    """Holm over the rows' testable ``{prefix}p_value`` for every prefix together (one family per table),
    writing ``{prefix}p_holm``, ``{prefix}significant`` and the ``{prefix}sig`` cell."""
    tests = [(r, pre) for pre in prefixes for r in rows]
    p = np.array([r.get(f"{pre}p_value", np.nan) for r, pre in tests], dtype=float)
    margins = np.array([r.get(f"{pre}margin", np.nan) for r, pre in tests], dtype=float)
    testable = (np.array([bool(r.get(f"{pre}testable", False)) for r, pre in tests], dtype=bool)
                & np.isfinite(p) & (sel.mode != "same"))
    for (r, pre), ok, q in zip(tests, testable, p):
        if not ok and r.get(f"{pre}testable", False) and not np.isfinite(q):
            r[f"{pre}why"] = "untested (items in fewer than 2 documents)"
    adjusted, significant, correction = correct_rows(margins, p, testable=testable)
    for (r, pre), q, yes, ok in zip(tests, adjusted, significant, testable):
        r[f"{pre}p_holm"], r[f"{pre}significant"] = float(q), bool(yes)
        r[f"{pre}p_cell"] = format_p(float(q))
        r[f"{pre}sig"] = ("n/a (same data)" if sel.mode == "same" else r.get(f"{pre}why", "-") if not ok
                          else "yes" if yes else "no")
    return correction


# ---------------------------------------------------------------------------------- coref tables
def coref_tables(result: CorefResult, selection: CorefResult | None, *, sel: SelectionInfo | None = None,
                 n_resamples: int = 1000) -> tuple[Rows, str, str, Correction]:
    """Rows (long format), Markdown and terminal text of the coreference leaderboard, and its correction.

    Heads (and the baseline each is tested against: the best of the three per column) are chosen on
    ``selection`` (a selection half or split) when given, else on ``result`` itself (same data:
    optimistic, never tested). Every head cell gets a paired test against that baseline on ``result``
    (per-document counts), Holm-corrected over the table, and its near ties.
    """
    sel = sel or SelectionInfo("separate" if selection is not None else "same", "selection split", "report data")
    chooser = selection if selection is not None else result
    rows: Rows = []
    table: dict[str, dict[str, str]] = {}
    n_row = {"system": "evaluated mentions"}
    for col in COLUMNS:
        n_row[col] = str(int(result.head_counts(None if col == "all" else col)[1].sum()))
    for name in BASELINES:
        label = BASELINE_LABELS[name]
        table[label] = {"system": label}
        for col in COLUMNS:
            t = None if col == "all" else col
            acc = result.baseline_accuracy(name, t)
            lo, hi = bootstrap_ci(*result.baseline_counts(name, t), n_resamples=n_resamples)
            table[label][col] = _cell(acc, lo, hi)
            rows.append({"system": label, "kind": "baseline", "head": "", "mention_type": col, "accuracy": acc,
                         "ci_low": lo, "ci_high": hi, "n": int(result.head_counts(t)[1].sum()), "selected_on": ""})
    best_all = _best(chooser.accuracy())
    tag = sel.short
    picks: list[tuple[str, Callable[[str | None], tuple[int, int] | None]]] = []
    if best_all is not None:
        picks.append((f"Head {head_name(result.layers[best_all[0]], result.heads[best_all[1]])} (best on all, {tag})",
                      lambda t: best_all))
    picks.append((f"Best head per column ({tag})", lambda t: _best(chooser.accuracy(t))))
    head_rows_: Rows = []
    for label, pick in picks:
        table[label] = {"system": label}
        for col in COLUMNS:
            row = _coref_head_row(result, chooser, label, col, pick(None if col == "all" else col), tag, n_resamples)
            table[label][col] = row.pop("_cell")
            if "per column" in label and col == "all" and best_all is not None:  # the best-on-all head again
                row.update(testable=False, why="as in the best-on-all row")
            head_rows_ += [row] if row["head"] else []
    correction = _sig_cells(head_rows_, sel)
    rows += head_rows_
    body = [n_row] + list(table.values())
    headers = ["", "All", "Pronoun", "Proper", "Nominal"]
    md = markdown_table(body, ["system", *COLUMNS], headers=headers)
    txt = text_table(body, ["system", *COLUMNS], headers=headers)
    tests = _coref_test_tables(head_rows_)
    note = footer(sel, correction, n_resamples, len(result.units))
    md, txt = md + tests[0] + note, txt + tests[1] + note
    for extra_md, extra_txt in (_count_tables(result), _band_tables(result, best_all)):
        md += extra_md
        txt += extra_txt
    return rows, md, txt, correction


def _coref_head_row(result: CorefResult, chooser: CorefResult, label: str, col: str, lh: tuple[int, int] | None,
                    tag: str, n_resamples: int) -> dict[str, Any]:
    """One head cell: accuracy with interval, its baseline (best on ``chooser``), margin, p, near ties."""
    if lh is None:
        return {"_cell": "-", "head": ""}
    t = None if col == "all" else col
    c, n = result.head_counts(t)
    acc = float(result.accuracy(t)[lh])
    lo, hi = bootstrap_ci(c[:, lh[0], lh[1]], n, n_resamples=n_resamples)
    hname = head_name(result.layers[lh[0]], result.heads[lh[1]])
    base = max(BASELINES, key=lambda b: np.nan_to_num(chooser.baseline_accuracy(b, t), nan=-1.0))
    c_base, _ = result.baseline_counts(base, t)
    base_acc = result.baseline_accuracy(base, t)
    ties = _ties(c, n, lh, result.layers, result.heads)
    return {"_cell": _cell(acc, lo, hi) if "per column" not in label else f"{hname}: {_cell(acc, lo, hi)}",
            "system": label, "kind": "head", "head": hname, "mention_type": col, "accuracy": acc,
            "ci_low": float(lo), "ci_high": float(hi), "n": int(n.sum()), "selected_on": tag,
            "baseline": BASELINE_LABELS[base], "baseline_accuracy": base_acc, "margin": acc - base_acc,
            "p_value": _test(c[:, lh[0], lh[1]], c_base, n), "testable": bool(n.sum() > 0),
            "why": "no mentions", "near_ties": " ".join(ties), "n_near_ties": len(ties),
            "ties_cell": _ties_cell(ties)}


def _coref_test_tables(rows: Rows) -> tuple[str, str]:
    """Markdown and text of the tests: each head cell against its column's best baseline."""
    if not rows:
        return "", ""
    cols = ["system", "mention_type", "head", "accuracy", "baseline", "baseline_accuracy", "margin", "p_cell",
            "sig", "ties_cell"]
    headers = ["row", "column", "head", "accuracy %", "tested against", "baseline %", "margin (points)",
               "p (Holm)", "significant", "near ties (heads not significantly worse)"]
    shown = rows
    pct = ["accuracy", "baseline_accuracy", "margin"]
    return ("\n" + markdown_table(shown, cols, headers=headers, percent=pct),
            "\n" + text_table(shown, cols, headers=headers, percent=pct))


def _count_tables(result: CorefResult) -> tuple[str, str]:
    """Markdown and terminal text of the mention counts per type (evaluated, not scorable, ...)."""
    count_rows = [{"mention_type": t, **result.counts[t]} for t in MENTION_TYPES]
    count_rows.append({"mention_type": "all", **{k: sum(result.counts[t][k] for t in MENTION_TYPES)
                                                   for k in result.counts[MENTION_TYPES[0]]}})
    ccols = ["mention_type", "evaluated", "via_split_antecedent", "no_antecedent", "not_scorable", "cut",
             "singleton_dropped"]
    cheads = ["type", "evaluated", "of which via split antecedents", "no antecedent", "antecedent outside window",
              "cut by window", "singletons dropped"]
    return ("\n" + markdown_table(count_rows, ccols, headers=cheads),
            "\n" + text_table(count_rows, ccols, headers=cheads))


def _band_tables(result: CorefResult, best_all: tuple[int, int] | None) -> tuple[str, str]:
    """Markdown and terminal text of accuracy by sentence distance (the best head vs the baselines)."""
    if best_all is None:
        return "", ""
    band_rows = []
    for band in DISTANCE_BANDS:
        n = int(result.head_counts(None, band)[1].sum())
        row: dict[str, Any] = {"band": band, "n": n,
                               "head": float(result.accuracy(None, band)[best_all])}
        row.update({b: result.baseline_accuracy(b, None, band) for b in BASELINES})
        band_rows.append(row)
    hname = head_name(result.layers[best_all[0]], result.heads[best_all[1]])
    bcols = ["band", "n", "head", *BASELINES]
    bheads = ["sentences to nearest antecedent", "mentions", f"head {hname}",
              *(BASELINE_LABELS[b] for b in BASELINES)]
    return ("\n" + markdown_table(band_rows, bcols, headers=bheads, percent=["head", *BASELINES]),
            "\n" + text_table(band_rows, bcols, headers=bheads, percent=["head", *BASELINES]))


def head_rows(layers: Sequence[int], heads: Sequence[int], columns: Mapping[str, np.ndarray]) -> Rows:
    """One row per head (``scores.csv``): its 1-based name, layer and head, and each ``(L, H)`` column's value."""
    rows = []
    for i, layer in enumerate(layers):
        for j, head in enumerate(heads):
            row: dict[str, Any] = {"head": head_name(layer, head), "layer": layer + 1, "head_in_layer": head + 1}
            row.update({k: float(v[i, j]) for k, v in columns.items()})
            rows.append(row)
    return rows


# ---------------------------------------------------------------------------------- bridging tables
def bridging_tables(result: BridgingResult, selection: BridgingResult | None, *, sel: SelectionInfo | None = None,
                    n_resamples: int = 1000, min_links: int = MIN_LINKS) -> tuple[Rows, str, str, Correction]:
    """Rows, Markdown and terminal text of the bridging leaderboard (one row for all links, then one per run
    of distance bands holding at least ``min_links`` links on the reported data), and its correction.

    Per row: the best argmax head against the stronger baseline (nearest mention or best offset, chosen
    on the selection data) and the uniform floor; the best mass head against uniform attention. Both
    tests are paired over documents and Holm-corrected together; rows with too few links are not tested.
    """
    sel = sel or SelectionInfo("separate" if selection is not None else "same", "selection split", "report data")
    chooser = selection if selection is not None else result
    groups = merge_bands([result.links(b) for b in DISTANCE_BANDS], min_links)
    entries: list[tuple[str, Any, bool]] = [("all", None, result.links() >= min_links)]
    if len(groups) > 1:
        entries += [(g.label, g.bands, g.enough) for g in groups]
    rows = [_bridging_row(result, chooser, label, bands, enough, sel.short, n_resamples)
            for label, bands, enough in entries]
    for r in rows:
        r["why"] = r["mass_why"] = f"too few links (< {min_links})" if not r["enough_links"] else "no head"
    correction = _sig_cells(rows, sel, ("", "mass_"))  # argmax and mass tests: one family
    return _bridging_text(rows, sel, correction, n_resamples, min_links, len(result.units)) + (correction,)


def _bridging_row(result: BridgingResult, chooser: BridgingResult, label: str, bands: Any, enough: bool,
                  tag: str, n_resamples: int) -> dict[str, Any]:
    """One row of the bridging table: best argmax and mass heads, baselines, floors, tests and near ties."""
    hits, mass, n = result.sums(bands)
    base = result.baseline_sums(bands)
    row: dict[str, Any] = {"band": label, "bands": " ".join(bands or DISTANCE_BANDS), "scored": int(n.sum()),
                           "not_scorable": sum(result.counts["not_scorable"][b] for b in (bands or DISTANCE_BANDS)),
                           "selected_on": tag, "enough_links": enough, "chance_mass": result.chance_mass(bands),
                           "uniform_floor": result.uniform_floor(bands), "nearest": result.nearest_accuracy(bands)}
    k = int(np.nanargmax(np.nan_to_num(chooser.offset_accuracy(bands), nan=-1.0)))
    row.update({"offset": result.offsets[k], "offset_accuracy": float(result.offset_accuracy(bands)[k])})
    use_offset = np.nan_to_num(chooser.offset_accuracy(bands)[k], nan=-1) > np.nan_to_num(
        chooser.nearest_accuracy(bands), nan=-1)
    base_hits = base["offsets"][:, k] if use_offset else base["nearest"]
    row["baseline"] = f"offset {result.offsets[k]:+d}" if use_offset else "nearest mention"
    row["baseline_accuracy"] = row["offset_accuracy"] if use_offset else row["nearest"]
    for score, values, fn, against in (("accuracy", hits, "accuracy", base_hits),
                                       ("mass", mass, "mass_ratio", base["chance"])):
        pre = "" if score == "accuracy" else "mass_"
        lh = _best(getattr(chooser, fn)(bands))
        if lh is None or n.sum() == 0:
            row.update({f"{score}_head": "-", score: float("nan"), f"{score}_ci": "-", f"{pre}testable": False,
                        f"{pre}p_value": float("nan"), f"{pre}margin": float("nan"), f"{score}_ties": "",
                        f"{score}_ties_cell": "-"})
            continue
        value = float(getattr(result, fn)(bands)[lh])
        lo, hi = bootstrap_ci(values[:, lh[0], lh[1]], n, n_resamples=n_resamples)
        ties = _ties(values, n, lh, result.layers, result.heads)
        floor = row["baseline_accuracy"] if score == "accuracy" else row["chance_mass"]
        row.update({f"{score}_head": head_name(result.layers[lh[0]], result.heads[lh[1]]), score: value,
                    f"{score}_low": float(lo), f"{score}_high": float(hi), f"{score}_ci": _cell(value, lo, hi),
                    f"{pre}margin": value - floor, f"{pre}p_value": _test(values[:, lh[0], lh[1]], against, n),
                    f"{pre}testable": enough, f"{score}_ties": " ".join(ties), f"{score}_ties_cell": _ties_cell(ties)})
    return row


def _bridging_text(rows: Rows, sel: SelectionInfo, correction: Correction, n_resamples: int,
                   min_links: int, n_documents: int | None = None) -> tuple[Rows, str, str]:
    """The two bridging tables (argmax accuracy, mass ratio) as Markdown and text, with the footer."""
    shown = [{**r, "margin_pts": r["margin"], "mass_margin_pts": r["mass_margin"]} for r in rows]
    cols_a = ["band", "scored", "not_scorable", "accuracy_head", "accuracy_ci", "nearest", "offset",
              "offset_accuracy", "uniform_floor", "baseline", "margin_pts", "p_cell", "sig", "accuracy_ties_cell"]
    heads_a = ["sentence distance", "links scored", "not scorable", "best argmax head", "argmax accuracy % [95% CI]",
               "nearest mention %", "best offset", "offset %", "uniform floor %", "tested against",
               "margin (points)", "p (Holm)", "significant", "near ties"]
    cols_m = ["band", "scored", "mass_head", "mass_ci", "chance_mass", "mass_margin_pts", "mass_p_cell", "mass_sig",
              "mass_ties_cell"]
    heads_m = ["sentence distance", "links scored", "best mass head", "mass ratio % [95% CI]", "uniform mass %",
               "margin over uniform (points)", "p (Holm)", "significant", "near ties"]
    pct = ["nearest", "offset_accuracy", "uniform_floor", "chance_mass", "margin_pts", "mass_margin_pts"]
    note = (f"\nArgmax: a prediction is right when it is the head word of any preceding mention of the antecedent "
            f"entity (or of the reader's antecedent); 'uniform floor' is the expected accuracy of uniform attention "
            f"over the candidate words, 'uniform mass' the mass ratio of a head attending evenly to every word. "
            f"Distance bands are merged until each row holds at least {min_links} links.\n")
    md = ("Argmax accuracy\n\n" + markdown_table(shown, cols_a, headers=heads_a, percent=pct)
          + "\nAttention-mass ratio\n\n" + markdown_table(shown, cols_m, headers=heads_m, percent=pct))
    txt = ("Argmax accuracy\n" + text_table(shown, cols_a, headers=heads_a, percent=pct)
           + "\nAttention-mass ratio\n" + text_table(shown, cols_m, headers=heads_m, percent=pct))
    tail = note + footer(sel, correction, n_resamples, n_documents)
    return rows, md + tail, txt + tail


# ---------------------------------------------------------------------------------- per-head columns
def coref_columns(result: CorefResult) -> dict[str, np.ndarray]:
    """The ``(L, H)`` columns of the coreference ``scores.csv``: accuracy per mention type and distance band."""
    columns = {f"accuracy_{c}": result.accuracy(None if c == "all" else c) for c in COLUMNS}
    columns.update({f"accuracy_distance_{b}": result.accuracy(None, b) for b in DISTANCE_BANDS})
    return columns


def coref_panels(result: CorefResult) -> dict[str, np.ndarray]:
    """Heatmap panels of the coreference report: accuracy per column (``all`` first)."""
    return {c: result.accuracy(None if c == "all" else c) for c in COLUMNS}


def bridging_columns(result: BridgingResult) -> dict[str, np.ndarray]:
    """The ``(L, H)`` columns of the bridging ``scores.csv``: argmax accuracy and mass ratio, overall and per band."""
    columns = {"accuracy_all": result.accuracy(), "mass_all": result.mass_ratio()}
    for b in DISTANCE_BANDS:
        columns[f"mass_distance_{b}"] = result.mass_ratio(b)
        columns[f"accuracy_distance_{b}"] = result.accuracy(b)
    return columns


def bridging_panels(result: BridgingResult) -> dict[str, np.ndarray]:
    """Heatmap panels of the bridging report: argmax accuracy, then mass ratio, each overall and per band
    (the two kinds are drawn on separate colour scales: :data:`BRIDGING_SCALES`)."""
    panels = {"argmax accuracy": result.accuracy()}
    panels.update({f"accuracy, distance {b}": result.accuracy(b) for b in DISTANCE_BANDS})
    panels["mass ratio"] = result.mass_ratio()
    panels.update({f"mass, distance {b}": result.mass_ratio(b) for b in DISTANCE_BANDS})
    return panels


#: Bridging heatmap panels by colour scale: argmax accuracy and mass ratio never share one.
BRIDGING_SCALES = {"accuracy": ("argmax accuracy", *(f"accuracy, distance {b}" for b in DISTANCE_BANDS)),
                   "mass": ("mass ratio", *(f"mass, distance {b}" for b in DISTANCE_BANDS))}


# ---------------------------------------------------------------------------------- in short
def _pct(value: Any) -> str:
    """A share as the tables print it: percent with 1 decimal, ``-`` for NaN."""
    return "-" if value is None or not np.isfinite(value) else f"{100 * value:.1f}"


def _tested(row: Mapping[str, Any], prefix: str = "") -> str:
    """``Holm p 0.003, significant`` (or why the row was not tested)."""
    sig = row.get(f"{prefix}sig", "-")
    if sig in ("yes", "no"):
        return f"Holm p {row.get(f'{prefix}p_cell', '-')}, {'significant' if sig == 'yes' else 'not significant'}"
    return f"not tested: {sig}"


def _coref_findings(rows: Rows) -> list[str]:
    """Coreference in short: the best head on all mentions against its baseline, and per mention type."""
    heads = [r for r in rows if r["kind"] == "head"]
    first = next((r for r in heads if r["mention_type"] == "all"), None)
    if first is None:
        return ["No head was scored: no mention has an antecedent the heads can point to."]
    found = [f"Head {first['head']} picks the antecedent of {_pct(first['accuracy'])}% "
             f"[{_pct(first['ci_low'])}, {_pct(first['ci_high'])}] of {first['n']} mentions, against "
             f"{_pct(first['baseline_accuracy'])}% for the best baseline ({first['baseline']}): "
             f"{_pct(first['margin'])} points, {_tested(first)}."]
    per_type = [f"{r['mention_type']} {r['head']} ({_pct(r['accuracy'])}%, {_tested(r)})" for r in heads
                if r["system"].startswith("Best head per column") and r["mention_type"] != "all" and r["n"]]
    if per_type:
        found.append("The best head per mention type: " + "; ".join(per_type) + ".")
    return found


def _bridging_findings(rows: Rows) -> list[str]:
    """Bridging in short: over all links, the best argmax head against its baseline and the best mass head against
    uniform attention."""
    row = next((r for r in rows if r["band"] == "all"), None)
    if row is None or row.get("accuracy_head", "-") == "-":
        return ["No bridging link could be scored."]
    return [f"Over all {row['scored']} links, head {row['accuracy_head']} points at the antecedent for "
            f"{_pct(row['accuracy'])}% [{_pct(row.get('accuracy_low'))}, {_pct(row.get('accuracy_high'))}], against "
            f"{_pct(row['baseline_accuracy'])}% for the {row['baseline']} baseline: {_pct(row['margin'])} points, "
            f"{_tested(row)}.",
            f"Head {row['mass_head']} has the largest attention-mass ratio (the share of an anaphor word's attention "
            f"on the antecedent span), {_pct(row['mass'])}%, against {_pct(row['chance_mass'])}% for uniform "
            f"attention: {_pct(row['mass_margin'])} points, {_tested(row, 'mass_')}."]


def anaphora_findings(name: str, rows: Rows, sel: SelectionInfo, correction: Correction) -> list[str]:
    """The coreference or bridging leaderboard in short (``name``: ``coref`` or ``bridging``): the best heads with
    their numbers and tests, then where heads were chosen and how many tests the tables hold."""
    found = _coref_findings(rows) if name == "coref" else _bridging_findings(rows)
    where = ("on the reported data itself (optimistic, never tested)" if sel.mode == "same" else
             f"on {sel.selected_on} and reported on {sel.reported_on}")
    found.append(f"Heads were chosen {where}; tests are paired over documents, Holm-corrected over the "
                 f"{correction.n_tests} tests of the tables.")
    return found


# ---------------------------------------------------------------------------------- files
def write_anaphora(folder: OutputFolder, run: Any) -> RunRecord:
    """Write a coreference or bridging run's files into ``folder``; the run record to write last.

    Files: ``{NAME}_leaderboard.{md,csv,json}``, ``scores.csv``, (with ``folder.figures``) the heatmaps and the
    saved run (``NAME/``), ``NAME`` being ``coref`` or ``bridging``.
    """
    rows, md, _, correction = run.full_tables()
    record = run.record.updated(selection=run.selection_info.as_dict(), significance=correction.as_dict())
    inputs = inputs_lines(RunRecord.of(run.record), limit=None)
    scope = "every document of the corpus (both halves)" if run.whole is not run.result else "the reported data"
    md = f"`scores.csv` and the heatmaps show every head on {scope}.\n\n{md}"
    found = anaphora_findings(run.NAME, rows, run.selection_info, correction)
    folder.add_all(write_leaderboard(folder.root, run.NAME, title=run.title, cells=run.CELLS, rows=rows, md=md,
                                     record=record, scores=run.head_rows(), inputs=inputs, findings=found))
    if folder.figures:
        folder.add_all(write_heatmaps(folder.root, run.NAME, run.panels(), title=run.title, label=run.LABEL,
                                      baseline=run._baseline(), figure_format=folder.figure_format,
                                      scales=run.SCALES))
    folder.save(run.NAME, run)  # the run itself (coref/, bridging/): probes.load(out_dir) reads it back
    return record


def write_leaderboard(out: Path, name: str, *, title: str, cells: str, rows: Rows, md: str,
                      record: RunRecord, scores: Rows, inputs: Sequence[str] = (),
                      findings: Sequence[str] = ()) -> list[Path]:
    """Write ``{name}_leaderboard.{md,csv,json}`` (the JSON holds ``record`` too) and ``scores.csv`` to ``out``.

    ``findings``: the answers in short, the report's first section (:func:`anaphora_findings`); ``inputs``: lines
    saying what happened to the inputs (windows analysed, skipped ... by id), listed before the tables.
    """
    out.mkdir(parents=True, exist_ok=True)
    said = [*findings, f"{INDEXING_NOTE[:1].upper()}{INDEXING_NOTE[1:]}."]
    intro = "\n".join([f"# {md_heading(title + source_suffix(record))}", "", *opening(md_text(f) for f in said),
                       md_text(source_sentence(record)), "", "## The tables", ""])
    intro += f"\nCells: {cells}, in % [95% bootstrap interval, resampling documents].\n\n"
    if inputs:
        intro += "Inputs (windows over the model's maximum are skipped; a truncated one is not analysed):\n\n"
        intro += "".join(f"- {md_text(line)}\n" for line in inputs) + "\n"
    from probes.reports.atomic import write_text  # whole or not at all

    path = write_text(out / f"{name}_leaderboard.md", md_document(intro + md))
    data = [{k: v for k, v in row.items() if not k.endswith("_cell")} for row in rows]  # display-only cells dropped
    return [path, write_csv(data, out / f"{name}_leaderboard.csv"),
            write_json({"rows": data, "record": record.to_dict()}, out / f"{name}_leaderboard.json"),
            write_csv(scores, out / "scores.csv")]


def write_heatmaps(out: Path, name: str, panels: Mapping[str, np.ndarray], *, title: str, label: str,
                   baseline: float | None, figure_format: str = "png",
                   scales: Mapping[str, Sequence[str]] | None = None) -> list[Path]:
    """``{name}_heatmap.FMT`` (the first panel, with ``baseline`` marked) and ``{name}_heatmaps.FMT`` (every panel),
    FMT being ``figure_format`` (png, svg, pdf).

    ``scales``: panels grouped by colour scale (e.g. accuracy and mass ratio); each group gets its own
    overview with its own scale, the first as ``{name}_heatmaps.FMT``, the others as
    ``{name}_{group}_heatmaps.FMT``.
    """
    from probes.reports.figures import head_heatmap, overview_figure

    out.mkdir(parents=True, exist_ok=True)
    first = next(iter(panels))
    one = head_heatmap(panels[first], out / f"{name}_heatmap.{figure_format}", title=f"{title}: {first}", label=label,
                       baseline=baseline, vmax=None)
    paths = [Path(one)]
    groups = dict(scales) if scales else {"": tuple(panels)}
    for k, (group, names) in enumerate(groups.items()):
        chosen = {p: panels[p] for p in names if p in panels}
        top = max((float(np.nanmax(v)) for v in chosen.values() if np.isfinite(v).any()), default=1.0)
        stem = f"{name}_heatmaps" if k == 0 else f"{name}_{group}_heatmaps"
        suptitle = title if not group else f"{title} ({group}, own colour scale)"
        paths.append(Path(overview_figure(chosen, out / f"{stem}.{figure_format}", suptitle=suptitle,
                                          ncols=min(6 if scales else 4, len(chosen)), vmax=top)))
    return paths
