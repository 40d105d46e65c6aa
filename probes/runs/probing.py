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
from probes.analysis.split import SPLIT_RULE, Half
from probes.corpora.types import Sentence
from probes.errors import ConfigError
from probes.extraction.attention import WordAttention
from probes.heads.inference import ALPHA, CORRECTION, Correction
from probes.heads.naming import INDEXING_NOTE
from probes.heads.selection import SELECTION_MODES
from probes.probing.controls import CONTROL_KINDS, ControlTask, OffsetControlTask, make_control
from probes.probing.embeddings import StaticVectors
from probes.probing.label import LabelScorer, PerHeadLabelProbe
from probes.probing.parser_scores import ParserScorer
from probes.probing.parsers import AttnEmbParser, AttnParser, DistancesEmbParser, RightBranching
from probes.probing.per_head import POOLED, PerHeadEvaluator, PerHeadProbe, PerHeadScores
from probes.probing.stats import INTERVAL_NOTE
from probes.probing.summaries import compare_parsers, parser_summary, per_head_full, per_head_rows
from probes.probing.train import SHUFFLE_BUFFER, fit_together, iter_pairs
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

__all__ = ["PROBE_KINDS", "SELECTION_MODES", "ParserRow", "ParserScorer", "LabelScores", "ProbeRun", "parse_kinds",
           "run_probes", "probe", "PARSER_COLUMNS", "PER_HEAD_COLUMNS", "CONTROL_KINDS"]

logger = logging.getLogger("probes")

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

    kinds: tuple[str, ...]
    parsers: tuple[ParserRow, ...]
    control: bool
    per_head: tuple[PerHeadScores, ...] = ()
    per_head_control: tuple[PerHeadScores, ...] = ()
    per_head_select: tuple[PerHeadScores, ...] = ()
    attn_weights: npt.NDArray[np.float32] | None = None
    label: LabelScores | None = None
    comparisons: tuple[dict[str, Any], ...] = ()
    selection: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = (0,)
    record: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
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
            out["comparisons"] = _comparison_correction(self).as_dict()
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
        seeds = {"seeds": list(self.seeds)}
        if self.parsers:
            results["parsers"] = self.parser_rows()
            results["comparisons"] = list(self.comparisons)
            correction = _comparison_correction(self) if self.comparisons else None
            paths.update(write_parsers(results["parsers"], out, self.control, inputs=inputs,
                                       comparisons=list(self.comparisons), correction=correction, **seeds))
        if self.per_head:
            rows, full = self.per_head_rows()
            results["per_head"] = {"listed": rows, "n_unseen_relation_words": self.per_head[0].n_unseen}
            correction = self.significance()["per_head"]
            paths.update(write_per_head(rows, full, out, inputs=inputs, selection=self.selection,
                                        correction=correction, **seeds))
            if figures:
                paths.update(per_head_figures(*_per_head_figure_data(self), out, where=_where(self.selection),
                                              **look))
            if self.attn_weights is not None and figures:
                paths.update(attn_weight_figure(self.attn_weights, out, **look))
        if self.label is not None:
            paths.update(_write_label(self.label, out, figures, results, look, self.selection))
        results.update(self.facts)
        results["selection"] = dict(self.selection)
        results["significance"] = self.significance()
        results["timings"] = {**self.facts["timings"], "writing_s": time.perf_counter() - t0}
        paths["run.json"] = write_record(results, out, paths.values())
        return paths

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


def _comparison_correction(run: ProbeRun) -> Correction:
    """The Holm correction of the run's comparison table."""
    tested = [r for r in run.comparisons if r.get("p_holm") == r.get("p_holm")]
    return Correction(CORRECTION, len(tested), ALPHA)


def _where(selection: Mapping[str, Any]) -> str:
    """Where the per-head numbers were measured, for figure titles."""
    mode = selection.get("mode")
    if mode == "same":
        return "heads chosen on the same data: optimistic"
    if mode == "split":
        return "report half of the evaluation data"
    return f"reported on {selection.get('reported_on')}"


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
    record: Mapping[str, Any] | None = None,
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
    runs = [_SeedRun(kinds, vectors, s, c, device, progress) for s, c in zip(seed_list, controls)]
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    trained = [t for run in runs for t in run.trained]
    if trained:
        fit_together([p for _, p, _, _ in trained], train_pairs, transforms=[t for _, _, t, _ in trained],
                     orders=[o for _, _, _, o in trained], epochs=epochs, progress=progress, desc="train")
    timings["train_s"] = time.perf_counter() - t0  # includes extraction when streaming from a model
    t0 = time.perf_counter()
    selection = _selection(select_on, select_name, (record or {}).get("eval_name"))
    ev = _Evaluation(kinds, runs, selection["mode"])
    n_eval = ev.run(eval_pairs, progress)
    if selection["mode"] == "separate":
        ev.run_selection(select_on, progress)
    timings["eval_s"] = time.perf_counter() - t0
    if random_init is not None:
        t0 = time.perf_counter()
        ev.random_init(vectors, random_init, epochs, device, progress)
        timings["random_init_s"] = time.perf_counter() - t0
    options = {**dict((record or {}).get("options", {})), "epochs": epochs, "device": device,
               "random_state": random_state, "seeds": seed_list, "min_count": min_count, "training": _TRAINING,
               "vectors": vectors.describe() if vectors is not None else None,
               "control_task": [c.describe() for c in controls] if control is not None else None, **_DEFINITIONS}
    facts = _facts(kinds, runs[0], n_eval, options, timings)
    return ev.result(kinds, control is not None, dict(record or {}), facts, min_count, selection, tuple(seed_list))


def _facts(kinds: Sequence[str], first: _SeedRun, n_eval: int, options: dict[str, Any],
           timings: dict[str, float]) -> dict[str, Any]:
    """What a run adds to ``run.json``: probes, counts (training counts of the first seed), options, timings."""
    return {"probes": list(kinds),
            "counts": {"eval_sentences": n_eval,
                       "train_sentences": {name: int(getattr(p, "n_sentences_seen_", 0)) for name, p, _, _ in first.trained},
                       "train_skipped": {name: int(getattr(p, "n_skipped_", 0)) for name, p, _, _ in first.trained}},
            "options": options, "indexing": INDEXING_NOTE, "timings": timings, "versions": versions()}


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


class _SeedRun:
    """The probes of one seed: ``trained`` = ``(name, probe, transform, order seed)`` (control twins included).

    The label probe trains with the first seed only (``label`` in ``probes`` of later seeds is dropped).
    """

    def __init__(self, kinds: Sequence[str], vectors: StaticVectors | None, seed: int, control: Any,
                 device: str | None, progress: bool) -> None:
        from sklearn.base import clone

        self.seed, self.control = seed, control
        common = {"epochs": 1, "random_state": seed, "device": device, "progress": False}
        self.probes = _make_probes(kinds, vectors, common, progress)
        self.trained: list[tuple[str, Any, Any, int]] = [(n, p, None, seed) for n, p in self.probes.items()]
        if control is not None:
            self.trained += [(f"{n} [control]", clone(p), control.relabel, seed) for n, p in self.probes.items()
                             if n != "label"]

    def twin(self, name: str) -> Any:
        """The control twin of probe ``name``."""
        return next(p for n, p, _, _ in self.trained if n == f"{name} [control]")


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


def _halves(make: Any, mode: str) -> tuple[Any, Any]:
    """``(selection, report)`` analyses: two :class:`Half` wrappers (mode split), else one analysis twice."""
    if mode == "split":
        return Half(make(), "select"), Half(make(), "report")
    one = make()
    return one, one


class _Evaluation:
    """Every scorer of a run's fitted probes (all seeds), fed in one pass over the evaluation stream."""

    def __init__(self, kinds: Sequence[str], runs: Sequence[_SeedRun], mode: str) -> None:
        self.runs, self.mode = runs, mode
        self.names = [n for n, _, t, _ in runs[0].trained if t is None and n not in ("per-head", "label")]
        self.rb = RightBranching().fit() if "right-branching" in kinds else None
        if self.rb is not None:
            self.names.append("right-branching")
        self.scorers: dict[str, list[ParserScorer]] = {}
        self.control_scorers: dict[str, list[ParserScorer]] = {}
        for run in runs:
            for name in self.names:
                parser = self.rb if name == "right-branching" else run.probes[name]
                self.scorers.setdefault(name, []).append(ParserScorer(parser))
                if run.control is not None and name != "right-branching":  # a fixed rule learns nothing: no control
                    self.control_scorers.setdefault(name, []).append(
                        ParserScorer(run.twin(name), run.control.relabel, uuas=False))
        self.per_head = [self._per_head(run) for run in runs] if "per-head" in kinds else []
        self.label = _halves(lambda: LabelScorer(runs[0].probes["label"]), mode) if "label" in kinds else None
        self.random_init_scorers: list[ParserScorer] = []
        self.random_init_parsers: list[Any] = []

    def _per_head(self, run: _SeedRun) -> dict[str, Any]:
        """A seed's per-head evaluators: task on the selection and report data, control on the report data."""
        probe = run.probes["per-head"]
        select, report = _halves(lambda: PerHeadEvaluator(probe), self.mode)
        out = {"select": select, "report": report, "control": None}
        if run.control is not None:
            ctl = _Relabelled(PerHeadEvaluator(run.twin("per-head")), run.control.relabel)
            out["control"] = Half(ctl, "report") if self.mode == "split" else ctl
        return out

    def analyses(self) -> dict[str, Any]:
        """Every scorer by name, as analyses for :func:`probes.analysis.driver.stream`."""
        out: dict[str, Any] = {}
        for name, scorers in self.scorers.items():
            out.update({f"{name}#{k}": s for k, s in enumerate(scorers)})
        for name, scorers in self.control_scorers.items():
            out.update({f"{name} [control]#{k}": s for k, s in enumerate(scorers)})
        for k, ev in enumerate(self.per_head):
            for part in ("select", "report", "control"):
                if ev[part] is not None and not (self.mode != "split" and part == "select"):
                    out[f"per-head {part}#{k}"] = ev[part]
        if self.label is not None:
            out["label report"] = self.label[1]
            if self.mode == "split":  # otherwise the selection side is the same scorer, or runs on its own stream
                out["label select"] = self.label[0]
        return out

    def run(self, eval_pairs: Iterable[Pair], progress: bool) -> int:
        """Feed every whole evaluation sentence to every scorer in one pass; returns how many there were."""
        done = stream(iter_pairs(eval_pairs, progress=progress, desc="evaluate"), self.analyses())
        return done.n_items - len(done.skipped)

    def run_selection(self, select_pairs: Iterable[Pair], progress: bool) -> None:
        """Mode separate: score the per-head and label probes on the selection stream (their heads are chosen there)."""
        analyses: dict[str, Any] = {}
        for k, (ev, run) in enumerate(zip(self.per_head, self.runs)):
            ev["select"] = analyses[f"per-head select#{k}"] = PerHeadEvaluator(run.probes["per-head"])
        if self.label is not None:
            self.label = (LabelScorer(self.runs[0].probes["label"]), self.label[1])
            analyses["label select"] = self.label[0]
        stream(iter_pairs(select_pairs, progress=progress, desc="evaluate (selection data)"), analyses)

    def random_init(self, vectors: StaticVectors, source: Any, epochs: int, device: str | None,
                    progress: bool) -> None:
        """Train and score Attn+Emb on attention of a randomly initialised model, once per seed."""
        for run in self.runs:
            train, evaluation = source(run.seed) if callable(source) else source
            parser = AttnEmbParser(vectors, epochs=1, random_state=run.seed, device=device, progress=False)
            fit_together([parser], train, orders=[run.seed], epochs=epochs, progress=progress,
                         desc=f"train (random-init model, seed {run.seed})")
            scorer = ParserScorer(parser)
            stream(iter_pairs(evaluation, progress=progress, desc="evaluate (random-init)"), {"random-init": scorer})
            self.random_init_scorers.append(scorer)
            self.random_init_parsers.append(parser)

    def result(self, kinds: Sequence[str], control: bool, record: dict[str, Any], facts: dict[str, Any],
               min_count: int, selection: dict[str, Any], seeds: tuple[int, ...]) -> ProbeRun:
        """The run: parser rows and comparisons, per-head and label scores, the Attn parser's map weights."""
        weights = self.runs[0].probes["Attn"].head_weights() if "Attn" in self.runs[0].probes else None
        label = None
        if self.label is not None:
            label = LabelScores.from_scorer(self.runs[0].probes["label"], self.label[1], self.label[0])
        task = {n: [s.unit_counts() for s in scorers] for n, scorers in self.scorers.items()}
        ctl = {n: [s.unit_counts() for s in scorers] for n, scorers in self.control_scorers.items()}
        if self.random_init_scorers:
            task[_RANDOM_INIT] = [s.unit_counts() for s in self.random_init_scorers]
        comparisons, _ = compare_parsers(task, ctl)
        per_head = tuple(ev["report"].compute() for ev in self.per_head)
        select = tuple(ev["select"].compute() for ev in self.per_head) if self.mode != "same" else ()
        per_head_control = tuple(ev["control"].compute() for ev in self.per_head if ev["control"] is not None)
        return ProbeRun(
            kinds=tuple(kinds), parsers=tuple(self._parser_rows(task, ctl)), control=control, per_head=per_head,
            per_head_control=per_head_control, per_head_select=select, attn_weights=weights, label=label,
            comparisons=tuple(comparisons), selection=selection, seeds=seeds, record=record, facts=facts,
            min_count=min_count)

    def _parser_rows(self, task: Mapping[str, Any], ctl: Mapping[str, Any]) -> list[ParserRow]:
        rows = []
        for name, units in task.items():
            parser = (self.random_init_parsers[0] if name == _RANDOM_INIT else
                      self.rb if name == "right-branching" else self.runs[0].probes[name])
            s = parser_summary(units, ctl.get(name))
            rows.append(ParserRow(
                probe=name, train_sentences=int(getattr(parser, "n_sentences_seen_", 0)),
                attention_from="randomly initialised model" if name == _RANDOM_INIT else
                ("none" if name in ("right-branching", "Distances+Emb") else "the model"), **s))
        return sorted(rows, key=lambda r: -r.uas)


#: Name of the random-init row.
_RANDOM_INIT = "Attn+Emb, random-init model"


def _write_label(label: LabelScores, out: Path, figures: bool, results: dict[str, Any],
                 look: Mapping[str, str] | None = None, selection: Mapping[str, Any] | None = None
                 ) -> dict[str, Path]:
    """Write the label probes' table (and figure: ``look`` = subject and format); their summary goes into
    ``results["label"]``."""
    rows, full, acc = label_rows(label.correct, label.total, label.n_heads,
                                 select=(label.select_correct, label.select_total))
    facts = {"n_layers": label.n_layers, "n_heads": label.n_heads, "n_labels": label.n_labels,
             "train_arcs_used": label.train_arcs_used, "train_arcs_seen": label.train_arcs_seen}
    paths = write_label(rows, full, acc, facts, out, figures, selection=selection, **(look or {}))
    results["label"] = {"top": rows, "position_only": float(acc[-1]), "n_labels": label.n_labels,
                        "train_arcs_used": label.train_arcs_used, "train_arcs_seen": label.train_arcs_seen}
    return paths


def _per_head_figure_data(run: ProbeRun) -> tuple[npt.NDArray[np.float64], float, npt.NDArray[np.float64] | None]:
    """``(accuracy (L, H), position-only accuracy, selectivity (L, H) or None)`` of the per-head probes on ALL
    (report data, mean over seeds; selectivity = accuracy - control accuracy)."""
    acc = np.mean([s.accuracy[s.relations.index(POOLED)] for s in run.per_head], axis=0)
    floor = float(np.mean([s.floor_accuracy[s.relations.index(POOLED)] for s in run.per_head]))
    sel = None
    if run.per_head_control and all(POOLED in s.relations for s in run.per_head_control):
        sel = acc - np.mean([s.accuracy[s.relations.index(POOLED)] for s in run.per_head_control], axis=0)
    return acc, floor, sel


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
        batch_size, device: how the model runs (``device`` also trains the probes).
        on_long: ``skip``, ``truncate`` or ``window``: sentences over the model's maximum.
        seed, seeds: seeds ``seed .. seed + seeds - 1``, each for the probes' initialisation and training
            order, the control task's mapping and the random-init model.
        progress: progress bars on stderr.
    """
    kinds = parse_kinds(kinds)
    check_run_options(batch_size=batch_size, device=device, on_long=on_long, limit=limit)
    control_kind = _control_kind(control)
    max_train, max_eval = (limit if n is None else n for n in (max_train, max_eval))
    _check_sources(model, train_data, eval_data, train_store, eval_store)
    record: dict[str, Any] = {"command": "probes probe", "invocation": invocation(), "data": {},
                              "options": {"batch_size": batch_size, "max_train": max_train, "max_eval": max_eval}}
    extractor, streams, sentences = _open_inputs(model, record, batch_size=batch_size, device=device,
                                                 on_long=on_long, splits=(
                                                     ("train", train_data, train_store, max_train),
                                                     ("eval", eval_data, eval_store, max_eval),
                                                     ("select", None if select_on == "same" else select_on,
                                                      select_store, max_eval)))
    emb = _static_vectors(kinds, vectors, extractor)
    ctl = None
    if control_kind is not None:
        ctl = make_control(control_kind, seed, sentences.get("train") or (s for s, _ in streams["train"]))
    rand_streams = None
    if random_init and "attn+emb" in kinds:
        rand_streams, record["random_init"] = _random_init_streams(extractor, sentences, batch_size=batch_size,
                                                                   device=device)
    record["eval_name"] = getattr(streams["eval"], "name", None)
    chosen = streams.get("select") if "select" in streams else ("same" if select_on == "same" else None)
    run = run_probes(streams["train"], streams["eval"], kinds=kinds, vectors=emb, control=ctl,
                     random_init=rand_streams, epochs=epochs, device=device, random_state=seed, seeds=seeds,
                     select_on=chosen, select_name=getattr(streams.get("select"), "name", None),
                     min_count=min_count, record=record, progress=progress)
    return dataclasses.replace(run, record={**run.record, "inputs": {k: v.inputs() for k, v in streams.items()}})


def _control_kind(control: bool | str | None) -> str | None:
    """``control`` as a kind of :data:`CONTROL_KINDS` (True: Hewitt & Liang's), or None (no control)."""
    kind = "hewitt-liang" if control is True else (control or None)
    if kind is not None and kind not in CONTROL_KINDS:
        raise ConfigError(f"control: expected one of {', '.join(CONTROL_KINDS)}, found {control!r}")
    return kind  # type: ignore[return-value]


def _open_inputs(model: Any, record: dict[str, Any], *, batch_size: int, device: str | None, on_long: str,
                 splits: Sequence[tuple[str, Any, Any, int | None]]
                 ) -> tuple[Any, dict[str, Any], dict[str, list[Sentence]]]:
    """``(extractor, streams, sentences)``: the model (None without one) and each split given (a treebank run
    through the model, or a store); ``record`` gets the model, the data and the load time."""
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
    for split, spec, store, limit in splits:
        if split == "select" and spec is None and store is None:
            continue
        if split == "select" and store is None and model is None:
            raise ConfigError("--select-on DATA runs the model: give --model, or --store-select")
        streams[split], record["data"][split], read = _open_split(extractor, spec, store, limit, split)
        if read is not None:
            sentences[split] = read
        else:
            record.setdefault("model", record["data"][split]["info"].get("model"))
    record["timings_setup"] = timings
    return extractor, streams, sentences


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
                         device: str | None) -> tuple[Any, Any]:
    """A callable ``seed -> (train, eval)`` streams of a copy of the model re-initialised with ``seed`` (made when
    called, one copy at a time), and what the record says of it."""
    if extractor is None or "train" not in sentences or "eval" not in sentences:
        logger.warning("random-init control skipped: it needs --model with --train and --eval treebanks")
        return None, "skipped: needs --model with --train and --eval treebanks"
    from probes.extraction.extractor import AttentionExtractor
    from probes.probing.controls import random_init_copy

    def streams(seed: int) -> tuple[_Stream, _Stream]:
        rand_model, _ = random_init_copy(extractor.model, random_state=seed)
        rand_ex = AttentionExtractor(rand_model, extractor.tokenizer, batch_size=batch_size, device=device,
                                     on_long=extractor.on_long, progress=False)
        return _Stream(rand_ex, sentences["train"]), _Stream(rand_ex, sentences["eval"])

    from probes.extraction.families import embedding_parameters

    keep = set(embedding_parameters(extractor.model))
    kept = [name for name, _ in extractor.model.named_parameters() if name in keep]
    return streams, {"kept_pretrained": kept,
                     "reinitialised": "everything else (normal(0, initializer_range) weights, zero biases, "
                     "LayerNorm 1/0), once per seed", "seeds": "the run's seeds"}
