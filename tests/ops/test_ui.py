"""The timeline viewer: its JSON API, its guards, and the page rendered by a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest

from pgagentstate import NewEvent, StateRef, StateStore
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
def test_the_page_renders_the_demo_conversation_in_headless_chromium(
    viewer: str, store: StateStore, tmp_path: Path
) -> None:
    store.accept("queued", {"text": "oi"}, key="d1")  # one inbox message waiting: the header shows the queue
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
    assert re.search(r'data-inbox="depth"[^>]*>inbox queue<b>1</b>', dom), dom[:3000]
    assert re.search(r'data-inbox="recoveries"[^>]*>recoveries<b>0</b>', dom)

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


# --- the first view and the timeline as a browser draws it -------------------------------------------

DEMO = "whatsapp:5511987654321"


def seed_demo(store: StateStore) -> None:
    """The demo's conversation as its webhook writes it: messages on a simulated clock ten minutes ahead
    with a delivery mark each (the channel bookkeeping), the refund in real time with long ledger keys, a
    worker that died holding the step's lease, and replies sent through the ledger."""
    channel = StateRef.conversation(DEMO, "channel")
    clock = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=10)
    store.create_conversation(DEMO, framework="core", app="refunds", user_id="5511987654321", channel="whatsapp")
    for i, (role, text) in enumerate(DIALOGUE[:6]):
        wamid = f"wamid.HBgMNTUxMTk4NzY1NDMyMRUCABIYFjNFQjBDNzE0{i:04d}"
        if role == "customer":
            store.append_events(DEMO, [NewEvent({"role": role, "text": text}, author=role, event_id=wamid,
                                                created_at=clock + timedelta(seconds=60 * i))],
                                state_patches=[(channel, {f"turn:{wamid}": {"status": "started"}})])
        if i == 4:  # the refund turn: a worker takes the step and dies; another takes over
            store.start_step(DEMO, "refund:12345", "process_refund", position=3, lease=0.001)
            time.sleep(0.01)
            store.run_step(DEMO, "refund:12345", "process_refund",
                           lambda: store.run_once(f"{DEMO}/refund:12345/payment", lambda key: {"transaction_id":
                                                  "txn_12345"}, api="payment", conversation_id=DEMO), position=3)
        if role == "agent":
            store.append_events(DEMO, [NewEvent({"role": role, "text": text}, author=role,
                                                created_at=clock + timedelta(seconds=60 * i + 1))],
                                state_patches=[(channel, {f"turn:{wamid}": {
                                    "status": "answered", "worker": "w2", "replies": [f"{text} {DIALOGUE[7][1]}"]}})])
            store.run_once(f"{DEMO}/out/{wamid}/0", lambda key: {"contacts": [{"input": DEMO[9:], "wa_id": DEMO[9:]}],
                                                                 "messages": [{"id": key}]},
                           api="whatsapp", conversation_id=DEMO)


def _headless(tmp_path: Path, *extra: str) -> list[str]:
    browser = _chromium()
    assert browser is not None
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}", *extra]


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_the_first_view_is_there_at_load(viewer: str, tmp_path: Path) -> None:
    # No virtual time budget: the DOM as it is when the load event fires, before any fetch could answer.
    dom = subprocess.run([*_headless(tmp_path, "--window-size=1280,900"), "--dump-dom", f"{viewer}/?id={CID}"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert 'data-loaded="1"' in dom, dom[:2000]
    assert 'data-id="other"' in dom and f'data-id="{CID}"' in dom   # the list
    assert dom.count('class="msg customer"') == 4                   # the conversation
    assert "process_refund" in dom and "Select a conversation" not in dom


LAYOUT = """(() => {
  const chat = [...document.querySelectorAll("#chat ol.chat > li")];
  const overflow = [];
  for (const box of document.querySelectorAll(".panel, .msg, .mark, #list li, .facts, .conv-head, .top")) {
    const outer = box.getBoundingClientRect();
    for (const inner of box.querySelectorAll("*")) {
      const r = inner.getBoundingClientRect();
      if (!r.width && !r.height) continue;
      if (r.right > outer.right + 1 || r.left < outer.left - 1) {
        overflow.push(`${inner.tagName}.${inner.className} in ${box.className}: ${r.right} > ${outer.right}`);
      }
    }
  }
  // Nothing reaches past the window, and no scroll container scrolls sideways (pre blocks may: on purpose).
  for (const node of document.querySelectorAll("body *")) {
    const r = node.getBoundingClientRect();
    if ((r.width || r.height) && r.right > window.innerWidth + 1) {
      overflow.push(`${node.tagName}.${node.className} ends at ${r.right} > ${window.innerWidth}`);
    }
    if (node.tagName !== "PRE" && node.scrollWidth > node.clientWidth + 1
        && ["auto", "scroll"].includes(getComputedStyle(node).overflowX)) {
      overflow.push(`${node.tagName}.${node.className} scrolls sideways`);
    }
  }
  const keys = [...document.querySelectorAll("#ledger .key")].map((k) => {
    const r = k.getBoundingClientRect();
    const line = parseFloat(getComputedStyle(k).lineHeight);
    return { text: k.textContent, width: r.width, lines: Math.round(r.height / line) };
  });
  return {
    chat: chat.map((li) => ({ cls: li.className, text: li.textContent, top: li.getBoundingClientRect().top })),
    overflow, keys, folded: document.querySelectorAll("#chat details.folded").length,
  };
})()"""


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt-get install -y chromium)")
@pytest.mark.parametrize(("width", "height"), [(1366, 900), (760, 1000)])
def test_the_demo_timeline_in_a_browser(store: StateStore, tmp_path: Path, width: int, height: int) -> None:
    from .browser import Browser

    seed_demo(store)
    server: ViewerServer = make_server(store, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/?id={quote(DEMO, safe='')}"
        with Browser(tmp_path / "profile") as browser:
            browser.open(url, width, height)
            page = browser.evaluate(LAYOUT)
            shot = tmp_path / f"timeline-{width}x{height}.png"
            browser.screenshot(shot)
    finally:
        server.shutdown()
        server.server_close()
    if os.environ.get("PGAGENTSTATE_UI_SHOTS"):  # keep them to look at: PGAGENTSTATE_UI_SHOTS=/some/dir
        shutil.copy(shot, Path(os.environ["PGAGENTSTATE_UI_SHOTS"]) / shot.name)
    assert _png_colours(shot) > 50

    chat = page["chat"]
    texts = [item["text"] for item in chat]

    def where(needle: str) -> int:
        return next(i for i, t in enumerate(texts) if needle in t)

    # Drawn in the order things happened: the message, then the refund it caused, then the answer.
    asked, refunded, answered = where(DIALOGUE[4][1]), where("call payment succeeded"), where(DIALOGUE[5][1])
    assert asked < refunded < answered, texts
    tops = [item["top"] for item in chat]
    assert tops == sorted(tops)
    # The worker that died holding the lease is an entry of its own.
    crash = chat[where("step refund:12345/process_refund retried")]
    assert "retry" in crash["cls"] and "never recorded an outcome" in crash["text"]
    # The six delivery marks are folded into their messages, not lines of the timeline.
    assert page["folded"] == 6
    assert not [item for item in chat if item["cls"].startswith("mark state")]
    # Nothing overflows its box; the long ledger keys wrap on a few lines, not one character per line.
    assert page["overflow"] == []
    assert len(page["keys"]) == 4 and all(k["lines"] <= 3 for k in page["keys"]), page["keys"]
