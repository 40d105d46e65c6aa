"""transformers' ``Trainer`` without the per-step costs that a small model on one process feels.

Measured by ``benchmarks/train.py`` (the role lab's attention-only model, a step of about 17 ms on one CPU thread):

* gradient clipping goes through accelerate's ``clip_grad_norm_``, which walks ``model.parameters()`` and groups
  the gradients by device mesh at every step; on one process without a gradient scaler it is exactly
  ``torch.nn.utils.clip_grad_norm_`` over the trained parameters (the same total norm, the same clipping), so this
  one calls that on a list made once;
* the ``Trainer`` counts each batch's FLOPs for its state's ``total_flos`` (a walk over the parameters per step);
  probes reports tokens per second instead, so the count is 0;
* ``train`` begins with accelerate's ``free_memory`` (a full ``gc.collect`` over every object the process holds:
  about 0.15 s once the data and the libraries are loaded); the objects alive when ``train`` is called are moved out
  of the collector's sight for the call (``gc.freeze``) and handed back after it.

Anything else (several processes, a gradient scaler) takes the ``Trainer``'s own path.
"""

from __future__ import annotations

import gc
from typing import Any

__all__ = ["lean_trainer"]


def lean_trainer(**kwargs: Any) -> Any:
    """A :class:`transformers.Trainer` (keyword arguments as its own) with the three savings above."""
    import torch
    from transformers import Trainer

    class LeanTrainer(Trainer):
        """``Trainer`` with a one-process clip over a fixed parameter list, no FLOP count and a frozen heap."""

        _trained: list[Any] | None = None

        def _clip_grad_norm(self, model: Any) -> Any:
            accelerator = self.accelerator
            one_process = accelerator.distributed_type == "NO"  # accelerate's DistributedType is a str enum
            if not one_process or accelerator.scaler is not None:
                return super()._clip_grad_norm(model)
            if self._trained is None:  # the parameters a step updates (an attention-only model's MLP is frozen)
                self._trained = [p for p in model.parameters() if p.requires_grad]
            return torch.nn.utils.clip_grad_norm_(self._trained, self.args.max_grad_norm)

        def floating_point_ops(self, inputs: Any) -> int:
            return 0

        def train(self, *args: Any, **kw: Any) -> Any:
            gc.freeze()
            try:
                return super().train(*args, **kw)
            finally:
                gc.unfreeze()

    return LeanTrainer(**kwargs)
