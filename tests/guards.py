"""Guards shared by the tests of hostile inputs: a block that would hang (a reader blocked on a named pipe, a
loader spinning on a crafted header) fails its test instead of hanging the suite. A guard, not a timing check:
the limit is far above what the block needs on any machine."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def watchdog(seconds: int, error: Callable[[], BaseException]) -> Iterator[None]:
    """Raise ``error()`` inside the block once ``seconds`` have passed (SIGALRM; a no-op where there is none)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise error()

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
