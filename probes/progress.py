"""Progress on stderr: the one module every progress bar and stage line of probes goes through.

What a run shows depends on where stderr goes, decided when each bar or line is made:

* a terminal (``sys.stderr.isatty()``): tqdm bars, each on its own line (bars open at once, nested or side by
  side, get distinct positions from tqdm); stage lines are printed above the bars (``tqdm.write``);
* a Jupyter notebook: tqdm's widget bars when ipywidgets is installed, else tqdm's text bars on stderr (never
  tqdm's "IProgress not found" warning);
* anything else (a log file, a pipe, captured output): plain lines without carriage returns, escape codes or
  timestamps. A bar writes a line when it starts (``extraction: 0/500 sentences``), one at every tenth of its total
  (at most one per :data:`MIN_GAP_S` seconds), one at least every :data:`QUIET_S` seconds while it runs (every
  :data:`UNKNOWN_TOTAL_S` seconds without a total), and a final line when it closes (``extraction: 500/500 sentences, done in 12.3 s``). Every line starts with the bar's label,
  so two bars that run at once still read apart.

Stage lines (:func:`stage`) say what is about to happen before anything slow starts (``loading model X``,
``reading treebank Y``, ``scoring``, ``writing report to Z``), so no command is silent at its start or after its
last bar.

Every function takes the command's ``progress`` switch: False writes nothing at all; nor does any process of a
``torchrun`` launch but rank 0 (:func:`probes.world.launched_main`). A bar costs nothing measurable
per item: an update adds to a counter and compares it (and a monotonic clock, read without a system call) with the
next line's due point; tqdm's own rate limiting applies in a terminal.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sized
from typing import IO, Any, Protocol, TypeVar

from probes.world import launched_main

__all__ = ["Bar", "bar", "iterate", "stage", "mode", "close_all", "MIN_GAP_S", "QUIET_S", "UNKNOWN_TOTAL_S"]

T = TypeVar("T")

#: Least seconds between two plain lines of one bar at tenths of its total (the start and final lines always show).
MIN_GAP_S = 2.0
#: Most seconds a running bar with a total stays silent in plain lines ...
QUIET_S = 60.0
#: ... and a bar without one (its only lines while it runs).
UNKNOWN_TOTAL_S = 10.0
#: tqdm's least seconds between two redraws of a terminal bar.
_MININTERVAL_S = 0.5

#: Units as plain lines spell them out.
_UNITS = {"sent": "sentences", "doc": "documents", "it": "steps", "unit": "units", "head": "heads", "step": "steps"}

#: One line at a time, whichever thread writes it (the extractor's bar moves on its own thread).
_LOCK = threading.Lock()
#: The plain-line bars still open (closed by :func:`close_all` before an error message).
_OPEN: weakref.WeakSet[_Lines] = weakref.WeakSet()


class Bar(Protocol):
    """What every bar offers (tqdm's names): ``n`` done so far, :meth:`update`, :meth:`set_postfix_str`,
    :meth:`close`, and use as a context manager (closed at the end)."""

    n: Any

    def update(self, n: float = 1) -> Any: ...

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> Any: ...


def _stream() -> IO[str]:
    return sys.stderr


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (IPython is looked up, never imported)."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def mode() -> str:
    """How progress shows now: ``"notebook"``, ``"terminal"`` (stderr is a terminal) or ``"lines"`` (a log,
    a pipe, captured output)."""
    if _in_notebook():
        return "notebook"
    return "terminal" if _is_terminal(_stream()) else "lines"


def _write(stream: IO[str], line: str) -> None:
    with _LOCK:
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not stop the run
            pass


def stage(message: str, progress: bool = True) -> None:
    """Say what is about to happen (one line on stderr; nothing when ``progress`` is False)."""
    if not progress or not launched_main():
        return
    stream = _stream()
    if mode() == "terminal":
        from tqdm.std import tqdm

        tqdm.write(message, file=stream)  # above any bar on the screen, which is redrawn below it
        return
    _write(stream, message)


def _count(n: float) -> str:
    return f"{int(n)}" if float(n).is_integer() else f"{n:.1f}"


class _Off:
    """The bar of a run with progress off: counts, shows nothing."""

    def __init__(self, total: float | None, desc: str, unit: str, initial: float = 0) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial

    def update(self, n: float = 1) -> None:
        self.n += n

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Lines(_Off):
    """A bar as plain lines (see the module's notes): a start line, tenths of the total, a line at least every
    :data:`QUIET_S` seconds (:data:`UNKNOWN_TOTAL_S` without a total), a final line."""

    def __init__(self, total: float | None, desc: str, unit: str, stream: IO[str], initial: float = 0) -> None:
        super().__init__(total, desc, unit, initial)
        self.stream = stream
        self.postfix = ""
        self.closed = False
        self._units = _UNITS.get(unit, unit if unit.endswith("s") else unit + "s")
        self._start = self._last = time.monotonic()
        self._next_n = self._step_after(initial)
        self._quiet = QUIET_S if total else UNKNOWN_TOTAL_S
        self._next_t = self._last + self._quiet
        _OPEN.add(self)
        self._line(self._done())

    def _step_after(self, n: float) -> float:
        """The next tenth of the total above ``n`` (infinite without a total)."""
        if not self.total:
            return float("inf")
        tenth = self.total / 10
        return (int(n // tenth) + 1) * tenth

    def _done(self) -> str:
        return (f"{_count(self.n)}/{_count(self.total)} {self._units}" if self.total
                else f"{_count(self.n)} {self._units}")

    def _line(self, text: str) -> None:
        _write(self.stream, f"{self.desc}: {text}" if self.desc else text)

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()  # the vDSO clock: no system call
        if now >= self._next_t or (self.n >= self._next_n and now - self._last >= MIN_GAP_S):
            self._last, self._next_t = now, now + self._quiet
            self._next_n = self._step_after(self.n)
            self._line(self._done() + (f", {self.postfix}" if self.postfix else ""))

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = s

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        _OPEN.discard(self)
        seconds = time.monotonic() - self._start
        how = "stopped" if self.total and self.n < self.total else "done"
        self._line(f"{self._done()}{f', {self.postfix}' if self.postfix else ''}, {how} in {seconds:.1f} s")


def _tqdm_class() -> Any:
    """tqdm's class for the place this runs in: the notebook widget where ipywidgets is installed, else the text
    bar (tqdm.auto would warn "IProgress not found" in a notebook without ipywidgets)."""
    from tqdm.std import tqdm

    if _in_notebook():
        try:
            import tqdm.notebook as notebook
        except ImportError:
            return tqdm
        return notebook.tqdm if getattr(notebook, "IProgress", None) is not None else tqdm
    return tqdm


def bar(desc: str, *, total: float | None = None, unit: str = "it", progress: bool = True, leave: bool = True,
        initial: float = 0) -> Bar:
    """A progress bar labelled ``desc`` counting ``unit`` s up to ``total`` (None: unknown), shown as the module's
    notes say; ``progress`` False: a bar that shows nothing. ``leave``: keep a terminal bar's last state on the
    screen once closed (plain lines always end with a final line). Close it (or use it in a ``with`` block)."""
    if not progress or not launched_main():
        return _Off(total, desc, unit, initial)
    stream = _stream()
    how = mode()
    if how == "lines":
        return _Lines(total, desc, unit, stream, initial)
    kind = _tqdm_class()
    if how == "notebook" and kind.__module__ == "tqdm.notebook":
        made: Bar = kind(total=total, desc=desc, unit=unit, leave=leave, initial=initial)
        return made
    made = kind(total=total, desc=desc, unit=unit, file=stream, leave=leave, initial=initial, dynamic_ncols=True,
                mininterval=_MININTERVAL_S)
    return made


def iterate(items: Iterable[T], desc: str, *, total: float | None = None, unit: str = "it", progress: bool = True,
            leave: bool = True) -> Iterator[T]:
    """``items`` with a bar (:func:`bar`; ``total`` default ``len(items)`` when it has one) that moves by one per
    item and closes when the items end or the iteration stops."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    with bar(desc, total=total, unit=unit, progress=progress, leave=leave) as shown:
        for item in items:
            yield item
            shown.update(1)


def close_all() -> None:
    """Close every open bar now (its final line, or its last state in a terminal), so that none finishes its line
    after an error message printed next."""
    for lines in list(_OPEN):
        lines.close()
    tqdm = sys.modules.get("tqdm.std")
    for shown in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        try:
            shown.close()
        except Exception:  # noqa: BLE001 - a bar that cannot be closed must not hide the error itself
            pass
