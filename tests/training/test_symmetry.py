"""Head symmetry: distances between heads per checkpoint, in parameters and attention maps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from probes.errors import ConfigError, InputError
from probes.results import equal, load
from probes.training.record import CheckpointRecord
from probes.training.schemes import InitScheme, apply_scheme
from probes.training.symmetry import HeadSymmetry, attention_divergences, head_symmetry, param_distances
from tests.tiny_models import build
from tests.training.cases import a_record

SENTENCES = ["the quick brown fox jumps over the lazy dog .", "a cat sat on the mat , and the dog barked at it .",
             "she did n't know"]


def _checkpoint(family: str, folder: Path, scheme: str, seed: int = 0) -> Path:
    """A tiny model folder (tokenizer + base model of tests.tiny_models) with ``scheme`` applied to its weights."""
    from transformers import AutoModel

    built = build(family, folder, seed)
    model = AutoModel.from_pretrained(built)
    apply_scheme(model, InitScheme.parse(scheme), seed)
    model.save_pretrained(built)
    return built


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_identical_heads_are_exactly_zero_apart_and_independent_ones_are_not(family: str, tmp_path: Path) -> None:
    same = _checkpoint(family, tmp_path / "same", "identical")
    apart = _checkpoint(family, tmp_path / "apart", "independent")
    result = head_symmetry([same, apart], SENTENCES, steps=[0, 0])
    assert result.param_distance.shape == (2, 2, 4, 4) and result.n_sentences == 3
    assert np.all(result.param_distance[0] == 0.0) and np.all(result.attention_distance[0] == 0.0)
    off = ~np.eye(4, dtype=bool)
    assert np.all(result.param_distance[1][:, off] > 0.1) and np.all(result.attention_distance[1][:, off] > 0)
    assert np.array_equal(result.param_distance, result.param_distance.transpose(0, 1, 3, 2))


def test_the_distances_of_one_pair_by_hand() -> None:
    assert param_distances(np.array([[3.0, 4.0], [0.0, 0.0]])) == pytest.approx(np.array([[0, 2], [2, 0]]))
    assert param_distances(np.array([[1.0, 0.0], [0.0, 1.0]]))[0, 1] == pytest.approx(math.sqrt(2))
    assert param_distances(np.zeros((2, 3))).tolist() == [[0, 0], [0, 0]]
    maps = np.array([[[1.0, 0.0], [0.5, 0.5]], [[0.0, 1.0], [0.5, 0.5]]])  # 2 heads, 2 rows
    p, q = 0.999 + 0.0005, 0.0005  # smoothed first rows: (p, q) and (q, p); mixture (1/2, 1/2)
    row = 0.5 * (2 * (p * math.log(p / 0.5) + q * math.log(q / 0.5)))
    got = attention_divergences(maps)
    assert got[0, 1] == pytest.approx(row, rel=1e-12) and got[1, 0] == got[0, 1]
    assert got[0, 0] == 0.0 and got[1, 1] == 0.0


def _two_head_bert(folder: Path) -> Path:
    """The tiny bert tokenizer with a 2-head, 2-layer BertModel."""
    from transformers import BertConfig, BertModel

    built = build("bert", folder)
    config = BertConfig.from_pretrained(built)
    config.num_attention_heads = 2
    import torch

    torch.manual_seed(7)
    BertModel(config).save_pretrained(built)
    return built


def test_a_two_head_checkpoint_against_a_hand_computation(tmp_path: Path) -> None:
    import torch
    from transformers import AutoTokenizer, BertModel

    folder = _two_head_bert(tmp_path)
    result = head_symmetry([folder], SENTENCES[:2], steps=[5])
    model = BertModel.from_pretrained(folder, attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    d = 16
    for layer, block in enumerate(model.encoder.layer):
        s, o = block.attention.self, block.attention.output.dense
        with torch.no_grad():
            heads = [torch.cat([s.query.weight[k * d:(k + 1) * d].flatten(), s.query.bias[k * d:(k + 1) * d],
                                s.key.weight[k * d:(k + 1) * d].flatten(), s.key.bias[k * d:(k + 1) * d],
                                s.value.weight[k * d:(k + 1) * d].flatten(), s.value.bias[k * d:(k + 1) * d],
                                o.weight[:, k * d:(k + 1) * d].flatten()]).double() for k in range(2)]
            want = ((heads[0] - heads[1]).norm() / ((heads[0].norm() + heads[1].norm()) / 2)).item()
        assert result.param_distance[0, layer, 0, 1] == pytest.approx(want, rel=1e-9)
    total, rows = np.zeros(2), 0
    for text in SENTENCES[:2]:
        encoded = tokenizer(text.split(), is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            maps = model(**encoded, output_attentions=True).attentions
        for layer in range(2):
            a = maps[layer][0].double().numpy()
            n = a.shape[-1]
            for i in range(n):
                p, q = 0.999 * a[0, i] + 0.001 / n, 0.999 * a[1, i] + 0.001 / n
                m = (p + q) / 2
                total[layer] += 0.5 * sum(p * np.log(p / m)) + 0.5 * sum(q * np.log(q / m))
        rows += n
    assert result.attention_distance[0, :, 0, 1] == pytest.approx(total / rows, rel=1e-5)
    assert result.steps.tolist() == [5] and result.n_sentences == 2


def test_steps_come_from_training_json_or_the_folder_name(tmp_path: Path) -> None:
    base = _checkpoint("gpt2", tmp_path / "a", "identical")
    named = base.rename(tmp_path / "step-000004")
    recorded = _checkpoint("gpt2", tmp_path / "b", "identical")
    record = CheckpointRecord(run=a_record(), step=16, tokens_seen=1024, train_loss=4.0, dev_loss=4.5).to_dict()
    (recorded / "training.json").write_text(json.dumps(record), encoding="utf-8")
    assert head_symmetry([named, recorded], SENTENCES[:1]).steps.tolist() == [4, 16]
    unnamed = _checkpoint("gpt2", tmp_path / "c", "identical")
    with pytest.raises(InputError, match="step-NNNNNN"):
        head_symmetry([unnamed], SENTENCES[:1])
    (unnamed / "training.json").write_text(json.dumps({**record, "step": "late"}), encoding="utf-8")
    with pytest.raises(InputError, match="field 'step': expected int, found str 'late'"):
        head_symmetry([unnamed], SENTENCES[:1])


def test_bad_requests_are_refused(tmp_path: Path) -> None:
    folder = _checkpoint("gpt2", tmp_path, "identical")
    with pytest.raises(ConfigError, match="one step per checkpoint"):
        head_symmetry([folder], SENTENCES, steps=[1, 2])
    with pytest.raises(ConfigError, match="at least one sentence"):
        head_symmetry([folder], [], steps=[0])
    with pytest.raises(ConfigError, match="sentence 2 has no words"):
        head_symmetry([folder], ["a b", "  "], steps=[0])
    with pytest.raises(ConfigError, match="at least one checkpoint"):
        head_symmetry([], SENTENCES)


def _result() -> HeadSymmetry:
    rng = np.random.default_rng(0)
    grid = rng.random((2, 3, 2, 2))
    grid = grid + grid.transpose(0, 1, 3, 2)
    return HeadSymmetry(np.array([0, 8]), grid, grid / 2, n_sentences=4)


def test_saves_loads_and_tables_with_heads_from_one(tmp_path: Path) -> None:
    result = _result()
    assert equal(load(result.save(tmp_path / "sym")), result)
    table = result.to_pandas()
    assert list(table.columns) == ["step", "layer", "head_a", "head_b", "param_distance", "attention_distance"]
    assert len(table) == 2 * 3 * 1 and set(table["layer"]) == {1, 2, 3}
    assert set(zip(table["head_a"], table["head_b"])) == {(1, 2)}
    row = table[(table["step"] == 8) & (table["layer"] == 3)].iloc[0]
    assert row["param_distance"] == result.param_distance[1, 2, 0, 1]
    assert row["attention_distance"] == result.attention_distance[1, 2, 0, 1]
    means = result.layer_means()
    assert len(means) == 6 and means["param_distance"].tolist() == table["param_distance"].tolist()


def test_a_saved_result_with_shapes_that_disagree_is_refused(tmp_path: Path) -> None:
    bad = HeadSymmetry(np.array([0, 8, 9]), _result().param_distance, _result().attention_distance, 4)
    with pytest.raises(ValueError, match="param_distance"):
        load(bad.save(tmp_path / "bad"))
