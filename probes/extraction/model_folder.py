"""A model folder checked before transformers is asked anything about it.

transformers 5 runs a folder's own Python code when its ``config.json`` (or ``tokenizer_config.json``) has an
``auto_map`` and the user agrees at a prompt (or pipes "y"). probes passes ``trust_remote_code=False`` on every
call, and refuses such a folder first, in one line saying why, so nothing is ever asked or imported:

* :func:`check_no_remote_code`: ``config.json`` (read with :func:`probes.safe_read.load_json`: a bounded regular
  file) must be a JSON object with no ``auto_map`` and, when it names one, a ``model_type`` transformers knows;
  ``tokenizer_config.json``, when there is one, must have no ``auto_map``;
* :func:`check_model_folder`: that, every file of the folder a regular file (no ``/dev/zero`` behind a link, no
  named pipe: nothing hangs), and the weight files' headers (:mod:`probes.extraction.weight_files`).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from probes.errors import ConfigError
from probes.extraction.weight_files import check_weight_files
from probes.safe_read import load_json, regular_file

__all__ = ["check_model_folder", "check_no_remote_code", "check_regular_files"]

#: The most entries of a model folder looked at (a real one holds a few dozen).
_MAX_ENTRIES = 100_000


def check_model_folder(folder: str | Path, *, weights: bool = True) -> None:
    """Everything :mod:`this module <probes.extraction.model_folder>` checks, for the model folder ``folder``;
    ``weights=False`` leaves out the weight headers (for a folder whose config and tokenizer alone are read).

    Raises:
        ConfigError: the folder ships its own code or names a model type transformers does not know.
        InputError: a file that is not a regular file, a config that is not JSON, a bad weight header.
    """
    root = Path(folder)
    check_regular_files(root)
    check_no_remote_code(root)
    if weights:
        check_weight_files(root)


def check_regular_files(folder: str | Path) -> None:
    """Every entry of ``folder`` that is not a folder is a regular file once links are followed.

    Raises:
        InputError: naming the first entry that is a device, a named pipe, a socket or a broken link.
    """
    for entry in sorted(itertools.islice(Path(folder).iterdir(), _MAX_ENTRIES)):
        if not entry.is_dir():
            regular_file(entry, what="a model file")


def check_no_remote_code(folder: str | Path) -> None:
    """Refuse a folder that would need its own Python code (see the module) before transformers reads it.

    Raises:
        ConfigError: naming the folder's ``config.json`` or ``tokenizer_config.json``, why, and what to do.
        InputError: ``config.json`` missing, not a regular file or not JSON.
    """
    from transformers import __version__ as version
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    root = Path(folder)
    config_file = root / "config.json"
    config = load_json(config_file, what="a model config")
    if not isinstance(config, dict):
        raise ConfigError(f"expected a model config that is a JSON object, found {type(config).__name__}",
                          path=config_file)
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise ConfigError(f"model_type: expected a string, found {model_type!r:.80}", path=config_file)
    known = model_type is None or model_type in CONFIG_MAPPING
    if "auto_map" in config:
        fix = (f"remove auto_map from config.json to load it with transformers' own {model_type} classes" if
               model_type is not None and known else "use a model whose model_type transformers knows")
        raise ConfigError(f"auto_map ({_classes(config['auto_map'])}): this model folder ships its own Python code, "
                          f"which probes never runs (expected a config without auto_map); {fix}", path=config_file)
    if not known:
        raise ConfigError(f"model_type: expected a model type transformers {version} knows (bert, gpt2, llama ...), "
                          f"found {model_type!r:.80}; upgrade transformers if the model is newer", path=config_file)
    _check_tokenizer_config(root)


def _check_tokenizer_config(root: Path) -> None:
    """``tokenizer_config.json``, when present: no ``auto_map`` (a tokenizer class shipped as code)."""
    file = root / "tokenizer_config.json"
    if not (file.exists() or file.is_symlink()):
        return
    config = load_json(file, what="a tokenizer config")
    if isinstance(config, dict) and "auto_map" in config:
        raise ConfigError(f"auto_map ({_classes(config['auto_map'])}): this model folder ships its own tokenizer "
                          "code, which probes never runs (expected a tokenizer config without auto_map); use a model "
                          "whose tokenizer transformers knows", path=file)


def _classes(auto_map: object) -> str:
    """What an ``auto_map`` points to, shortly."""
    if isinstance(auto_map, dict):
        text = ", ".join(f"{k!r}: {v!r}" for k, v in itertools.islice(auto_map.items(), 4))
    else:
        text = repr(auto_map)
    return text if len(text) <= 160 else text[:160] + "..."
