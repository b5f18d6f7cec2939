"""Headless Chromium driven through the DevTools protocol over a pipe.

Chromium's --remote-debugging-pipe reads protocol messages on fd 3 and writes them on fd 4,
each ended by a NUL byte: no websocket client, nothing downloaded, only Debian's chromium.
"""

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page, attached in flat mode."""

    def __init__(self, webgpu: bool, chromium: str | None = None,
                 extra_flags: tuple[str, ...] = ()):
        """`extra_flags`: more of Chromium's command-line flags (a benchmark's V8 flags)."""
        chromium = chromium or shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            raise BrowserError(
                "chromium is not installed; install Debian's package: apt-get install chromium"
            )
        self.profile = tempfile.mkdtemp(prefix="headroom-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        flags = [
            "--headless=new",
            "--remote-debugging-pipe",
            "--no-sandbox",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            f"--user-data-dir={self.profile}",
            # Room for the page's whole window: what is scrolled out of view is not painted.
            "--window-size=1280,1200",
        ]
        # SwiftShader's Vulkan is the adapter a headless Chromium without a GPU offers.
        flags += ["--enable-unsafe-webgpu"] if webgpu else ["--disable-webgpu"]
        # The page's window draws with WebGL, which without a GPU is SwiftShader too: Chromium
        # still falls back to it on its own, with a warning that it will stop doing so.
        flags += ["--enable-unsafe-swiftshader", *extra_flags]

        def pipes_on_3_and_4():
            # Out of the way first: either end may already sit on 3 or 4.
            read_end = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            write_end = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.process = subprocess.Popen(
            [chromium, *flags, "about:blank"],
            preexec_fn=pipes_on_3_and_4,
            pass_fds=(3, 4),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call(
            "Target.attachToTarget", {"targetId": target, "flatten": True}
        )["sessionId"]
        for domain in ("Runtime", "Page", "Log"):
            self.call(f"{domain}.enable", session=self.session)
        # The page's workers too: the engine runs in one, and its panics go to its console.
        self.call(
            "Target.setAutoAttach",
            {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True},
            session=self.session,
        )

    def _send(self, message: dict) -> None:
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")

    def _receive(self, deadline: float) -> dict | None:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError("chromium closed its DevTools pipe (it exited)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._send(message)
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply is None:
                raise BrowserError(f"no reply to {method} in {timeout} s")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def next_event(self, timeout: float) -> dict | None:
        event = self.events.pop(0) if self.events else self._receive(time.monotonic() + timeout)
        if event and event.get("method") == "Target.attachedToTarget":
            worker = event["params"]["sessionId"]
            self.worker_attached(worker)
            self.call("Runtime.runIfWaitingForDebugger", session=worker)
        return event

    def worker_attached(self, worker: str) -> None:
        """What a worker's session enables before the worker runs its first line."""
        for domain in ("Runtime", "Log"):
            self.call(f"{domain}.enable", session=worker)

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", {"url": url}, session=self.session)

    def evaluate(self, expression: str):
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        return result.get("result", {}).get("value")

    def wait_loaded(self, timeout: float = 30) -> None:
        """Waits for the page's scripts to have run (its module scripts run before `load`)."""
        deadline = time.monotonic() + timeout
        while self.evaluate("document.readyState") != "complete":
            if time.monotonic() > deadline:
                raise BrowserError(f"the page did not load in {timeout} s")
            time.sleep(0.1)

    def pick_folder(self, selector: str, folder: str) -> None:
        """Picks `folder` in the page's folder input (`webkitdirectory`), as a user does in
        the browser's dialog: the files arrive with paths from the folder's name down."""
        self.pick_files(selector, [folder])

    def pick_files(self, selector: str, paths: list[str]) -> None:
        """Picks `paths` in the page's file input `selector`, as a user does in the browser's
        dialog."""
        self.call("DOM.enable", session=self.session)
        root = self.call("DOM.getDocument", session=self.session)["root"]["nodeId"]
        node = self.call("DOM.querySelector", {"nodeId": root, "selector": selector},
                         session=self.session)["nodeId"]
        if not node:
            raise BrowserError(f"the page has no {selector}")
        self.call("DOM.setFileInputFiles", {"nodeId": node, "files": paths},
                  session=self.session)

    def click_at(self, x: float, y: float) -> None:
        """A left click at (x, y), CSS pixels of the page, as a mouse makes it."""
        for kind, buttons in (("mouseMoved", 0), ("mousePressed", 1), ("mouseReleased", 0)):
            self.call("Input.dispatchMouseEvent",
                      {"type": kind, "x": x, "y": y, "button": "left", "buttons": buttons,
                       "clickCount": 0 if kind == "mouseMoved" else 1},
                      session=self.session)

    def drop_folder(self, folder: str, x: int = 100, y: int = 100) -> None:
        """Drags `folder` onto the page at (x, y) and drops it, as from a file manager."""
        data = {"items": [], "files": [folder], "dragOperationsMask": 1}
        for kind in ("dragEnter", "dragOver", "drop"):
            self.call("Input.dispatchDragEvent", {"type": kind, "x": x, "y": y, "data": data},
                      session=self.session)

    def screenshot(self, path: str) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=self.session)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data["data"]))

    def close(self) -> None:
        try:
            self._send({"id": 0, "method": "Browser.close"})
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)


def _console_text(event: dict) -> str | None:
    """A console message's text, the browser's own log entries among them; raises on an
    uncaught exception; None for other events."""
    method = event.get("method")
    if method == "Runtime.consoleAPICalled":
        return " ".join(str(a.get("value", a.get("description", ""))) for a in
                        event["params"]["args"])
    if method == "Log.entryAdded":
        # The browser's own messages (WebGPU's shader errors among them), not the page's.
        entry = event["params"]["entry"]
        return f"[{entry['source']} {entry['level']}] {entry['text']}"
    if method == "Runtime.exceptionThrown":
        details = event["params"]["exceptionDetails"]
        raise BrowserError(
            "the page threw: "
            + details.get("exception", {}).get("description", details.get("text", ""))
        )
    return None


def console_lines(browser: Browser, stop, timeout: float):
    """Console messages of the page as text, until `stop(line)` is true; raises on an
    uncaught exception or when `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    lines = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BrowserError(
                f"the page did not finish in {timeout:.0f} s; its last lines: {lines[-5:]}"
            )
        event = browser.next_event(left)
        text = event and _console_text(event)
        if text is None:
            continue
        lines.append(text)
        yield text
        if stop(text):
            return


def console_lines_for(browser: Browser, seconds: float) -> list[str]:
    """The console messages of the next `seconds` seconds."""
    deadline = time.monotonic() + seconds
    lines = []
    while (left := deadline - time.monotonic()) > 0:
        event = browser.next_event(left)
        text = event and _console_text(event)
        if text is not None:
            lines.append(text)
    return lines
