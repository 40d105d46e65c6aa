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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.errors import ConfigError

__all__ = ["GGUF_SUFFIX", "SOURCE_FILE", "GGUFInfo", "find_gguf", "gguf_in_folders", "read_gguf_info",
           "gguf_model_folder", "convert_gguf", "dequantised_line", "gguf_source", "weights_line"]

#: The suffix of GGUF files.
GGUF_SUFFIX = ".gguf"
#: The record of a converted folder: where its weights came from.
SOURCE_FILE = "gguf_source.json"
#: The first bytes of every GGUF file.
_MAGIC = b"GGUF"
#: Tensor types that are plain floats, not quantised.
_FLOAT_TYPES = ("F32", "F16", "BF16", "F64")
#: What to install to read GGUF files.
_INSTALL = "pip install gguf accelerate"


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
            raise ConfigError(f"model {str(spec)!r}: expected a GGUF file, found "
                              f"{'a folder' if path.is_dir() else 'nothing'} there")
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


def _check_magic(path: Path) -> None:
    """Raise ConfigError unless ``path`` starts as every GGUF file does."""
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the GGUF file ({err.strerror or err})") from None
    if magic != _MAGIC:
        raise ConfigError(f"{path}: not a GGUF file (expected it to start with {_MAGIC!r}, found {magic!r})")


def _reader(path: Path) -> Any:
    """A ``gguf.GGUFReader`` of ``path`` (checked: it is a GGUF file, and readable whole)."""
    try:
        import gguf
    except ImportError:
        raise ConfigError(f"{path}: reading GGUF files needs the gguf package, which is not installed: "
                          f"{_INSTALL}") from None
    _check_magic(path)
    try:
        return gguf.GGUFReader(str(path))
    except Exception as err:  # a truncated or corrupt file fails in many ways inside the reader
        raise ConfigError(f"{path}: a damaged or truncated GGUF file ({type(err).__name__}: "
                          f"{str(err).splitlines()[0] if str(err) else 'unreadable'})") from None


def _field_text(reader: Any, key: str) -> str | None:
    found = reader.fields.get(key)
    if found is None or not found.data:
        return None
    try:
        return bytes(found.parts[found.data[0]]).decode("utf-8")
    except (UnicodeDecodeError, TypeError, ValueError, IndexError):
        return None


def read_gguf_info(path: str | Path) -> GGUFInfo:
    """Architecture, name and tensor types of a GGUF file, from its header (the weights are not read).

    Raises:
        ConfigError: gguf not installed, not a GGUF file, a damaged one, or one naming no architecture.
    """
    path = Path(path)
    reader = _reader(path)
    architecture = _field_text(reader, "general.architecture")
    if not architecture:
        raise ConfigError(f"{path}: a GGUF file without general.architecture (expected e.g. 'llama')")
    counts: dict[str, int] = {}
    elements: dict[str, int] = {}
    size = path.stat().st_size
    for tensor in reader.tensors:
        if int(tensor.data_offset) + int(tensor.n_bytes) > size:
            raise ConfigError(f"{path}: a damaged or truncated GGUF file (tensor {tensor.name} ends at byte "
                              f"{int(tensor.data_offset) + int(tensor.n_bytes)}, the file has {size})")
        kind = tensor.tensor_type.name
        counts[kind] = counts.get(kind, 0) + 1
        elements[kind] = elements.get(kind, 0) + int(tensor.n_elements)
    return GGUFInfo(path=path, architecture=architecture, name=_field_text(reader, "general.name"),
                    tensor_types=counts, elements=elements)


def _check_supported(info: GGUFInfo) -> None:
    """Raise ConfigError unless transformers' GGUF loader handles the file's architecture."""
    supported: set[str] = set()
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

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
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
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
        ConfigError: gguf or accelerate not installed; not a GGUF file, a damaged one, or an architecture
            transformers' GGUF loader does not support.
    """
    source = Path(gguf_file).expanduser().resolve()
    if not source.is_file():
        raise ConfigError(f"model {str(gguf_file)!r}: no such GGUF file")
    root = Path(cache) if cache is not None else _cache_root()
    pointer = root / "by-path" / f"{_stat_key(source)}.json"
    known = _read_json(pointer)
    if known is not None and isinstance(known.get("sha256"), str):
        folder = root / known["sha256"][:16]
        written = _read_json(folder / SOURCE_FILE)
        if written is not None and (written.get("sha256"), written.get("size")) == (known["sha256"],
                                                                                  source.stat().st_size):
            return folder
    _check_magic(source)  # a file that is not GGUF fails at once, before it is hashed
    from probes.checksum import file_sha256

    digest = file_sha256(source)  # a fraction of a second; reading the header (the vocabulary) takes longer
    folder = root / digest[:16]
    written = _read_json(folder / SOURCE_FILE)
    if written is None or written.get("sha256") != digest:
        info = read_gguf_info(source)  # a damaged or truncated file fails here, before converting
        _check_supported(info)
        _write_folder(source, info, digest, folder, convert or convert_gguf)
    _write_pointer(pointer, digest, source)
    return folder


def _write_pointer(pointer: Path, digest: str, source: Path) -> None:
    pointer.parent.mkdir(parents=True, exist_ok=True)
    tmp = pointer.with_name(f".{pointer.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"source": str(source), "sha256": digest}) + "\n", encoding="utf-8")
    os.replace(tmp, pointer)


def _write_folder(source: Path, info: GGUFInfo, digest: str, folder: Path, convert: Converter) -> None:
    """Convert into a temporary folder beside ``folder``, record the source, then move it into place."""
    import transformers

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # readable by all like any cache folder (mkdtemp makes it private)
        convert(source, tmp)
        written = {"source": str(source), "size": source.stat().st_size, "sha256": digest,
                  "architecture": info.architecture, "name": info.name, "quantisation": info.quantisation,
                  "tensor_types": {k: info.tensor_types[k] for k in info.types},
                  "dtype": "float32", "weights": dequantised_line(info.quantisation),
                  "converted_by": f"transformers {transformers.__version__} (from_pretrained with gguf_file, "
                                  "then save_pretrained)"}
        (tmp / SOURCE_FILE).write_text(json.dumps(written, indent=2) + "\n", encoding="utf-8")
        if folder.exists():  # a stale or partial folder from another version: replace it whole
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process wrote it first: keep theirs
            if _read_json(folder / SOURCE_FILE) is None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def convert_gguf(source: Path, target: Path) -> None:
    """Load ``source`` with transformers' GGUF loader (every weight dequantised to float32) and save model
    and tokenizer into ``target`` as an ordinary folder (safetensors, ``config.json``, ``tokenizer.json``).

    Raises:
        ConfigError: accelerate or gguf missing, or transformers cannot load the file.
    """
    import importlib.util

    import torch

    for module in ("gguf", "accelerate"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"{source}: loading a GGUF file needs {module}, which is not installed: {_INSTALL}")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        kwargs: dict[str, Any] = {"gguf_file": source.name}
        try:
            from transformers import GgufConfig

            kwargs["quantization_config"] = GgufConfig(dequantize=True)  # plain float weights, never packed blocks
        except ImportError:  # older transformers: its GGUF loader always dequantises
            pass
        try:
            model = AutoModelForCausalLM.from_pretrained(str(source.parent), dtype=torch.float32, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
        except (OSError, ValueError, KeyError, NotImplementedError, ImportError) as err:
            text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"{source}: transformers cannot load this GGUF file ({text})") from err
        _drop_quantizer(model)
        if bars:
            hf_logging.disable_progress_bar()  # the "Writing model shards" bar
        model.save_pretrained(str(target))
        tokenizer.save_pretrained(str(target))
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


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
