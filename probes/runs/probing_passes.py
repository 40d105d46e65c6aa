"""The passes of a probe run: the probes of each seed, trained together, and every scorer of them fed in one pass.

:class:`SeedRun` holds one seed's probes (and their control-task twins); :class:`Evaluation` holds every
scorer of a run's fitted probes and gives the parts of the run's result (:func:`probes.runs.probing.run_probes`
makes the :class:`~probes.runs.probing.ProbeRun` from them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from probes.analysis.driver import stream
from probes.analysis.split import Half
from probes.corpora.types import Sentence
from probes.extraction.attention import WordAttention
from probes.probing.embeddings import StaticVectors
from probes.probing.label import LabelScorer, PerHeadLabelProbe
from probes.probing.parser_scores import ParserScorer
from probes.probing.parsers import AttnEmbParser, AttnParser, DistancesEmbParser, RightBranching
from probes.probing.per_head import PerHeadEvaluator, PerHeadProbe
from probes.probing.summaries import compare_parsers, parser_summary
from probes.probing.train import fit_together, iter_pairs

__all__ = ["SeedRun", "Evaluation", "make_probes", "RANDOM_INIT"]

Pair = tuple[Sentence, WordAttention]


def make_probes(kinds: Sequence[str], vectors: StaticVectors | None, common: Mapping[str, Any],
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


class SeedRun:
    """The probes of one seed: ``trained`` = ``(name, probe, transform, order seed)`` (control twins included).

    The label probe trains with the first seed only (``label`` in ``probes`` of later seeds is dropped).
    """

    def __init__(self, kinds: Sequence[str], vectors: StaticVectors | None, seed: int, control: Any,
                 device: str | None, progress: bool) -> None:
        from sklearn.base import clone

        self.seed, self.control = seed, control
        common = {"epochs": 1, "random_state": seed, "device": device, "progress": False}
        self.probes = make_probes(kinds, vectors, common, progress)
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

    def merge(self, other: _Relabelled) -> None:
        """Add the wrapped analysis of the same wrapper run on another shard."""
        self.analysis.merge(other.analysis)

    def reset(self) -> None:
        """Forget everything the wrapped analysis saw."""
        self.analysis.reset()


def _halves(make: Any, mode: str) -> tuple[Any, Any]:
    """``(selection, report)`` analyses: two :class:`Half` wrappers (mode split), else one analysis twice."""
    if mode == "split":
        return Half(make(), "select"), Half(make(), "report")
    one = make()
    return one, one


class Evaluation:
    """Every scorer of a run's fitted probes (all seeds), fed in one pass over the evaluation stream."""

    def __init__(self, kinds: Sequence[str], runs: Sequence[SeedRun], mode: str) -> None:
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

    def _per_head(self, run: SeedRun) -> dict[str, Any]:
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

    def parts(self) -> dict[str, Any]:
        """What the run's result is made of: parser rows (as fields, best UAS first) and comparisons, per-head
        scores, the label probe and its scorers (or None), the Attn parser's map weights."""
        weights = self.runs[0].probes["Attn"].head_weights() if "Attn" in self.runs[0].probes else None
        label = None if self.label is None else (self.runs[0].probes["label"], self.label[1], self.label[0])
        task = {n: [s.unit_counts() for s in scorers] for n, scorers in self.scorers.items()}
        ctl = {n: [s.unit_counts() for s in scorers] for n, scorers in self.control_scorers.items()}
        if self.random_init_scorers:
            task[RANDOM_INIT] = [s.unit_counts() for s in self.random_init_scorers]
        comparisons, _ = compare_parsers(task, ctl)
        return {"parsers": self._parser_rows(task, ctl), "comparisons": tuple(comparisons),
                "per_head": tuple(ev["report"].compute() for ev in self.per_head),
                "per_head_select": tuple(ev["select"].compute() for ev in self.per_head) if self.mode != "same" else (),
                "per_head_control": tuple(ev["control"].compute() for ev in self.per_head if ev["control"] is not None),
                "attn_weights": weights, "label": label}

    def _parser_rows(self, task: Mapping[str, Any], ctl: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The fields of each parser's row (:class:`~probes.runs.probing.ParserRow`), best UAS first."""
        rows = []
        for name, units in task.items():
            parser = (self.random_init_parsers[0] if name == RANDOM_INIT else
                      self.rb if name == "right-branching" else self.runs[0].probes[name])
            rows.append({"probe": name, "train_sentences": int(getattr(parser, "n_sentences_seen_", 0)),
                         "attention_from": "randomly initialised model" if name == RANDOM_INIT else
                         ("none" if name in ("right-branching", "Distances+Emb") else "the model"),
                         **parser_summary(units, ctl.get(name))})
        return sorted(rows, key=lambda r: -r["uas"])


#: Name of the random-init row.
RANDOM_INIT = "Attn+Emb, random-init model"
