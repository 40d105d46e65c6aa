"""A wheel built from the source carries the package data and runs `probes` from any folder.

The user's check (issue 9, issue 11 "first contact"): `pip wheel .`, install the wheel without `-e`
into a fresh environment, run `probes` in a folder that is not the checkout. The environment is
a venv that sees this interpreter's site-packages through a ``.pth`` file (torch and the demo model come
from here, nothing is downloaded), into which the wheel is installed with ``--no-deps``; the test checks
that the venv's ``probes`` is the wheel's, not this checkout's. ``--system-site-packages`` would not do:
it inherits the base interpreter, not the virtual environment the tests may be running in. The command it runs there is a leaderboard of a tiny
random BERT on the first sentences of the sample corpus shipped in the wheel (the whole pipeline, reading
the package data, in seconds), and ``probes demo --help``; the demo itself runs in CI (.ci/run).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from probes._version import DISTRIBUTION, __version__

pytestmark = [pytest.mark.slow, pytest.mark.subprocess, pytest.mark.xdist_group("wheel")]  # one wheel build

ROOT = Path(__file__).resolve().parents[1]
#: What the build reads: the package, its metadata and the long description.
BUILD_INPUTS = ("probes", "setup.cfg", "pyproject.toml", "README.md")
PACKAGE_DATA = ("probes/py.typed", "probes/corpora/registry.json",
                "probes/corpora/sample/sample-dev.conllu", "probes/corpora/sample/sample-test.conllu")


def _backend_is_local() -> bool:
    """True when setuptools can build a wheel here without downloading anything (read from the
    installed metadata, so that setuptools is not imported into the test process)."""
    try:
        setuptools = tuple(int(x) for x in metadata.version("setuptools").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    if setuptools >= (70, 1):  # setuptools builds wheels itself from 70.1 on
        return True
    return importlib.util.find_spec("wheel") is not None


def _env() -> dict[str, str]:
    """This environment without anything that would put the checkout on ``sys.path``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _run(args: list[str | Path], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _outer_site_packages() -> list[str]:
    """This interpreter's site-packages folders (a virtual environment's when the tests run in one), user
    site-packages included where Python reads it: the folders the inner venv must see."""
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        folders.append(site.getusersitepackages())
    return folders


def _venv_seeing_this_environment(venv: Path, cwd: Path) -> Path:
    """A venv whose ``sys.path`` ends with this interpreter's site-packages; returns its site-packages.

    The ``.pth`` file calls ``site.addsitedir`` so that the outer folders' own ``.pth`` files are read, as
    ``--system-site-packages`` reads the base interpreter's; the venv's own site-packages stays first."""
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=cwd)
    inner = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    lines = [f"import site; site.addsitedir({folder!r})" for folder in _outer_site_packages()]
    (inner / "_outer_environment.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return inner


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel from a copy of the build inputs (no build/ or egg-info left in the checkout)."""
    base = tmp_path_factory.mktemp("wheel")
    src, dist = base / "src", base / "dist"
    src.mkdir()
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    offline = ["--no-build-isolation", "--no-index"] if _backend_is_local() else []
    _run([sys.executable, "-m", "pip", "wheel", src, "--no-deps", *offline, "-w", dist, "-q"], cwd=base)
    (found,) = dist.glob(f"{DISTRIBUTION.replace('-', '_')}-{__version__}-*.whl")
    return found


def test_wheel_holds_every_module_and_the_package_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(PACKAGE_DATA) <= names, f"missing from the wheel: {sorted(set(PACKAGE_DATA) - names)}"
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "probes").rglob("*.py")}
    assert modules <= names, f"missing from the wheel: {sorted(modules - names)}"
    # only the package: no tests, no repository data, no build scripts
    top = {n.split("/")[0] for n in names} - {"probes"}
    assert len(top) == 1 and top.pop().endswith(".dist-info"), sorted({n.split("/")[0] for n in names})
    # the distribution carries its own name (``probes`` on PyPI is another project); the import name is probes
    meta = zipfile.ZipFile(wheel).read(f"{DISTRIBUTION.replace('-', '_')}-{__version__}.dist-info/METADATA")
    assert f"Name: {DISTRIBUTION}\n" in meta.decode("utf-8")


def test_wheel_install_runs_from_another_folder_on_the_shipped_sample(wheel, tmp_path):
    from tests.tiny_models import build

    venv, elsewhere, out = tmp_path / "venv", tmp_path / "elsewhere", tmp_path / "out"
    elsewhere.mkdir()
    model = build("bert", tmp_path / "model")
    inner = _venv_seeing_this_environment(venv, tmp_path)
    python = venv / "bin" / "python"
    # pip comes from this environment's site-packages and installs into the venv (sys.prefix)
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], cwd=elsewhere)
    where = _run([python, "-c", "import probes, probes.corpora.registry as r; "
                  "print(probes.__file__); print(r.SAMPLE_DIR)"], cwd=elsewhere).stdout.split()
    assert Path(where[0]) == inner / "probes" / "__init__.py", f"the venv imports probes from {where[0]}"
    assert Path(where[1]) == inner / "probes" / "corpora" / "sample"

    assert "Usage: probes demo" in _run([venv / "bin" / "probes", "demo", "--help"], cwd=elsewhere).stdout
    proc = _run([venv / "bin" / "probes", "leaderboard", "-m", model, "-t", "sample:dev", "--limit", "30",
                 "--min-count", "5", "--no-figures", "--no-progress", "--out", out], cwd=elsewhere)
    assert f"Report: {out / 'leaderboard.md'}" in proc.stdout
    assert "ALL" in (out / "leaderboard.md").read_text(encoding="utf-8")
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    # the command read the sample corpus shipped in the wheel, not a checkout's copy
    assert Path(run["data"]["report"]["path"]) == inner / "probes" / "corpora" / "sample" / "sample-dev.conllu"
    assert run["data"]["report"]["sentences"] == 30
    # the record's version of probes is read from the distribution's metadata, under the key "probes"
    assert run["versions"]["probes"] == __version__
