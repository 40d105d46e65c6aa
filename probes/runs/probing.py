"""One probing run: train the chosen probes on one split, score them on another, write everything.

Every trainable probe (and its control-task twin) trains in lockstep over a
single pass of the training stream, so attention is extracted (or read) once;
scoring is one more pass over the evaluation stream. Outputs mirror the argmax
leaderboard: Markdown + CSV + JSON tables, layers x heads heatmaps (1-based),
and ``run.json`` with the options, counts, timings and library versions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.extraction.attention import WordAttention
from probes.corpora.types import Sentence, base_relation
from probes.errors import ConfigError
from probes.heads.naming import DIRECTIONS, INDEXING_NOTE, head_name
from probes.probing.controls import ControlTask, selectivity
from probes.probing.decode import argmax_heads, uas_counts, uuas_counts
from probes.probing.embeddings import StaticVectors
from probes.probing.label import LabelScorer, PerHeadLabelProbe
from probes.probing.parsers import AttnEmbParser, AttnParser, DistancesEmbParser, RightBranching
from probes.probing.per_head import ALL, PerHeadEvaluator, PerHeadProbe, PerHeadScores
from probes.probing.train import fit_together, iter_pairs
from probes.reports.tables import markdown_table, versions, write_csv, write_json
from probes.heads.intervals import bootstrap_ci

__all__ = ["PROBE_KINDS", "ParserRow", "ParserScorer", "run_probes", "PARSER_COLUMNS", "PER_HEAD_COLUMNS"]

logger = logging.getLogger("probes")

Pair = tuple[Sentence, WordAttention]

#: What ``--probe`` accepts (``all`` = every one of them).
PROBE_KINDS: tuple[str, ...] = ("per-head", "label", "attn", "attn+emb", "distances+emb", "right-branching")

PARSER_COLUMNS = ("probe", "uas", "uas_ci_low", "uas_ci_high", "uuas", "uuas_ci_low", "uuas_ci_high",
                  "control_uas", "selectivity", "train_sentences", "attention_from")
PER_HEAD_COLUMNS = ("relation", "count", "head", "accuracy", "ci_low", "ci_high", "position_only", "gain",
                    "argmax_accuracy_same_head", "argmax_head", "argmax_direction", "argmax_accuracy",
                    "control_accuracy", "control_position_only", "selectivity", "selectivity_raw")


@dataclass(frozen=True)
class ParserRow:
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


class ParserScorer:
    """Accumulator of a parser's UAS and UUAS over held-out ``(Sentence, WordAttention)`` pairs.

    Keeps per-sentence counts only (4 integers each) for bootstrap intervals.

    Args:
        parser: a fitted parser with ``predict_log_proba_one(sentence, attention)``.
        transform: optional ``Sentence -> Sentence`` (a control task's relabelling).
        uuas: also decode a maximum spanning tree per sentence.
    """

    def __init__(self, parser: Any, transform: Any = None, *, uuas: bool = True) -> None:
        self.parser = parser
        self.transform = transform
        self.uuas = uuas
        self.reset()

    def reset(self) -> None:
        """Forget everything seen."""
        self.counts: list[tuple[int, int, int, int]] = []

    def update(self, item: Sentence, word_attention: WordAttention) -> None:
        """Score one sentence."""
        sentence = self.transform(item) if self.transform else item
        logp = self.parser.predict_log_proba_one(sentence, word_attention)  # (m, m + 1)
        uc, ut = uas_counts(argmax_heads(logp), sentence)
        tc, tt = uuas_counts(logp, sentence) if self.uuas else (0, 0)
        self.counts.append((uc, ut, tc, tt))

    def merge(self, other: ParserScorer) -> None:
        """Add another scorer's sentences."""
        self.counts.extend(other.counts)

    def compute(self) -> dict[str, float]:
        """UAS and UUAS with 95% bootstrap intervals over sentences."""
        c = np.asarray(self.counts, dtype=np.int64).reshape(-1, 4)
        out: dict[str, float] = {}
        for name, (k, t) in {"uas": (0, 1), "uuas": (2, 3)}.items():
            total = c[:, t].sum()
            out[name] = float(c[:, k].sum() / total) if total else float("nan")
            low, high = bootstrap_ci(c[:, k], c[:, t]) if total else (np.nan, np.nan)
            out[f"{name}_ci_low"], out[f"{name}_ci_high"] = float(low), float(high)
        return out


def _kinds(kinds: Sequence[str]) -> list[str]:
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
    out_dir: str | Path,
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
    figures: bool = True,
    progress: bool = True,
) -> tuple[dict[str, Any], dict[str, Path]]:
    """Train probes on ``train_pairs``, score them on ``eval_pairs``, write tables, figures and run.json.

    Args:
        train_pairs, eval_pairs: ``(Sentence, WordAttention)`` streams (re-iterable when ``epochs > 1``).
        out_dir: output folder.
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
        record: facts to put in ``run.json`` (model, data, options).
        figures: write PNG heatmaps.
        progress: progress bars on stderr.

    Returns:
        ``(results, paths)``: the run record (also in ``run.json``) and the files written.
    """
    kinds = _kinds(kinds)
    if any(k in kinds for k in ("attn+emb", "distances+emb")) and vectors is None:
        raise ConfigError("attn+emb and distances+emb need static vectors (vectors=...)")
    if random_init is not None and vectors is None:
        raise ConfigError("the random-init control trains Attn+Emb: it needs static vectors (vectors=...)")
    out_dir = Path(out_dir)
    common = {"epochs": 1, "random_state": random_state, "device": device, "progress": False}
    probes: dict[str, Any] = {}
    if "per-head" in kinds:
        probes["per-head"] = PerHeadProbe(**common)
    if "label" in kinds:
        probes["label"] = PerHeadLabelProbe(random_state=random_state, progress=progress)
    if "attn" in kinds:
        probes["Attn"] = AttnParser(**common)
    if "attn+emb" in kinds:
        probes["Attn+Emb"] = AttnEmbParser(vectors, **common)
    if "distances+emb" in kinds:
        probes["Distances+Emb"] = DistancesEmbParser(vectors, **common)
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

    # ---- evaluation: one pass, every scorer at once
    t0 = time.perf_counter()
    parsers = {name: p for name, p, t in trained if t is None and name not in ("per-head", "label")}
    if "right-branching" in kinds:
        parsers["right-branching"] = RightBranching().fit()
    scorers = {name: ParserScorer(p) for name, p in parsers.items()}
    if control is not None:
        for name, p, t in trained:
            if t is not None and name != "per-head [control]":
                scorers[name] = ParserScorer(p, t, uuas=False)
        if "right-branching" in parsers:
            scorers["right-branching [control]"] = ParserScorer(parsers["right-branching"], control.relabel, uuas=False)
    per_head_ev = PerHeadEvaluator(probes["per-head"]) if "per-head" in probes else None
    per_head_ctl = None
    if per_head_ev is not None and control is not None:
        per_head_ctl = PerHeadEvaluator(next(p for n, p, _ in trained if n == "per-head [control]"))
    label_scorer = LabelScorer(probes["label"]) if "label" in probes else None
    n_eval = 0
    for sentence, attention in iter_pairs(eval_pairs, progress=progress, desc="evaluate"):
        if attention.n_words != sentence.n_words or sentence.n_words == 0:
            continue
        n_eval += 1
        for scorer in scorers.values():
            scorer.update(sentence, attention)
        if per_head_ev is not None:
            per_head_ev.update(sentence, attention)
        if per_head_ctl is not None:
            per_head_ctl.update(control.relabel(sentence), attention)  # type: ignore[union-attr]
        if label_scorer is not None:
            label_scorer.update(sentence, attention)
    timings["eval_s"] = time.perf_counter() - t0

    # ---- random-init control: Attn+Emb on attention of a re-initialised model
    if random_init is not None:
        t0 = time.perf_counter()
        rand = AttnEmbParser(vectors, **common)
        fit_together([rand], random_init[0], epochs=epochs, progress=progress, desc="train (random-init model)")
        scorers["Attn+Emb, random-init model"] = rs = ParserScorer(rand)
        parsers["Attn+Emb, random-init model"] = rand
        for sentence, attention in iter_pairs(random_init[1], progress=progress, desc="evaluate (random-init)"):
            if attention.n_words == sentence.n_words and sentence.n_words:
                rs.update(sentence, attention)
        timings["random_init_s"] = time.perf_counter() - t0

    # ---- tables
    t0 = time.perf_counter()
    results: dict[str, Any] = dict(record or {})
    paths: dict[str, Path] = {}
    parser_rows = _parser_rows(parsers, scorers)
    if parser_rows:
        results["parsers"] = [asdict(r) for r in parser_rows]
        paths.update(_write_parsers(parser_rows, out_dir, control is not None))
    if per_head_ev is not None:
        ph = per_head_ev.compute()
        ctl = per_head_ctl.compute() if per_head_ctl is not None else None
        rows, full = _per_head_rows(ph, ctl, min_count)
        results["per_head"] = {"listed": rows, "n_unseen_relation_words": ph.n_unseen}
        paths.update(_write_per_head(rows, full, out_dir))
        if figures:
            paths.update(_per_head_figures(ph, ctl, out_dir))
        if "Attn" in parsers and figures:
            paths.update(_attn_weight_figure(parsers["Attn"], out_dir))
    if label_scorer is not None:
        paths.update(_write_label(probes["label"], *label_scorer.compute(), out_dir, figures, results))
    timings["writing_s"] = time.perf_counter() - t0
    results.update(
        probes=kinds,
        counts={"eval_sentences": n_eval,
                "train_sentences": {name: int(getattr(p, "n_sentences_seen_", 0)) for name, p, _ in trained},
                "train_skipped": {name: int(getattr(p, "n_skipped_", 0)) for name, p, _ in trained}},
        options={**dict(results.get("options", {})), "epochs": epochs, "device": device,
                 "random_state": random_state, "min_count": min_count,
                 "training": "Adam, summed cross-entropy per sentence, file order, no shuffling; parsers: lr 0.002, "
                             "1 sentence per step (Clark et al. 2019 §5.3); per-head: lr 0.05, 8 sentences per step",
                 "vectors": vectors.describe() if vectors is not None else None,
                 "control_task": control.describe() if control is not None else None,
                 "uas": "argmax per word over ROOT + words (self allowed), words with gold relation punct excluded",
                 "uuas": "undirected maximum spanning tree over non-punct words, weight log p(j|i) + log p(i|j); "
                         "gold = undirected arcs between non-punct words",
                 "vector_alignment": "paper formula: candidate c paired with word c's vector (the released code's "
                                     "one-word shift is not reproduced)",
                 "head_selection": "per-head rows pick the best head on the evaluation data (as Clark et al.)"},
        indexing=INDEXING_NOTE,
        timings=timings,
        versions=versions(),
    )
    paths["run.json"] = write_json(results, out_dir / "run.json")
    return results, paths


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


def _write_parsers(rows: list[ParserRow], out_dir: Path, control: bool) -> dict[str, Path]:
    dicts = [asdict(r) for r in rows]
    cols = ["probe", "uas", "uas_ci_low", "uas_ci_high", "uuas"] + (["control_uas", "selectivity"] if control else [])
    heads = ["probe", "UAS", "UAS 95% low", "UAS 95% high", "UUAS (MST)"] + (
        ["control UAS", "selectivity"] if control else [])
    md = markdown_table(dicts, cols, headers=heads, percent=[c for c in cols if c != "probe"])
    note = ("\nUAS: argmax head per word, punctuation (gold relation `punct`) excluded (Clark et al. 2019 §5.4). "
            "UUAS: undirected maximum spanning tree over non-punctuation words (Hewitt & Manning 2019). "
            "95% bootstrap intervals over sentences. Selectivity = UAS - control-task UAS (Hewitt & Liang 2019).\n")
    path = out_dir / "parsers.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(md + note, encoding="utf-8")
    return {"parsers.md": path, "parsers.csv": write_csv(dicts, out_dir / "parsers.csv", PARSER_COLUMNS),
            "parsers.json": write_json(dicts, out_dir / "parsers.json")}


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
        if rel == ALL or (ph.counts[r] >= min_count and base_relation(rel) not in ("root", "punct")):
            rows.append(row)
    rows.sort(key=lambda x: (x["relation"] != ALL, -x["count"]))
    return rows, full


def _write_per_head(rows: list[dict], full: list[dict], out_dir: Path) -> dict[str, Path]:
    cols = ["relation", "count", "head", "accuracy", "ci_low", "ci_high", "position_only", "argmax_head",
            "argmax_accuracy", "control_accuracy", "selectivity"]
    heads = ["relation", "count", "best head", "probe acc.", "95% low", "95% high", "position only",
             "argmax head", "argmax acc.", "control acc.", "selectivity"]
    md = markdown_table(rows, cols, headers=heads, percent=[c for c in cols if c not in ("relation", "count", "head",
                                                                                          "argmax_head")])
    note = ("\nPer-head probes: for each head and relation, a log-linear probe over that head's attention "
            "(both directions, ROOT from the special tokens) plus relative-position features, trained on the "
            "training split; accuracy = share of held-out words of the relation whose gold head it picks among "
            "ROOT + the words. 'position only': the same probe without attention. 'argmax': Clark et al.'s "
            "parameter-free argmax (best head and direction). 'control acc.': the head's probe trained and scored "
            "on the control task (Hewitt & Liang 2019); 'selectivity': (acc. - position only) - (control acc. - "
            "control position only), what the head adds on the task beyond what it adds on the control task "
            "(raw acc. - control acc. is in per_head.csv as selectivity_raw). ALL excludes punctuation. "
            f"{INDEXING_NOTE}.\n")
    path = out_dir / "per_head.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(md + note, encoding="utf-8")
    return {"per_head.md": path, "per_head.csv": write_csv(rows, out_dir / "per_head.csv", PER_HEAD_COLUMNS),
            "per_head.json": write_json(rows, out_dir / "per_head.json"),
            "per_head_scores.csv": write_csv(full, out_dir / "per_head_scores.csv")}


def _per_head_figures(ph: PerHeadScores, ctl: PerHeadScores | None, out_dir: Path) -> dict[str, Path]:
    from probes.reports.figures import head_heatmap

    i = ph.relations.index(ALL)
    out = {"figures/probe_per_head_ALL.png": head_heatmap(
        ph.accuracy[i], out_dir / "figures" / "probe_per_head_ALL.png",
        title=f"Per-head probe accuracy, ALL (held out)\nposition-only probe: {ph.floor_accuracy[i]:.3f}")}
    if ctl is not None and ALL in ctl.relations:
        j = ctl.relations.index(ALL)
        sel = selectivity(ph.accuracy[i], ctl.accuracy[j], ph.floor_accuracy[i], ctl.floor_accuracy[j])
        out["figures/probe_selectivity_ALL.png"] = head_heatmap(
            sel, out_dir / "figures" / "probe_selectivity_ALL.png", title="Per-head probe selectivity, ALL: "
            "gain over position-only, task minus control", label="selectivity", vmin=None)
    return out


def _attn_weight_figure(parser: AttnParser, out_dir: Path) -> dict[str, Path]:
    from probes.reports.figures import overview_figure

    w = parser.head_weights()  # (2, L, H)
    bound = float(np.abs(w).max()) or 1.0
    path = overview_figure({d: w[k] for k, d in enumerate(DIRECTIONS)}, out_dir / "figures" / "probe_attn_weights.png",
                           suptitle="Attn parser: weight of each map", ncols=2, vmin=-bound, vmax=bound)
    return {"figures/probe_attn_weights.png": path}


def _write_label(probe: PerHeadLabelProbe, correct: npt.NDArray[np.int64], total: npt.NDArray[np.int64],
                 out_dir: Path, figures: bool, results: dict[str, Any]) -> dict[str, Path]:
    acc = correct.sum(0) / max(int(total.sum()), 1)  # (P,)
    lh = len(acc) - 1
    floor = float(acc[-1])
    order = np.argsort(-acc[:lh], kind="stable")
    low, high = bootstrap_ci(correct[:, order[:10]], total)
    rows = [{"rank": k + 1, "head": head_name(*divmod(int(p), probe.n_heads_)), "accuracy": float(acc[p]),
             "ci_low": float(lo), "ci_high": float(hi), "position_only": floor, "gain": float(acc[p] - floor)}
            for k, (p, lo, hi) in enumerate(zip(order[:10], low, high))]
    full = [{"layer": p // probe.n_heads_ + 1, "head": p % probe.n_heads_ + 1,
             "head_name": head_name(*divmod(p, probe.n_heads_)), "accuracy": float(acc[p]), "position_only": floor}
            for p in range(lh)]
    md = markdown_table(rows, ["rank", "head", "accuracy", "ci_low", "ci_high", "position_only", "gain"],
                        headers=["rank", "head", "label acc.", "95% low", "95% high", "position only", "gain"],
                        percent=["accuracy", "ci_low", "ci_high", "position_only", "gain"])
    note = (f"\nLabel probes: given the gold arc, one LogisticRegression per head predicts its relation "
            f"({len(probe.classes_)} labels) from that head's attention on the arc plus its relative position; "
            f"trained on {probe.n_arcs_used_} of {probe.n_arcs_seen_} training arcs (reservoir sample). "
            f"Top 10 heads. {INDEXING_NOTE}.\n")
    path = out_dir / "label.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(md + note, encoding="utf-8")
    results["label"] = {"top": rows, "position_only": floor, "n_labels": len(probe.classes_),
                        "train_arcs_used": probe.n_arcs_used_, "train_arcs_seen": probe.n_arcs_seen_}
    out = {"label.md": path, "label.csv": write_csv(full, out_dir / "label.csv")}
    if figures:
        from probes.reports.figures import head_heatmap

        out["figures/probe_label.png"] = head_heatmap(
            acc[:lh].reshape(probe.n_layers_, probe.n_heads_), out_dir / "figures" / "probe_label.png",
            title=f"Per-head label probe accuracy (held out)\nposition-only probe: {floor:.3f}", vmin=None)
    return out
