"""Coreference and bridging reports: leaderboard tables, per-head rows and heatmaps.

Made from :class:`~probes.analysis.coreference.CorefResult` and
:class:`~probes.analysis.bridging.BridgingResult` (never the reverse): the rows of
``coref_leaderboard.*`` / ``bridging_leaderboard.*``, the layers x heads ``scores.csv`` and the
heatmaps. Heads are printed 1-based (``layer-head``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from probes.analysis.bridging import BridgingResult
from probes.analysis.coreference import BASELINES, DISTANCE_BANDS, MENTION_TYPES, CorefResult
from probes.heads.intervals import bootstrap_ci
from probes.heads.naming import INDEXING_NOTE, head_name
from probes.reports.tables import markdown_table, text_table, write_csv, write_json

__all__ = ["BASELINE_LABELS", "COLUMNS", "coref_tables", "bridging_tables", "head_rows", "coref_columns",
           "bridging_columns", "coref_panels", "bridging_panels", "write_leaderboard", "write_heatmaps"]

#: Row labels of the three baselines.
BASELINE_LABELS = {"nearest": "Nearest mention", "head_match": "Head-word match", "rule_sieve": "Rule-based sieve"}
#: Columns of the coreference leaderboard: every mention, then each mention type.
COLUMNS = ("all",) + MENTION_TYPES

Rows = list[dict[str, Any]]


def _cell(acc: float, lo: float, hi: float) -> str:
    if not np.isfinite(acc):
        return "-"
    return f"{100 * acc:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def _best(values: np.ndarray) -> tuple[int, int] | None:
    if not np.isfinite(values).any():
        return None
    layer, head = np.unravel_index(np.nanargmax(values), values.shape)
    return int(layer), int(head)


# ---------------------------------------------------------------------------------- coref tables
def coref_tables(result: CorefResult, selection: CorefResult | None, *, n_resamples: int = 1000
                 ) -> tuple[list[dict[str, Any]], str, str]:
    """Rows (long format) and the Markdown / terminal text of the coreference leaderboard.

    The head of each column is chosen on ``selection`` (another split) when given, else on
    ``result`` itself (optimistic, and said so).
    """
    chooser = selection or result
    rows: list[dict[str, Any]] = []
    kw = {"n_resamples": n_resamples}
    sel_name = "selection split" if selection is not None else "same data"
    best_all = _best(chooser.accuracy())
    table: dict[str, dict[str, str]] = {}
    n_row = {"system": "evaluated mentions"}
    for col in COLUMNS:
        t = None if col == "all" else col
        n_row[col] = str(int(result.head_counts(t)[1].sum()))
    for name in BASELINES:
        label = BASELINE_LABELS[name]
        table[label] = {"system": label}
        for col in COLUMNS:
            t = None if col == "all" else col
            acc = result.baseline_accuracy(name, t)
            lo, hi = bootstrap_ci(*result.baseline_counts(name, t), **kw)
            table[label][col] = _cell(acc, lo, hi)
            rows.append({"system": label, "kind": "baseline", "head": "", "mention_type": col, "accuracy": acc,
                         "ci_low": lo, "ci_high": hi, "n": int(result.head_counts(t)[1].sum()), "selected_on": ""})
    picks: list[tuple[str, tuple[int, int] | None, Callable[[str | None], tuple[int, int] | None]]] = []
    if best_all is not None:
        name = head_name(result.layers[best_all[0]], result.heads[best_all[1]])
        picks.append((f"Head {name} (best on all, {sel_name})", best_all, lambda t: best_all))
    picks.append((f"Best head per column ({sel_name})", None, lambda t: _best(chooser.accuracy(t))))
    for label, _, pick in picks:
        table[label] = {"system": label}
        for col in COLUMNS:
            t = None if col == "all" else col
            lh = pick(t)
            if lh is None:
                table[label][col] = "-"
                continue
            acc = float(result.accuracy(t)[lh])
            c, n = result.head_counts(t)
            lo, hi = bootstrap_ci(c[:, lh[0], lh[1]], n, **kw)
            hname = head_name(result.layers[lh[0]], result.heads[lh[1]])
            table[label][col] = _cell(acc, lo, hi) if "per column" not in label else f"{hname}: {_cell(acc, lo, hi)}"
            rows.append({"system": label, "kind": "head", "head": hname, "mention_type": col, "accuracy": acc,
                         "ci_low": lo, "ci_high": hi, "n": int(result.head_counts(t)[1].sum()),
                         "selected_on": sel_name})
    body = [n_row] + list(table.values())
    headers = ["", "All", "Pronoun", "Proper", "Nominal"]
    md = markdown_table(body, ["system", *COLUMNS], headers=headers)
    txt = text_table(body, ["system", *COLUMNS], headers=headers)
    for extra_md, extra_txt in (_count_tables(result), _band_tables(result, best_all)):
        md += extra_md
        txt += extra_txt
    return rows, md, txt


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
def bridging_tables(result: BridgingResult, selection: BridgingResult | None, *, n_resamples: int = 1000
                    ) -> tuple[list[dict[str, Any]], str, str]:
    """Rows and Markdown / terminal text of the bridging leaderboard, one row per distance band."""
    chooser = selection or result
    sel_name = "selection split" if selection is not None else "same data"
    rows: list[dict[str, Any]] = []
    for band in (None, *DISTANCE_BANDS):
        n = int(result.total[:, :].sum() if band is None else result.total[:, DISTANCE_BANDS.index(band)].sum())
        ns = sum(result.counts["not_scorable"].values()) if band is None else result.counts["not_scorable"][band]
        row: dict[str, Any] = {"band": "all" if band is None else band, "scored": n, "not_scorable": ns,
                               "selected_on": sel_name, "chance_mass": result.chance_mass(band)}
        for score, fn in (("accuracy", "accuracy"), ("mass", "mass_ratio")):
            lh = _best(getattr(chooser, fn)(band))
            if lh is None or n == 0:
                row.update({f"{score}_head": "-", score: float("nan"), f"{score}_ci": "-"})
                continue
            value = float(getattr(result, fn)(band)[lh])
            hits, mass, n_units = result.sums(band)
            values = hits if score == "accuracy" else mass
            lo, hi = bootstrap_ci(values[:, lh[0], lh[1]], n_units, n_resamples=n_resamples)
            row.update({f"{score}_head": head_name(result.layers[lh[0]], result.heads[lh[1]]), score: value,
                        f"{score}_low": lo, f"{score}_high": hi, f"{score}_ci": _cell(value, lo, hi)})
        rows.append(row)
    cols = ["band", "scored", "not_scorable", "accuracy_head", "accuracy_ci", "mass_head", "mass_ci", "chance_mass"]
    headers = ["sentence distance", "links scored", "not scorable", "best argmax head", "argmax accuracy % [95% CI]",
               "best mass head", "mass ratio % [95% CI]", "uniform mass %"]
    md = markdown_table(rows, cols, headers=headers, percent=["chance_mass"])
    txt = text_table(rows, cols, headers=headers, percent=["chance_mass"])
    note = (f"\nBest heads chosen per row on the {sel_name}; 'uniform mass' is what a head attending "
            "evenly to every word of the window would score.\n")
    return rows, md + note, txt + note




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
    """Heatmap panels of the bridging report: argmax accuracy, mass ratio, mass ratio per band."""
    panels = {"argmax accuracy": result.accuracy(), "mass ratio": result.mass_ratio()}
    panels.update({f"mass, distance {b}": result.mass_ratio(b) for b in DISTANCE_BANDS})
    return panels


# ---------------------------------------------------------------------------------- files
def write_leaderboard(out: Path, name: str, *, title: str, cells: str, rows: Rows, md: str,
                      record: Mapping[str, Any], scores: Rows, inputs: Sequence[str] = ()) -> list[Path]:
    """Write ``{name}_leaderboard.{md,csv,json}`` (the JSON holds ``record`` too) and ``scores.csv`` to ``out``.

    ``inputs``: lines saying what happened to the inputs (windows analysed, skipped ... by id), listed first.
    """
    out.mkdir(parents=True, exist_ok=True)
    intro = f"# {title}\n\n{INDEXING_NOTE}. Cells: {cells}, in % [95% bootstrap interval, resampling documents].\n\n"
    if inputs:
        intro += "Inputs (windows over the model's maximum are skipped; a truncated one is not analysed):\n\n"
        intro += "".join(f"- {line}\n" for line in inputs) + "\n"
    path = out / f"{name}_leaderboard.md"
    path.write_text(intro + md, encoding="utf-8")
    return [path, write_csv(rows, out / f"{name}_leaderboard.csv"),
            write_json({"rows": rows, "record": record}, out / f"{name}_leaderboard.json"),
            write_csv(scores, out / "scores.csv")]


def write_heatmaps(out: Path, name: str, panels: Mapping[str, np.ndarray], *, title: str, label: str,
                   baseline: float | None, figure_format: str = "png") -> list[Path]:
    """``{name}_heatmap.FMT`` (the first panel, with ``baseline`` marked) and ``{name}_heatmaps.FMT`` (every panel),
    FMT being ``figure_format`` (png, svg, pdf)."""
    from probes.reports.figures import head_heatmap, overview_figure

    out.mkdir(parents=True, exist_ok=True)
    first = next(iter(panels))
    one = head_heatmap(panels[first], out / f"{name}_heatmap.{figure_format}", title=f"{title}: {first}", label=label,
                       baseline=baseline, vmax=None)
    top = max((float(np.nanmax(v)) for v in panels.values() if np.isfinite(v).any()), default=1.0)
    overview = overview_figure(dict(panels), out / f"{name}_heatmaps.{figure_format}", suptitle=title,
                               ncols=min(4, len(panels)), vmax=top)
    return [Path(one), Path(overview)]
