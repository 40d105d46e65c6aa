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


# ---- the shell examples: registry names only, and they run (against local copies of the corpora) ----

#: Registry treebanks -> the folder of ``$PROBES_DATA`` (``../shared/data``) that holds local copies.
LOCAL_COPIES = {"UD_English-EWT": "ud-english-ewt", "UD_English-GUM": "ud-english-gum"}
#: What ``--limit N`` counts per command: documents for coreference and bridging, sentences elsewhere.
#: (Two GUM dev documents: the first two fall in different halves of the selection split.)
LIMITS = {"coref": 2, "bridging": 2}
DEFAULT_LIMIT = 25


def _logical_lines(code: str) -> list[str]:
    """The commands of a shell block: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    lines = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in joined.splitlines())  # comments, trailing too
    return [line for line in lines if line]


def _shell_blocks() -> list[tuple[str, str]]:
    """``(section, code)`` of every ``bash`` block whose commands are all ``probes ...`` (variables allowed)."""
    out = []
    for title, blocks in _sections():
        for lang, code in blocks:
            lines = _logical_lines(code)
            if lang == "bash" and lines and all(re.match(r"(probes\s|[A-Z_]+=)", line) for line in lines):
                out.append((title, code))
    return out


SHELL_BLOCKS = _shell_blocks()


def _is_data_add(code: str) -> bool:
    return all(line.startswith("probes data ") for line in _logical_lines(code))


def test_readme_examples_need_no_shared_folder() -> None:
    """Every example names its data by a registry name (or a file of the checkout), never ``../shared``."""
    from probes.corpora.registry import load_registry

    assert len(SHELL_BLOCKS) >= 8 and any(_is_data_add(code) for _, code in SHELL_BLOCKS)
    for title, blocks in _sections():
        for _, code in blocks:
            assert "../shared" not in code and "shared/data" not in code, f"{title}: {code}"
    banks = load_registry()["treebanks"]
    names = set(re.findall(r"\bud:([a-z_]+):([a-z]+)\b", README))
    assert {("en_ewt", "dev"), ("en_ewt", "test"), ("en_ewt", "train"), ("en_gum", "dev")} <= names
    for name, split in names:
        assert split in banks[name]["files"], f"ud:{name}:{split} is not in the registry"


def _options_of(command: str) -> set[str]:
    """The parameter names of ``probes COMMAND`` (read from the typer app, no subprocess)."""
    import typer.main

    from probes.cli import app

    group = typer.main.get_command(app)
    return {p.name for p in group.commands[command].params} if command in group.commands else set()  # type: ignore[attr-defined]


def _cheap(code: str) -> str:
    """The block with ``--limit N`` added to every command that reads data and does not give it already,
    and any per-split cap (``--max-train N``, ``--max-eval N``, which win over ``--limit``) lowered to N."""
    out = []
    for line in _logical_lines(code):
        parts = line.split()
        if parts[0] == "probes" and len(parts) > 1 and "limit" in _options_of(parts[1]) and "--limit" not in parts:
            limit = LIMITS.get(parts[1], DEFAULT_LIMIT)
            line = re.sub(r"(--max-\w+) (\d+)", lambda m: f"{m[1]} {min(int(m[2]), limit)}", line)
            line += f" --limit {limit}"
        out.append(line)
    return "\n".join(out)


@pytest.fixture(scope="module")
def shell_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A work folder holding local copies of the corpora under the names the README uses (its
    ``UD_English-*`` folders), the checkout's ``experiments`` (the config examples), and an empty cache
    that the README's own ``probes data add`` block fills. Downloads are made to fail at once."""
    from tests.conftest import shared_data_dir

    shared = shared_data_dir()
    if shared is None or not all((shared / folder).is_dir() for folder in LOCAL_COPIES.values()):
        pytest.skip("the README's shell examples need local copies of UD English EWT and GUM: set PROBES_DATA "
                    "or place them in ../shared/data")
    work = tmp_path_factory.mktemp("readme-shell")
    for name, folder in LOCAL_COPIES.items():
        (work / name).symlink_to(shared / folder)
    (work / "experiments").symlink_to(REPO / "experiments")
    blocked = "http://127.0.0.1:9"  # nothing listens: a download attempt fails instead of using the network
    env = {**os.environ, "PROBES_CACHE": str(work / "cache"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HTTP_PROXY": blocked, "HTTPS_PROXY": blocked, "http_proxy": blocked, "https_proxy": blocked}
    env.pop("NO_PROXY", None), env.pop("no_proxy", None)
    for _, code in SHELL_BLOCKS:
        if _is_data_add(code):
            _run_block(code, work, env)
    return work, env


def _run_block(code: str, cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}:\n{code}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(SHELL_BLOCKS)),
                         ids=[f"{i}-{title.split()[0]}" for i, (title, _) in enumerate(SHELL_BLOCKS)])
def test_readme_shell_examples_run(index: int, shell_folder: tuple[Path, dict[str, str]]) -> None:
    """Each ``probes`` block of the README runs, in order, offline, from a folder that is not the checkout,
    with ``ud:`` names served from the cache its ``probes data add`` block filled (``--limit`` keeps it cheap)."""
    work, env = shell_folder
    title, code = SHELL_BLOCKS[index]
    if _is_data_add(code):
        assert (work / "cache" / "en_ewt" / "en_ewt-ud-dev.conllu").is_file()  # ran in the fixture
        return
    _run_block(_cheap(code), work, env)
    for flag, marker in (("--out", None), ("--store", "manifest.json")):
        for target in re.findall(rf"{flag} (\S+)", code):
            assert (work / target / (marker or "")).exists(), f"{title}: {flag} {target} was not written"
