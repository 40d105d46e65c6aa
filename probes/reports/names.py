"""Safe file names from data: any label or id (a relation, an analysis, a sentence id) as one file-name part.

A run names files after what it found in the data (``figures/nmod_poss.png``). Data can hold anything,
so every such name goes through :func:`safe_name` (one label) or :func:`safe_names` (all labels of one
run, kept apart from each other). The rules:

* the usual spelling stays: ``:`` becomes ``_`` and ``*`` becomes ``all`` (``nmod:poss`` ->
  ``nmod_poss``, ``*`` -> ``all``), exactly as figures were always named;
* anything a file system could read as more than a name is replaced by ``_``: ``/`` and ``\\``, the
  characters Windows refuses (``< > : " | ? *``), control and format characters (NUL, newlines,
  bidirectional overrides), a leading ``.`` (so no ``..`` and no hidden files), trailing dots and spaces,
  and Windows device names (``CON``, ``NUL``, ``COM1`` ...);
* a name is at most :data:`MAX_CHARS` characters and :data:`MAX_BYTES` UTF-8 bytes (a readable prefix
  is kept);
* a name changed by those rules ends in ``-`` and the first 8 hex digits of the SHA-256 of the original
  label, so two different labels never share a file, and a label always gets the same name; but a Windows
  device name, which is only unsafe as a whole, gets a trailing underscore instead, so the relation ``aux`` is
  drawn in ``aux_.png`` (:func:`safe_names` keeps it apart from a label spelled ``aux_``).

:func:`safe_names` also keeps labels apart that the usual spelling alone would merge (``nmod:poss`` and
``nmod_poss``, or names differing only in case, which one file on macOS and Windows): the label that is
its own name keeps it, the others get the suffix. :func:`check_name` refuses a name part that is not safe,
:func:`inside` a path that leaves its folder, and :func:`check_path` a path given by the user (an option, an
experiment file) that holds a NUL or another control character.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path, PurePath, PurePosixPath

from probes.analysis.relations import SIDES, sided_name
from probes.errors import ConfigError

__all__ = ["safe_name", "safe_names", "check_name", "inside", "check_path", "control_character",
           "usual_name", "MAX_CHARS", "MAX_BYTES"]

#: Longest name part made from a label, in characters and in UTF-8 bytes (file systems allow 255 bytes;
#: the rest is room for the hash suffix, the file's extension and a temporary name while it is written).
MAX_CHARS = 100
MAX_BYTES = 160

_REFUSED = set('/\\<>:"|?*')
_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))}
_HASH_LENGTHS = (8, 16, 64)


def usual_name(label: str) -> str:
    """The name figures have always had: ``:`` -> ``_``, ``*`` -> ``all``; a decoder's sided relation
    ``amod (head left)`` -> ``amod_head-left`` (nothing else changed)."""
    text = str(label)
    for side in SIDES:
        text = text.replace(sided_name("", side), f"_head-{side}")
    return text.replace(":", "_").replace("*", "all")


def _digest(label: str, n: int = 8) -> str:
    return hashlib.sha256(str(label).encode("utf-8", "surrogatepass")).hexdigest()[:n]


def _bad_char(ch: str) -> bool:
    return ch in _REFUSED or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def _cleaned(name: str) -> str:
    """``name`` with every unsafe character, leading dot, trailing dot or space and device name replaced."""
    text = "".join("_" if _bad_char(ch) else ch for ch in name)
    text = re.sub(r"^\.", "_", text)
    text = re.sub(r"[. ]+$", lambda m: "_" * len(m.group()), text)
    if _device(text):
        text = "_" + text
    return text or "_"


def _bounded(text: str, chars: int = MAX_CHARS, nbytes: int = MAX_BYTES) -> str:
    """The longest prefix of ``text`` within ``chars`` characters and ``nbytes`` UTF-8 bytes."""
    text = text[:chars]
    while len(text.encode("utf-8", "surrogatepass")) > nbytes:
        text = text[:-1]
    return text


def _with_suffix(base: str, label: str, n: int = 8) -> str:
    suffix = f"-{_digest(label, n)}"
    return _bounded(base, MAX_CHARS - len(suffix), MAX_BYTES - len(suffix)) + suffix


def safe_name(label: object, *, usual: Callable[[str], str] = usual_name) -> str:
    """``label`` as one safe file-name part (see the module): ``usual(label)`` when that is safe, else a
    cleaned, bounded name ending in a hash of ``label``.

    Args:
        label: the relation, analysis, model or data name, sentence id ... (anything; ``str`` of it is used).
        usual: how the label was always spelled as a name (default :func:`usual_name`); a safe result of it
            is kept exactly, so ordinary outputs keep their names.
    """
    text = str(label)
    base = usual(text)
    cleaned = _bounded(_cleaned(base))
    if cleaned == base:
        return base
    if cleaned == f"_{base}" and _device(base):  # only a device name: kept readable (aux -> aux_)
        stem, dot, rest = base.partition(".")
        return f"{stem}_{dot}{rest}"
    return _with_suffix(cleaned, text)


def _device(name: str) -> bool:
    """Whether ``name`` is a Windows device name (``aux``, ``NUL.png`` ...), which no file there may be called."""
    return name.split(".")[0].upper().rstrip(" ") in _RESERVED


def _key(name: str) -> str:
    """Names equal under this key are one file on a case-insensitive or normalising file system."""
    return unicodedata.normalize("NFC", name).casefold()


def safe_names(labels: Iterable[object], *, usual: Callable[[str], str] = usual_name) -> dict[str, str]:
    """A distinct :func:`safe_name` for each of ``labels`` (by ``str`` of the label), the same whatever their order.

    Labels that would share a name (also one differing only in case) are kept apart: in each such group
    one label keeps its name (the first, sorted, that is its own name, else the first whose usual spelling
    it is); the others get a hash of their own text appended (longer when that still collides).
    """
    texts = sorted({str(label) for label in labels})
    names = {text: safe_name(text, usual=usual) for text in texts}
    for n in _HASH_LENGTHS:
        groups: dict[str, list[str]] = {}
        for text in texts:
            groups.setdefault(_key(names[text]), []).append(text)
        clashes = [group for group in groups.values() if len(group) > 1]
        if not clashes:
            return names
        for group in clashes:
            keeper = next((t for t in group if names[t] == t), None)  # a label that is its own name first,
            keeper = keeper or next((t for t in group if names[t] == usual(t)), None)  # then a usual spelling
            for text in group:
                if text != keeper:
                    names[text] = _with_suffix(_bounded(_cleaned(usual(text))), text, n)
    return _numbered(texts, names)


def _numbered(texts: list[str], names: dict[str, str]) -> dict[str, str]:
    """Last resort (only crafted labels get here): a counter after the names that still clash."""
    seen: set[str] = set()
    for text in texts:
        name, k = names[text], 1
        while _key(name) in seen:
            k += 1
            name = f"{names[text]}-{k}"
        names[text] = name
        seen.add(_key(name))
    return names


def check_name(name: str, *, what: str = "output file name") -> str:
    """``name`` (a relative ``/``-separated path) if every part is a safe file-name part, else a ConfigError
    naming it: no absolute path, no empty, ``.`` or ``..`` part, no leading dot, no unsafe character, no part
    over 255 UTF-8 bytes."""
    relative = PurePosixPath(name)
    if not name or relative.is_absolute() or "\\" in name:
        raise ConfigError(f"{what} {name!r}: expected a relative '/'-separated path inside the output folder")
    for part in name.split("/"):
        bad = (not part or part.startswith(".") or any(_bad_char(ch) for ch in part)
               or part != part.rstrip(". ") or len(part.encode("utf-8", "surrogatepass")) > 255)
        if bad:
            raise ConfigError(f"{what} {name!r}: part {part!r} is not a safe file name (made from data? "
                              "pass it through probes.reports.names.safe_name)")
    return name


def inside(root: str | Path, path: str | Path, *, label: object = None) -> Path:
    """``path`` resolved, if it lies inside the folder ``root`` (links followed); else a ConfigError naming
    the path and the ``label`` it was made from."""
    folder = Path(root).resolve()
    resolved = Path(path).resolve()
    if not resolved.is_relative_to(folder):
        source = f" (made from {label!r})" if label is not None else ""
        raise ConfigError(f"{folder}: refusing to write {path}{source}: it lies outside the output folder")
    return resolved


def control_character(text: str) -> str | None:
    """The first NUL or other control character of ``text`` in words (``a NUL character``, ``a control character
    (U+000A)``); None when it holds none."""
    bad = next((ch for ch in text if unicodedata.category(ch) == "Cc"), None)
    if bad is None:
        return None
    return "a NUL character" if bad == "\x00" else f"a control character (U+{ord(bad):04X})"


def check_path(value: object, *, what: str = "a path", name: str = "path") -> str:
    """``value`` (a path given in an option or a file) as text, if it can name a file: a non-empty string with
    no NUL or other control character; else one ConfigError, ``NAME: expected WHAT, found a NUL character ...``.

    ``os.stat`` and ``mkdir`` raise ValueError on a NUL, and a newline or an escape sequence in a path garbles
    every line and report that prints it, so such a path is refused where it is given.
    """
    text = str(value) if isinstance(value, PurePath) else value
    if not isinstance(text, str) or not text:
        raise ConfigError(f"{name}: expected {what}, found {value!r}")
    found = control_character(text)
    if found is not None:
        raise ConfigError(f"{name}: expected {what}, found {found} in {text!r}")
    return text
