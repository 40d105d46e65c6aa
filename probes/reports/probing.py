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

from probes.heads.intervals import bootstrap_ci
from probes.heads.naming import DIRECTIONS, INDEXING_NOTE, head_name
from probes.reports.tables import markdown_table, text_table, write_csv, write_json

__all__ = ["PARSER_COLUMNS", "PER_HEAD_COLUMNS", "write_parsers", "write_per_head", "per_head_figures",
           "attn_weight_figure", "label_rows", "write_label", "format_summary"]

Rows = list[dict[str, Any]]

#: Columns of ``parsers.csv``.
PARSER_COLUMNS = ("probe", "uas", "uas_ci_low", "uas_ci_high", "uuas", "uuas_ci_low", "uuas_ci_high",
                  "control_uas", "selectivity", "train_sentences", "attention_from")
#: Columns of ``per_head.csv``.
PER_HEAD_COLUMNS = ("relation", "count", "head", "accuracy", "ci_low", "ci_high", "position_only", "gain",
                    "argmax_accuracy_same_head", "argmax_head", "argmax_direction", "argmax_accuracy",
                    "control_accuracy", "control_position_only", "selectivity", "selectivity_raw")

_PARSERS_NOTE = (
    "\nUAS: argmax head per word, punctuation (gold relation `punct`) excluded (Clark et al. 2019 §5.4). "
    "UUAS: undirected maximum spanning tree over non-punctuation words (Hewitt & Manning 2019). "
    "95% bootstrap intervals over sentences. Selectivity = UAS - control-task UAS (Hewitt & Liang 2019).\n")
_PER_HEAD_NOTE = (
    "\nPer-head probes: for each head and relation, a log-linear probe over that head's attention "
    "(both directions, ROOT from the special tokens) plus relative-position features, trained on the "
    "training split; accuracy = share of held-out words of the relation whose gold head it picks among "
    "ROOT + the words. 'position only': the same probe without attention. 'argmax': Clark et al.'s "
    "parameter-free argmax (best head and direction). 'control acc.': the head's probe trained and scored "
    "on the control task (Hewitt & Liang 2019); 'selectivity': (acc. - position only) - (control acc. - "
    "control position only), what the head adds on the task beyond what it adds on the control task "
    "(raw acc. - control acc. is in per_head.csv as selectivity_raw). ALL excludes punctuation. "
    f"{INDEXING_NOTE}.\n")


def _write_text(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _inputs_note(inputs: Sequence[str]) -> str:
    """Markdown lines saying what happened to the inputs of each split (ids skipped, truncated, windowed)."""
    if not inputs:
        return ""
    return "\nInputs (a sentence over the model's maximum is skipped, or truncated and then not used):\n\n" + \
        "".join(f"- {line}\n" for line in inputs)


def write_parsers(rows: Sequence[Mapping[str, Any]], out_dir: Path, control: bool,
                  inputs: Sequence[str] = ()) -> dict[str, Path]:
    """``parsers.{md,csv,json}``: one row per parser (``control``: with control UAS and selectivity columns);
    ``inputs``: lines on what happened to the inputs, at the end of ``parsers.md``."""
    dicts = [dict(r) for r in rows]
    cols = ["probe", "uas", "uas_ci_low", "uas_ci_high", "uuas"] + (["control_uas", "selectivity"] if control else [])
    heads = ["probe", "UAS", "UAS 95% low", "UAS 95% high", "UUAS (MST)"] + (
        ["control UAS", "selectivity"] if control else [])
    md = markdown_table(dicts, cols, headers=heads, percent=[c for c in cols if c != "probe"])
    return {"parsers.md": _write_text(out_dir / "parsers.md", md + _PARSERS_NOTE + _inputs_note(inputs)),
            "parsers.csv": write_csv(dicts, out_dir / "parsers.csv", PARSER_COLUMNS),
            "parsers.json": write_json(dicts, out_dir / "parsers.json")}


def write_per_head(rows: Rows, full: Rows, out_dir: Path, inputs: Sequence[str] = ()) -> dict[str, Path]:
    """``per_head.{md,csv,json}`` (the listed relations) and ``per_head_scores.csv`` (every relation and head);
    ``inputs``: lines on what happened to the inputs, at the end of ``per_head.md``."""
    cols = ["relation", "count", "head", "accuracy", "ci_low", "ci_high", "position_only", "argmax_head",
            "argmax_accuracy", "control_accuracy", "selectivity"]
    heads = ["relation", "count", "best head", "probe acc.", "95% low", "95% high", "position only",
             "argmax head", "argmax acc.", "control acc.", "selectivity"]
    md = markdown_table(rows, cols, headers=heads, percent=[c for c in cols if c not in ("relation", "count", "head",
                                                                                          "argmax_head")])
    return {"per_head.md": _write_text(out_dir / "per_head.md", md + _PER_HEAD_NOTE + _inputs_note(inputs)),
            "per_head.csv": write_csv(rows, out_dir / "per_head.csv", PER_HEAD_COLUMNS),
            "per_head.json": write_json(rows, out_dir / "per_head.json"),
            "per_head_scores.csv": write_csv(full, out_dir / "per_head_scores.csv")}


def per_head_figures(accuracy: npt.NDArray[np.float64], floor: float, selectivity: npt.NDArray[np.float64] | None,
                     out_dir: Path, *, subject: str = "", fmt: str = "png") -> dict[str, Path]:
    """Heatmaps of the per-head probes on ALL: ``accuracy`` ``(L, H)`` and, with a control task, ``selectivity``.

    ``subject`` (model and data) goes into each title; ``fmt``: png, svg or pdf.
    """
    from probes.reports.figures import head_heatmap

    on = f" ({subject})" if subject else ""
    name = f"figures/probe_per_head_ALL.{fmt}"
    out = {name: head_heatmap(
        accuracy, out_dir / name,
        title=f"Per-head probe accuracy, ALL (held out){on}\nposition-only probe: {floor:.3f}")}
    if selectivity is not None:
        name = f"figures/probe_selectivity_ALL.{fmt}"
        out[name] = head_heatmap(
            selectivity, out_dir / name, title=f"Per-head probe selectivity, ALL{on}: "
            "gain over position-only, task minus control", label="selectivity", vmin=None)
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


def label_rows(correct: npt.NDArray[np.int64], total: npt.NDArray[np.int64], n_heads: int
               ) -> tuple[Rows, Rows, npt.NDArray[np.float64]]:
    """Top-10 rows (with bootstrap intervals), one row per head, and ``(P,)`` accuracy of the label probes.

    ``correct`` is ``(n_sentences, P)`` with the position-only probe last, ``total`` ``(n_sentences,)``.
    """
    acc = correct.sum(0) / max(int(total.sum()), 1)  # (P,)
    lh = len(acc) - 1
    floor = float(acc[-1])
    order = np.argsort(-acc[:lh], kind="stable")
    low, high = bootstrap_ci(correct[:, order[:10]], total)
    rows = [{"rank": k + 1, "head": head_name(*divmod(int(p), n_heads)), "accuracy": float(acc[p]),
             "ci_low": float(lo), "ci_high": float(hi), "position_only": floor, "gain": float(acc[p] - floor)}
            for k, (p, lo, hi) in enumerate(zip(order[:10], low, high))]
    full = [{"layer": p // n_heads + 1, "head": p % n_heads + 1, "head_name": head_name(*divmod(p, n_heads)),
             "accuracy": float(acc[p]), "position_only": floor} for p in range(lh)]
    return rows, full, acc


def write_label(rows: Rows, full: Rows, accuracy: npt.NDArray[np.float64], facts: Mapping[str, int],
                out_dir: Path, figures: bool, *, subject: str = "", fmt: str = "png") -> dict[str, Path]:
    """``label.{md,csv}`` and, with ``figures``, the heatmap of the label probes' ``accuracy`` ``(P,)``
    (``subject``, model and data, in its title; ``fmt``: png, svg or pdf).

    ``facts``: ``n_layers``, ``n_heads``, ``n_labels``, ``train_arcs_used``, ``train_arcs_seen``.
    """
    floor = float(accuracy[-1])
    md = markdown_table(rows, ["rank", "head", "accuracy", "ci_low", "ci_high", "position_only", "gain"],
                        headers=["rank", "head", "label acc.", "95% low", "95% high", "position only", "gain"],
                        percent=["accuracy", "ci_low", "ci_high", "position_only", "gain"])
    note = (f"\nLabel probes: given the gold arc, one LogisticRegression per head predicts its relation "
            f"({facts['n_labels']} labels) from that head's attention on the arc plus its relative position; "
            f"trained on {facts['train_arcs_used']} of {facts['train_arcs_seen']} training arcs (reservoir sample). "
            f"Top 10 heads. {INDEXING_NOTE}.\n")
    out = {"label.md": _write_text(out_dir / "label.md", md + note),
           "label.csv": write_csv(full, out_dir / "label.csv")}
    if figures:
        from probes.reports.figures import head_heatmap

        on = f" ({subject})" if subject else ""
        name = f"figures/probe_label.{fmt}"
        out[name] = head_heatmap(
            accuracy[:-1].reshape(facts["n_layers"], facts["n_heads"]), out_dir / name,
            title=f"Per-head label probe accuracy (held out){on}\nposition-only probe: {floor:.3f}", vmin=None)
    return out


def format_summary(parsers: Rows | None, per_head: Rows | None, timings: Mapping[str, float]) -> str:
    """Terminal text of a probing run: the parsers, the per-head probes' listed relations, the timings."""
    text = ""
    if parsers:
        cols = ["probe", "uas", "uas_ci_low", "uas_ci_high", "uuas", "control_uas", "selectivity"]
        text += text_table(parsers, cols, headers=["probe", "UAS", "low", "high", "UUAS", "control UAS",
                                                   "selectivity"], percent=cols[1:])
    if per_head is not None:
        cols = ["relation", "count", "head", "accuracy", "position_only", "argmax_head", "argmax_accuracy",
                "selectivity"]
        text += "\nPer-head relation probes (best head per relation, held out):\n"
        text += text_table(per_head, cols, headers=["relation", "count", "head", "probe", "position", "argmax head",
                                                    "argmax", "selectivity"],
                           percent=["accuracy", "position_only", "argmax_accuracy", "selectivity"])
    text += (f"\nTimings: training {timings['train_s']:.1f} s, evaluation {timings['eval_s']:.1f} s"
             + (f", random-init control {timings['random_init_s']:.1f} s" if "random_init_s" in timings else "")
             + " (extraction included). Layers and heads are 1-based (layer-head).\n")
    return text
