"""The run record: what was run, on what, with which options and versions, and where the time went.

Every pipeline builds its :class:`~probes.run_record.RunRecord` here, in ``runs/``: :func:`run_record` (plus :func:`data_record` /
:func:`store_record` for its inputs and :func:`inputs_record` for what happened to them); the
report writer (:func:`probes.reports.writer.write_output`) writes it last, as ``run.json``.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from probes.run_record import RunRecord

__all__ = ["versions", "invocation", "git_commit", "run_record", "data_record", "store_record", "inputs_record"]

#: Libraries whose versions can change the numbers of a run.
_LIBRARIES = ("probes", "torch", "transformers", "tokenizers", "numpy", "scikit-learn", "conllu", "spacy")


def versions() -> dict[str, str]:
    """Versions of Python and of the libraries that change numbers (those installed)."""
    import importlib.metadata as md

    from probes._version import DISTRIBUTION

    out = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:  # probes is installed as DISTRIBUTION (PyPI's "probes" is another project); the key stays "probes"
            out[name] = md.version(DISTRIBUTION if name == "probes" else name)
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


def run_record(command: str, **fields: Any) -> RunRecord:
    """A new record: ``command`` then ``fields`` in order; ``versions`` and ``invocation`` are added unless given,
    and ``weights_source`` (the GGUF file the weights were dequantised from) when ``model_path`` is a folder
    converted from one."""
    given: dict[str, Any] = {"command": command, **fields}
    if "weights_source" not in given and isinstance(given.get("model_path"), (str, Path)):
        from probes.extraction.gguf import gguf_source

        source = gguf_source(given["model_path"])
        if source:
            given["weights_source"] = source
    given.setdefault("versions", versions())
    given.setdefault("invocation", invocation())
    return RunRecord.of(given)


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


def inputs_record(seen: int, analysed: int, *, skipped: Sequence[str] = (), truncated: Sequence[str] = (),
                  windowed: Sequence[str] = (), cut: Sequence[str] = (), unit: str = "sentences",
                  max_tokens: int | None = None, data: str | None = None, over_budget: Sequence[str] = (),
                  max_attention_mb: float | None = None) -> dict[str, Any]:
    """One split's ``inputs`` entry: inputs seen and analysed, and the ids skipped, truncated, windowed or cut.

    ``skipped``: over the model's maximum and not run (``on_long="skip"``); ``truncated``: cut to fit,
    so not analysed; ``windowed``: run in overlapping windows, analysed; ``cut``: cut to the leading words
    that fit and analysed as such (sentence-level objectives). ``seen = analysed + skipped + truncated``
    always holds. ``data``: the split's name in outputs. ``over_budget``: those of the above handled so because
    their attention would not fit the memory budget (``max_attention_mb``) although they fit the model; the
    entry names them (``n_over_budget``, ``over_budget``, ``max_attention_mb``) only when there are any.
    """
    return {"data": data, "unit": unit, "seen": int(seen), "analysed": int(analysed), "max_tokens": max_tokens,
            "n_skipped": len(skipped), "n_truncated": len(truncated), "n_windowed": len(windowed), "n_cut": len(cut),
            "skipped": list(skipped), "truncated": list(truncated), "windowed": list(windowed), "cut": list(cut),
            **({"n_over_budget": len(over_budget), "over_budget": list(over_budget),
                "max_attention_mb": max_attention_mb} if over_budget else {})}
