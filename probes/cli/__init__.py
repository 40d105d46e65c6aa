"""The ``probes`` command line: thin wrappers over library functions.

Errors from the input (:class:`probes.ProbesError`) become one ``error: ...``
line on stderr and exit code 1; usage errors exit 2; ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import sys

from probes.cli._app import app, state

# Each module registers its commands on ``app``.
from probes.cli import extract as _extract  # noqa: F401  (registers `extract`)
from probes.cli import syntax as _syntax  # noqa: F401  (registers `leaderboard`, `baselines`, `demo`)
from probes.cli import coref as _coref  # noqa: F401  (registers `coref`, `bridging`)
from probes.cli import probe as _probe  # noqa: F401  (registers `probe`)
from probes.errors import ProbesError

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of raising SystemExit when called from Python."""
    args = list(sys.argv[1:] if argv is None else argv)
    state["debug"] = "--debug" in args
    try:
        # Standalone mode lets click report usage errors itself (one message, exit 2);
        # everything else propagates to here.
        app(args=args, standalone_mode=True, prog_name="probes")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except ProbesError as exc:
        if state["debug"]:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (OSError, UnicodeDecodeError) as exc:
        if state["debug"]:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: say so, briefly, unless --debug
        if state["debug"]:
            raise
        print(f"error: internal error ({type(exc).__name__}: {exc}); rerun with --debug for the traceback",
              file=sys.stderr)
        return 1
    return 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
