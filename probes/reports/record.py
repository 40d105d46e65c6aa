"""The run record: what was run, on what, with which options and versions, and where the time went.

Every pipeline builds its record with :func:`run_record` (plus :func:`data_record` /
:func:`store_record` for its inputs) and writes it once, last, with :func:`write_record`,
so ``run.json`` lists every file of the run, itself included.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from probes.heads.naming import INDEXING_NOTE
from probes.reports.tables import write_json

__all__ = ["versions", "run_record", "data_record", "store_record", "write_record"]

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


def run_record(command: str, **fields: Any) -> dict[str, Any]:
    """A new record: ``{"command": command, **fields}``; ``versions`` is added unless given."""
    record: dict[str, Any] = {"command": command, **fields}
    record.setdefault("versions", versions())
    return record


def data_record(spec: str | None, path: str | Path, sentences: int, **extra: Any) -> dict[str, Any]:
    """How a data file was named (``spec``), where it was read from, its checksum and size."""
    from probes.checksum import file_sha256

    out: dict[str, Any] = {} if spec is None else {"spec": spec}
    out.update(path=str(path), sha256=file_sha256(path), sentences=sentences, **extra)
    return out


def store_record(store: Any) -> dict[str, Any]:
    """An attention store as data: its folder, source file and checksums, and what it holds."""
    info = store.info
    return {"store": str(store.path), "source": info.get("source"), "source_sha256": info.get("source_sha256"),
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
