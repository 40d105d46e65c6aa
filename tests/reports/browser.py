"""A tiny headless-Chromium driver for tests: the DevTools protocol over ``--remote-debugging-pipe``.

No extra Python package: Chromium reads commands from file descriptor 3 and writes replies and
events to descriptor 4, as NUL-terminated JSON. This is enough to load a page, evaluate
JavaScript, collect console errors and uncaught exceptions, and take a screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

#: Where Debian's ``chromium`` package puts the browser; other names are tried after it.
CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
#: Flags for a quiet, offline headless browser in a container (as root: no sandbox).
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--remote-debugging-pipe")


def find_chromium() -> str | None:
    """The path of a Chromium executable, or None."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.errors: list[str] = []
        self._next_id = 0
        self._buffer = b""
        self._profile = tempfile.mkdtemp(prefix="probes-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # the browser's ends moved to numbers >= 10, then bash (dash takes one-digit numbers only) puts them at 3 and 4 and runs the browser
        ends = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_browser_r, from_browser_w)]
        for fd in (to_browser_r, from_browser_w):
            os.close(fd)
        wire = f'exec 3<&{ends[0]} 4>&{ends[1]} {ends[0]}<&- {ends[1]}>&- && exec "$0" "$@"'
        self.process = subprocess.Popen([shutil.which("bash") or "/bin/bash", "-c", wire, executable, *FLAGS, f"--user-data-dir={self._profile}",
                                         "about:blank"], pass_fds=ends, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in ends:
            os.close(fd)
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the browser (only the process this object started) and remove its profile."""
        try:
            os.close(self._to_browser)
            os.close(self._from_browser)
        except OSError:
            pass
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _note(self, message: dict[str, Any]) -> None:
        """Keep console errors and uncaught exceptions from an event."""
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(f"log: {params['entry'].get('text')}")

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are noted)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._note(reply)

    def open(self, path: Path) -> None:
        """Load a local file and wait for its load event."""
        self.call("Page.navigate", session=True, url=path.resolve().as_uri())
        deadline = time.monotonic() + self.timeout
        while True:
            event = self._read_message(deadline)
            self._note(event)
            if event.get("method") == "Page.loadEventFired":
                return

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """A PNG of the viewport."""
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path
