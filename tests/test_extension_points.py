"""The two extension points of docs/architecture.md, proven by adding one of each and touching nothing else.

* A new model family is one :class:`~probes.extraction.families.Family` entry in
  ``probes.extraction.families.FAMILIES`` plus its tiny model in ``tests.tiny_models.BUILDERS``: here a copy of
  GPT-2 under a model type the package has never heard of, added to both tables with ``monkeypatch``.
* A new corpus format is one reader plus one line in ``probes.corpora.formats.FORMAT_TABLE``: here a
  three-column word / head / relation file, read through :func:`probes.read_treebank`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import probes
from probes.corpora import formats
from probes.corpora.readreport import ReadReport
from probes.corpora.types import Document, Sentence
from probes.errors import ConfigError
from probes.extraction import families
from probes.extraction.attention import is_punct_token
from probes.extraction.extractor import AttentionExtractor
from probes.extraction.interventions import intervene
from probes.reports.atlas.figures import pool_to_words
from tests import tiny_models

# --------------------------------------------------------------------------------------------- a model family
DUMMY = "dummy-gpt"  # a model type neither transformers nor probes knows
MARK = "¤"  # a word-start mark no family in the table uses
SENTENCES = [Sentence(f"s{i}", tuple(text.split()), (0,) * len(text.split()), ("dep",) * len(text.split()))
             for i, text in enumerate(["The quick brown fox jumps over the lazy dog .", "A cat sat , again ."])]


def _register_with_transformers() -> None:
    """The dummy's config and model classes: GPT-2's under the new name (what a new architecture brings)."""
    from transformers import AutoConfig, AutoModel, GPT2Config, GPT2Model

    class DummyConfig(GPT2Config):
        model_type = DUMMY

    class DummyModel(GPT2Model):
        config_class = DummyConfig

    AutoConfig.register(DUMMY, DummyConfig, exist_ok=True)
    AutoModel.register(DummyConfig, DummyModel, exist_ok=True)


def build_dummy(folder: Path, seed: int = 0) -> Path:
    """The tiny GPT-2, saved as the dummy family (same weights and tokenizer, new ``model_type``)."""
    folder = tiny_models.build_gpt2(folder, seed)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type=DUMMY, architectures=["DummyModel"])
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture()
def dummy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Path, Path]:
    """The dummy family's folder and the tiny GPT-2's, before the family is in the table."""
    _register_with_transformers()
    monkeypatch.setitem(tiny_models.BUILDERS, DUMMY, build_dummy)  # its tiny-model builder: one line
    return tiny_models.build(DUMMY, tmp_path), tiny_models.build("gpt2", tmp_path)


def _add_family(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one table entry: GPT-2's record under the new name, with a tokenizer mark of its own."""
    monkeypatch.setitem(families.FAMILIES, DUMMY, replace(families.FAMILIES["gpt2"], word_start=("Ġ", MARK)))


def _extract(folder: Path) -> list[Any]:
    extractor = AttentionExtractor.from_pretrained(folder, batch_size=2, device="cpu", progress=False)
    return [wa for _, wa in extractor.iter_attention(SENTENCES)]


def _uniform_output(folder: Path) -> torch.Tensor:
    """The last hidden states with two heads replaced by uniform attention (value sites) and one gated."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    ablate = torch.zeros(2, 4, dtype=torch.bool)
    ablate[0, 1] = ablate[1, 3] = True
    gates = torch.ones(2, 4)
    gates[1, 0] = 0.5
    with torch.no_grad(), intervene(model, gates=gates, ablate=ablate, ablation="uniform"):
        return model(input_ids=torch.tensor([[5, 9, 7, 12, 6, 8]])).last_hidden_state  # (1, T, E)


def test_before_its_entry_the_family_is_unknown(dummy: tuple[Path, Path]) -> None:
    """Without its table entry the new family is no decoder and has no intervention seam: the entry matters."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(dummy[0])
    assert not families.is_decoder(model)
    with pytest.raises(ConfigError, match=f"found '{DUMMY}'"):
        families.head_sites(model)
    assert DUMMY not in tiny_models.tiny_families()
    assert not is_punct_token(f"{MARK}.")


def test_a_new_family_is_one_table_entry_and_its_tiny_model(dummy: tuple[Path, Path],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    folder, gpt2 = dummy
    _add_family(monkeypatch)
    assert DUMMY in tiny_models.tiny_families()  # the tests now run on it too
    # extraction: the same word maps as GPT-2's (same weights), causal, no specials
    for found, expected in zip(_extract(folder), _extract(gpt2), strict=True):
        np.testing.assert_array_equal(found.weights, expected.weights)
        assert not found.is_special.any() and not np.triu(found.weights, 1).any()
    extractor = AttentionExtractor.from_pretrained(folder, device="cpu", progress=False)
    assert extractor.model.config.model_type == DUMMY and families.is_decoder(extractor.model)
    # interventions: head sites and value sites found from the entry, the same effect as on GPT-2
    torch.testing.assert_close(_uniform_output(folder), _uniform_output(gpt2), rtol=0, atol=0)
    # the atlas's token rules read the new mark from the entry
    assert is_punct_token(f"{MARK}.") and is_punct_token("Ġ,")
    _, labels = pool_to_words(np.eye(3, dtype=np.float32), [0, 0, 1], [f"{MARK}un", "able", f"{MARK}x"])
    assert labels == ("unable", "x")


def test_the_atlas_runs_on_the_new_family(dummy: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    from probes.runs.atlas import atlas

    folder, gpt2 = dummy
    _add_family(monkeypatch)
    options: dict[str, Any] = {"limit": 8, "js_sentences": 4, "grad_sentences": 0, "clusters": 2}
    found, expected = atlas(folder, "sample:dev", **options), atlas(gpt2, "sample:dev", **options)
    table = found.heads_table()
    assert len(table) == 8 and table["to_sep"].isna().all()  # a decoder without an end special
    pd.testing.assert_frame_equal(table, expected.heads_table())


# -------------------------------------------------------------------------------------------- a corpus format
WORDTSV = "The\t2\tdet\ncat\t3\tnsubj\nsat\t0\troot\n\nIt\t2\tnsubj\nslept\t0\troot\n"


def read_wordtsv(path: str | PathLike[str], *, on_error: str = "raise",
                 report: ReadReport | None = None) -> Iterator[Sentence]:
    """The dummy format's reader: ``word<TAB>head<TAB>relation`` lines, a blank line between sentences."""
    blocks = [b for b in Path(path).read_text(encoding="utf-8").split("\n\n") if b.strip()]
    for n, block in enumerate(blocks, 1):
        rows = [line.split("\t") for line in block.strip().splitlines()]
        yield Sentence(f"{Path(path).name}#{n}", tuple(r[0] for r in rows), tuple(int(r[1]) for r in rows),
                       tuple(r[2] for r in rows), path=str(path))


def read_wordtsv_documents(path: str | PathLike[str], *, on_error: str = "raise",
                           report: ReadReport | None = None) -> Iterator[Document]:
    """The same file as one document (a coreference format without mentions)."""
    yield Document(Path(path).stem, tuple(read_wordtsv(path)))


def test_a_new_corpus_format_is_one_reader_and_one_table_line(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tiny.wordtsv"
    path.write_text(WORDTSV, encoding="utf-8")
    assert formats.detect_format(path) == "conllu"  # unknown before its line
    monkeypatch.setitem(formats.FORMAT_TABLE, "wordtsv", formats.Format((".wordtsv",), f"{__name__}:read_wordtsv"))
    assert formats.detect_format(path) == "wordtsv" and formats.detect_format("x.txt", "word-tsv") == "wordtsv"
    sentences = list(probes.read_treebank(path))
    assert [s.words for s in sentences] == [("The", "cat", "sat"), ("It", "slept")]
    assert [s.heads for s in sentences] == [(2, 3, 0), (2, 0)] and sentences[1].relations == ("nsubj", "root")
    other = tmp_path / "tiny.txt"
    other.write_text(WORDTSV, encoding="utf-8")
    assert list(probes.read_treebank(other, format="wordtsv")) == list(read_wordtsv(other))
    with pytest.raises(ConfigError, match="the wordtsv reader takes no options, found pipeline"):
        probes.read_treebank(path, pipeline="x")
    with pytest.raises(ConfigError, match="read_documents: expected a conllu or conll2012 file, found format "
                                          "'wordtsv'"):
        probes.read_documents(path)


def test_a_document_format_gives_its_sentences_to_read_treebank(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tiny.worddocs"
    path.write_text(WORDTSV, encoding="utf-8")
    line = formats.Format(("*.worddocs",), documents=f"{__name__}:read_wordtsv_documents")
    monkeypatch.setitem(formats.FORMAT_TABLE, "worddocs", line)
    [document] = probes.read_documents(path)
    assert document.doc_id == "tiny" and len(document.sentences) == 2
    assert [s.words for s in probes.read_treebank(path)] == [("The", "cat", "sat"), ("It", "slept")]
    with pytest.raises(ConfigError, match=r"expected a dependency treebank \(conllu, conllx, spacy\), found "
                                          "format 'worddocs'"):
        formats.treebank_reader("worddocs")
