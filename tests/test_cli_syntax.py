"""The `leaderboard`, `baselines` and `demo` commands: outputs, and one-line errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from probes.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample"


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
    assert main(["baselines", "--treebank", str(ewt / "en_ewt-ud-dev.conllu"), "--format", "json"]) == 0
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
    (["baselines", "--treebank", str(SAMPLE / "sample-dev.conllu"), "--format", "xml"], "error: --format must be"),
    (["leaderboard", "--treebank", str(SAMPLE / "sample-dev.conllu")], "error: give exactly one of --model"),
    (["leaderboard", "--model", "m", "--store", "s"], "error: give exactly one of --model"),
])
def test_bad_arguments_give_one_line(args, message, capsys):
    assert main(args) == 1
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
