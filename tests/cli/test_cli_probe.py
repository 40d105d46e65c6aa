"""The `probes probe` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from probes.cli import main


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random BERT (tests/tiny_models.py): the command's outputs do not depend on the model being trained."""
    from tests.tiny_models import build

    return build("bert", tmp_path_factory.mktemp("probe-model"))


def test_probe_needs_a_model_or_a_store(capsys):
    assert main(["probe", "--train", "x.conllu", "--eval", "y.conllu"]) == 1
    assert "error: give --model and --train" in capsys.readouterr().err


def test_probe_rejects_unknown_probe_names(capsys):
    assert main(["probe", "--model", "m", "--train", "x", "--eval", "y", "--probe", "attn,parser"]) == 1
    assert "error: unknown probe 'parser'" in capsys.readouterr().err


def test_probe_writes_every_output(tiny_bert, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["probe", "--model", str(tiny_bert), "--train", "sample:dev", "--eval", "sample:test",
                 "--max-train", "40", "--max-eval", "15",
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
    assert 0.0 < rb["uas"] < 0.6 and rb["control_uas"] is None  # a fixed rule learns nothing: no control
    attn = next(r for r in run["parsers"] if r["probe"] == "Attn")
    assert attn["control_uas"] is not None and attn["selectivity_ci_low"] <= attn["selectivity"] <= attn[
        "selectivity_ci_high"] and attn["n_seeds"] == 3
    assert run["selection"]["mode"] == "split" and run["significance"]["per_head"]["method"] == "holm"
    assert run["per_head"]["listed"][0]["relation"] == "ALL"
    assert "torch" in run["versions"]


def test_probe_reads_attention_stores(tiny_bert, tmp_path, capsys):
    from probes.corpora import read_treebank
    from probes.corpora.registry import resolve_treebank
    from probes.extraction.extractor import AttentionExtractor
    from probes.extraction.store import extract_to_store

    ex = AttentionExtractor.from_pretrained(str(tiny_bert), progress=False, device="cpu")
    sents = list(read_treebank(resolve_treebank("sample:dev")))
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


def test_run_probes_returns_a_run_that_writes_only_when_asked_and_round_trips(tmp_path, monkeypatch):
    """From Python: a ProbeRun, nothing on disk until write(); saved and reloaded, it writes the same tables."""
    from probes.probing import ControlTask
    from probes.probing.synthetic import planted_pairs
    from probes.results import equal
    from probes.runs.probing import ProbeRun, run_probes

    monkeypatch.chdir(tmp_path)
    train = list(planted_pairs(60, planted=(1, 2), random_state=0))
    test = list(planted_pairs(30, planted=(1, 2), random_state=1))
    control = ControlTask(random_state=0).fit(s for s, _ in train)
    run = run_probes(train, test, kinds=["per-head", "attn", "right-branching"], control=control,
                     min_count=1, progress=False, record={"command": "test", "options": {"note": "first"}})
    assert list(tmp_path.iterdir()) == []  # nothing written yet
    assert {r.probe for r in run.parsers} == {"Attn", "right-branching"}
    attn = next(r for r in run.parsers if r.probe == "Attn")
    assert attn.selectivity == pytest.approx(attn.uas - attn.control_uas)  # means over seeds
    assert attn.selectivity > 0.2  # the planted head helps on the task, not the control
    assert run.attn_weights.shape == (2, 2, 3) and len(run.per_head) == len(run.per_head_control) == 3
    assert "Per-head relation probes" in run.format() and "1-based" in run.format()

    loaded = ProbeRun.load(run.save(tmp_path / "saved"))
    assert equal(loaded, run)
    first, again = run.write(tmp_path / "a"), loaded.write(tmp_path / "b", figures=False)
    assert "figures/probe_per_head_ALL.png" in first and not any(p.startswith("figures") for p in again)
    for name in ("parsers.md", "parsers.csv", "comparisons.csv", "per_head.md", "per_head.csv", "per_head_scores.csv"):
        assert first[name].read_bytes() == again[name].read_bytes(), name
    record = json.loads(first["run.json"].read_text())
    assert list(record)[:2] == ["command", "options"] and record["options"]["note"] == "first"
    assert record["counts"]["eval_sentences"] == 30 and "writing_s" in record["timings"]
    assert list(run.to_pandas()["probe"]) == [r.probe for r in run.parsers]
    assert len(run.to_pandas("per_head_scores")) == len(run.per_head[0].relations) * 6 - 6 * sum(
        int(c == 0) for c in run.per_head[0].counts)


def test_probe_rejects_unknown_control_task_before_any_work(capsys):
    assert main(["probe", "--model", "m", "--train", "x", "--eval", "y", "--control-task", "bogus"]) == 2
    assert "--control-task: expected one of hewitt-liang, offset" in capsys.readouterr().err
