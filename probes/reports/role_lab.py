"""Write a role-lab run's report: ``report.md``, a self-contained ``report.html``, ``figures/`` and ``tables/*.csv``.

Layout: ``## Answers`` (five short answers, each with its figure: initialisation, ensemble or division of labour,
capacity, when roles form, how it carries to the pretrained models); ``## What ran``; ``## Evidence`` (every table
of the comparison with its notes: where heads were selected, how intervals were made, how many tests it holds);
``## Seed families``; ``## Units``. Built once as blocks and rendered twice by the experiment report's renderers,
so both files hold the same content. Layers and heads are printed 1-based (``layer-head``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.compare.families import STABILITY
from probes.heads.naming import INDEXING_NOTE
from probes.reports.experiment.columns import Block, Table
from probes.reports.experiment.render import report_html, report_markdown, slug
from probes.reports.prose import ANSWERS, pack
from probes.reports.tables import write_csv
from probes.reports.writer import OutputFolder
from probes.run_record import RunRecord

__all__ = ["write_role_lab", "role_lab_blocks", "frame_table", "FIGURES"]

#: The answers' figures, in answer order: (stem, caption).
FIGURES: tuple[tuple[str, str], ...] = (
    ("a1_symmetry", "Mean attention distance between the heads of each layer at every step, noise 1e-2 and 1e-4"),
    ("a2_ablations", "Ablation matrix: single-head loss increase (diagonal) and pair interaction (off-diagonal)"),
    ("a3_capacity", "Final held-out loss per head count (one point per seed)"),
    ("a4_formation", "Held-out loss over training with each seed's phase change marked"),
    ("a4_roles", "Role scores of every head over training"),
    ("a5_pretrained", "Role carriers of the induction probe per layer of the pretrained models"),
)


def _cell(value: Any, column: str) -> str:
    """A table cell as the report prints it: p-values ``<0.001`` or 3 decimals, other reals 3 significant."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if column == "p" or column.endswith("_p") or column.startswith("p_"):
            return "<0.001" if value < 0.001 else f"{value:.3f}"
        return f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v, "") for v in value) or "-"
    return str(value)


def frame_table(key: str, title: str, frame: Any, notes: Sequence[str] = (), empty: str = "no rows") -> Table:
    """A pandas table as a report :class:`~probes.reports.experiment.columns.Table` (headers from its columns)."""
    headers = tuple(str(c) for c in frame.columns)
    rows = frame.to_dict("records")
    cells = tuple(tuple(_cell(row[c], str(c)) for c in frame.columns) for row in rows)
    sort = tuple(tuple(row[c] if isinstance(row[c], (int, float)) else str(row[c]) for c in frame.columns)
                 for row in rows)
    return Table(key, title, headers, cells, sort, tuple(notes), "" if cells else empty)


def _what_ran(record: RunRecord) -> list[Block]:
    settings = record.details.run.role_lab or {}
    units = record.details.run.units or ()
    info = record.details.run.experiment
    cells = settings.get("cells") or {}
    configs = {str(u.options.cell): u.options.config for u in units
               if u.analysis == "train" and u.options is not None and u.options.config is not None}
    items = []
    for name, cell in cells.items():
        c = configs.get(name) or {}
        members = int(cell.get("ensemble", 1))
        size = (f"{members} members of {int(c.get('heads', 0)) // members} head(s)" if members > 1
                else f"{c.get('heads')} heads")
        items.append(f"{name}: task {c.get('task', 'text')}, {c.get('layers')} layers x {size}, init "
                     f"{c.get('init', 'independent')}, attention dropout {c.get('attention_dropout', 0.0)}, "
                     f"{c.get('steps')} steps, seeds {', '.join(map(str, cell.get('seeds', [])))}")
    pretrained = [f"{name}: `{spec}` (the induction probe)" for name, spec in (settings.get("pretrained") or {}).items()]
    reused = sum(1 for u in units if u.reused)
    blocks: list[Block] = [("p", str(info.description) if info is not None and info.description else ""),
                           ("p", "Cells (each seed one model, trained and measured on held-out sequences of its "
                                 "task):"), ("list", items)]
    if pretrained:
        blocks += [("p", "Pretrained models:"), ("list", pretrained)]
    blocks.append(("p", f"{len(units)} units ({reused} re-used, {len(units) - reused} computed) on "
                        f"{settings.get('workers', 1)} worker process(es); {settings.get('n_permutations')} "
                        f"permutations per Monte Carlo test, {settings.get('n_draws')} Multi-Bootstrap draws."))
    return [b for b in blocks if b[1]]


def _units_table(record: RunRecord) -> Table:
    rows = [(u.analysis, u.model, u.data, "yes" if u.reused else "no",
             "n/a" if u.seconds is None else f"{u.seconds:.1f}", u.path) for u in record.details.run.units or ()]
    return Table("units", "Units", ("analysis", "model", "cell", "re-used", "seconds", "folder"), tuple(rows),
                 tuple(rows), ("each unit saved under a key of what it depends on; a second run re-uses it",))


def role_lab_blocks(comparison: Any, families: Sequence[Any], record: RunRecord,
                    figures: Mapping[str, tuple[str, Path]]) -> list[Block]:
    """The report's content, in order (see the module)."""
    blocks: list[Block] = [("h2", ANSWERS)]
    answers = list(comparison.answers)
    stems = [["a1_symmetry"], ["a2_ablations"], ["a3_capacity"], ["a4_formation", "a4_roles"], ["a5_pretrained"]]
    for k, answer in enumerate(answers):
        blocks += [("p", part) for part in pack(answer)]
        for stem in stems[k] if k < len(stems) else []:
            if stem in figures:
                blocks.append(("figure", figures[stem]))
    blocks.append(("p", INDEXING_NOTE))
    blocks += [("h2", "What ran"), *_what_ran(record), ("h2", "Evidence")]
    for key, title in comparison.titles().items():
        blocks.append(("table", frame_table(key, title, comparison.to_pandas(key), comparison.notes(key),
                                            comparison.why_empty(key))))
    if families:
        blocks.append(("h2", "Seed families"))
        for family in families:
            name = family.names[0].rsplit("-s", 1)[0] if family.names else "family"
            notes = (f"members: {', '.join(family.names)} (seeds {', '.join(map(str, family.seeds))}), measured at "
                     f"step {family.step}", STABILITY, family.note)
            blocks.append(("table", frame_table(f"family-{slug(name)}", f"Family {name}: {family.role}",
                                                family.to_pandas(), [n for n in notes if n])))
    blocks += [("h2", "Units"), ("table", _units_table(record))]
    return blocks


def _draw(comparison: Any, runs: Sequence[Any], analyses: Sequence[Any], folder: Path, suffix: str
          ) -> dict[str, tuple[str, Path]]:
    """Every answer figure the data allow: ``stem -> (caption, path)``."""
    from probes.reports import role_lab_plots

    captions = dict(FIGURES)
    jobs = role_lab_plots.figure_jobs(comparison, runs, analyses)
    out = {}
    for stem, draw in jobs.items():
        path = draw(folder / f"{stem}.{suffix}")
        if path is not None:
            out[stem] = (captions[stem], path)
    return out


def write_role_lab(folder: OutputFolder, run: Any, run_dir: str | Path, units: tuple[Sequence[Any], Sequence[Any]]
                   ) -> RunRecord:
    """Write the report files and the saved comparison into ``folder``; the run record to write last."""
    from probes.reports.atomic import write_text

    out = folder.root
    runs, analyses = units
    figures = _draw(run.comparison, runs, analyses, out / "figures", "png")
    if folder.figure_format != "png":
        folder.add_all(p for _, p in _draw(run.comparison, runs, analyses, out / "figures",
                                           folder.figure_format).values())
    folder.add_all(p for _, p in figures.values())
    for key in run.comparison.titles():
        frame = run.comparison.to_pandas(key)
        if len(frame):
            folder.add(write_csv(frame.to_dict("records"), out / "tables" / f"{slug(key)}.csv"))
    info = run.record.details.run.experiment
    title = str(info.title if info is not None and info.title else "Role lab")
    blocks = role_lab_blocks(run.comparison, run.families, run.record, figures)
    folder.add(write_text(out / "report.md", report_markdown(title, blocks, out)))
    folder.add(write_text(out / "report.html", report_html(title, blocks)))
    folder.save("comparison", run.comparison)  # the run's main result: probes.load(run folder) reads it
    return run.record
