"""The `probes probe` command."""

from __future__ import annotations

import json

import pytest

from probes.cli import main


def test_probe_needs_a_model_or_a_store(capsys):
    assert main(["probe", "--train", "x.conllu", "--eval", "y.conllu"]) == 1
    assert "error: give --model and --train" in capsys.readouterr().err


def test_probe_rejects_unknown_probe_names(capsys):
    assert main(["probe", "--model", "m", "--train", "x", "--eval", "y", "--probe", "attn,parser"]) == 1
    assert "error: unknown probe 'parser'" in capsys.readouterr().err


@pytest.mark.slow
def test_probe_on_minilm_and_ewt_writes_every_output(minilm_path, ewt, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["probe", "--model", str(minilm_path), "--train", str(ewt / "en_ewt-ud-dev.conllu"),
                 "--eval", str(ewt / "en_ewt-ud-test.conllu"), "--max-train", "40", "--max-eval", "15",
                 "--out", str(out), "--no-progress", "--min-count", "5"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Attn+Emb, random-init model" in captured.out and "1-based" in captured.out
    for name in ("parsers.md", "parsers.csv", "parsers.json", "per_head.md", "per_head.csv", "per_head_scores.csv",
                 "label.md", "label.csv", "run.json", "figures/probe_per_head_ALL.png",
                 "figures/probe_selectivity_ALL.png", "figures/probe_label.png", "figures/probe_attn_weights.png"):
        assert (out / name).is_file(), name
    run = json.loads((out / "run.json").read_text())
    assert run["data"]["train"]["sentences"] == 40 and len(run["data"]["train"]["sha256"]) == 64
    assert run["random_init"]["kept_pretrained"] == ["embeddings.word_embeddings.weight",
                                                     "embeddings.position_embeddings.weight"]
    names = {row["probe"] for row in run["parsers"]}
    assert names == {"Attn", "Attn+Emb", "Distances+Emb", "right-branching", "Attn+Emb, random-init model"}
    rb = next(r for r in run["parsers"] if r["probe"] == "right-branching")
    assert 0.0 < rb["uas"] < 0.6 and rb["control_uas"] == rb["control_uas"]  # control scored (not NaN)
    assert run["per_head"]["listed"][0]["relation"] == "ALL"
    assert "torch" in run["versions"]


@pytest.mark.slow
def test_probe_reads_attention_stores(minilm_path, ewt, tmp_path, capsys):
    from probes.corpora import read_treebank
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.store import extract_to_store

    ex = AttentionExtractor.from_pretrained(str(minilm_path), progress=False, device="cpu")
    sents = list(read_treebank(ewt / "en_ewt-ud-dev.conllu"))
    extract_to_store(ex, sents[:30], tmp_path / "train", progress=False)
    extract_to_store(ex, sents[30:45], tmp_path / "eval", progress=False)
    code = main(["probe", "--store-train", str(tmp_path / "train"), "--store-eval", str(tmp_path / "eval"),
                 "--probe", "attn,right-branching", "--out", str(tmp_path / "out"), "--no-progress",
                 "--no-figures"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert {r["probe"] for r in run["parsers"]} == {"Attn", "right-branching"}
    assert run["counts"]["eval_sentences"] == 15
