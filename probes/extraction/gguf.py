"""GGUF model files as model names: converted once into a cached model folder, then loaded like any folder.

A ``.gguf`` file (llama.cpp's format, often quantised: Q4_1, Q8_0 ...), a folder holding exactly one and no
``config.json``, or ``package:NAME`` for a package that ships one, names a model. The first use converts it
with transformers' GGUF loader (``from_pretrained(folder, gguf_file=name)``: every weight dequantised to
float32) and saves model and tokenizer with ``save_pretrained`` into ``<cache>/gguf/<sha256[:16]>/``, written
whole or not at all, with ``gguf_source.json``: the source file, its size and sha256, its quantisation types,
the transformers version and the line ``weights dequantised from Q4_1 to float32``. Later uses find the folder
by the file's path, size and modification time (no hashing), so they take seconds; the same bytes elsewhere
are hashed (a fraction of a second) and find the same folder. Run records and reports read :func:`gguf_source`
to say where the weights came from. Needs ``pip install gguf accelerate``.

Nothing reads a file before :func:`~probes.extraction.gguf_header.read_gguf_header` has checked its header
against its size, and :func:`~probes.extraction.gguf_checks.check_model` its model (heads, layers, widths,
vocabulary, merges); whatever transformers, gguf or tokenizers still raise while converting becomes one
:class:`GGUFError` naming the file. A conversion writes into a temporary folder named with its host and
process, removed on failure, and by the next conversion when a killed one left it behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.atomic_io import atomic_folder, host_tag, parse_temporary, write_json_atomic
from probes.errors import ConfigError, InputError, ProbesError, WriteError
from probes.extraction.gguf_checks import check_model
from probes.extraction.gguf_header import GGUFError, GGUFHeader, read_gguf_header
from probes.locks import pid_alive
from probes.safe_read import regular_file

__all__ = [
    "GGUF_SUFFIX",
    "SOURCE_FILE",
    "GGUFError",
    "GGUFInfo",
    "convert_gguf",
    "dequantised_line",
    "find_gguf",
    "gguf_in_folders",
    "gguf_model_folder",
    "gguf_source",
    "read_gguf_info",
    "remove_stale_temporaries",
    "weights_line",
]

#: The suffix of GGUF files.
GGUF_SUFFIX = ".gguf"
#: The record of a converted folder: where its weights came from.
SOURCE_FILE = "gguf_source.json"
#: Tensor types that are plain floats, not quantised.
_FLOAT_TYPES = ("F32", "F16", "BF16", "F64")
#: What to install to read GGUF files.
_INSTALL = "pip install gguf accelerate"
#: The folder of probes' own code: a failure raised there during a conversion is a bug, not the file's fault.
_PACKAGE = Path(__file__).resolve().parents[1]
#: Temporary names in the cache are :mod:`probes.atomic_io`'s (``.NAME.tmp-HOST-PID-N``); earlier versions marked
#: theirs ``.converting-<host hash>-<pid>-``, still removed when their process is gone.
_TMP_NAME = re.compile(r"\.converting-([0-9a-f]{8})-(\d+)-")
#: Temporary names of still earlier versions, which carry no host: removed once untouched for a day.
_LEGACY_TMP = re.compile(r"\.[0-9a-f]{16}-[a-z0-9_]{8}|\..+\.json\.tmp-\d+")
_LEGACY_AGE_S = 24 * 3600


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file's header says: architecture, model name and tensor types by element count.

    ``quantisation``: the type holding most elements among the quantised ones (the float type when none is
    quantised, as in an F32 file); ``tensor_types``: every type with its number of tensors.
    """

    path: Path
    architecture: str
    name: str | None
    tensor_types: dict[str, int] = field(default_factory=dict)
    elements: dict[str, int] = field(default_factory=dict)

    @property
    def quantisation(self) -> str:
        quantised = {k: v for k, v in self.elements.items() if k not in _FLOAT_TYPES}
        pool = quantised or self.elements
        return max(pool, key=lambda k: (pool[k], k)) if pool else "unknown"

    @property
    def types(self) -> list[str]:
        """Every tensor type, the main quantisation first, then by element count."""
        rest = sorted((k for k in self.elements if k != self.quantisation), key=lambda k: -self.elements[k])
        return [self.quantisation, *rest]


def _gguf_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(GGUF_SUFFIX))


def find_gguf(spec: str | Path) -> Path | None:
    """The GGUF file ``spec`` names: a path ending ``.gguf``, or a folder holding exactly one ``.gguf`` file and
    no ``config.json``; None when it names none (a model folder, a hub name ...).

    Raises:
        ConfigError: a ``.gguf`` path that does not exist, or a folder holding several ``.gguf`` files.
    """
    path = Path(str(spec)).expanduser()
    if str(spec).lower().endswith(GGUF_SUFFIX):
        if not path.is_file():
            found = "a folder" if path.is_dir() else "not a regular file" if path.exists() else "nothing"
            raise ConfigError(f"model {str(spec)!r}: expected a GGUF file, found {found} there")
        return path.resolve()
    if not path.is_dir() or (path / "config.json").is_file():
        return None
    return gguf_in_folders([path], str(spec))


def gguf_in_folders(folders: Iterable[Path], spec: str) -> Path | None:
    """The one ``.gguf`` file in the first of ``folders`` that holds any (None when none does).

    Raises:
        ConfigError: that folder holds several (name the file instead).
    """
    for folder in folders:
        if not folder.is_dir():
            continue
        found = _gguf_files(folder)
        if len(found) > 1:
            raise ConfigError(f"model {spec!r}: {folder} holds {len(found)} GGUF files "
                              f"({', '.join(p.name for p in found)}); name one of them")
        if found:
            return found[0].resolve()
    return None


def read_gguf_info(path: str | Path, header: GGUFHeader | None = None) -> GGUFInfo:
    """Architecture, name and tensor types of a GGUF file, from its header (the weights are not read).

    Raises:
        GGUFError: not a GGUF file, a damaged one (a ConfigError too), or one naming no architecture.
        ConfigError: gguf not installed.
    """
    header = header if header is not None else read_gguf_header(path)
    architecture = header.text("general.architecture")
    if not architecture:
        raise GGUFError("a GGUF file without general.architecture (expected e.g. 'llama')", path=header.path)
    counts: dict[str, int] = {}
    elements: dict[str, int] = {}
    for tensor in header.tensors:
        counts[tensor.type_name] = counts.get(tensor.type_name, 0) + 1
        elements[tensor.type_name] = elements.get(tensor.type_name, 0) + tensor.n_elements
    return GGUFInfo(path=Path(path), architecture=architecture, name=header.text("general.name"),
                    tensor_types=counts, elements=elements)


def _check_supported(info: GGUFInfo) -> None:
    """Raise ConfigError unless transformers' GGUF loader handles the file's architecture."""
    supported: set[str] = set()
    try:
        from transformers.modeling_gguf_pytorch_utils import (
            GGUF_SUPPORTED_ARCHITECTURES,
        )

        supported.update(GGUF_SUPPORTED_ARCHITECTURES)
    except ImportError:
        pass
    try:
        from transformers.integrations.gguf import GGUF_CONFIG_ARCHS

        supported.update(GGUF_CONFIG_ARCHS)
    except (ImportError, AttributeError):
        pass
    if supported and info.architecture not in supported:
        raise ConfigError(f"{info.path}: GGUF architecture {info.architecture!r} is not supported by transformers' "
                          f"GGUF loader (it reads {', '.join(sorted(supported))})")


def dequantised_line(quantisation: str, dtype: str = "float32") -> str:
    """``weights dequantised from Q4_1 to float32`` (``weights read from F32 ...`` for an unquantised file)."""
    if quantisation in _FLOAT_TYPES:
        return f"weights read from {quantisation} GGUF tensors as {dtype}, not quantised"
    return f"weights dequantised from {quantisation} to {dtype}"


def _cache_root() -> Path:
    from probes.corpora.registry import cache_dir

    return cache_dir() / "gguf"


def _stat_key(path: Path) -> str:
    """A key of the file's place, size and modification time: what finds its folder without hashing it."""
    stat = path.stat()
    return hashlib.sha256(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:24]


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object the cache holds at ``path`` (a regular file of at most 1 MiB), else None."""
    from probes.safe_read import load_json

    try:
        doc = load_json(path, what="a cache record", max_bytes=1 << 20)
    except InputError:
        return None
    return doc if isinstance(doc, dict) else None


#: The function that converts a GGUF file into a model folder: ``convert(gguf_file, folder)``.
Converter = Callable[[Path, Path], None]


def gguf_model_folder(gguf_file: str | Path, *, cache: str | Path | None = None,
                      convert: Converter | None = None) -> Path:
    """The cached model folder of a GGUF file, converted on first use (minutes for a large file), then re-used.

    Args:
        gguf_file: the ``.gguf`` file.
        cache: the folder of converted models (default ``$PROBES_CACHE/gguf``, else the platform cache folder).
        convert: what converts (default :func:`convert_gguf`, transformers' loader then ``save_pretrained``).

    A file seen before at the same place, size and modification time is found through a small pointer
    file without being read; any other is hashed (about 0.2 s for 100 MB), and a folder converted from the same
    bytes is re-used; only a file never converted has its header read and is converted.

    Raises:
        GGUFError: not a GGUF file, a damaged one, a model transformers' loader would fail on (both a FormatError
            and a ConfigError), or a conversion that failed inside transformers, gguf or tokenizers.
        ConfigError: gguf or accelerate not installed; an architecture transformers' GGUF loader does not support.
        InputError: not a regular file.
        WriteError: the cache cannot be written.
    """
    given = Path(gguf_file).expanduser()
    if not given.exists() and not given.is_symlink():
        raise ConfigError(f"model {str(gguf_file)!r}: no such GGUF file")
    source = regular_file(given, what="a GGUF file").resolve()  # a device, a pipe or a link loop: one InputError
    root = Path(cache) if cache is not None else _cache_root()
    pointer = root / "by-path" / f"{_stat_key(source)}.json"
    known = _read_json(pointer)
    if known is not None and isinstance(known.get("sha256"), str):
        folder = root / known["sha256"][:16]
        written = _read_json(folder / SOURCE_FILE)
        if written is not None and (written.get("sha256"), written.get("size")) == (known["sha256"],
                                                                                  source.stat().st_size):
            return folder
    header = read_gguf_header(source)  # a file that is not GGUF, or a damaged one, fails here, before it is hashed
    from probes.checksum import file_sha256

    digest = file_sha256(source)  # a fraction of a second
    folder = root / digest[:16]
    written = _read_json(folder / SOURCE_FILE)
    if written is None or written.get("sha256") != digest:
        info = read_gguf_info(source, header)
        _check_supported(info)
        check_model(header)  # what transformers' loader would fail on, or blow up building
        _write_folder(source, info, digest, folder, convert or convert_gguf)
    _write_pointer(pointer, digest, source)
    return folder


def _tmp_tag() -> str:
    """``<host hash>-<pid>``: what names this process's temporary files in the cache."""
    return f"{host_tag()}-{os.getpid()}"


def _stale(entry: Path) -> bool:
    """Whether ``entry`` is a temporary left by a conversion that died: its process, on this host, is gone (or,
    named by an earlier version without its process, it is untouched for a day)."""
    temporary = parse_temporary(entry.name)
    if temporary is not None:
        return temporary.host == host_tag() and not pid_alive(temporary.pid)
    marked = _TMP_NAME.search(entry.name)
    if marked is not None:
        host, pid = _tmp_tag().split("-")[0], int(marked[2])
        return marked[1] == host and not pid_alive(pid)
    if _LEGACY_TMP.fullmatch(entry.name):
        try:
            return time.time() - entry.lstat().st_mtime > _LEGACY_AGE_S
        except OSError:
            return False
    return False


def remove_stale_temporaries(root: Path) -> list[Path]:
    """Remove the temporary folders and pointer files that killed conversions left in the cache ``root``;
    those of running conversions stay. Returns what was removed."""
    removed: list[Path] = []
    for folder in (root, root / "by-path"):
        try:
            entries = [e for e in folder.iterdir() if e.name.startswith(".") and _stale(e)]
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


def _write_pointer(pointer: Path, digest: str, source: Path) -> None:
    write_json_atomic(pointer, {"source": str(source), "sha256": digest})


def _write_folder(source: Path, info: GGUFInfo, digest: str, folder: Path, convert: Converter) -> None:
    """Convert into a temporary folder beside ``folder``, record the source, then move it into place; the
    temporary folder is removed whatever happens, and those of conversions killed earlier go first."""
    import transformers

    remove_stale_temporaries(folder.parent)
    # a stale or partial folder from another version is replaced whole; one another process wrote first is kept
    with atomic_folder(folder, replace=True, keep_existing=lambda f: _read_json(f / SOURCE_FILE) is not None) as tmp:
        convert(source, tmp)
        written = {"source": str(source), "size": source.stat().st_size, "sha256": digest,
                   "architecture": info.architecture, "name": info.name, "quantisation": info.quantisation,
                   "tensor_types": {k: info.tensor_types[k] for k in info.types},
                   "dtype": "float32", "weights": dequantised_line(info.quantisation),
                   "converted_by": f"transformers {transformers.__version__} (from_pretrained with gguf_file, "
                                   "then save_pretrained)"}
        (tmp / SOURCE_FILE).write_text(json.dumps(written, indent=2) + "\n", encoding="utf-8")


def convert_gguf(source: Path, target: Path) -> None:
    """Load ``source`` with transformers' GGUF loader (every weight dequantised to float32) and save model
    and tokenizer into ``target`` as an ordinary folder (safetensors, ``config.json``, ``tokenizer.json``).

    Raises:
        ConfigError: accelerate or gguf missing.
        GGUFError: transformers, gguf or tokenizers failed on the file (whatever they raised, named).
        WriteError: ``target`` cannot be written.
    """
    import importlib.util

    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"{source}: loading a GGUF file needs {module}, which is not installed: {_INSTALL}")
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        try:
            model, tokenizer, missing = _load(source)
        except BaseException as err:
            if not _from_the_libraries(err):
                raise
            raise GGUFError(f"could not convert the GGUF file: {_reason(err)}", path=source) from err
        if missing:  # transformers would start them at random values: attention maps of no model at all
            raise GGUFError(f"expected a weight for every parameter of the model, found none for {len(missing)} "
                            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})", path=source)
        _drop_quantizer(model)
        if bars:
            hf_logging.disable_progress_bar()  # the "Writing model shards" bar
        try:
            model.save_pretrained(str(target))
            tokenizer.save_pretrained(str(target))
        except OSError as err:
            raise WriteError.from_oserror(err, target) from err
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def _load(source: Path) -> tuple[Any, Any, list[str]]:
    """Model and tokenizer of ``source`` through transformers' GGUF loader, weights dequantised to float32, and
    the parameters the file holds no weights for."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": source.name}
    try:
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)  # plain float weights, never packed blocks
    except ImportError:  # older transformers: its GGUF loader always dequantises
        pass
    loaded: Any = AutoModelForCausalLM.from_pretrained(str(source.parent), dtype=torch.float32,
                                                       trust_remote_code=False, output_loading_info=True, **kwargs)
    model, loading = loaded
    tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name, trust_remote_code=False)
    return model, tokenizer, sorted(loading.get("missing_keys") or ())


def _from_the_libraries(err: BaseException) -> bool:
    """Whether ``err`` escaped transformers, gguf or tokenizers converting the file: any Exception (or a panic
    of a Rust library) raised outside probes' own code; a ProbesError, Ctrl-C and a bug of probes pass as
    they are."""
    if isinstance(err, ProbesError) or not (isinstance(err, Exception) or type(err).__name__ == "PanicException"):
        return False
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and not Path(frames[-1].filename).resolve().is_relative_to(_PACKAGE)


def _reason(err: BaseException) -> str:
    """``ZeroDivisionError: integer division or modulo by zero``: the type and first line, at most 200 chars."""
    if isinstance(err, MemoryError):
        return "out of memory (MemoryError)"
    lines = str(err).strip().splitlines()
    text = f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def _drop_quantizer(model: Any) -> None:
    """Forget that the model came through the GGUF quantizer: its weights are plain floats now (transformers
    refuses to save a quantized model), and the saved folder must load as an ordinary one (no
    ``quantization_config``)."""
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if getattr(model.config, "quantization_config", None) is not None:
        try:
            delattr(model.config, "quantization_config")
        except AttributeError:
            model.config.quantization_config = None


def gguf_source(folder: str | Path | None) -> dict[str, Any] | None:
    """The ``gguf_source.json`` record of a model folder converted from a GGUF file, else None."""
    if folder is None:
        return None
    path = Path(str(folder)).expanduser()
    if not (path / SOURCE_FILE).is_file():
        return None
    return _read_json(path / SOURCE_FILE)


def weights_line(source: dict[str, Any] | None) -> str | None:
    """One line for people: ``weights: dequantised from Q4_1 to float32 (SmolLM2....gguf, sha256 1a2b3c4d5e6f...)``."""
    if not source:
        return None
    name = Path(str(source.get("source", "?"))).name
    sha = str(source.get("sha256", ""))[:12]
    return f"{source.get('weights', 'weights converted from a GGUF file')} ({name}, sha256 {sha}...)"
