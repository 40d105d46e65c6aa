"""The memory a training run needs, estimated from its sizes and checked against the machine before anything is built.

A model of ``--hidden 65536 --layers 1024`` passes every range check and would still ask the allocator for
petabytes: :func:`check_memory` refuses it in one line, with the estimate and the memory found, before the data
are read or a tensor is made. The estimate (:func:`estimate_memory`):

* **parameters**, counted from the sizes by the architecture's row of the families table (:func:`count_parameters`,
  :attr:`probes.extraction.families.Trainable.parameters`: the embeddings, every layer's attention, MLP and norms,
  the LM head), as transformers builds them;
* **training state**: 16 bytes per parameter (float32 weights, their gradients and AdamW's two moments);
* **activations** of one batch kept for the backward pass, float32: per layer and token about ``16 x hidden +
  2 x intermediate`` values (intermediate 1 for an attention-only model) plus three ``seq_len``-long attention rows per head (scores, probabilities,
  dropout), and three values per vocabulary entry per token for the logits.

The estimate errs low (measured peaks of small models on CPU ran up to twice it, with the allocator's and the
kernels' own buffers), so a refused run would certainly not fit and a borderline one is left to try.

The memory available is the free memory of the CUDA device the run trains on when there is one (the weights are
built on the CPU first, so the host must hold them too), else the system's available memory: ``psutil`` when it
is installed, else ``MemAvailable`` of ``/proc/meminfo``, else the physical memory (``os.sysconf``). No torch
import unless torch is installed and CUDA is to be asked.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path

from probes.errors import ConfigError
from probes.training.config import TrainConfig

__all__ = ["MemoryEstimate", "count_parameters", "estimate_memory", "available_memory", "check_memory",
           "STATE_BYTES"]

#: Bytes per parameter while training: float32 weights, gradients and AdamW's two moments.
STATE_BYTES = 16
_FLOAT = 4
_GIB = float(1 << 30)


@dataclass(frozen=True)
class MemoryEstimate:
    """What training a config needs, in bytes.

    Attributes:
        parameters: the model's parameters.
        state: weights, gradients and optimizer moments (:data:`STATE_BYTES` per parameter).
        activations: one batch's activations kept for the backward pass.
    """

    parameters: int
    state: int
    activations: int

    @property
    def total(self) -> int:
        """``state + activations``."""
        return self.state + self.activations

    @property
    def weights(self) -> int:
        """The float32 weights alone (what building the model on the CPU takes)."""
        return self.parameters * _FLOAT


def count_parameters(config: TrainConfig, vocab: int) -> int:
    """The parameters of ``config``'s model over a vocabulary of ``vocab`` entries (BERT and GPT-2 tie the LM
    head to the embeddings; Llama does not): its family's count."""
    return config.family.parameters(config.sizes(max(vocab, 1)))


def estimate_memory(config: TrainConfig, vocab: int | None = None) -> MemoryEstimate:
    """The memory training ``config`` needs (see the module); ``vocab`` None: ``train:VOCAB``'s, else the
    fewest entries a vocabulary of the architecture has (a base tokenizer's is known once it is loaded)."""
    if vocab is None:
        vocab = config.train_vocab or len(config.family.special_tokens) + 1
    parameters = count_parameters(config, vocab)
    tokens = config.batch_size * config.seq_len
    attention = 3 * tokens * config.heads * config.seq_len  # scores, probabilities, dropout: T x T per head
    per_layer = tokens * (16 * config.hidden + 2 * config.intermediate_size) + attention
    activations = _FLOAT * (config.layers * per_layer + 3 * tokens * vocab)
    return MemoryEstimate(parameters, STATE_BYTES * parameters, activations)


def _host_memory() -> tuple[int, str] | None:
    """The system's available memory in bytes and where it was read; None when nothing says."""
    try:  # by name: psutil ships no type hints, and its attributes are read as Any either way
        psutil = importlib.import_module("psutil")
    except ImportError:
        pass
    else:
        return int(psutil.virtual_memory().available), "available system memory (psutil)"
    try:
        for line in Path("/proc/meminfo").read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "physical memory (os.sysconf)"
    except (OSError, ValueError, AttributeError):
        return None


def _cuda_memory() -> tuple[int, str] | None:
    """Free memory of the CUDA device this process trains on (``LOCAL_RANK``); None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    index = int(os.environ.get("LOCAL_RANK", "0") or 0) % max(torch.cuda.device_count(), 1)
    free, _ = torch.cuda.mem_get_info(index)
    return int(free), f"free memory of CUDA device {index}"


def available_memory() -> dict[str, tuple[int, str]]:
    """``{"host": (bytes, source), "device": (bytes, source)}`` for what can be read (``device``: CUDA only)."""
    found = {}
    host = _host_memory()
    if host is not None:
        found["host"] = host
    device = _cuda_memory()
    if device is not None:
        found["device"] = device
    return found


def _gib(n: int) -> str:
    return f"{n / _GIB:,.1f} GiB"


def check_memory(config: TrainConfig, vocab: int | None = None,
                 available: dict[str, tuple[int, str]] | None = None) -> MemoryEstimate:
    """Refuse ``config`` when training it needs more memory than the machine has (see the module); the estimate.

    Args:
        config: the run's options.
        vocab: the tokenizer's size (None: see :func:`estimate_memory`).
        available: what :func:`available_memory` returns (None: ask it).

    Raises:
        ConfigError: one line with the sizes, the estimate and the memory found.
    """
    need = estimate_memory(config, vocab)
    found = available_memory() if available is None else available
    width = "--attention-only" if config.attention_only else f"--intermediate {config.intermediate_size}"
    size = (f"--arch {config.arch} --layers {config.layers} --heads {config.heads} --hidden {config.hidden} "
            f"(head size {config.head_size}) {width}" + ("" if vocab is None else f" ({vocab} tokens)"))
    training = (f"{_gib(need.total)} to train ({_gib(need.state)} for weights, gradients and AdamW's moments at 4 "
                f"bytes each, {_gib(need.activations)} for the activations of --batch-size {config.batch_size} x "
                f"--seq-len {config.seq_len})")
    checks = [(need.total, found.get("device") or found.get("host"), training)]
    if "device" in found:  # trains on the GPU, but the weights are built on the CPU first
        checks.append((need.weights, found.get("host"), f"{_gib(need.weights)} of host memory to build its weights"))
    for wanted, have, what in checks:
        if have is not None and wanted > have[0]:
            raise ConfigError(f"the model of {size} has {need.parameters:,} parameters and needs about {what}, "
                              f"found {_gib(have[0])} ({have[1]}); choose a smaller --hidden, --layers, "
                              "--batch-size or --seq-len")
    return need
