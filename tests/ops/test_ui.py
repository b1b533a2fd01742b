"""The timeline viewer: its JSON API, its guards, and the page rendered by a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import threading
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgagentstate import StateStore
from pgagentstate.ui.server import ViewerServer, make_server

from .helpers import DIALOGUE, seed_refund

CID = "conv_12345"


@pytest.fixture
def viewer(store: StateStore) -> Iterator[str]:
    seed_refund(store, CID, user_id="5511999999999", framework="core")
    store.create_conversation("other", framework="adk", status="failed")
    server: ViewerServer = make_server(store, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_api(viewer: str) -> None:
    status, headers, body = get(f"{viewer}/api/health")
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    health = json.loads(body)
    assert health["conversations"]["waiting_customer"] == 1 and health["conversations"]["failed"] == 1
    assert health["duplicate_calls_stopped"] == 1

    status, _, body = get(f"{viewer}/api/conversations?health=failed")
    assert [c["id"] for c in json.loads(body)] == ["other"]
    status, _, body = get(f"{viewer}/api/conversations")
    rows = {c["id"]: c for c in json.loads(body)}
    assert rows[CID]["health"] == "waiting_customer" and rows[CID]["calls"] == 2

    status, _, body = get(f"{viewer}/api/conversations/{CID}")
    tl = json.loads(body)
    assert status == 200 and [e["text"] for e in tl["events"]] == [t for _, t in DIALOGUE]
    assert len(tl["state_versions"]) == 4 and len(tl["steps"]) == 4 and len(tl["ledger"]) == 2

    assert get(f"{viewer}/api/conversations/missing")[0] == 404
    assert get(f"{viewer}/api/conversations?health=lost")[0] == 400
    assert get(f"{viewer}/nothing-here")[0] == 404


def test_page_and_static_files_are_served_with_a_strict_policy(viewer: str) -> None:
    status, headers, body = get(f"{viewer}/")
    assert status == 200 and b'<script src="/static/app.js"' in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        status, headers, body = get(f"{viewer}/static/{name}")
        assert status == 200 and headers["Content-Type"].startswith(kind) and body
    assert get(f"{viewer}/static/../server.py")[0] == 404


def test_a_foreign_host_name_is_refused_on_loopback(viewer: str) -> None:
    # DNS rebinding: a page on evil.example resolving to 127.0.0.1 must not read conversations.
    status, _, _ = get(f"{viewer}/api/health", headers={"Host": "evil.example"})
    assert status == 403
    port = viewer.rsplit(":", 1)[1]
    assert get(f"{viewer}/api/health", headers={"Host": f"localhost:{port}"})[0] == 200


def _png_colours(path: Path) -> int:
    """How many distinct pixel colours a PNG (8-bit RGB or RGBA, non-interlaced) has: decoded by hand."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = chunk
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour_type in (2, 6)
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    previous = bytearray(stride)
    colours: set[bytes] = set()
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = previous[i]
            c = previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        if y % 4 == 0:  # a sample of rows is plenty to tell a page from a blank one
            colours.update(bytes(line[x:x + 3]) for x in range(0, stride, bpp * 2))
        previous = line
    return len(colours)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_the_page_renders_the_demo_conversation_in_headless_chromium(viewer: str, tmp_path: Path) -> None:
    browser = _chromium()
    assert browser is not None
    url = f"{viewer}/?id={CID}"
    base = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,900", "--virtual-time-budget=10000",
    ]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    assert 'data-loaded="1"' in dom, dom[:2000]
    for _, text in DIALOGUE:                                     # the chat column
        assert text in dom, text
    assert dom.count('class="msg customer"') == 4 and dom.count('class="msg agent"') == 4
    for needle in ("process_refund", "send_confirmation", "txn_12345", "msg_67890", "meu@email.com",
                   "+email", "duplicates stopped"):
        assert needle in dom, needle
    assert 'data-id="other"' in dom                              # the list beside it

    shot = tmp_path / "page.png"
    subprocess.run([*base, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000
    # A rendered conversation has text, badges and bubbles: many colours. A blank or error page has a few.
    assert _png_colours(shot) > 50


def test_the_ui_command_serves_on_loopback(dsn: str, schema: str, store: StateStore) -> None:
    import os
    import sys

    seed_refund(store, CID)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgagentstate.cli", "ui", "--dsn", dsn, "--schema", schema, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("pgagentstate timeline viewer on http://127.0.0.1:"), line
        url = line.split()[4].rstrip("/")
        status, _, body = get(f"{url}/api/conversations/{CID}")
        assert status == 200 and json.loads(body)["conversation"]["id"] == CID
    finally:
        proc.terminate()
        proc.wait(timeout=30)
