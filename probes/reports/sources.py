"""The report of a :class:`~probes.runs.sources.SourcesRun`: ``sources.md``, its tables, its figure.

Everything is written through the run's :class:`~probes.reports.writer.OutputFolder` (whole files, inside the
folder). Layers and heads are 1-based everywhere a person reads them; shares are fractions (0-1), accuracies percent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from probes.compare.sources import ALPHA, CATEGORY_LABELS, SIGN_FLIP_RULE, BoardComparison, ShareComparison
from probes.heads.naming import INDEXING_NOTE
from probes.reports.tables import format_p, markdown_table, write_csv
from probes.reports.writer import OutputFolder
from probes.run_record import RunRecord

__all__ = ["write_sources", "sources_summary", "sources_markdown", "shares_figure", "share_rows", "board_rows",
           "coref_rows", "verdict_lines"]

_ROWS_NOTE = ("averaged over heads and over every query row, the special tokens' rows included (as Kobayashi et al. "
              "2020 average)")


def _num(value: float, digits: int = 3) -> str:
    return "-" if not np.isfinite(value) else f"{value:.{digits}f}"


def _interval(value: float, low: float, high: float, digits: int = 3) -> str:
    if not np.isfinite(value):
        return "-"
    return f"{value:.{digits}f} [{_num(low, digits)}, {_num(high, digits)}]"


def _pct(value: float, low: float | None = None, high: float | None = None) -> str:
    if not np.isfinite(value):
        return "-"
    if low is None or high is None:
        return f"{100 * value:.1f}"
    return f"{100 * value:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def share_rows(shares: ShareComparison) -> list[dict[str, Any]]:
    """``shares.csv``: one row per source, layer (1-based) and category."""
    return [{k: (float(v) if isinstance(v, (float, np.floating)) else v) for k, v in row.items()}
            for row in shares.to_pandas().to_dict("records")]


def board_rows(boards: BoardComparison) -> list[dict[str, Any]]:
    """``leaderboards.csv``: one row per relation and source, heads 1-based, with the place against weights."""
    rows = []
    for relation in boards.relations:
        for pick in relation.picks:
            rows.append({"relation": relation.relation, "count": relation.count, "source": pick.source,
                         "layer": pick.layer + 1, "head": pick.head + 1, "head_name": pick.name,
                         "direction": pick.direction, "accuracy": pick.accuracy, "ci_low": pick.ci_low,
                         "ci_high": pick.ci_high, "best_baseline_accuracy": pick.baseline_accuracy,
                         "beats_baseline": pick.beats_baseline, "p_adjusted": pick.p_adjusted,
                         "place_vs_weights": relation.place(pick.source, boards.sources[0]),
                         "selected_on": boards.selected_on, "reported_on": boards.reported_on})
    return rows


def coref_rows(picks: Any) -> list[dict[str, Any]]:
    """``coref.csv``: one row per source, the best head on all mentions (1-based)."""
    return [{"source": p.source, "head_name": p.name, "layer": p.layer + 1 if p.layer >= 0 else None,
             "head": p.head + 1 if p.head >= 0 else None, "accuracy": p.accuracy, "ci_low": p.ci_low,
             "ci_high": p.ci_high, "baseline": p.baseline, "baseline_accuracy": p.baseline_accuracy,
             "p_holm": p.p_holm, "significant": p.significant, "mentions": p.mentions} for p in picks]


def verdict_lines(shares: ShareComparison) -> list[str]:
    """One line per compared source: the verdict on the headline category and on every category, from the tests."""
    lines = []
    for source in shares.sources[1:]:
        parts = []
        for category in shares.categories:
            lower = shares.lower(source, category)
            parts.append(f"{CATEGORY_LABELS[category]} lower in {int(lower.sum())} of {shares.n_layers} layers: "
                         f"{shares.verdict(source, category)}")
        head = CATEGORY_LABELS[shares.headline]
        lines.append(f"{source} vs weights: share on {head} lower by {source} in every layer (Holm p < {ALPHA})? "
                     f"**{shares.verdict(source)}** ({'; '.join(parts)})")
    return lines


def _share_tables(shares: ShareComparison) -> str:
    """One Markdown table per category: each source's mean share per layer, the differences and the Holm p."""
    out = []
    for c, category in enumerate(shares.categories):
        headers = ["layer", *(f"{s} [95% CI]" for s in shares.sources)]
        for source in shares.sources[1:]:
            headers += [f"{source} - weights [95% CI]", "p (Holm)", f"lower by {source}"]
        rows = []
        for layer in range(shares.n_layers):
            row = {"layer": str(layer + 1)}
            for s, source in enumerate(shares.sources):
                row[f"{source} [95% CI]"] = _interval(shares.mean[s, layer, c], shares.low[s, layer, c],
                                                      shares.high[s, layer, c])
            for s, source in enumerate(shares.sources[1:], start=1):
                row[f"{source} - weights [95% CI]"] = _interval(shares.diff[s, layer, c], shares.diff_low[s, layer, c],
                                                               shares.diff_high[s, layer, c])
                row["p (Holm)"] = format_p(float(shares.p_holm[s, layer, c]))
                row[f"lower by {source}"] = "yes" if shares.lower(source, category)[layer] else "no"
            rows.append(row)
        out.append(f"**{CATEGORY_LABELS[category]}**\n\n" + markdown_table(rows, headers))
    return "\n".join(out)


def _shares_section(run: Any, figure: str | None) -> list[str]:
    shares: ShareComparison = run.shares
    reported = run.boards.reported_on
    what = ('[CLS] (the specials before the first word), [SEP] (the other specials), both, and "." and ","'
            if not shares.causal else
            'the first token (the attention sink: this decoder has no [SEP], and its first token is BOS where the '
            'tokenizer adds one, else the first word; it stands in place of [CLS]) and "." and ","')
    lines = ["## Shares of attention per layer (Kobayashi et al. 2020)", "",
             f"The share of each query row's attention on {what}, {_ROWS_NOTE}, by each source: "
             f"{shares.n_sentences} sentences of {reported} ({shares.n_rows} token rows). The unit of the intervals "
             f"and tests is the {shares.unit[:-1]} ({shares.n_units} {shares.unit}; {shares.rule}). Paired test: "
             f"{SIGN_FLIP_RULE}; {shares.n_tests} tests, "
             + (f"all {shares.n_permutations} sign patterns." if shares.exact
                else f"{shares.n_permutations} random sign patterns.") + f" Bootstrap: {shares.n_resamples} draws.",
             ""]
    if figure:
        lines += [f"![Shares per layer]({figure})", ""]
    return lines + [_share_tables(shares)]


def _boards_section(run: Any) -> list[str]:
    boards: BoardComparison = run.boards
    others = boards.sources[1:]
    headers = ["relation", "words"]
    for source in boards.sources:
        headers += [f"{source}: head", f"{source}: accuracy %", f"{source}: beats baseline"]
    headers += [f"{s}: place" for s in others]
    rows = []
    for relation in boards.relations:
        row = {"relation": relation.relation, "words": str(relation.count)}
        for source in boards.sources:
            pick = relation.pick(source)
            row[f"{source}: head"] = "-" if pick is None else f"{pick.name} {pick.direction}"
            row[f"{source}: accuracy %"] = "-" if pick is None else _pct(pick.accuracy, pick.ci_low, pick.ci_high)
            row[f"{source}: beats baseline"] = "-" if pick is None else "yes" if pick.beats_baseline else "no"
        row.update({f"{s}: place": relation.place(s, boards.sources[0]) for s in others})
        rows.append(row)
    counts = [f"{s}: {c['kept']} kept, {c['kept, other direction']} kept in the other direction, {c['moved']} moved; "
              f"{c['beats_baseline']} of {c['relations']} beat their baseline"
              for s in others for c in [boards.counts(s)]]
    beat_w = boards.counts(boards.sources[0], boards.sources[0])["beats_baseline"]
    tests = ", ".join(f"{s}: {n}" for s, n in zip(boards.sources, boards.n_tests))
    return ["## The dependency leaderboard under each source", "",
            f"Heads chosen on {boards.selected_on} ({boards.mode} selection), reported and tested on "
            f"{boards.reported_on}. Each source's board made its own selection there and its own tests (paired test "
            f"of the margin over the best baseline, Holm over its own table; tests per board: {tests}). Place: "
            "the head of the weights board kept (same layer-head) or moved. Accuracy with its 95% interval.", "",
            markdown_table(rows, headers), f"weights: {beat_w} of {len(boards.relations)} beat their baseline; "
            + "; ".join(counts) + ".", "",
            "Each board in full: " + ", ".join(f"[{s}](boards/{s}.md)" for s in boards.sources) + "."]


def _coref_section(run: Any) -> list[str]:
    if not run.coref:
        return []
    headers = ["source", "best head (all mentions)", "accuracy % [95% CI]", "best baseline", "baseline %",
               "beats baseline (Holm)"]
    rows = [{"source": p.source, "best head (all mentions)": p.name,
             "accuracy % [95% CI]": _pct(p.accuracy, p.ci_low, p.ci_high), "best baseline": p.baseline or "-",
             "baseline %": _pct(p.baseline_accuracy), "beats baseline (Holm)": "yes" if p.significant else "no"}
            for p in run.coref]
    options = run.record.to_dict().get("options", {})
    chosen = options.get("corpus_select_on")
    where = ("on one half of the documents and reported on the other" if chosen is None else
             "on the same documents (optimistic: never marked significant)" if chosen == "same" else
             f"on {chosen} and reported here")
    return ["## Coreference heads under each source", "",
            f"Antecedent selection on {options.get('corpus')}: each source's best head on all mentions, chosen "
            f"{where}, against the best baseline there (each run's own Holm correction). Each run in full: " + ", ".join(f"[{p.source}](coref/{p.source}.md)" for p in run.coref)
            + ".", "", markdown_table(rows, headers)]


def sources_markdown(run: Any, figure: str | None) -> str:
    """``sources.md``: the verdicts, the shares per layer, the leaderboards, the coreference heads."""
    shares: ShareComparison = run.shares
    lines = [f"# Attention sources: {run.model_name}", "",
             f"Sources compared: {', '.join(shares.sources)} (each map row-normalised); {INDEXING_NOTE}.", "",
             "## Does Kobayashi et al.'s finding hold here?", "",
             "Kobayashi et al. 2020: the large attention weights on [CLS], [SEP] and punctuation come with small "
             "value norms, so by norms those tokens get much less. The verdict, from the tests below: *yes* where "
             "the share is lower by the source in every layer (Holm-adjusted p < 0.05), *partly* in some, *no* in "
             "none.", ""]
    lines += [f"- {line}" for line in verdict_lines(shares)] + [""]
    lines += _shares_section(run, figure) + [""] + _boards_section(run) + [""] + _coref_section(run)
    return "\n".join(lines).rstrip() + "\n"


def shares_figure(shares: ShareComparison, path: str | Path, *, title: str) -> Path:
    """Lines per layer (1-based), one panel per category, one line per source with its 95% band; a star marks the
    layers where a source's share differs from the weights' (Holm-adjusted p < 0.05)."""
    from matplotlib.ticker import MaxNLocator

    from probes.reports.figures import DPI, _new_figure, _wrap, save_figure, series_styles

    n = len(shares.categories)
    fig = _new_figure((3.3 * n + 0.6, 3.4), dpi=DPI, layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, n, sharey=True))
    styles = series_styles(shares.sources)
    layers = np.arange(1, shares.n_layers + 1)
    for c, (ax, category) in enumerate(zip(axes, shares.categories)):
        for s, source in enumerate(shares.sources):
            style = styles[source]
            ax.fill_between(layers, shares.low[s, :, c], shares.high[s, :, c], color=style.color, alpha=0.15,
                            linewidth=0)
            ax.plot(layers, shares.mean[s, :, c], label=source, markersize=4, **style.line())
            if s:
                sig = shares.p_holm[s, :, c] < ALPHA
                ax.plot(layers[sig], shares.mean[s, sig, c], linestyle="none", marker="*", color="black",
                        markersize=5)
        ax.set_title(CATEGORY_LABELS[category], fontsize=9)
        ax.set_xlabel("layer (1-based)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    top = float(np.nanmax(shares.high)) if np.isfinite(shares.high).any() else 1.0
    axes[0].set_ylim(0, min(1.0, 1.1 * top + 0.02))
    axes[0].set_ylabel("share of attention (mean over heads and rows)", fontsize=8)
    axes[-1].legend(fontsize=7, loc="upper right")
    fig.suptitle(_wrap(title + "\n(bands: 95% intervals; *: differs from weights, Holm p < 0.05)",
                       3.3 * n + 0.6, 9), fontsize=9)
    return save_figure(fig, path)


def write_sources(folder: OutputFolder, run: Any) -> RunRecord:
    """Write a :class:`~probes.runs.sources.SourcesRun`'s files into ``folder``; the run record to write last."""
    record = RunRecord.of(run.record)
    out = folder.root
    folder.save("sources", run)
    folder.add(write_csv(share_rows(run.shares), out / "shares.csv"))
    folder.add(write_csv(board_rows(run.boards), out / "leaderboards.csv"))
    for source, table in zip(run.boards.sources, run.board_tables):
        folder.text(f"boards/{source}.md", f"# Dependency leaderboard of {run.model_name}, attention source "
                                           f"{source}\n\n{table}")
    if run.coref:
        folder.add(write_csv(coref_rows(run.coref), out / "coref.csv"))
        for pick, table in zip(run.coref, run.coref_tables):
            folder.text(f"coref/{pick.source}.md", f"# Coreference heads of {run.model_name}, attention source "
                                                   f"{pick.source}\n\n{table}")
    figure = None
    if folder.figures:
        figure = f"figures/shares.{folder.figure_format}"
        folder.add(shares_figure(run.shares, folder.path(figure),
                                 title=f"{run.model_name}: share of attention per layer, by source"))
    folder.text("sources.md", sources_markdown(run, figure))
    return record.updated(timings={**record.to_dict().get("timings", {}), "writing_s": round(folder.seconds(), 2)})


def sources_summary(run: Any) -> str:
    """The terminal summary: the verdicts, the headline shares per layer, the boards' places."""
    shares: ShareComparison = run.shares
    c = shares.categories.index(shares.headline)
    lines = [f"Attention sources of {run.model_name} ({INDEXING_NOTE}):"]
    lines += [line.replace("**", "") for line in verdict_lines(shares)]
    lines.append(f"Share on {CATEGORY_LABELS[shares.headline]} per layer:")
    for s, source in enumerate(shares.sources):
        lines.append(f"  {source:<12} " + " ".join(_num(v, 2) for v in shares.mean[s, :, c]))
    for source in run.boards.sources[1:]:
        counts = run.boards.counts(source)
        lines.append(f"Leaderboard under {source}: {counts['kept']} relations keep their weights head, "
                     f"{counts['kept, other direction']} keep it in the other direction, {counts['moved']} move; "
                     f"{counts['beats_baseline']} of {counts['relations']} beat their baseline")
    lines += [f"Coreference under {p.source}: best head {p.name}, {_pct(p.accuracy)}%" for p in run.coref]
    return "\n".join(lines) + "\n"
