"""Benchmark: ``probes train``'s throughput against a bare PyTorch loop over the same model, batches and optimizer.

One small config (default: ``bert``, 2 layers, 4 heads, hidden 128, ``--seq-len`` 64, ``--batch-size`` 16,
``--steps`` 500, on ``sample:dev`` + ``sample:test`` or the ``--treebank`` given) is trained twice per repeat, each
side in a child process of its own with ``torch.set_num_threads(--threads)`` (default 1, so that the two sides
compete for the same share of a shared machine). The two sides of a repeat run at the same time, each in its own
process on its own core, so that both see the same machine (on a shared virtual machine the speed of one core
drifts by 20-30% from one minute to the next: sides run one after the other, ``--one-after-the-other``, then
differ by that drift, not by their loops):

(a) ``probes``: :func:`probes.training.trainer.train` into a temporary folder, i.e. what a user of ``probes train``
    gets: transformers' ``Trainer`` (AdamW, linear schedule, gradient clipping at 1.0, a log entry every step), a
    checkpoint folder at steps 0, 1, 2, 4, 8, ... and the last, each with its held-out loss and the ``Trainer``'s
    resume state;
(b) ``bare``: the same model (:func:`probes.training.models.build_model`: same init), the same tokenized blocks in
    the same order (accelerate's seedable sampler: ``randperm`` seeded ``data_seed + epoch``), the same collator
    and masks (:class:`probes.training.callbacks.SeededCollator`), ``torch.optim.AdamW`` with the same
    hyper-parameters and ``get_linear_schedule_with_warmup``, the same number of steps; no checkpoints, no
    evaluation, no logging; and the C allocator setting (a)'s ``train`` makes
    (:func:`probes.training.allocator.keep_freed_memory`) and the frozen heap of its ``Trainer.train``
    (``gc.freeze``, :mod:`probes.training.lean_trainer`), so that the two sides differ only in the loop.

Times are the training call only (data reading and tokenizing, done by both sides, are outside it): for (a) the
``Trainer.train`` call as :class:`~probes.training.trainer.TrainingRun` reports it (``train``), and the same
without the checkpoint writes and held-out evaluation (``loop``, from a callback timing each save); for (b) the
loop from the optimizer's creation to the last step. The table shows each side's fastest repeat; the ratio held
against the target is the median over repeats of (a)/(b) within a repeat (the two sides timed side by side). The
final train loss of both sides is printed: equal losses show that the two sides computed the same thing. Prints a
table and the ratios (a)/(b) (the target: ``train`` at most 1.10x), then one line of JSON. Example (offline, about 6 minutes on a quiet machine)::

    python benchmarks/train.py --threads 1 --repeats 3

The role lab's step (issue 39): ``--task induction`` (or ``roles``) with ``--attention-only`` trains the lab's model
(default arch ``gpt2`` for a task) on the task's examples instead of text. Then (b) takes the task's data as
probes' ``train`` does (:mod:`probes.training.task_data`): the task tokenizer, :class:`TaskExamples` (example ``i``
drawn from its seed when asked for, inside the loop on both sides), the same sampler order and
:class:`TaskCollator` (labels ``-100`` off the predictable positions); (a) also reports how its saves split into the
held-out loss (128 held-out sequences at each checkpoint, :data:`probes.training.trainer.TASK_DEV_SEQUENCES`), the checkpoint folder writes and the ``Trainer``'s resume
state. The lab's settings (about a minute a side on a quiet machine)::

    python benchmarks/train.py --task induction --attention-only --arch gpt2 --layers 2 --heads 4 --hidden 64 \
        --seq-len 64 --batch-size 32 --learning-rate 2e-3 --warmup 50 --steps 1000 --threads 1 --repeats 2
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
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

    common = {"layers": args.layers, "heads": args.heads, "hidden": args.hidden, "steps": args.steps,
              "batch_size": args.batch_size, "seq_len": args.seq_len, "learning_rate": args.learning_rate,
              "warmup": args.warmup, "attention_only": args.attention_only, "seed": 0, "data_seed": 0}
    if args.task == "text":
        return TrainConfig(arch=args.arch or "bert", treebank=tuple(args.treebank), tokenizer=args.tokenizer,
                           **common)
    return TrainConfig(arch=args.arch or "gpt2", task=args.task, task_vocab=args.task_vocab,
                       period_min=args.period_min, period_max=args.period_max, task_roles=args.task_roles, **common)


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


def _timed(module: Any, name: str, spent: list[float]) -> None:
    """Replace ``module.name`` (a function) by one that appends each call's seconds to ``spent``."""
    inner = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)

    setattr(module, name, timed)


def probes_child(config: Any) -> dict[str, Any]:
    """(a): :func:`probes.training.trainer.train` into a temporary folder (what ``probes train`` runs, before it
    draws the curves); the training time with and without the saves, and the saves split into the held-out loss,
    the checkpoint folder writes and the rest (the ``Trainer``'s resume state), the step-0 checkpoint (written
    before the loop) left out of the split."""
    import probes.training.callbacks as callbacks
    import probes.training.trainer as trainer
    from probes.training.checkpoints import read_training

    evaluating: list[float] = []
    writing: list[float] = []
    _timed(callbacks, "held_out_loss", evaluating)  # looked up by the trainer's checkpoint writer when it is made
    _timed(trainer, "write_checkpoint", writing)
    timer = _timer_callback()
    with tempfile.TemporaryDirectory(prefix="probes-bench-train-") as tmp:
        t0 = time.perf_counter()
        run = trainer.train(config, Path(tmp) / "run", progress=False, callbacks=[timer])
        wall = time.perf_counter() - t0
        last = read_training(run.checkpoints[run.last_step])
    loop = timer.end - timer.begin
    held_out, folders = sum(evaluating[1:]), sum(writing[1:])  # [0]: the step-0 checkpoint, before the loop
    return {"train_s": run.seconds, "loop_s": loop - timer.saving, "saving_s": timer.saving,
            "held_out_s": held_out, "checkpoint_write_s": folders, "resume_state_s": timer.saving - held_out - folders,
            "step0_checkpoint_s": (evaluating[:1] or [0.0])[0] + (writing[:1] or [0.0])[0],
            "setup_s": run.seconds - loop, "saves": timer.saves, "wall_s": wall, "steps": run.last_step,
            "final_loss": last.train_loss}


def _text_data(config: Any) -> tuple[Any, Any, Any]:
    """(b)'s tokenizer, items (``items[i]``: training example ``i``) and collator of a text run."""
    import torch

    from probes.training.callbacks import SeededCollator
    from probes.training.data import read_corpus, token_blocks
    from probes.training.tokenizer import build_tokenizer

    corpus = read_corpus(config.treebank, config.select_on)
    tokenizer = build_tokenizer(config, corpus.train)
    blocks = torch.from_numpy(token_blocks(corpus.train, tokenizer, config.seq_len, masked_lm=config.masked_lm))

    class Blocks:
        def __len__(self) -> int:
            return len(blocks)

        def __getitem__(self, i: int) -> Any:
            return blocks[i].clone()

    return tokenizer, Blocks(), SeededCollator(tokenizer=tokenizer, mlm=config.masked_lm, data_seed=config.data_seed)


def _task_data(config: Any) -> tuple[Any, Any, Any]:
    """(b)'s tokenizer, items and collator of a task run, as probes' ``train`` makes them: one fresh example per
    sequence of the run (``steps x batch size``), drawn when asked for."""
    from probes.training.task_data import TaskCollator, TaskExamples, task_tokenizer

    tokenizer = task_tokenizer(config)
    examples = TaskExamples(config.task_spec, config.data_seed, config.steps * config.batch_size,
                            len(config.family.special_tokens))
    return tokenizer, examples, TaskCollator(tokenizer=tokenizer, mlm=False, data_seed=config.data_seed)


def bare_child(config: Any) -> dict[str, Any]:
    """(b): the same model, examples, order, masks, optimizer and schedule, in a plain loop."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from probes.training.allocator import keep_freed_memory
    from probes.training.models import build_model

    keep_freed_memory()  # the allocator setting probes' train() makes first (probes.training.allocator)
    tokenizer, items, collator = (_text_data if config.task_spec is None else _task_data)(config)
    model = build_model(config, tokenizer)
    per_epoch = len(items) // config.batch_size
    gc.freeze()  # as probes' Trainer.train does (probes.training.lean_trainer): the collector skips the set-up's objects
    t0 = time.perf_counter()
    trained = [p for p in model.parameters() if p.requires_grad]  # an attention-only model's MLP is frozen
    optimizer = torch.optim.AdamW(trained, lr=config.learning_rate, weight_decay=config.weight_decay,
                                  betas=(0.9, 0.999), eps=1e-8)
    schedule = get_linear_schedule_with_warmup(optimizer, config.warmup, config.steps)
    generator = torch.Generator()
    step, epoch, loss = 0, 0, None
    while step < config.steps:
        generator.manual_seed(config.data_seed + epoch)  # accelerate's SeedableRandomSampler
        order = torch.randperm(len(items), generator=generator).tolist()
        for b in range(per_epoch):
            if step >= config.steps:
                break
            batch = collator([items[i] for i in order[b * config.batch_size:(b + 1) * config.batch_size]])
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            optimizer.step()
            schedule.step()
            model.zero_grad()
            step += 1
        epoch += 1
    seconds = time.perf_counter() - t0
    return {"train_s": seconds, "steps": step, "final_loss": float(loss) if loss is not None else None}


def _start_child(side: str, argv: list[str], threads: int) -> subprocess.Popen[str]:
    """One side in a fresh process, started now."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, __file__, *argv, "--child", side], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(side: str, child: subprocess.Popen[str]) -> dict[str, Any]:
    """A started side's JSON result (the child's last line)."""
    out, err = child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the {side} child failed ({child.returncode}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def run_pair(argv: list[str], threads: int, together: bool) -> dict[str, dict[str, Any]]:
    """Both sides once: at the same time (``together``: each on its own core, under the same machine load), or one
    after the other."""
    if together:
        children = {side: _start_child(side, argv, threads) for side in ("probes", "bare")}
        return {side: _result(side, child) for side, child in children.items()}
    return {side: _result(side, _start_child(side, argv, threads)) for side in ("probes", "bare")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=["bert", "gpt2", "llama"], help="default: bert for text, gpt2 for a task")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--attention-only", action="store_true", help="blocks without their MLP (the role lab's)")
    parser.add_argument("--tokenizer", default="train:4000", help="text only")
    parser.add_argument("--treebank", nargs="+", default=["sample:dev", "sample:test"], help="text only")
    parser.add_argument("--task", default="text", choices=["text", "induction", "roles"],
                        help="the data: natural text (default) or a role-lab task (probes.training.tasks)")
    parser.add_argument("--task-vocab", type=int, default=64)
    parser.add_argument("--period-min", type=int, default=8)
    parser.add_argument("--period-max", type=int, default=32)
    parser.add_argument("--task-roles", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of each child (default 1)")
    parser.add_argument("--repeats", type=int, default=1, help="(a, b) pairs; the median of their ratios counts")
    parser.add_argument("--one-after-the-other", dest="together", action="store_false",
                        help="run the two sides of a repeat one after the other (default: at the same time, each on "
                             "its own core, when the machine has the cores for both)")
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
    together = args.together and args.threads * 2 <= (os.cpu_count() or 1)
    for _ in range(args.repeats):
        for side, result in run_pair(forwarded, args.threads, together).items():
            runs[side].append(result)
    args.together = together
    report(config, args, runs)


def report(config: Any, args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> None:
    """Print the table, the saves' split, the final losses and the ratio, then one line of JSON."""
    a = min(runs["probes"], key=lambda r: r["train_s"])
    b = min(runs["bare"], key=lambda r: r["train_s"])
    tokens = config.steps * config.batch_size * config.seq_len
    pairs = [(pa["train_s"] / pb["train_s"], pa["loop_s"] / pb["train_s"]) for pa, pb in zip(runs["probes"], runs["bare"])]
    ratio = float(statistics.median(r for r, _ in pairs))
    loop_ratio = float(statistics.median(r for _, r in pairs))
    spec = config.task_spec
    data = (f"data {' + '.join(config.treebank)}" if spec is None else
            f"task {spec.name} (vocab {spec.vocab}" + (f", period {spec.period_min}-{spec.period_max})"
                                                       if spec.name == "induction" else f", {spec.roles} roles)"))
    print(f"{config.arch}{' attention-only' if config.attention_only else ''}, {config.layers} layers x "
          f"{config.heads} heads, hidden {config.hidden}, seq {config.seq_len}, batch {config.batch_size}, "
          f"{config.steps} steps ({tokens:,} tokens), lr {config.learning_rate:g}, warmup {config.warmup}, {data}; "
          f"{args.threads} thread(s), {args.repeats} repeat(s), the sides of a repeat "
          f"{'at the same time' if args.together else 'one after the other'}, load average {os.getloadavg()[0]:.2f}")
    print(f"{'side':<34}{'seconds':>9}{'tokens/s':>11}{'ratio':>8}")
    rows = [("(b) bare PyTorch loop", b["train_s"]), ("(a) probes train (Trainer.train)", a["train_s"]),
            ("(a) without checkpoints + eval", a["loop_s"])]
    for name, seconds in rows:
        print(f"{name:<34}{seconds:9.2f}{tokens / seconds:11,.0f}{seconds / b['train_s']:8.3f}")
    print(f"(a) spent {a['saving_s']:.2f} s in {a['saves']} saves after step 0 (held-out loss {a['held_out_s']:.2f} s, "
          f"checkpoint folders {a['checkpoint_write_s']:.2f} s, the Trainer's resume state and the rest "
          f"{a['resume_state_s']:.2f} s) and {a['setup_s']:.2f} s before the first step (Trainer set-up, the step-0 "
          f"checkpoint: {a['step0_checkpoint_s']:.2f} s); train() took {a['wall_s']:.2f} s in all (with preparing the "
          f"data); the loop without the saves: {1e3 * (a['loop_s'] - b['train_s']) / config.steps:+.2f} ms a step "
          "against (b)")
    print("(a)/(b) within each repeat: " + ", ".join(f"{r:.3f}" for r, _ in pairs) +
          f" (without the saves: {', '.join(f'{r:.3f}' for _, r in pairs)}); fastest against fastest "
          f"{a['train_s'] / b['train_s']:.3f}")
    print(f"final train loss: (a) {a['final_loss']}, (b) {b['final_loss']}; median ratio {ratio:.3f}x (without the "
          f"saves {loop_ratio:.3f}x) against the target {TARGET:.2f}x: {'met' if ratio <= TARGET else 'NOT met'}")
    print(json.dumps({"config": config.to_dict(), "threads": args.threads, "repeats": args.repeats,
                      "load_average": os.getloadavg()[0], "tokens": tokens, "probes": a, "bare": b,
                      "ratio": ratio, "ratio_without_saves": loop_ratio, "pair_ratios": [r for r, _ in pairs],
                      "together": args.together, "target": TARGET,
                      "tokens_per_second": {"probes": tokens / a["train_s"], "bare": tokens / b["train_s"]},
                      "runs": runs}))

if __name__ == "__main__":
    main()
