"""Output folders: one run per folder at a time, checked writable before any work, never another run's files.

:func:`check_out_dir` (the commands call it first, before the model runs) and :func:`prepare_out_dir`
(:func:`~probes.reports.writer.write_output` calls it) *claim* a folder for this process:

1. it is created if missing, and locked (:class:`probes.locks.FolderLock`, ``.probes.lock`` with the
   holder's pid): a second run into the same folder stops at once, naming the holder; a lock left by a
   dead process is taken over;
2. a folder holding anything but a previous output of the same command is refused (``--overwrite``);
   a folder that a run of the same command left unfinished (killed, interrupted: no ``run.json``, but its
   :data:`MARKER`) is that command's own, and is reused;
3. :data:`MARKER` (``.probes-run.json``: command, pid, start) is written through a temporary file,
   which is also the check that the folder is writable (a read-only folder or a full disk is found here,
   before any model work, as one line naming the folder).

:func:`release_out_dir` ends the claim: the marker goes once ``run.json`` is written (or when the run
stopped before writing anything: a model that failed to load leaves a previous output as it was), the lock
is removed, and a folder the claim created and nothing was written to is removed again. Claims still held
when the process exits are released then; the marker of a run stopped while writing stays, so the rerun
reuses the folder.

The folder's path is checked first (:func:`~probes.reports.names.check_path`): a NUL or another control
character is one ConfigError, never a ValueError from ``os.stat``. A previous run's ``run.json`` and marker are
read through :mod:`probes.safe_read` (regular files, bounded), and only the files of its list that lie inside
the folder are removed.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import datetime
import json
import logging
import os
from pathlib import Path
from typing import Any

from probes.errors import ConfigError, InputError, WriteError
from probes.locks import LOCK_NAME, FolderLock
from probes.reports.atomic import is_temporary, remove_temporary, write_text
from probes.reports.names import check_path
from probes.safe_read import load_json
from probes.world import launched_main

__all__ = ["check_out_dir", "prepare_out_dir", "lock_out_dir", "release_out_dir", "check_writable",
           "out_dir_content", "release_claims", "MARKER"]

log = logging.getLogger("probes")

#: The mark of a run writing into (or stopped while writing into) its folder; removed once ``run.json`` is written.
MARKER = ".probes-run.json"


@dataclasses.dataclass
class _Claim:
    lock: FolderLock
    created: bool  # the claim made the folder (removed again when nothing was written)
    marked: bool = False  # the folder held a marker already (an unfinished run's: kept unless finished)
    writing: bool = False  # files are being written (prepare_out_dir ran): the marker stays until run.json


#: The largest ``run.json`` or marker read from an output folder (a run's record lists its files: a few MB at most).
_MAX_RECORD_BYTES = 16 << 20

#: Folders this process has claimed, by resolved path.
_CLAIMS: dict[str, _Claim] = {}


def _bookkeeping(name: str) -> bool:
    """Files of the folder's bookkeeping, not of any run's output: the lock, the marker, temporary files."""
    return name in (LOCK_NAME, MARKER) or is_temporary(name)


def _main_rank() -> bool:
    """False on ranks other than 0 of a ``torchrun`` run (they write elsewhere: nothing to claim)."""
    return launched_main()


def check_out_dir(out_dir: str | Path, command: str | None, *, overwrite: bool = False) -> dict[str, Any] | None:
    """Claim ``out_dir`` for this run (see the module) before any work; refuse it as :func:`prepare_out_dir` would.

    Returns the ``run.json`` record of a previous output of the same ``command`` found there (to be
    replaced; ``{"command": command, "files": [], "unfinished": True}`` for an unfinished one), else None.
    No file of a previous run is removed.

    Raises:
        ConfigError: the folder is a file, or holds other files (without ``overwrite``).
        FolderLockedError: another live process writes into the folder.
        WriteError: the folder cannot be created or written (permission, read-only, disk full).
    """
    out = _output_path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: output folder expected, found a file")
    if not _main_rank():
        return _inspect(out, command, overwrite)
    try:
        key = _claim(out, command)
    except WriteError:
        _inspect(out, command, overwrite)  # a folder of other files is refused as such, read-only or not
        raise
    try:
        previous = _inspect(out, command, overwrite)
        check_writable(out, command)
    except BaseException:
        release_out_dir(out, key=key)
        raise
    return previous


def prepare_out_dir(out_dir: str | Path, command: str | None, *, overwrite: bool = False) -> Path:
    """Claim ``out_dir`` (:func:`check_out_dir`) and make it ready for a run's files.

    An empty or missing folder is fine. A folder holding a previous output of the same ``command``
    (its ``run.json`` says so) is replaced, with a warning: the files that ``run.json`` lists are
    removed first, so no stale file of the old run stays behind; one the same command left unfinished
    is reused, its temporary files removed. Any other non-empty folder is refused with a
    :class:`ConfigError` naming it and ``--overwrite``, unless ``overwrite`` (then files are written
    over, others left alone).
    """
    out = _output_path(out_dir)
    previous = check_out_dir(out, command, overwrite=overwrite)
    out.mkdir(parents=True, exist_ok=True)
    if (claim := _CLAIMS.get(str(out.resolve()))) is not None:
        claim.writing = True
    if previous is not None:
        log.warning("%s the previous output of %r in %s", "reusing the unfinished" if previous.get("unfinished")
                    else "replacing", previous.get("command"), out)
        for old in _listed_files(out, previous.get("files")):
            old.unlink()
    remove_temporary(out)
    return out


def _output_path(out_dir: str | Path) -> Path:
    """``out_dir`` as a Path, if it can name a folder; a ConfigError for a NUL or another control character."""
    return Path(check_path(out_dir, what="a folder path", name="output folder"))


def _listed_files(out: Path, names: Any) -> list[Path]:
    """The regular files a previous ``run.json`` lists (``files``) that lie inside ``out`` once resolved; an entry
    that is not a plain relative path inside the folder (absolute, ``..``, a link leading out, a NUL) is left
    alone, with a warning."""
    root = out.resolve()
    found: list[Path] = []
    for name in names if isinstance(names, list) else []:
        try:
            old = (out / check_path(name, name="a listed file")).resolve()
        except (ValueError, OSError, RuntimeError):  # ValueError: ConfigError (not a string, a NUL); a link loop
            old = None
        if old is None or not old.is_relative_to(root):
            log.warning("%s: run.json lists %r, which is not a file inside the folder; left alone", out, name)
        elif old.is_file():
            found.append(old)
    return found


def lock_out_dir(out_dir: str | Path, what: str | None) -> Path:
    """Claim ``out_dir`` for a run that manages its own content (an experiment's run folder): lock it and
    check it writable (no marker is left), nothing refused; :func:`release_out_dir` ends it."""
    out = _output_path(out_dir)
    if _main_rank():
        key = _claim(out, what)
        try:
            check_writable(out, what, keep=False)
        except BaseException:
            release_out_dir(out, key=key)
            raise
    return out


def check_writable(out_dir: str | Path, command: str | None = None, *, keep: bool = True) -> Path:
    """Write :data:`MARKER` into ``out_dir`` through a temporary file (removed again unless ``keep``): a
    WriteError naming the folder when it cannot be written (read-only, permission denied, disk full)."""
    out = Path(out_dir)
    marker = {"command": command, "pid": os.getpid(),
              "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
    try:
        write_text(out / MARKER, json.dumps(marker) + "\n")
        if not keep:
            (out / MARKER).unlink()
    except WriteError as exc:
        raise WriteError(f"output folder is not writable: {exc.reason}", path=out) from exc
    except OSError as exc:
        raise WriteError(f"output folder is not writable: {exc.strerror or exc}", path=out) from exc
    return out


def out_dir_content(out_dir: str | Path) -> list[Path]:
    """What ``out_dir`` holds besides its bookkeeping (lock, marker, temporary files); empty when missing."""
    return _content(Path(out_dir))


def release_out_dir(out_dir: str | Path, *, finished: bool = False, key: str | None = None) -> None:
    """End this process' claim on ``out_dir`` (see the module); ``finished``: its ``run.json`` is written."""
    out = Path(out_dir)
    claim = _CLAIMS.pop(key or str(out.resolve()), None)
    if claim is None:
        return
    try:
        if finished or not (claim.writing or claim.marked) or not _content(out):
            with contextlib.suppress(OSError):
                (out / MARKER).unlink(missing_ok=True)
    finally:
        claim.lock.release()
    if claim.created:
        with contextlib.suppress(OSError):
            out.rmdir()  # only when empty


def _claim(out: Path, what: str | None) -> str:
    """Lock ``out`` for this process (once; created if missing); its key in :data:`_CLAIMS`."""
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"cannot create the output folder ({exc.strerror or exc})", path=out) from exc
    key = str(out.resolve())
    if key not in _CLAIMS:
        lock = FolderLock(out, what=what or "probes")
        try:
            lock.acquire()
        except BaseException as exc:
            if created:
                with contextlib.suppress(OSError):
                    out.rmdir()
            if isinstance(exc, WriteError):  # the lock is the first file written: name the folder
                raise WriteError(f"output folder is not writable: {exc.reason}", path=out) from exc
            raise
        _CLAIMS[key] = _Claim(lock, created, marked=(out / MARKER).exists())
    return key


def _content(out: Path) -> list[Path]:
    """What ``out`` holds besides its bookkeeping (empty when it does not exist)."""
    if not out.is_dir():
        return []
    return [p for p in out.iterdir() if not _bookkeeping(p.name)]


def _inspect(out: Path, command: str | None, overwrite: bool) -> dict[str, Any] | None:
    """The previous record of ``command`` in ``out`` (see :func:`check_out_dir`); a ConfigError for a foreign folder."""
    if not _content(out):
        return None
    previous = _read_json(out / "run.json")
    found = previous.get("command") if previous is not None else None
    if command is not None and found == command:
        return previous
    marker = _read_json(out / MARKER) if previous is None else None
    if command is not None and marker is not None and marker.get("command") == command:
        return {"command": command, "files": [], "unfinished": True}
    if overwrite:
        return previous
    what = (f"the output of {found!r}" if previous is not None else
            f"the unfinished output of {marker.get('command')!r}" if marker is not None else "other files")
    raise ConfigError(f"{out}: output folder is not empty (it holds {what}); choose another folder "
                      "or pass --overwrite (overwrite=True) to write into it")


def _read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, if any (None when absent, not a regular file, too large or not JSON: a folder
    holding such a file is then "other files", refused without ``--overwrite``)."""
    try:
        record = load_json(path, what="a run record", max_bytes=_MAX_RECORD_BYTES)
    except (InputError, OSError):
        return None
    return record if isinstance(record, dict) else None


@atexit.register
def release_claims() -> None:
    """Release every claim this process still holds (a run that failed or was interrupted before its
    ``run.json``): the CLI calls it when a command ends, and it runs when the process exits."""
    for key in list(_CLAIMS):
        with contextlib.suppress(Exception):
            release_out_dir(Path(key), key=key)
