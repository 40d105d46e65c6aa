"""Model options of the role lab (issue 39, point 2): ``--attention-only`` blocks whose MLP adds exactly 0 and is
never trained, saved as ordinary model folders transformers' Auto classes load; the head count at a fixed hidden
size or at a fixed head size (``--head-dim``); identical heads staying bit-identical in an attention-only model;
records without the new fields still loading.

The MLP's output is hooked at modules found here by hand (not through the families table the code reads)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from probes.errors import ConfigError
from probes.training.config import TrainConfig, hidden_size
from probes.training.record import CheckpointRecord, TrainingRecord, record_text
from tests.training.cases import FAMILIES, HEADS, LAYERS, a_record, attention_maps, batch, max_head_gap, train_steps

torch = pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training"
TINY = dict(layers=LAYERS, heads=HEADS, treebank=("sample:dev",), seq_len=16)


def _config(arch: str, **change: Any) -> TrainConfig:
    options: dict[str, Any] = {"hidden": 32, "attention_only": True, **TINY, **change}
    return TrainConfig(arch=arch, tokenizer="train:200" if arch == "bert" else "train:300", **options)


def _tokenizer(arch: str) -> Any:
    from probes.training.tokenizer import train_tokenizer

    texts = ["the quick brown fox jumps over the lazy dog", "pack my box with five dozen liquor jugs 0123456789",
             "how vexingly quick daft zebras jump"] * 4  # more than the 50 ids of the tiny batches (cases.VOCAB)
    return train_tokenizer(texts, arch, 200 if arch == "bert" else 300, 16)


def _built(arch: str, **change: Any) -> Any:
    from probes.training.models import build_model

    return build_model(_config(arch, **change), _tokenizer(arch))


def _mlp_outputs(model: Any, arch: str) -> list[Any]:
    """Per layer, by hand, the module whose output is all the MLP adds to its block."""
    if arch == "gpt2":
        return [block.mlp for block in model.transformer.h]
    if arch == "llama":
        return [block.mlp for block in model.model.layers]
    return [block.output.dense for block in model.bert.encoder.layer]


def _hooked(model: Any, arch: str) -> tuple[list[Any], list[Any]]:
    """Hooks on every layer's MLP output; the list they append each output to."""
    seen: list[Any] = []
    handles = [module.register_forward_hook(lambda _m, _i, out: seen.append(out.detach().clone()))
               for module in _mlp_outputs(model, arch)]
    return seen, handles


def _logits(model: Any, arch: str) -> Any:
    model.eval()
    with torch.no_grad():
        return model(input_ids=batch(arch, torch.Generator().manual_seed(7))["input_ids"]).logits


# ------------------------------------------------------------------------------------------ the MLP adds exactly 0
@pytest.mark.parametrize("arch", FAMILIES)
def test_the_mlp_adds_exactly_zero_and_stays_untrained_while_attention_trains(arch: str) -> None:
    model = _built(arch)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    seen, handles = _hooked(model, arch)
    train_steps(model, arch, steps=20)
    train_steps(model, arch, steps=1)  # the hooks saw the forward passes of training, after 20 steps too
    model.eval()
    with torch.no_grad():
        model(input_ids=batch(arch, torch.Generator().manual_seed(3))["input_ids"])
    for handle in handles:
        handle.remove()
    assert len(seen) == 22 * LAYERS and all(out.abs().max().item() == 0.0 for out in seen)
    mlp_names = {name for name, _ in model.named_parameters() if any(
        name.startswith(f"{prefix}.{k}.{part}.") for k in range(LAYERS) for prefix, part in (
            ("transformer.h", "mlp"), ("transformer.h", "ln_2"), ("model.layers", "mlp"),
            ("model.layers", "post_attention_layernorm"), ("bert.encoder.layer", "intermediate"),
            ("bert.encoder.layer", "output.dense")))}
    assert mlp_names and all(not p.requires_grad for n, p in model.named_parameters() if n in mlp_names)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if n in mlp_names)  # never trained
    moved = max((p - before[n]).abs().max().item() for n, p in model.named_parameters()
                if "attn" in n or "attention" in n)
    assert moved > 0.05  # while the attention trained (Adam, lr 0.01)
    # the same model with its MLP: the hook sees what an MLP adds, so the zero above is the option's
    full = _built(arch, attention_only=False)
    seen, handles = _hooked(full, arch)
    _logits(full, arch)
    assert all(out.abs().max().item() > 0 for out in seen)


@pytest.mark.parametrize("arch", FAMILIES)
def test_the_saved_folder_loads_with_auto_classes_and_gives_the_same_logits(arch: str, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    model = _built(arch, init="identical+noise:0.01")
    train_steps(model, arch, steps=10)
    model.save_pretrained(tmp_path)
    auto = AutoModelForMaskedLM if arch == "bert" else AutoModelForCausalLM
    loaded = auto.from_pretrained(tmp_path, attn_implementation="eager")
    assert type(loaded) is type(model)
    assert getattr(loaded.config, "n_inner" if arch == "gpt2" else "intermediate_size") == 1
    seen, _ = _hooked(loaded, arch)
    assert torch.equal(_logits(loaded, arch), _logits(model, arch))
    assert len(seen) == LAYERS and all(out.abs().max().item() == 0.0 for out in seen)


# ------------------------------------------------------------------------------------------ identical heads
def test_identical_heads_stay_bit_identical_in_an_attention_only_gpt2_trained_by_the_cli(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from probes.cli import main

    out = tmp_path / "run"
    code = main(["train", "--arch", "gpt2", "--attention-only", "--layers", str(LAYERS), "--heads", str(HEADS),
                 "--head-dim", "8", "--init", "identical", "--steps", "8", "--batch-size", "2", "--seq-len", "16",
                 "--learning-rate", "1e-2", "--tokenizer", "train:300", "--treebank", "sample:dev", "--out", str(out),
                 "--no-progress", "--symmetry-sentences", "0"])
    assert code == 0
    first, last = (AutoModelForCausalLM.from_pretrained(out / "checkpoints" / step, attn_implementation="eager")
                   for step in ("step-000000", "step-000008"))
    assert last.config.n_embd == HEADS * 8 and last.config.n_head == HEADS
    moved = max((p - dict(first.named_parameters())[n]).abs().max().item() for n, p in last.named_parameters()
                if ".attn." in n)
    assert moved > 0.01  # it trained ...
    assert max_head_gap(last, "gpt2") == 0.0  # ... and every head of each layer is still head 0, bit for bit
    maps = attention_maps(last, "gpt2")
    assert all(torch.equal(layer[:, h], layer[:, 0]) for layer in maps for h in range(1, HEADS))
    for k in range(LAYERS):  # the frozen MLP was written as it was built
        assert last.transformer.h[k].mlp.c_proj.weight.abs().max().item() == 0.0
        assert torch.equal(last.transformer.h[k].mlp.c_fc.weight, first.transformer.h[k].mlp.c_fc.weight)
    record = json.loads((out / "checkpoints" / "step-000008" / "training.json").read_text(encoding="utf-8"))
    assert record["config"]["attention_only"] is True and record["config"]["head_dim"] == 8
    assert record["config"]["hidden"] == 32 and "mlp.c_proj" in record["attention_only_rule"]
    loaded = CheckpointRecord.from_dict(record)
    assert loaded.run.config.attention_only and loaded.run.config.head_size == 8


# ------------------------------------------------------------------------------------------ sizes
@pytest.mark.parametrize("arch", FAMILIES)
def test_sizes_at_a_fixed_head_size_and_at_a_fixed_hidden_size(arch: str) -> None:
    from probes.extraction import families
    from probes.training.memory import count_parameters, estimate_memory

    tokenizer = _tokenizer(arch)
    for heads in (1, 2, 4):  # a fixed head size of 16: the model grows with the heads
        config = _config(arch, heads=heads, hidden=hidden_size(heads, None, 16), head_dim=16)
        model = _built(arch, heads=heads, hidden=heads * 16, head_dim=16)
        assert config.hidden == heads * 16 and config.head_size == 16
        assert families.n_heads(model) == heads and families.head_dim(model) == 16
        assert count_parameters(config, len(tokenizer)) == model.num_parameters()
        assert estimate_memory(config, len(tokenizer)).parameters == model.num_parameters()
    for heads, size in ((2, 16), (8, 4)):  # a fixed hidden size of 32: the heads narrow
        model = _built(arch, heads=heads, attention_only=False)
        assert families.n_heads(model) == heads and families.head_dim(model) == size


def test_head_dim_and_attention_only_are_recorded_and_older_records_lack_them() -> None:
    plain = a_record()
    assert "head_dim" not in plain.to_dict()["config"] and "attention_only" not in plain.to_dict()["config"]
    assert "attention_only_rule" not in plain.to_dict()
    record = a_record(arch="gpt2", heads=4, hidden=64, head_dim=16, attention_only=True, tokenizer="train:300")
    data = record.to_dict()
    assert data["config"]["head_dim"] == 16 and data["config"]["attention_only"] is True
    assert "intermediate size 1" in data["attention_only_rule"] and "mlp.c_proj" in data["attention_only_rule"]
    assert TrainingRecord.from_dict(json.loads(record_text(record))) == record
    assert plain.config.differences(a_record(attention_only=True).config) == ["--attention-only: False -> True"]


def test_records_written_before_these_options_still_load_and_write_back_byte_for_byte() -> None:
    for name, kind in (("run-gpt2.json", TrainingRecord), ("checkpoint-bert-step0.json", CheckpointRecord)):
        text = (FIXTURES / name).read_text(encoding="utf-8")
        record: Any = kind.from_dict(json.loads(text), FIXTURES / name)
        config = record.config if kind is TrainingRecord else record.run.config
        assert config.attention_only is False and config.head_dim is None and config.intermediate is None
        assert config.intermediate_size == 4 * config.hidden and record_text(record) == text


# ------------------------------------------------------------------------------------------ refusals
def test_hidden_and_head_dim_together_or_neither_are_refused_naming_both() -> None:
    assert hidden_size(4, 32, None) == 32 and hidden_size(4, None, 8) == 32
    for hidden, head_dim, found in ((32, 8, "both"), (None, None, "neither")):
        with pytest.raises(ConfigError, match=f"--hidden, --head-dim: expected one of them .*found {found}"):
            hidden_size(4, hidden, head_dim)
    with pytest.raises(ConfigError, match="--head-dim: expected --heads x --head-dim <= 65536, found 4 x 20000"):
        hidden_size(4, None, 20000)
    with pytest.raises(ConfigError, match=r"--hidden, --head-dim: expected --hidden = --heads x --head-dim = 64 "
                                          r"\(give one of them\), found --hidden 32"):
        _config("gpt2", head_dim=16)
    with pytest.raises(ConfigError, match="--intermediate: expected none with --attention-only"):
        _config("gpt2", intermediate=64)
    with pytest.raises(ConfigError, match="--attention-only: expected true or false, found 'yes'"):
        _config("gpt2", attention_only="yes")


def test_the_cli_refuses_both_sizes_as_a_usage_error_naming_both(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    from probes.cli import main

    common = ["train", "--arch", "gpt2", "--layers", "1", "--heads", "4", "--treebank", "sample:dev", "--out",
              str(tmp_path / "run"), "--no-progress"]
    for sizes, found in ((["--hidden", "32", "--head-dim", "8"], "both"), ([], "neither")):
        assert main([*common, *sizes]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--hidden, --head-dim" in err[0] and f"found {found}" in err[0]
    assert not (tmp_path / "run").exists()
