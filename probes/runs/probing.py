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
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.analysis.split import SPLIT_RULE
from probes.corpora.types import Sentence
from probes.errors import ConfigError, InputError
from probes.extraction.attention import WordAttention
from probes.heads.naming import INDEXING_NOTE
from probes.heads.selection import SELECTION_MODES
from probes.probing.controls import CONTROL_KINDS, ControlTask, OffsetControlTask, make_control
from probes.probing.embeddings import StaticVectors
from probes.probing.label import PerHeadLabelProbe
from probes.probing.parser_scores import ParserScorer
from probes.probing.per_head import POOLED, PerHeadScores
from probes.probing.stats import INTERVAL_NOTE
from probes.probing.summaries import per_head_full, per_head_rows
from probes.probing.train import SHUFFLE_BUFFER, fit_together
from probes.reports.inputs import inputs_lines
from probes.reports.probing import (
    PARSER_COLUMNS,
    PER_HEAD_COLUMNS,
    comparison_correction,
    format_summary,
    label_rows,
    write_probes,
)
from probes.reports.writer import write_output
from probes.results import Result
from probes.run_record import RunRecord
from probes.runs.inputs import ExtractionOptions, check_extraction, check_run_options, model_source
from probes.runs.probing_inputs import check_sources, open_inputs, random_init_streams, static_vectors
from probes.runs.probing_passes import Evaluation, SeedRun
from probes.runs.record import invocation, versions

__all__ = ["PROBE_KINDS", "SELECTION_MODES", "ParserRow", "ParserScorer", "LabelScores", "ProbeRun", "parse_kinds",
           "run_probes", "probe", "PARSER_COLUMNS", "PER_HEAD_COLUMNS", "CONTROL_KINDS"]

Pair = tuple[Sentence, WordAttention]
Rows = list[dict[str, Any]]

#: What ``--probe`` accepts (``all`` = every one of them).
PROBE_KINDS: tuple[str, ...] = ("per-head", "label", "attn", "attn+emb", "distances+emb", "right-branching")

_TRAINING = ("Adam, summed cross-entropy per sentence; parsers: lr 0.002, 1 sentence per step (Clark et al. "
             "2019 §5.3); per-head: lr 0.05, 8 sentences per step; each seed reads the training stream through "
             f"its own seeded shuffle buffer of {SHUFFLE_BUFFER} sentences (Clark et al.: file order)")
_DEFINITIONS = {
    "uas": "argmax per word over ROOT + words (self allowed), words with gold relation punct excluded",
    "uuas": "undirected maximum spanning tree over non-punct words, weight log p(j|i) + log p(i|j); "
            "gold = undirected arcs between non-punct words",
    "vector_alignment": "paper formula: candidate c paired with word c's vector (the released code's "
                        "one-word shift is not reproduced)",
    "seeds": "seed k = random_state + k sets the probes' initialisation, their training order (shuffle buffer), "
             "the control task's type mapping and the random-init model; tables give the mean (and sd) over seeds",
    "intervals": INTERVAL_NOTE,
}


@dataclass(frozen=True)
class ParserRow(Result):
    """One parser's held-out scores (fractions; UAS without punctuation, UUAS by spanning tree).

    Means over seeds (``*_sd``: their standard deviation); intervals: bootstrap over sentences of the
    seed mean; ``selectivity`` = UAS - control UAS with a paired interval.
    """

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
    uas_sd: float = 0.0
    uuas_sd: float = 0.0
    control_uas_sd: float = float("nan")
    selectivity_sd: float = float("nan")
    selectivity_ci_low: float = float("nan")
    selectivity_ci_high: float = float("nan")
    n_seeds: int = 1


@dataclass(frozen=True)
class LabelScores(Result):
    """Held-out counts of the per-head label probes (the position-only probe last).

    Attributes:
        correct: ``(n_sentences, L * H + 1)`` correctly labelled gold arcs per probe, on the report data.
        total: ``(n_sentences,)`` gold arcs.
        n_layers, n_heads: the model's shape.
        n_labels: relation labels the probes choose from.
        train_arcs_used, train_arcs_seen: training arcs kept by the reservoir sample, and seen.
        select_correct, select_total: the same on the selection data (heads are ranked there).
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"correct": "N n_layers*n_heads+1", "total": "N", "select_correct": "S n_layers*n_heads+1",
               "select_total": "S"}

    correct: npt.NDArray[np.int64]
    total: npt.NDArray[np.int64]
    n_layers: int
    n_heads: int
    n_labels: int
    train_arcs_used: int
    train_arcs_seen: int
    select_correct: npt.NDArray[np.int64] | None = None
    select_total: npt.NDArray[np.int64] | None = None

    @classmethod
    def from_scorer(cls, probe: PerHeadLabelProbe, scorer: Any, select: Any = None) -> LabelScores:
        """The counts of ``scorer`` (and ``select``: on the selection data) with the facts of its fitted ``probe``."""
        correct, total = scorer.compute()
        sel_c, sel_t = select.compute() if select is not None else (correct, total)
        return cls(correct, total, int(probe.n_layers_), int(probe.n_heads_), len(probe.classes_),
                   int(probe.n_arcs_used_), int(probe.n_arcs_seen_), sel_c, sel_t)


@dataclass(frozen=True)
class ProbeRun(Result):
    """What one probing run measured; tables, figures and ``run.json`` are made from it on :meth:`write`.

    Attributes:
        kinds: the probes run (:data:`PROBE_KINDS`).
        parsers: held-out UAS / UUAS of each parser (mean over seeds), best first.
        control: whether control-task twins were trained (selectivity columns).
        per_head: per seed, the per-head relation probes' scores on the report data.
        per_head_control: per seed, the control-task twins' scores on the report data.
        per_head_select: per seed, the per-head probes' scores on the data their heads are chosen on.
        attn_weights: ``(2, L, H)`` weight of each map in the Attn parser (first seed), or None.
        label: the per-head label probes' counts (first seed), or None.
        comparisons: paired tests between parsers (rows of :func:`compare_parsers`).
        selection: where per-head heads were chosen: ``mode`` (split / separate / same), ``selected_on``,
            ``reported_on`` (and ``rule`` for split).
        seeds: the seeds run.
        record, facts, min_count: as before (``run.json``; least words for a listed relation).
    """

    #: Array shapes checked on load (probes.result_checks).
    _shapes = {"attn_weights": "2 L H"}

    kinds: tuple[str, ...]
    parsers: tuple[ParserRow, ...]
    control: bool
    per_head: tuple[PerHeadScores, ...] = ()
    per_head_control: tuple[PerHeadScores, ...] = ()
    per_head_select: tuple[PerHeadScores, ...] = ()
    attn_weights: npt.NDArray[np.float32] | None = None
    label: LabelScores | None = None
    comparisons: tuple[dict[str, Any], ...] = ()  # Any: rows of compare_parsers (parsers.csv), names and numbers
    selection: dict[str, str] = field(default_factory=dict)
    seeds: tuple[int, ...] = (0,)
    record: RunRecord = field(default_factory=RunRecord)
    facts: dict[str, Any] = field(default_factory=dict)  # Any: run.json's probes, counts, options, timings (nested JSON)
    min_count: int = 100

    def parser_rows(self) -> Rows:
        """One dict per parser (``parsers.csv``)."""
        return [asdict(r) for r in self.parsers]

    def per_head_rows(self) -> tuple[Rows, Rows]:
        """``(listed, full)``: the best head per listed relation (``per_head.csv``) and every relation x head."""
        if not self.per_head:
            return [], []
        select = self.per_head_select or self.per_head
        rows, _ = per_head_rows(select, self.per_head, self.per_head_control or None, min_count=self.min_count,
                                same_data=self.selection.get("mode") == "same")
        return rows, per_head_full(self.per_head, select, self.per_head_control or None)

    def significance(self) -> dict[str, Any]:
        """``run.json``'s ``significance``: the correction of each table with tests."""
        out: dict[str, Any] = {}
        if self.comparisons:
            out["comparisons"] = comparison_correction(self.comparisons).as_dict()
        if self.per_head:
            select = self.per_head_select or self.per_head
            out["per_head"] = per_head_rows(select, self.per_head, self.per_head_control or None,
                                            min_count=self.min_count,
                                            same_data=self.selection.get("mode") == "same")[1].as_dict()
        return out

    def format(self) -> str:
        """The terminal summary: parsers, comparisons, per-head probes, timings."""
        listed = self.per_head_rows()[0] if self.per_head else None
        return format_summary(self.parser_rows(), listed, self.facts["timings"], comparisons=list(self.comparisons),
                              selection=self.selection, n_seeds=len(self.seeds))

    def notes(self) -> str:
        """What happened to the inputs, one line per split: sentences used and, by id, every one skipped,
        truncated or run in windows (the console summary; also in ``parsers.md`` / ``per_head.md``)."""
        return "\n".join(f"Inputs, {line}" for line in inputs_lines(RunRecord.of(self.record)))

    def summary(self) -> str:
        """Same as :meth:`notes`."""
        return self.notes()

    def subject(self) -> str:
        """Model and evaluation data, as the figures' titles name them."""
        model = str(self.record.details.model or "model")
        model = Path(model).name if Path(model).is_absolute() else model
        data = (self.record.data or {}).get("eval") or {}
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
        return write_output(out_dir, self.record.command, partial(write_probes, run=self), figures=figures,
                            figure_format=figure_format, overwrite=overwrite)

    def per_head_figure_data(self) -> tuple[npt.NDArray[np.float64], float, npt.NDArray[np.float64] | None]:
        """``(accuracy (L, H), position-only accuracy, selectivity (L, H) or None)`` of the per-head probes on ALL
        (report data, mean over seeds; selectivity = accuracy - control accuracy)."""
        acc = np.mean([s.accuracy[s.relations.index(POOLED)] for s in self.per_head], axis=0)
        floor = float(np.mean([s.floor_accuracy[s.relations.index(POOLED)] for s in self.per_head]))
        sel = None
        if self.per_head_control and all(POOLED in s.relations for s in self.per_head_control):
            sel = acc - np.mean([s.accuracy[s.relations.index(POOLED)] for s in self.per_head_control], axis=0)
        return acc, floor, sel

    def to_pandas(self, table: str = "parsers") -> Any:
        """One of the run's tables as a ``pandas.DataFrame``.

        Args:
            table: ``parsers`` (one row per parser), ``comparisons`` (paired tests between parsers),
                ``per_head`` (best head per listed relation), ``per_head_scores`` (every relation x head)
                or ``label`` (every head's label probe).
        """
        import pandas as pd

        if table == "parsers":
            return pd.DataFrame(self.parser_rows(), columns=list(PARSER_COLUMNS))
        if table == "comparisons":
            return pd.DataFrame(list(self.comparisons))
        if table in ("per_head", "per_head_scores"):
            listed, full = self.per_head_rows()
            return pd.DataFrame(listed if table == "per_head" else full)
        if table == "label":
            return pd.DataFrame([] if self.label is None else label_rows(
                self.label.correct, self.label.total, self.label.n_heads,
                select=(self.label.select_correct, self.label.select_total))[1])
        raise ConfigError("table: expected one of parsers, comparisons, per_head, per_head_scores, label, "
                          f"found {table!r}")


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


def _selection(select_on: Any, select_name: str | None, eval_name: str | None) -> dict[str, Any]:
    """The ``selection`` record of a run: mode, where heads are chosen, where they are reported."""
    reported = eval_name or "evaluation data"
    if select_on is None:
        return {"mode": "split", "selected_on": f"{reported} (selection half)",
                "reported_on": f"{reported} (report half)", "rule": SPLIT_RULE}
    if isinstance(select_on, str) and select_on == "same":
        return {"mode": "same", "selected_on": reported, "reported_on": reported}
    return {"mode": "separate", "selected_on": select_name or "selection data", "reported_on": reported}


def run_probes(
    train_pairs: Iterable[Pair],
    eval_pairs: Iterable[Pair],
    *,
    kinds: Sequence[str] = ("all",),
    vectors: StaticVectors | None = None,
    control: ControlTask | OffsetControlTask | None = None,
    random_init: Any = None,
    epochs: int = 1,
    device: str | None = None,
    random_state: int = 0,
    seeds: int = 3,
    select_on: Any = None,
    select_name: str | None = None,
    min_count: int = 100,
    record: RunRecord | Mapping[str, Any] | None = None,
    progress: bool = True,
) -> ProbeRun:
    """Train probes on ``train_pairs`` and score them on ``eval_pairs``; nothing is written.

    Args:
        train_pairs, eval_pairs: ``(Sentence, WordAttention)`` streams (re-iterable when ``epochs > 1``).
        kinds: probes to run (:data:`PROBE_KINDS` or ``all``).
        vectors: static vectors for ``attn+emb`` and ``distances+emb``.
        control: a (fitted) control task; each trainable probe then gets a twin trained and scored on
            control heads, and selectivity is reported. Seed ``k`` uses ``control.with_seed(control.random_state + k)``.
        random_init: the "Attn+Emb, random-init model" row: a callable ``seed -> (train, eval)`` streams of a
            model re-initialised with that seed, or one ``(train, eval)`` pair used for every seed.
        epochs: passes over the training stream.
        device: torch device for training.
        random_state: seed of the first run; seed ``k`` is ``random_state + k``.
        seeds: how many seeds (each trains every probe once more, in the same pass over the stream).
        select_on: where the per-head and label probes' best heads are chosen: None (default: the evaluation
            sentences split in halves by :func:`probes.analysis.split.half_of`, chosen on one, reported on the
            other), ``"same"`` (chosen and reported on all the evaluation data: optimistic, never tested) or
            another ``(Sentence, WordAttention)`` stream (chosen there, reported on all of ``eval_pairs``).
        select_name: the name of a separate selection stream, for the tables.
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
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise ConfigError(f"seeds: expected an int >= 1, found {seeds!r}")
    seed_list = [random_state + k for k in range(seeds)]
    controls = [control.with_seed(control.random_state + k) if control is not None else None for k in range(seeds)]
    runs = [SeedRun(kinds, vectors, s, c, device, progress) for s, c in zip(seed_list, controls)]
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    trained = [t for run in runs for t in run.trained]
    if trained:
        fit_together([p for _, p, _, _ in trained], train_pairs, transforms=[t for _, _, t, _ in trained],
                     orders=[o for _, _, _, o in trained], epochs=epochs, progress=progress, desc="train")
    timings["train_s"] = time.perf_counter() - t0  # includes extraction when streaming from a model
    t0, given = time.perf_counter(), RunRecord.of(record)  # the record's fields given by the caller
    selection = _selection(select_on, select_name, given.details.probe.eval_name)
    ev = Evaluation(kinds, runs, selection["mode"])
    n_eval = ev.run(eval_pairs, progress)
    if selection["mode"] == "separate":
        ev.run_selection(select_on, progress)
    timings["eval_s"] = time.perf_counter() - t0
    if random_init is not None and vectors is not None:  # vectors is never None here: checked above
        t0 = time.perf_counter()
        ev.random_init(vectors, random_init, epochs, device, progress)
        timings["random_init_s"] = time.perf_counter() - t0
    options = {**given.options, "epochs": epochs, "device": device,
               "random_state": random_state, "seeds": seed_list, "min_count": min_count, "training": _TRAINING,
               "vectors": vectors.describe() if vectors is not None else None,
               "control_task": [c.describe() for c in controls if c is not None] or None, **_DEFINITIONS}
    facts = _facts(kinds, runs[0], n_eval, options, timings)
    return _probe_run(ev, kinds=tuple(kinds), control=control is not None, selection=selection,
                      seeds=tuple(seed_list), record=given, facts=facts, min_count=min_count)


def _probe_run(evaluation: Evaluation, **fields: Any) -> ProbeRun:
    """The run: the evaluation's parts (parser rows, per-head and label scores ...) and ``fields``."""
    parts = evaluation.parts()
    label = parts.pop("label")
    return ProbeRun(parsers=tuple(ParserRow(**row) for row in parts.pop("parsers")),
                    label=None if label is None else LabelScores.from_scorer(*label), **parts, **fields)


def _facts(kinds: Sequence[str], first: SeedRun, n_eval: int, options: dict[str, Any],
           timings: dict[str, float]) -> dict[str, Any]:
    """What a run adds to ``run.json``: probes, counts (training counts of the first seed), options, timings."""
    return {"probes": list(kinds),
            "counts": {"eval_sentences": n_eval,
                       "train_sentences": {name: int(getattr(p, "n_sentences_seen_", 0)) for name, p, _, _ in first.trained},
                       "train_skipped": {name: int(getattr(p, "n_skipped_", 0)) for name, p, _, _ in first.trained}},
            "options": options, "indexing": INDEXING_NOTE, "timings": timings, "versions": versions()}


# ---------------------------------------------------------------------------------- from a model and treebanks
def _vectors_file(kinds: Sequence[str], vectors: str | Path | None) -> Any:
    """The word vectors of a GloVe file given as ``vectors`` (None without one), read before the model loads."""
    if vectors is None:
        return None
    if not Path(vectors).is_file():
        raise InputError(f"{vectors}: no such file (--vectors: GloVe-format word vectors)")
    return static_vectors(kinds, vectors, None)


def probe(
    model: Any = None,
    train_data: str | Path | None = None,
    eval_data: str | Path | None = None,
    *,
    train_store: str | Path | None = None,
    eval_store: str | Path | None = None,
    select_on: str | Path | None = None,
    select_store: str | Path | None = None,
    kinds: Sequence[str] = ("all",),
    vectors: str | Path | None = None,
    epochs: int = 1,
    control: bool | str = True,
    random_init: bool = True,
    max_train: int | None = None,
    max_eval: int | None = None,
    limit: int | None = None,
    min_count: int = 100,
    batch_size: int = 32,
    device: str | None = None,
    on_long: str = "skip",
    seed: int = 0,
    seeds: int = 3,
    progress: bool = True,
    extraction: ExtractionOptions | None = None,
) -> ProbeRun:
    """Train probes that read attention on ``train_data`` and score them on ``eval_data`` (Clark et al. 2019 §5).

    Args:
        model: a model folder, ``package:NAME`` or hub name, or an
            :class:`~probes.extraction.extractor.AttentionExtractor` (None: read attention stores only).
        train_data, eval_data: a treebank file or ``ud:TREEBANK:SPLIT`` spec, run through ``model``.
        train_store, eval_store: attention stores to read instead of running the model.
        select_on, select_store: where the per-head and label probes choose their best heads: None (default:
            the evaluation sentences split in halves, chosen on one, reported on the other), ``"same"``
            (Clark et al.'s same-data choice: optimistic, never tested), a treebank run through the model,
            or (``select_store``) an attention store.
        kinds: probes to run (:data:`PROBE_KINDS` or ``all``).
        vectors: GloVe-format word vectors for attn+emb / distances+emb (default: the model's
            input embeddings, mean-pooled over subwords).
        epochs: passes over the training data.
        control: the control task (``True`` or ``"hewitt-liang"``: Hewitt & Liang 2019; ``"offset"``: the
            offset variant; ``False``: none); control twins are trained and selectivity reported.
        random_init: add Attn+Emb on a randomly initialised copy of the model (needs ``model`` and treebanks).
        max_train, max_eval, limit: use only the first N sentences of each split (``limit``: of both).
        min_count: least words for a relation to be listed.
        batch_size, device, extraction: how the model runs (``device`` also trains the probes), ExtractionOptions.
        on_long: ``skip``, ``truncate`` or ``window``: sentences over the model's maximum.
        seed, seeds: seeds ``seed .. seed + seeds - 1``, each for the probes' initialisation and training
            order, the control task's mapping and the random-init model.
        progress: progress bars on stderr.
    """
    kinds = parse_kinds(kinds)
    check_run_options(limit=limit)
    settings = check_extraction(extraction, batch_size=batch_size, device=device, on_long=on_long, progress=False)
    control_kind = _control_kind(control)
    max_train, max_eval = (limit if n is None else n for n in (max_train, max_eval))
    check_sources(model, train_data, eval_data, train_store, eval_store)
    fields: dict[str, Any] = {"command": "probes probe", "invocation": invocation(), "data": {},
                              "options": {"batch_size": batch_size, "max_train": max_train, "max_eval": max_eval}}
    source = model_source(model, settings) if isinstance(model, (str, Path)) else model  # resolved once
    emb = _vectors_file(kinds, vectors)  # a file: read before the model loads
    extractor, streams, sentences = open_inputs(source, fields, splits=(
        ("train", train_data, train_store, max_train), ("eval", eval_data, eval_store, max_eval),
        ("select", None if select_on == "same" else select_on, select_store, max_eval)), progress=progress)
    emb = emb if vectors is not None else static_vectors(kinds, vectors, extractor)
    ctl = None
    if control_kind is not None:
        ctl = make_control(control_kind, seed, sentences.get("train") or (s for s, _ in streams["train"]))
    rand_streams = None
    if random_init and "attn+emb" in kinds:
        rand_streams, fields["random_init"] = random_init_streams(extractor, sentences, settings=settings)
    fields["eval_name"] = getattr(streams["eval"], "name", None)
    chosen = streams.get("select") if "select" in streams else ("same" if select_on == "same" else None)
    run = run_probes(streams["train"], streams["eval"], kinds=kinds, vectors=emb, control=ctl,
                     random_init=rand_streams, epochs=epochs, device=device, random_state=seed, seeds=seeds,
                     select_on=chosen, select_name=getattr(streams.get("select"), "name", None),
                     min_count=min_count, record=fields, progress=progress)
    return dataclasses.replace(run, record=run.record.updated(inputs={k: v.inputs() for k, v in streams.items()}))


def _control_kind(control: bool | str | None) -> str | None:
    """``control`` as a kind of :data:`CONTROL_KINDS` (True: Hewitt & Liang's), or None (no control)."""
    kind = "hewitt-liang" if control is True else (control or None)
    if kind is not None and kind not in CONTROL_KINDS:
        raise ConfigError(f"control: expected one of {', '.join(CONTROL_KINDS)}, found {control!r}")
    return kind
