"""Loading a model for its attention: weights missing from the checkpoint are named once, the pooler is not.

A masked-LM checkpoint (``probes train``'s, BERT's own) holds no pooler, which ``AutoModel`` builds and
transformers reports as newly initialised; no attention map depends on it, so nothing is said. A checkpoint that
lacks an attention weight gets one warning naming it: its maps would come from random weights.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from probes.extraction.loading import load_pretrained
from tests.tiny_models import build_bert


def _without(source: Path, folder: Path, prefix: str) -> Path:
    """A copy of the checkpoint ``source`` whose weights named ``prefix...`` are dropped."""
    shutil.copytree(source, folder)
    weights = load_file(folder / "model.safetensors")
    kept = {k: v for k, v in weights.items() if not k.startswith(prefix)}
    assert len(kept) < len(weights), f"no weight starts with {prefix!r}"  # the fixture, not the code under test
    save_file(kept, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bert(tmp_path_factory.mktemp("bert") / "model")


def test_missing_pooler_says_nothing(tiny: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                     capfd: pytest.CaptureFixture[str]) -> None:
    folder = _without(tiny, tmp_path / "no-pooler", "pooler.")
    with caplog.at_level(logging.INFO):
        model, _, _ = load_pretrained(folder, progress=False)
    out = capfd.readouterr()
    assert "pooler" not in caplog.text + out.out + out.err
    assert "MISSING" not in out.out + out.err and "newly initialized" not in caplog.text + out.err
    assert model.config.num_hidden_layers == 2


def test_missing_attention_weight_is_named(tiny: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = _without(tiny, tmp_path / "no-query", "encoder.layer.1.attention.self.query.")
    with caplog.at_level(logging.WARNING, logger="probes"):
        load_pretrained(folder, progress=False)
    warned = [r.getMessage() for r in caplog.records if r.name == "probes" and r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert "encoder.layer.1.attention.self.query.weight" in warned[0] and "2 weights" in warned[0]
    assert "initialised at random" in warned[0]
