"""The chat page of `loom serve` in headless Chromium (Debian's chromium), driven through the
DevTools protocol: load /, type a message, press Send, watch the reply grow as it streams, and
save a screenshot (to $LOOM_SERVE_SCREENSHOT, default the test's temp dir)."""
import base64
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import LoomServer, free_port, model_path


class DevTools:
    """Just enough of a WebSocket client (RFC 6455, text frames) for Chrome's DevTools protocol."""

    def __init__(self, ws_url: str):
        assert ws_url.startswith("ws://")
        hostport, path = ws_url[5:].split("/", 1)
        host, port = hostport.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert b" 101 " in head.split(b"\r\n")[0], head
        self.next_id = 0

    def _send(self, text: str):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                               bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                               bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("devtools closed")
            buf += chunk
        return buf

    def _recv(self) -> str:
        msg = b""
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            if b0 & 0x0F in (0x1, 0x0):
                msg += payload
                if b0 & 0x80:
                    return msg.decode()

    def call(self, method, **params):
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            m = json.loads(self._recv())
            if m.get("id") == self.next_id:
                assert "error" not in m, m
                return m["result"]

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")


def test_chat_page_streams_a_reply_in_chromium(loom_bin, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "Debian's chromium is not installed (tools/setup.sh --dev installs it)"
    shot = pathlib.Path(os.environ.get("LOOM_SERVE_SCREENSHOT", tmp_path / "serve-chat.png"))
    with LoomServer(loom_bin, model_path("smollm2"), "--parallel", "2", "-c", "1024") as server:
        port = free_port()
        profile = tempfile.mkdtemp()
        browser = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                    f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
                                    "--window-size=900,640", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            ws = None
            for _ in range(300):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                        pages = [p for p in json.load(r) if p.get("type") == "page"]
                    if pages:
                        ws = pages[0]["webSocketDebuggerUrl"]
                        break
                except OSError:
                    pass
                time.sleep(0.1)
            assert ws, "chromium did not open its DevTools port"
            dt = DevTools(ws)
            dt.call("Page.enable")
            dt.call("Page.navigate", url=server.url + "/")
            for _ in range(200):
                if dt.js("document.readyState") == "complete" and dt.js("!!document.getElementById('send')"):
                    break
                time.sleep(0.05)
            assert dt.js("document.title") == "Loom chat"
            dt.js("document.getElementById('temp').value = '0'")
            dt.js("document.getElementById('maxtok').value = '60'")
            dt.js("document.getElementById('input').focus()")
            dt.call("Input.insertText", text="Write a short poem about the sea.")
            dt.js("document.getElementById('send').click()")
            seen = []  # the reply's text as it grows
            deadline = time.time() + 300
            while time.time() < deadline:
                state = dt.js("(() => { const m = document.querySelector('.msg.assistant');"
                              " return m ? [m.textContent, m.dataset.state || '', m.dataset.chunks || '0'] : null })()")
                if state:
                    if not seen or seen[-1] != state[0]:
                        seen.append(state[0])
                    if state[1] == "done":
                        break
                time.sleep(0.03)
            reply = seen[-1] if seen else ""
            assert dt.js("document.querySelectorAll('.msg.error').length") == 0
            assert dt.js("document.querySelector('.msg.user').textContent") == "Write a short poem about the sea."
            assert len(reply.split()) >= 5, reply
            chunks = int(dt.js("document.querySelector('.msg.assistant').dataset.chunks"))
            assert chunks >= 5  # it came in pieces ...
            partial = [s for s in seen if 0 < len(s) < len(reply)]
            assert len(partial) >= 2, seen  # ... and the page showed it growing
            png = base64.b64decode(dt.call("Page.captureScreenshot", format="png")["data"])
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
            shot.parent.mkdir(parents=True, exist_ok=True)
            shot.write_bytes(png)
            print(f"screenshot: {shot}")
        finally:
            browser.terminate()
            try:
                browser.wait(timeout=20)
            except subprocess.TimeoutExpired:
                browser.kill()
            shutil.rmtree(profile, ignore_errors=True)
        assert "POST /v1/chat/completions\" 200" in server.log() and " stream" in server.log()
