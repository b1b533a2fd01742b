"""A headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL on fds 3 and 4), with the standard library only: size the window, load a page,
evaluate JavaScript in it, take a screenshot."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _high(*fds: int) -> tuple[int, ...]:
    """The fds moved to 10 and above: the shell puts them on 3 and 4, which they must not be already (under
    pytest's capture a pipe can get fd 3 or 4, and ``3<&4 4>&3`` would then wire the pipe to itself)."""
    out = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in fds)
    for fd in fds:
        os.close(fd)
    return out


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, profile: Path, *, timeout: float = 60.0) -> None:
        binary = chromium()
        assert binary is not None
        self.log = profile.parent / "chromium.log"
        self._log_file = self.log.open("w")
        self.timeout = timeout
        to_browser_r, self._out = _high(*os.pipe())
        self._in, from_browser_w = _high(*os.pipe())
        args = [
            binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
            f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank",
        ]
        # Chromium reads commands on fd 3 and writes on fd 4: bash puts the pipes there (dash takes
        # single-digit fds only).
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w}', "bash", *args],
            pass_fds=(to_browser_r, from_browser_w), stdout=subprocess.DEVNULL, stderr=self._log_file,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, AssertionError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._out)
        os.close(self._in)
        self._log_file.close()

    def tail(self) -> str:
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if "dbus" not in line]
        return "\n".join(lines[-15:])

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buffer:
            assert time.monotonic() < deadline, "no answer from chromium"
            chunk = os.read(self._in, 1 << 16)
            assert chunk, f"chromium closed the pipe: {self.tail()}"
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        found: dict[str, Any] = json.loads(message)
        return found

    def call(self, method: str, *, session: bool = False, **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        try:
            os.write(self._out, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise AssertionError(f"chromium has gone: {self.tail()}") from None
        while True:
            answer = self._read()
            if answer.get("id") == self._next:
                assert "error" not in answer, (method, answer["error"])
                result: dict[str, Any] = answer.get("result", {})
                return result
            self.events.append(answer)

    def wait_for(self, event: str) -> None:
        while not any(e.get("method") == event for e in self.events):
            self.events.append(self._read())
        self.events = [e for e in self.events if e.get("method") != event]

    def open(self, url: str, width: int, height: int) -> None:
        """Load ``url`` in a window of ``width`` x ``height`` CSS pixels and wait for its load event."""
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        found = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                          awaitPromise=True)
        assert "exceptionDetails" not in found, found["exceptionDetails"]
        return found["result"].get("value")

    def screenshot(self, path: Path, *, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", session=True, **params)["data"]
        path.write_bytes(base64.b64decode(data))
