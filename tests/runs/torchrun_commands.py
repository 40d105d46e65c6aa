"""One ``torchrun`` worker that runs several ``probes`` commands in turn: one launch for several distributed checks.

``python -m torch.distributed.run --nproc-per-node 2 tests/runs/torchrun_commands.py '[["leaderboard", ...], ...]'``
runs each argument list through :func:`probes.cli.main`, the function ``python -m probes`` calls: each command
runs its block of the inputs, merges the ranks' states and waits at the final barrier as in a launch of its own.
The ranks join the process group once, at the first command, and leave it after the last (a group left and
joined again inside one launch is not something ``probes`` does, and gloo does not always survive it).
Starting the launcher and two ranks costs more than a tiny model's commands themselves, so the tests of
tests/runs/test_distributed.py share one launch. Before each command rank 0 prints ``==> probes COMMAND`` (the
tests split the output there); the worker stops at the first command that fails and exits with its code.
"""

from __future__ import annotations

import json
import os
import sys

#: The line rank 0 prints before each command's own output.
MARKER = "==> probes "


def main(commands: list[list[str]]) -> int:
    """Run each command of ``commands`` (argument lists, as after ``probes``) in order; the first non-zero exit code."""
    import torch.distributed as dist

    from probes.cli import main as probes_main

    leave, dist.destroy_process_group = dist.destroy_process_group, lambda *args, **kwargs: None
    try:
        for args in commands:
            if os.environ.get("RANK", "0") == "0":
                print(MARKER + args[0], flush=True)
            code = probes_main(args)
            if code != 0:
                return code
    finally:
        dist.destroy_process_group = leave
    if dist.is_initialized():
        leave()
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
