"""No field of a result typed ``Any`` without a reason: a ``# Any: why`` comment on the field's line.

Read from the source alone (ast): the result classes are the classes of probes/ that derive from
:class:`probes.results.Result`, directly or through another result class.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "probes"
_REASON = re.compile(r"#\s*Any:\s*\w")


def _base_names(node: ast.ClassDef) -> set[str]:
    names = set()
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.add(base.id)
        elif isinstance(base, ast.Attribute):
            names.add(base.attr)
    return names


def result_classes() -> list[tuple[Path, ast.ClassDef, list[str]]]:
    """``(file, class, source lines)`` of every class in probes/ that derives from Result."""
    classes = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        classes += [(path, node, lines) for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ClassDef)]
    results, grown = {"Result"}, True
    while grown:
        found = {node.name for _, node, _ in classes if _base_names(node) & results}
        grown = not found <= results
        results |= found
    return [(path, node, lines) for path, node, lines in classes
            if node.name != "Result" and _base_names(node) & results]


def _says_any(annotation: ast.expr) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "Any" or isinstance(n, ast.Attribute) and n.attr == "Any"
               for n in ast.walk(annotation)) or (isinstance(annotation, ast.Constant)
                                                   and re.search(r"\bAny\b", str(annotation.value)) is not None)


def unexplained(classes: list[tuple[Path, ast.ClassDef, list[str]]]) -> list[str]:
    """``file:line Class.field`` of each field typed with ``Any`` whose lines hold no ``# Any:`` reason."""
    out = []
    for path, node, lines in classes:
        for statement in node.body:
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
                continue
            if "ClassVar" in ast.unparse(statement.annotation) or not _says_any(statement.annotation):
                continue
            end = statement.end_lineno or statement.lineno
            if not any(_REASON.search(line) for line in lines[statement.lineno - 1: end]):
                where = path.relative_to(PACKAGE.parent) if path.is_relative_to(PACKAGE.parent) else path
                out.append(f"{where}:{statement.lineno} "
                           f"{node.name}.{statement.target.id}: {ast.unparse(statement.annotation)}")
    return out


def test_every_result_field_typed_any_says_why() -> None:
    classes = result_classes()
    assert len(classes) > 30 and {"Leaderboard", "Atlas", "HeadScores", "TrainReport"} <= {n.name for _, n, _ in classes}
    missing = unexplained(classes)
    assert not missing, "typed Any without a '# Any: why' comment:\n" + "\n".join(missing)


def test_the_check_finds_a_field_typed_any_without_a_reason(tmp_path: Path) -> None:
    source = ("class Sub(Result):\n"
              "    a: Any\n"
              "    b: dict[str, Any] = None  # Any: a reason\n"
              "    c: int = 0\n"
              "    d: ClassVar[Any] = None\n"
              "class Deeper(Sub):\n"
              "    e: list[Any] = []\n")
    tree = ast.parse(source)
    classes = [(tmp_path / "m.py", node, source.splitlines()) for node in tree.body if isinstance(node, ast.ClassDef)]
    assert [entry.split(" ", 1)[1] for entry in unexplained(classes)] == ["Sub.a: Any", "Deeper.e: list[Any]"]
