"""The role lab's measurements (probes.importance.lab_model, lab_pretrained) against references computed by hand:
role scores from each checkpoint's own attention, -log p on the loss mask, function_tests called directly, the
ensemble's -log of the mean member probability, and the pretrained probe's period structure."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from probes.analysis.task_roles import role_scores
from probes.errors import ConfigError
from probes.extraction.trained_runs import list_checkpoints
from probes.importance.ensemble_function import ensemble_function_tests
from probes.importance.function import function_tests
from probes.importance.lab_model import analyse_ensemble, analyse_lab_run
from probes.importance.lab_pretrained import PretrainedOptions, analyse_pretrained, induction_probe, ordinary_ids
from probes.importance.lab_types import LabModelAnalysis
from probes.results import equal
from probes.training.config import TrainConfig
from probes.training.tasks import DEV_STREAM

EVAL, MAPS = 6, 2
OFFSET = 2  # gpt2's end-of-text and padding tokens come first in a task run's vocabulary


def _config(task: str, seed: int) -> TrainConfig:
    return TrainConfig(arch="gpt2", layers=2, heads=2, hidden=16, attention_only=True, task=task, task_vocab=12,
                       seq_len=24, period_min=4, period_max=8, steps=4, batch_size=4, seed=seed, data_seed=5)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Three tiny attention-only runs trained here: ``roles`` at seeds 1 and 2 (one data seed), ``induction``."""
    from probes.training.trainer import train

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("lab")
    try:
        out = {}
        for key, task, seed in (("roles1", "roles", 1), ("roles2", "roles", 2), ("induction", "induction", 1)):
            train(_config(task, seed), root / key, progress=False)
            out[key] = root / key
        return out
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def roles1(runs) -> LabModelAnalysis:
    return analyse_lab_run(runs["roles1"], name="roles-s1", cell="roles", seed=1, eval_sequences=EVAL,
                           map_sequences=MAPS)


def _held(task: str, count: int = EVAL) -> Any:
    """The run's held-out sequences, drawn here from the task's own generator (model ids: task ids + 2)."""
    spec = _config(task, 1).task_spec
    parts = [spec.example(5, DEV_STREAM, i) for i in range(count)]
    return (np.concatenate([p.ids for p in parts]) + OFFSET, np.concatenate([p.loss_mask for p in parts]),
            np.concatenate([p.role_of for p in parts]))


def _batch(task: str, count: int = EVAL) -> Any:
    from probes.training.tasks import TaskBatch

    spec = _config(task, 1).task_spec
    parts = [spec.example(5, DEV_STREAM, i) for i in range(count)]
    return TaskBatch(ids=np.concatenate([p.ids for p in parts]), loss_mask=np.concatenate([p.loss_mask for p in parts]),
                     role_of=np.concatenate([p.role_of for p in parts]),
                     key_of=np.concatenate([p.key_of for p in parts]), role_names=spec.role_names)


def _by_hand(folder: Path, ids: np.ndarray) -> tuple[np.ndarray, Any]:
    """``(attention (N, L, H, T, T), logits)`` of the checkpoint ``folder`` on ``ids``, loaded and run here."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(ids), output_attentions=True, use_cache=False)
    return torch.stack(out.attentions, dim=1).numpy(), out.logits.double()


def _nll(logits: Any, ids: np.ndarray) -> np.ndarray:
    """``(N, T)`` -log p(ids[t] | ids[< t]), NaN at t = 0."""
    logp = torch.log_softmax(logits, dim=-1).numpy()
    out = np.full(ids.shape, np.nan)
    n, t = ids.shape
    for i in range(n):
        for j in range(1, t):
            out[i, j] = -logp[i, j - 1, ids[i, j]]
    return out


# ----------------------------------------------------------------------------- one run
def test_role_scores_and_dev_loss_at_every_step_equal_hand(runs, roles1):
    ids, mask, _ = _held("roles")
    steps = list_checkpoints(runs["roles1"])
    assert roles1.steps.tolist() == list(steps) == [0, 1, 2, 4]
    assert roles1.role_names == ("previous", "two_back", "first", "induction", "std:previous_token", "std:induction")
    assert (roles1.task, roles1.members, roles1.n_layers, roles1.n_heads, roles1.n_sequences) == ("roles", 1, 2, 2, EVAL)
    for c, folder in enumerate(steps.values()):
        attention, logits = _by_hand(folder, ids)
        want = role_scores(attention, _batch("roles"))
        np.testing.assert_allclose(roles1.role_scores[c], want.scores, rtol=1e-5, atol=1e-6)
        nll = _nll(logits, ids)
        assert roles1.dev_loss[c] == pytest.approx(float(nll[mask].mean()), rel=1e-5)
    # the trainer's own held-out loss on the same labels (transformers' shifted cross-entropy), at the last step
    model = transformers.AutoModelForCausalLM.from_pretrained(list(steps.values())[-1]).eval()
    with torch.no_grad():
        hf = model(input_ids=torch.from_numpy(ids), labels=torch.from_numpy(np.where(mask, ids, -100))).loss
    assert roles1.dev_loss[-1] == pytest.approx(float(hf), rel=1e-5)


def test_role_loss_maps_and_params(runs, roles1):
    ids, mask, role_of = _held("roles")
    folder = list(list_checkpoints(runs["roles1"]).values())[-1]
    attention, logits = _by_hand(folder, ids)
    nll = _nll(logits, ids)
    for r in range(4):  # the answer after each marker of role r
        where = np.zeros_like(mask)
        where[:, 1:] = role_of[:, :-1] == r
        want = nll[where].mean() if where.any() else np.nan
        np.testing.assert_allclose(roles1.role_loss[r], want, rtol=1e-5)
    assert np.isnan(roles1.role_loss[4:]).all()
    assert roles1.maps.dtype == np.float32 and roles1.maps.shape == (2, 2, MAPS, 24, 24)
    np.testing.assert_allclose(roles1.maps, attention[:MAPS].transpose(1, 2, 0, 3, 4), atol=1e-6)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    frozen = (".mlp.", ".ln_2.")  # gpt2's MLP and the LayerNorm only it reads: frozen, never trained
    mlp = sum(p.numel() for name, p in model.named_parameters() if any(f in name for f in frozen))
    assert roles1.params == sum(p.numel() for p in model.parameters()) - mlp


def test_function_equals_function_tests_called_directly(runs, roles1):
    ids, mask, _ = _held("roles")
    folder = list(list_checkpoints(runs["roles1"]).values())[-1]
    direct = function_tests(str(folder), ids, mask, ablation="mean")
    assert roles1.function is not None and roles1.ablation == "mean"
    for field in ("token_loss", "damage", "pair_damage", "pairs", "donors"):
        np.testing.assert_allclose(getattr(roles1.function, field), getattr(direct, field), rtol=1e-6, atol=1e-9)
    assert roles1.function.n_tokens == int(mask.sum())


def test_induction_run_loss_is_its_one_roles_loss_and_resample(runs):
    got = analyse_lab_run(runs["induction"], name="ind-s1", cell="ind", seed=1, eval_sequences=EVAL,
                          map_sequences=0, ablation="resample", ablation_seed=3)
    ids, mask, _ = _held("induction")
    assert got.role_names == ("induction", "std:previous_token", "std:induction")
    assert got.role_loss[0] == pytest.approx(got.dev_loss[-1], rel=1e-9)  # every predicted token is a copy
    assert got.maps.shape == (2, 2, 0, 24, 24)
    folder = list(list_checkpoints(runs["induction"]).values())[-1]
    direct = function_tests(str(folder), ids, mask, ablation="resample", seed=3)
    np.testing.assert_allclose(got.function.damage, direct.damage, rtol=1e-6, atol=1e-9)
    assert got.function.donors.tolist() == direct.donors.tolist()


def test_results_save_and_load(tmp_path, roles1):
    back = LabModelAnalysis.load(roles1.save(tmp_path / "lab"))
    assert equal(back, roles1)
    table = roles1.to_pandas()
    assert len(table) == 4 * 6 * 4 and set(table["head"]) == {"1-1", "1-2", "2-1", "2-2"}


@pytest.mark.parametrize(("options", "named"), [
    ({"eval_sequences": 0}, "eval_sequences"), ({"map_sequences": -1}, "map_sequences"),
    ({"ablation": "zero"}, "ablation"), ({"ablation_seed": -1}, "ablation_seed"),
    ({"eval_sequences": 1, "map_sequences": 1, "ablation": "resample"}, "eval_sequences"),
    ({"name": ""}, "name"), ({"cell": 3}, "cell"), ({"seed": -2}, "seed")])
def test_bad_options_name_the_option(runs, options, named):
    identity = {"name": "x", "cell": "x", "seed": 1}
    for key in ("name", "cell", "seed"):
        if key in options:
            identity.pop(key)
    with pytest.raises(ConfigError, match=named):
        analyse_lab_run(runs["roles1"], **identity, **options)
    with pytest.raises(ConfigError, match=named):
        analyse_ensemble([runs["roles1"]], **identity, **options)


def test_a_folder_that_is_no_run_is_refused(tmp_path, runs):
    with pytest.raises(ConfigError, match="run: expected a finished `probes train"):
        analyse_lab_run(tmp_path, name="x", cell="x", seed=1)
    with pytest.raises(ConfigError, match=r"members\[1\]: expected a run of the task"):
        analyse_ensemble([runs["roles1"], runs["induction"]], name="x", cell="x", seed=1)


# ----------------------------------------------------------------------------- the literal ensemble
def test_ensemble_loss_is_minus_log_mean_member_probability(runs, roles1):
    got = analyse_ensemble([runs["roles1"], runs["roles2"]], name="ens-s1", cell="ens", seed=1,
                           eval_sequences=EVAL, map_sequences=MAPS)
    ids, mask, _ = _held("roles")
    assert (got.members, got.n_heads, got.n_layers) == (2, 4, 2)
    assert got.steps.tolist() == [0, 1, 2, 4]
    one = list_checkpoints(runs["roles1"])
    two = list_checkpoints(runs["roles2"])
    for c, step in enumerate(got.steps.tolist()):
        (a1, l1), (a2, l2) = _by_hand(one[step], ids), _by_hand(two[step], ids)
        p = (np.exp(-_nll(l1, ids)) + np.exp(-_nll(l2, ids))) / 2
        assert got.dev_loss[c] == pytest.approx(float(-np.log(p[mask]).mean()), rel=1e-6)
        np.testing.assert_allclose(got.role_scores[c], role_scores(np.concatenate([a1, a2], axis=2),
                                                                  _batch("roles")).scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.role_scores[:, :, :, :2], roles1.role_scores)  # member 0's heads come first
    members = [function_tests(str(one[4]), ids, mask), function_tests(str(two[4]), ids, mask)]
    np.testing.assert_allclose(got.function.damage, ensemble_function_tests(members).damage, rtol=1e-6, atol=1e-9)
    second = analyse_lab_run(runs["roles2"], name="roles-s2", cell="roles", seed=2, eval_sequences=EVAL,
                             map_sequences=MAPS)
    assert got.params == roles1.params + second.params
    np.testing.assert_allclose(got.maps, np.concatenate([roles1.maps, second.maps], axis=1))


# ----------------------------------------------------------------------------- a pretrained model
@pytest.fixture(scope="module")
def tiny_clm(tmp_path_factory) -> Path:
    """A tiny GPT-2 with its LM head and byte-level tokenizer, saved as a model folder."""
    from tests.tiny_models import build

    root = tmp_path_factory.mktemp("clm")
    bare = build("gpt2", root / "bare")
    folder = root / "gpt2-lm"
    shutil.copytree(bare, folder)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    torch.manual_seed(3)
    transformers.GPT2LMHeadModel(transformers.AutoConfig.from_pretrained(bare)).eval().save_pretrained(folder)
    return folder


def test_the_probe_has_the_promised_period_structure(tiny_clm):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_clm)
    allowed = ordinary_ids(tokenizer, len(tokenizer))
    assert not set(allowed.tolist()) & set(tokenizer.all_special_ids)
    held = induction_probe(allowed, PretrainedOptions(sequences=10, seq_len=30, period_min=3, period_max=9, seed=4))
    periods = held.batch.periods
    assert periods is not None and ((3 <= periods) & (periods <= 9)).all()
    for row, period in zip(held.ids, periods, strict=True):
        assert set(row.tolist()) <= set(allowed.tolist())
        assert (row[period:] == row[:-period]).all()
    for k, period in enumerate(periods):
        assert held.scored[k].tolist() == [t >= period + 1 for t in range(30)]
    ideal = held.batch.role_maps()[:, :1, None]  # (N, 1 layer, 1 head, T, T): the task's ideal induction map
    scores = role_scores(ideal, held.batch)
    assert scores.of("induction")[0, 0] == 1.0
    assert scores.of("std:induction")[0, 0] == pytest.approx(1.0)  # the atlas' induction type agrees


def test_pretrained_causal_lm_equals_hand(tiny_clm):
    options = PretrainedOptions(sequences=4, seq_len=20, period_min=3, period_max=6, seed=2)
    got = analyse_pretrained(str(tiny_clm), name="tiny", sequences=4, seq_len=20, period_min=3, period_max=6,
                             seed=2, map_sequences=4)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_clm)
    held = induction_probe(ordinary_ids(tokenizer, len(tokenizer)), options)
    attention, logits = _by_hand(tiny_clm, held.ids)
    assert (got.task, got.cell, got.seed, got.steps.tolist(), got.n_layers, got.n_heads) == ("induction", "tiny", 0,
                                                                                            [0], 2, 4)
    np.testing.assert_allclose(got.role_scores[0], role_scores(attention, held.batch).scores, rtol=1e-5, atol=1e-6)
    assert got.dev_loss[0] == pytest.approx(float(_nll(logits, held.ids)[held.scored].mean()), rel=1e-5)
    np.testing.assert_allclose(got.maps, attention.transpose(1, 2, 0, 3, 4), atol=1e-6)
    direct = function_tests(str(tiny_clm), held.ids, held.scored)
    np.testing.assert_allclose(got.function.damage, direct.damage, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got.function.pair_damage, direct.pair_damage, rtol=1e-6, atol=1e-9)
    single = analyse_pretrained(str(tiny_clm), name="tiny", sequences=4, seq_len=20, period_min=3, period_max=6,
                                seed=2, pairs=False)
    assert single.function.pair_scope == "none" and single.function.pairs.shape == (0, 2)
    np.testing.assert_allclose(single.function.damage, direct.damage, rtol=1e-6, atol=1e-9)


def test_pretrained_encoder_has_no_function_and_saves(tmp_path):
    from tests.tiny_models import build

    folder = build("bert", tmp_path / "bert")
    got = analyse_pretrained(str(folder), name="enc", sequences=3, seq_len=12, period_min=2, period_max=5)
    assert got.function is None and np.isnan(got.dev_loss).all() and np.isnan(got.role_loss).all()
    assert np.isfinite(got.role_scores).all() and got.maps.shape == (2, 4, 3, 12, 12)
    assert equal(LabModelAnalysis.load(got.save(tmp_path / "enc")), got)


@pytest.mark.parametrize(("options", "named"), [
    ({"sequences": 0}, "sequences"), ({"seq_len": 9, "period_max": 8}, "seq_len"),
    ({"period_min": 5, "period_max": 4}, "period_max"), ({"ablation": "zero"}, "ablation"),
    ({"function": 1}, "function"), ({"pairs": "yes"}, "pairs"), ({"map_sequences": -1}, "map_sequences"),
    ({"name": ""}, "name")])
def test_pretrained_bad_options_name_the_option(options, named):
    with pytest.raises(ConfigError, match=named):
        analyse_pretrained("no/such/model", **{"name": "x", **options})


# ----------------------------------------------------------------------------- a natural-text run
def test_text_run_loss_over_every_held_out_block_is_the_trainers(tmp_path):
    from probes.training.record import CheckpointRecord
    from probes.training.trainer import train

    config = TrainConfig(arch="gpt2", layers=1, heads=2, hidden=16, attention_only=True, treebank=("sample:dev",),
                         tokenizer="train:300", seq_len=16, steps=2, batch_size=4, seed=1)
    train(config, tmp_path / "text", progress=False)
    got = analyse_lab_run(tmp_path / "text", name="text-s1", cell="text", seed=1, eval_sequences=512, map_sequences=1)
    assert got.task == "text" and got.role_names == ("std:previous_token", "std:induction")
    assert np.isnan(got.role_loss).all() and got.function is not None
    assert got.function.n_tokens == got.n_sequences * 15  # every token but the first
    for c, folder in enumerate(list_checkpoints(tmp_path / "text").values()):
        import json

        record = CheckpointRecord.from_dict(json.loads((folder / "training.json").read_text()))
        assert got.n_sequences == record.run.data.dev_blocks < 512  # every held-out block, as the trainer took
        assert got.dev_loss[c] == pytest.approx(record.dev_loss, rel=1e-5)  # the trainer's own held-out loss
