"""Assemble README.md from the fragments in this folder (in file-name order).

Run ``python docs/readme/build.py`` after editing a fragment; tests/test_readme.py checks that
README.md is up to date with the fragments.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def build() -> str:
    """The README text: every ``NN-*.md`` fragment, in order, separated by one blank line."""
    parts = [p.read_text(encoding="utf-8").strip() + "\n" for p in sorted(HERE.glob("[0-9][0-9]-*.md"))]
    return "\n".join(parts)


if __name__ == "__main__":
    (HERE.parents[1] / "README.md").write_text(build(), encoding="utf-8")
