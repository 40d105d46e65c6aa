"""An on-disk store of word-level attention: float16 numpy shards, resumable, streamed back.

Layout of a store folder::

    manifest.json                  model, revision / weights hash, tokenizer, options, data checksum,
                                   shards, report of skipped / truncated / windowed sentences
    shard-00000.npy                1-D float16: every stored sentence's (L, H, n, n) map, flattened, in order
    shard-00000.sentences.jsonl    one JSON Sentence per line (all of the shard's sentences, skipped included)
    shard-00000.json               per sentence: offset, n, is_special, meta (or "skipped"); the shard's
                                   data checksum and the sha256 of its .npy file. Written last: its
                                   presence marks the shard as finished.

Resuming: :func:`extract_to_store` writes each file under a temporary name and renames it
atomically; on a new run over the same sentences it verifies every finished shard
(data checksum and the .npy's sha256) and redoes only the others. Each shard is extracted
by its own call to the extractor, so its batches depend only on its sentences and a
resumed run writes the same bytes as an uninterrupted one.

Distributed (``torchrun ... -m probes extract``): the store's shards are numbered over the whole corpus as
in one process; each rank extracts a contiguous block of whole shards (:meth:`probes.world.World.shard`
over the shard numbers) into the same folder, and rank 0 writes the manifest once every rank is done. The
folder then holds the same files as a one-process run (same names, same bytes), reads as one store in input
order, and resumes under any number of ranks. Ranks share work by whole shards: a corpus of fewer than
``ranks x shard_size`` sentences leaves some ranks idle (lower ``shard_size`` to spread it).

Reading: :func:`open_store` returns an :class:`AttentionStore`; iterating it memory-maps one
shard at a time and yields ``(Sentence, WordAttention)`` with float32 weights, one sentence
in memory at a time.

Integrity (:mod:`probes.extraction.store_verify`): opening a store checks that every shard file is there
and every ``.npy`` has the size its header implies; the first read of each shard checks its files' sha256
against the manifest (``open_store(path, verify=True)`` checks every shard at once; ``probes verify``
lists every damaged file). A damaged store is refused with :class:`~probes.errors.DamagedStoreError`.
Writing: one run per store (:class:`probes.locks.FolderLock`: a second one stops at once); a full disk or
a folder that cannot be written gives one :class:`~probes.errors.WriteError` naming the file, and leaves no
temporary file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from probes.atomic_io import atomic_open, is_temporary
from probes.checksum import file_sha256
from probes.corpora.types import Sentence
from probes.errors import InputError, StoreError, WriteError
from probes.extraction.attention import WordAttention
from probes.extraction.store_format import (
    check_manifest,
    check_records,
    own_file,
    paired,
    read_index,
    sentence_from_json,
)
from probes.extraction.store_verify import Verification, check_shard, check_sizes, damaged_shards, shard_path
from probes.locks import FolderLock
from probes.progress import bar as progress_bar
from probes.safe_arrays import npy_file_header
from probes.safe_read import inside_folder, load_json
from probes.world import World

if TYPE_CHECKING:  # pragma: no cover
    from probes.extraction.extractor import AttentionExtractor

__all__ = ["AttentionStore", "extract_to_store", "open_store", "verify_store", "STORE_FORMAT", "attention_source_of"]

log = logging.getLogger("probes")

STORE_FORMAT = "probes-attention-store/1"
_MANIFEST = "manifest.json"
_REPORT_KEYS = ("skipped", "truncated", "windowed")


def _sentence_json(sentence: Sentence) -> str:
    return json.dumps(dataclasses.asdict(sentence), ensure_ascii=False, sort_keys=True)


def _write_atomic(path: Path, write: Callable[[Any], None], mode: str = "w") -> None:
    """Write ``path`` under a temporary name in its folder and rename it into place (never seen half-written).

    Raises:
        WriteError: the disk is full or the folder cannot be written (the temporary file is removed).
    """
    # one temporary name per write (process and counter): ranks (or threads) may write the same file at once
    with atomic_open(path, mode, fsync=True) as handle:
        write(handle)


class _Stream:
    """A binary file seen by numpy as a plain stream: it writes in chunks through ``write``, so a full
    disk raises ``OSError(ENOSPC)`` rather than ``tofile``'s "N requested and M written" with no errno."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def write(self, data: bytes) -> int:
        return int(self._handle.write(data))


def _save_npy(handle: Any, data: np.ndarray) -> None:
    """``np.save(handle, data)``, byte for byte, through :class:`_Stream`."""
    np.lib.format.write_array(_Stream(handle), data, allow_pickle=False)


def _make_folder(root: Path) -> None:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError.from_oserror(exc, root) from exc


def _dump_json(obj: Any) -> Callable[[Any], None]:
    return lambda handle: handle.write(json.dumps(obj, indent=1, sort_keys=True) + "\n")


def attention_source_of(info: Mapping[str, Any]) -> dict[str, Any]:
    """``info`` (an extractor's, a store's) with its ``attention_source``: ``weights`` for stores written before
    there were other sources (they hold weights)."""
    return {**info, "attention_source": info.get("attention_source") or "weights"}


def _options_key(info: dict[str, Any]) -> dict[str, Any]:
    """The parts of extractor info that must agree for a store to be resumed."""
    keep = ("model", "revision", "weights_sha256", "tokenizer", "layers", "heads", "dtype", "from_pool",
            "to_pool", "max_tokens", "on_long", "attention_source")
    return {k: info.get(k) for k in keep} | {"attention_source": attention_source_of(info)["attention_source"]}


def extract_to_store(
    extractor: AttentionExtractor,
    sentences: Iterable[Sentence],
    path: str | os.PathLike[str],
    *,
    shard_size: int = 256,
    source: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    on_shard: Callable[[int], None] | None = None,
    world: World | None = None,
) -> AttentionStore:
    """Extract word-level attention for ``sentences`` into the store folder ``path``; resumable.

    Args:
        extractor: the :class:`~probes.extraction.extractor.AttentionExtractor` to run.
        sentences: the corpus, in order (read once, shard by shard).
        path: store folder; created if missing. An existing store of the same model, options and
            sentences is resumed: finished shards are verified and kept.
        shard_size: sentences per shard (fixes the file layout; keep it when resuming).
        source: the corpus file, whose sha256 is recorded as well (optional).
        progress: progress bar over sentences (default: the extractor's setting).
        on_shard: called with the shard number after each shard is finished (for tests, logging).
        world: this process' rank (default :meth:`World.current`): in a distributed world each rank
            extracts its block of whole shards, rank 0 writes the manifest, and every rank returns the
            whole store once all are done (the sentences are then read into a list first).

    Returns:
        The finished store, opened.

    Raises:
        StoreError: ``path`` holds a store of another model, other options, another shard size
            or other sentences.
        FolderLockedError: another run is writing into ``path`` (its lock file names it); a lock left
            by a process that is no longer running is taken over.
        WriteError: a file of the store cannot be written (disk full, permission, read-only file
            system); its temporary file is removed and the finished shards are kept.
    """
    if shard_size < 1:
        raise StoreError(f"shard_size must be >= 1, found {shard_size}")
    root = Path(path)
    world = World.current() if world is None else world
    if not world.is_main:  # rank 0 holds the store's lock for the whole world
        return _extract_locked(extractor, sentences, root, shard_size, source, progress, on_shard, world)
    with FolderLock(root, what="probes extract"):
        return _extract_locked(extractor, sentences, root, shard_size, source, progress, on_shard, world)


def _extract_locked(extractor: AttentionExtractor, sentences: Iterable[Sentence], root: Path, shard_size: int,
                    source: str | os.PathLike[str] | None, progress: bool | None,
                    on_shard: Callable[[int], None] | None, world: World) -> AttentionStore:
    """:func:`extract_to_store`, once this run holds the store folder (or is not rank 0)."""
    info = extractor.info()
    old = _check_existing(root, info, shard_size)  # nothing is written before this passes
    manifest: dict[str, Any] = {"format": STORE_FORMAT, "info": info, "shard_size": shard_size,
                                "complete": False, "source": None if source is None else str(source),
                                "source_sha256": None if source is None else file_sha256(Path(source))}

    def start() -> None:  # before the first file of this run is written: the store is unfinished from here on
        _make_folder(root)
        _write_atomic(root / _MANIFEST, _dump_json(manifest))

    expected = [s["data_sha256"] for s in old["shards"]] if old is not None and old.get("complete") else None
    show = (extractor.progress if progress is None else progress) and world.is_main
    saved, extractor.progress = extractor.progress, False
    try:
        if world.distributed:
            shards, data_sha256 = _extract_rank_shards(extractor, root, list(sentences), shard_size, show,
                                                       on_shard, _Writes(start, expected), world)
        else:
            shards, data_sha256 = _extract_shards(extractor, root, sentences, shard_size, show, on_shard,
                                                  _Writes(start, expected))
    finally:
        extractor.progress = saved
    if world.is_main:
        _finish(root, manifest, shards, data_sha256)
    world.barrier()  # the manifest is written: every rank may open the store
    return open_store(root)


def _finish(root: Path, manifest: dict[str, Any], shards: list[dict[str, Any]], data_sha256: str) -> None:
    """Mark the store finished: drop stale files, write the manifest with every shard and the report."""
    _make_folder(root)
    _remove_stale(root, len(shards))
    report: dict[str, Any] = {key: [i for s in shards for i in s[key]] for key in _REPORT_KEYS}
    manifest.update(
        complete=True,
        data_sha256=data_sha256,
        n_sentences=sum(s["n_sentences"] for s in shards),
        n_stored=sum(s["n_stored"] for s in shards),
        shards=[{k: s[k] for k in ("name", "n_sentences", "n_stored", "npy_sha256", "data_sha256")}
                for s in shards],
        report={**{f"n_{k}": len(v) for k, v in report.items()}, **report},
    )
    _write_atomic(root / _MANIFEST, _dump_json(manifest))


def _check_existing(root: Path, info: dict[str, Any], shard_size: int) -> dict[str, Any] | None:
    """The manifest of the store already in ``root`` (None when there is none), if it has the same options.

    Raises:
        StoreError: ``root`` holds a store of another model, other options or another shard size.
    """
    manifest_path = root / _MANIFEST
    if not manifest_path.exists():
        return None
    old = _read_manifest(root)
    if _options_key(old["info"]) != _options_key(info) or old["shard_size"] != shard_size:
        raise StoreError(
            "this folder holds a store of another model or other options; expected "
            f"{_options_key(info)} with shard_size {shard_size}, found {_options_key(old['info'])} with "
            f"shard_size {old['shard_size']} (use a new folder)", path=manifest_path)
    return old


class _Writes:
    """What one run may write: ``begin()`` marks the store unfinished once, before the first file is written.

    ``expected``: the shard checksums of a finished store already in the folder (None when there is
    none, or it is unfinished). A finished store is only re-verified (and a damaged shard redone):
    sentences that differ from its own, in any shard or in number, are refused before anything is written,
    so the store stays finished and readable.
    """

    def __init__(self, start: Callable[[], None], expected: list[str] | None) -> None:
        self._start = start
        self.started = False
        self.expected = expected

    def check(self, number: int, checksum: str | None, root: Path) -> None:
        """Refuse shard ``number`` (``checksum`` None: the sentences ended) if a finished store differs."""
        if self.expected is None:
            return
        n_old = len(self.expected)
        if (checksum is None and number == n_old) or (number < n_old and self.expected[number] == checksum):
            return
        if checksum is None or number >= n_old:
            what = f"{'fewer' if checksum is None else 'more'} sentences than its {n_old} shards hold"
        else:
            what = f"other sentences in shard {number}"
        raise StoreError(f"this folder holds a finished store of other sentences ({what}); it was left "
                         "unchanged: use a new folder", path=root / _MANIFEST)

    def begin(self) -> None:
        """Mark the store unfinished (once), before this run writes its first file."""
        if not self.started:
            self.started = True
            self._start()


def _extract_shards(extractor: AttentionExtractor, root: Path, sentences: Iterable[Sentence], shard_size: int,
                    show: bool, on_shard: Callable[[int], None] | None, writes: _Writes
                    ) -> tuple[list[dict[str, Any]], str]:
    """Extract (or verify and keep) every shard in turn: the shard indexes and the data checksum."""
    total = len(sentences) if isinstance(sentences, Sized) else None
    bar = progress_bar("store", total=total, unit="sent", progress=show)
    shards: list[dict[str, Any]] = []
    data_digest = hashlib.sha256()
    try:
        iterator = iter(sentences)
        for number in itertools.count():
            chunk = list(itertools.islice(iterator, shard_size))
            if not chunk:
                writes.check(number, None, root)
                break
            lines = [_sentence_json(s) for s in chunk]
            checksum = hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
            writes.check(number, checksum, root)
            data_digest.update(checksum.encode("ascii"))
            entry = _finished_shard(root, number, checksum)
            if entry is None:
                writes.begin()
                entry = _write_shard(extractor, root, number, chunk, lines, checksum)
            shards.append(entry)
            bar.update(len(chunk))
            if on_shard is not None:
                on_shard(number)
    finally:
        bar.close()
    return shards, data_digest.hexdigest()


def _extract_rank_shards(extractor: AttentionExtractor, root: Path, sentences: list[Sentence], shard_size: int,
                         show: bool, on_shard: Callable[[int], None] | None, writes: _Writes, world: World
                         ) -> tuple[list[dict[str, Any]], str]:
    """This rank's block of whole shards, extracted (or verified and kept); on rank 0, every shard's index.

    Every rank checks all the shards' sentences against a finished store first (the same answer on every
    rank), and waits for the others before writing, so no rank rewrites the manifest while another reads it.
    Rank 0 collects the other ranks' shard indexes once all are done (the other ranks return none).
    """
    chunks = [sentences[i : i + shard_size] for i in range(0, len(sentences), shard_size)]
    lines = [[_sentence_json(s) for s in chunk] for chunk in chunks]
    checksums = [hashlib.sha256("\n".join(chunk).encode("utf-8")).hexdigest() for chunk in lines]
    for number, checksum in enumerate([*checksums, None]):
        writes.check(number, checksum, root)
    data_sha256 = hashlib.sha256("".join(checksums).encode("ascii")).hexdigest()
    world.barrier()  # every rank has read the old manifest
    mine = world.shard(len(chunks))
    bar = progress_bar(f"store (rank {world.rank} of {world.size})", total=sum(len(chunks[n]) for n in mine),
                       unit="sent", progress=show)
    shards: dict[int, dict[str, Any]] = {}
    try:
        for number in mine:
            entry = _finished_shard(root, number, checksums[number])
            if entry is None:
                writes.begin()
                entry = _write_shard(extractor, root, number, chunks[number], lines[number], checksums[number])
            shards[number] = entry
            bar.update(len(chunks[number]))
            if on_shard is not None:
                on_shard(number)
    finally:
        bar.close()
    world.barrier()  # every rank's shards are written
    if not world.is_main:
        return [], data_sha256
    for number in range(len(chunks)):
        if number not in shards:
            shards[number] = _rank_shard_index(root, number, checksums[number])
    return [shards[n] for n in range(len(chunks))], data_sha256


def _rank_shard_index(root: Path, number: int, checksum: str) -> dict[str, Any]:
    """The index another rank wrote for shard ``number`` (it verified or wrote the shard).

    Raises:
        StoreError: the index is missing or of other sentences (a rank did not finish its block).
    """
    path = root / f"{_shard_name(number)}.json"
    index = read_index(path) if path.exists() else {}
    if index is None or index.get("data_sha256") != checksum:
        raise StoreError(f"expected shard {number} of these sentences from another rank, found "
                         f"{'none' if not index else 'another one'}", path=path)
    return index


def _shard_name(number: int) -> str:
    return f"shard-{number:05d}"


def _finished_shard(root: Path, number: int, checksum: str) -> dict[str, Any] | None:
    """The index of shard ``number`` if it is finished, intact and of the same sentences, else None."""
    name = _shard_name(number)
    index_path = root / f"{name}.json"
    if not index_path.exists():
        return None
    index = read_index(index_path)
    if index is None:
        log.warning("%s: damaged shard index; extracting the shard again", index_path)
        return None
    if index.get("data_sha256") != checksum:
        raise StoreError(f"shard {number} was extracted from other sentences than the ones given now "
                         f"(data sha256 {index.get('data_sha256')} on disk, {checksum} now); use a new folder",
                         path=index_path)
    npy, lines = root / f"{name}.npy", root / f"{name}.sentences.jsonl"
    for path, intact in ((npy, lambda: file_sha256(npy) == index["npy_sha256"]),
                         (lines, lambda: hashlib.sha256(lines.read_bytes()[:-1]).hexdigest() == checksum)):
        if not own_file(root, path) or not intact():
            log.warning("%s: damaged or missing %s; extracting the shard again", index_path, path.name)
            return None
    return index


def _write_shard(extractor: AttentionExtractor, root: Path, number: int, chunk: list[Sentence],
                 lines: list[str], checksum: str) -> dict[str, Any]:
    name = _shard_name(number)
    before = {k: len(getattr(extractor.report, k)) for k in _REPORT_KEYS}
    records: list[dict[str, Any]] = []
    arrays: list[np.ndarray] = []
    offset = 0
    produced = iter(extractor.iter_attention(chunk))
    pending = next(produced, None)
    for sentence in chunk:
        if pending is None or pending[0] is not sentence:
            records.append({"skipped": True})
            continue
        wa = pending[1]
        flat = wa.weights.astype(np.float16).ravel()  # (L*H*n*n,)
        records.append({"offset": offset, "n": int(wa.is_special.shape[0]),
                        "is_special": wa.is_special.astype(int).tolist(), "meta": wa.meta})
        arrays.append(flat)
        offset += flat.shape[0]
        pending = next(produced, None)
    data = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.float16)
    npy = root / f"{name}.npy"
    _write_atomic(npy, lambda handle: _save_npy(handle, data), mode="wb")
    _write_atomic(root / f"{name}.sentences.jsonl", lambda handle: handle.write("\n".join(lines) + "\n"))
    report = {k: getattr(extractor.report, k)[before[k]:] for k in _REPORT_KEYS}
    index = {"name": name, "n_sentences": len(chunk), "n_stored": len(arrays), "data_sha256": checksum,
             "npy_sha256": file_sha256(npy), "records": records, **report}
    _write_atomic(root / f"{name}.json", _dump_json(index))
    return index


def _remove_stale(root: Path, n_shards: int) -> None:
    """Drop temp files (:mod:`probes.atomic_io`'s ``.shard-*.tmp-HOST-PID-N``; ``shard-*.tmp`` of earlier versions)
    and shards past the end (left by a run over a longer corpus)."""
    for path in root.glob(".shard-*"):
        if is_temporary(path.name) and not path.is_dir():
            try:
                path.unlink()
            except OSError as exc:
                raise WriteError.from_oserror(exc, path) from exc
    for path in root.glob("shard-*"):
        number = path.name.split(".", 1)[0].removeprefix("shard-")
        if not number.isdigit() and not path.name.endswith(".tmp"):
            continue  # not a file of the store's own naming: left alone
        if path.name.endswith(".tmp") or int(number) >= n_shards:
            try:
                path.unlink()
            except OSError as exc:
                raise WriteError.from_oserror(exc, path) from exc


def _read_manifest(root: Path) -> dict[str, Any]:
    """The store's manifest, every field a reader reads checked (:func:`check_manifest`)."""
    path = root / _MANIFEST
    if not path.exists() and not path.is_symlink():
        raise StoreError(f"no attention store here: expected {_MANIFEST}, found none", path=root)
    try:
        inside_folder(root, _MANIFEST, what="manifest")
        manifest = load_json(path, what="a JSON manifest")
    except InputError as exc:  # not JSON, not UTF-8, nested too deep, a pipe, a link leading out ...
        raise StoreError(exc.reason, path=exc.path, line=exc.line) from None
    if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise StoreError(f"expected format {STORE_FORMAT!r}, found {found!r}", path=path)
    return check_manifest(manifest, root)


def _read_finished(root: Path) -> dict[str, Any]:
    """The manifest of the finished store at ``root``; StoreError when there is none, or it is unfinished."""
    manifest = _read_manifest(root)
    if not manifest.get("complete"):
        raise StoreError("the store is incomplete (the extraction was interrupted); expected a finished "
                         "store, run extract_to_store (or `probes extract`) again to resume it",
                         path=root / _MANIFEST)
    return manifest


class AttentionStore:
    """A finished attention store, iterated as ``(Sentence, WordAttention)`` in corpus order.

    Skipped sentences (over-long with ``on_long="skip"``) are not yielded; they are listed in
    :attr:`report`. ``len()`` is the number of sentences yielded.

    Attributes:
        path: the store folder.
        info: what was recorded: extractor info (model, revision / weights hash, tokenizer,
            options), ``data_sha256``, ``source``/``source_sha256``, ``shard_size``, counts.
        report: ids of the skipped / truncated / windowed sentences, and their counts.

    Every shard file must be present and every ``.npy`` of the size its header implies (checked here);
    each shard's sha256 is checked the first time it is read (every shard here with ``verify=True``).

    Raises:
        StoreError: no store, or an unfinished one.
        DamagedStoreError: a shard file is missing or not what ``probes extract`` recorded.
    """

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = False) -> None:
        self.path = Path(path)
        manifest = _read_finished(self.path)
        self._manifest = manifest
        self.info: dict[str, Any] = attention_source_of({**manifest["info"], **{
            k: v for k, v in manifest.items() if k not in ("info", "shards", "report")}})
        self.report: dict[str, Any] = manifest["report"]
        info = manifest["info"]
        self.layers: tuple[int, ...] = tuple(info["layers"])
        self.heads: tuple[int, ...] = tuple(info["heads"])
        check_sizes(self.path, manifest)
        self._verified: set[str] = set()  # shards whose sha256 matched, checked once per store object
        if verify:
            for shard in manifest["shards"]:
                self._verify(shard)

    def _verify(self, shard: dict[str, Any]) -> None:
        """Check one shard's files against the manifest, the first time only."""
        if shard["name"] not in self._verified:
            check_shard(self.path, self._manifest, shard)
            self._verified.add(shard["name"])

    def __len__(self) -> int:
        return int(self._manifest["n_stored"])

    def __repr__(self) -> str:
        return f"AttentionStore({str(self.path)!r}, {len(self)} sentences, model={self.info.get('model')!r})"

    def __iter__(self) -> Iterator[tuple[Sentence, WordAttention]]:
        n_layers, n_heads = len(self.layers), len(self.heads)
        for shard in self._manifest["shards"]:
            self._verify(shard)
            data, records, sentences = self._open_shard(shard, n_layers * n_heads)
            shown = self.path / f"{shard['name']}.sentences.jsonl"  # as errors name it
            with sentences.open("rb") as lines:  # each line decoded on its own: a bad byte names its line
                for number, (entry, line) in enumerate(paired(records, lines, shown), 1):
                    if entry.get("skipped"):
                        continue
                    n, off = entry["n"], entry["offset"]
                    weights = np.array(data[off : off + n_layers * n_heads * n * n], dtype=np.float32)
                    yield sentence_from_json(line, shown, number), WordAttention(
                        weights.reshape(n_layers, n_heads, n, n), np.asarray(entry["is_special"], dtype=bool),
                        self.layers, self.heads, dict(entry.get("meta", {})))
            del data

    def sentences(self) -> Iterator[Sentence]:
        """The stored sentences in order, without their attention (the sentence files only: a cheap pass)."""
        for shard in self._manifest["shards"]:
            _, records, sentences = self._open_shard(shard, len(self.layers) * len(self.heads))
            shown = self.path / f"{shard['name']}.sentences.jsonl"
            with sentences.open("rb") as lines:
                for number, (entry, line) in enumerate(paired(records, lines, shown), 1):
                    if not entry.get("skipped"):
                        yield sentence_from_json(line, shown, number)

    def _open_shard(self, shard: dict[str, Any], per_word: int) -> tuple[np.ndarray, list[Any], Path]:
        """A shard's values (memory-mapped), its checked records and its sentences file, each a regular file
        inside the store (checked by :meth:`_verify`): StoreError naming the file and record otherwise."""
        npy, index_path, sentences = (shard_path(self.path, shard["name"], s)
                                      for s in (".npy", ".json", ".sentences.jsonl"))
        try:
            header = npy_file_header(npy, what=f"shard {shard['name']}")
            index = load_json(index_path, what="a JSON shard index")
        except InputError as exc:
            raise StoreError(exc.reason, path=exc.path, line=exc.line) from None
        records = check_records(index, self.path / f"{shard['name']}.json", shard, header.count, per_word)
        if not header.count:
            return np.zeros(0, dtype=np.float16), records, sentences
        try:
            data = np.memmap(npy, dtype=header.dtype, mode="r", offset=header.offset, shape=header.shape)
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read shard {shard['name']}: {exc}", path=self.path) from exc
        return data, records, sentences


def open_store(path: str | os.PathLike[str], *, verify: bool = False) -> AttentionStore:
    """Open a finished attention store for streaming (see :class:`AttentionStore`).

    Shard sizes are checked now, each shard's sha256 the first time it is read; ``verify=True`` checks
    every shard's sha256 now (a read of the whole store).
    """
    return AttentionStore(path, verify=verify)


def verify_store(path: str | os.PathLike[str]) -> Verification:
    """Every damaged file of the finished store at ``path`` (``.damage`` empty: intact), by size and sha256.

    Reads every shard once; unlike :func:`open_store` it lists all the damage instead of stopping at the first.

    Raises:
        StoreError: no store at ``path``, or an unfinished one.
    """
    root = Path(path)
    manifest = _read_finished(root)
    return Verification(root, manifest["info"], len(manifest["shards"]), int(manifest["n_sentences"]),
                        tuple(damaged_shards(root, manifest)))
