"""Clocks.  Every store operation reads its clock exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

Clock = Callable[[], int]


def system_clock() -> int:
    """Wall-clock epoch milliseconds."""
    return time.time_ns() // 1_000_000


class FakeClock:
    """A controllable clock for tests: starts at ``start`` ms and only moves when told."""

    def __init__(self, start: int = 0) -> None:
        self._now = int(start)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        return self._now

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        with self._lock:
            self._now += int(ms)
            return self._now

    def set(self, ms: int) -> None:
        with self._lock:
            self._now = int(ms)
