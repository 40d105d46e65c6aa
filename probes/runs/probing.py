"""Probing runs: train the chosen probes on one split, score them on another, report when asked.

Every trainable probe (and its control-task twin) trains in lockstep over a
single pass of the training stream, so attention is extracted (or read) once;
scoring is one more pass over the evaluation stream. :func:`run_probes` works on
``(Sentence, WordAttention)`` streams; :func:`probe` builds them from a model and
treebanks (or attention stores) as ``probes probe`` does. Both return a
:class:`ProbeRun`, which writes nothing until ``write(out_dir)``: Markdown + CSV +
JSON tables, layers x heads heatmaps (1-based) and ``run.json`` with the options,
counts, timings and library versions (:mod:`probes.reports.probing`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.driver import stream
from probes.corpora.types import Sentence, base_relation
from probes.errors import ConfigError
from probes.extraction.attention import WordAttention
from probes.heads.naming import DIRECTIONS, INDEXING_NOTE, head_name
from probes.probing.controls import ControlTask, selectivity
from probes.probing.embeddings import StaticVectors
from probes.probing.label import LabelScorer, PerHeadLabelProbe
from probes.probing.parser_scores import ParserScorer
from probes.probing.parsers import AttnEmbParser, AttnParser, DistancesEmbParser, RightBranching
from probes.probing.per_head import POOLED, PerHeadEvaluator, PerHeadProbe, PerHeadScores
from probes.probing.train import fit_together, iter_pairs
from probes.reports.probing import (
    PARSER_COLUMNS,
    PER_HEAD_COLUMNS,
    attn_weight_figure,
    format_summary,
    label_rows,
    per_head_figures,
    write_label,
    write_parsers,
    write_per_head,
)
from probes.reports.record import (
    FIGURE_FORMATS,
    data_record,
    inputs_lines,
    inputs_record,
    invocation,
    prepare_out_dir,
    versions,
    write_record,
)
from probes.results import Result
from probes.runs.inputs import check_run_options, data_name, load_extractor, open_attention_store, read_sentences

__all__ = ["PROBE_KINDS", "ParserRow", "ParserScorer", "LabelScores", "ProbeRun", "parse_kinds", "run_probes",
           "probe", "PARSER_COLUMNS", "PER_HEAD_COLUMNS"]

logger = logging.getLogger("probes")

Pair = tuple[Sentence, WordAttention]
Rows = list[dict[str, Any]]

#: What ``--probe`` accepts (``all`` = every one of them).
PROBE_KINDS: tuple[str, ...] = ("per-head", "label", "attn", "attn+emb", "distances+emb", "right-branching")

_TRAINING = ("Adam, summed cross-entropy per sentence, file order, no shuffling; parsers: lr 0.002, "
             "1 sentence per step (Clark et al. 2019 §5.3); per-head: lr 0.05, 8 sentences per step")
_DEFINITIONS = {
    "uas": "argmax per word over ROOT + words (self allowed), words with gold relation punct excluded",
    "uuas": "undirected maximum spanning tree over non-punct words, weight log p(j|i) + log p(i|j); "
            "gold = undirected arcs between non-punct words",
    "vector_alignment": "paper formula: candidate c paired with word c's vector (the released code's "
                        "one-word shift is not reproduced)",
    "head_selection": "per-head rows pick the best head on the evaluation data (as Clark et al.)",
}


@dataclass(frozen=True)
class ParserRow(Result):
    """One parser's held-out scores (fractions; UAS without punctuation, UUAS by spanning tree)."""

    probe: str
    uas: float
    uas_ci_low: float
    uas_ci_high: float
    uuas: float
    uuas_ci_low: float
    uuas_ci_high: float
    control_uas: float
    selectivity: float
    train_sentences: int
    attention_from: str


@dataclass(frozen=True)
class LabelScores(Result):
    """Held-out counts of the per-head label probes (the position-only probe last).

    Attributes:
        correct: ``(n_sentences, L * H + 1)`` correctly labelled gold arcs per probe.
        total: ``(n_sentences,)`` gold arcs.
        n_layers, n_heads: the model's shape.
        n_labels: relation labels the probes choose from.
        train_arcs_used, train_arcs_seen: training arcs kept by the reservoir sample, and seen.
    """

    correct: npt.NDArray[np.int64]
    total: npt.NDArray[np.int64]
    n_layers: int
    n_heads: int
    n_labels: int
    train_arcs_used: int
    train_arcs_seen: int

    @classmethod
    def from_scorer(cls, probe: PerHeadLabelProbe, scorer: LabelScorer) -> LabelScores:
        """The counts of ``scorer`` with the facts of its fitted ``probe``."""
        correct, total = scorer.compute()
        return cls(correct, total, int(probe.n_layers_), int(probe.n_heads_), len(probe.classes_),
                   int(probe.n_arcs_used_), int(probe.n_arcs_seen_))


@dataclass(frozen=True)
class ProbeRun(Result):
    """What one probing run measured; tables, figures and ``run.json`` are made from it on :meth:`write`.

    Attributes:
        kinds: the probes run (:data:`PROBE_KINDS`).
        parsers: held-out UAS / UUAS of each parser, best first.
        control: whether control-task twins were trained (selectivity columns).
        per_head: held-out scores of the per-head relation probes, or None.
        per_head_control: the same probes trained and scored on the control task, or None.
        attn_weights: ``(2, L, H)`` weight of each map in the Attn parser, or None.
        label: the per-head label probes' counts, or None.
        record: facts given by the caller (model, data, options), first in ``run.json``.
        facts: what the run adds to ``run.json``: probes, counts, options, indexing, timings, versions.
        min_count: least evaluation words for a relation to be listed in ``per_head.md``.
    """

    kinds: tuple[str, ...]
    parsers: tuple[ParserRow, ...]
    control: bool
    per_head: PerHeadScores | None = None
    per_head_control: PerHeadScores | None = None
    attn_weights: npt.NDArray[np.float32] | None = None
    label: LabelScores | None = None
    record: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    min_count: int = 100

    def parser_rows(self) -> Rows:
        """One dict per parser (``parsers.csv``)."""
        return [asdict(r) for r in self.parsers]

    def per_head_rows(self) -> tuple[Rows, Rows]:
        """``(listed, full)``: the best head per listed relation (``per_head.csv``) and every relation x head."""
        if self.per_head is None:
            return [], []
        return _per_head_rows(self.per_head, self.per_head_control, self.min_count)

    def format(self) -> str:
        """The terminal summary: parsers, per-head probes, timings."""
        listed = self.per_head_rows()[0] if self.per_head is not None else None
        return format_summary(self.parser_rows(), listed, self.facts["timings"])

    def notes(self) -> str:
        """What happened to the inputs, one line per split: sentences used and, by id, every one skipped,
        truncated or run in windows (the console summary; also in ``parsers.md`` / ``per_head.md``)."""
        return "\n".join(f"Inputs, {line}" for line in inputs_lines(self.record.get("inputs", {})))

    def summary(self) -> str:
        """Same as :meth:`notes`."""
        return self.notes()

    def _subject(self) -> str:
        """Model and evaluation data, as the figures' titles name them."""
        model = str(self.record.get("model") or "model")
        model = Path(model).name if Path(model).is_absolute() else model
        data = (self.record.get("data") or {}).get("eval") or {}
        name = data.get("spec") or data.get("store") or "evaluation data"
        return f"{model} on {Path(name).name if Path(str(name)).is_absolute() else name}"

    def write(self, out_dir: str | Path, *, figures: bool = True, figure_format: str = "png",
              overwrite: bool = False) -> dict[str, Path]:
        """Write the tables, (with ``figures``) the heatmaps and ``run.json`` to ``out_dir``.

        Args:
            out_dir: the folder; refused (ConfigError) when it holds other files than a previous output of
                the same command, unless ``overwrite``.
            figures, figure_format: whether to draw the heatmaps, and as ``png``, ``svg`` or ``pdf``.

        Returns:
            The files written, by path relative to ``out_dir`` (``run.json`` last).
        """
        if figure_format not in FIGURE_FORMATS:
            raise ConfigError(f"figure_format: expected one of {', '.join(FIGURE_FORMATS)}, found {figure_format!r}")
        t0 = time.perf_counter()
        out = prepare_out_dir(out_dir, self.record.get("command"), overwrite=overwrite)
        results: dict[str, Any] = dict(self.record)
        paths: dict[str, Path] = {}
        look = {"subject": self._subject(), "fmt": figure_format}
        inputs = inputs_lines(self.record.get("inputs", {}), limit=None)
        if self.parsers:
            results["parsers"] = self.parser_rows()
            paths.update(write_parsers(results["parsers"], out, self.control, inputs=inputs))
        if self.per_head is not None:
            rows, full = self.per_head_rows()
            results["per_head"] = {"listed": rows, "n_unseen_relation_words": self.per_head.n_unseen}
            paths.update(write_per_head(rows, full, out, inputs=inputs))
            if figures:
                paths.update(per_head_figures(*_per_head_figure_data(self.per_head, self.per_head_control), out,
                                              **look))
            if self.attn_weights is not None and figures:
                paths.update(attn_weight_figure(self.attn_weights, out, **look))
        if self.label is not None:
            paths.update(_write_label(self.label, out, figures, results, look))
        results.update(self.facts)
        results["timings"] = {**self.facts["timings"], "writing_s": time.perf_counter() - t0}
        paths["run.json"] = write_record(results, out, paths.values())
        return paths

    def to_pandas(self, table: str = "parsers") -> Any:
        """One of the run's tables as a ``pandas.DataFrame``.

        Args:
            table: ``parsers`` (one row per parser), ``per_head`` (best head per listed relation),
                ``per_head_scores`` (every relation x head) or ``label`` (every head's label probe).
        """
        import pandas as pd

        if table == "parsers":
            return pd.DataFrame(self.parser_rows(), columns=list(PARSER_COLUMNS))
        if table in ("per_head", "per_head_scores"):
            listed, full = self.per_head_rows()
            return pd.DataFrame(listed if table == "per_head" else full)
        if table == "label":
            return pd.DataFrame([] if self.label is None else
                                label_rows(self.label.correct, self.label.total, self.label.n_heads)[1])
        raise ConfigError(f"table: expected one of parsers, per_head, per_head_scores, label, found {table!r}")


# ---------------------------------------------------------------------------------- from streams
def parse_kinds(kinds: Sequence[str]) -> list[str]:
    """The probes named in ``kinds`` (``all`` = every one), in order, without repeats; ConfigError if unknown."""
    out: list[str] = []
    for kind in kinds:
        kind = kind.lower()
        if kind == "all":
            out += list(PROBE_KINDS)
        elif kind in PROBE_KINDS:
            out.append(kind)
        else:
            raise ConfigError(f"unknown probe {kind!r}: expected one of {', '.join(PROBE_KINDS)} or all")
    return list(dict.fromkeys(out))


def run_probes(
    train_pairs: Iterable[Pair],
    eval_pairs: Iterable[Pair],
    *,
    kinds: Sequence[str] = ("all",),
    vectors: StaticVectors | None = None,
    control: ControlTask | None = None,
    random_init: tuple[Iterable[Pair], Iterable[Pair]] | None = None,
    epochs: int = 1,
    device: str | None = None,
    random_state: int = 0,
    min_count: int = 100,
    record: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> ProbeRun:
    """Train probes on ``train_pairs`` and score them on ``eval_pairs``; nothing is written.

    Args:
        train_pairs, eval_pairs: ``(Sentence, WordAttention)`` streams (re-iterable when ``epochs > 1``).
        kinds: probes to run (:data:`PROBE_KINDS` or ``all``).
        vectors: static vectors for ``attn+emb`` and ``distances+emb``.
        control: a fitted :class:`ControlTask`; each trainable probe then gets a twin trained
            and scored on control heads, and selectivity is reported.
        random_init: ``(train, eval)`` streams from a randomly initialised copy of the model;
            adds the "Attn+Emb, random-init model" row.
        epochs: passes over the training stream.
        device: torch device for training.
        random_state: seed of every probe.
        min_count: least evaluation words for a relation to be listed in ``per_head.md`` (``root`` and
            ``punct`` are left out of the listing, as in the leaderboard; every row is in ``per_head_scores.csv``).
        record: facts to put first in ``run.json`` (model, data, options).
        progress: progress bars on stderr.

    Returns:
        A :class:`ProbeRun`; ``run.write(out_dir)`` writes the tables, figures and ``run.json``.
    """
    kinds = parse_kinds(kinds)
    if any(k in kinds for k in ("attn+emb", "distances+emb")) and vectors is None:
        raise ConfigError("attn+emb and distances+emb need static vectors (vectors=...)")
    if random_init is not None and vectors is None:
        raise ConfigError("the random-init control trains Attn+Emb: it needs static vectors (vectors=...)")
    common = {"epochs": 1, "random_state": random_state, "device": device, "progress": False}
    probes = _make_probes(kinds, vectors, common, progress)
    trained = [(name, p, None) for name, p in probes.items()]
    if control is not None:
        from sklearn.base import clone

        trained += [(f"{name} [control]", clone(p), control.relabel) for name, p in probes.items()
                    if name != "label"]
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if trained:
        fit_together([p for _, p, _ in trained], train_pairs, transforms=[t for _, _, t in trained],
                     epochs=epochs, progress=progress, desc="train")
    timings["train_s"] = time.perf_counter() - t0  # includes extraction when streaming from a model
    t0 = time.perf_counter()
    ev = _Evaluation(kinds, probes, trained, control)
    n_eval = ev.run(eval_pairs, progress)
    timings["eval_s"] = time.perf_counter() - t0
    if random_init is not None:
        t0 = time.perf_counter()
        ev.random_init(AttnEmbParser(vectors, **common), random_init, epochs, progress)
        timings["random_init_s"] = time.perf_counter() - t0
    options = {**dict((record or {}).get("options", {})), "epochs": epochs, "device": device,
               "random_state": random_state, "min_count": min_count, "training": _TRAINING,
               "vectors": vectors.describe() if vectors is not None else None,
               "control_task": control.describe() if control is not None else None, **_DEFINITIONS}
    facts = {"probes": kinds,
             "counts": {"eval_sentences": n_eval,
                        "train_sentences": {name: int(getattr(p, "n_sentences_seen_", 0)) for name, p, _ in trained},
                        "train_skipped": {name: int(getattr(p, "n_skipped_", 0)) for name, p, _ in trained}},
             "options": options, "indexing": INDEXING_NOTE, "timings": timings, "versions": versions()}
    return ev.result(kinds, control is not None, dict(record or {}), facts, min_count)


def _make_probes(kinds: Sequence[str], vectors: StaticVectors | None, common: Mapping[str, Any],
                 progress: bool) -> dict[str, Any]:
    """The unfitted probes of ``kinds``, by the name they are reported under."""
    probes: dict[str, Any] = {}
    if "per-head" in kinds:
        probes["per-head"] = PerHeadProbe(**common)
    if "label" in kinds:
        probes["label"] = PerHeadLabelProbe(random_state=common["random_state"], progress=progress)
    if "attn" in kinds:
        probes["Attn"] = AttnParser(**common)
    if "attn+emb" in kinds:
        probes["Attn+Emb"] = AttnEmbParser(vectors, **common)
    if "distances+emb" in kinds:
        probes["Distances+Emb"] = DistancesEmbParser(vectors, **common)
    return probes


class _Relabelled:
    """An analysis fed the control task's relabelled sentences instead of the gold ones."""

    def __init__(self, analysis: Any, relabel: Any) -> None:
        self.analysis, self.relabel = analysis, relabel

    def update(self, item: Sentence, word_attention: WordAttention) -> None:
        """Update the wrapped analysis with ``relabel(item)``."""
        self.analysis.update(self.relabel(item), word_attention)

    def compute(self) -> Any:
        """The wrapped analysis' result."""
        return self.analysis.compute()


class _Evaluation:
    """Every scorer of a run's fitted probes, fed in one pass over the evaluation stream."""

    def __init__(self, kinds: Sequence[str], probes: Mapping[str, Any], trained: Sequence[tuple[str, Any, Any]],
                 control: ControlTask | None) -> None:
        self.probes = probes
        self.control = control
        self.parsers = {name: p for name, p, t in trained if t is None and name not in ("per-head", "label")}
        if "right-branching" in kinds:
            self.parsers["right-branching"] = RightBranching().fit()
        self.scorers = {name: ParserScorer(p) for name, p in self.parsers.items()}
        if control is not None:
            for name, p, t in trained:
                if t is not None and name != "per-head [control]":
                    self.scorers[name] = ParserScorer(p, t, uuas=False)
            if "right-branching" in self.parsers:
                self.scorers["right-branching [control]"] = ParserScorer(self.parsers["right-branching"],
                                                                         control.relabel, uuas=False)
        self.per_head = PerHeadEvaluator(probes["per-head"]) if "per-head" in probes else None
        self.per_head_control = None
        if self.per_head is not None and control is not None:
            self.per_head_control = PerHeadEvaluator(next(p for n, p, _ in trained if n == "per-head [control]"))
        self.label = LabelScorer(probes["label"]) if "label" in probes else None

    def analyses(self) -> dict[str, Any]:
        """Every scorer by name, as analyses for :func:`probes.analysis.driver.stream`."""
        out: dict[str, Any] = dict(self.scorers)
        if self.per_head is not None:
            out["per-head"] = self.per_head
        if self.per_head_control is not None:
            relabel = self.control.relabel  # type: ignore[union-attr]
            out["per-head [control]"] = _Relabelled(self.per_head_control, relabel)
        if self.label is not None:
            out["label"] = self.label
        return out

    def run(self, eval_pairs: Iterable[Pair], progress: bool) -> int:
        """Feed every whole evaluation sentence to every scorer in one pass; returns how many there were."""
        done = stream(iter_pairs(eval_pairs, progress=progress, desc="evaluate"), self.analyses())
        return done.n_items - len(done.skipped)

    def random_init(self, parser: AttnEmbParser, streams: tuple[Iterable[Pair], Iterable[Pair]], epochs: int,
                    progress: bool) -> None:
        """Train and score ``parser`` (Attn+Emb) on attention of a randomly initialised model."""
        name = "Attn+Emb, random-init model"
        fit_together([parser], streams[0], epochs=epochs, progress=progress, desc="train (random-init model)")
        self.scorers[name] = scorer = ParserScorer(parser)
        self.parsers[name] = parser
        stream(iter_pairs(streams[1], progress=progress, desc="evaluate (random-init)"), {name: scorer})

    def result(self, kinds: Sequence[str], control: bool, record: dict[str, Any], facts: dict[str, Any],
               min_count: int) -> ProbeRun:
        """The run: parser rows, per-head and label scores, the Attn parser's map weights."""
        weights = None
        if self.per_head is not None and "Attn" in self.parsers:
            weights = self.parsers["Attn"].head_weights()
        label = LabelScores.from_scorer(self.probes["label"], self.label) if self.label is not None else None
        return ProbeRun(
            kinds=tuple(kinds), parsers=tuple(_parser_rows(self.parsers, self.scorers)), control=control,
            per_head=self.per_head.compute() if self.per_head is not None else None,
            per_head_control=self.per_head_control.compute() if self.per_head_control is not None else None,
            attn_weights=weights, label=label, record=record, facts=facts, min_count=min_count)


def _parser_rows(parsers: Mapping[str, Any], scorers: Mapping[str, ParserScorer]) -> list[ParserRow]:
    rows = []
    for name, parser in parsers.items():
        s = scorers[name].compute()
        ctl = scorers.get(f"{name} [control]")
        control_uas = ctl.compute()["uas"] if ctl is not None else float("nan")
        rows.append(ParserRow(
            probe=name, uas=s["uas"], uas_ci_low=s["uas_ci_low"], uas_ci_high=s["uas_ci_high"],
            uuas=s["uuas"], uuas_ci_low=s["uuas_ci_low"], uuas_ci_high=s["uuas_ci_high"],
            control_uas=control_uas, selectivity=s["uas"] - control_uas,
            train_sentences=int(getattr(parser, "n_sentences_seen_", 0)),
            attention_from="randomly initialised model" if "random-init" in name else
            ("none" if name in ("right-branching", "Distances+Emb") else "the model"),
        ))
    return sorted(rows, key=lambda r: -r.uas)


def _per_head_rows(ph: PerHeadScores, ctl: PerHeadScores | None, min_count: int) -> tuple[list[dict], list[dict]]:
    acc = ph.accuracy  # (R, L, H)
    n_layers, n_heads = acc.shape[1:]
    amax = ph.argmax_accuracy  # (R, 2, L, H)
    ctl_acc = ctl_floor = None
    if ctl is not None:
        index = {r: i for i, r in enumerate(ctl.relations)}
        ctl_acc = np.full_like(acc, np.nan)
        ctl_floor = np.full(len(ph.relations), np.nan)
        for i, r in enumerate(ph.relations):
            if r in index:
                ctl_acc[i] = ctl.accuracy[index[r]]
                ctl_floor[i] = ctl.floor_accuracy[index[r]]
    full, rows = [], []
    for r, rel in enumerate(ph.relations):
        if ph.counts[r] == 0:
            continue
        for layer in range(n_layers):
            for head in range(n_heads):
                full.append({"relation": rel, "count": int(ph.counts[r]), "layer": layer + 1, "head": head + 1,
                             "head_name": head_name(layer, head), "accuracy": float(acc[r, layer, head]),
                             "position_only": float(ph.floor_accuracy[r]),
                             "argmax_dep_to_head": float(amax[r, 0, layer, head]),
                             "argmax_head_to_dep": float(amax[r, 1, layer, head]),
                             "control_accuracy": float(ctl_acc[r, layer, head]) if ctl_acc is not None else None,
                             "control_position_only": float(ctl_floor[r]) if ctl_floor is not None else None,
                             "selectivity": float(selectivity(acc[r, layer, head], ctl_acc[r, layer, head],
                                                              ph.floor_accuracy[r], ctl_floor[r]))
                             if ctl_acc is not None else None})
        flat = np.where(np.isnan(acc[r]), -1, acc[r]).ravel()
        best = int(np.argmax(flat))  # ties: lowest layer, then head
        layer, head = divmod(best, n_heads)
        low, high = ph.ci(r, best)
        d, al, ah = np.unravel_index(int(np.nanargmax(np.where(np.isnan(amax[r]), -1, amax[r]))), amax[r].shape)
        same = amax[r, :, layer, head]
        c_acc = float(ctl_acc[r, layer, head]) if ctl_acc is not None else float("nan")
        c_floor = float(ctl_floor[r]) if ctl_floor is not None else float("nan")
        row = {"relation": rel, "count": int(ph.counts[r]), "head": head_name(layer, head),
               "accuracy": float(acc[r, layer, head]), "ci_low": low, "ci_high": high,
               "position_only": float(ph.floor_accuracy[r]),
               "gain": float(acc[r, layer, head] - ph.floor_accuracy[r]),
               "argmax_accuracy_same_head": float(np.nanmax(same)),
               "argmax_head": head_name(int(al), int(ah)), "argmax_direction": DIRECTIONS[int(d)],
               "argmax_accuracy": float(amax[r, d, al, ah]),
               "control_accuracy": c_acc, "control_position_only": c_floor,
               "selectivity": float(selectivity(acc[r, layer, head], c_acc, ph.floor_accuracy[r], c_floor)),
               "selectivity_raw": float(acc[r, layer, head]) - c_acc}
        if rel == POOLED or (ph.counts[r] >= min_count and base_relation(rel) not in ("root", "punct")):
            rows.append(row)
    rows.sort(key=lambda x: (x["relation"] != POOLED, -x["count"]))
    return rows, full


def _write_label(label: LabelScores, out: Path, figures: bool, results: dict[str, Any],
                 look: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Write the label probes' table (and figure: ``look`` = subject and format); their summary goes into
    ``results["label"]``."""
    rows, full, acc = label_rows(label.correct, label.total, label.n_heads)
    facts = {"n_layers": label.n_layers, "n_heads": label.n_heads, "n_labels": label.n_labels,
             "train_arcs_used": label.train_arcs_used, "train_arcs_seen": label.train_arcs_seen}
    paths = write_label(rows, full, acc, facts, out, figures, **(look or {}))
    results["label"] = {"top": rows, "position_only": float(acc[-1]), "n_labels": label.n_labels,
                        "train_arcs_used": label.train_arcs_used, "train_arcs_seen": label.train_arcs_seen}
    return paths


def _per_head_figure_data(ph: PerHeadScores, ctl: PerHeadScores | None
                          ) -> tuple[npt.NDArray[np.float64], float, npt.NDArray[np.float64] | None]:
    """``(accuracy (L, H), position-only accuracy, selectivity (L, H) or None)`` of the per-head probes on ALL."""
    i = ph.relations.index(POOLED)
    sel = None
    if ctl is not None and POOLED in ctl.relations:
        j = ctl.relations.index(POOLED)
        sel = selectivity(ph.accuracy[i], ctl.accuracy[j], ph.floor_accuracy[i], ctl.floor_accuracy[j])
    return ph.accuracy[i], float(ph.floor_accuracy[i]), sel


# ---------------------------------------------------------------------------------- from a model and treebanks
class _Stream:
    """A re-iterable ``(Sentence, WordAttention)`` stream: each pass runs the extractor again.

    After a whole pass, :meth:`inputs` says what the extractor skipped, truncated or ran in windows in it.
    """

    def __init__(self, extractor: Any, sentences: list[Sentence], name: str | None = None) -> None:
        self.extractor = extractor
        self.sentences = sentences
        self.name = name
        self.extraction: dict[str, list[str]] = {}

    def __iter__(self) -> Iterator[Pair]:
        return self._pass()

    def _pass(self) -> Iterator[Pair]:
        report = self.extractor.report
        before = {key: len(getattr(report, key)) for key in ("skipped", "truncated", "windowed")}
        yield from self.extractor.iter_attention(self.sentences)
        self.extraction = {key: list(getattr(report, key)[n:]) for key, n in before.items()}

    def __len__(self) -> int:
        return len(self.sentences)

    def inputs(self) -> dict[str, Any]:
        """This split's ``inputs`` entry (of the last whole pass)."""
        ids = self.extraction
        truncated = ids.get("truncated", [])
        skipped = ids.get("skipped", [])
        return inputs_record(len(self.sentences), len(self.sentences) - len(skipped) - len(truncated),
                             skipped=skipped, truncated=truncated, windowed=ids.get("windowed", []),
                             max_tokens=self.extractor.max_tokens, data=self.name)


class _Limited:
    """The first ``n`` pairs of a re-iterable stream (``None``: all of them)."""

    def __init__(self, pairs: Any, n: int | None, name: str | None = None) -> None:
        self.pairs, self.n, self.name = pairs, n, name

    def __iter__(self) -> Iterator[Pair]:
        return iter(self.pairs) if self.n is None else itertools.islice(iter(self.pairs), self.n)

    def __len__(self) -> int:
        return len(self.pairs) if self.n is None else min(len(self.pairs), self.n)

    def inputs(self) -> dict[str, Any]:
        """This split's ``inputs`` entry, from the report of the store's extraction."""
        report = getattr(self.pairs, "report", {}) or {}
        skipped, truncated = list(report.get("skipped", ())), list(report.get("truncated", ()))
        return inputs_record(len(self) + len(skipped), len(self) - len(truncated), skipped=skipped,
                             truncated=truncated, windowed=list(report.get("windowed", ())),
                             max_tokens=(getattr(self.pairs, "info", {}) or {}).get("max_tokens"), data=self.name)


def probe(
    model: Any = None,
    train_data: str | Path | None = None,
    eval_data: str | Path | None = None,
    *,
    train_store: str | Path | None = None,
    eval_store: str | Path | None = None,
    kinds: Sequence[str] = ("all",),
    vectors: str | Path | None = None,
    epochs: int = 1,
    control: bool = True,
    random_init: bool = True,
    max_train: int | None = None,
    max_eval: int | None = None,
    limit: int | None = None,
    min_count: int = 100,
    batch_size: int = 32,
    device: str | None = None,
    on_long: str = "skip",
    seed: int = 0,
    progress: bool = True,
) -> ProbeRun:
    """Train probes that read attention on ``train_data`` and score them on ``eval_data`` (Clark et al. 2019 §5).

    Args:
        model: a model folder, ``package:NAME`` or hub name, or an
            :class:`~probes.extraction.extractor.AttentionExtractor` (None: read attention stores only).
        train_data, eval_data: a treebank file or ``ud:TREEBANK:SPLIT`` spec, run through ``model``.
        train_store, eval_store: attention stores to read instead of running the model.
        kinds: probes to run (:data:`PROBE_KINDS` or ``all``).
        vectors: GloVe-format word vectors for attn+emb / distances+emb (default: the model's
            input embeddings, mean-pooled over subwords).
        epochs: passes over the training data.
        control: train control-task twins and report selectivity (Hewitt & Liang 2019).
        random_init: add Attn+Emb on a randomly initialised copy of the model (needs ``model`` and treebanks).
        max_train, max_eval, limit: use only the first N sentences of each split (``limit``: of both).
        min_count: least words for a relation to be listed.
        batch_size, device: how the model runs (``device`` also trains the probes).
        on_long: ``skip``, ``truncate`` or ``window``: sentences over the model's maximum.
        seed: seed of probes, control task and random-init model.
        progress: progress bars on stderr.
    """
    kinds = parse_kinds(kinds)
    check_run_options(batch_size=batch_size, device=device, on_long=on_long, limit=limit)
    max_train, max_eval = (limit if n is None else n for n in (max_train, max_eval))
    _check_sources(model, train_data, eval_data, train_store, eval_store)
    record: dict[str, Any] = {"command": "probes probe", "invocation": invocation(), "data": {},
                              "options": {"batch_size": batch_size, "max_train": max_train, "max_eval": max_eval}}
    timings: dict[str, float] = {}
    extractor = None
    if model is not None:
        t0 = time.perf_counter()
        extractor = _extractor(model, batch_size=batch_size, device=device, on_long=on_long)
        timings["model_load_s"] = time.perf_counter() - t0
        record.update(model=str(model) if isinstance(model, (str, Path)) else extractor.name_or_path,
                      extractor=extractor.info())
    streams: dict[str, Any] = {}
    sentences: dict[str, list[Sentence]] = {}
    for split, spec, store, limit in (("train", train_data, train_store, max_train),
                                      ("eval", eval_data, eval_store, max_eval)):
        streams[split], record["data"][split], read = _open_split(extractor, spec, store, limit, split)
        if read is not None:
            sentences[split] = read
        else:
            record.setdefault("model", record["data"][split]["info"].get("model"))
    emb = _static_vectors(kinds, vectors, extractor)
    ctl = None
    if control:
        ctl = ControlTask(random_state=seed).fit(sentences.get("train") or (s for s, _ in streams["train"]))
    rand_streams = None
    if random_init and "attn+emb" in kinds:
        rand_streams, record["random_init"] = _random_init_streams(extractor, sentences, batch_size=batch_size,
                                                                   device=device, seed=seed)
    record["timings_setup"] = timings
    run = run_probes(streams["train"], streams["eval"], kinds=kinds, vectors=emb, control=ctl,
                     random_init=rand_streams, epochs=epochs, device=device, random_state=seed,
                     min_count=min_count, record=record, progress=progress)
    return dataclasses.replace(run, record={**run.record, "inputs": {k: v.inputs() for k, v in streams.items()}})


def _check_sources(model: Any, train_data: Any, eval_data: Any, train_store: Any, eval_store: Any) -> None:
    """Each split needs a model and a treebank, or a store."""
    if train_store is None and (model is None or train_data is None):
        raise ConfigError("give --model and --train (run the model), or --store-train (read stored attention)")
    if eval_store is None and (model is None or eval_data is None):
        raise ConfigError("give --model and --eval (run the model), or --store-eval (read stored attention)")


def _extractor(model: Any, *, batch_size: int, device: str | None, on_long: str = "skip") -> Any:
    """``model`` itself when it is an extractor, else one loaded from its name."""
    if not isinstance(model, (str, Path)):
        return model
    return load_extractor(model, batch_size=batch_size, device=device, progress=False, on_long=on_long)


def _open_split(extractor: Any, spec: str | Path | None, store: str | Path | None, limit: int | None, split: str
                ) -> tuple[Any, dict[str, Any], list[Sentence] | None]:
    """``(pairs, record, sentences)`` of one split: a stored one (sentences None) or a treebank run live."""
    if store is not None:
        st = open_attention_store(store, f"--store-{split}")
        return (_Limited(st, limit, Path(store).name),
                {"store": str(Path(store).resolve()), "info": dict(getattr(st, "info", {}) or {})}, None)
    path, sents = read_sentences(str(spec), limit)
    return _Stream(extractor, sents, data_name(spec)), data_record(str(spec), path, len(sents)), sents


def _static_vectors(kinds: Sequence[str], vectors: str | Path | None, extractor: Any) -> StaticVectors | None:
    """Word vectors for attn+emb / distances+emb: a GloVe file, else the model's input embeddings."""
    if not any(k in kinds for k in ("attn+emb", "distances+emb")):
        return None
    from probes.probing.embeddings import GloveVectors, ModelInputVectors

    if vectors is not None:
        return GloveVectors.load(vectors)
    if extractor is not None:
        return ModelInputVectors.from_model(extractor.model, extractor.tokenizer)
    raise ConfigError("attn+emb / distances+emb need --vectors FILE or --model (for its input embeddings)")


def _random_init_streams(extractor: Any, sentences: Mapping[str, list[Sentence]], *, batch_size: int,
                         device: str | None, seed: int) -> tuple[tuple[_Stream, _Stream] | None, Any]:
    """``(train, eval)`` streams of a randomly initialised copy of the model, and what the record says of it."""
    if extractor is None or "train" not in sentences or "eval" not in sentences:
        logger.warning("random-init control skipped: it needs --model with --train and --eval treebanks")
        return None, "skipped: needs --model with --train and --eval treebanks"
    from probes.extraction.extractor import AttentionExtractor
    from probes.probing.controls import random_init_copy

    rand_model, kept = random_init_copy(extractor.model, random_state=seed)
    rand_ex = AttentionExtractor(rand_model, extractor.tokenizer, batch_size=batch_size, device=device,
                                 on_long=extractor.on_long, progress=False)
    streams = (_Stream(rand_ex, sentences["train"]), _Stream(rand_ex, sentences["eval"]))
    return streams, {"kept_pretrained": kept, "reinitialised": "everything else (normal(0, initializer_range) "
                     "weights, zero biases, LayerNorm 1/0)", "seed": seed}
