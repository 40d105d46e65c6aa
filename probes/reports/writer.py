"""The one way a run writes its files: :func:`write_output`.

Every command's ``write`` goes through it, so every output folder is made the same way:

1. the figure format is checked (``png``, ``svg`` or ``pdf``) before anything is written;
2. under ``torchrun`` only rank 0 writes to the folder asked for (other ranks write a scratch copy);
3. the folder is claimed (:mod:`probes.reports.outdir`): locked against a second run, checked writable, and
   refused when it holds anything but a previous (or unfinished) output of the same command
   (``--overwrite``); a previous output of the same command is replaced, its listed files removed first;
4. the command's report writer adds its files through an :class:`OutputFolder`: every name checked safe
   (names made from data go through :func:`probes.reports.names.safe_name`), every path checked to stay
   inside the folder, every file written to a temporary name and renamed into place
   (:mod:`probes.reports.atomic`);
5. ``run.json`` is written last, listing every file of the run, itself included: the mark of a finished run.
   It names the run's main saved result (``result``: the first one saved through :meth:`OutputFolder.save`),
   so that ``probes.load(out_dir)`` reads it without guessing.

The paths written come back keyed by their path relative to the folder (``figures/overview.png``).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from probes.errors import ConfigError, WriteError
from probes.heads.naming import INDEXING_NOTE
from probes.reports import atomic
from probes.reports.names import check_name, inside
from probes.reports.outdir import (
    check_out_dir,
    check_writable,
    lock_out_dir,
    out_dir_content,
    prepare_out_dir,
    release_out_dir,
)
from probes.run_record import RunRecord
from probes.world import World

__all__ = ["OutputFolder", "write_output", "FIGURE_FORMATS", "check_figure_format", "check_out_dir",
           "prepare_out_dir", "rank_out_dir", "write_record", "check_writable", "lock_out_dir", "release_out_dir",
           "out_dir_content"]

log = logging.getLogger("probes")

#: File formats a run's figures can be written in (``write(..., figure_format=...)``).
FIGURE_FORMATS: tuple[str, ...] = ("png", "svg", "pdf")

#: A command's report writer: adds its files to the folder and returns the run record to write.
ReportWriter = Callable[["OutputFolder"], RunRecord]


def check_figure_format(figure_format: str) -> str:
    """``figure_format`` if it is one of :data:`FIGURE_FORMATS`, else a ConfigError naming them."""
    if figure_format not in FIGURE_FORMATS:
        raise ConfigError(f"figure_format: expected one of {', '.join(FIGURE_FORMATS)}, found {figure_format!r}")
    return figure_format


class OutputFolder:
    """The folder of one run while it is written: files are added through it, keyed by relative path.

    Attributes:
        root: the folder.
        figures: whether figures are drawn (False on ranks other than 0 of a ``torchrun`` run).
        figure_format: ``png``, ``svg`` or ``pdf``.
        files: every file added so far, by its path relative to ``root`` (posix), in the order added.
        result: the folder (relative to ``root``) of the run's main saved result: the first one :meth:`save`
            wrote; ``run.json`` names it (``result``), and :func:`probes.load` reads it from the run folder.
    """

    def __init__(self, root: Path, *, figures: bool = True, figure_format: str = "png") -> None:
        self.root = root
        self.figures = figures
        self.figure_format = figure_format
        self.files: dict[str, Path] = {}
        self.result: str | None = None
        self._listed: list[Path] = []
        self._t0 = time.perf_counter()

    def path(self, name: str) -> Path:
        """Where the file ``name`` goes: relative, ``/``-separated, every part a safe file name
        (:func:`~probes.reports.names.check_name`), inside the folder once resolved; its folder is made."""
        check_name(name)
        path = self.root.joinpath(*PurePosixPath(name).parts)
        inside(self.root, path, label=name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError.from_oserror(exc, path.parent) from exc
        return path

    def add(self, *paths: Path) -> None:
        """Record files written into the folder (by any writer), keyed by their relative path; a ConfigError
        for a path outside the folder."""
        for path in paths:
            inside(self.root, path)
            self.files[self._key(path)] = path

    def add_all(self, paths: Iterable[Path]) -> None:
        """:meth:`add` for every path of ``paths``."""
        self.add(*paths)

    def list_only(self, *paths: Path) -> None:
        """Files (or folders) that ``run.json`` lists but the returned paths leave out (a saved result's files)."""
        for path in paths:
            inside(self.root, path)
        self._listed.extend(paths)

    def text(self, name: str, text: str) -> Path:
        """Write ``text`` (UTF-8) to ``name`` (whole or not at all) and add it."""
        path = atomic.write_text(self.path(name), text)
        self.add(path)
        return path

    def save(self, name: str, result: Any) -> Path:
        """Save a :class:`~probes.results.Result` under ``name``; ``run.json`` lists its two files. The first result
        saved is the run's main one (:attr:`result`): ``run.json`` names it, and ``probes.load(run folder)`` reads it."""
        from probes.results import ARRAYS_FILE, RESULT_FILE

        folder = result.save(self.path(f"{name}/{RESULT_FILE}").parent)
        self.list_only(folder / RESULT_FILE, folder / ARRAYS_FILE)
        if self.result is None:
            self.result = name
        return folder

    def seconds(self) -> float:
        """Seconds since the folder was opened (the run's writing time)."""
        return time.perf_counter() - self._t0

    def listed(self) -> list[Path]:
        """Every path ``run.json`` lists, but ``run.json`` itself."""
        return [*self.files.values(), *self._listed]

    def _key(self, path: Path) -> str:
        path = Path(path)
        return path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else str(path)


def write_output(out_dir: str | Path, command: str | None, write: ReportWriter, *, figures: bool = True,
                 figure_format: str = "png", overwrite: bool = False, own_folder: bool = False) -> dict[str, Path]:
    """Write one run's files into ``out_dir`` (see the module) and return them by relative path.

    Args:
        out_dir: the folder; refused (ConfigError) when it holds other files than a previous output of
            ``command``, unless ``overwrite``.
        command: the command whose output the folder holds (``run.json``'s ``command``).
        write: the report writer: adds its files to the :class:`OutputFolder` and returns the run record.
        figures, figure_format: whether figures are drawn, and as ``png``, ``svg`` or ``pdf``.
        own_folder: the run already owns the folder (an experiment's run folder: its runner prepared it, and
            its record lists the units it holds): the folder is not prepared, and ``run.json`` is the record
            as returned (naming its main saved result, if any), without a file list.
    """
    check_figure_format(figure_format)
    out_dir, figures = rank_out_dir(out_dir, figures)  # under torchrun only rank 0 writes to out_dir
    out = lock_out_dir(out_dir, command) if own_folder else prepare_out_dir(out_dir, command, overwrite=overwrite)
    finished = False
    try:
        folder = OutputFolder(out, figures=figures, figure_format=figure_format)
        record = RunRecord.of(write(folder))
        if folder.result is not None:  # the main saved result: what probes.load(out_dir) reads
            record = record.updated(result=folder.result)
        folder.files["run.json"] = (record.save(out / "run.json") if own_folder
                                    else write_record(record, out, folder.listed()))
        finished = True
    finally:
        release_out_dir(out, finished=finished)
    return folder.files


def write_record(record: RunRecord | Mapping[str, Any], out_dir: str | Path, files: Iterable[str | Path] = ()) -> Path:
    """Write ``record`` to ``out_dir/run.json`` (:meth:`RunRecord.save`), with the indexing note and the run's
    ``files``.

    ``files`` are the other paths the run wrote (absolute or relative to ``out_dir``);
    ``run.json`` itself is appended to the sorted list.
    """
    out = Path(out_dir)
    names = sorted(_relative(Path(p), out) for p in files)
    record = RunRecord.of(record)
    indexing = record.details.indexing if record.has("indexing") else INDEXING_NOTE
    return record.updated(indexing=indexing, files=names + ["run.json"]).save(out / "run.json")


def _relative(path: Path, out: Path) -> str:
    """``path`` as written in ``files``: relative to ``out`` when inside it."""
    return str(path.relative_to(out)) if path.is_relative_to(out) else str(path)


# ---------------------------------------------------------------------------------- output folders
def rank_out_dir(out_dir: str | Path, figures: bool = True) -> tuple[Path, bool]:
    """Where this process writes a run's files: ``(out_dir, figures)`` on rank 0 (or in one process).

    Under ``torchrun`` every rank holds the same merged results, and only rank 0 writes to ``out_dir``;
    another rank writes its copy, without figures, to a temporary folder removed when it exits, so that
    code reading the written files runs unchanged on every rank.
    """
    if "torch.distributed" not in sys.modules or World.current().is_main:  # no process group without it
        return Path(out_dir), figures
    if any(Path(out_dir).is_relative_to(s) for s in _SCRATCH):  # a nested write (the atlas' leaderboard/)
        return Path(out_dir), False
    import atexit
    import shutil
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="probes-rank-"))
    _SCRATCH.append(scratch)
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return scratch / "out", False


#: This process' scratch folders from :func:`rank_out_dir` (a folder inside one is this rank's already).
_SCRATCH: list[Path] = []
