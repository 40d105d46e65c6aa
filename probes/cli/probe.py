"""CLI command ``probe``: train attention probes on one split and score them on another."""

from __future__ import annotations

import itertools
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

_DATA_HELP = "a .conllu / .conllx / .spacy file, or ud:TREEBANK:SPLIT from the registry"


class _Stream:
    """A re-iterable ``(Sentence, WordAttention)`` stream: each pass runs the extractor again."""

    def __init__(self, extractor: Any, sentences: list[Any]) -> None:
        self.extractor = extractor
        self.sentences = sentences

    def __iter__(self) -> Iterator[Any]:
        return self.extractor.iter_attention(self.sentences)

    def __len__(self) -> int:
        return len(self.sentences)


class _Limited:
    """The first ``n`` pairs of a re-iterable stream (``None``: all of them)."""

    def __init__(self, pairs: Any, n: int | None) -> None:
        self.pairs, self.n = pairs, n

    def __iter__(self) -> Iterator[Any]:
        return iter(self.pairs) if self.n is None else itertools.islice(iter(self.pairs), self.n)


def _split(values: Optional[list[str]]) -> list[str]:
    out: list[str] = []
    for value in values or []:
        out += [v.strip() for v in value.split(",") if v.strip()]
    return out


def _read(spec: str, limit: int | None) -> tuple[Path, list[Any]]:
    from probes.corpora import read_treebank

    try:
        from probes.corpora.registry import resolve_treebank

        path = Path(resolve_treebank(spec))
    except ImportError:  # pragma: no cover - registry is optional
        path = Path(spec)
    sentences = read_treebank(path)
    return path, list(sentences if limit is None else itertools.islice(sentences, limit))


def _store(path: Path) -> Any:
    from probes.extraction.store import open_store

    if not path.exists():
        raise InputError(f"{path}: no such file or folder (attention store)")
    return open_store(path)


@app.command("probe")
def probe_cli(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model folder (or hub name, needs network)."),
    train: Optional[str] = typer.Option(None, "--train", help=f"Training data: {_DATA_HELP}."),
    eval_: Optional[str] = typer.Option(None, "--eval", help=f"Evaluation data: {_DATA_HELP}."),
    probe: Optional[list[str]] = typer.Option(
        None, "--probe", "-p", help="per-head, label, attn, attn+emb, distances+emb, right-branching or all "
        "(comma-separated or repeated; default all)."),
    store_train: Optional[Path] = typer.Option(None, "--store-train", help="Attention store to train on."),
    store_eval: Optional[Path] = typer.Option(None, "--store-eval", help="Attention store to evaluate on."),
    vectors: Optional[Path] = typer.Option(
        None, "--vectors", help="GloVe-format word vectors for attn+emb / distances+emb "
        "(default: the model's input embeddings, mean-pooled over subwords)."),
    epochs: int = typer.Option(1, "--epochs", min=1, help="Passes over the training data (Clark et al.: 1)."),
    control: bool = typer.Option(True, "--control/--no-control",
                                 help="Train control-task twins and report selectivity (Hewitt & Liang 2019)."),
    random_init: bool = typer.Option(True, "--random-init/--no-random-init",
                                     help="Add Attn+Emb on a randomly initialised copy of the model (needs --model)."),
    max_train: Optional[int] = typer.Option(None, "--max-train", min=1,
                                            help="Use only the first N training sentences."),
    max_eval: Optional[int] = typer.Option(None, "--max-eval", min=1,
                                           help="Use only the first N evaluation sentences."),
    min_count: int = typer.Option(100, "--min-count", min=1, help="Least words for a relation to be listed."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output folder (default runs/probe-MODEL)."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Sentences per forward pass of the model."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda ... for the model and the probes."),
    seed: int = typer.Option(0, "--seed", help="Seed of probes, control task and random-init model."),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="Write PNG heatmaps."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars on stderr."),
) -> None:
    """Train probes that read attention on --train and score them on --eval (Clark et al. 2019 §5).

    Writes parsers.{md,csv,json} (UAS / UUAS of Attn, Attn+Emb, Distances+Emb, right-branching,
    random-init control), per_head.{md,csv,json} and per_head_scores.csv (per-head relation probes),
    label.{md,csv} (per-head label probes), figures/ and run.json to --out. Layers and heads are 1-based.
    """
    from probes.checksum import file_sha256
    from probes.probing.controls import ControlTask, random_init_copy
    from probes.probing.embeddings import GloveVectors, ModelInputVectors
    from probes.runs.probing import _kinds, run_probes

    kinds = _kinds(_split(probe) or ["all"])
    if store_train is None and (model is None or train is None):
        raise ConfigError("give --model and --train (run the model), or --store-train (read stored attention)")
    if store_eval is None and (model is None or eval_ is None):
        raise ConfigError("give --model and --eval (run the model), or --store-eval (read stored attention)")
    record: dict[str, Any] = {"command": "probes probe", "data": {},
                              "options": {"batch_size": batch_size, "max_train": max_train, "max_eval": max_eval}}
    timings: dict[str, float] = {}
    extractor = None
    if model is not None:
        from probes.extraction.extractor import AttentionExtractor

        t0 = time.perf_counter()
        extractor = AttentionExtractor.from_pretrained(model, batch_size=batch_size, device=device, progress=False)
        timings["model_load_s"] = time.perf_counter() - t0
        record.update(model=model, extractor=extractor.info())
    streams: dict[str, Any] = {}
    sentences: dict[str, list[Any]] = {}
    for split, spec, store, limit in (("train", train, store_train, max_train), ("eval", eval_, store_eval, max_eval)):
        if store is not None:
            st = _store(store)
            streams[split] = _Limited(st, limit)
            record["data"][split] = {"store": str(store), "info": dict(getattr(st, "info", {}) or {})}
            record.setdefault("model", record["data"][split]["info"].get("model"))
        else:
            path, sents = _read(spec, limit)  # type: ignore[arg-type]
            sentences[split] = sents
            streams[split] = _Stream(extractor, sents)
            record["data"][split] = {"spec": spec, "path": str(path), "sha256": file_sha256(path),
                                     "sentences": len(sents)}
    emb = None
    if any(k in kinds for k in ("attn+emb", "distances+emb")):
        if vectors is not None:
            emb = GloveVectors.load(vectors)
        elif extractor is not None:
            emb = ModelInputVectors.from_model(extractor.model, extractor.tokenizer)
        else:
            raise ConfigError("attn+emb / distances+emb need --vectors FILE or --model (for its input embeddings)")
    ctl = None
    if control:
        train_sents = sentences.get("train") or (s for s, _ in streams["train"])
        ctl = ControlTask(random_state=seed).fit(train_sents)
    rand_streams = None
    if random_init and "attn+emb" in kinds:
        if extractor is None or "train" not in sentences or "eval" not in sentences:
            logger.warning("random-init control skipped: it needs --model with --train and --eval treebanks")
            record["random_init"] = "skipped: needs --model with --train and --eval treebanks"
        else:
            from probes.extraction.extractor import AttentionExtractor

            rand_model, kept = random_init_copy(extractor.model, random_state=seed)
            rand_ex = AttentionExtractor(rand_model, extractor.tokenizer, batch_size=batch_size, device=device,
                                         progress=False)
            rand_streams = (_Stream(rand_ex, sentences["train"]), _Stream(rand_ex, sentences["eval"]))
            record["random_init"] = {"kept_pretrained": kept, "reinitialised": "everything else (normal(0, "
                                     "initializer_range) weights, zero biases, LayerNorm 1/0)", "seed": seed}
    out_dir = out or Path("runs") / ("probe-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(str(model or
                                                                                           store_train)).name))
    record["timings_setup"] = timings
    results, paths = run_probes(
        streams["train"], streams["eval"], out_dir, kinds=kinds, vectors=emb, control=ctl, random_init=rand_streams,
        epochs=epochs, device=device, random_state=seed, min_count=min_count, record=record, figures=figures,
        progress=progress)
    _echo_summary(results, paths, out_dir)


def _echo_summary(results: dict[str, Any], paths: dict[str, Path], out_dir: Path) -> None:
    from probes.reports.tables import text_table

    if "parsers" in results:
        cols = ["probe", "uas", "uas_ci_low", "uas_ci_high", "uuas", "control_uas", "selectivity"]
        typer.echo(text_table(results["parsers"], cols, headers=["probe", "UAS", "low", "high", "UUAS",
                                                                  "control UAS", "selectivity"],
                              percent=cols[1:]), nl=False)
    if "per_head" in results:
        cols = ["relation", "count", "head", "accuracy", "position_only", "argmax_head", "argmax_accuracy",
                "selectivity"]
        typer.echo("\nPer-head relation probes (best head per relation, held out):")
        typer.echo(text_table(results["per_head"]["listed"], cols,
                              headers=["relation", "count", "head", "probe", "position", "argmax head", "argmax",
                                       "selectivity"],
                              percent=["accuracy", "position_only", "argmax_accuracy", "selectivity"]), nl=False)
    t = results["timings"]
    typer.echo(f"\nTimings: training {t['train_s']:.1f} s, evaluation {t['eval_s']:.1f} s"
               + (f", random-init control {t['random_init_s']:.1f} s" if "random_init_s" in t else "")
               + " (extraction included). Layers and heads are 1-based (layer-head).")
    typer.echo(f"Report: {out_dir}  ({', '.join(sorted(p for p in paths if not p.startswith('figures')))})")
