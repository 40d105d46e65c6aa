"""Every ``# type: ignore`` and ``# noqa`` in probes/ names its codes and says why on its line, after them."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "probes"

#: ``type: ignore[code, ...]`` then another comment giving the reason: ``# type: ignore[arg-type]  # numpy stubs ...``.
_IGNORE = re.compile(r"type:\s*ignore(?P<codes>\[[^\]]+\])?(?P<rest>.*)")
#: ``noqa: CODE, ...`` then the reason (``  (registers `atlas`)``, ``- interpreter shutdown``, ``# ...``).
_NOQA = re.compile(r"noqa(?P<codes>:\s*[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*)?(?P<rest>.*)")


def problems(source: str) -> list[tuple[int, str]]:
    """``(line, what is missing)`` for each suppression comment of ``source`` without codes or a reason."""
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        comment = token.string
        for match in _IGNORE.finditer(comment):
            if not match["codes"]:
                found.append((token.start[0], "type: ignore without an error code"))
            elif not re.match(r"\s+#\s*\w", match["rest"]):
                found.append((token.start[0], "type: ignore without a reason after it (`  # why`)"))
        for match in _NOQA.finditer(comment):
            if not match["codes"]:
                found.append((token.start[0], "noqa without a rule code"))
            elif not re.search(r"\w", match["rest"]):
                found.append((token.start[0], "noqa without a reason after it"))
    return found


def test_every_suppression_in_the_package_names_its_code_and_says_why() -> None:
    missing = [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}" for path in sorted(PACKAGE.rglob("*.py"))
               for line, what in problems(path.read_text(encoding="utf-8"))]
    assert not missing, "\n".join(missing)


def test_the_check_finds_what_it_should() -> None:
    bad = ("x = f()  # type: ignore\n"
           "y = g()  # type: ignore[arg-type]\n"
           "import z  # noqa: F401\n"
           "import w  # noqa\n"
           "s = '# type: ignore'  # a string is not a comment\n")
    assert [line for line, _ in problems(bad)] == [1, 2, 3, 4]
    good = ("x = f()  # type: ignore[arg-type]  # numpy stubs: ufunc.at takes tuple indices\n"
            "import z  # noqa: F401  (imported for its side effect)\n"
            "v = h()  # noqa: BLE001 - interpreter shutdown\n")
    assert problems(good) == []
