"""``[train]`` tables in ``probes run``: training units trained before the analyses, re-used, resumed and retrained
only where their config changed; the models they add, their lab infos and the selectors; bad tables refused.

One tiny lab (GPT-2, 2 layers x 2 heads, hidden 16, 20 steps on sample:dev, 2 cells x 2 seeds) trains once for
the whole module; the tests that change it work on a copy of its run folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from probes.errors import ConfigError

pytest.importorskip("torch")
pytestmark = pytest.mark.xdist_group("experiment-train")

LAB = """
[experiment]
name = "lab"
n_resamples = 20
unit_reports = false

[train]
arch = "gpt2"
layers = 2
heads = 2
hidden = 16
steps = 20
batch_size = 4
seq_len = 128
tokenizer = "train:300"
seeds = [1, 2]
symmetry_sentences = 4
treebank = "sample:dev"
checkpoint_models = [0, 8, 20, 64]

[train.identical]
init = "identical"

[train.independent]
learning_rate = {lr}

[data.sample]
treebank = "sample:test"
select_on = "sample:dev"

[analyses.atlas]
models = ["train:*@last", "train:independent@8"]
js_sentences = 8
grad_sentences = 0
head_type_sequences = 0
limit = 16
"""
CELLS = {"identical": (1, 2), "independent": (1, 2)}


def _write(folder: Path, lr: str = "1e-3") -> Path:
    path = folder / "lab.toml"
    path.write_text(LAB.format(lr=lr), encoding="utf-8")
    return path


def _stamps(out: Path) -> dict[str, int]:
    """mtime (ns) of every checkpoint's weights, by path: equal before and after means nothing was retrained."""
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in sorted((out / "train").rglob("model.safetensors"))}


def _run(path: Path, out: Path):
    from probes.runs.experiment import run_experiment

    return run_experiment(path, out=out, progress=False)


def _how(run) -> dict[str, str]:
    return {u["model"]: u["how"] for u in run.record.details.run.units if u["kind"] == "train"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    import torch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("lab")
    path, out = _write(root), root / "run"
    run = _run(path, out)
    return path, out, run, _stamps(out)


def test_training_units_are_trained_into_the_run_folder_before_the_analyses(lab) -> None:
    from probes.extraction.trained_runs import list_checkpoints

    _, out, run, stamps = lab
    units = [u for u in run.record.details.run.units if u["kind"] == "train"]
    assert [(u["data"], u["options"]["seed"]) for u in units] == [(c, s) for c, seeds in CELLS.items() for s in seeds]
    for u in units:
        folder = out / u["run_folder"]
        assert folder == out / "train" / u["data"] / f"seed-{u['options']['seed']}"
        assert list(list_checkpoints(folder)) == [0, 1, 2, 4, 8, 16, 20]  # log2 checkpoints and the last
        assert json.loads((folder / "run.json").read_text())["command"] == "probes train"
        assert u["how"] == "trained" and not u["reused"] and u["seconds"] > 0
        assert u["options"]["config"]["seed"] == u["options"]["seed"] and u["options"]["config"]["data_seed"] == 0
    lines = run.record.details.run.train["lines"]
    assert lines[0].startswith("train identical seed 1: 20 steps, ") and "tokens/s" in lines[0]
    assert run.record.timings["train_s"] > 0
    assert len(stamps) == 4 * 7


def test_identical_heads_stay_exactly_equal_and_independent_ones_do_not(lab) -> None:
    """Permutation symmetry: equal heads get equal gradients and AdamW keeps them equal (no attention dropout)."""
    from probes.results import load

    _, out, run, _ = lab
    found = {u["model"]: load(out / u["path"] / "result") for u in run.record.details.run.units if u["kind"] == "train"}
    for name in ("identical-s1", "identical-s2"):
        symmetry = found[name].symmetry
        assert symmetry.steps[-1] == 20 and symmetry.attention_distance.shape == (7, 2, 2, 2)
        assert np.all(symmetry.attention_distance[-1] == 0.0) and np.all(symmetry.param_distance == 0.0)
    independent = found["independent-s1"].symmetry.param_distance[-1]
    assert np.all(independent[:, 0, 1] > 0.5)  # independent random blocks: about 1.4 apart
    curves = found["identical-s1"].curves
    assert list(curves.steps) == [0, 1, 2, 4, 8, 16, 20] and curves.dev_loss[-1] < curves.dev_loss[0]


def test_lab_models_carry_their_lab_info_and_the_selectors_choose_them(lab) -> None:
    _, out, run, _ = lab
    models = run.record.details.models
    assert sorted(models) == sorted([f"{c}-s{s}" for c in CELLS for s in (1, 2)]
                                    + [f"{c}-s{s}-step{k}" for c in CELLS for s in (1, 2) for k in (0, 8)])
    assert models["identical-s2"]["spec"] == f"trained:{out}/train/identical/seed-2@last"
    assert models["identical-s2"]["lab"] == {"cell": "identical", "seed": 2, "step": None, "last_step": 20,
                                             "heads": 2, "layers": 2, "init": "identical", "attention_dropout": 0.0}
    assert models["independent-s1-step8"]["lab"]["step"] == 8
    assert models["independent-s1-step8"]["spec"].endswith("seed-1@8")
    assert run.comparison.models == {}  # no [models] here: the lab's models enter only the lab's section
    assert {r.cell for r in run.comparison.lab.final_loss} == set(CELLS)
    atlas = sorted(u["model"] for u in run.record.details.run.units if u["kind"] == "atlas")
    assert atlas == sorted(["identical-s1", "identical-s2", "independent-s1", "independent-s2",
                            "independent-s1-step8", "independent-s2-step8"])
    skipped = run.record.details.run.train["skipped"]
    assert "identical-s1-step20: not a model, step 20 is its last step (that is the model itself)" in skipped
    assert "identical-s1-step64: not a model, step 64 is beyond its last step 20" in skipped


def test_train_units_reach_the_comparison_with_their_options(lab) -> None:
    from probes.runs.experiment import report_experiment

    _, out, _, _ = lab
    again = report_experiment(out, out=out.parent / "report-copy")  # from the saved units alone
    record_units = [u for u in again.record.details.run.units if u["kind"] == "train"]
    assert len(record_units) == 4
    independent = next(r for r in again.comparison.lab.final_loss if r.cell == "independent")
    assert independent.n_seeds == 2 and independent.init == "independent"  # the seeds' lab info, read back


def test_second_run_reuses_every_training_unit(lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import probes.runs.train

    path, out, _, _ = lab
    copy = tmp_path / "run"  # a moved run folder keeps its keys: lab models are keyed by name and weights
    shutil.copytree(out, copy)
    before = _stamps(copy)

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("a re-used unit was trained again")

    monkeypatch.setattr(probes.runs.train, "train_model", no_training)
    run = _run(path, copy)
    assert _stamps(copy) == before
    assert set(_how(run).values()) == {"re-used, as trained before"}
    assert all(u["reused"] for u in run.record.details.run.units)


def test_a_changed_option_retrains_only_its_cell(lab, tmp_path: Path) -> None:
    path, out, _, _ = lab
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    before = _stamps(copy)
    run = _run(_write(tmp_path, lr="2e-3"), copy)
    after = _stamps(copy)
    how = _how(run)
    for name in ("identical-s1", "identical-s2"):
        assert how[name] == "re-used, as trained before"
    for name in ("independent-s1", "independent-s2"):
        assert how[name].startswith("trained: the earlier run was removed, options changed "
                                    "(--learning-rate: 0.001 -> 0.002")
    changed = {k for k in before if before[k] != after[k]}
    assert changed and all(k.startswith("train/independent/") for k in changed)
    assert json.loads((copy / "train/independent/seed-1/run.json").read_text())["options"]["learning_rate"] == 0.002


def test_a_lost_unit_file_or_report_is_made_again_without_training(lab, tmp_path: Path) -> None:
    """The unit file of one run lost, the report (run.json) of another: neither trains a step again."""
    path, out, _, _ = lab
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    shutil.rmtree(copy / "results/train/identical-s1")
    (copy / "train/identical/seed-2/run.json").unlink()
    before = _stamps(copy)
    run = _run(path, copy)
    how = _how(run)
    assert how["identical-s1"] == "re-used the finished run folder"
    assert how["identical-s2"] == "checkpoints found, report made again"
    assert _stamps(copy) == before
    assert (copy / "train/identical/seed-2/run.json").is_file()


# ----------------------------------------------------------------------------- reading the tables
def _read(tmp_path: Path, text: str):
    from probes.runs.experiment_spec import read_experiment

    path = tmp_path / "x.toml"
    path.write_text(text, encoding="utf-8")
    return read_experiment(path)


_HEAD = """
[train]
arch = "gpt2"
layers = 1
heads = 2
hidden = 16
treebank = "sample:dev"
seeds = [1, 2]
"""
_TAIL = """
[data.sample]
treebank = "sample:test"

[analyses.atlas]
"""


@pytest.mark.parametrize("cell, expected", [
    ('[train.a]\nlayrs = 2\n', r"x\.toml:11: train\.a\.layrs: unknown key of \[train\.a\]; expected one of "),
    ('[train.a]\nheads = "four"\n', r'x\.toml:11: train\.a\.heads: expected a whole number from 1 to 1024, '
                                    r'found "four"'),
    ('[train.a]\nheads = 3\n', r"x\.toml:11: train\.a\.heads: expected a divisor of hidden 16 \(head size = "
                               r"hidden / heads\), found 3"),
    ('[train.a]\ninit = "sideways"\n', r"x\.toml:11: train\.a\.init: "),
    ('[train.a]\nseed = 4\n', r"x\.toml:11: train\.a\.seed: not taken here: give seeds = \[\.\.\.\]"),
    ('[train.a]\nseeds = [1, 1]\n', r"train\.a\.seeds: expected a non-empty list of distinct seeds, found \[1, 1\]"),
    ('[train.a]\ncheckpoint_models = [3]\n', r"x\.toml:11: train\.a\.checkpoint_models: expected checkpoint steps "
                                             r"of cell a \(log2: 0, 1, 2, 4, 8, .*found 3"),
    ('[train.a]\nattention_dropout = 1.5\n', r"train\.a\.attention_dropout: expected a number in \[0, 1\), found 1\.5"),
    ('[train.a]\ntreebank = []\n', r"train\.a\.treebank: expected a file or treebank name"),
    ('[train.steps]\ninit = "identical"\n', r"train\.steps: cell name 'steps' is a key of \[train\]"),
    ('', r"x\.toml:2: train: expected at least one \[train\.CELL\] table"),
])
def test_bad_train_tables_are_refused_at_their_line(tmp_path: Path, cell: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        _read(tmp_path, _HEAD + "\n" + cell + _TAIL)


def test_a_default_refused_by_train_config_names_its_line_and_the_cell(tmp_path: Path) -> None:
    text = _HEAD.replace("heads = 2", "heads = 3") + "\n[train.a]\n" + _TAIL
    with pytest.raises(ConfigError, match=r"x\.toml:5: train\.heads: expected a divisor of hidden 16 .*found 3 "
                                          r"\(in cell a\)"):
        _read(tmp_path, text)


def test_a_cell_without_an_architecture_is_refused(tmp_path: Path) -> None:
    text = _HEAD.replace('arch = "gpt2"\n', "") + "\n[train.a]\n" + _TAIL
    with pytest.raises(ConfigError, match=r"train\.a: expected arch \(in \[train\] or \[train\.a\]\), found none"):
        _read(tmp_path, text)


_SELECTING = (_HEAD.replace("seeds = [1, 2]", "seeds = [1, 2]\nsteps = 4")
              + '\n[train.a]\ncheckpoint_models = [2]\n\n[train.b]\n\n[models]\nbert = "some/folder"\n' + _TAIL)


@pytest.mark.parametrize("models, expected", [
    ('["train:*"]', ["a-s1", "a-s1-step2", "a-s2", "a-s2-step2", "b-s1", "b-s2"]),
    ('["train:*@last"]', ["a-s1", "a-s2", "b-s1", "b-s2"]),
    ('["train:*@2"]', ["a-s1-step2", "a-s2-step2"]),
    ('["train:b"]', ["b-s1", "b-s2"]),
    ('["train:a@last", "models:*", "a-s1"]', ["a-s1", "a-s2", "bert"]),
    (None, ["bert", "a-s1", "a-s1-step2", "a-s2", "a-s2-step2", "b-s1", "b-s2"]),  # default: every model
])
def test_selectors_choose_lab_and_given_models(tmp_path: Path, models: str | None, expected: list[str]) -> None:
    experiment = _read(tmp_path, _SELECTING + ("" if models is None else f"models = {models}\n"))
    assert list(experiment.analyses[0].models) == expected
    assert experiment.model("a-s2-step2").spec == f"trained:{experiment.out}/train/a/seed-2@2"


@pytest.mark.parametrize("models, expected", [
    ('["train:nope"]', r"model selector 'train:nope': no training cell 'nope'; expected "
                       r"one of a, b"),
    ('["train:b@2"]', r"model selector 'train:b@2': matches no model \(cell b's checkpoint_models hold no step 2\)"),
    ('["train:a@x"]', r"model selector 'train:a@x': expected one of train:\* \(every lab model\)"),
    ('["lab"]', r"unknown model 'lab'; expected one of bert, a-s1"),
])
def test_bad_selectors_are_refused_at_their_line(tmp_path: Path, models: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=r"x\.toml:\d+: analyses\.atlas\.models: " + expected):
        _read(tmp_path, _SELECTING + f"models = {models}\n")


def test_models_may_be_empty_with_train_tables_only(tmp_path: Path) -> None:
    experiment = _read(tmp_path, _HEAD + "\n[train.a]\n\n[models]\n" + _TAIL)
    assert [m.name for m in experiment.models] == ["a-s1", "a-s2"]
    with pytest.raises(ConfigError, match=r"expected a \[models\] table with at least one entry"):
        _read(tmp_path, "[models]\n" + _TAIL)


def test_a_model_name_taken_by_a_training_unit_and_an_analysis_named_train_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"models\.a-s1: model name 'a-s1' is taken by a training unit"):
        _read(tmp_path, _HEAD + '\n[train.a]\n\n[models]\na-s1 = "x"\n' + _TAIL)
    with pytest.raises(ConfigError, match=r"analyses\.train: analysis name 'train' is taken by the training units"):
        _read(tmp_path, _HEAD + "\n[train.a]\n" + _TAIL.replace("[analyses.atlas]",
                                                                  "[analyses.train]\nkind = \"atlas\""))
