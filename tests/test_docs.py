"""The README and every page of the documentation site are tested as code.

The README's set-up commands are CI's; every ``python`` block runs (one process per page); every ``bash`` block
is the set-up block or ``probes ...`` commands, and those run offline with ``--limit`` against local copies of
the corpora; ``toml`` blocks parse; images and relative links exist; the API reference covers the public names;
``mkdocs build --strict`` builds the site.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
#: Pages whose Python blocks are excerpts of the source (a class body, ``...`` for elided lines), not programs.
EXCERPTS = {"architecture.md": "its Python blocks are excerpts of probes/analysis/ source files, not programs"}
#: The section of the README (and of the getting-started page) that holds the two set-up commands.
SETUP_SECTION = "Set-up: two commands"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
MAX_README_LINES = 200


def _site_pages() -> list[Path]:
    """Every Markdown page of the site: ``docs/**/*.md`` (nothing under ``docs/`` is left out of the site)."""
    return sorted(DOCS.rglob("*.md"))


PAGES = [README, *_site_pages()]


def _name(page: Path) -> str:
    return page.relative_to(DOCS).as_posix() if page.is_relative_to(DOCS) else page.name


def _blocks(page: Path) -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block of a page that names its language, in order."""
    return FENCE.findall(page.read_text(encoding="utf-8"))


def _section_blocks(page: Path, title: str) -> list[tuple[str, str]]:
    """The fenced blocks of the ``## title`` section of a page."""
    for chunk in re.split(r"^## ", page.read_text(encoding="utf-8"), flags=re.M)[1:]:
        if chunk.splitlines()[0].strip() == title:
            return FENCE.findall(chunk)
    raise AssertionError(f"{_name(page)} has no section '## {title}'")


def _logical_lines(code: str) -> list[str]:
    """The commands of a shell block: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    lines = (re.sub(r"(^|\s)#.*$", "", line).strip() for line in joined.splitlines())  # comments, trailing too
    return [line for line in lines if line]


def _is_probes_block(code: str) -> bool:
    lines = _logical_lines(code)
    return bool(lines) and all(re.match(r"(probes\s|[A-Z_]+=)", line) for line in lines)


def _is_data_add(code: str) -> bool:
    """A block of ``probes data add`` / ``probes data list`` commands: it fills the cache the others read."""
    return all(line.startswith("probes data ") for line in _logical_lines(code))


def _setup_commands(page: Path) -> list[str]:
    code = next(code for lang, code in _section_blocks(page, SETUP_SECTION) if lang == "bash")
    return _logical_lines(code)


# ---- cheap checks: no subprocess ----


def test_readme_setup_commands_are_what_ci_runs() -> None:
    commands = _setup_commands(README)
    assert commands == ['pip install -e ".[demo]" && probes demo', 'pip install -e ".[test]" && python -m pytest -q']
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for command in commands:
        assert command in ci, f".ci/run does not run the README command {command!r}"


def test_getting_started_shows_the_readme_setup_commands() -> None:
    page = DOCS / "getting-started.md"
    blocks = [_logical_lines(code) for lang, code in _blocks(page) if lang == "bash" and not _is_probes_block(code)]
    assert blocks == [_setup_commands(README)], "getting-started.md must show exactly the README's two commands"


def test_readme_is_short_and_pages_tell_no_history() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"
    history = re.compile(r"\bissues? #?\d+|\bthe old rules?\b|docs/notes/|notes/issue-", re.I)
    for page in PAGES:
        found = history.findall(page.read_text(encoding="utf-8"))
        assert not found, f"{_name(page)} tells project history: {found}"


def test_every_page_is_in_the_nav_and_nothing_is_excluded() -> None:
    """Every page under ``docs/`` is on the site: no unpublished folder (engineering notes) and no exclusion."""
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert not (DOCS / "notes").exists(), "docs/notes/ is retired: measurements go on the site's pages"
    assert not re.search(r"^exclude_docs:", config, re.M), "mkdocs.yml excludes pages from the site"
    nav = set(re.findall(r"^\s*- (?:[^:\n]+: )?([\w./-]+\.md)$", config, re.M))
    assert nav == {_name(p) for p in _site_pages()}, "mkdocs.yml nav and docs/**/*.md differ"


def test_bash_blocks_are_setup_or_probes_commands() -> None:
    """Every ``bash`` block runs in CI: the set-up block in ``.ci/run``, ``probes`` blocks here. Examples
    that do not run are ``console`` or ``text`` blocks."""
    setup = _setup_commands(README)
    for page in PAGES:
        for lang, code in _blocks(page):
            if lang == "bash":
                assert _is_probes_block(code) or _logical_lines(code) == setup, f"{_name(page)}: untested bash:\n{code}"


def test_examples_need_no_shared_folder() -> None:
    """Examples name data by a registry name or a file of the checkout, never ``../shared``."""
    from probes.corpora.registry import load_registry

    banks = load_registry()["treebanks"]
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for _, code in _blocks(page):
            assert "../shared" not in code and "shared/data" not in code, f"{_name(page)}: {code}"
        for name, split in re.findall(r"\bud:([a-z_]+):([a-z]+)\b", text):
            assert split in banks[name]["files"], f"{_name(page)}: ud:{name}:{split} is not in the registry"


def _targets(page: Path) -> list[str]:
    """Relative link and image targets of a page (no scheme, no bare anchor), anchors dropped."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)  # not inside code
    out = []
    for target in LINK.findall(text):
        if not re.match(r"[a-z][a-z0-9+.-]*:|#", target):
            out.append(target.split("#")[0])
    return out


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_links_and_images_exist(page: Path) -> None:
    targets = _targets(page)
    for target in targets:
        path = (page.parent / target).resolve()
        assert path.exists(), f"{_name(page)}: {target} does not exist"
        if page != README:
            assert path.is_relative_to(DOCS), f"{_name(page)}: {target} is outside docs/ (not in the site)"


def test_readme_links_every_command_page() -> None:
    linked = set(_targets(README))
    for page in sorted((DOCS / "commands").glob("*.md")):
        if page.name != "index.md":
            assert f"docs/commands/{page.name}" in linked, f"the README's command table lacks {page.name}"


def test_toml_blocks_parse() -> None:
    for page in PAGES:
        for lang, code in _blocks(page):
            if lang == "toml":
                tomllib.loads(code)


def test_reference_documents_every_public_name() -> None:
    """Each name of ``probes.__all__`` and each result type has a ``::: identifier`` in docs/reference that is
    the same object, or a documented module that defines it (not one that merely imports it, as ``probes``)."""
    import probes

    identifiers = [m for p in (DOCS / "reference").glob("*.md")
                   for m in re.findall(r"^::: ([\w.]+)$", p.read_text(encoding="utf-8"), re.M)]
    resolved: list[object] = []
    for identifier in identifiers:
        try:
            resolved.append(importlib.import_module(identifier))
        except ImportError:
            module, _, attr = identifier.rpartition(".")
            resolved.append(getattr(importlib.import_module(module), attr))
    names = [*probes.__all__, *probes._RESULT_TYPES]
    for name in names:
        obj = getattr(probes, name)  # no lazy name is a subpackage's (tests/test_public_names.py)
        found = any(obj is r or getattr(obj, "__module__", None) == getattr(r, "__name__", "") and hasattr(r, "__file__")
                    for r in resolved)
        assert found, f"probes.{name} is not in the API reference (docs/reference/*.md)"


# ---- the code blocks run ----


def _python_scripts() -> dict[Path, str]:
    """Each page's Python blocks joined, in order; a block identical to one of an earlier page (the README's
    five lines on the getting-started page) runs once, with the earlier page."""
    seen: set[str] = set()
    out = {}
    for page in PAGES:
        if _name(page) in EXCERPTS:
            continue
        blocks = [code for lang, code in _blocks(page) if lang == "python" and code not in seen]
        seen.update(blocks)
        if blocks:
            out[page] = "\n".join(blocks)
    return out


PYTHON_SCRIPTS = _python_scripts()


def _work_folder(tmp_path: Path) -> Path:
    """A folder that is not the checkout, with ``data``, ``tests``, ``docs`` and ``probes`` linked in."""
    for name in ("data", "tests", "docs", "probes"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


def _threads() -> str:
    """Torch threads per example: the cores shared out among the xdist workers (two processes of two threads
    each on two cores spend most of their time waiting for each other)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return str(max(1, (os.cpu_count() or 1) // workers))


def _offline_env(cache: Path) -> dict[str, str]:
    """The environment of an example: an empty cache, the hub offline, downloads made to fail at once."""
    blocked = "http://127.0.0.1:9"  # nothing listens: a download attempt fails instead of using the network
    env = {**os.environ, "PYTHONPATH": str(REPO), "PROBES_CACHE": str(cache), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HTTP_PROXY": blocked, "HTTPS_PROXY": blocked, "http_proxy": blocked,
           "https_proxy": blocked, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": _threads(), "MKL_NUM_THREADS": _threads()}
    env.pop("NO_PROXY", None), env.pop("no_proxy", None)
    return env


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("page", list(PYTHON_SCRIPTS), ids=_name)
def test_python_blocks_run(page: Path, tmp_path: Path, minilm_path: Path) -> None:
    """A page's Python blocks run in order, in one process, offline, from a work folder."""
    script = PYTHON_SCRIPTS[page]
    work = _work_folder(tmp_path)
    done = subprocess.run([sys.executable, "-c", script], cwd=work, env=_offline_env(tmp_path / "cache"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{_name(page)}:\n{done.stderr[-3000:]}"


#: Registry treebanks -> the folder of ``$PROBES_DATA`` (``../shared/data``) that holds local copies.
LOCAL_COPIES = {"UD_English-EWT": "ud-english-ewt", "UD_English-GUM": "ud-english-gum"}
#: What ``--limit N`` counts per command: documents for coreference and bridging, sentences elsewhere.
#: (Two GUM dev documents: the first two fall in different halves of the selection split.)
LIMITS = {"coref": 2, "bridging": 2, "importance": 10, "prune": 10, "probe": 10, "run": 6}
DEFAULT_LIMIT = 25
#: Options that make a command's example cheaper, appended after the page's own (the last one given wins):
#: fewer bootstrap resamples, fewer pruning steps and random orders.
CHEAP = {"importance": "--n-resamples 100", "prune": "--step 0.5 --seeds 1"}

SHELL_PAGES = [p for p in PAGES if any(lang == "bash" and _is_probes_block(code) for lang, code in _blocks(p))]


def _options_of(command: str) -> set[str]:
    """The parameter names of ``probes COMMAND`` (read from the typer app, no subprocess)."""
    import typer.main

    from probes.cli import app

    group = typer.main.get_command(app)
    return {p.name for p in group.commands[command].params} if command in group.commands else set()  # type: ignore[attr-defined]


def _cheap(code: str) -> str:
    """The block with ``--limit N`` added to every command that reads data and does not give it already, any
    per-split cap (``--max-train N``, ``--max-eval N``, which win over ``--limit``) lowered to N, and the
    command's :data:`CHEAP` options."""
    out = []
    for line in _logical_lines(code):
        parts = shlex.split(line)
        if parts[0] == "probes" and len(parts) > 1 and "limit" in _options_of(parts[1]) and "--limit" not in parts:
            limit = LIMITS.get(parts[1], DEFAULT_LIMIT)
            line = re.sub(r"(--max-\w+) (\d+)", lambda m, limit=limit: f"{m[1]} {min(int(m[2]), limit)}", line)
            line += f" --limit {limit}"
        if parts[0] == "probes" and len(parts) > 1 and parts[1] in CHEAP:
            line += f" {CHEAP[parts[1]]}"
        out.append(line)
    return "\n".join(out)


def _run_block(code: str, cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}:\n{code}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def shell_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A work folder holding local copies of the corpora under the names the pages use (``UD_English-*``),
    the checkout's ``experiments``, and an empty cache that the pages' ``probes data add`` blocks fill."""
    from tests.conftest import shared_data_dir

    shared = shared_data_dir()
    if shared is None or not all((shared / folder).is_dir() for folder in LOCAL_COPIES.values()):
        pytest.skip("the shell examples need local copies of UD English EWT and GUM: set PROBES_DATA "
                    "or place them in ../shared/data")
    work = tmp_path_factory.mktemp("docs-shell")
    for name, folder in LOCAL_COPIES.items():
        (work / name).symlink_to(shared / folder)
    (work / "experiments").symlink_to(REPO / "experiments")
    env = _offline_env(work / "cache")
    adds = [code for page in SHELL_PAGES for lang, code in _blocks(page) if lang == "bash" and _is_data_add(code)]
    assert adds, "no page shows `probes data add`: the shell examples would need the network"
    for code in adds:
        _run_block(code, work, env)
    return work, env


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.corpus
@pytest.mark.real_model
@pytest.mark.parametrize("page", SHELL_PAGES, ids=_name)
def test_shell_blocks_run(page: Path, shell_folder: tuple[Path, dict[str, str]]) -> None:
    """A page's ``probes`` blocks run, in order, offline, from a folder that is not the checkout, with ``ud:``
    names served from the cache the ``probes data add`` blocks filled; what ``--out``/``--store`` name exists."""
    work, env = shell_folder
    for lang, code in _blocks(page):
        if lang != "bash" or not _is_probes_block(code):
            continue
        if _is_data_add(code):
            assert (work / "cache" / "en_ewt" / "en_ewt-ud-dev.conllu").is_file()  # ran in the fixture
            continue
        _run_block(_cheap(code), work, env)
        for flag, marker in (("--out", "run.json"), ("--store", "manifest.json")):
            for target in re.findall(rf"{flag} (\S+)", code):
                assert (work / target / marker).is_file(), f"{_name(page)}: {flag} {target} was not written"


@pytest.mark.slow
@pytest.mark.subprocess
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """The site builds with ``mkdocs build --strict``: every link, anchor and API identifier resolves."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "pipelines" / "index.html").is_file()
