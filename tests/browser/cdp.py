"""A small client of Chromium's DevTools protocol: load a page, collect its console errors, screenshot it.

Chromium is Debian's package (``make browser`` installs it); the protocol goes over one websocket
(``websockets``' synchronous client).  Every console error, uncaught exception and failed load (a 404 of
a script) is collected, so a test can fail on any of them.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from PIL import Image  # matplotlib's own dependency
from websockets.sync.client import connect

LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise RuntimeError("no chromium on PATH: `make browser` installs Debian's package")
    return found


class Browser:
    """One headless Chromium process (stopped by its PID on close) and one page in it."""

    def __init__(self, width: int = 1280, height: int = 900) -> None:
        self._profile = tempfile.mkdtemp(prefix="shopsimrl-chromium-")
        self.process = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", f"--user-data-dir={self._profile}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = self._listening()
        port = int(url.split(":")[2].split("/")[0])
        pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(p for p in pages if p.get("type") == "page")
        self._stack = ExitStack()
        self._socket = self._stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=64 << 20,
                                                         open_timeout=10))
        self._id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _listening(self) -> str:
        assert self.process.stderr is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            found = LISTENING.search(line)
            if found:
                return found.group(1)
            if not line and self.process.poll() is not None:
                break
        raise RuntimeError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self._socket.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv(timeout=30))
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def load(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 30
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load")
            self.events.append(json.loads(self._socket.recv(timeout=30)))

    def value(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.value(expression)
            if found:
                return found
            time.sleep(0.1)
        raise TimeoutError(f"never true: {expression}")

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads seen since the last :meth:`load`."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append("console: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
            elif method == "Runtime.exceptionThrown":
                found.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                found.append(f"log: {entry.get('text')} {entry.get('url', '')}")
        return found

    def screenshot(self, path: Path) -> Path:
        """The page as a PNG of at most 128 colours (small enough to keep in the docs)."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(io.BytesIO(base64.b64decode(data))) as picture:
            picture.convert("RGB").quantize(colors=128).save(path, optimize=True)
        return path

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, 9)
                self.process.wait(timeout=10)
            shutil.rmtree(self._profile, ignore_errors=True)
