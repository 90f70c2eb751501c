"""Clocks.  Every store operation reads its clock exactly once.

A clock is any callable returning epoch milliseconds.  The runtime also sleeps
"on the clock": with the wall clock that is a real sleep; with a
:class:`FakeClock` a sleeper wakes when a test advances the clock past its
deadline, so a worker can be driven through minutes of schedule in an instant.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

Clock = Callable[[], int]


def system_clock() -> int:
    """Wall-clock epoch milliseconds."""
    return time.time_ns() // 1_000_000


class FakeClock:
    """A controllable clock for tests: starts at ``start`` ms and only moves when told."""

    def __init__(self, start: int = 0) -> None:
        self._now = int(start)
        self._lock = threading.Lock()
        self._timers: list[tuple[int, int, Callable[[], None]]] = []
        self._ids = itertools.count()
        self._cancelled: set[int] = set()
        self._live: set[int] = set()

    def __call__(self) -> int:
        return self._now

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        with self._lock:
            self._now += int(ms)
        self._fire_due()
        return self._now

    def set(self, ms: int) -> None:
        with self._lock:
            self._now = int(ms)
        self._fire_due()

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> int:
        """Run ``callback`` (from the advancing thread) once the clock reaches ``deadline_ms``."""
        with self._lock:
            handle = next(self._ids)
            self._live.add(handle)
            heapq.heappush(self._timers, (int(deadline_ms), handle, callback))
        self._fire_due()
        return handle

    def cancel(self, handle: int) -> None:
        with self._lock:
            if handle in self._live:
                self._live.discard(handle)
                self._cancelled.add(handle)

    def _fire_due(self) -> None:
        due: list[Callable[[], None]] = []
        with self._lock:
            while self._timers and self._timers[0][0] <= self._now:
                _, handle, callback = heapq.heappop(self._timers)
                if handle in self._cancelled:
                    self._cancelled.discard(handle)
                else:
                    self._live.discard(handle)
                    due.append(callback)
        for callback in due:
            callback()

    def sleep(self, ms: float) -> None:
        """Block the calling thread until the clock moved ``ms`` forward."""
        event = threading.Event()
        self.call_at(self._now + int(ms), event.set)
        event.wait()


def _settle(future: asyncio.Future[None]) -> None:
    """Resolve ``future`` unless it is already done (cancelled, say); runs on its loop."""
    if not future.done():
        future.set_result(None)


async def sleep_ms(clock: Any, ms: float) -> None:
    """Sleep ``ms`` on ``clock`` inside asyncio (virtual time for a FakeClock)."""
    if ms <= 0:
        await asyncio.sleep(0)
        return
    call_at = getattr(clock, "call_at", None)
    if call_at is None:
        await asyncio.sleep(ms / 1000)
        return
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def fire() -> None:
        loop.call_soon_threadsafe(_settle, future)

    handle = call_at(clock() + int(ms), fire)
    try:
        await future
    finally:
        clock.cancel(handle)


def blocking_sleep_ms(clock: Any, ms: float) -> None:
    """Sleep ``ms`` on ``clock`` in the calling thread."""
    if ms <= 0:
        return
    sleeper = getattr(clock, "sleep", None)
    if sleeper is not None and getattr(clock, "call_at", None) is not None:
        sleeper(ms)
    else:
        time.sleep(ms / 1000)
