"""First checkpoints being stored, by thread, so that a run's writes can wait for the one that revives a
deleted thread.

LangGraph saves a run's writes in the background (durability ``"async"``, its default): they can reach the
database before the run's first checkpoint. On a thread ``delete_thread`` removed, the core drops writes
that arrive while the thread is gone, as late writes of the deleted run must not recreate it. A new run's
writes, dropped that way, wait for the first checkpoint this saver is storing for the thread, then are
stored again. (Before: 22 of 60 runs of a thread deleted between runs lost their writes, an interrupt
among them.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager


class NewChains:
    """Futures of the parentless checkpoints being stored, by thread, each done once its put returns or
    fails, and a count of such puts started and finished. The lock guards a dict for microseconds, never
    I/O."""

    def __init__(self) -> None:
        self._storing: dict[str, set[Future[None]]] = {}
        self._changes = 0
        self._lock = threading.Lock()

    @contextmanager
    def storing(self, thread_id: str, parent_id: str | None) -> Iterator[None]:
        if parent_id is not None:
            yield
            return
        done: Future[None] = Future()
        with self._lock:
            self._storing.setdefault(thread_id, set()).add(done)
            self._changes += 1
        try:
            yield
        finally:
            with self._lock:
                pending = self._storing[thread_id]
                pending.discard(done)
                if not pending:
                    del self._storing[thread_id]
                self._changes += 1
            done.set_result(None)

    def mark(self) -> int:
        """Taken before storing writes, for :meth:`revivals` if they are dropped."""
        return self._changes

    def revivals(self, thread_id: str, mark: int) -> list[Future[None]] | None:
        """After writes for ``thread_id`` were dropped: None if no first checkpoint can have revived the
        thread since ``mark``, else those still being stored, to wait for before storing the writes again.
        A first checkpoint of another thread started or finished since ``mark`` makes it a retry for
        nothing; a dropped write is rare (a thread deleted while a run of it was in flight or starting)."""
        with self._lock:
            pending = list(self._storing.get(thread_id, ()))
            return pending if pending or self._changes != mark else None
