"""A TCP proxy that injects network faults between a client and a server, switched while connections are open.

Modes (:meth:`FaultProxy.set`):

- ``pass``: bytes go through.
- ``blackhole``: connections stay open (new ones are accepted) but no byte passes either way; the bytes are
  held and delivered when the mode changes, like TCP retransmissions after a partition heals. Unlike a link
  taken down (``tools/netns.py``) the proxy's kernel still acknowledges what the client sends, so the
  client's TCP keepalives and ``tcp_user_timeout`` never fire: this is a hung middlebox (a stuck proxy or
  pooler), which only a deadline above TCP can bound (the store's ``deadline=``).
- ``reset``: every open connection is reset (RST to both sides) and new ones are reset as they arrive.
- ``latency``: each chunk is forwarded ``delay`` seconds after it arrived (each way: a round trip costs 2x). A
  delay line, not a wait per chunk: the chunks of one flight (a pipeline's messages, a result in several
  segments) travel together, as on a network; waiting per chunk in turn charged a 1 ms round trip 2-3 times.
- ``trickle``: at most ``rate`` bytes per second each way.

The demo's ``examples/refund/proxy.py`` is an HTTP load balancer (whole requests, no faults), so the tests have
this one. One thread per direction per connection; loopback only.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import threading
import time


class _Pair:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client, self.upstream = client, upstream
        self.killed = False
        self.ended = 0  # directions that have stopped; the second one closes both sockets
        self.lock = threading.Lock()


def _reset(sock: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), waking a thread blocked reading it first."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


class _DelayLine:
    """Sends each chunk to ``dst`` at its due time, in order, from a thread of its own."""

    def __init__(self, dst: socket.socket) -> None:
        self._dst = dst
        self._queue: queue.Queue[tuple[float, bytes] | None] = queue.Queue()
        threading.Thread(target=self._run, name="fault-proxy-delay", daemon=True).start()

    def put(self, due: float, data: bytes) -> None:
        self._queue.put((due, data))

    def drain(self) -> None:
        """Wait until every chunk put so far is sent (the mode changed: keep the stream's order)."""
        self._queue.join()

    def close(self) -> None:
        self._queue.put(None)

    def _run(self) -> None:
        broken = False
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                due, data = item
                time.sleep(max(0.0, due - time.monotonic()))
                if not broken:
                    try:
                        self._dst.sendall(data)
                    except OSError:
                        broken = True
            finally:
                self._queue.task_done()


class FaultProxy:
    """Listens on 127.0.0.1:``port`` (a free one) and forwards to ``target_host``:``target_port``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode = "pass"
        self.delay = 0.0
        self.rate = 0
        self._changed = threading.Condition()
        self._pairs: set[_Pair] = set()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = int(self._sock.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()

    def set(self, mode: str, *, delay: float = 0.0, rate: int = 0) -> None:
        if mode not in ("pass", "blackhole", "reset", "latency", "trickle"):
            raise ValueError(f"unknown mode {mode!r}")
        with self._changed:
            self.mode, self.delay, self.rate = mode, delay, rate
            pairs = list(self._pairs) if mode == "reset" else []
            self._changed.notify_all()
        for pair in pairs:
            self._kill(pair)

    def _kill(self, pair: _Pair) -> None:
        pair.killed = True
        with self._changed:
            self._pairs.discard(pair)
        _reset(pair.client)
        _reset(pair.upstream)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            if self.mode == "reset":
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            for sock in (client, upstream):  # as libpq's own socket: Nagle would hold a flight's second segment
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # for the first one's delayed ACK
            pair = _Pair(client, upstream)
            with self._changed:
                self._pairs.add(pair)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        line: _DelayLine | None = None
        try:
            while not pair.killed:
                data = src.recv(65536)
                arrived = time.monotonic()
                if not data or pair.killed:
                    break
                with self._changed:  # held back while blackholed: the peer sees silence
                    self._changed.wait_for(lambda: self.mode != "blackhole" or self._closed)
                    mode, delay, rate = self.mode, self.delay, self.rate
                if mode == "latency":
                    if line is None:
                        line = _DelayLine(dst)
                    line.put(arrived + delay, data)
                    continue
                if line is not None:
                    line.drain()
                if mode == "trickle" and rate > 0:
                    step = max(1, rate // 10)
                    for i in range(0, len(data), step):
                        dst.sendall(data[i : i + step])
                        time.sleep(step / rate)
                else:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            if line is not None:
                line.drain()
                line.close()
            if not pair.killed:
                with pair.lock:
                    pair.ended += 1
                    last = pair.ended == 2
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                if last:
                    with self._changed:
                        self._pairs.discard(pair)
                    for s in (src, dst):
                        s.close()

    def close(self) -> None:
        self._closed = True
        with self._changed:
            self._changed.notify_all()
            pairs = list(self._pairs)
        for pair in pairs:
            self._kill(pair)
        with contextlib.suppress(OSError):
            self._sock.close()
