"""The files of ``probes importance`` and ``probes prune``, and their terminal summaries.

``write_importance`` writes ``importance.csv`` (one row per head), ``importance.md``, ``figures/``
(heatmaps of importance and leave-one-out, importance against leave-one-out), the saved result and
``run.json``; ``write_pruning`` writes ``pruning.csv`` (one row per curve and step), ``pruning.md``,
``importance.csv`` (the importance the curves start from), ``pruned_leaderboard.csv``, ``figures/``
(curves with the random band, one head per layer, heatmaps), the saved result and ``run.json``.
Layers and heads are 1-based (``layer-head``) in every file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from probes.reports.escape import md_document, md_label, path_href
from probes.reports.tables import md_cell, write_csv
from probes.reports.writer import OutputFolder
from probes.run_record import RunRecord

__all__ = ["write_importance", "write_pruning", "importance_summary", "pruning_summary", "leaderboard_markdown"]


def _title(model: str, data: str) -> str:
    return f"{Path(model.rstrip('/')).name if not model.startswith('package:') else model} on {data}"


def _importance_figures(result: Any, folder: Path, title: str, figure_format: str) -> dict[str, Path]:
    from probes.reports.importance.figures import write_importance_heatmaps, write_importance_scatter

    folder.mkdir(parents=True, exist_ok=True)
    paths = {"heatmaps": write_importance_heatmaps(result, folder / f"importance-heatmaps.{figure_format}",
                                                   title=title)}
    if result.loo_effect.size and not (result.loo_effect != result.loo_effect).all():  # leave-one-out was run
        paths["scatter"] = write_importance_scatter(result, folder / f"importance-vs-loo.{figure_format}", title=title)
    return paths


def _table(frame: Any, path: Path) -> Path:
    return write_csv(frame.to_dict("records"), path, columns=list(frame.columns))


def _finish(run: Any, folder: OutputFolder, name: str, text: str, figures: dict[str, Path]) -> RunRecord:
    """Write ``NAME.md`` (``text`` and the figure links) and the result under ``NAME/``; the run record to write."""
    folder.text(f"{name}.md", md_document(text + _figure_lines(figures, folder.root)))
    folder.add_all(figures.values())
    folder.save(name, run)
    return RunRecord.of(run.record).with_timings(writing_s=folder.seconds())


def write_importance(folder: OutputFolder, run: Any) -> RunRecord:
    """Every file of a :class:`~probes.runs.importance.HeadImportance` (see the module); the run record."""
    from probes.reports.importance.report import importance_markdown

    out, result = folder.root, run.result
    figures = _importance_figures(result, out / "figures", _title(run.model, result.data), folder.figure_format)
    folder.add(_table(result.to_pandas(), out / "importance.csv"))
    text = importance_markdown(result, model=run.model, record=run.record)
    return _finish(run, folder, "importance", text, figures)


def _figure_lines(figures: dict[str, Path], out: Path) -> str:
    """Markdown image links to the figures, relative to ``out``."""
    if not figures:
        return ""
    lines = ["", "## Figures", ""]
    lines += [f"![{md_label(name)}]({path_href(p.relative_to(out))})" for name, p in figures.items()]
    return "\n".join(lines) + "\n"


def leaderboard_markdown(table: dict[str, Any] | None) -> str:
    """The pruned-leaderboard section: per relation, the best remaining head before and after pruning."""
    if not table or not table.get("rows"):
        return ""
    rows = table["rows"]
    lines = ["", f"## The leaderboard after pruning {table['n_pruned']} heads ({table['fraction']:.0%}, by importance)",
             "", f"Rule: {table['rule']}. Layers and heads 1-based.", "",
             "| relation | direction | head | accuracy unpruned | accuracy pruned | change |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {md_cell(r['relation'])} | {md_cell(r['direction'])} | {r['layer']}-{r['head']} | "
                     f"{r['accuracy_unpruned']:.3f} | "
                     f"{r['accuracy_pruned']:.3f} | {r['accuracy_pruned'] - r['accuracy_unpruned']:+.3f} |")
    changes = [abs(r["accuracy_pruned"] - r["accuracy_unpruned"]) for r in rows]
    scored = [c for c in changes if math.isfinite(c)]
    absent = len(changes) - len(scored)
    if scored:
        lines += ["", f"Mean absolute change over the {len(scored)} relations scored: {sum(scored) / len(scored):.3f}; "
                  f"largest {max(scored):.3f}."]
    if absent:
        lines += ["", f"{absent} relation{'s' if absent != 1 else ''} of the selection data "
                  f"{'have' if absent != 1 else 'has'} no word in the report data (nan: nothing to score)."]
    return "\n".join(lines) + "\n"


def write_pruning(folder: OutputFolder, run: Any) -> RunRecord:
    """Every file of a :class:`~probes.runs.importance.Pruning` (see the module); the run record."""
    from probes.reports.importance.figures import write_one_per_layer, write_pruning_curves
    from probes.reports.importance.report import pruning_markdown

    out, curves, fmt = folder.root, run.curves, folder.figure_format
    title = _title(run.model, curves.data)
    figures = {"curves": write_pruning_curves(curves, folder.path(f"figures/pruning-curves.{fmt}"), title=title)}
    if curves.one_per_layer is not None:
        figures["one head per layer"] = write_one_per_layer(curves.one_per_layer,
                                                            folder.path(f"figures/one-head-per-layer.{fmt}"), title=title)
    folder.add(_table(curves.to_pandas(), out / "pruning.csv"))
    if run.start is not None:
        figures.update(_importance_figures(run.start, out / "figures", _title(run.model, run.start.data), fmt))
        folder.add(_table(run.start.to_pandas(), out / "importance.csv"))
    if run.leaderboard and run.leaderboard.get("rows"):
        folder.add(write_csv(run.leaderboard["rows"], out / "pruned_leaderboard.csv",
                             columns=list(run.leaderboard["rows"][0])))
    text = pruning_markdown(curves, model=run.model, record=run.record) + leaderboard_markdown(run.leaderboard)
    return _finish(run, folder, "pruning", text, figures)


def _input_lines(record: RunRecord | None) -> list[str]:
    """The sentences skipped or cut, one line per split (as every command's summary says them)."""
    from probes.reports.inputs import inputs_lines

    inputs = RunRecord.of(record).inputs
    return [f"  {line}" for line in inputs_lines(RunRecord.of(record))] if inputs else []


def importance_summary(result: Any, *, model: str, top: int = 5, record: RunRecord | None = None) -> str:
    """A few lines for the terminal: the most important heads and the rank correlation (1-based heads)."""
    import numpy as np

    flat = np.argsort(-result.importance, axis=None, kind="stable")[:top]
    n_heads = result.importance.shape[1]
    best = ", ".join(f"{i // n_heads + 1}-{i % n_heads + 1} ({result.importance.flat[i]:.2f})" for i in flat)
    lines = [f"Head importance of {model} on {result.data}, objective {result.objective} "
             f"({result.n_sentences} sentences; layer-head, 1-based)",
             f"  most important ({'Gauss-Newton' if result.criterion == 'gauss-newton' else 'Michel'}, "
             f"{result.normalization} normalised): {best}"]
    if np.isfinite(result.rank_correlation):
        lines.append(f"  rank correlation with leave-one-out ({result.ablation} ablation): rho = "
                     f"{result.rank_correlation:.2f} [{result.rank_low:.2f}, {result.rank_high:.2f}] "
                     f"({result.confidence:.0%} bootstrap over sentences); with its size |effect|: rho = "
                     f"{result.abs_rank_correlation:.2f} [{result.abs_rank_low:.2f}, {result.abs_rank_high:.2f}]; "
                     f"before the layer normalisation: rho = {result.raw_rank_correlation:.2f} "
                     f"[{result.raw_rank_low:.2f}, {result.raw_rank_high:.2f}]")
    return "\n".join(lines + _input_lines(record)) + "\n"


def pruning_summary(curves: Any, *, model: str, record: RunRecord | None = None) -> str:
    """A few lines for the terminal: per curve, the fraction of heads removable within 5% of the objective."""
    base = float(curves.curve(curves.curves[0])[0])
    rule = "an absolute 0.05, the unpruned loss being 0" if abs(base) < 1e-6 else "5% of the unpruned loss"
    lines = [f"Pruning curves of {model} on {curves.data}, objective {curves.objective} "
             f"(orders chosen on {curves.selection}); heads removable before the loss grows by more than {rule}:"]
    for name in curves.curves:
        if not name.startswith("random:"):
            lines.append(f"  {name}: {curves.removable(name, rule='base'):.0%}")
    randoms = [curves.removable(n, rule="base") for n in curves.curves if n.startswith("random:")]
    if randoms:
        lines.append(f"  random orders ({len(randoms)}): {min(randoms):.0%} to {max(randoms):.0%}")
    return "\n".join(lines + _input_lines(record)) + "\n"
