"""CLI commands ``leaderboard``, ``baselines`` and ``demo``: thin wrappers over library calls."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import typer

from probes.cli._app import app
from probes.errors import ConfigError, InputError

logger = logging.getLogger("probes")

_TREEBANK_HELP = "a .conllu / .conllx / .spacy file, or ud:<treebank>:<split> from the registry (e.g. ud:en_ewt:dev)"


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
    from probes.registry import resolve_treebank

    path = resolve_treebank(spec)
    return path, list(read_treebank(path))


def _store_pairs(path: Path) -> tuple[Iterator[Any], dict[str, Any]]:
    try:
        from probes.store import open_store
    except ImportError as exc:  # the store lands with the extraction issue
        raise ConfigError("--store needs probes.store, which this installation lacks") from exc
    if not path.exists():
        raise InputError(f"{path}: no such file or folder (attention store)")
    store = open_store(path)
    return iter(store), dict(getattr(store, "info", {}) or {})


def _default_out(model: str, treebank: str) -> Path:
    clean = lambda s: re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(s.rstrip("/")).name if not s.startswith("ud:") else s)
    return Path("runs") / f"{clean(model)}-{clean(treebank).removesuffix('.conllu')}"


@app.command("leaderboard")
def leaderboard_cli(
    treebank: Optional[str] = typer.Option(None, "--treebank", "-t", help=f"Data to report on: {_TREEBANK_HELP}."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model folder (or hub name, needs network)."),
    store: Optional[Path] = typer.Option(None, "--store", help="Attention store to read instead of running --model."),
    select_on: Optional[str] = typer.Option(
        None, "--select-on", help="Choose heads and baseline offsets on this data (e.g. dev) and report on "
        "--treebank (e.g. test). Default: select and report on the same data, as Clark et al. did."),
    select_store: Optional[Path] = typer.Option(None, "--select-store", help="Attention store for --select-on."),
    relations: Optional[list[str]] = typer.Option(
        None, "--relations", "-r", help="Relations to list, comma-separated (default: all with >= --min-count words)."),
    min_count: int = typer.Option(100, "--min-count", min=1, help="Least words for a relation to be listed."),
    exclude: str = typer.Option("root,punct", "--exclude", help="Relations left out of the listing (ALL keeps them)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (default runs/<model>-<treebank>)."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Sentences per forward pass."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)."),
    poss_rule: bool = typer.Option(True, "--poss-rule/--no-poss-rule",
                                   help="Score nmod:poss through the following 's (Clark et al.'s rule)."),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="Write PNG heatmaps."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars on stderr."),
) -> None:
    """Which head best predicts each dependency relation (Clark et al. 2019 §4.2)?

    Writes leaderboard.{md,csv,json}, scores.csv (every head), run.json and figures/ to --out,
    and prints the leaderboard. Layers and heads are printed 1-based (layer-head).
    """
    from probes.leaderboard import file_sha256, format_leaderboard, run_leaderboard

    if (model is None) == (store is None):
        raise ConfigError("give exactly one of --model (run a model) or --store (read stored attention)")
    if store is None and treebank is None:
        raise ConfigError("--treebank is required with --model")
    if select_store is not None and store is None:
        raise ConfigError("--select-store goes with --store; with --model use --select-on")
    record: dict[str, Any] = {"command": "probes leaderboard", "options": {"batch_size": batch_size, "device": device}}
    t_read = time.perf_counter()
    if store is not None:
        report_pairs, info = _store_pairs(store)
        select_pairs = _store_pairs(select_store)[0] if select_store is not None else None
        record.update(model=info.get("model", str(store)), extractor=info, store=str(store))
        report_name = treebank or store.name
        select_name = select_store.name if select_store is not None else None
        record["data"] = {"report": {"store": str(store)}}
    else:
        from probes.extract import AttentionExtractor

        report_path, report_sents = _read(treebank)  # type: ignore[arg-type]
        select_path, select_sents = _read(select_on) if select_on else (None, None)
        record["data"] = {"report": {"spec": treebank, "path": str(report_path), "sha256": file_sha256(report_path),
                                     "sentences": len(report_sents)}}
        if select_path is not None:
            record["data"]["select"] = {"spec": select_on, "path": str(select_path),
                                        "sha256": file_sha256(select_path), "sentences": len(select_sents)}
        record["timings"] = {"reading_s": time.perf_counter() - t_read}
        t_load = time.perf_counter()
        extractor = AttentionExtractor.from_pretrained(model, batch_size=batch_size, device=device, progress=progress)
        record["timings"]["model_load_s"] = time.perf_counter() - t_load
        record.update(model=model, extractor=extractor.info())
        report_pairs = extractor.iter_attention(report_sents)
        select_pairs = extractor.iter_attention(select_sents) if select_sents is not None else None
        report_name, select_name = _data_name(treebank), (_data_name(select_on) if select_on else None)  # type: ignore
    out_dir = out or _default_out(model or str(store), treebank or str(store))
    pre = dict(record.pop("timings", {}))
    rows, paths, final = run_leaderboard(
        report_pairs, out_dir, select_pairs=select_pairs, report_name=report_name, select_name=select_name,
        record=record, relations=_split_list(relations) or None, min_count=min_count,
        exclude=[e for e in exclude.split(",") if e], poss_rule=poss_rule, figures=figures)
    if pre or store is None:
        final["timings"] = {**pre, **final["timings"]}
        if store is None:
            final["extraction_report"] = extractor.report.as_dict()
        from probes.report import write_json

        write_json(final, paths["run.json"])
    typer.echo(format_leaderboard(rows, "text"), nl=False)
    sel = final["selected_on"]
    typer.echo(f"\nHeads selected on {sel}, reported on {final['reported_on']}"
               + ("" if final["held_out_selection"] else " (same data: optimistic; use --select-on)")
               + f". Layers and heads are 1-based. sig.: paired 95% interval of the margin above 0.")
    t = final["timings"]
    typer.echo(f"Timings: extraction {t['extraction_s']:.1f} s, scoring {t['scoring_s']:.2f} s, "
               f"writing {t['writing_s']:.2f} s.")
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
    from probes.baselines import offset_baseline
    from probes.report import markdown_table, text_table
    from probes.scores import ALL, ALL_NOPUNCT, redundant_pools

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
    from probes.demo import run_demo
    from probes.leaderboard import format_leaderboard

    rows, paths, record = run_demo(out, progress=progress)
    typer.echo(format_leaderboard(rows, "text"), nl=False)
    typer.echo(f"\nModel {record['model_name']} on the probes sample corpus ({record['counts']['report']['sentences']} "
               f"test sentences, heads selected on {record['counts']['select']['sentences']} dev sentences). "
               "The parses are silver (spaCy en_core_web_sm), so labels follow spaCy's scheme, not UD.")
    typer.echo("Layers and heads are 1-based. sig.: paired 95% interval of the margin over the best baseline above 0.")
    typer.echo(f"Report: {paths['leaderboard.md']}  (all files in {out})")
