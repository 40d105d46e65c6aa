"""The README is tested as code: its set-up commands are CI's, and its Python examples run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _sections() -> list[tuple[str, list[tuple[str, str]]]]:
    """``(title, [(language, code), ...])`` for every ``## `` section of the README."""
    out = []
    for chunk in re.split(r"^## ", README, flags=re.M)[1:]:
        title = chunk.splitlines()[0]
        out.append((title, FENCE.findall(chunk)))
    return out


def _setup_commands() -> list[str]:
    blocks = dict(_sections())["Set-up: two commands"]
    code = next(code for lang, code in blocks if lang == "bash")
    return [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_readme_setup_commands_are_what_ci_runs() -> None:
    commands = _setup_commands()
    assert len(commands) == 2 and commands[0].endswith("probes demo") and "pytest" in commands[1]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for command in commands:
        assert command in ci, f".ci/run does not run the README command {command!r}"


def test_readme_is_built_from_its_fragments() -> None:
    sys.path.insert(0, str(REPO / "docs" / "readme"))
    try:
        import build
    finally:
        sys.path.pop(0)
    assert build.build() == README, "README.md is stale: run python docs/readme/build.py"


def test_readme_images_exist() -> None:
    for target in re.findall(r"\]\((docs/img/[^)]+)\)", README):
        assert (REPO / target).is_file(), target


SECTIONS_WITH_PYTHON = [title for title, blocks in _sections() if any(lang == "python" for lang, _ in blocks)]


@pytest.mark.slow
@pytest.mark.parametrize("title", SECTIONS_WITH_PYTHON)
def test_readme_python_examples_run(title: str, tmp_path: Path, minilm_path: Path) -> None:
    """Each section's Python blocks run in order, in one process, from a copy-free work folder
    (``data``, ``tests`` and ``docs`` linked in); ``probes extract`` commands before them run too."""
    for name in ("data", "tests", "docs", "probes"):
        (tmp_path / name).symlink_to(REPO / name)
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    blocks = dict(_sections())[title]
    for lang, code in blocks:
        if lang == "bash" and code.lstrip().startswith("probes extract"):
            subprocess.run(["bash", "-c", code], cwd=tmp_path, env=env, check=True, capture_output=True)
    script = "\n".join(code for lang, code in blocks if lang == "python")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
