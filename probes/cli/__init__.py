"""The ``probes`` command line: thin wrappers over library functions.

Every failure is one line on stderr: errors from the input (:class:`probes.ProbesError`) print
``error: ...`` and exit 1; usage errors (unknown option, bad value, missing option) print
``error: ...`` and exit 2; Ctrl-C prints ``error: interrupted`` (with how to resume where a
store makes that possible) and exits 130. ``--debug``, before or after the command, shows
tracebacks instead.

Under ``torchrun`` (``WORLD_SIZE > 1``) the commands of :data:`DISTRIBUTED` join the process group
(:func:`probes.world.init_world`), each rank runs its block of the inputs and rank 0 alone prints and
writes; the others are silent but for errors, which name the rank (``error: rank 1 of 2: ...``). Every
other command refuses to start there, with one line naming those that run distributed.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator

from probes.cli import atlas as _atlas  # noqa: F401  (registers `atlas`)
from probes.cli import coref as _coref  # noqa: F401  (registers `coref`, `bridging`)
from probes.cli import data as _data  # noqa: F401  (registers `data add`, `data list`)
from probes.cli import experiment as _experiment  # noqa: F401  (registers `run`, `report`)

# Each module registers its commands on ``app``.
from probes.cli import extract as _extract  # noqa: F401  (registers `extract`)
from probes.cli import importance as _importance  # noqa: F401  (registers `importance`, `prune`)
from probes.cli import match as _match  # noqa: F401  (registers `match`)
from probes.cli import models as _models  # noqa: F401  (registers `models`)
from probes.cli import probe as _probe  # noqa: F401  (registers `probe`)
from probes.cli import sources as _sources  # noqa: F401  (registers `sources`)
from probes.cli import syntax as _syntax  # noqa: F401  (registers `leaderboard`, `baselines`, `demo`)
from probes.cli import train as _train  # noqa: F401  (registers `train`)
from probes.cli import verify as _verify  # noqa: F401  (registers `verify`)
from probes.cli._app import app, state
from probes.errors import ProbesError
from probes.world import World, init_world, launched

__all__ = ["app", "main", "EXIT_INTERRUPTED", "DISTRIBUTED"]

#: Commands that run distributed under ``torchrun`` (inputs sharded across ranks, states merged on every
#: rank, rank 0 writes; ``train``: data-parallel training by transformers' ``Trainer``); every other command
#: refuses ``WORLD_SIZE > 1``.
DISTRIBUTED: tuple[str, ...] = ("leaderboard", "coref", "bridging", "atlas", "extract", "train")
#: Who is speaking in error lines: ``""`` in one process, ``"rank R of N: "`` in a distributed run.
_WHO = {"prefix": ""}

#: Exit code after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
#: Commands whose work survives an interrupt (the store keeps finished shards).
_RESUMABLE = {"extract": "run the same command again to resume (finished shards are kept)",
              "run": "run the same command again to resume (finished units are kept)",
              "train": "run the same command again to resume (from the latest checkpoint)"}


def _split_debug(args: list[str]) -> tuple[list[str], bool]:
    """Take ``--debug`` out of ``args`` wherever it is (before ``--``) and put it first, for the group."""
    end = args.index("--") if "--" in args else len(args)
    debug = "--debug" in args[:end]
    rest = [a for a in args[:end] if a != "--debug"] + args[end:]
    return (["--debug"] + rest if debug else rest), debug


def _command(args: list[str]) -> str | None:
    """The subcommand named in ``args`` (the first word that is a command), if any."""
    return next((a for a in args if a in app_commands()), None)


def app_commands() -> set[str]:
    """Names of the registered commands."""
    return {c.name or c.callback.__name__ for c in app.registered_commands if c.callback is not None}


def _click_errors() -> tuple[type[Exception], ...]:
    """click's exception base: typer's own copy of click (typer >= 0.2x) and click itself (older typer)."""
    kinds = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            kinds.append(importlib.import_module(module).ClickException)
        except (ImportError, AttributeError):
            continue
    return tuple(kinds)


_CLICK_ERRORS = _click_errors()


def _abort_errors() -> tuple[type[Exception], ...]:
    """click's / typer's ``Abort`` (end of input at a prompt)."""
    import typer

    kinds: list[type[Exception]] = [typer.Abort]
    try:
        kinds.append(importlib.import_module("click.exceptions").Abort)
    except (ImportError, AttributeError):
        pass
    return tuple(kinds)


def _usage_error(exc: Exception) -> str:
    """A click error as one line, with where to look for help on usage errors."""
    text = exc.format_message()  # type: ignore[attr-defined]  # a click error, looked up at run time (_CLICK_ERRORS)
    message = " ".join(line.strip() for line in text.splitlines() if line.strip()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if getattr(exc, "exit_code", 1) == 2 and ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    return f"error: {message}"


def _close_bars() -> None:
    """Close every open progress bar (:func:`probes.progress.close_all`), so that each finishes its line now.

    A bar left open is closed later, when its generator is collected, and would print its line
    after (below) the error message.
    """
    from probes.progress import close_all

    close_all()


def _interrupted(args: list[str]) -> int:
    hint = _RESUMABLE.get(_command(args) or "")
    _close_bars()
    print(f"error: interrupted{'; ' + hint if hint else ''}", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of raising SystemExit when called from Python.

    Under ``torchrun`` with more than one process, see :func:`_main_distributed`.
    """
    args, state["debug"] = _split_debug(list(sys.argv[1:] if argv is None else argv))
    _WHO["prefix"] = ""  # set again by _main_distributed for a rank: one call's rank never names the next call
    try:
        if launched():
            return _main_distributed(args)
        return _main(args)
    finally:  # output folders claimed before the model ran are unlocked, whatever happened
        if "probes.reports.outdir" in sys.modules:
            sys.modules["probes.reports.outdir"].release_claims()


def _device(args: list[str]) -> str | None:
    """The ``--device`` given on the command line, if any (it chooses gloo or NCCL)."""
    for k, arg in enumerate(args):
        if arg.startswith("--device="):
            return arg.split("=", 1)[1]
        if arg == "--device" and k + 1 < len(args):
            return args[k + 1]
    return None


@contextlib.contextmanager
def _silent(world: World) -> Iterator[None]:
    """Off rank 0: no standard output, warnings or log lines below errors (rank 0 speaks for the run)."""
    if world.is_main:
        yield
        return
    logger = logging.getLogger("probes")
    level = logger.level
    logger.setLevel(logging.ERROR)
    with open(os.devnull, "w", encoding="utf-8") as null, contextlib.redirect_stdout(null), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logger.setLevel(level)


def _main_distributed(args: list[str]) -> int:
    """One rank of a ``torchrun`` launch: refuse commands that do not run distributed, else join the process
    group, run the command (silent off rank 0) and wait at a barrier until every rank has finished.

    A rank that fails prints one line naming itself and exits 1; ``torchrun`` then ends the other ranks
    (a rank that hangs instead makes the others fail after :func:`probes.world.timeout`).
    """
    command = _command(args)
    rank, size = os.environ.get("RANK", "0"), os.environ.get("WORLD_SIZE", "?")
    if command is not None and command not in DISTRIBUTED:
        if rank == "0":
            print(f"error: probes {command} does not run distributed (WORLD_SIZE={size}); under torchrun run "
                  f"{', '.join(DISTRIBUTED)}, or run {command} as one process", file=sys.stderr)
        return 1
    _WHO["prefix"] = f"rank {rank} of {size}: "
    try:
        world = init_world(_device(args))
    except (ProbesError, RuntimeError, ValueError) as exc:
        if state["debug"]:
            raise
        print(f"error: {_WHO['prefix']}cannot join the process group: {exc}", file=sys.stderr)
        return 1
    with _silent(world):
        code = _main(args)
    if code == 0:
        try:
            world.barrier("the end of the run")  # rank 0 exits only once every rank has finished
        except ProbesError as exc:  # a rank that died or hangs: one line, never a traceback
            if state["debug"]:
                raise
            print(f"error: {_WHO['prefix']}{exc}", file=sys.stderr)
            return 1
        import torch.distributed as dist

        dist.destroy_process_group()
    return code


def _main(args: list[str]) -> int:
    """Run the command in ``args`` (``--debug`` already taken out), mapping every failure to an exit code."""
    try:
        # Not standalone: click's errors come here, to be printed as one line like every other error.
        code = app(args=args, standalone_mode=False, prog_name="probes")
    except KeyboardInterrupt:
        return _interrupted(args)
    except _CLICK_ERRORS as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `probes` alone: the help text
            exc.show()  # type: ignore[attr-defined]  # a click error, looked up at run time (_CLICK_ERRORS)
            return int(getattr(exc, "exit_code", 2))
        if state["debug"]:
            raise
        _close_bars()
        print(_usage_error(exc).replace("error: ", "error: " + _WHO["prefix"], 1), file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except _abort_errors():  # end of input at a prompt
        print(f"error: {_WHO['prefix']}aborted", file=sys.stderr)
        return 1
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (ProbesError, OSError, UnicodeDecodeError) as exc:
        if state["debug"]:
            raise
        _close_bars()
        print(f"error: {_WHO['prefix']}{exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: say so, briefly, unless --debug
        if state["debug"]:
            raise
        _close_bars()
        print(f"error: {_WHO['prefix']}internal error ({type(exc).__name__}: {exc}); rerun with --debug for the "
              "traceback", file=sys.stderr)
        return 1
    if code == EXIT_INTERRUPTED:  # typer turns KeyboardInterrupt into Exit(130)
        return _interrupted(args)
    return code if isinstance(code, int) else 0


def run() -> None:
    """Console-script entry point.

    After Ctrl-C, or an error while the model still runs in a worker thread, the process ends
    with ``os._exit`` once the output is flushed: letting the interpreter shut down while a
    daemon thread is inside torch aborts it ("terminate called without an active exception").
    """
    try:
        code = main()
    except KeyboardInterrupt:  # a second Ctrl-C while the first one was being handled
        code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    busy = any(t.is_alive() and t is not threading.main_thread() for t in threading.enumerate())
    if code == EXIT_INTERRUPTED or (code != 0 and busy):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)
