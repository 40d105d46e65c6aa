"""The run record: what was run, on what, with which options and versions, and where the time went.

Every pipeline builds its record with :func:`run_record` (plus :func:`data_record` /
:func:`store_record` for its inputs) and writes it once, last, with :func:`write_record`,
so ``run.json`` lists every file of the run, itself included.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from probes.errors import ConfigError
from probes.heads.naming import INDEXING_NOTE
from probes.reports.tables import write_json
from probes.world import World

__all__ = ["versions", "invocation", "git_commit", "run_record", "data_record", "store_record", "write_record",
           "prepare_out_dir", "check_out_dir", "inputs_record", "inputs_lines", "rank_out_dir", "FIGURE_FORMATS"]

log = logging.getLogger("probes")

#: File formats a run's figures can be written in (``write(..., figure_format=...)``).
FIGURE_FORMATS: tuple[str, ...] = ("png", "svg", "pdf")

#: Libraries whose versions can change the numbers of a run.
_LIBRARIES = ("probes", "torch", "transformers", "tokenizers", "numpy", "scikit-learn", "conllu", "spacy")


def versions() -> dict[str, str]:
    """Versions of Python and of the libraries that change numbers (those installed)."""
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def git_commit(folder: str | Path | None = None) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git checkout of this project holding ``folder``, else None.

    ``folder`` defaults to this package; None when git is not installed, the package is not in a checkout of
    this project (an install inside some other repository does not count), or git fails: never an error.
    """
    package = Path(__file__).resolve().parents[1]  # the probes/ package folder
    where = Path(folder) if folder is not None else package
    try:
        top, head = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel", "HEAD"],
                                   capture_output=True, text=True, timeout=5, check=True).stdout.split()
        if folder is None and Path(top).resolve() / "probes" != package:
            return None
        status = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return {"commit": head, "dirty": bool(status.strip())}


def invocation() -> dict[str, Any]:
    """How the run was started: working directory, full command line, code version and git commit."""
    from probes._version import __version__

    return {"cwd": os.getcwd(), "argv": list(sys.argv), "probes_version": __version__, "git": git_commit()}


def run_record(command: str, **fields: Any) -> dict[str, Any]:
    """A new record: ``{"command": command, **fields}``; ``versions`` and ``invocation`` are added unless given."""
    record: dict[str, Any] = {"command": command, **fields}
    record.setdefault("versions", versions())
    record.setdefault("invocation", invocation())
    return record


def data_record(spec: str | None, path: str | Path, sentences: int, **extra: Any) -> dict[str, Any]:
    """How a data file was named (``spec``), where it was read from, its checksum and size."""
    from probes.checksum import file_sha256

    out: dict[str, Any] = {} if spec is None else {"spec": spec}
    out.update(path=str(Path(path).resolve()), sha256=file_sha256(path), sentences=sentences, **extra)
    return out


def store_record(store: Any) -> dict[str, Any]:
    """An attention store as data: its folder, source file and checksums, and what it holds."""
    info = store.info
    return {"store": str(Path(store.path).resolve()), "source": info.get("source"), "source_sha256": info.get("source_sha256"),
            "data_sha256": info.get("data_sha256"), "sentences": info.get("n_sentences"),
            "stored": len(store), "store_report": {k: v for k, v in store.report.items() if k.startswith("n_")}}


def write_record(record: Mapping[str, Any], out_dir: str | Path, files: Iterable[str | Path] = ()) -> Path:
    """Write ``record`` to ``out_dir/run.json``, with the indexing note and the run's ``files``.

    ``files`` are the other paths the run wrote (absolute or relative to ``out_dir``);
    ``run.json`` itself is appended to the sorted list.
    """
    out = Path(out_dir)
    names = sorted(_relative(Path(p), out) for p in files)
    full = {**record, "indexing": record.get("indexing", INDEXING_NOTE), "files": names + ["run.json"]}
    return write_json(full, out / "run.json")


def _relative(path: Path, out: Path) -> str:
    """``path`` as written in ``files``: relative to ``out`` when inside it."""
    return str(path.relative_to(out)) if path.is_relative_to(out) else str(path)


# ---------------------------------------------------------------------------------- output folders
def check_out_dir(out_dir: str | Path, command: str | None, *, overwrite: bool = False) -> dict[str, Any] | None:
    """Refuse, before any work, an output folder that :func:`prepare_out_dir` would refuse.

    Returns the ``run.json`` record of a previous output of the same ``command`` found there (to be
    replaced), else None. Nothing is written or removed.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: output folder expected, found a file")
    if not out.exists() or not any(out.iterdir()):
        return None
    previous = _previous_record(out)
    same = previous is not None and command is not None and previous.get("command") == command
    if not (same or overwrite):
        what = f"the output of {previous.get('command')!r}" if previous else "other files"
        raise ConfigError(f"{out}: output folder is not empty (it holds {what}); choose another folder "
                          "or pass --overwrite (overwrite=True) to write into it")
    return previous


def prepare_out_dir(out_dir: str | Path, command: str | None, *, overwrite: bool = False) -> Path:
    """Make ``out_dir`` ready for a run's files, refusing to overwrite other files silently.

    An empty or missing folder is fine. A folder holding a previous output of the same ``command``
    (its ``run.json`` says so) is replaced, with a warning: the files that ``run.json`` lists are
    removed first, so no stale file of the old run stays behind. Any other non-empty folder is
    refused with a :class:`ConfigError` naming it and ``--overwrite``, unless ``overwrite`` (then
    files are written over, others left alone).
    """
    out = Path(out_dir)
    previous = check_out_dir(out, command, overwrite=overwrite)
    out.mkdir(parents=True, exist_ok=True)
    if previous is not None:
        log.warning("replacing the previous output of %r in %s", previous.get("command"), out)
        for name in previous.get("files", []):
            old = (out / str(name)).resolve()
            if old.is_file() and old.is_relative_to(out.resolve()):
                old.unlink()
    return out


def rank_out_dir(out_dir: str | Path, figures: bool = True) -> tuple[Path, bool]:
    """Where this process writes a run's files: ``(out_dir, figures)`` on rank 0 (or in one process).

    Under ``torchrun`` every rank holds the same merged results, and only rank 0 writes to ``out_dir``;
    another rank writes its copy, without figures, to a temporary folder removed when it exits, so that
    code reading the written files (a command's summary) runs unchanged on every rank.
    """
    if World.current().is_main:
        return Path(out_dir), figures
    import atexit
    import shutil
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="probes-rank-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    return scratch / "out", False


def _previous_record(out: Path) -> dict[str, Any] | None:
    """The ``run.json`` of a previous run in ``out``, if any (None when absent or unreadable)."""
    try:
        record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


# ---------------------------------------------------------------------------------- inputs
def inputs_record(seen: int, analysed: int, *, skipped: Sequence[str] = (), truncated: Sequence[str] = (),
                  windowed: Sequence[str] = (), cut: Sequence[str] = (), unit: str = "sentences",
                  max_tokens: int | None = None, data: str | None = None) -> dict[str, Any]:
    """One split's ``inputs`` entry: inputs seen and analysed, and the ids skipped, truncated, windowed or cut.

    ``skipped``: over the model's maximum and not run (``on_long="skip"``); ``truncated``: cut to fit,
    so not analysed; ``windowed``: run in overlapping windows, analysed; ``cut``: cut to the leading words
    that fit and analysed as such (sentence-level objectives). ``seen = analysed + skipped + truncated``
    always holds. ``data``: the split's name in outputs.
    """
    return {"data": data, "unit": unit, "seen": int(seen), "analysed": int(analysed), "max_tokens": max_tokens,
            "n_skipped": len(skipped), "n_truncated": len(truncated), "n_windowed": len(windowed), "n_cut": len(cut),
            "skipped": list(skipped), "truncated": list(truncated), "windowed": list(windowed), "cut": list(cut)}


def _ids(ids: Sequence[str], limit: int | None) -> str:
    if limit is None or len(ids) <= limit:
        return ", ".join(ids)
    return ", ".join(ids[:limit]) + f" and {len(ids) - limit} more"


#: How the splits of an ``inputs`` section are named in sentences.
_SPLIT_NAMES = {"select": "selection", "eval": "evaluation", "train": "training"}


def inputs_lines(inputs: Mapping[str, Mapping[str, Any]], *, limit: int | None = 10) -> list[str]:
    """One line per split of an ``inputs`` section (``{split: inputs_record}``), naming the ids cut or windowed
    (the first ``limit`` of each kind; None: all), e.g. ``report split (test.conllu): 9 of 10 sentences
    analysed; over 64 tokens: 1 skipped: s600``."""
    lines = []
    for name, split in inputs.items():
        unit = split.get("unit", "sentences")
        phase = _SPLIT_NAMES.get(name, name)
        label = f"{phase} split ({split['data']})" if split.get("data") else f"{phase} split"
        text = f"{label}: {split['analysed']} of {split['seen']} {unit} analysed"
        parts = [f"{len(split[k])} {label}: {_ids(split[k], limit)}"
                 for k, label in (("skipped", "skipped"), ("truncated", "truncated, not analysed"),
                                  ("windowed", "run in windows, analysed"),
                                  ("cut", "cut to the words that fit, analysed")) if split.get(k)]
        most = f"over {split['max_tokens']} tokens" if split.get("max_tokens") else "over the model's maximum"
        lines.append(text + (f"; {most}: " + "; ".join(parts) if parts else f"; none {most}"))
    return lines
