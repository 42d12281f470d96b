"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages ending
in NUL on file descriptors 3 and 4), so a test can type into a page and read its DOM with no driver package.

    with Chromium("/usr/bin/chromium") as browser:
        browser.open("file:///.../site/index.html")
        browser.evaluate("document.title")
        browser.search("grid_size")          # Material's search box: the number of results
"""
from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import tempfile
import time

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--window-size=1280,1000", "--remote-debugging-pipe")


class Chromium:
    def __init__(self, executable: str, timeout: float = 30.0):
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-")
        to_child, self._write = os.pipe()
        self._read, from_child = os.pipe()
        # above 4, so that the child's dup2 onto 3 and 4 always copies (and clears close-on-exec)
        child_in = fcntl.fcntl(to_child, fcntl.F_DUPFD_CLOEXEC, 10)
        child_out = fcntl.fcntl(from_child, fcntl.F_DUPFD_CLOEXEC, 10)

        def onto_3_and_4():
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self._proc = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self._profile.name}"],
                                      preexec_fn=onto_3_and_4, close_fds=False,  # noqa: PLW1509 - dup2 only
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (to_child, from_child, child_in, child_out):
            os.close(fd)
        self._buffer, self._id, self._session = b"", 0, None
        self.requests: list[str] = []  # the URL of every request the pages made, once record_requests() ran

    def __enter__(self) -> Chromium:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.send("Browser.close", session=False, timeout=5)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._write)
        os.close(self._read)
        self._profile.cleanup()

    def send(self, method: str, params: dict | None = None, session: bool = True, timeout: float | None = None):
        """One protocol command (to the page's session unless ``session=False``); its result."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session and self._session:
            message["sessionId"] = self._session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("method") == "Network.requestWillBeSent":  # an event: no id
                    self.requests.append(reply["params"]["request"]["url"])
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError(f"{method}: no answer from Chromium in {timeout or self.timeout} s")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError(f"{method}: Chromium closed its pipe (exit {self._proc.poll()})")
            self._buffer += chunk

    def record_requests(self) -> None:
        """From now on, keep the URL of every request of the page in :attr:`requests` (files, scripts, fonts,
        fetches and workers' loads alike)."""
        self.send("Network.enable")

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None):
        """The value of ``expression`` once it is truthy (polled every 0.1 s); TimeoutError if it never is."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"{expression!r} still false after {timeout or self.timeout} s")

    def open(self, url: str) -> None:
        """Load ``url`` and wait until the page and its scripts have run."""
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    def search(self, query: str) -> int:
        """Type ``query`` into Material's search box; the number of results it lists (0 when it says none)."""
        self.evaluate("document.querySelector('.md-search__input').focus()")
        self.send("Input.insertText", {"text": query})
        meta = self.wait_for("(m => m && /matching|No matching/.test(m.textContent) && m.textContent.trim())"
                             "(document.querySelector('.md-search-result__meta'))")
        return 0 if meta.startswith("No matching") else self.evaluate(
            "document.querySelectorAll('.md-search-result__item').length")
