"""``probes sources`` end to end on tiny models and the sample data: the files it writes, the run it saves, and
shares that equal the token maps of the extractor under each source, computed directly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import probes
from probes.cli import main
from probes.errors import ConfigError
from probes.results import equal
from tests.tiny_models import build

pytest.importorskip("torch")
GUM_STYLE = Path(__file__).resolve().parents[1] / "fixtures" / "coref" / "tiny_gum.conllu"


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("bert", tmp_path_factory.mktemp("sources-bert"))


def _direct_shares(model: Path, source: str, causal: bool, limit: int) -> np.ndarray:
    """``(L, C)`` mean shares over every token row of the first ``limit`` sample:test sentences, by a loop."""
    from probes.compare.sources import category_masks
    from probes.corpora import read_treebank
    from probes.corpora.registry import resolve_treebank
    from probes.extraction.extractor import AttentionExtractor

    extractor = AttentionExtractor.from_pretrained(str(model), source=source, keep_tokens=True, progress=False,
                                                   device="cpu")
    sentences = list(read_treebank(resolve_treebank("sample:test")))[:limit]
    total, rows = 0.0, 0
    for _, pair in extractor.iter_attention(sentences):
        assert pair.tokens is not None
        maps = pair.tokens.weights.astype(np.float64)  # (L, H, T, T)
        masks = category_masks(pair.tokens, causal)
        total += np.stack([maps[..., m].sum(-1).mean(axis=1).sum(-1) for m in masks.values()], axis=-1)
        rows += pair.tokens.n_tokens
    return np.asarray(total) / rows


def test_the_command_writes_its_files_and_its_shares_are_the_extractors(bert: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sources"
    code = main(["sources", "-m", str(bert), "-t", "sample:test", "--select-on", "sample:dev", "--limit", "30",
                 "--min-count", "5", "--n-resamples", "50", "--n-permutations", "200", "--corpus", str(GUM_STYLE),
                 "--corpus-select-on", "same", "--device", "cpu", "--no-progress", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "norm vs weights: share on [CLS]+[SEP]" in printed.out
    for name in ("sources.md", "shares.csv", "leaderboards.csv", "coref.csv", "boards/weights.md", "boards/norm.md",
                 "coref/norm.md", "figures/shares.png", "sources/result.json", "run.json"):
        assert (out / name).is_file(), name
    record = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert record["command"] == "probes sources" and record["attention_sources"] == ["weights", "norm"]
    assert record["options"]["limit"] == 30 and record["options"]["select_on"] == "sample:dev"
    assert record["boards"]["norm"]["extractor"]["attention_source"] == "norm"
    run = probes.load(out)
    assert isinstance(run, probes.SourcesRun) and equal(run, probes.load(out / "sources"))
    assert run.shares.categories == ("cls", "sep", "cls+sep", "punct") and run.shares.n_sentences == 30
    for s, source in enumerate(("weights", "norm")):
        np.testing.assert_allclose(run.shares.mean[s], _direct_shares(bert, source, False, 30), rtol=1e-5)
    assert not np.allclose(run.shares.mean[0], run.shares.mean[1])  # the norms move the shares
    text = (out / "sources.md").read_text(encoding="utf-8")
    assert "Heads chosen on sample:dev (separate selection)" in text and "| 2 |" in text  # layers 1-based
    assert len(run.to_pandas()) == 2 * 2 * 4
    assert [p.source for p in run.coref] == ["weights", "norm"]


def test_a_decoder_reports_its_first_token_in_place_of_cls(tmp_path: Path) -> None:
    from probes.runs.sources import compare_sources

    llama = build("llama", tmp_path / "llama")
    run = compare_sources(str(llama), "sample:test", select_on="sample:dev", limit=12, min_count=5,
                          n_resamples=20, n_permutations=100, device="cpu")
    assert run.shares.causal and run.shares.categories == ("first", "punct") and run.shares.headline == "first"
    np.testing.assert_allclose(run.shares.mean[1], _direct_shares(llama, "norm", True, 12), rtol=1e-5)
    assert run.shares.verdict("norm") in ("yes", "partly", "no")
    assert "first token (sink)" in run.format()


def test_the_run_refuses_what_it_cannot_compare(bert: Path) -> None:
    from probes.runs.sources import check_sources, compare_sources

    assert check_sources("norm,weights,contribution") == ("weights", "norm", "contribution")
    for bad in ("weights", "weights,norm,norm", "weights,nrom"):
        with pytest.raises(ConfigError):
            check_sources(bad)
    with pytest.raises(ConfigError, match="held-out"):
        compare_sources(str(bert), "sample:test", select_on="same")
