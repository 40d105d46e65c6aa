"""``probes coref`` and ``probes bridging``: which heads find antecedents, on GUM-style corpora.

Both commands read documents (``Entity=``/``Bridge=`` CoNLL-U), cut them into windows that fit
the model (:mod:`probes.extraction.windows`), extract word-level attention window by window, score every
head (:mod:`probes.analysis.coreference`, :mod:`probes.analysis.bridging`) and write Markdown / CSV / JSON tables,
layers x heads heatmaps and a ``run.json`` record. Heads are printed 1-based (``layer-head``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import typer

from probes.analysis.bridging import BridgingResult, BridgingScores
from probes.cli._app import app
from probes.analysis.coreference import BASELINES, DISTANCE_BANDS, MENTION_TYPES, AntecedentAccuracy, CorefResult
from probes.errors import ConfigError
from probes.heads.naming import INDEXING_NOTE, head_name
from probes.reports.tables import markdown_table, text_table, versions, write_csv, write_json
from probes.extraction.windows import iter_windows
from probes.checksum import file_sha256

log = logging.getLogger("probes")

BASELINE_LABELS = {"nearest": "Nearest mention", "head_match": "Head-word match", "rule_sieve": "Rule-based sieve"}
COLUMNS = ("all",) + MENTION_TYPES




def _scan(extractor: Any, corpus: Path, window: int | None, stride: int | None,
          accumulators: Sequence[Any]) -> dict[str, Any]:
    """Read ``corpus``, window it, extract attention and feed every accumulator; returns run facts."""
    from probes.corpora import read_documents

    size = window or extractor.max_tokens
    if size > extractor.max_tokens:
        raise ConfigError(f"--window: expected at most the model's {extractor.max_tokens} tokens, found {size}")
    facts: dict[str, Any] = {"corpus": str(corpus), "sha256": file_sha256(corpus), "documents": 0, "sentences": 0,
                             "words": 0, "windows": 0, "window_words": 0, "split_windows": 0}

    def documents() -> Any:
        for doc in read_documents(corpus):
            facts["documents"] += 1
            facts["sentences"] += len(doc.sentences)
            facts["words"] += doc.n_words
            yield doc

    def windows() -> Any:
        for w in iter_windows(documents(), extractor.count_tokens, size, stride=stride):
            facts["windows"] += 1
            facts["window_words"] += w.n_words
            facts["split_windows"] += w.split
            yield w

    start = time.perf_counter()
    seen = 0
    for item, attention in extractor.iter_words(windows(), words=lambda w: w.words):
        seen += 1
        for acc in accumulators:
            acc.update(item, attention)
    facts["windows_skipped_by_extractor"] = facts["windows"] - seen
    facts["seconds"] = round(time.perf_counter() - start, 2)
    facts["window_tokens"] = size
    facts["stride_tokens"] = stride if stride is not None else "half the window"
    if facts["windows_skipped_by_extractor"]:
        log.warning("%d windows were skipped by the extractor; their mentions are not counted",
                    facts["windows_skipped_by_extractor"])
    return facts


def _extractor(model: str, revision: str | None, device: str | None, batch_size: int, progress: bool) -> Any:
    from probes.extraction.extractor import AttentionExtractor

    return AttentionExtractor.from_pretrained(model, revision=revision, device=device, batch_size=batch_size,
                                              on_long="skip", progress=progress)


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
            lo, hi = result.baseline_interval(name, t, **kw)
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
            lo, hi = result.head_interval(*lh, mention_type=t, **kw)
            hname = head_name(result.layers[lh[0]], result.heads[lh[1]])
            table[label][col] = _cell(acc, lo, hi) if "per column" not in label else f"{hname}: {_cell(acc, lo, hi)}"
            rows.append({"system": label, "kind": "head", "head": hname, "mention_type": col, "accuracy": acc,
                         "ci_low": lo, "ci_high": hi, "n": int(result.head_counts(t)[1].sum()),
                         "selected_on": sel_name})
    body = [n_row] + list(table.values())
    headers = ["", "All", "Pronoun", "Proper", "Nominal"]
    md = markdown_table(body, ["system", *COLUMNS], headers=headers)
    txt = text_table(body, ["system", *COLUMNS], headers=headers)
    count_rows = [{"mention_type": t, **result.counts[t]} for t in MENTION_TYPES]
    count_rows.append({"mention_type": "all", **{k: sum(result.counts[t][k] for t in MENTION_TYPES)
                                                   for k in result.counts[MENTION_TYPES[0]]}})
    ccols = ["mention_type", "evaluated", "via_split_antecedent", "no_antecedent", "not_scorable", "cut",
             "singleton_dropped"]
    cheads = ["type", "evaluated", "of which via split antecedents", "no antecedent", "antecedent outside window",
              "cut by window", "singletons dropped"]
    md += "\n" + markdown_table(count_rows, ccols, headers=cheads)
    txt += "\n" + text_table(count_rows, ccols, headers=cheads)
    if best_all is not None:
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
        md += "\n" + markdown_table(band_rows, bcols, headers=bheads, percent=["head", *BASELINES])
        txt += "\n" + text_table(band_rows, bcols, headers=bheads, percent=["head", *BASELINES])
    return rows, md, txt


def _head_rows(layers: Sequence[int], heads: Sequence[int], columns: dict[str, np.ndarray]) -> list[dict[str, Any]]:
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
            lo, hi = result.interval(*lh, score=score, band=band, n_resamples=n_resamples)
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


# ---------------------------------------------------------------------------------- commands
def _options(model: str, corpus: Path, select_on: Path | None, window: int | None, stride: int | None,
             direction: str) -> dict[str, Any]:
    return {"model": model, "corpus": str(corpus), "select_on": None if select_on is None else str(select_on),
            "window": window, "stride": stride, "direction": direction}


def _finish(out: Path | None, name: str, rows: list[dict[str, Any]], md: str, txt: str, head_rows: list[dict],
            record: dict[str, Any], panels: dict[str, np.ndarray], title: str, label: str,
            baseline: float | None, cells: str = "accuracy") -> None:
    from probes.reports.figures import head_heatmap, overview_figure

    print(txt)
    print(INDEXING_NOTE)
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    intro = f"# {title}\n\n{INDEXING_NOTE}. Cells: {cells}, in % [95% bootstrap interval, resampling documents].\n\n"
    (out / f"{name}_leaderboard.md").write_text(intro + md, encoding="utf-8")
    write_csv(rows, out / f"{name}_leaderboard.csv")
    write_json({"rows": rows, "record": record}, out / f"{name}_leaderboard.json")
    write_csv(head_rows, out / "scores.csv")
    first = next(iter(panels))
    head_heatmap(panels[first], out / f"{name}_heatmap.png", title=f"{title}: {first}", label=label,
                 baseline=baseline, vmax=None)
    top = max((float(np.nanmax(v)) for v in panels.values() if np.isfinite(v).any()), default=1.0)
    overview_figure(panels, out / f"{name}_heatmaps.png", suptitle=title, ncols=min(4, len(panels)), vmax=top)
    write_json(record, out / "run.json")
    print(f"wrote {out}", file=sys.stderr)


def _check_annotated(corpus: Path, *, bridges: bool) -> None:
    """Fail before the model loads when ``corpus`` has no coreference (or bridging) annotation at all."""
    from probes.corpora import read_documents

    what = "bridging links (Bridge= in MISC)" if bridges else "coreference mentions (Entity= in MISC)"
    for doc in read_documents(corpus):
        if doc.bridges if bridges else doc.mentions:
            return
    raise ConfigError(f"expected {what}, found none; give a GUM / CorefUD CoNLL-U file", path=corpus)


def _score_corpora(make: Callable[[], Any], scorer: Any, *, model: str, revision: str | None, device: str | None,
                   batch_size: int, progress: bool, corpus: Path, select_on: Path | None, window: int | None,
                   stride: int | None) -> tuple[Any, Any, dict[str, Any], Any, dict[str, Any] | None]:
    """Load the model, score ``corpus`` with ``scorer`` and, if given, ``select_on`` with a fresh ``make()``.

    Returns:
        ``(extractor, result, facts, selection_result, selection_facts)``; the selection pair is ``None``
        without ``select_on``.
    """
    if window is not None and window < 3 or stride is not None and stride < 1:
        raise ConfigError(f"--window/--stride: expected a window over 2 tokens and a positive stride, "
                          f"found {window} and {stride}")
    for path in (corpus, select_on):
        if path is not None:
            _check_annotated(path, bridges=isinstance(scorer, BridgingScores))
    extractor = _extractor(model, revision, device, batch_size, progress)
    facts = _scan(extractor, corpus, window, stride, [scorer])
    selection = sel_facts = None
    if select_on is not None:
        sel_scorer = make()
        sel_facts = _scan(extractor, select_on, window, stride, [sel_scorer])
        selection = sel_scorer.compute()
    return extractor, scorer.compute(), facts, selection, sel_facts


@app.command("coref")
def coref(
    model: str = typer.Option(..., "--model", help="Model folder or hub name (loaded with eager attention)."),
    corpus: Path = typer.Option(..., "--corpus", exists=True, dir_okay=False,
                                help="GUM/CorefUD CoNLL-U file with Entity= annotation (scored)."),
    select_on: Path | None = typer.Option(None, "--select-on", exists=True, dir_okay=False,
                                          help="Choose the best heads on this corpus, report them on --corpus."),
    out: Path | None = typer.Option(None, "--out", help="Folder for tables, heatmaps and run.json."),
    window: int | None = typer.Option(None, "--window", help="Tokens per window, specials included "
                                      "(default: the model's maximum)."),
    stride: int | None = typer.Option(None, "--stride", help="Tokens between window starts (default: half a window)."),
    candidates: str = typer.Option("all", "--candidates", help="all | earlier | mentions: words the argmax runs over."),
    direction: str = typer.Option("anaphor_to_antecedent", "--direction",
                                  help="anaphor_to_antecedent (the anaphor's row) | antecedent_to_anaphor."),
    antecedents: str = typer.Option("window", "--antecedents",
                                    help="window: antecedents only outside the window are not scorable; "
                                         "document: they count as wrong."),
    singletons: str = typer.Option("keep", "--singletons",
                                   help="keep | drop: drop mentions of once-mentioned entities (OntoNotes-style)."),
    split_antecedents: str = typer.Option("any-part", "--split-antecedents",
                                          help="any-part: a plural with no earlier mention of its own in the window "
                                               "(GUM SplitAnte=) is scored against its parts' earlier mentions; "
                                               "ignore: it counts as no antecedent."),
    batch_size: int = typer.Option(4, "--batch-size", help="Windows per forward pass."),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda, cuda:1 ... (default: CUDA if available)."),
    revision: str | None = typer.Option(None, "--revision", help="Model revision (hub models)."),
    n_resamples: int = typer.Option(1000, "--n-resamples", help="Bootstrap resamples for the intervals."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr."),
) -> None:
    """Antecedent-selection accuracy of every head, with nearest / head-match / rule-based baselines."""
    make = lambda: AntecedentAccuracy(candidates=candidates, direction=direction, antecedents=antecedents,
                                     singletons=singletons, split_antecedents=split_antecedents)  # noqa: E731
    scorer = make()  # validates the options before the model loads
    t0 = time.perf_counter()
    extractor, result, facts, selection, sel_facts = _score_corpora(
        make, scorer, model=model, revision=revision, device=device, batch_size=batch_size, progress=progress,
        corpus=corpus, select_on=select_on, window=window, stride=stride)
    rows, md, txt = coref_tables(result, selection, n_resamples=n_resamples)
    columns = {f"accuracy_{c}": result.accuracy(None if c == "all" else c) for c in COLUMNS}
    columns.update({f"accuracy_distance_{b}": result.accuracy(None, b) for b in DISTANCE_BANDS})
    record = {
        "command": "coref", "options": {**_options(model, corpus, select_on, window, stride, direction),
                                        **scorer.options},
        "definitions": {
            "evaluated": "a mention whose entity has an earlier mention (start first, or same start and longer) "
                         "inside the window; scored once, in the earliest window holding it",
            "prediction": "argmax over candidate words of the anaphor head's row (specials dropped, self "
                          "excluded, ties left-most); correct if it is the head word of any antecedent",
            "mention_type": "head UPOS PRON or DET -> pronoun, PROPN -> proper, else nominal",
            "split_antecedents": (
                "any-part: a mention whose entity has no earlier mention of its own in the window but has split "
                "antecedents (GUM SplitAnte=) with earlier mentions there is evaluated, correct if the prediction "
                "(or a baseline's pick) is the head word of an earlier mention of any part entity; counted in "
                "via_split_antecedent" if scorer.split_antecedents == "any-part" else
                "ignore: SplitAnte is not used; a plural whose entity has no earlier mention of its own counts "
                "as no_antecedent"),
        },
        "model": extractor.info(), "data": facts, "selection_data": sel_facts,
        "counts": result.counts, "extraction_report": extractor.report.as_dict(),
        "seconds": round(time.perf_counter() - t0, 2), "versions": versions(), "indexing": INDEXING_NOTE,
    }
    panels = {c: columns[f"accuracy_{c}"] for c in COLUMNS}
    _finish(out, "coref", rows, md, txt, _head_rows(result.layers, result.heads, columns), record, panels,
            f"Antecedent selection ({Path(corpus).name})", "accuracy",
            result.baseline_accuracy("rule_sieve"))


@app.command("bridging")
def bridging(
    model: str = typer.Option(..., "--model", help="Model folder or hub name (loaded with eager attention)."),
    corpus: Path = typer.Option(..., "--corpus", exists=True, dir_okay=False,
                                help="GUM CoNLL-U file with Bridge= annotation (scored)."),
    select_on: Path | None = typer.Option(None, "--select-on", exists=True, dir_okay=False,
                                          help="Choose the best heads on this corpus, report them on --corpus."),
    out: Path | None = typer.Option(None, "--out", help="Folder for tables, heatmaps and run.json."),
    window: int | None = typer.Option(None, "--window", help="Tokens per window, specials included."),
    stride: int | None = typer.Option(None, "--stride", help="Tokens between window starts (default: half a window)."),
    direction: str = typer.Option("anaphor_to_antecedent", "--direction",
                                  help="anaphor_to_antecedent | antecedent_to_anaphor."),
    batch_size: int = typer.Option(4, "--batch-size", help="Windows per forward pass."),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda, cuda:1 ... (default: CUDA if available)."),
    revision: str | None = typer.Option(None, "--revision", help="Model revision (hub models)."),
    n_resamples: int = typer.Option(1000, "--n-resamples", help="Bootstrap resamples for the intervals."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr."),
) -> None:
    """Bridging: argmax accuracy and Pandit & Hou attention-mass ratio of every head, by sentence distance."""
    make = lambda: BridgingScores(direction=direction)  # noqa: E731
    scorer = make()  # validates the options before the model loads
    t0 = time.perf_counter()
    extractor, result, facts, selection, sel_facts = _score_corpora(
        make, scorer, model=model, revision=revision, device=device, batch_size=batch_size, progress=progress,
        corpus=corpus, select_on=select_on, window=window, stride=stride)
    rows, md, txt = bridging_tables(result, selection, n_resamples=n_resamples)
    columns = {"accuracy_all": result.accuracy(), "mass_all": result.mass_ratio()}
    for b in DISTANCE_BANDS:
        columns[f"mass_distance_{b}"] = result.mass_ratio(b)
        columns[f"accuracy_distance_{b}"] = result.accuracy(b)
    record = {
        "command": "bridging", "options": _options(model, corpus, select_on, window, stride, direction),
        "definitions": {
            "argmax": "the anaphor head word's most attended other word (specials dropped, ties left-most) "
                      "is the antecedent's head word",
            "mass": "per anaphor word: attention to the antecedent span's words / attention to all words "
                    "(special tokens excluded), averaged over the anaphor's words (Pandit & Hou 2021, "
                    "by word offsets instead of inline markers)",
            "antecedent": "the Bridge's antecedent mention chosen by the reader (nearest earlier mention of "
                          "the antecedent entity); a link is scored in the earliest window holding both",
        },
        "model": extractor.info(), "data": facts, "selection_data": sel_facts, "counts": result.counts,
        "extraction_report": extractor.report.as_dict(), "seconds": round(time.perf_counter() - t0, 2),
        "versions": versions(), "indexing": INDEXING_NOTE,
    }
    panels = {"argmax accuracy": columns["accuracy_all"], "mass ratio": columns["mass_all"]}
    panels.update({f"mass, distance {b}": columns[f"mass_distance_{b}"] for b in DISTANCE_BANDS})
    _finish(out, "bridging", rows, md, txt, _head_rows(result.layers, result.heads, columns), record, panels,
            f"Bridging ({Path(corpus).name})", "score", None, cells="argmax accuracy and attention-mass ratio")
