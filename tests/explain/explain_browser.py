"""Headless Chromium for the explain page tests: `--dump-dom` and a Chrome DevTools Protocol
session over `--remote-debugging-pipe` (fd 3 in, fd 4 out, NUL-terminated JSON messages: no
port, no websocket library). Every wait is bounded by a deadline."""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1200,900"]
TIMEOUT = 60.0


def available() -> bool:
    return Path(CHROMIUM).exists()


def dump_dom(url: str) -> str:
    """The DOM after the page's scripts ran (Chromium waits for the load event)."""
    with tempfile.TemporaryDirectory(prefix="hicache-chromium-") as ud:
        out = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={ud}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=TIMEOUT)
    if out.returncode != 0:
        raise RuntimeError(f"chromium --dump-dom exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout


class CDPError(RuntimeError):
    pass


class Browser:
    """One headless Chromium driven over the DevTools pipe; use as a context manager."""

    def __init__(self) -> None:
        self.ud = tempfile.mkdtemp(prefix="hicache-chromium-")
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        # the child reads commands on fd 3 and writes replies on fd 4
        cmd = ["bash", "-c", f'exec "$@" 3<&{to_child_r} 4>&{from_child_w}', "chromium", CHROMIUM, *FLAGS,
               f"--user-data-dir={self.ud}", "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(cmd, pass_fds=(to_child_r, from_child_w),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None

    # ------------------------------------------------------------ protocol
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError("timed out waiting for Chromium")
            ready, _, _ = select.select([self.from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.from_child, 1 << 16)
            if not chunk:
                raise CDPError("Chromium closed the DevTools pipe")
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: bool = True, timeout: float = TIMEOUT):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise CDPError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read_message(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    # ------------------------------------------------------------ page helpers
    def open(self, url: str) -> None:
        """Navigate the page (attached on first use) to `url` and wait for its load event;
        one Browser may open many pages in turn."""
        if self.session is None:
            targets = self.call("Target.getTargets", session=False)["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            self.session = self.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                     session=False)["sessionId"]
            self.call("Page.enable")
        # a load event of an earlier page must not satisfy the wait for this one
        self.events = [m for m in self.events if m.get("method") != "Page.loadEventFired"]
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expr: str):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise CDPError(f"page script failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                   "clickCount": 1})

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.call("Browser.close", session=False, timeout=10)
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        for fd in (self.to_child, self.from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.ud, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
