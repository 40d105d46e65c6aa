"""The `leaderboard`, `baselines` and `demo` commands: outputs, and one-line errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from probes.cli import main

SAMPLE = Path(__file__).resolve().parents[2] / "probes" / "corpora" / "sample"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, minilm_path):
    """A 2-layer, 2-head random BERT with MiniLM's tokenizer, saved to a folder (offline)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    tok = AutoTokenizer.from_pretrained(str(minilm_path))
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_baselines_json_and_text(capsys):
    assert main(["baselines", "--treebank", str(SAMPLE / "sample-dev.conllu"), "--format", "json",
                 "--min-count", "5"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["relation"] == "ALL"
    assert all({"relation", "count", "offset", "accuracy"} <= set(r) for r in rows)
    assert all(-3 <= r["offset"] <= 2 and 0 <= r["accuracy"] <= 1 for r in rows)
    assert main(["baselines", "--treebank", str(SAMPLE / "sample-dev.conllu")]) == 0
    assert "best offset" in capsys.readouterr().out


@pytest.mark.slow
def test_baselines_cli_reproduces_published_dev_table(ewt, capsys):
    assert main(["baselines", "--treebank", str(ewt / "en_ewt-ud-dev.conllu"), "--format", "json",
                 "--clip-to-root"]) == 0
    rows = {r["relation"]: r for r in json.loads(capsys.readouterr().out)}
    expected = {"ALL": (25147, 1, 29.1), "ALL-nopunct": (22086, 1, 31.4), "det": (1817, 1, 59.6),
                "obj": (1211, -2, 35.8), "obl": (1001, -2, 19.0), "root": (2001, -3, 60.5),
                "nmod:poss": (391, 1, 67.8), "nsubj:pass": (154, 2, 42.2), "advcl": (362, -3, 11.3)}
    for rel, (count, offset, acc) in expected.items():
        r = rows[rel]
        assert (r["count"], r["offset"], round(100 * r["accuracy"], 1)) == (count, offset, acc), rel


@pytest.mark.parametrize("args, message", [
    (["baselines", "--treebank", "no/such.conllu"], "error: no/such.conllu: no such file"),
    (["baselines", "--treebank", "ud:nope:dev"], "error: unknown treebank 'nope'"),
    (["baselines", "--treebank", str(SAMPLE / "sample-dev.conllu"), "--format", "xml"], "error: Invalid value for "
                                                                                         "--format"),
    (["leaderboard", "--treebank", str(SAMPLE / "sample-dev.conllu")], "error: give exactly one of --model"),
    (["leaderboard", "--model", "m", "--store", "s"], "error: --store and --model cannot be used together"),
    (["leaderboard", "--store", "no/such/store"], "error: no/such/store: no such folder"),
    (["leaderboard", "--model", "m", "--select-store", "s", "--treebank", "t"],
     "error: --select-store and --model cannot be used together"),
    (["leaderboard", "--model", "package:no_such_package_xyz", "--treebank", "t"], "error: model 'package:no_such"),
])
def test_bad_arguments_give_one_line(args, message, capsys):
    usage = "cannot be used together" in message or "Invalid value" in message
    assert main(args) == (2 if usage else 1)  # usage errors exit 2, input errors 1
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err


def test_bad_file_gives_located_line(tmp_path, capsys):
    bad = tmp_path / "bad.conllu"
    bad.write_text("1\tHi\n\n", encoding="utf-8")
    assert main(["baselines", "--treebank", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:1:") and "Traceback" not in err


def test_usage_error_exits_2(capsys):
    assert main(["leaderboard", "--min-count", "zero"]) == 2


def test_help_reads_well(capsys):
    assert main(["leaderboard", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--select-on" in out and "1-based" in out


@pytest.mark.slow
def test_leaderboard_end_to_end_on_tiny_model(tiny_model, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["leaderboard", "--model", str(tiny_model), "--treebank", str(SAMPLE / "sample-test.conllu"),
                 "--select-on", str(SAMPLE / "sample-dev.conllu"), "--out", str(out), "--min-count", "10",
                 "--device", "cpu", "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Report:" in printed and "selected on sample-dev.conllu" in printed
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.json", "scores.csv", "run.json",
                 "figures/overview.png"):
        assert (out / name).is_file(), name
    with open(out / "leaderboard.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    required = ["relation", "count", "layer", "head", "direction", "accuracy", "ci_low", "ci_high",
                "baseline_offset", "baseline_accuracy"]
    assert set(required) <= set(rows[0])
    assert {int(r["layer"]) for r in rows} <= {1, 2} and {int(r["head"]) for r in rows} <= {1, 2}
    run = json.loads((out / "run.json").read_text())
    assert len(run["data"]["report"]["sha256"]) == 64 and run["extractor"]["n_layers"] == 2
    assert run["extraction_report"]["n_skipped"] == 0


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A tiny random BERT (tests/tiny_models.py) and `probes extract` stores of the sample dev and test splits."""
    from tests.tiny_models import build

    root = tmp_path_factory.mktemp("stores")
    model = build("bert", root)
    for split in ("dev", "test"):
        assert main(["extract", "--model", str(model), "--treebank", str(SAMPLE / f"sample-{split}.conllu"),
                     "--store", str(root / split), "--device", "cpu", "--no-progress"]) == 0
    return model, root


def _float16_attention(monkeypatch):
    """Make live extraction round attention to float16, as the store does, so both runs see the same numbers."""
    from probes.extraction.attention import WordAttention
    from probes.extraction.extractor import AttentionExtractor

    live = AttentionExtractor.iter_attention

    def rounded(self, sentences, **kwargs):
        for sentence, att in live(self, sentences, **kwargs):
            weights = att.weights.astype(np.float16).astype(np.float32)
            yield sentence, WordAttention(weights, att.is_special, att.layers, att.heads, att.meta)

    monkeypatch.setattr(AttentionExtractor, "iter_attention", rounded)


@pytest.mark.slow
def test_leaderboard_from_stores_equals_live_run(stores, tmp_path, monkeypatch, capsys):
    model, root = stores
    common = ["--min-count", "5", "--no-progress"]
    assert main(["leaderboard", "--store", str(root / "test"), "--select-store", str(root / "dev"),
                 "--out", str(tmp_path / "from-store"), *common]) == 0
    from_store = capsys.readouterr().out
    _float16_attention(monkeypatch)
    assert main(["leaderboard", "--model", str(model), "--treebank", str(SAMPLE / "sample-test.conllu"),
                 "--select-on", str(SAMPLE / "sample-dev.conllu"), "--device", "cpu",
                 "--out", str(tmp_path / "live"), *common]) == 0
    live = capsys.readouterr().out
    for name in ("scores.csv", "leaderboard.csv", "leaderboard.json", "leaderboard.md"):
        a = (tmp_path / "from-store" / name).read_text(encoding="utf-8")
        b = (tmp_path / "live" / name).read_text(encoding="utf-8")
        assert a == b, name
    assert from_store.split("Time:")[0] == live.split("Time:")[0]  # the same table and sentence
    run = json.loads((tmp_path / "from-store" / "run.json").read_text())
    assert run["data"]["report"]["store"] == str(root / "test") and run["selected_on"] == "sample-dev.conllu"
    assert len(run["data"]["report"]["source_sha256"]) == 64 and run["data"]["select"]["sentences"] == 82
    assert {"extraction_s", "scoring_s", "writing_s", "overhead_fraction"} <= set(run["timings"])
    assert (tmp_path / "from-store" / "figures" / "overview.png").is_file()


@pytest.mark.slow
def test_store_flags_are_checked(stores, capsys):
    _, root = stores
    assert main(["leaderboard", "--store", str(root / "test"), "--treebank", "x.conllu"]) == 2
    assert "--store and --treebank cannot be used together" in capsys.readouterr().err
    assert main(["leaderboard", "--store", str(root / "test"), "--select-on", "x.conllu"]) == 2
    assert "--select-store" in capsys.readouterr().err


def test_no_progress_silences_transformers_bar(tiny_model, tmp_path, capsys):
    """`--no-progress` also hides transformers' "Loading weights" bar."""
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    try:
        assert main(["leaderboard", "--model", str(tiny_model), "--treebank", str(SAMPLE / "sample-test.conllu"),
                     "--out", str(tmp_path), "--min-count", "10", "--device", "cpu", "--no-progress",
                     "--no-figures"]) == 0
        assert "Loading weights" not in capsys.readouterr().err
        assert hf_logging.is_progress_bar_enabled()  # restored afterwards: no global state left changed
    finally:
        hf_logging.enable_progress_bar()


def test_format_help_comes_from_the_one_formats_table(capsys):
    from probes.cli.options import DATA_HELP, split_list
    from probes.corpora.formats import FORMAT_FILES

    names = [n for group in FORMAT_FILES.values() for n in group]
    assert all(n in DATA_HELP for n in names) and "ud:TREEBANK:SPLIT" in DATA_HELP
    for command in ("leaderboard", "extract", "baselines"):
        assert main([command, "--help"]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert ".conllx" in out and "_conll" in out, command
    assert split_list(["nsubj, obj", "det", " ,"]) == ["nsubj", "obj", "det"]


def test_leaderboard_runs_extra_analyses_named_on_the_command_line(tiny_model, tmp_path, capsys):
    from probes.results import load

    out = tmp_path / "run"
    assert main(["leaderboard", "--model", str(tiny_model), "--treebank", str(SAMPLE / "sample-dev.conllu"),
                 "--out", str(out), "--min-count", "10", "--no-figures", "--no-progress",
                 "--analyses", "specials"]) == 0
    assert "Analysis specials: saved in" in capsys.readouterr().out
    specials = load(out / "analyses" / "specials")
    assert specials.n_items == 82 and specials.leading.shape == (2, 2)  # every dev sentence, 2 x 2 heads
    assert main(["leaderboard", "--model", "no/such/model", "--treebank", str(SAMPLE / "sample-dev.conllu"),
                 "--analyses", "bridging"]) == 1
    assert "cannot run in a leaderboard" in capsys.readouterr().err  # checked before the model is looked for


def test_leaderboard_selection_modes_on_the_command_line(tiny_model, tmp_path, capsys):
    """Default: split halves, said in the printed footer and run.json; --select-on same: optimistic, never sig."""
    common = ["--model", str(tiny_model), "--treebank", str(SAMPLE / "sample-dev.conllu"), "--min-count", "10",
              "--no-figures", "--no-progress", "--device", "cpu"]
    assert main(["leaderboard", *common, "--out", str(tmp_path / "split")]) == 0
    printed = capsys.readouterr().out
    assert "Selection (split)" in printed and "Holm" in printed and "tests in this table" in printed
    run = json.loads((tmp_path / "split" / "run.json").read_text())
    assert run["selection"]["mode"] == "split" and run["significance"]["method"] == "holm"
    assert run["inputs"]["select"]["analysed"] + run["inputs"]["report"]["analysed"] == 82
    assert main(["leaderboard", *common, "--select-on", "same", "--out", str(tmp_path / "same")]) == 0
    printed = capsys.readouterr().out
    assert "Selection (same, optimistic)" in printed and "n/a (same data)" in printed and "| yes" not in printed
    with open(tmp_path / "same" / "leaderboard.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert all(r["beats_baseline"] == "False" and r["p_value"] == "" for r in rows)
    assert {"p_value", "p_adjusted", "ties", "tied_heads", "selection"} <= set(rows[0])
