"""The inputs of a probe run: each split a treebank run through the model (a re-iterable stream) or a store.

:func:`open_inputs` opens every split given (and loads the model once, resolved and its options checked by the
run); :func:`static_vectors` gives the word vectors of the ``+Emb`` probes; :func:`random_init_streams` the streams
of a re-initialised copy of the model (the random-init control).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.corpora.overlap import measure_overlap, refuse_overlap
from probes.corpora.types import Sentence
from probes.errors import ConfigError
from probes.extraction.attention import WordAttention
from probes.probing.embeddings import StaticVectors
from probes.progress import stage
from probes.runs.inputs import ModelSource, data_name, open_attention_store, read_sentences
from probes.runs.record import data_record, inputs_record

if TYPE_CHECKING:
    from probes.extraction.checks import ExtractorSettings
    from probes.extraction.extractor import AttentionExtractor

__all__ = ["Stream", "Limited", "open_inputs", "check_sources", "static_vectors", "random_init_streams"]

logger = logging.getLogger("probes")

Pair = tuple[Sentence, WordAttention]


class Stream:
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


class Limited:
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


def open_inputs(model: ModelSource | AttentionExtractor | None, fields: dict[str, Any], *,
                splits: Sequence[tuple[str, Any, Any, int | None]], progress: bool = False
                ) -> tuple[Any, dict[str, Any], dict[str, list[Sentence]]]:
    """``(extractor, streams, sentences)``: the model (loaded from its source, or given ready; None without one) and
    each split given (a treebank run through the model, or a store); ``fields`` gets the model, the data, the
    overlap of a separate selection split with the evaluation data, and the load time.

    Treebanks are read, and a selection split that is not held out from the evaluation data refused, before the
    model loads. ``progress``: say on stderr what is read and loaded.
    """
    given = [(split, spec, store, limit) for split, spec, store, limit in splits
             if not (split == "select" and spec is None and store is None)]
    if any(split == "select" and store is None for split, _, store, _ in given) and model is None:
        raise ConfigError("--select-on DATA runs the model: give --model, or --store-select")
    read = {}
    for split, spec, store, limit in given:
        if store is None and spec is not None:
            stage(f"reading treebank {data_name(spec)}", progress)
            read[split] = read_sentences(str(spec), limit)
    if "select" in read and "eval" in read:
        specs = {split: spec for split, spec, _, _ in given}
        overlap = measure_overlap(read["select"][1], read["eval"][1])
        refuse_overlap(overlap, data_name(specs["select"]), data_name(specs["eval"]))
        fields["overlap"] = overlap.to_dict()
    timings: dict[str, float] = {}
    extractor = None
    if model is not None:
        t0 = time.perf_counter()
        if isinstance(model, ModelSource) and not model.settings.progress:  # else the loading says so itself
            stage(f"loading model {model.model.spec}", progress)
        extractor = model.load() if isinstance(model, ModelSource) else model
        timings["model_load_s"] = time.perf_counter() - t0
        fields.update(model=model.model.spec if isinstance(model, ModelSource) else extractor.name_or_path,
                      extractor=extractor.info())
    streams: dict[str, Any] = {}
    sentences: dict[str, list[Sentence]] = {}
    for split, spec, store, limit in given:
        streams[split], fields["data"][split], sents = _open_split(extractor, spec, store, limit, split,
                                                                   read.get(split))
        if sents is not None:
            sentences[split] = sents
        else:
            fields.setdefault("model", fields["data"][split]["info"].get("model"))
    fields["timings_setup"] = timings
    return extractor, streams, sentences


def check_sources(model: Any, train_data: Any, eval_data: Any, train_store: Any, eval_store: Any) -> None:
    """Each split needs a model and a treebank, or a store."""
    if train_store is None and (model is None or train_data is None):
        raise ConfigError("give --model and --train (run the model), or --store-train (read stored attention)")
    if eval_store is None and (model is None or eval_data is None):
        raise ConfigError("give --model and --eval (run the model), or --store-eval (read stored attention)")


def _open_split(extractor: Any, spec: str | Path | None, store: str | Path | None, limit: int | None, split: str,
                read: tuple[Path, list[Sentence]] | None = None) -> tuple[Any, dict[str, Any], list[Sentence] | None]:
    """``(pairs, record, sentences)`` of one split: a stored one (sentences None) or a treebank run live (``read``:
    its file and sentences, when already read)."""
    if store is not None:
        st = open_attention_store(store, f"--store-{split}")
        return (Limited(st, limit, Path(store).name),
                {"store": str(Path(store).resolve()), "info": dict(getattr(st, "info", {}) or {})}, None)
    if spec is None:
        raise ConfigError(f"the {split} split needs a treebank or a store (--{split} or --store-{split})")
    path, sents = read if read is not None else read_sentences(str(spec), limit)
    return Stream(extractor, sents, data_name(spec)), data_record(str(spec), path, len(sents)), sents


def static_vectors(kinds: Sequence[str], vectors: str | Path | None, extractor: Any) -> StaticVectors | None:
    """Word vectors for attn+emb / distances+emb: a GloVe file, else the model's input embeddings."""
    if not any(k in kinds for k in ("attn+emb", "distances+emb")):
        return None
    from probes.probing.embeddings import GloveVectors, ModelInputVectors

    if vectors is not None:
        return GloveVectors.load(vectors)
    if extractor is not None:
        return ModelInputVectors.from_model(extractor.model, extractor.tokenizer)
    raise ConfigError("attn+emb / distances+emb need --vectors FILE or --model (for its input embeddings)")


def random_init_streams(extractor: Any, sentences: Mapping[str, list[Sentence]], *, settings: ExtractorSettings
                        ) -> tuple[Any, Any]:
    """A callable ``seed -> (train, eval)`` streams of a copy of the model re-initialised with ``seed`` (made when
    called, one copy at a time), and what the record says of it.

    Each copy's extractor runs on the run's checked device and batch size (``settings``), with the model's
    extractor's ``on_long`` and the extractor's defaults otherwise; nothing is checked again.
    """
    if extractor is None or "train" not in sentences or "eval" not in sentences:
        logger.warning("random-init control skipped: it needs --model with --train and --eval treebanks")
        return None, "skipped: needs --model with --train and --eval treebanks"
    from probes.extraction.checks import ExtractorSettings
    from probes.extraction.extractor import AttentionExtractor
    from probes.probing.controls import random_init_copy

    copies = ExtractorSettings(device=settings.device, batch_size=settings.batch_size, on_long=extractor.on_long,
                               progress=False)

    def streams(seed: int) -> tuple[Stream, Stream]:
        rand_model, _ = random_init_copy(extractor.model, random_state=seed)
        rand_ex = AttentionExtractor.from_settings(rand_model, extractor.tokenizer, copies)
        return Stream(rand_ex, sentences["train"]), Stream(rand_ex, sentences["eval"])

    from probes.extraction.families import embedding_parameters

    keep = set(embedding_parameters(extractor.model))
    kept = [name for name, _ in extractor.model.named_parameters() if name in keep]
    return streams, {"kept_pretrained": kept,
                     "reinitialised": "everything else (normal(0, initializer_range) weights, zero biases, "
                     "LayerNorm 1/0), once per seed", "seeds": "the run's seeds"}
