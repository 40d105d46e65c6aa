"""The head leaderboard for people: terminal and Markdown tables, CSV/JSON files, heatmaps, run record.

Everything here is made from rows (:class:`~probes.heads.selection.LeaderboardRow`) and
head scores; nothing runs a model, so a saved leaderboard can be written again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.dependency import HeadScores
from probes.analysis.split import SPLIT_RULE
from probes.errors import ConfigError
from probes.heads.intervals import unit_phrase
from probes.heads.naming import INDEXING_NOTE, head_name
from probes.heads.selection import LEADERBOARD_COLUMNS, LeaderboardRow, table_correction
from probes.reports.attention_source import source_sentence, source_suffix
from probes.reports.escape import md_document, path_href
from probes.reports.inputs import inputs_lines
from probes.reports.prose import opening
from probes.reports.tables import format_p, markdown_table, md_heading, md_text, text_table, write_csv, write_json
from probes.reports.writer import OutputFolder
from probes.run_details import plain
from probes.run_record import RunRecord

__all__ = ["format_leaderboard", "leaderboard_footer", "score_rows", "write_leaderboard", "TIMINGS_NOTE",
           "INTERVAL_NOTE", "interval_note", "selection_record"]

#: What the timings of a leaderboard's ``run.json`` mean.
TIMINGS_NOTE = ("extraction_s: wall time until the last attention arrived (model or store); scoring runs "
                "concurrently with extraction, so scoring_s is the wall time it added after that (the tail, "
                "compute, selection and intervals) and scoring_busy_s the time spent in the accumulators, "
                "mostly overlapped; writing_s: tables, run record and figures; "
                "overhead_fraction = (scoring_s + writing_s) / extraction_s")

#: How every interval of a leaderboard is made (the unit, documents or sentences, is :func:`interval_note`'s).
INTERVAL_NOTE = ("95% intervals: percentile bootstrap over {units} (1000 resamples, seed 0); the margin's "
                 "interval is paired (the same resampled {unit} for head and baseline)")


def interval_note(record: RunRecord) -> str:
    """:data:`INTERVAL_NOTE` with the run's resampling unit, e.g. ``over 30 documents`` (``over sentences`` for
    records written before the unit was recorded)."""
    phrase = unit_phrase(record.options.bootstrap)
    return INTERVAL_NOTE.format(units=phrase, unit=phrase.split()[-1])
#: What the ties column holds.
TIES_NOTE = ("ties: heads whose accuracy on the report data is not significantly below the reported head's "
             "(paired test, two-sided, uncorrected, alpha 0.05), best first; d2h = dep_to_head, h2d = head_to_dep; "
             "the full lists are in leaderboard.csv/json")

_DISPLAY = ("relation", "count", "head_name", "direction", "accuracy", "ci", "baseline", "margin", "p_adj", "beats",
            "ties_shown")
_HEADERS = ("relation", "count", "head", "direction", "acc %", "95% CI", "best baseline %", "margin", "p (Holm)",
            "sig.", "ties")
_SHORT = {"dep_to_head": "d2h", "head_to_dep": "h2d"}


def score_rows(report: HeadScores, select: HeadScores | None = None) -> list[dict[str, Any]]:
    """The full table: every relation x direction x layer x head, 1-based, for ``scores.csv``."""
    acc = report.accuracy()  # (D, L, H, R)
    sel_acc = select.accuracy() if select is not None else None
    rows = []
    for r, rel in enumerate(report.relations):
        s = select.relations.index(rel) if select is not None and rel in select.relations else None
        for d, direction in enumerate(report.directions):
            for li, layer in enumerate(report.layers):
                for hi, head in enumerate(report.heads):
                    row = {"relation": rel, "count": int(report.total[r]), "layer": layer + 1, "head": head + 1,
                           "head_name": head_name(layer, head), "direction": direction,
                           "correct": int(report.correct[d, li, hi, r]), "accuracy": float(acc[d, li, hi, r])}
                    if sel_acc is not None:
                        row["selection_accuracy"] = float(sel_acc[d, li, hi, s]) if s is not None else math.nan
                    rows.append(row)
    return rows


def _signed(k: int) -> str:
    return "ROOT" if k == 0 else f"{k:+d}"


def _sig(row: LeaderboardRow) -> str:
    """The sig. cell: the corrected result, or why there is none."""
    if row.selection == "same":
        return "n/a (same data)"
    if row.p_adjusted != row.p_adjusted:
        return "n/a (ROOT)" if row.note else "n/a"
    return "yes" if row.beats_baseline else "no"


def _ties_cell(row: LeaderboardRow, shown: int = 3) -> str:
    """``count: first few`` of the near ties, directions abbreviated."""
    if not row.tied_heads:
        return "0"
    names = []
    for name in row.tied_heads[:shown]:
        head, _, direction = name.partition(" ")
        names.append(f"{head} {_SHORT.get(direction, direction)}".strip())
    return f"{len(row.tied_heads)}: " + ", ".join(names) + (", ..." if len(row.tied_heads) > shown else "")


def _display_rows(rows: Sequence[LeaderboardRow]) -> list[dict[str, Any]]:
    """Rows with the shown cells: interval, best baseline with its offset/position, margin, p, sig., ties."""
    out = []
    for row in rows:
        d = row.as_dict()
        base = (f"{100 * row.position_accuracy:.1f} (pos {_signed(row.position_baseline)})"
                if row.best_baseline == "position" else
                f"{100 * row.baseline_accuracy:.1f} (offset {_signed(row.baseline_offset)})")
        d.update(ci=f"{100 * row.ci_low:.1f}-{100 * row.ci_high:.1f}", baseline=base,
                 margin=f"{100 * row.margin:+.1f}", beats=_sig(row), direction=row.direction,
                 p_adj=format_p(row.p_adjusted),
                 ties_shown=_ties_cell(row))
        out.append(d)
    return out


def format_leaderboard(rows: Sequence[LeaderboardRow], fmt: str = "text", *,
                       record: RunRecord | None = None) -> str:
    """Rows as a terminal table (``text``) or GitHub Markdown (``markdown``); accuracies in percent.

    With ``record`` (the run record), the table is followed by its footer (:func:`leaderboard_footer`).
    """
    if fmt not in ("text", "markdown"):
        raise ConfigError(f"format must be 'text' or 'markdown', found {fmt!r}")
    table = text_table if fmt == "text" else markdown_table
    text = table(_display_rows(rows), _DISPLAY, headers=_HEADERS, percent=("accuracy",))
    if record is None:
        return text
    return text + "\n" + "\n".join(leaderboard_footer(rows, record)) + "\n"


def selection_record(mode: str, selected_on: str, reported_on: str) -> dict[str, Any]:
    """``run.json``'s ``"selection"``: the mode, the names, and the split rule in ``"split"`` mode."""
    out: dict[str, Any] = {"mode": mode, "selected_on": selected_on, "reported_on": reported_on}
    if mode == "split":
        out["rule"] = SPLIT_RULE
    return out


def _selection_sentence(record: RunRecord) -> str:
    """Where heads and baselines were chosen, and what that means for the numbers."""
    rep = record.reported_on
    board = record.details.leaderboard
    mode = record.selection.mode or ("separate" if board.held_out_selection else "same")
    if mode == "split":
        halves = board.halves or {}
        sizes = (f" ({halves['select']} and {halves['report']} sentences)" if {"select", "report"} <= set(halves)
                 else "")
        return (f"Selection (split): heads and baselines were chosen on one half of {rep} and are reported and "
                f"tested on the other half{sizes}; {SPLIT_RULE}.")
    if mode == "separate":
        return (f"Selection (separate): heads and baselines were selected on {board.selected_on} and are "
                f"reported and tested on {rep}.")
    return (f"Selection (same, optimistic): heads and baselines were selected and reported on the same data ({rep}), "
            "as in Clark et al. (2019); accuracies and margins are optimistic and no row is tested (sig. n/a). "
            "Drop --select-on same for held-out selection.")


#: The footer line of a decoder's (sided) leaderboard.
SIDED_NOTE = ("Decoder: a word attends only to itself and earlier words, so every relation is split by the side of "
              "its gold head: '(head left)' words can be found only by dep_to_head (the dependent's row), '(head "
              "right)' words only by head_to_dep (the head's row, read as the dependent's column), and the other "
              "direction counts as wrong; the baselines are learned and scored on the same words; roots, which have "
              "no word to attend to, are left out.")


def leaderboard_footer(rows: Sequence[LeaderboardRow], record: RunRecord) -> list[str]:
    """The lines under a leaderboard: selection mode and names, intervals, test and correction, ties (and, for a
    decoder, how relations are split by side)."""
    sided = bool(record.options.sided)
    return [_selection_sentence(record), interval_note(record) + ".", table_correction(rows).footer(),
            "sig. = margin over the best baseline > 0 with Holm-adjusted p < 0.05. " + TIES_NOTE + ".",
            *([SIDED_NOTE] if sided else [])]


def _inputs_markdown(record: RunRecord) -> list[str]:
    """The "Inputs" paragraph: per split, sentences analysed and every one skipped, truncated or windowed, by id."""
    lines = inputs_lines(record, limit=None)
    return ["Inputs (a sentence over the model's maximum length, special tokens included, is skipped, truncated "
            "or run in windows, as `--on-long` says; a truncated one is given to no analysis):", "",
            *(f"- {md_text(line)}" for line in lines), ""] if lines else []


def _findings(rows: Sequence[LeaderboardRow], record: RunRecord) -> list[str]:
    """The leaderboard in short: how many relations' heads beat their best baseline and by which test, the
    largest margin, the relations whose head does not beat it, and how heads and layers are numbered."""
    if not rows:
        return ["No relation has enough words in the report data to be listed."]
    mode = rows[0].selection
    tested = [r for r in rows if r.p_adjusted == r.p_adjusted]
    if mode == "same" or not tested:
        said = ("No row is tested: heads and baselines were selected and reported on the same data, so accuracies "
                "and margins are optimistic." if mode == "same" else "No row could be tested.")
    else:
        where = ("on one half of the data and tested on the other" if mode == "split" else
                 f"on {record.details.leaderboard.selected_on or rows[0].selected_on} and tested on "
                 f"{record.reported_on if record.has('reported_on') else 'the report data'}")
        said = (f"The best head of {sum(r.beats_baseline for r in tested)} of {len(tested)} relations beats the best "
                f"baseline (margin > 0, Holm-adjusted p < 0.05 over the table's {len(tested)} tests); heads and "
                f"baselines were chosen {where}.")
    best = max(rows, key=lambda r: -math.inf if r.margin != r.margin else r.margin)
    base = best.position_accuracy if best.best_baseline == "position" else best.baseline_accuracy
    test = "" if best.p_adjusted != best.p_adjusted else f", Holm p {format_p(best.p_adjusted)}"
    found = [said, f"The largest margin: {best.relation} ({best.direction}), head {head_name(best.layer, best.head)}, "
                   f"accuracy {100 * best.accuracy:.1f}% [{100 * best.ci_low:.1f}-{100 * best.ci_high:.1f}] against the "
                   f"best baseline's {100 * base:.1f}%: {100 * best.margin:+.1f} points{test}."]
    behind = [r.relation for r in tested if not r.beats_baseline]
    if behind and mode != "same":
        shown = ", ".join(behind[:10]) + (f" and {len(behind) - 10} more" if len(behind) > 10 else "")
        found.append(f"Not beating the best baseline: {shown}.")
    found.append(f"Accuracies are in percent; {INDEXING_NOTE}.")
    return found


def _markdown(rows: Sequence[LeaderboardRow], record: RunRecord, overview: str | None) -> str:
    """``leaderboard.md``: title, the answers in short, how heads were selected, what the inputs were, what the
    numbers mean, the table and its notes."""
    model = record.details.model if record.has("model") else "model"
    data = record.reported_on if record.has("reported_on") else "data"
    md = [f"# Head leaderboard: {md_heading(model)} on {md_heading(data)}{md_heading(source_suffix(record))}", "",
          *opening(md_text(f) for f in _findings(rows, record)),
          "## Selection and inputs", "", md_text(_selection_sentence(record)), "", md_text(source_sentence(record)), "",
          *_inputs_markdown(record),
          "## The leaderboard", "",
          "Accuracy: how often the head's most-attended other word is the gold head (Clark et al. 2019 §4.2). "
          "Baselines: fixed offset (Clark) or most frequent relative position (Voita), learned on the selection data; "
          "like heads, they never predict ROOT.", "",
          format_leaderboard(rows, "markdown"), *("- " + md_text(line) for line in leaderboard_footer(rows, record))]
    if overview:
        md += ["", f"![overview]({path_href(overview)})"]
    return md_document("\n".join(md) + "\n")


def write_leaderboard(folder: OutputFolder, board: Any) -> RunRecord:
    """Write a :class:`~probes.runs.leaderboard.Leaderboard`'s files into ``folder``; the run record to write last.

    Files: the saved board (``leaderboard/``), each extra analysis' saved result (``analyses/NAME/``),
    ``leaderboard.{csv,json,md}``, ``scores.csv`` and (with ``folder.figures``) one heatmap per listed relation
    and the overview in ``figures/``. The record gains the time spent here (``timings.writing_s``) and the
    overhead over extraction.
    """
    from probes.reports.names import safe_names

    out, rows, record = folder.root, board.rows, RunRecord.of(board.record)
    names = safe_names(board.analyses, usual=str)  # file-name safe, distinct; registered names unchanged
    folder.add_all(result.save(folder.path(f"analyses/{names[name]}")) for name, result in board.analyses.items())
    folder.save("leaderboard", board)  # the board itself: probes.load(out_dir) reads it back
    dict_rows = [r.as_dict() for r in rows]
    csv_rows = [{**r, "tied_heads": "; ".join(r["tied_heads"])} for r in dict_rows]
    folder.add(write_csv(csv_rows, out / "leaderboard.csv", LEADERBOARD_COLUMNS))
    folder.add(write_json(
        {"indexing": INDEXING_NOTE, "selection": plain(record.details.selection), "intervals": interval_note(record),
         "significance": table_correction(rows).as_dict(), "rows": dict_rows}, out / "leaderboard.json"))
    score_table = score_rows(board.report, board.select)
    folder.add(write_csv(score_table, out / "scores.csv", list(score_table[0]) if score_table else ["relation"]))
    overview = None
    if folder.figures and rows:
        figures = _write_figures(rows, board.report, out, record, folder.figure_format)
        folder.add_all(figures.values())
        overview = f"figures/overview.{folder.figure_format}"
    folder.text("leaderboard.md", _markdown(rows, record, overview))
    writing_s = folder.seconds()
    timings: dict[str, Any] = {**record.timings, "writing_s": writing_s}
    extraction_s, scoring_s = record.timings.extraction_s, record.timings.scoring_s
    if extraction_s is not None and scoring_s is not None:
        timings["overhead_fraction"] = (scoring_s + writing_s) / max(extraction_s, 1e-9)
        timings["note"] = TIMINGS_NOTE
    significance = (record.details.significance if record.has("significance")
                    else table_correction(rows).as_dict())
    return record.updated(timings=timings, indexing=INDEXING_NOTE, significance=significance)


def _write_figures(rows: Sequence[LeaderboardRow], report: HeadScores, out: Path,
                   record: RunRecord, fmt: str = "png") -> dict[str, Path]:
    """One heatmap per listed relation (its selected direction) and one overview figure, as ``fmt`` files;
    each names the model and the data."""
    from probes.reports.figures import HeatmapWriter, overview_figure
    from probes.reports.names import safe_names

    acc = report.accuracy()  # (D, L, H, R)
    data = record.reported_on if record.has("reported_on") else ""
    selected = record.details.leaderboard.selected_on if record.has("selected_on") else data
    panels: dict[str, npt.NDArray[np.float64]] = {}
    subtitles = []
    paths: dict[str, Path] = {}
    model = _model_name(record)
    note = f"{model} on {data}; red box: head selected on {selected}"
    names = safe_names(row.relation for row in rows)  # nmod:poss -> nmod_poss, * -> all; hostile ones hashed
    for row in rows:
        d = report.directions.index(row.direction)
        panels[row.relation] = acc[d, :, :, report.index(row.relation)]  # (L, H)
        subtitles.append(f"{row.relation} ({row.direction})")
    # The overview (matplotlib) is drawn in a second thread while this one paints the per-relation
    # heatmaps (numpy + Pillow, which release the GIL while they encode).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="probes-overview") as pool:
        overview = pool.submit(overview_figure, panels, out / "figures" / f"overview.{fmt}",
                               suptitle=f"Head accuracy per relation: {model} on {data}", ncols=6,
                               subtitles=subtitles)
        with HeatmapWriter(acc.shape[1], acc.shape[2], note=note) as writer:
            for row in rows:
                safe = names[row.relation]
                best_base = row.position_accuracy if row.best_baseline == "position" else row.baseline_accuracy
                paths[f"figures/{safe}.{fmt}"] = writer.write(
                    panels[row.relation], out / "figures" / f"{safe}.{fmt}",
                    mark=(report.layers.index(row.layer), report.heads.index(row.head)),
                    title=f"{row.relation} ({row.direction}), n={row.count}: head {head_name(row.layer, row.head)} "
                          f"{100 * row.accuracy:.1f}%, best baseline {100 * best_base:.1f}%")
        paths[f"overview.{fmt}"] = overview.result()
    return paths


def _model_name(record: RunRecord) -> str:
    """The model as figures name it: its display name, else the last part of its path or hub name."""
    name = str(record.details.model_name or record.details.model or "model")
    return name if "/" not in name or not Path(name).is_absolute() else Path(name).name
