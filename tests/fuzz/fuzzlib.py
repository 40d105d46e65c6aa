"""The machinery of the fuzz suite: valid inputs, Hypothesis-drawn mutations of them, and the one property.

Each fuzz module builds a valid input once (a result folder, a run folder, an attention store, an experiment
file, a GGUF file) with the project's own writers, and a "secret" twin of it whose text holds :data:`MARKER`.
Every example copies both into a fresh folder (``<root>/input`` and, beside it, ``<root>/secret``), applies a
list of drawn :class:`Mutation` objects to the input and calls the loader under :func:`check`, which asserts the
property of issue 36:

- the loader returns, or raises :class:`probes.errors.InputError` (any subclass) whose message names the input:
  nothing else;
- it returns within :data:`WATCHDOG_S` seconds (an alarm: no hang on a pipe, no walk of 10^8 items);
- it opens no file that leads (links followed) out of the input folder to the secret twin beside it, which the
  mutations point at with ``../``, absolute paths and links (an audit hook records every ``open``), nor
  ``/etc/passwd`` or ``/dev/zero``;
- nothing it returns, raises or writes holds :data:`MARKER`, and nothing outside the input folder (and the
  folders the test allows) changed.

``PROBES_FUZZ_SCALE=10 python -m pytest -p no:xdist -o addopts= tests/fuzz`` searches ten times longer.

Mutations are frozen dataclasses whose ``repr`` is the code that makes them, so a failing example that
Hypothesis prints can be pasted back: ``apply_all(case, [JsonSet('result.json', ('fields',), 17)])`` inside
``with new_case(tmp_path_factory, base, secret) as case:``.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
import struct
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from probes.errors import InputError
from tests.guards import watchdog as guard

#: Text that only the secret twin of an input holds: it must never show up in what a loader returns or writes.
MARKER = "FUZZ-SECRET-c0ffee-5f0c2a"
#: Seconds a loader may take on one mutated input before the example fails as a hang.
WATCHDOG_S = 10
#: The folder of an example's input (and of the valid base it is copied from), and of its secret twin.
INPUT, SECRET = "input", "secret"
#: A symlink planted in the input, leading to the secret twin, when a mutation names it (``link/...``).
LINK = "escape"


def fuzz_settings(max_examples: int) -> settings:
    """Deterministic (``derandomize``: the same examples on every run and in CI), no deadline (the watchdog
    bounds time), no example database written, no explain phase (its line tracing slows a loader tenfold).

    ``PROBES_FUZZ_SCALE=10`` runs ten times as many examples (a longer search, by hand; CI keeps the default).
    """
    scale = float(os.environ.get("PROBES_FUZZ_SCALE", "1"))
    return settings(max_examples=max(1, round(max_examples * scale)), derandomize=True, deadline=None,
                    database=None, print_blob=False,
                    suppress_health_check=list(HealthCheck), report_multiple_bugs=True,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])  # no explain: it traces


# ------------------------------------------------------------------------------------------ examples

@dataclass(frozen=True)
class Case:
    """One example's folder: ``input`` (a copy of the valid base, mutated) and ``secret`` beside it."""

    root: Path
    #: Folders under ``root`` that the loader may write (a cache); everything else outside ``input`` must stay.
    writable: tuple[str, ...] = ()

    @property
    def input(self) -> Path:
        return self.root / INPUT

    @property
    def secret(self) -> Path:
        return self.root / SECRET


@contextlib.contextmanager
def new_case(factory: Any, base: Path, secret: Path, *, writable: Sequence[str] = ()) -> Iterator[Case]:
    """A fresh folder holding copies of ``base`` (as ``input``) and ``secret``; removed afterwards."""
    root = Path(factory.mktemp("example", numbered=True))
    try:
        shutil.copytree(base, root / INPUT, symlinks=True)
        shutil.copytree(secret, root / SECRET, symlinks=True)
        (root / "secret.txt").write_text(MARKER + "\n", encoding="utf-8")
        for name in writable:
            (root / name).mkdir()
        yield Case(root, tuple(writable))
    finally:
        _make_removable(root)
        shutil.rmtree(root, ignore_errors=True)


def _make_removable(root: Path) -> None:
    for dirpath, dirnames, _ in os.walk(root):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o755)


class Hang(BaseException):
    """The loader ran past :data:`WATCHDOG_S` (a BaseException, so that no ``except Exception`` hides it)."""


def watchdog(seconds: int = WATCHDOG_S) -> contextlib.AbstractContextManager[None]:
    """Raise :class:`Hang` in the block after ``seconds`` (SIGALRM; a no-op where there is none)."""
    return guard(seconds, lambda: Hang(f"the loader ran for more than {seconds} s on one mutated input"))


def _snapshot(case: Case) -> dict[str, tuple[Any, ...]]:
    """Every entry under the example's root outside ``input`` and the writable folders: kind, size, mtime."""
    skip = {INPUT, *case.writable}
    found: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(case.root):
        rel = os.path.relpath(dirpath, case.root)
        if rel == ".":
            dirnames[:] = [d for d in dirnames if d not in skip]
            filenames = [f for f in filenames if f not in skip]
        for name in dirnames + filenames:
            info = os.lstat(os.path.join(dirpath, name))
            found[os.path.join(rel, name)] = (stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns)
    return found


#: Files no loader may open on a fuzzed input (what the mutations point at, besides the secret twin).
FORBIDDEN = ("/etc/passwd", "/dev/zero")
#: The paths opened while :func:`check` runs a loader (None outside it), recorded by an audit hook.
_OPENED: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # records nothing until check() sets _OPENED


def _outside(case: Case, opened: Sequence[str]) -> list[str]:
    """The paths in ``opened`` that lead (links followed) out of the input folder to the secret twin, the secret
    file beside it, or a file of :data:`FORBIDDEN`."""
    root = os.path.realpath(case.root)
    allowed = [os.path.realpath(case.input), *(os.path.realpath(case.root / w) for w in case.writable)]
    out = []
    for path in opened:
        real = os.path.realpath(path)
        inside_root = real == root or real.startswith(root + os.sep)
        allowed_here = any(real == a or real.startswith(a + os.sep) for a in allowed)
        if (inside_root and not allowed_here) or real in FORBIDDEN:
            out.append(f"{path} -> {real}")
    return out


def check(call: Callable[[], Any], case: Case, *, seconds: int = WATCHDOG_S) -> Any:
    """Run ``call`` (the loader on ``case.input``) and assert the property; its value, or the InputError.

    Any exception other than InputError propagates (the example fails with it); so does :class:`Hang`.
    """
    global _OPENED
    before = _snapshot(case)
    _OPENED = opened = []
    try:
        with watchdog(seconds):
            try:
                value = call()
            except InputError as exc:
                value = exc
    finally:
        _OPENED = None
    read = _outside(case, opened)
    assert not read, f"the loader opened files outside its input folder: {read}"
    if isinstance(value, InputError):  # one line naming the file (or the folder) at fault
        named = (str(case.input), os.path.realpath(case.input))
        assert any(name in str(value) for name in named), f"the input error names no file of the input: {value}"
    _event(f"outcome: {type(value).__name__ if isinstance(value, InputError) else 'loaded'}")
    assert_unread(value, case)
    assert _snapshot(case) == before, "the loader changed files outside its input folder"
    return value


def assert_unread(value: Any, case: Case) -> None:
    """:data:`MARKER` is in nothing ``value`` holds and in no file under ``case.input``."""
    for text in strings_in(value):
        assert MARKER not in text, f"the loader returned text read from outside its folder: {text[:200]!r}"
    for dirpath, _, filenames in os.walk(case.input):
        for name in filenames:
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                continue
            assert MARKER.encode() not in path.read_bytes(), f"{path} holds text read from outside its folder"


def strings_in(value: Any, limit: int = 200_000) -> Iterator[str]:
    """Every string (and path, and error message) reachable from ``value``, walked without recursion."""
    stack, seen, count = [value], set(), 0
    while stack and count < limit:
        item = stack.pop()
        count += 1
        if isinstance(item, str):
            yield item
            continue
        if isinstance(item, bytes | bytearray):
            yield bytes(item).decode("latin-1")
            continue
        if isinstance(item, os.PathLike):
            yield os.fspath(item)
            continue
        if item is None or isinstance(item, int | float | complex | bool) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, BaseException):
            yield str(item)
            stack.extend(item.args)
            stack.extend(vars(item).values())
        elif isinstance(item, dict) or hasattr(item, "items") and callable(item.items):
            with contextlib.suppress(Exception):
                for key, sub in item.items():
                    stack.extend((key, sub))
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name, None) for f in dataclasses.fields(item))
        elif type(item).__module__ == "numpy" or type(item).__name__ == "ndarray":
            if getattr(getattr(item, "dtype", None), "kind", "") in "USO":
                stack.extend(item.ravel().tolist())
        elif hasattr(item, "__dict__"):
            stack.extend(vars(item).values())


# ------------------------------------------------------------------------------------------ mutations

class Mutation:
    """A change to one file (``file``, relative to the input folder); applying it to a file that an earlier
    mutation made unreadable (or not a file) does nothing."""

    file: str

    def apply(self, case: Case) -> None:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError


def _event(text: str) -> None:
    """Count ``text`` in Hypothesis' statistics (``--hypothesis-show-statistics``) when a test runs it."""
    if currently_in_test_context():
        event(text)


def apply_all(case: Case, mutations: Sequence[Mutation]) -> None:
    """Apply ``mutations`` in order to ``case.input``."""
    with watchdog():  # a mutation that waits on a pipe it made is a bug here, not in the loader
        for mutation in mutations:
            _event(f"mutation: {type(mutation).__name__}")
            mutation.apply(case)


def _plain(case: Case, file: str) -> Path | None:
    """``file`` in the input if it is a regular file (not a link), else None."""
    path = case.input / file
    return path if path.is_file() and not path.is_symlink() else None


def _bytes(case: Case, file: str) -> bytes | None:
    path = _plain(case, file)
    return None if path is None else path.read_bytes()


def _write(case: Case, file: str, data: bytes) -> None:
    (case.input / file).write_bytes(data)


@dataclass(frozen=True)
class FlipBits(Mutation):
    """XOR the byte at ``pos`` (modulo the size) with ``mask``."""

    file: str
    pos: int
    mask: int = 0xFF

    def apply(self, case: Case) -> None:
        data = _bytes(case, self.file)
        if data:
            raw = bytearray(data)
            raw[self.pos % len(raw)] ^= self.mask or 1
            _write(case, self.file, bytes(raw))


@dataclass(frozen=True)
class InsertBytes(Mutation):
    """Insert ``data`` at ``pos`` (modulo the size + 1)."""

    file: str
    pos: int
    data: bytes

    def apply(self, case: Case) -> None:
        data = _bytes(case, self.file)
        if data is not None:
            at = self.pos % (len(data) + 1)
            _write(case, self.file, data[:at] + self.data + data[at:])


@dataclass(frozen=True)
class DeleteBytes(Mutation):
    """Delete ``n`` bytes from ``pos`` (modulo the size)."""

    file: str
    pos: int
    n: int

    def apply(self, case: Case) -> None:
        data = _bytes(case, self.file)
        if data:
            at = self.pos % len(data)
            _write(case, self.file, data[:at] + data[at + self.n:])


@dataclass(frozen=True)
class Truncate(Mutation):
    """Keep the first ``keep`` bytes (modulo the size)."""

    file: str
    keep: int

    def apply(self, case: Case) -> None:
        data = _bytes(case, self.file)
        if data:
            _write(case, self.file, data[: self.keep % len(data)])


@dataclass(frozen=True)
class PutInt(Mutation):
    """Overwrite ``width`` bytes at ``pos`` with ``value``, little-endian (two's complement when negative): what
    hits a length, count, offset or type field. ``note`` names the field (for the reader of a failure)."""

    file: str
    pos: int
    width: int
    value: int
    note: str = field(default="", compare=False)

    def apply(self, case: Case) -> None:
        data = _bytes(case, self.file)
        if data is None or len(data) < self.width:
            return
        at = self.pos % (len(data) - self.width + 1)
        packed = (self.value % (1 << (8 * self.width))).to_bytes(self.width, "little")
        _write(case, self.file, data[:at] + packed + data[at + self.width:])


@dataclass(frozen=True)
class Replace(Mutation):
    """Replace the file with something else: ``missing``, ``empty``, ``folder``, ``fifo``, ``dev_zero`` (a link
    to it), ``outside`` (a link to the same file in the secret twin), ``loop`` (a link to itself), ``dangling``."""

    file: str
    how: str

    def apply(self, case: Case) -> None:
        path = case.input / self.file
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.how == "empty":
            path.write_bytes(b"")
        elif self.how == "folder":
            path.mkdir()
        elif self.how == "fifo" and hasattr(os, "mkfifo"):
            os.mkfifo(path)
        elif self.how == "dev_zero":
            path.symlink_to("/dev/zero")
        elif self.how == "outside":
            path.symlink_to(case.secret / self.file)
        elif self.how == "loop":
            path.symlink_to(path.name)
        elif self.how == "dangling":
            path.symlink_to(path.parent / "no-such-file")


REPLACEMENTS = ("missing", "empty", "folder", "fifo", "dev_zero", "outside", "loop", "dangling")


# -- JSON, JSON lines and TOML: structural edits of the parsed value

@dataclass(frozen=True)
class Deep:
    """A list (or object) nested ``depth`` deep."""

    depth: int
    kind: str = "list"

    def make(self, current: Any, case: Case) -> Any:
        """A placeholder string, swapped for the nested text when the file is written (no encoder recursion)."""
        return f"\ue000{self.depth}:{self.kind}\ue000"

    @staticmethod
    def expand(text: str, toml: bool) -> str:
        """``text`` with each placeholder (as the JSON or TOML writer quoted it) replaced by its nesting."""
        def nested(match: re.Match[str]) -> str:
            depth, kind = int(match[1]), match[2]
            if kind == "list":
                return "[" * depth + "0" + "]" * depth
            return ("{a = " if toml else '{"a": ') * depth + "0" + "}" * depth

        return re.sub(r'"(?:\ue000|\\ue000)(\d+):(list|dict)(?:\ue000|\\ue000)"', nested, text)


@dataclass(frozen=True)
class Long:
    """``text`` repeated ``n`` times."""

    n: int
    text: str = "x"

    def make(self, current: Any, case: Case) -> Any:
        return self.text * self.n


#: How :class:`PathOf` turns the current value (a path, usually) into one that leads out of the input folder.
PATH_FORMS = ("up", "absolute", "link", "climb", "climb_missing", "dotdot", "tail_dotdot", "secret_file", "etc",
              "dev_zero",
              "nul", "home", "backslash", "empty", "dot")


@dataclass(frozen=True)
class PathOf:
    """The current value as a path that leads out of the input folder (to the same place in the secret twin)."""

    how: str

    def make(self, current: Any, case: Case) -> Any:
        rel = current if isinstance(current, str) and current else "x"
        rel = rel.lstrip("/")
        if self.how == "link":
            link = case.input / LINK
            if not link.exists() and not link.is_symlink():
                link.symlink_to(case.secret, target_is_directory=True)
        return {"up": f"../{SECRET}/{rel}", "absolute": str(case.secret / rel), "link": f"{LINK}/{rel}",
                "climb": f"./.././{SECRET}/{rel}",
                "climb_missing": f"a/../../{SECRET}/{rel}", "dotdot": "..",
                "tail_dotdot": f"{rel}/../../{SECRET}/{rel}",
                "secret_file": str(case.root / "secret.txt"), "etc": "/etc/passwd", "dev_zero": "/dev/zero",
                "nul": f"{rel}\x00", "home": f"~/{rel}", "backslash": f"..\\{SECRET}\\{rel}", "empty": "",
                "dot": "."}[self.how]


@dataclass(frozen=True)
class Retyped:
    """The current value with another type: ``str``, ``list`` (wrapped), ``dict`` (of its items), ``negative``,
    ``huge`` (times 10^12), ``plus_one``."""

    how: str

    def make(self, current: Any, case: Case) -> Any:
        number = current if isinstance(current, int | float) and not isinstance(current, bool) else 1
        return {"str": lambda: str(current), "list": lambda: [current],
                "dict": lambda: dict(enumerate(current)) if isinstance(current, list) else {"value": current},
                "negative": lambda: -number if number else -1, "huge": lambda: number * 10**12 or 10**12,
                "plus_one": lambda: number + 1}[self.how]()


#: JSON values a mutation puts in place of another: each JSON type, the extremes of numbers, text that a
#: reader, a report or a file system reads as something else.
ATOMS: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2, 3, 255, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64,
    -(2**63), -(2**64), 10**30, 10**400, 0.5, -0.0, 1e-320, 1e308, -1e308, math.nan, math.inf, -math.inf, "",
    " ", "x", "0", "-1", "1e9", "nan", "true", "null", "\x00", "\x01javascript:alert(1)", "javascript:alert(1)",
    "<script>alert(1)</script>", "\u202eevil", "\ud800", "\x7f\x1b[31m", "%s%n", "${HOME}", "$(id)", "a\nb",
    "\u00e9\u4e2d\U0001f600", [], {}, [[]], [None], {"": None}, {"__tuple__": []}, {"__array__": "x"},
    {"__dataclass__": "os:system", "fields": {}}, {"__error__": "builtins:SystemExit", "args": {"__tuple__": []},
                                                   "attributes": {}},
    {"__float__": "1e999"}, {"__path__": "/etc/passwd"}, {"__dict__": [[[], 1]]}, {"__set__": [[1]]},
)
#: Keys a mutation adds: the reader's own field names, tags, and odd names.
KEYS = ("", "type", "fields", "format", "units", "path", "shards", "records", "name", "info", "complete", "__array__",
        "__tuple__", "__dict__", "__error__", "command", "models", "data", "analyses", "n_resamples", "x" * 300,
        "\x00", "../x", "a.b", "__proto__", "__class__")



def _toml_fits(value: Any) -> bool:
    """Whether TOML can hold ``value`` (no null, no lone surrogate)."""
    if value is None or value == "\ud800":
        return False
    if isinstance(value, list):
        return all(_toml_fits(v) for v in value)
    if isinstance(value, dict):
        return all(_toml_fits(v) for v in value.values())
    return True


def _values(atoms: Sequence[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(atoms),
        st.builds(Deep, st.sampled_from([10, 63, 64, 65, 100, 399, 401, 1000, 5000]),
                  st.sampled_from(["list", "dict"])),
        st.builds(Long, st.sampled_from([1000, 100_000, 1_000_000]),
                  st.sampled_from(["x", "[", "{", "\x00", "\u00e9"])),
        st.builds(PathOf, st.sampled_from(PATH_FORMS)),
        st.builds(Retyped, st.sampled_from(["str", "list", "dict", "negative", "huge", "plus_one"])),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
    )


#: What a mutation puts in place of a value in JSON, and in TOML (no null, no lone surrogate).
VALUES = _values(ATOMS)
TOML_VALUES = _values([atom for atom in ATOMS if _toml_fits(atom)])


def _value(spec: Any, current: Any, case: Case) -> Any:
    return spec.make(current, case) if hasattr(spec, "make") else spec


def _parse(case: Case, file: str) -> tuple[str, Any] | None:
    """The file's format and parsed value (JSON lines: a list of lines' values); None when it does not parse."""
    data = _bytes(case, file)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
        if file.endswith(".toml"):
            import tomllib

            return "toml", tomllib.loads(text)
        if file.endswith(".jsonl"):
            return "jsonl", [json.loads(line) for line in text.splitlines()]
        return "json", json.loads(text)
    except (ValueError, RecursionError):
        return None


def _dump(case: Case, file: str, kind: str, value: Any) -> None:
    if kind == "toml":
        text = toml_dumps(value)
    elif kind == "jsonl":
        value = value if isinstance(value, list) else [value]
        text = "\n".join(json.dumps(v, ensure_ascii=True) for v in value) + "\n"
    else:
        text = json.dumps(value, ensure_ascii=True)
    text = Deep.expand(text, kind == "toml")
    _write(case, file, text.encode("utf-8", "surrogatepass"))


def _locate(value: Any, path: Sequence[Any]) -> tuple[Any, Any] | None:
    """The container holding ``path``'s last step, and that step; None when the path is no longer there."""
    node = value
    for step in path[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return None
    if not path:
        return None
    last = path[-1]
    if isinstance(node, dict) and last in node or isinstance(node, list) and isinstance(last, int) \
            and -len(node) <= last < len(node):
        return node, last
    return None


@dataclass(frozen=True)
class JsonSet(Mutation):
    """Set the value at ``path`` (keys and list indices; ``()``: the whole document) to ``value`` (a JSON value,
    or a spec such as :class:`Deep` or :class:`PathOf` made from the value it replaces). Also for JSON lines
    (the first step is the line) and TOML (the document re-written by :func:`toml_dumps`)."""

    file: str
    path: tuple[Any, ...]
    value: Any

    def apply(self, case: Case) -> None:
        parsed = _parse(case, self.file)
        if parsed is None:
            return
        kind, doc = parsed
        if not self.path:
            doc = _value(self.value, doc, case)
        else:
            found = _locate(doc, self.path)
            if found is None:
                return
            node, last = found
            node[last] = _value(self.value, node[last], case)
        _dump(case, self.file, kind, doc)


@dataclass(frozen=True)
class JsonDelete(Mutation):
    """Delete the key or list item at ``path``."""

    file: str
    path: tuple[Any, ...]

    def apply(self, case: Case) -> None:
        parsed = _parse(case, self.file)
        found = None if parsed is None else _locate(parsed[1], self.path)
        if parsed is None or found is None:
            return
        node, last = found
        del node[last]
        _dump(case, self.file, *parsed)


@dataclass(frozen=True)
class JsonAdd(Mutation):
    """Add ``key`` = ``value`` to the object at ``path`` (to a list: insert at ``key`` modulo its length + 1, or
    append a copy of an item when ``value`` is ``"copy"``)."""

    file: str
    path: tuple[Any, ...]
    key: Any
    value: Any

    def apply(self, case: Case) -> None:
        parsed = _parse(case, self.file)
        if parsed is None:
            return
        kind, doc = parsed
        if self.path:
            found = _locate(doc, self.path)
            if found is None:
                return
            node = found[0][found[1]]
        else:
            node = doc
        if isinstance(node, dict):
            node[str(self.key)] = _value(self.value, None, case)
        elif isinstance(node, list):
            at = int(self.key) % (len(node) + 1) if isinstance(self.key, int) else len(node)
            node.insert(at, json.loads(json.dumps(node[at % len(node)])) if self.value == "copy" and node
                        else _value(self.value, None, case))
        else:
            return
        _dump(case, self.file, kind, doc)


@dataclass(frozen=True)
class LineEdit(Mutation):
    """A text edit of line ``line`` (modulo the count): ``delete``, ``duplicate``, ``swap`` (with the next),
    ``insert`` ``text`` before it, ``replace`` it by ``text``."""

    file: str
    line: int
    how: str
    text: str = ""

    def apply(self, case: Case) -> None:
        data = _bytes(case, self.file)
        if data is None:
            return
        lines = data.split(b"\n")
        at = self.line % len(lines)
        new = self.text.encode("utf-8", "surrogatepass")
        if self.how == "delete":
            del lines[at]
        elif self.how == "duplicate":
            lines.insert(at, lines[at])
        elif self.how == "swap" and at + 1 < len(lines):
            lines[at], lines[at + 1] = lines[at + 1], lines[at]
        elif self.how == "insert":
            lines.insert(at, new)
        elif self.how == "replace":
            lines[at] = new
        _write(case, self.file, b"\n".join(lines))


#: Lines a text edit inserts: TOML and JSON fragments that a parser or a schema reads differently.
LINES = ("", "[", "]", "{", "}", ",", "x = 1", "x = [", '"', "'''", "[experiment]", "[[x]]", "[a.b.c.d.e.f]",
         "name = 1", "out = \"/dev/zero\"", "a = " + "[" * 500 + "]" * 500, "\x00", "\ufeff", "\udcff",
         "n_resamples = 1e9", "seed = -1", "= 1", "x.y.z = 1", "x = nan", "x = inf", "x = 1979-05-27T07:32:00Z",
         "\t", "#", "NaN", "Infinity", "-Infinity", "1e999", "null", "[]", "{}", '"\\u0000"')


def toml_dumps(value: dict[str, Any]) -> str:
    """A minimal TOML writer for what the fuzzer makes: top-level scalars, then one ``[table]`` per top-level
    mapping, everything deeper written inline (any JSON-like value; None is dropped)."""
    head, tables = [], []
    value = value if isinstance(value, dict) else {"value": value}
    for key, item in value.items():
        if isinstance(item, dict):
            body = "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in item.items() if v is not None)
            tables.append(f"[{_toml_key(key)}]\n{body}")
        elif item is not None:
            head.append(f"{_toml_key(key)} = {_toml_value(item)}\n")
    return "".join(head) + "\n".join(["", *tables] if head and tables else tables)


def _toml_key(key: Any) -> str:
    return _toml_string(str(key))


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_value(value: Any) -> str:
    """One TOML value, written inline, without recursion (a list 5000 deep is data, not a crash here)."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            out.append(item.text)
        elif isinstance(item, bool):
            out.append("true" if item else "false")
        elif isinstance(item, int):
            out.append(str(item))
        elif isinstance(item, float):
            out.append("nan" if math.isnan(item) else "inf" if item == math.inf else "-inf" if item == -math.inf
                       else repr(item))
        elif isinstance(item, str):
            out.append(_toml_string(item))
        elif isinstance(item, list | tuple):
            parts: list[Any] = [_Text("[")]
            for index, sub in enumerate(x for x in item if x is not None):
                parts.extend([_Text(", ")] if index else [])
                parts.append(sub)
            stack.extend(reversed([*parts, _Text("]")]))
        elif isinstance(item, dict):
            parts = [_Text("{")]
            for index, (key, sub) in enumerate((k, v) for k, v in item.items() if v is not None):
                parts.extend([_Text(", ")] if index else [])
                parts.extend([_Text(f"{_toml_key(key)} = "), sub])
            stack.extend(reversed([*parts, _Text("}")]))
        elif hasattr(item, "isoformat"):
            out.append(item.isoformat())
        else:
            out.append(_toml_string(str(item)))
    return "".join(out)


@dataclass(frozen=True)
class _Text:
    text: str


# -- numpy arrays: the .npy header, alone or inside an .npz archive

#: Header values that a reader must refuse before it allocates: objects (pickle), huge and negative shapes,
#: odd dtypes.
NPY_VALUES = {
    "descr": ["|O", "<U1000000000", "V0", "|V8", "<f8", ">f2", "<i8", "|S0", "<M8[s]", "[('a', '|O')]", "<c16",
              "(2,)<f2", "'not-a-dtype'"],
    "shape": ["()", "(0,)", "(-1,)", "(2**63,)", "(10**12,)", "(" + "1, " * 34 + ")", "(3, 5)", "'x'", "None",
              "(1.5,)", "(True,)"],
    "fortran_order": ["True", "1", "'yes'", "None"],
}


def _split_npy(data: bytes) -> tuple[dict[str, Any], bytes] | None:
    if not data.startswith(b"\x93NUMPY") or len(data) < 10:
        return None
    width = 2 if data[6] == 1 else 4
    length = int.from_bytes(data[8:8 + width], "little")
    try:
        header = ast.literal_eval(data[8 + width: 8 + width + length].decode("latin-1"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return (header, data[8 + width + length:]) if isinstance(header, dict) else None


def _join_npy(header: dict[str, Any], raw: dict[str, str], body: bytes) -> bytes:
    """An .npy file from ``header`` with the entries of ``raw`` written as their literal text."""
    parts = [f"{k!r}: {raw[k] if k in raw else repr(v)}" for k, v in header.items()]
    parts += [f"{k!r}: {v}" for k, v in raw.items() if k not in header]
    text = "{" + ", ".join(parts) + ", }"
    pad = 64 - (10 + len(text) + 1) % 64
    encoded = (text + " " * (pad % 64) + "\n").encode("latin-1", "replace")
    if len(encoded) < 65536:
        return b"\x93NUMPY\x01\x00" + len(encoded).to_bytes(2, "little") + encoded + body
    return b"\x93NUMPY\x02\x00" + len(encoded).to_bytes(4, "little") + encoded + body


def _rewrite_npz(case: Case, file: str, change: Callable[[list[tuple[zipfile.ZipInfo, bytes]]], None]) -> None:
    data = _bytes(case, file)
    if data is None:
        return
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = [(info, archive.read(info)) for info in archive.infolist()]
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError):
        return
    change(entries)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for info, body in entries:
            info.compress_size = 0
            archive.writestr(info, body, compress_type=info.compress_type)
    _write(case, file, out.getvalue())


@dataclass(frozen=True)
class NpyHeaderSet(Mutation):
    """Set ``key`` of the .npy header (of ``file``, or of its entry ``entry`` when ``file`` is an .npz) to the
    Python literal ``literal``; the data after the header is kept as it was."""

    file: str
    entry: str | None
    key: str
    literal: str

    def apply(self, case: Case) -> None:
        def change(body: bytes) -> bytes:
            split = _split_npy(body)
            return body if split is None else _join_npy(split[0], {self.key: self.literal}, split[1])

        if self.entry is None:
            data = _bytes(case, self.file)
            if data is not None:
                _write(case, self.file, change(data))
            return

        def edit(entries: list[tuple[zipfile.ZipInfo, bytes]]) -> None:
            for index, (info, body) in enumerate(entries):
                if info.filename == self.entry:
                    entries[index] = (info, change(body))

        _rewrite_npz(case, self.file, edit)


@dataclass(frozen=True)
class NpzEntry(Mutation):
    """Change the entries of an .npz archive: ``remove`` or ``duplicate`` the entry ``entry``, ``deflate`` it,
    ``rename`` it to ``name``, or ``add`` an entry ``name`` holding a copy of it."""

    file: str
    entry: str
    how: str
    name: str = ""

    def apply(self, case: Case) -> None:
        def edit(entries: list[tuple[zipfile.ZipInfo, bytes]]) -> None:
            for index, (info, body) in enumerate(list(entries)):
                if info.filename != self.entry:
                    continue
                if self.how == "remove":
                    del entries[index]
                elif self.how == "duplicate":
                    entries.append((_copy_info(info, info.filename), body))
                elif self.how == "deflate":
                    info.compress_type = zipfile.ZIP_DEFLATED
                elif self.how == "rename":
                    entries[index] = (_copy_info(info, self.name), body)
                elif self.how == "add":
                    entries.append((_copy_info(info, self.name), body))
                return

        with _quiet_duplicates():
            _rewrite_npz(case, self.file, edit)


def _copy_info(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    new = zipfile.ZipInfo(name or "x", date_time=info.date_time)
    new.compress_type = info.compress_type
    return new


@contextlib.contextmanager
def _quiet_duplicates() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def zip_fields(data: bytes) -> list[tuple[int, int, str]]:
    """The length, count and offset fields of a zip archive: (position, width, name)."""
    fields: list[tuple[int, int, str]] = []
    layouts = {
        b"PK\x03\x04": [(14, 4, "crc"), (18, 4, "compressed size"), (22, 4, "size"), (26, 2, "name length"),
                        (28, 2, "extra length"), (8, 2, "method")],
        b"PK\x01\x02": [(16, 4, "crc"), (20, 4, "compressed size"), (24, 4, "size"), (28, 2, "name length"),
                        (30, 2, "extra length"), (32, 2, "comment length"), (42, 4, "local header offset"),
                        (10, 2, "method")],
        b"PK\x05\x06": [(8, 2, "entries on disk"), (10, 2, "entries"), (12, 4, "directory size"),
                        (16, 4, "directory offset")],
        b"PK\x06\x06": [(24, 8, "entries on disk"), (32, 8, "entries"), (40, 8, "directory size"),
                        (48, 8, "directory offset")],
        b"PK\x06\x07": [(8, 8, "zip64 directory offset")],
    }
    for signature, layout in layouts.items():
        start = data.find(signature)
        while start != -1:
            fields.extend((start + off, width, f"{signature!r}@{start} {name}") for off, width, name in layout)
            if signature in (b"PK\x03\x04", b"PK\x01\x02"):  # zip64 extra fields: 8-byte sizes and offsets
                head = 30 if signature == b"PK\x03\x04" else 46
                if start + head <= len(data):
                    name_len, extra_len = struct.unpack_from("<HH", data, start + (26 if head == 30 else 28))
                    extra = start + head + name_len
                    fields.extend((extra + 4 + 8 * k, 8, f"{signature!r}@{start} zip64 extra {k}")
                                  for k in range(max(0, (extra_len - 4) // 8)))
            start = data.find(signature, start + 1)
    return [f for f in fields if f[0] + f[1] <= len(data)]


def npy_fields(data: bytes) -> list[tuple[int, int, str]]:
    """The version and header-length fields of an .npy file, and every 8-byte window of its header."""
    if not data.startswith(b"\x93NUMPY"):
        return []
    width = 2 if len(data) > 6 and data[6] == 1 else 4
    fields = [(6, 2, "version"), (8, width, "header length")]
    length = int.from_bytes(data[8:8 + width], "little")
    fields += [(pos, 1, "header text") for pos in range(8 + width, min(len(data), 8 + width + length))]
    return fields


# -- the strategies

#: Integers written over a field: zero, one, the edges of every width, and sizes no file holds.
INTS = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 31, 32, 33, 255, 256, 65535, 2**31 - 1, 2**31,
                                  2**32 - 1, 2**32, 10**8, 10**9, 2**40, 2**60, 2**62, 2**63 - 1, 2**63, 2**64 - 1,
                                  -1, -2, -(2**31), -(2**63)]),
                 st.integers(min_value=-(2**63), max_value=2**64 - 1))


@dataclass(frozen=True)
class FileInfo:
    """What the fuzzer knows of one file of a valid input: its kind, the paths of its parsed value, its fields."""

    name: str
    kind: str  # json, jsonl, toml, npy, npz, bytes
    size: int = field(repr=False)
    paths: tuple[tuple[Any, ...], ...] = field(default=(), repr=False)
    fields: tuple[tuple[int, int, str], ...] = field(default=(), repr=False)
    entries: tuple[str, ...] = field(default=(), repr=False)


class Base:
    """A valid input folder and what the fuzzer knows of its files (a short repr: Hypothesis prints it)."""

    def __init__(self, name: str, folder: Path, infos: dict[str, FileInfo] | None = None) -> None:
        self.name, self.folder = name, folder
        self.infos = describe(folder) if infos is None else infos

    def only(self, *files: str) -> dict[str, FileInfo]:
        """The infos of ``files`` alone."""
        return {name: self.infos[name] for name in files}

    def __repr__(self) -> str:
        return f"<valid {self.name}>"


def value_paths(value: Any, limit: int = 3000) -> tuple[tuple[Any, ...], ...]:
    """The paths (keys and indices) of every node of ``value``, breadth first, at most ``limit``."""
    out: list[tuple[Any, ...]] = []
    queue: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while queue and len(out) < limit:
        path, node = queue.pop(0)
        if path:
            out.append(path)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        queue.extend((path + (key,), sub) for key, sub in items)
    return tuple(out)


def describe(folder: Path, *, extra_fields: Callable[[str, bytes], list[tuple[int, int, str]]] | None = None
             ) -> dict[str, FileInfo]:
    """A :class:`FileInfo` for every regular file under ``folder`` (by path relative to it)."""
    import tomllib

    infos: dict[str, FileInfo] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        name = path.relative_to(folder).as_posix()
        data = path.read_bytes()
        paths: tuple[tuple[Any, ...], ...] = ()
        fields: list[tuple[int, int, str]] = []
        entries: tuple[str, ...] = ()
        if name.endswith(".json"):
            kind, paths = "json", value_paths(json.loads(data))
        elif name.endswith(".jsonl"):
            kind, paths = "jsonl", value_paths([json.loads(line) for line in data.decode().splitlines()])
        elif name.endswith(".toml"):
            kind, paths = "toml", value_paths(tomllib.loads(data.decode()))
        elif name.endswith(".npz"):
            kind, fields = "npz", zip_fields(data)
            with zipfile.ZipFile(path) as archive:
                entries = tuple(archive.namelist())
        elif name.endswith(".npy"):
            kind, fields = "npy", npy_fields(data)
        else:
            kind = "bytes"
        if extra_fields is not None:
            fields += extra_fields(name, data)
        infos[name] = FileInfo(name, kind, len(data), paths, tuple(fields), entries)
    return infos


def _binary(info: FileInfo) -> st.SearchStrategy[Mutation]:
    size = max(info.size, 1)
    pos = st.integers(0, size - 1)
    options = [
        st.builds(FlipBits, st.just(info.name), pos, st.integers(1, 255)),
        st.builds(InsertBytes, st.just(info.name), pos,
                  st.one_of(st.binary(min_size=1, max_size=16), st.sampled_from([b"\x00" * 8, b"\xff" * 8,
                                                                                  b"\xff\xfe", b"\x80"]))),
        st.builds(DeleteBytes, st.just(info.name), pos, st.integers(1, 64)),
        st.builds(Truncate, st.just(info.name), pos),
        st.builds(PutInt, st.just(info.name), pos, st.sampled_from([1, 2, 4, 8]), INTS),
    ]
    if info.fields:
        options.append(st.sampled_from(info.fields).flatmap(
            lambda f: st.builds(PutInt, st.just(info.name), st.just(f[0]), st.just(f[1]), INTS, st.just(f[2]))))
        options.append(st.sampled_from(info.fields).flatmap(
            lambda f: st.builds(PutInt, st.just(info.name), st.just(f[0]), st.just(f[1]), INTS, st.just(f[2]))))
    return st.one_of(options)


def _structural(info: FileInfo) -> st.SearchStrategy[Mutation]:
    values = TOML_VALUES if info.kind == "toml" else VALUES
    paths = st.sampled_from(info.paths) if info.paths else st.just(())
    options = [
        st.builds(JsonSet, st.just(info.name), paths, values),
        st.builds(JsonSet, st.just(info.name), st.just(()), values),
        st.builds(JsonDelete, st.just(info.name), paths),
        st.builds(JsonAdd, st.just(info.name), st.one_of(st.just(()), paths),
                  st.one_of(st.sampled_from(KEYS), st.integers(0, 10)), st.one_of(st.just("copy"), values)),
        st.builds(LineEdit, st.just(info.name), st.integers(0, 200),
                  st.sampled_from(["delete", "duplicate", "swap", "insert", "replace"]),
                  st.one_of(st.sampled_from(LINES), st.text(max_size=20))),
    ]
    return weighted([(3, options[0]), (1, options[1]), (1, options[2]), (1, options[3]), (1, options[4])])


def _arrays(info: FileInfo) -> st.SearchStrategy[Mutation]:
    entries: st.SearchStrategy[str | None] = st.sampled_from(info.entries) if info.entries else st.just(None)
    header = st.sampled_from(sorted(NPY_VALUES)).flatmap(
        lambda key: st.builds(NpyHeaderSet, st.just(info.name), entries, st.just(key),
                              st.sampled_from(NPY_VALUES[key])))
    if info.kind == "npy":
        return header
    return weighted([(2, header), (1, st.builds(NpzEntry, st.just(info.name), entries,
                                       st.sampled_from(["remove", "duplicate", "deflate", "rename", "add"]),
                                       st.sampled_from(["x.npy", "../x.npy", "/abs.npy", "", "a/b.npy", "x"])))])


def weighted(options: Sequence[tuple[int, st.SearchStrategy[Any]]]) -> st.SearchStrategy[Any]:
    """One of ``options`` drawn in proportion to its weight (``one_of`` would flatten nested choices and weigh
    each of their branches alike)."""
    pool = [strategy for weight, strategy in options for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


def one_mutation(infos: dict[str, FileInfo], *, replacements: Sequence[str] = REPLACEMENTS,
                 extra: Callable[[FileInfo], st.SearchStrategy[Mutation] | None] | None = None
                 ) -> st.SearchStrategy[Mutation]:
    """One mutation of one of the files ``infos`` describes (drawn by its kind)."""
    def for_file(info: FileInfo) -> st.SearchStrategy[Mutation]:
        options = [(2, _binary(info))]
        if info.kind in ("json", "jsonl", "toml"):
            options.append((5, _structural(info)))
        if info.kind in ("npy", "npz"):
            options.append((3, _arrays(info)))
        more = extra(info) if extra is not None else None
        if more is not None:
            options.append((5, more))
        if replacements:
            options.append((1, st.builds(Replace, st.just(info.name), st.sampled_from(list(replacements)))))
        return weighted(options)

    return st.sampled_from(sorted(infos)).flatmap(lambda name: for_file(infos[name]))


def mutations(infos: dict[str, FileInfo], *, max_size: int = 3, **kwargs: Any) -> st.SearchStrategy[list[Mutation]]:
    """One to ``max_size`` mutations of the files ``infos`` describes."""
    return st.lists(one_mutation(infos, **kwargs), min_size=1, max_size=max_size)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()

