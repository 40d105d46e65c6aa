"""Write an atlas: ``heads.csv``, ``atlas.md``, ``atlas.html``, ``head_view.html``, ``figures/``, ``run.json``.

Everything is made from the :class:`~probes.runs.atlas.Atlas` alone, so a saved atlas (``atlas/``,
read back with :func:`probes.load`) can be written again without the model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probes.reports.atlas.summary import atlas_findings
from probes.reports.atlas.table import ROLE_RULES
from probes.reports.atlas.text import RULES, findings
from probes.reports.attention_source import source_suffix
from probes.reports.escape import md_document, md_label, md_no_html, md_text, path_href
from probes.reports.prose import opening
from probes.reports.tables import markdown_table, md_heading, write_csv
from probes.reports.writer import OutputFolder
from probes.run_record import RunRecord

__all__ = ["write_atlas", "atlas_markdown"]


def _title(atlas: Any) -> str:
    data = atlas.record.data or {}
    return (f"Head atlas: {atlas.record.model_name} on {data.get('name', data.get('treebank', 'the data'))}"
            f"{source_suffix(atlas.record)}")


def _figures(atlas: Any, table: Any, folder: Path, suffix: str = "png") -> dict[str, Path]:
    """The atlas figures as ``suffix`` files, by caption (Clark Figs. 1, 2, 4, 6 and Kovaleva Fig. 2)."""
    from probes.reports.atlas.figures import (
        example_heads,
        write_attention_targets,
        write_entropy,
        write_mds,
        write_pattern_distribution,
        write_sentence_heads,
    )

    name = atlas.record.model_name
    out = {
        "Attention to kinds of tokens per layer (Clark et al. Fig. 2)":
            write_attention_targets(table, folder / f"attention_targets.{suffix}", title=f"{name}: where heads attend"),
        "Entropy per layer (Clark et al. Fig. 4)":
            write_entropy(table, atlas.surface.uniform_entropy, folder / f"entropy.{suffix}", title=f"{name}: entropy"),
        "Heads laid out by Jensen-Shannon distance (Clark et al. Fig. 6)":
            write_mds(table, folder / f"mds.{suffix}", title=f"{name}: MDS of head distances"),
        "Attention patterns per layer (Kovaleva et al. Fig. 2)":
            write_pattern_distribution(atlas.patterns.per_layer(), folder / f"patterns.{suffix}",
                                       title=f"{name}: patterns per layer"),
    }
    if atlas.example is not None:
        out[f"Chosen heads on sentence {atlas.example_id} (Clark et al. Fig. 1)"] = write_sentence_heads(
            atlas.example.weights, atlas.example.tokens, example_heads(table), folder / f"sentence.{suffix}",
            title=f"{name}: sentence {atlas.example_id}")
    return out


def _notes(atlas: Any, table: Any = None) -> list[str]:
    """The rules behind every column and figure, for ``atlas.md`` and ``atlas.html``; then why each empty column
    of ``heads.csv`` is empty."""
    from probes.analysis.patterns import AGREEMENT
    from probes.reports.atlas.undefined import empty_columns, is_decoder_atlas

    record = atlas.record
    lines = [f"{name}: {rule}" for name, rule in ROLE_RULES.items()]
    lines.append(f"patterns: Kovaleva et al.'s five classes by documented rules (probes.analysis.patterns); agreement "
                 f"with {AGREEMENT['n_all']} hand-labelled real maps: Cohen's kappa {AGREEMENT['kappa_heldout']:.2f} "
                 f"on the {AGREEMENT['n_heldout']} maps held out from calibration")
    groups = record.details.atlas.groups or {}
    lines.append(f"groups: {groups.get('rule', '')}; distances from {groups.get('distance_sentences')} sentences")
    lines.append(f"best relation: {_profile_rule()}")
    lines += [f"finding ({key}): {rule}" for key, rule in RULES.items()]
    board = record.details.atlas.leaderboard
    selection = board.selection if board is not None else None
    if selection:
        lines.append(f"leaderboard selection: {selection.mode} (selected on {selection.selected_on}, "
                     f"reported on {selection.reported_on})")
    if atlas.gradients is None:
        lines.append(f"gradient importance: {atlas.gradients_note}")
    types, why_not = getattr(atlas, "head_types", None), getattr(atlas, "head_types_note", "")
    if types is not None or why_not:  # none asked for (--head-type-sequences 0): nothing to say
        lines.append(f"head types: {types.rule if types is not None else why_not}")
    sinks = getattr(atlas, "sinks", None)
    if sinks is not None:
        lines.append(f"attention sinks: to_first is the mean attention to the first token over query rows, then over "
                     f"inputs; sink_share the share of inputs in which it exceeds {sinks.eps:g} (Gu et al. 2025)")
    if is_decoder_atlas(atlas):
        lines.append("decoder: BOS (if the tokenizer adds one) is the start special and there is no end special; "
                     "entropy is measured on what each row sees (row i: i + 1 tokens; uniform reference "
                     "mean ln(i + 1))")
    table = atlas.heads_table() if table is None else table
    for column, reason in empty_columns(table, atlas).items():
        lines.append(f"empty in heads.csv: {column}: {reason}")
    lines.append("Layers and heads are 1-based (layer-head).")
    return lines


def _profile_rule() -> str:
    from probes.heads.profile import PROFILE_RULE

    return PROFILE_RULE


def _markdown(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of ``rows`` with their own keys as columns."""
    return markdown_table(rows, list(rows[0])) if rows else ""


def atlas_markdown(atlas: Any, figures: dict[str, Path], out: Path, table: Any = None,
                   found: list[Any] | None = None) -> str:
    """``atlas.md``: the findings in short, then beside Clark et al.'s, the figures, the notable heads and the rules
    (the whole through :func:`~probes.reports.escape.md_document`)."""
    table = atlas.heads_table() if table is None else table
    found = findings(atlas) if found is None else found
    said = [*atlas_findings(found, table), "One row per head: heads.csv; everything interactive: atlas.html."]
    parts = [f"# {md_heading(_title(atlas))}\n", *opening(md_text(f) for f in said),
             "## Findings beside Clark et al. 2019 (BERT-base)\n", _markdown([f.as_dict() for f in found]), ""]
    for caption, path in figures.items():
        parts.append(f"### {md_heading(caption)}\n\n![{md_label(caption)}]({path_href(path.relative_to(out))})\n")
    notable = table[(table["positional"] != 0) | table["rare_word"] | table["syntactic"]]
    columns = ["head_name", "pattern", "confidence", "positional", "rare_word", "syntactic_relations",
               "head_types", "best_relation", "best_accuracy", "best_margin", "cluster"]
    if "head_types" in table.columns:
        notable = table[(table["positional"] != 0) | table["rare_word"] | table["syntactic"]
                        | (table["head_types"] != "none")]
    if len(notable):
        rows = notable[[c for c in columns if c in notable.columns]].to_dict("records")
        parts += ["## Heads with a role\n", _markdown(rows), ""]
    parts += _sinks_section(getattr(atlas, "sinks", None))
    parts += ["## Rules\n", *[f"- {md_no_html(line)}" for line in _notes(atlas, table)], ""]
    return md_document("\n".join(parts))


#: The columns of the attention-sink table of ``atlas.md`` and their headers (values in percent).
SINK_COLUMNS = {"layer": "layer", "to_first": "to the first token (%)", "to_cls": "to [CLS] / start specials (%)",
                "to_sep": "to [SEP] / end specials (%)", "sink_rate": "sink rate (%)"}


def _sinks_section(sinks: Any) -> list[str]:
    """``atlas.md``'s attention-sink table, one row per layer (nothing for an atlas saved without sinks)."""
    if sinks is None:
        return []
    from probes.analysis.sinks import REFERENCE

    rate = "-" if sinks.sink_rate != sinks.sink_rate else f"{100 * sinks.sink_rate:.1f}%"
    said = (f"Mean attention over query rows, then over {sinks.n_inputs} inputs, of each layer's heads; sink rate: "
            f"the share of heads whose mean attention to the first token exceeds {sinks.eps:g}, per input, averaged "
            f"over inputs ({REFERENCE}). Over all heads: {rate}. Per head: the to_first and sink_share columns of "
            "heads.csv.")
    table = markdown_table(sinks.per_layer().to_dict("records"), list(SINK_COLUMNS),
                           headers=list(SINK_COLUMNS.values()), percent=[c for c in SINK_COLUMNS if c != "layer"])
    return [f"## Attention sinks (eps = {sinks.eps:g})\n", md_text(said) + "\n", table]


def write_atlas(folder: OutputFolder, atlas: Any) -> RunRecord:
    """Write every file of an atlas into ``folder`` (see the module); the run record to write last. The figures
    are PNG (``atlas.html`` embeds them), and also ``folder.figure_format`` (``svg``, ``pdf``) when another is asked for."""
    from probes.reports.atlas.html import ExampleMaps, write_atlas_html, write_head_view

    out, fmt = folder.root, folder.figure_format
    table = atlas.heads_table()
    folder.add(write_csv(table.to_dict("records"), out / "heads.csv", columns=list(table.columns)))
    figures = _figures(atlas, table, out / "figures") if folder.figures else {}
    extra = [] if fmt == "png" or not folder.figures else list(_figures(atlas, table, out / "figures", fmt).values())
    example = None
    if atlas.example is not None:
        example = ExampleMaps.from_tokens(atlas.example, name=atlas.example_id)
        folder.add(write_head_view(out / "head_view.html", example.weights, example.labels,
                                   title=f"{_title(atlas)}: head view", name=atlas.example_id))
    found = findings(atlas)
    summary = [(f.topic, f"{f.here} [holds: {f.holds}]") for f in found]
    folder.add(write_atlas_html(out / "atlas.html", table, title=_title(atlas), summary=summary,
                                figures={c: p for c, p in figures.items()}, example=example, notes=_notes(atlas, table)))
    folder.text("atlas.md", atlas_markdown(atlas, figures, out, table, found))
    folder.list_only(*atlas.board.write(out / "leaderboard", figures=False, overwrite=True).values())
    folder.save("atlas", atlas)
    folder.add(*figures.values(), *extra)
    return atlas.record.with_timings(writing_s=folder.seconds())
