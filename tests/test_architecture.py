"""The package's shape (issue 9): stages in order, no import cycles (between modules, and between packages: issue
37), short functions, a small front door.

The import graph is read from the source with :mod:`ast` (nothing is imported): every ``import`` and
``from ... import`` in ``probes/**/*.py``, at module level or inside functions, relative or absolute,
plus the targets of the lazy-attribute tables (``_LAZY = {"Name": "probes.module"}``), since those
are imports deferred to first use. ``from probes.a import b`` is an edge to ``probes.a.b`` when
``b`` is a submodule, else to ``probes.a``.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "probes"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
MAX_FRONT_DOOR = 20

#: Pipeline stages, lowest first (docs/architecture.md): a module may import its own stage and those
#: before it, never a later one. The front door ``probes/__init__.py`` and ``probes/__main__.py`` sit
#: above every stage.
STAGES: dict[str, int] = {
    "_lazy": 0, "_version": 0, "errors": 0, "atomic_io": 0, "checksum": 0, "results": 0, "result_checks": 0, "reprs": 0, "run_record": 0, "run_details": 0, "world": 0, "locks": 0, "safe_read": 0, "safe_arrays": 0, "progress": 0,
    "corpora": 1,
    "extraction": 2,
    "training": 3,
    "analysis": 4,
    "heads": 5,
    "importance": 6,
    "compare": 7,
    "reports": 8,
    "probing": 9,
    "runs": 10,
    "cli": 11,
}
TOP = ("probes", "probes.__main__")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


MODULES = _modules()


def _existing(name: str) -> str | None:
    """``name`` or its longest prefix that is a probes module (``probes.a.f`` -> ``probes.a``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _base(module: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    parts = package.split(".")
    if node.level > 1:
        parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _lazy_targets(node: ast.Assign) -> Iterator[str]:
    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
    if "_LAZY" in names and isinstance(node.value, ast.Dict):
        for value in node.value.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                yield value.value


def _imports(module: str) -> Iterator[Edge]:
    """Every import of another probes module made anywhere in ``module``."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, node)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif isinstance(node, ast.Assign):
            targets = list(_lazy_targets(node))
        for name in targets:
            target = _existing(name) if name.split(".")[0] == "probes" else None
            if target is not None and target != module:
                yield Edge(module, target, node.lineno)


GRAPH: dict[str, list[Edge]] = {m: sorted(set(_imports(m)), key=lambda e: (e.target, e.line)) for m in MODULES}


def _strongly_connected(graph: Mapping[str, list[Edge]]) -> list[list[str]]:
    """Tarjan's components of an import graph (of modules, or of packages) with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for edge in graph[v]:
            w = edge.target
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _shortest_cycle(graph: Mapping[str, list[Edge]], start: str, within: set[str]) -> list[Edge]:
    """The shortest path of imports from ``start`` back to ``start`` inside one component."""
    previous: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for edge in graph[v]:
            if edge.target not in within or edge.target in previous:
                continue
            previous[edge.target] = edge
            if edge.target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, previous[path[0].source])
                return path
            queue.append(edge.target)
    raise AssertionError(f"{start} is in a component but on no cycle")  # pragma: no cover


def _package(module: str) -> str | None:
    """The package (or top-level module) of ``module``: ``probes.extraction.loading`` -> ``extraction``,
    ``probes.errors`` -> ``errors``; None for the front door ``probes``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _package_graph(graph: Mapping[str, list[Edge]]) -> dict[str, list[Edge]]:
    """The imports between packages: ``a -> b`` when a module of ``a`` imports one of another package ``b``; each
    edge is the first such module import (its modules and line say where)."""
    found: dict[str, dict[str, Edge]] = {}
    for module, edges in sorted(graph.items()):
        source = _package(module)
        if source is None:
            continue
        found.setdefault(source, {})
        for edge in edges:
            target = _package(edge.target)
            if target is not None and target != source:
                found[source].setdefault(target, edge)
                found.setdefault(target, {})
    return {package: [Edge(package, target, 0) for target in sorted(targets)] for package, targets in found.items()}


def _package_cycles(graph: Mapping[str, list[Edge]]) -> list[str]:
    """Every cycle of imports between packages (``probes.X -> probes.Y -> probes.X``), each with the module imports
    that make it."""
    packages = _package_graph(graph)
    where = {(_package(e.source), _package(e.target)): e for m, edges in sorted(graph.items()) for e in edges}
    cycles = []
    for component in _strongly_connected(packages):
        path = _shortest_cycle(packages, component[0], set(component))
        cycles.append(" -> ".join([path[0].source] + [e.target for e in path]) + "\n    "
                      + "\n    ".join(str(where[(e.source, e.target)]) for e in path))
    return cycles


def _stage(module: str) -> int | None:
    parts = module.split(".")
    return STAGES.get(parts[1]) if len(parts) > 1 else None


# -- the tests -------------------------------------------------------------------------------------


def test_graph_reader_resolves_submodules_relative_and_lazy_imports():
    """The checks below are only as good as the graph: spot-check known edges."""
    targets = {e.target for e in GRAPH["probes.corpora.readers"]}
    assert "probes.corpora.formats" in targets and "probes.errors" in targets
    assert "probes" not in targets
    # probes/__init__.py's lazy table points at the extractor
    assert "probes.extraction.extractor" in {e.target for e in GRAPH["probes"]}
    # `from probes.corpora import read_treebank` (a name, not a submodule) is an edge to the package
    fake = ast.parse("from probes.corpora import read_treebank\nfrom probes.corpora import readers\n"
                     "from . import formats\nfrom ..errors import ProbesError\n")
    bases = [_base("probes.corpora.readers", n) for n in fake.body]  # type: ignore[arg-type]
    assert bases == ["probes.corpora", "probes.corpora", "probes.corpora", "probes.errors"]


def test_no_import_cycles():
    cycles = []
    for component in _strongly_connected(GRAPH):
        path = _shortest_cycle(GRAPH, component[0], set(component))
        cycles.append(f"{' -> '.join([path[0].source] + [e.target for e in path])}\n    "
                      + "\n    ".join(map(str, path)))
    assert not cycles, "import cycles among probes modules:\n" + "\n".join(cycles)


def test_no_import_cycles_between_packages():
    """Modules may import each other without a cycle while their packages do not (extraction/loading.py ->
    training/checkpoints.py while training/schemes.py -> extraction/families.py): packages are checked too."""
    fake = {"probes.a.x": [Edge("probes.a.x", "probes.b.y", 3)], "probes.b.y": [Edge("probes.b.y", "probes.a.z", 5)],
            "probes.a.z": [], "probes.c": [Edge("probes.c", "probes.a.x", 1)]}
    assert not _strongly_connected(fake)  # no cycle of modules ...
    assert _package_cycles(fake) == ["a -> b -> a\n    probes.a.x -> probes.b.y (line 3)\n    "
                                     "probes.b.y -> probes.a.z (line 5)"]  # ... but one of packages
    cycles = _package_cycles(GRAPH)
    assert not cycles, "import cycles among probes packages:\n" + "\n".join(cycles)


def test_every_module_belongs_to_a_stage():
    unplaced = [m for m in MODULES if m not in TOP and _stage(m) is None]
    assert not unplaced, f"modules outside the stages of tests/test_architecture.py STAGES: {unplaced}"


def test_stages_import_only_earlier_stages():
    wrong = [f"{e} (stage {_stage(e.source)} imports stage {_stage(e.target)})"
             for m, edges in GRAPH.items() if m not in TOP for e in edges
             if e.target in TOP or (_stage(e.target) or 0) > (_stage(m) or 0)]
    assert not wrong, ("imports against the stage order errors/results -> corpora -> extraction -> training -> analysis "
                       "-> heads -> importance -> compare -> reports -> probing -> runs -> cli (the front door `probes` is for users, "
                       "not for the package's own modules):\n" + "\n".join(wrong))


def test_no_function_longer_than_80_lines():
    long = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not long, f"functions longer than {MAX_FUNCTION_LINES} lines (def to end):\n" + "\n".join(long)


def _too_long(path: Path) -> list[str]:
    """The module ``path`` if it has over MAX_MODULE_LINES lines, and its classes over MAX_CLASS_LINES
    (``class`` to end, nested classes counted in theirs and on their own)."""
    text = path.read_text(encoding="utf-8")
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = [f"{where}: {len(text.splitlines())} lines"] if len(text.splitlines()) > MAX_MODULE_LINES else []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if n > MAX_CLASS_LINES:
                found.append(f"{where}:{node.lineno} class {node.name}: {n} lines")
    return found


def test_no_module_over_600_lines_and_no_class_over_400(tmp_path: Path):
    """Each part readable in one sitting (issue 23): no module of ``probes/`` over 600 lines, no class over 400."""
    big = tmp_path / "big.py"  # the measure itself: a 401-line class in a 602-line module is caught twice
    big.write_text("class Big:\n" + "    x = 1\n" * 400 + "\n" * 201, encoding="utf-8")
    assert len(_too_long(big)) == 2
    long = [line for path in MODULES.values() for line in _too_long(path)]
    assert not long, (f"modules over {MAX_MODULE_LINES} lines or classes over {MAX_CLASS_LINES} lines:\n"
                      + "\n".join(long))


def _levels_up(node: ast.expr) -> int:
    """How many folders above its file ``Path(__file__)...parent.parent`` / ``.parents[k]`` climbs."""
    levels = 0
    while True:
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            levels, node = levels + 1, node.value
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
              and node.value.attr == "parents" and isinstance(node.slice, ast.Constant)):
            levels, node = levels + node.slice.value + 1, node.value.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # x.resolve()
            node = node.func.value
        elif isinstance(node, ast.Call) and node.args:  # Path(x)
            node = node.args[0]
        elif isinstance(node, ast.Attribute):  # x.absolute
            node = node.value
        elif isinstance(node, ast.Name):
            return levels if node.id == "__file__" else 0
        else:
            return 0


def test_no_module_reads_files_outside_the_package():
    """Package data lives inside ``probes/`` (a wheel carries nothing else): no ``Path(__file__)``
    climbs above the package folder (e.g. to the checkout's ``data/``)."""
    outside = []
    for path in MODULES.values():
        depth = len(path.relative_to(ROOT).parts) - 1  # folders from the repository root to the file
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute | ast.Subscript) and _levels_up(node) > depth:
                outside.append(f"{path.relative_to(ROOT)}:{node.lineno} climbs {_levels_up(node)} folders")
    assert not outside, "package code reading outside probes/:\n" + "\n".join(sorted(set(outside)))
    # the check itself: probes/runs/demo.py may reach probes/ (2 up) but not the checkout (3 up)
    assert _levels_up(ast.parse("Path(__file__).resolve().parents[1]", mode="eval").body) == 2
    assert _levels_up(ast.parse("Path(__file__).resolve().parent.parent.parent", mode="eval").body) == 3
    assert _levels_up(ast.parse("out.parent", mode="eval").body) == 0


def test_front_door_is_small_and_every_name_resolves():
    import probes

    names = probes.__all__
    assert len(names) <= MAX_FRONT_DOOR, f"probes.__all__ has {len(names)} names (at most {MAX_FRONT_DOOR})"
    assert len(set(names)) == len(names), "probes.__all__ repeats a name"
    broken = []
    for name in names:
        try:
            getattr(probes, name)
        except Exception as exc:  # noqa: BLE001 - a lazy name whose module moved or fails to import
            broken.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not broken, "probes.__all__ names that do not resolve:\n" + "\n".join(broken)
    assert isinstance(probes.__version__, str) and probes.__version__[0].isdigit()


@pytest.mark.parametrize("stage", sorted({k for k in STAGES if k not in ("_lazy", "_version")}))
def test_each_stage_exists_in_the_layout(stage):
    """The STAGES table tracks the real layout (a renamed stage must be renamed here too)."""
    assert f"probes.{stage}" in MODULES, f"probes/{stage} is gone: update STAGES"
