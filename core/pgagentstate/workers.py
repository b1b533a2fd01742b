"""What a worker loop needs from its runtime, for asyncio tasks and for threads alike: an event to stop
on, a wait that a stop cuts short, and starting and joining concurrent loops.

The inbox's workers (``AsyncInbox`` in aio.py) are written once against :class:`TaskRuntime`; the sync
store's ``Inbox``, generated from them, runs on :class:`ThreadRuntime`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any


class TaskRuntime:
    """Loops as asyncio tasks of the running event loop."""

    @staticmethod
    def event() -> asyncio.Event:
        return asyncio.Event()

    @staticmethod
    async def wait(event: asyncio.Event, seconds: float) -> bool:
        """Wait ``seconds`` or until ``event`` is set; True when it is set."""
        if event.is_set():
            return True
        try:
            await asyncio.wait_for(event.wait(), seconds)
        except TimeoutError:
            return False
        return True

    @staticmethod
    def start(fn: Callable[..., Awaitable[Any]], *args: Any) -> asyncio.Future[Any]:
        return asyncio.ensure_future(fn(*args))

    @staticmethod
    async def join(handles: Sequence[asyncio.Future[Any]]) -> list[Any]:
        """The loops' results; the first failure is raised once all have ended."""
        results = await asyncio.gather(*handles, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return list(results)


class _Thread(threading.Thread):
    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        super().__init__(name=f"pgagentstate-{getattr(fn, '__name__', 'worker')}", daemon=True)
        self._fn, self._args = fn, args
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._fn(*self._args)
        except BaseException as exc:  # handed to join(), which raises it in the caller's thread
            self.error = exc


class ThreadRuntime:
    """Loops as daemon threads (the sync store's pool is shared by threads)."""

    @staticmethod
    def event() -> threading.Event:
        return threading.Event()

    @staticmethod
    def wait(event: threading.Event, seconds: float) -> bool:
        return event.wait(seconds)

    @staticmethod
    def start(fn: Callable[..., Any], *args: Any) -> _Thread:
        thread = _Thread(fn, args)
        thread.start()
        return thread

    @staticmethod
    def join(handles: Sequence[_Thread]) -> list[Any]:
        for thread in handles:
            thread.join()
        for thread in handles:
            if thread.error is not None:
                raise thread.error
        return [thread.result for thread in handles]
