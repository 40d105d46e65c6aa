"""Interventions on attention heads: scale (gate) or ablate each head's output.

A head's output enters the rest of the model only through the attention output projection
(:func:`probes.extraction.families.head_sites`), whose input concatenates the heads' outputs.
:func:`head_gates` scales head ``h``'s slice of that input by ``gates[layer, h]`` with a forward
pre-hook: 1 keeps a head, 0 ablates it (Michel et al. 2019's head mask, for every family).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from probes.errors import ConfigError
from probes.extraction.families import HeadSite, head_sites

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["head_gates"]


def _gate_hook(site: HeadSite, gate: torch.Tensor) -> Any:
    """A forward pre-hook scaling each head's slice of the projection's input by ``gate`` ``(n_heads,)``."""

    def hook(module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        hidden = args[0]  # (..., n_heads * head_dim)
        shape = hidden.shape
        scaled = hidden.reshape(*shape[:-1], site.n_heads, site.head_dim) * \
            gate.to(device=hidden.device, dtype=hidden.dtype)[:, None]  # (..., n_heads, head_dim)
        return (scaled.reshape(shape), *args[1:])

    return hook


@contextmanager
def head_gates(model: Any, gates: torch.Tensor) -> Iterator[list[HeadSite]]:
    """Scale every head's output by ``gates`` ``(n_layers, n_heads)`` while the block runs.

    Yields the hooked :class:`~probes.extraction.families.HeadSite` list; the hooks are removed
    on exit, also after an error. ``gates`` may require grad (head-importance scores are its
    gradient, as in Michel et al. 2019).

    Raises:
        ConfigError: ``gates`` does not have one row per layer and one column per head, or the
            model family has no known output projection.
    """
    sites = head_sites(model)
    expected = (len(sites), sites[0].n_heads if sites else 0)
    if tuple(gates.shape) != expected:
        raise ConfigError(f"gates: expected shape (n_layers, n_heads) = {expected}, found {tuple(gates.shape)}")
    handles = [site.module.register_forward_pre_hook(_gate_hook(site, gates[site.layer])) for site in sites]
    try:
        yield sites
    finally:
        for handle in handles:
            handle.remove()
