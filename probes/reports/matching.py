"""The head matching for people: ``matching.csv``, ``matching.md``, the distance-matrix figure, a terminal summary.

Made from a :class:`~probes.runs.match.MatchRun` alone (duck-typed: this stage never imports the runs), so a saved
run can be written again. Layers and heads are 1-based in every file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.compare.head_profiles import PROFILE_RULE
from probes.compare.matching import MATCHING_RULE
from probes.heads.naming import INDEXING_NOTE
from probes.reports.escape import md_document, path_href
from probes.reports.inputs import inputs_lines
from probes.reports.prose import opening
from probes.reports.tables import md_heading, md_text, write_csv
from probes.reports.writer import OutputFolder
from probes.run_record import RunRecord

__all__ = ["MATCHING_COLUMNS", "write_matching", "matching_figure", "matching_summary", "matching_markdown",
           "matching_findings"]

#: Columns of ``matching.csv`` (and ``profile_matching.csv``), layers and heads 1-based.
MATCHING_COLUMNS: tuple[str, ...] = ("layer_a", "head_a", "layer_b", "head_b", "distance", "distance_low",
                                     "distance_high", "null_low", "null_high", "role_a", "role_b")


def _rows(run: Any, matching: Any) -> list[dict[str, Any]]:
    """``matching``'s pairs as CSV rows, with both heads' roles."""
    table = matching.to_pandas()
    rows = table.to_dict("records")
    for row, a, b in zip(rows, matching.head_a, matching.head_b):
        row["role_a"] = run.roles_a[int(a)] if run.roles_a else ""
        row["role_b"] = run.roles_b[int(b)] if run.roles_b else ""
        for key in ("layer_a", "head_a", "layer_b", "head_b"):
            row[key] = int(row[key])
    return rows


def _models(record: RunRecord) -> dict[str, str]:
    models = record.details.models or {}
    return {name: str((models.get(name) or {}).get("spec", name)) for name in ("a", "b", "null") if name in models}


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _with_interval(summary: dict[str, Any], key: str) -> str:
    interval = summary.get(f"{key}_interval")
    text = _number(summary.get(key))
    if interval and all(isinstance(v, float) and not math.isnan(v) for v in interval):
        text += f" [{interval[0]:.4f}, {interval[1]:.4f}]"
    return text


def _floors(run: Any) -> list[str]:
    """The summary numbers, one plain-text line each."""
    s = run.summary
    within_a = [v for v in s.get("D_within_a", []) if v == v]
    within_b = [v for v in s.get("D_within_b", []) if v == v]
    lines = [
        f"D_match (mean matched distance, 95% interval over {s.get('unit', 'sentence')}s): {_with_interval(s, 'D_match')}",
        f"D_random (expected mean distance of a random one-to-one assignment): {_number(s.get('D_random'))}",
        f"D_self: {_number(s.get('D_self'))} ({s.get('D_self_note', '')})",
    ]
    if "D_null" in s:
        lines.append(f"D_null (mean matched distance to the null model): {_with_interval(s, 'D_null')}")
    if "D_permuted" in s:
        lines.append("D_permuted (mean matched distance with B's heads shuffled across layers): "
                     f"{_with_interval(s, 'D_permuted')}")
    lines += [
        f"D_within, model A (mean distance between distinct heads of a layer, mean over layers): "
        f"{_number(float(np.mean(within_a)) if within_a else float('nan'))}",
        f"D_within, model B: {_number(float(np.mean(within_b)) if within_b else float('nan'))}",
        f"Share of pairs matched to the same layer-head: {_number(s.get('identity_share'))}",
        f"Agreement of the matchings made on two halves of the sentences: {_number(s.get('half_agreement'))}",
        f"Role recurrence (share of A's roles found among B's heads): {_number(s.get('role_share'))} "
        f"(A's roles: {', '.join(s.get('roles_a', [])) or 'none'}; missing in B: "
        f"{', '.join(s.get('roles_missing', [])) or 'none'})",
        f"Matched pairs sharing their role (of {s.get('matched_with_role', 0)} A heads with a role): "
        f"{_number(s.get('matched_role_share'))}",
    ]
    if run.profile is not None:
        lines += [f"Profile distance: D_match {_number(s.get('profile_D_match'))}, D_random "
                  f"{_number(s.get('profile_D_random'))}, D_self (two halves) {_number(s.get('profile_D_self'))}; "
                  f"share of A heads matched to the same B head by both distances {_number(s.get('profile_agreement'))}"]
    elif s.get("profile_note"):
        lines.append(f"Profile distance: not computed ({s['profile_note']})")
    return lines


def _side(summary: dict[str, Any], key: str, other: str) -> str:
    """How ``key``'s interval lies against ``other``'s: ``lies below``, ``lies above`` or ``overlaps``."""
    a, b = summary.get(f"{key}_interval"), summary.get(f"{other}_interval")
    if not a or not b or any(not isinstance(v, float) or math.isnan(v) for v in (*a, *b)):
        return "cannot be set against"
    return "lies below" if a[1] < b[0] else "lies above" if a[0] > b[1] else "overlaps"


def matching_findings(run: Any) -> list[str]:
    """The matching in short: how far apart matched heads are against the floors, against the null, whether head
    numbers and roles carry over, and how layers and heads are numbered."""
    s, m = run.summary, run.matching
    within = [float(np.mean([v for v in s.get(f"D_within_{x}", []) if v == v] or [math.nan])) for x in ("a", "b")]
    found = [f"Matched one-to-one {'within' if m.within_layers else 'across'} layers, the {m.n_pairs} pairs of heads "
             f"of A and B are D_match {_with_interval(s, 'D_match')} apart (mean JS per word row, 95% interval over "
             f"{s.get('unit', 'sentence')}s), against D_random {_number(s.get('D_random'))} for a random one-to-one "
             f"assignment and D_within {_number(within[0])} (A) and {_number(within[1])} (B) between the distinct "
             "heads of a layer."]
    for key, label in (("D_null", "the null model"), ("D_permuted", "B's heads shuffled across layers")):
        if key in s:
            found.append(f"Against {label}: {key} {_with_interval(s, key)}; D_match's interval lies "
                         f"{_side(s, 'D_match', key)} the null's (intervals compared, no p-value).")
    found.append(f"Share of pairs matched to the same layer-head: {_number(s.get('identity_share'))}; the matchings "
                 f"made on two halves of the sentences agree on {_number(s.get('half_agreement'))} of the pairs.")
    found.append(f"Roles: {_number(s.get('role_share'))} of A's roles recur among B's heads, and "
                 f"{_number(s.get('matched_role_share'))} of matched pairs share their role.")
    found.append(f"{INDEXING_NOTE[:1].upper()}{INDEXING_NOTE[1:]}; head numbers in the arrays of the saved result "
                 "are 0-based (layer x H + head).")
    return found


def matching_markdown(run: Any, figure: str | None) -> str:
    """``matching.md``: what was matched, on which distance, the floors, how intervals were made, the files."""
    record = RunRecord.of(run.record)
    models = _models(record)
    m = run.matching
    data = record.data if isinstance(record.data, Mapping) else {}
    mode = "within layers" if m.within_layers else "across layers"
    md = [f"# Head matching: {md_heading(models.get('a', 'A'))} and {md_heading(models.get('b', 'B'))}", "",
          *opening(md_text(f) for f in matching_findings(run)), "## What was matched", "",
          md_text(f"Model A: {models.get('a', 'A')} ({m.shape_a[0]} layers x {m.shape_a[1]} heads); model B: "
                  f"{models.get('b', 'B')} ({m.shape_b[0]} x {m.shape_b[1]}); data: {data.get('name', '')}. Only the "
                  "sentences every model read whole are used (a sentence one model skipped is left out for all)."), "",
          *(f"- {md_text('Inputs, ' + line)}" for line in inputs_lines(record)), "",
          md_text(f"Matching {mode}: {MATCHING_RULE}. {m.n_pairs} pairs."), "",
          md_text("Distance (matching.csv): " + str((record.details.match.distance or {}).get("attention",
                                                                                            m.distance_name))
                  + "; 0 for identical maps, ln 2 = 0.693 at most."), "",
          md_text(f"Intervals: distance_low/high, 95% percentile bootstrap over {run.summary.get('unit', 'sentence')}s "
                  f"({run.summary.get('n_units', '?')} units, {run.summary.get('n_resamples', '?')} resamples, seed 0), "
                  "the matching held fixed. Null: " + (m.null or "none (give a null model, or match within layers "
                                                             "for the label-permutation null)") + "."), "",
          "## Floors and summary", "", *(f"- {md_text(line)}" for line in _floors(run)), ""]
    if run.profile is not None:
        md += ["## Profile distance", "", md_text(PROFILE_RULE + "; features used: " + ", ".join(run.profile_columns)
                                                  + "."), ""]
        if run.profile_dropped:
            md += [md_text("Left out: " + "; ".join(f"{k} ({v})" for k, v in run.profile_dropped.items()) + "."), ""]
        md += [md_text("The matching on this distance is in profile_matching.csv (no intervals or null there)."), ""]
    md += ["## Files", "", "- matching.csv: one row per matched pair (1-based layer_a, head_a, layer_b, head_b, "
           "distance, its interval, the null's interval, both heads' roles)",
           "- profile_matching.csv: the same on the profile distance", "- match/: the saved result (probes.load)",
           "- run.json: models, data, options, versions, timings"]
    if figure:
        md += ["", f"![distance matrix]({path_href(figure)})"]
    return md_document("\n".join(md) + "\n")


def matching_figure(distance: npt.ArrayLike, matching: Any, path: str | Path, *, title: str) -> Path:
    """The ``(N_A, N_B)`` distance matrix as a heatmap (rows: heads of A, columns: heads of B, layer-major), the
    matched pairs marked with red boxes and layer boundaries drawn."""
    from probes.reports.figures import DPI, _new_figure, _wrap, save_figure

    values = np.asarray(distance, dtype=float)
    n_a, n_b = values.shape
    size = min(12.0, max(4.0, 0.12 * max(n_a, n_b) + 2.5))
    fig = _new_figure((size + 1.2, size), dpi=DPI)
    ax = fig.subplots()
    im = ax.imshow(values, cmap="viridis_r", aspect="auto", interpolation="nearest", origin="upper")
    ax.scatter(matching.head_b, matching.head_a, marker="s", s=max(4.0, 1600.0 / max(n_a, n_b)), facecolors="none",
               edgecolors="red", linewidths=0.8)
    for count, heads, line in ((matching.shape_a[0], matching.shape_a[1], ax.axhline),
                               (matching.shape_b[0], matching.shape_b[1], ax.axvline)):
        for layer in range(1, count):
            line(layer * heads - 0.5, color="white", linewidth=0.6)

    def ticks(n_layers: int, n_heads: int) -> tuple[list[float], list[str]]:
        return [layer * n_heads + (n_heads - 1) / 2 for layer in range(n_layers)], [str(l + 1) for l in range(n_layers)]

    ax.set_yticks(*ticks(*matching.shape_a), fontsize=7)
    ax.set_xticks(*ticks(*matching.shape_b), fontsize=7)
    ax.set_ylabel("model A: layer (heads 1..H within it, 1-based)")
    ax.set_xlabel("model B: layer (heads 1..H within it, 1-based)")
    ax.set_title(_wrap(title + "\n(red boxes: matched pairs)", size, 9), fontsize=9)
    fig.colorbar(im, ax=ax, label="distance")
    return save_figure(fig, path)


def write_matching(folder: OutputFolder, run: Any) -> RunRecord:
    """Write a :class:`~probes.runs.match.MatchRun`'s files into ``folder``; the run record to write last."""
    record = RunRecord.of(run.record)
    out = folder.root
    folder.add(write_csv(_rows(run, run.matching), out / "matching.csv", MATCHING_COLUMNS))
    profile_rows = _rows(run, run.profile) if run.profile is not None else []
    folder.add(write_csv(profile_rows, out / "profile_matching.csv", MATCHING_COLUMNS))
    folder.save("match", run)
    figure = None
    if folder.figures:
        models = _models(record)
        name = f"figures/matching.{folder.figure_format}"
        folder.add(matching_figure(run.distances.per_row(), run.matching, folder.path(name),
                                   title=f"Mean JS per word row between the heads of {models.get('a', 'A')} (rows) and "
                                         f"{models.get('b', 'B')} (columns)"))
        figure = name
    folder.text("matching.md", matching_markdown(run, figure))
    return record.updated(timings={**record.timings, "writing_s": folder.seconds()}, indexing=INDEXING_NOTE)


def matching_summary(run: Any) -> str:
    """The terminal summary: the floors, then the first pairs."""
    m = run.matching
    lines = [f"Matched {m.n_pairs} heads {'within' if m.within_layers else 'across'} layers "
             f"(attention distance, mean JS per word row; layers and heads 1-based)"]
    lines += _floors(run)
    return "\n".join(lines) + "\n"
