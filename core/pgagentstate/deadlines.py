"""Per-call deadlines on the wire: a transaction whose answer does not come in time has its connection cut.

A hung middlebox (a proxy or pooler that keeps the connection open and forwards nothing) is invisible to
TCP: its kernel acknowledges every byte, so neither ``tcp_user_timeout`` nor keepalives fire, and a call
waits for as long as the middlebox hangs. Cancelling the wait does not help either: psycopg then sends a
cancel request (itself stuck, 5 s) and waits for the query to end (5 s more). So one watchdog thread per
process shuts the socket of a connection whose transaction is overdue down: libpq reads the end of the
stream at once, the call fails with a ``ConnectionLost`` the store reports as
:class:`~pgagentstate.errors.DeadlineExceeded`, the transaction was never committed by this client (the
server rolls back an open transaction of a connection that went away) and the pool replaces the connection.

One thread serves both stores (asyncio and threads): arming and disarming are a dict insert and removal
under a lock; the thread looks every ``TICK`` seconds and ends after ``IDLE_EXIT`` seconds with nothing armed.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from typing import Any

#: Seconds between the watchdog's looks at the armed deadlines: a deadline fires up to this much late.
TICK = 0.1
#: Seconds with nothing armed after which the thread ends (a process that stopped using stores has none).
IDLE_EXIT = 10.0


class _Watchdog:
    def __init__(self) -> None:
        self._armed: dict[int, tuple[float, Any]] = {}
        self._fired: set[int] = set()
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def arm(self, conn: Any, seconds: float) -> int:
        """Cut ``conn`` (a psycopg connection) if :meth:`disarm` is not called within ``seconds``."""
        token = next(self._ids)
        with self._lock:
            self._armed[token] = (time.monotonic() + seconds, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="pgagentstate-deadlines", daemon=True)
                self._thread.start()
        return token

    def disarm(self, token: int) -> bool:
        """Stop watching; True when the deadline had passed and the connection was cut."""
        with self._lock:
            if self._armed.pop(token, None) is None and token in self._fired:
                self._fired.discard(token)
                return True
        return False

    def _watch(self) -> None:
        # Polls rather than being woken: a wake-up per call (a Condition) cost 15 us per transaction.
        idle_since = time.monotonic()
        while True:
            time.sleep(TICK)
            with self._lock:
                now = time.monotonic()
                for token, (when, conn) in list(self._armed.items()):
                    if when <= now:
                        del self._armed[token]
                        self._fired.add(token)
                        _cut(conn)
                if self._armed:
                    idle_since = now
                elif now - idle_since > IDLE_EXIT:
                    self._thread = None  # the next arm starts another
                    return


def _cut(conn: Any) -> None:
    """Shut the connection's socket down (both ways): a wait on it returns at once with end-of-stream.
    The descriptor stays the connection's own (a duplicate is shut down and closed), so nothing else that
    might reuse its number is touched."""
    with contextlib.suppress(Exception):
        fd = conn.pgconn.socket
        dup = socket.socket(fileno=socket.dup(fd))
        try:
            dup.shutdown(socket.SHUT_RDWR)
        finally:
            dup.close()


watchdog = _Watchdog()
