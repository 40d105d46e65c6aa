"""Named initialisation schemes for the heads of a freshly built model, and each head's parameter blocks.

The heads of a layer are fed and trained in the same way; only their initialisation differs. A scheme fixes
that difference (:class:`InitScheme`, parsed from its text):

* ``independent``: the architecture's own initialisation, drawn under ``torch.manual_seed(seed)``; no change.
* ``identical``: every head of a layer becomes an exact copy of head 0: its query, key and value rows (and
  their biases) and its input columns of the attention output projection. Under grouped-query attention
  (Llama) the key/value heads copy key/value head 0. The output projection's bias is shared by all heads and
  is left as it is.
* ``identical+noise:EPS``: ``identical``, then Gaussian noise is added to every head's block independently,
  with standard deviation ``EPS`` times the standard deviation of that block (weights and biases each on
  their own: a zero bias stays zero), drawn in a fixed order from ``torch.Generator`` seeded ``seed + 1``.

Where the blocks are (:func:`head_blocks`, read from :mod:`probes.extraction.families`): the output projection
is :func:`~probes.extraction.families.head_sites` (head ``k``'s input at ``[k*d, (k+1)*d)``: columns of a
``Linear`` weight ``(out, in)``, rows of GPT-2's ``Conv1D`` weight ``(in, out)``); the values are
:func:`~probes.extraction.families.value_sites`, and the queries and keys are the other chunks of a fused
projection (GPT-2 ``c_attn``: queries, keys, values in thirds of its output) or the value projection's
siblings (``query``/``key`` beside ``value``, ``q_proj``/``k_proj`` beside ``v_proj``).

Which dropouts break an ``identical`` start: only attention-probability dropout (``attention_probs_dropout_prob``,
``attn_pdrop``, ``attention_dropout``), whose masks differ per head. Dropout on embeddings, on the output
projection's result and in the MLP is applied after the heads are summed or before they are split, so every
head still gets the same input and the same gradient.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from probes.errors import ConfigError
from probes.extraction import families

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["InitScheme", "SCHEMES", "PARTS", "apply_scheme", "head_blocks"]

#: Scheme names, as written in ``--init``.
SCHEMES: tuple[str, ...] = ("independent", "identical", "identical+noise")
#: The parts of a head, in the order their blocks are copied, noised and concatenated.
PARTS: tuple[str, ...] = ("query", "key", "value", "output")
_NOISE_PREFIX = "identical+noise:"
#: The value projection's last name -> its query and key siblings' (separate projections).
_SIBLINGS: dict[str, tuple[str, str]] = {"value": ("query", "key"), "v_proj": ("q_proj", "k_proj"),
                                         "value_proj": ("query_proj", "key_proj")}


@dataclass(frozen=True)
class InitScheme:
    """How the heads of every layer start (see the module docstring).

    Attributes:
        name: ``"independent"``, ``"identical"`` or ``"identical+noise"``.
        noise: ``EPS`` of ``identical+noise:EPS``, the noise's size relative to each block's standard deviation
            (0 for the other schemes).
    """

    name: str
    noise: float = 0.0

    def __post_init__(self) -> None:
        if self.name not in SCHEMES:
            raise ConfigError(f"init scheme: expected one of {list(SCHEMES)}, found {self.name!r}")
        noisy = self.name == "identical+noise"
        if noisy != (self.noise != 0.0) or not math.isfinite(self.noise) or self.noise < 0:
            want = "a finite noise > 0" if noisy else "noise 0"
            raise ConfigError(f"init scheme {self.name!r}: expected {want}, found {self.noise!r}")

    @classmethod
    def parse(cls, text: str) -> InitScheme:
        """The scheme ``text`` names: ``independent``, ``identical`` or ``identical+noise:EPS`` (EPS > 0)."""
        choices = "'independent', 'identical' or 'identical+noise:EPS' (EPS a number > 0, e.g. 0.01)"
        spelled = text.strip() if isinstance(text, str) else text
        if spelled in ("independent", "identical"):
            return cls(spelled)
        if isinstance(spelled, str) and spelled.startswith(_NOISE_PREFIX):
            try:
                eps = float(spelled[len(_NOISE_PREFIX):])
            except ValueError:
                eps = math.nan
            if math.isfinite(eps) and eps > 0:
                return cls("identical+noise", eps)
        raise ConfigError(f"init scheme: expected {choices}, found {text!r}")

    @property
    def text(self) -> str:
        """The scheme as :meth:`parse` reads it back (``identical+noise:0.01``)."""
        return f"{_NOISE_PREFIX}{self.noise!r}" if self.name == "identical+noise" else self.name

    def __str__(self) -> str:
        return self.text

    def describe(self) -> dict[str, Any]:
        """What a run records of the scheme (``training.json``, ``run.json``): its text, name, noise and rule."""
        rules = {"independent": "the architecture's own initialisation under torch.manual_seed(seed)",
                 "identical": "every head of a layer copies head 0 (query, key, value rows and biases, output "
                              "projection input columns; key/value head 0 under grouped-query attention)",
                 "identical+noise": "identical, then per head Gaussian noise of std noise x std(block), weights "
                                    "and biases each, from torch.Generator(seed + 1)"}
        return {"scheme": self.text, "name": self.name, "noise": self.noise, "rule": rules[self.name]}


@dataclass(frozen=True)
class _Slab:
    """One projection's per-head slices: ``weight`` along ``axis`` and ``bias`` at ``[start + k*size, ...)``."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    axis: int
    start: int
    n: int
    size: int

    def blocks(self, head: int) -> Iterator[torch.Tensor]:
        """Views of head ``head``'s weight slice and, when the part has a per-head bias, its bias slice."""
        offset = self.start + head * self.size
        yield self.weight.narrow(self.axis, offset, self.size)
        if self.bias is not None:
            yield self.bias.narrow(0, offset, self.size)


def _axes(module: Any, name: str) -> tuple[int, int]:
    """``(output axis, input axis)`` of ``module``'s weight: ``(0, 1)`` for a Linear, ``(1, 0)`` for a Conv1D."""
    import torch
    from transformers.pytorch_utils import Conv1D

    if isinstance(module, torch.nn.Linear):
        return 0, 1
    if isinstance(module, Conv1D):
        return 1, 0
    raise ConfigError(f"init schemes: expected {name} to be a Linear or Conv1D, found {type(module).__name__}")


def _slabs(model: Any) -> list[dict[str, _Slab]]:
    """Per layer, each part's :class:`_Slab` (from :func:`head_sites` and :func:`value_sites`)."""
    layers = []
    for out, values in zip(families.head_sites(model), families.value_sites(model)):
        kv, size = values.n_kv_heads, values.head_dim
        o_axis = _axes(out.module, out.name)[1]
        parts = {"output": _Slab(out.module.weight, None, o_axis, 0, out.n_heads, out.head_dim)}
        if values.fused is not None:
            part, n_parts = values.fused
            if (part, n_parts) != (2, 3):
                raise ConfigError(f"init schemes: expected a fused q/k/v projection {values.name} in thirds "
                                  f"with the values last, found chunk {part} of {n_parts}")
            axis = _axes(values.module, values.name)[0]
            width = values.module.weight.shape[axis] // 3
            for chunk, name in enumerate(PARTS[:3]):
                parts[name] = _Slab(values.module.weight, values.module.bias, axis, chunk * width, kv, size)
        else:
            stem, last = values.name.rsplit(".", 1)
            if last not in _SIBLINGS:
                raise ConfigError(f"init schemes: expected a value projection named one of {sorted(_SIBLINGS)}, "
                                  f"found {values.name!r}")
            for name, sibling in zip(PARTS[:3], (*_SIBLINGS[last], last)):
                module = model.get_submodule(f"{stem}.{sibling}")
                n = values.n_heads if name == "query" else kv
                parts[name] = _Slab(module.weight, getattr(module, "bias", None), _axes(module, sibling)[0], 0, n,
                                    size)
        layers.append({name: parts[name] for name in PARTS})
    return layers


def apply_scheme(model: Any, scheme: InitScheme, seed: int) -> None:
    """Apply ``scheme`` to ``model`` in place, after it was built under ``torch.manual_seed(seed)``.

    ``identical``: every head of each layer becomes an exact copy of head 0 (the key/value heads copy key/value
    head 0 under grouped-query attention); ``identical+noise``: then noise from ``torch.Generator(seed + 1)``,
    layer by layer, part by part (:data:`PARTS`), head by head, weight before bias. ``independent``: no change.

    Raises:
        ConfigError: a model family whose head blocks :mod:`probes.extraction.families` does not locate.
    """
    import torch

    if scheme.name == "independent":
        return
    generator = torch.Generator().manual_seed(int(seed) + 1)
    with torch.no_grad():
        for layer in _slabs(model):
            for slab in layer.values():
                first = [block.clone() for block in slab.blocks(0)]
                for head in range(1, slab.n):
                    for block, source in zip(slab.blocks(head), first):
                        block.copy_(source)
                if scheme.name != "identical+noise":
                    continue
                for head in range(slab.n):
                    for block in slab.blocks(head):
                        scale = scheme.noise * float(block.float().std()) if block.numel() > 1 else 0.0
                        noise = torch.randn(block.shape, generator=generator, dtype=torch.float32)
                        block.add_((noise * scale).to(block))


def head_blocks(model: Any, layer: int) -> dict[str, list[torch.Tensor]]:
    """Per part (:data:`PARTS`), one flat float tensor per query head: its weight slice then its bias slice (copies).

    Under grouped-query attention a query head's ``key`` and ``value`` entries are its key/value head's block
    (query head ``h`` reads key/value head ``h // (H / KV)``), so heads of one group share them.

    Raises:
        ConfigError: ``layer`` out of range, or a family :mod:`probes.extraction.families` does not locate.
    """
    import torch

    slabs = _slabs(model)
    if not 0 <= layer < len(slabs):
        raise ConfigError(f"head blocks: expected a 0-based layer in [0, {len(slabs)}), found {layer}")
    n_heads = slabs[layer]["query"].n
    blocks: dict[str, list[torch.Tensor]] = {}
    for name, slab in slabs[layer].items():
        per_head = [torch.cat([b.detach().reshape(-1) for b in slab.blocks(h)]).clone() for h in range(slab.n)]
        blocks[name] = [per_head[h // (n_heads // slab.n)] for h in range(n_heads)]
    return blocks
