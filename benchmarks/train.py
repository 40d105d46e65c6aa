"""Benchmark: ``probes train``'s throughput against a bare PyTorch loop over the same model, batches and optimizer.

One small config (default: ``bert``, 2 layers, 4 heads, hidden 128, ``--seq-len`` 64, ``--batch-size`` 16,
``--steps`` 500, on ``sample:dev`` + ``sample:test`` or the ``--treebank`` given) is trained twice per repeat, each
side in a child process of its own with ``torch.set_num_threads(--threads)`` (default 1, so that the two sides
compete for the same share of a shared machine), the sides alternating:

(a) ``probes``: :func:`probes.training.trainer.train` into a temporary folder, i.e. what a user of ``probes train``
    gets: transformers' ``Trainer`` (AdamW, linear schedule, gradient clipping at 1.0, a log entry every step), a
    checkpoint folder at steps 0, 1, 2, 4, 8, ... and the last, each with its held-out loss and the ``Trainer``'s
    resume state;
(b) ``bare``: the same model (:func:`probes.training.models.build_model`: same init), the same tokenized blocks in
    the same order (accelerate's seedable sampler: ``randperm`` seeded ``data_seed + epoch``), the same collator
    and masks (:class:`probes.training.callbacks.SeededCollator`), ``torch.optim.AdamW`` with the same
    hyper-parameters and ``get_linear_schedule_with_warmup``, the same number of steps; no checkpoints, no
    evaluation, no logging; and the C allocator setting (a)'s ``train`` makes
    (:func:`probes.training.allocator.keep_freed_memory`), so that the two sides differ only in the loop.

Times are the training call only (data reading and tokenizing, done by both sides, are outside it): for (a) the
``Trainer.train`` call as :class:`~probes.training.trainer.TrainingRun` reports it (``train``), and the same
without the checkpoint writes and held-out evaluation (``loop``, from a callback timing each save); for (b) the
loop from the optimizer's creation to the last step. Per side the fastest repeat counts. The final train loss of
both sides is printed: equal losses show that the two sides computed the same thing. Prints a table and the
ratios (a)/(b) (the target: ``train`` at most 1.10x), then one line of JSON. Example (offline, about 6 minutes on a quiet machine)::

    python benchmarks/train.py --threads 1 --repeats 3
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout without installing it
TARGET = 1.10


def config_from(args: argparse.Namespace) -> Any:
    """The :class:`~probes.training.config.TrainConfig` both sides train."""
    from probes.training.config import TrainConfig

    return TrainConfig(arch=args.arch, layers=args.layers, heads=args.heads, hidden=args.hidden,
                       treebank=tuple(args.treebank), steps=args.steps, batch_size=args.batch_size,
                       seq_len=args.seq_len, tokenizer=args.tokenizer, seed=0, data_seed=0)


def _timer_callback() -> Any:
    """A ``TrainerCallback`` timing the loop (train begin to end) and every save (step end to the last
    ``on_save``, which follows probes' checkpoint writer)."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.begin = self.end = self.step_end = 0.0
            self.saving = 0.0
            self.saves = 0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.begin = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.step_end = time.perf_counter()

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.saving += time.perf_counter() - self.step_end
            self.saves += 1

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.end = time.perf_counter()

    return Timer()


def probes_child(config: Any) -> dict[str, Any]:
    """(a): :func:`probes.training.trainer.train` into a temporary folder (what ``probes train`` runs, before it
    draws the curves); the training time with and without the saves."""
    from probes.training.checkpoints import read_training
    from probes.training.trainer import train

    timer = _timer_callback()
    with tempfile.TemporaryDirectory(prefix="probes-bench-train-") as tmp:
        t0 = time.perf_counter()
        run = train(config, Path(tmp) / "run", progress=False, callbacks=[timer])
        wall = time.perf_counter() - t0
        last = read_training(run.checkpoints[run.last_step])
    loop = timer.end - timer.begin
    return {"train_s": run.seconds, "loop_s": loop - timer.saving, "saving_s": timer.saving,
            "setup_s": run.seconds - loop, "saves": timer.saves, "wall_s": wall, "steps": run.last_step,
            "final_loss": last.train_loss}


def bare_child(config: Any) -> dict[str, Any]:
    """(b): the same model, blocks, order, masks, optimizer and schedule, in a plain loop."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from probes.training.allocator import keep_freed_memory
    from probes.training.callbacks import SeededCollator
    from probes.training.data import read_corpus, token_blocks
    from probes.training.models import build_model
    from probes.training.tokenizer import build_tokenizer

    keep_freed_memory()  # the allocator setting probes' train() makes first (probes.training.allocator)
    corpus = read_corpus(config.treebank, config.select_on)
    tokenizer = build_tokenizer(config, corpus.train)
    blocks = torch.from_numpy(token_blocks(corpus.train, tokenizer, config.seq_len, masked_lm=config.masked_lm))
    collator = SeededCollator(tokenizer=tokenizer, mlm=config.masked_lm, data_seed=config.data_seed)
    model = build_model(config, tokenizer)
    per_epoch = len(blocks) // config.batch_size
    t0 = time.perf_counter()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay,
                                  betas=(0.9, 0.999), eps=1e-8)
    schedule = get_linear_schedule_with_warmup(optimizer, config.warmup, config.steps)
    generator = torch.Generator()
    step, epoch, loss = 0, 0, None
    while step < config.steps:
        generator.manual_seed(config.data_seed + epoch)  # accelerate's SeedableRandomSampler
        order = torch.randperm(len(blocks), generator=generator).tolist()
        for b in range(per_epoch):
            if step >= config.steps:
                break
            batch = collator([blocks[i].clone() for i in order[b * config.batch_size:(b + 1) * config.batch_size]])
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            model.zero_grad()
            step += 1
        epoch += 1
    seconds = time.perf_counter() - t0
    return {"train_s": seconds, "steps": step, "final_loss": float(loss) if loss is not None else None}


def run_child(side: str, argv: list[str], threads: int) -> dict[str, Any]:
    """One side in a fresh process; its JSON result (the child's last line)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, __file__, *argv, "--child", side], env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {side} child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="bert", choices=["bert", "gpt2", "llama"])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--tokenizer", default="train:4000")
    parser.add_argument("--treebank", nargs="+", default=["sample:dev", "sample:test"])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of each child (default 1)")
    parser.add_argument("--repeats", type=int, default=1, help="alternating (a, b) pairs; the fastest counts")
    parser.add_argument("--child", choices=["probes", "bare"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    config = config_from(args)
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        result = (probes_child if args.child == "probes" else bare_child)(config)
        print(json.dumps(result))
        return
    forwarded = list(argv if argv is not None else sys.argv[1:])
    runs: dict[str, list[dict[str, Any]]] = {"probes": [], "bare": []}
    for _ in range(args.repeats):
        for side in ("probes", "bare"):
            runs[side].append(run_child(side, forwarded, args.threads))
    a = min(runs["probes"], key=lambda r: r["train_s"])
    b = min(runs["bare"], key=lambda r: r["train_s"])
    tokens = config.steps * config.batch_size * config.seq_len
    ratio, loop_ratio = a["train_s"] / b["train_s"], a["loop_s"] / b["train_s"]
    print(f"{config.arch}, {config.layers} layers x {config.heads} heads, hidden {config.hidden}, "
          f"seq {config.seq_len}, batch {config.batch_size}, {config.steps} steps ({tokens:,} tokens), "
          f"data {' + '.join(config.treebank)}; "
          f"{args.threads} thread(s), {args.repeats} repeat(s), load average {os.getloadavg()[0]:.2f}")
    print(f"{'side':<34}{'seconds':>9}{'tokens/s':>11}{'ratio':>8}")
    rows = [("(b) bare PyTorch loop", b["train_s"]), ("(a) probes train (Trainer.train)", a["train_s"]),
            ("(a) without checkpoints + eval", a["loop_s"])]
    for name, seconds in rows:
        print(f"{name:<34}{seconds:9.2f}{tokens / seconds:11,.0f}{seconds / b['train_s']:8.3f}")
    print(f"(a) spent {a['saving_s']:.2f} s in {a['saves']} saves (checkpoint folders, held-out loss, resume state) "
          f"and {a['setup_s']:.2f} s before the first step (Trainer set-up, the step-0 checkpoint); "
          f"train() took {a['wall_s']:.2f} s in all (with reading and tokenizing the data)")
    print(f"final train loss: (a) {a['final_loss']}, (b) {b['final_loss']}; "
          f"ratio {ratio:.3f}x against the target {TARGET:.2f}x: {'met' if ratio <= TARGET else 'NOT met'}")
    print(json.dumps({"config": config.to_dict(), "threads": args.threads, "repeats": args.repeats,
                      "load_average": os.getloadavg()[0], "tokens": tokens, "probes": a, "bare": b,
                      "ratio": ratio, "ratio_without_saves": loop_ratio, "target": TARGET,
                      "tokens_per_second": {"probes": tokens / a["train_s"], "bare": tokens / b["train_s"]},
                      "runs": runs}))


if __name__ == "__main__":
    main()
