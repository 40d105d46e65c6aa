"""Head distances at every step early in training, measured in memory: :class:`StepSymmetry`.

The checkpoints of a run are log-spaced (steps 0, 1, 2, 4, 8 ...), too coarse to see how fast identical heads come
apart. :class:`StepSymmetry` is a ``TrainerCallback`` that measures, at the initial model (step 0) and after every
optimizer step up to ``last_step``, the parameter and attention distances between the heads of each layer, by the
definitions and functions of :mod:`probes.training.symmetry` (:func:`~probes.training.symmetry.param_distances`,
:func:`~probes.training.symmetry.attention_divergences`, token-level maps from probes' own extractor with eager
attention, over-long sentences skipped) on the same held-out texts the checkpoint symmetry reads. Nothing is
written to disk: the model is switched to eval mode, run without gradients, and put back in training mode.

It does not change the training: an eval-mode forward pass draws no random numbers (no dropout), touches no
gradient and no optimizer state, and the weights are only read. So the losses and weights of a run are the same
with and without it (tested), and the distances at step ``k`` equal those :func:`~probes.training.symmetry.head_symmetry`
measures on the checkpoint of step ``k`` (tested).

A run resumed from a step ``s > 0`` cannot measure the steps before ``s``: the callback then measures nothing,
unless it is handed the measurements of the earlier call (``earlier``, steps ``0..s`` exactly), which it continues.
Under ``torchrun`` only rank 0 measures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from transformers import TrainerCallback

from probes.errors import ConfigError
from probes.training.symmetry import HeadSymmetry
from probes.training.symmetry import measure_heads as symmetry_measure

__all__ = ["StepSymmetry", "measure_heads", "STEP_SYMMETRY_DIR", "BATCH_SIZE"]

#: The folder of a run that holds the saved :class:`HeadSymmetry` of every early step.
STEP_SYMMETRY_DIR = "symmetry-steps"
#: Sentences per forward pass: the batch size of the checkpoint symmetry (:func:`~probes.training.symmetry.head_symmetry`).
BATCH_SIZE = 16


def _extractor(model: Any, tokenizer: Any) -> Any:
    """An extractor of the in-memory ``model`` with the checkpoint symmetry's settings (token maps kept, over-long
    sentences skipped, full eager maps), on the model's own device; the model's training mode restored."""
    from probes.extraction.checks import check_options
    from probes.extraction.extractor import AttentionExtractor

    was_training = model.training
    device = next(model.parameters()).device
    settings = check_options(device=device, keep_tokens=True, on_long="skip", selective=False, progress=False,
                             batch_size=BATCH_SIZE)
    try:
        return AttentionExtractor.from_settings(model, tokenizer, settings)
    finally:
        model.train(was_training)


def measure_heads(extractor: Any, items: Sequence[tuple[str, tuple[str, ...]]]
                  ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], int]:
    """``(param (L, H, H), attention (L, H, H), sentences used)`` of the extractor's model as it is now
    (:func:`probes.training.symmetry.measure_heads`, named for the step symmetry)."""
    return symmetry_measure(extractor, items, what="step symmetry")


class StepSymmetry(TrainerCallback):
    """Measures the head distances of the model in memory at step 0 and after every step up to ``last_step``.

    Args:
        last_step: the last step measured (``K``; steps ``0..K``).
        texts: called once, when training begins: the held-out texts (split at whitespace), the checkpoint
            symmetry's.
        tokenizer: called once, when training begins: the run's tokenizer as the extractor loads it
            (:func:`probes.extraction.loading.load_tokenizer` of the run's ``tokenizer/``).
        earlier: the measurements of an earlier call of the same run (steps ``0..s``), continued when this call
            resumes from step ``s``.

    Attributes:
        skipped: why nothing was measured (empty while measuring, or when it measured).
        seconds: time spent measuring.
        started: whether training began (False: the run had finished before, and the ``Trainer`` never ran).
    """

    def __init__(self, last_step: int, texts: Callable[[], Sequence[str]], tokenizer: Callable[[], Any], *,
                 earlier: HeadSymmetry | None = None) -> None:
        if last_step < 0:
            raise ConfigError(f"--symmetry-steps: expected a step >= 0, found {last_step}")
        self.last_step = last_step
        self._texts, self._tokenizer, self.earlier = texts, tokenizer, earlier
        self._extractor: Any = None
        self._items: list[tuple[str, tuple[str, ...]]] = []
        self._steps: list[int] = []
        self._params: list[npt.NDArray[np.float64]] = []
        self._attention: list[npt.NDArray[np.float64]] = []
        self._used: int | None = None
        self._base: HeadSymmetry | None = None  # the earlier call's steps 0..s this call continues
        self.skipped = ""
        self.seconds = 0.0
        self.started = False

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        self.started = True
        if not state.is_world_process_zero:
            self.skipped = "measured on rank 0 only"
            return
        step = int(state.global_step)
        if step > 0:
            self._base = _continued(self.earlier, min(step, self.last_step))
            if self._base is None:
                self.skipped = (f"the run resumed from step {step}: the steps before it ran in an earlier call "
                                "whose measurements of them were not kept")
                return
            if step >= self.last_step:
                return  # the earlier call measured every step asked
        t0 = time.perf_counter()
        self._items = [(f"sentence {i + 1}", tuple(str(t).split())) for i, t in enumerate(self._texts())]
        self._items = [item for item in self._items if item[1]]
        if not self._items:
            self.skipped = "no held-out sentence to measure on"
            return
        self._extractor = _extractor(model, self._tokenizer())
        self.seconds += time.perf_counter() - t0
        if step == 0:
            self._measure(0)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._extractor is not None and int(state.global_step) <= self.last_step:
            self._measure(int(state.global_step))

    def _measure(self, step: int) -> None:
        t0 = time.perf_counter()
        params, attention, used = measure_heads(self._extractor, self._items)
        expected = self._used if self._used is not None else None if self._base is None else self._base.n_sentences
        if expected is not None and used != expected:
            raise ConfigError(f"step symmetry: expected the {expected} sentences of the earlier steps, found {used} "
                              f"at step {step}")
        self._steps.append(step)
        self._params.append(params)
        self._attention.append(attention)
        self._used = used
        self.seconds += time.perf_counter() - t0

    def result(self) -> HeadSymmetry | None:
        """The :class:`HeadSymmetry` of steps ``0..`` the last one measured (an earlier call's steps first), or None
        when none was measured (:attr:`skipped` says why)."""
        if self.skipped:
            return None
        if not self._steps:
            return self._base
        steps = np.asarray(self._steps, dtype=np.int64)
        params, attention = np.stack(self._params), np.stack(self._attention)
        if self._base is not None:
            steps = np.concatenate([self._base.steps, steps])
            params = np.concatenate([self._base.param_distance, params])
            attention = np.concatenate([self._base.attention_distance, attention])
        return HeadSymmetry(steps, params, attention, int(self._used or 0))


def _continued(earlier: HeadSymmetry | None, step: int) -> HeadSymmetry | None:
    """``earlier`` cut to steps ``0..step`` when it holds every one of them (an earlier call of the run measured
    them); else None."""
    if earlier is None:
        return None
    done = [int(s) for s in earlier.steps]
    if done[:step + 1] != list(range(step + 1)):
        return None
    keep = slice(0, step + 1)
    return HeadSymmetry(np.asarray(earlier.steps[keep], dtype=np.int64), earlier.param_distance[keep],
                        earlier.attention_distance[keep], earlier.n_sentences, earlier.rule)
