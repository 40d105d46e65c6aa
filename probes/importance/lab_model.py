"""The role lab's measurements of one trained run, or of a literal ensemble of runs: :func:`analyse_lab_run`,
:func:`analyse_ensemble` (a pretrained model: :func:`probes.importance.lab_pretrained.analyse_pretrained`), each a
:class:`~probes.importance.lab_types.LabModelAnalysis`.

Everything is measured on the run's own held-out sequences, the same for every seed of a cell:

* ``induction``, ``roles``: the first ``eval_sequences`` of the run's held-out stream
  (:meth:`~probes.training.tasks.TaskSpec.example` ``(data_seed, DEV_STREAM, i)``, the sequences ``probes train``
  evaluates on; ``data_seed`` is shared by the seeds of a cell), scored on the task's loss mask (the predictable
  positions);
* ``text``: the first ``eval_sequences`` held-out blocks of the run's corpus, cut by the run's own tokenizer
  exactly as ``probes train`` cuts them, every token but the first scored (a causal run; a masked-LM run is
  refused: its loss needs masks the lab does not draw).

At every checkpoint step the model is loaded once (eval mode, eager attention) and run over the sequences once:
its attention maps give the role scores (:func:`probes.analysis.task_roles.role_scores`), its logits the loss per
scored token (``-log p(token t | tokens < t)``: the convention of
:func:`probes.importance.function.function_tests`, whose ``scored`` marks the predicted token). At the last step
the same pass gives the loss on each role's positions and the maps of the first ``map_sequences``, and the
single and within-layer pair ablations run (:func:`~probes.importance.function.function_tests`).

A literal ensemble (:func:`analyse_ensemble`) is held as one model whose heads are its members' heads, member
major; its loss is that of the averaged prediction (:func:`probes.training.ensemble.ensemble_token_loss`) and its
tests of function come from each member's own
(:func:`probes.importance.ensemble_function.ensemble_function_tests`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from probes.errors import ConfigError
from probes.importance.function import FUNCTION_ABLATIONS, FunctionTests, function_tests
from probes.importance.lab_types import LabModelAnalysis
from probes.training.config import whole_number
from probes.training.record import TrainingRecord
from probes.training.tasks import DEV_STREAM, TEXT, TaskBatch

__all__ = ["LabOptions", "HeldOut", "Measured", "analyse_lab_run", "analyse_ensemble", "check_identity",
           "forward_pass", "text_batch", "measure_pass", "role_losses", "head_maps", "lab_analysis"]

#: Sequences per forward pass of the measurements.
_ROWS = 16


@dataclass(frozen=True)
class LabOptions:
    """The lab's measurement options, checked on construction (a ConfigError naming the option).

    Attributes:
        eval_sequences: held-out sequences everything but the maps is measured on.
        map_sequences: the first of them whose attention maps are kept (all of them when there are fewer).
        ablation: how heads are removed in the tests of function (``mean`` or ``resample``).
        ablation_seed: the seed of the resample derangement.
    """

    eval_sequences: int = 64
    map_sequences: int = 8
    ablation: str = "mean"
    ablation_seed: int = 0

    def __post_init__(self) -> None:
        whole_number("eval_sequences", self.eval_sequences, 1)
        whole_number("map_sequences", self.map_sequences, 0)
        whole_number("ablation_seed", self.ablation_seed, 0)
        if self.ablation not in FUNCTION_ABLATIONS:
            raise ConfigError(f"ablation: expected one of {', '.join(FUNCTION_ABLATIONS)}, found {self.ablation!r}")
        if self.ablation == "resample" and self.eval_sequences < 2:
            raise ConfigError(f"eval_sequences: expected at least 2 for ablation = 'resample' (a head's output is "
                              f"taken from another sequence), found {self.eval_sequences}")


def check_identity(name: object, cell: object, seed: object) -> None:
    """ConfigError naming the option unless ``name`` and ``cell`` are non-empty text and ``seed`` a whole number
    >= 0 (what a :class:`LabModelAnalysis` is known by)."""
    for option, value in (("name", name), ("cell", cell)):
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{option}: expected non-empty text, found {value!r}")
    whole_number("seed", seed, 0)


@dataclass(frozen=True)
class HeldOut:
    """The held-out sequences of a measurement, in the model's token ids.

    Attributes:
        batch: ``N`` sequences with their roles (``ids`` the model's ids; no roles for text or a pretrained model's
            probe beyond the task's own).
        scored: ``(N, T)`` the predicted tokens whose loss is measured (never position 0).
    """

    batch: TaskBatch
    scored: npt.NDArray[np.bool_]

    @property
    def ids(self) -> npt.NDArray[np.int64]:
        """``(N, T)`` the model's token ids."""
        return self.batch.ids


# ----------------------------------------------------------------------------- a run's folder and data
@dataclass(frozen=True)
class _Run:
    """A finished run folder read once: its record and its checkpoint folders by step."""

    folder: Path
    record: TrainingRecord
    checkpoints: dict[int, Path]


def _read(run: str | Path, what: str) -> _Run:
    """The run folder ``run`` (``what``: the option naming it); a ConfigError when it is no run with checkpoints,
    or a masked-LM text run."""
    from probes.extraction.trained_runs import list_checkpoints
    from probes.training.runfolder import read_run

    folder = Path(run)
    record = read_run(folder)
    checkpoints = list_checkpoints(folder)
    if record is None or not checkpoints:
        found = "no training.json" if record is None else "no complete checkpoint"
        raise ConfigError(f"{what}: expected a finished `probes train --out` folder with checkpoints, found {found}",
                          path=folder)
    if record.config.task == TEXT and record.config.masked_lm:
        raise ConfigError(f"{what}: expected a causal-LM run for --task text (the lab scores next-token loss), "
                          f"found a masked-LM run (--arch {record.config.arch})", path=folder)
    return _Run(folder, record, checkpoints)


def _held_out(run: _Run, count: int) -> HeldOut:
    """The first ``count`` held-out sequences of ``run`` (see the module); fewer for a text run with fewer held-out
    blocks."""
    config = run.record.config
    offset = len(config.family.special_tokens)
    spec = config.task_spec
    if spec is not None:
        parts = [spec.example(config.data_seed, DEV_STREAM, i) for i in range(count)]
        periods = [p.periods for p in parts if p.periods is not None]
        batch = TaskBatch(ids=np.concatenate([p.ids for p in parts]) + offset,
                          loss_mask=np.concatenate([p.loss_mask for p in parts]),
                          role_of=np.concatenate([p.role_of for p in parts]),
                          key_of=np.concatenate([p.key_of for p in parts]), role_names=spec.role_names,
                          periods=np.concatenate(periods) if periods else None)
        return HeldOut(batch, batch.loss_mask.copy())
    return _text_held_out(run, count)


def _text_held_out(run: _Run, count: int) -> HeldOut:
    """A text run's first ``count`` held-out blocks (its corpus' held-out part, its own tokenizer)."""
    from transformers import AutoTokenizer

    from probes.training.data import read_corpus, token_blocks
    from probes.training.runfolder import TOKENIZER_DIR

    config = run.record.config
    tokenizer = AutoTokenizer.from_pretrained(str(run.folder / TOKENIZER_DIR), use_fast=True,
                                              trust_remote_code=False)
    blocks = token_blocks(read_corpus(config.treebank, config.select_on).dev, tokenizer, config.seq_len,
                          masked_lm=False)[:count]
    if not len(blocks):
        raise ConfigError(f"run: expected held-out blocks of {config.seq_len} tokens, found none", path=run.folder)
    return HeldOut(text_batch(blocks), _all_but_first(blocks.shape))


def text_batch(ids: npt.NDArray[np.int64]) -> TaskBatch:
    """Sequences without task roles (text): only the standard head types are scored on them."""
    none = np.full(ids.shape, -1, dtype=np.int64)
    return TaskBatch(ids=ids.astype(np.int64), loss_mask=_all_but_first(ids.shape), role_of=none, key_of=none.copy(),
                     role_names=())


def _all_but_first(shape: tuple[int, ...]) -> npt.NDArray[np.bool_]:
    scored = np.ones(shape, dtype=bool)
    scored[:, 0] = False
    return scored


# ----------------------------------------------------------------------------- one pass of one model
def forward_pass(model: Any, ids: npt.NDArray[np.int64], *, causal: bool = True
                 ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
    """``(attention (N, L, H, T, T) float32, token loss (N, T))`` of ``model`` on ``ids``, in batches of
    :data:`_ROWS`: the token loss at ``t`` is ``-log p(ids[t] | ids[< t])`` (0 at ``t = 0``; all NaN when not
    ``causal``: no language-model head)."""
    import torch

    device = next(model.parameters()).device
    maps, losses = [], []
    with torch.no_grad():
        for start in range(0, len(ids), _ROWS):
            block = torch.from_numpy(ids[start:start + _ROWS]).to(device)
            extra = {"use_cache": False} if causal else {}
            out = model(input_ids=block, attention_mask=torch.ones_like(block), output_attentions=True, **extra)
            maps.append(torch.stack(out.attentions, dim=1).float().cpu().numpy())
            loss = np.full(block.shape, np.nan)
            if causal:  # the logits at t - 1 predict the token at t (as function_tests scores it)
                loss[:, 0] = 0.0
                loss[:, 1:] = torch.nn.functional.cross_entropy(out.logits[:, :-1].transpose(1, 2), block[:, 1:],
                                                                reduction="none").double().cpu().numpy()
            losses.append(loss)
    return np.concatenate(maps), np.concatenate(losses)


def role_losses(token_loss: npt.NDArray[np.float64], held: HeldOut, n_roles: int) -> npt.NDArray[np.float64]:
    """``(n_roles,)`` the mean token loss on the positions each task role predicts (``q + 1`` for a query ``q`` of
    the role); NaN for the roles beyond the task's (the standard types) and for a role that predicts none."""
    out = np.full(n_roles, np.nan)
    role_of = held.batch.role_of[:, :-1]  # query q predicts the token at q + 1
    following = token_loss[:, 1:]
    for r in range(len(held.batch.role_names)):
        picked = following[role_of == r]
        if len(picked):
            out[r] = float(picked.mean())
    return out


def _trainable(record: TrainingRecord, tokenizer: Any) -> int:
    """The trainable parameters of the run's model (an attention-only model's frozen MLP left out; tied weights
    once): those of a fresh model of its config."""
    from probes.training.models import build_model

    model = build_model(record.config, tokenizer)
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


@dataclass(frozen=True)
class Measured:
    """What was measured over the steps: role scores and losses per step, and the last step's extras."""

    steps: list[int]
    names: tuple[str, ...]
    scores: list[npt.NDArray[np.float64]]
    dev_loss: list[float]
    role_loss: npt.NDArray[np.float64]
    maps: npt.NDArray[np.float32]


def measure_pass(attention: npt.NDArray[np.float32], token_loss: npt.NDArray[np.float64], held: HeldOut
             ) -> tuple[tuple[str, ...], npt.NDArray[np.float64], float]:
    """``(role names, role scores (R, L, H), dev loss)`` of one model's pass on ``held``."""
    from probes.analysis.task_roles import role_scores

    scores = role_scores(attention, held.batch)
    loss = float(token_loss[held.scored].mean()) if held.scored.any() else float("nan")
    return scores.names, scores.scores, loss


def lab_analysis(*, name: str, cell: str, seed: int, task: str, members: int, params: int, measured: Measured,
                 function: FunctionTests | None, ablation: str, n_sequences: int) -> LabModelAnalysis:
    """The :class:`LabModelAnalysis` of what was measured."""
    scores = np.stack(measured.scores)
    return LabModelAnalysis(
        name=name, cell=cell, seed=int(seed), task=task, members=members, n_layers=int(scores.shape[2]),
        n_heads=int(scores.shape[3]), params=int(params), steps=np.asarray(measured.steps, dtype=np.int64),
        dev_loss=np.asarray(measured.dev_loss, dtype=np.float64), role_names=measured.names, role_scores=scores,
        role_loss=measured.role_loss, maps=measured.maps, function=function, ablation=ablation,
        n_sequences=n_sequences)


def head_maps(attention: npt.NDArray[np.float32], count: int) -> npt.NDArray[np.float32]:
    """``(L, H, M, T, T)`` float32: the maps of the first ``count`` sequences, layer and head first."""
    return np.ascontiguousarray(attention[:count].transpose(1, 2, 0, 3, 4), dtype=np.float32)


# ----------------------------------------------------------------------------- one run
def analyse_lab_run(run: str | Path, *, name: str, cell: str, seed: int, eval_sequences: int = 64,
                    map_sequences: int = 8, ablation: str = "mean", ablation_seed: int = 0) -> LabModelAnalysis:
    """Measure the finished ``probes train`` run folder ``run`` (see the module): role scores and held-out loss
    at every checkpoint step; at the last, the loss on each role's positions, the maps of the first
    ``map_sequences`` and the tests of function (single heads and pairs within a layer, ``ablation``).

    Raises:
        ConfigError: an option out of range (naming it), a folder that is no finished run, a masked-LM text run.
    """
    check_identity(name, cell, seed)
    options = LabOptions(eval_sequences, map_sequences, ablation, ablation_seed)
    return _analyse_run(_read(run, "run"), name=name, cell=cell, seed=seed, options=options)


def _analyse_run(run: _Run, *, name: str, cell: str, seed: int, options: LabOptions) -> LabModelAnalysis:
    from probes.extraction.gradients import load_lm

    held = _held_out(run, options.eval_sequences)
    scores, losses = [], []
    for folder in run.checkpoints.values():  # ascending: the loop ends on the last step
        model, tokenizer, _, _ = load_lm(str(folder))
        attention, token_loss = forward_pass(model, held.ids)
        names, score, loss = measure_pass(attention, token_loss, held)
        scores.append(score)
        losses.append(loss)
    function = function_tests(model, held.ids, held.scored, ablation=options.ablation, seed=options.ablation_seed)
    measured = Measured(list(run.checkpoints), names, scores, losses, role_losses(token_loss, held, len(names)),
                        head_maps(attention, options.map_sequences))
    return lab_analysis(name=name, cell=cell, seed=seed, task=run.record.config.task, members=1,
                        params=_trainable(run.record, tokenizer), measured=measured, function=function,
                        ablation=options.ablation, n_sequences=len(held.ids))


# ----------------------------------------------------------------------------- a literal ensemble
def _read_members(members: Sequence[str | Path]) -> list[_Run]:
    """Every member run read; a ConfigError naming ``members`` when they are not of one task and one shape, or
    share no checkpoint step."""
    if isinstance(members, (str, Path)) or not len(members):
        raise ConfigError(f"members: expected one or more run folders, found {members!r}")
    runs = [_read(member, f"members[{k}]") for k, member in enumerate(members)]
    first = runs[0].record.config

    def shape(config: Any) -> tuple[Any, ...]:
        return (config.layers, config.heads, config.seq_len, config.task, config.task_spec, config.data_seed,
                config.treebank, config.select_on)

    for k, member in enumerate(runs[1:], start=1):
        if shape(member.record.config) != shape(first):
            raise ConfigError(f"members[{k}]: expected a run of the task and shape of members[0] (layers, heads, "
                              f"seq_len, task and its options, data_seed, data), found {shape(member.record.config)} "
                              f"against {shape(first)}", path=member.folder)
    common = set.intersection(*(set(r.checkpoints) for r in runs))
    if not common:
        raise ConfigError("members: expected checkpoint steps every member has, found none in common")
    return runs


def analyse_ensemble(members: Sequence[str | Path], *, name: str, cell: str, seed: int, eval_sequences: int = 64,
                     map_sequences: int = 8, ablation: str = "mean", ablation_seed: int = 0) -> LabModelAnalysis:
    """Measure the literal ensemble of the finished run folders ``members`` (one task, one shape; see the
    module): heads member-major (``N * h`` per layer), role scores of every member head and the loss of the
    averaged prediction at every step all members have, the ensemble's tests of function from each member's own
    at the last common step, parameters summed.

    Raises:
        ConfigError: an option out of range (naming it), a member that is no finished run, members of other tasks
            or shapes, or without a common checkpoint step.
    """
    check_identity(name, cell, seed)
    options = LabOptions(eval_sequences, map_sequences, ablation, ablation_seed)
    return _analyse_members(_read_members(members), name=name, cell=cell, seed=seed, options=options)


def _analyse_members(runs: list[_Run], *, name: str, cell: str, seed: int, options: LabOptions
                     ) -> LabModelAnalysis:
    from probes.extraction.gradients import load_lm
    from probes.importance.ensemble_function import ensemble_function_tests
    from probes.training.ensemble import ensemble_token_loss

    held = _held_out(runs[0], options.eval_sequences)
    common = sorted(set.intersection(*(set(r.checkpoints) for r in runs)))
    scores, losses = [], []
    for step in common:  # ascending: the loop ends on the last common step
        loaded = [load_lm(str(r.checkpoints[step])) for r in runs]
        models = [m for m, _, _, _ in loaded]
        attention = np.concatenate([forward_pass(m, held.ids)[0] for m in models], axis=2)  # heads member-major
        token_loss = _ensemble_loss(ensemble_token_loss(models, held.ids, held.scored), held.scored)
        names, score, loss = measure_pass(attention, token_loss, held)
        scores.append(score)
        losses.append(loss)
    role_loss = role_losses(token_loss, held, len(names))
    function = ensemble_function_tests([function_tests(m, held.ids, held.scored, ablation=options.ablation,
                                                       seed=options.ablation_seed) for m in models])
    params = sum(_trainable(r.record, tokenizer) for r, (_, tokenizer, _, _) in zip(runs, loaded, strict=True))
    measured = Measured(common, names, scores, losses, role_loss, head_maps(attention, options.map_sequences))
    return lab_analysis(name=name, cell=cell, seed=seed, task=runs[0].record.config.task, members=len(runs),
                        params=params, measured=measured, function=function, ablation=options.ablation,
                        n_sequences=len(held.ids))


def _ensemble_loss(tokens: npt.NDArray[np.float64], scored: npt.NDArray[np.bool_]) -> npt.NDArray[np.float64]:
    """``(N, T)`` the ensemble's loss at each scored token (0 elsewhere) from its ``(n_tokens,)`` in mask order."""
    out = np.zeros(scored.shape)
    out[scored] = tokens
    return out
