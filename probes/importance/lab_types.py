"""What the role lab measures on one trained model, one literal ensemble or one pretrained model: the result type
:class:`LabModelAnalysis` (computed by :mod:`probes.importance.lab_model`, compared by
:mod:`probes.compare.role_lab`).

Everything is measured on held-out sequences of the model's own task (``induction``, ``roles``; ``text``: held-out
sentences), the same sequences for every seed of a cell, so heads of different seeds can be compared position by
position. Layers and heads are 0-based here; readers print them 1-based (``layer-head``).

A literal ensemble of ``N`` members of ``h`` heads each is held as one model of ``N * h`` heads per layer, member
major: head ``m * h + k`` is head ``k`` of member ``m`` (``members = N``). Its loss is that of the averaged
prediction (the mean of the members' probabilities), and ablating a head changes only its member's prediction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.importance.function import FunctionTests
from probes.results import Result, require_pandas

__all__ = ["LabModelAnalysis"]


@dataclass(frozen=True)
class LabModelAnalysis(Result):
    """One model's losses, role scores over training, tests of function and attention maps (see the module).

    Attributes:
        name: the model's name in its experiment (``CELL-sS``; a pretrained model's own name).
        cell, seed: its cell and seed (a pretrained model: its name and 0).
        task: ``induction``, ``roles`` or ``text``.
        members: 1 for one model; ``N`` for a literal ensemble of ``N`` members (heads member-major).
        n_layers, n_heads: layers, and heads per layer (an ensemble: over all members).
        params: trainable parameters (an ensemble: summed over members).
        steps: ``(C,)`` the checkpoint steps the role scores and losses were measured at, ascending (a pretrained
            model: ``(0,)``).
        dev_loss: ``(C,)`` held-out loss (nats per scored token: the task's predictable positions) at each step;
            NaN where the model has no language-model head.
        role_names: the roles scored: the task's own, then ``std:previous_token`` and ``std:induction``.
        role_scores: ``(C, R, L, H)`` each head's score for each role at each step (mean attention on the role's
            ideal key; NaN where the role applies nowhere).
        role_loss: ``(R,)`` at the last step, the loss on the positions each role predicts (NaN for the standard
            types and where a role predicts none).
        maps: ``(L, H, M, T, T)`` float32 attention maps (query x key) of every head on the first ``M`` held-out
            sequences at the last step, for distances between heads of different seeds.
        function: single and pair ablations at the last step (None without a language-model head).
        ablation: how heads were removed in ``function`` (``mean`` or ``resample``).
        n_sequences: the held-out sequences everything except ``maps`` is measured on.
    """

    _shapes = {"steps": "C", "dev_loss": "C", "role_scores": "C R n_layers n_heads", "role_loss": "R",
               "maps": "n_layers n_heads M T T"}

    name: str
    cell: str
    seed: int
    task: str
    members: int
    n_layers: int
    n_heads: int
    params: int
    steps: npt.NDArray[np.int64]
    dev_loss: npt.NDArray[np.float64]
    role_names: tuple[str, ...]
    role_scores: npt.NDArray[np.float64]
    role_loss: npt.NDArray[np.float64]
    maps: npt.NDArray[np.float32]
    function: FunctionTests | None
    ablation: str
    n_sequences: int

    def _check_loaded(self) -> None:
        if len(self.role_names) != self.role_scores.shape[1]:
            raise ValueError(f"field 'role_names': expected {self.role_scores.shape[1]} names (role_scores' second "
                             f"axis), found {len(self.role_names)}")
        if self.members < 1 or self.n_heads % self.members:
            raise ValueError(f"field 'members': expected a divisor of n_heads = {self.n_heads}, found {self.members}")

    def scores(self, role: str, step: int | None = None) -> npt.NDArray[np.float64]:
        """``(L, H)``: every head's score for ``role`` at ``step`` (default: the last step)."""
        if role not in self.role_names:
            raise KeyError(f"role {role!r}: expected one of {', '.join(self.role_names)}")
        c = len(self.steps) - 1 if step is None else int(np.flatnonzero(self.steps == step)[0])
        return self.role_scores[c, self.role_names.index(role)]

    def to_pandas(self) -> Any:
        """One row per step, role and head (``layer-head`` 1-based): its role score."""
        pandas = require_pandas()
        rows = [{"name": self.name, "cell": self.cell, "seed": self.seed, "step": int(step), "role": role,
                 "head": f"{layer + 1}-{head + 1}", "score": float(self.role_scores[c, r, layer, head])}
                for c, step in enumerate(self.steps) for r, role in enumerate(self.role_names)
                for layer in range(self.n_layers) for head in range(self.n_heads)]
        return pandas.DataFrame(rows)
