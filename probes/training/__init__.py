"""Training: small transformers trained from scratch under controlled initialisation.

``schemes`` names the initialisation schemes (``independent``, ``identical``, ``identical+noise:EPS``) and applies
them to a freshly built model; ``symmetry`` measures how far apart the heads of each layer are, in parameters and
in attention maps, at every checkpoint. Torch is imported on first use.
"""

from __future__ import annotations

from probes._lazy import lazy_getattr

__all__ = ["InitScheme", "apply_scheme", "head_blocks", "HeadSymmetry", "head_symmetry"]

__getattr__ = lazy_getattr(__name__, {
    "InitScheme": "probes.training.schemes",
    "apply_scheme": "probes.training.schemes",
    "head_blocks": "probes.training.schemes",
    "HeadSymmetry": "probes.training.symmetry",
    "head_symmetry": "probes.training.symmetry",
})
