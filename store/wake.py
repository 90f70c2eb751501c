"""Wake-ups: an in-process waiter registry fed by local signals and Redis pub/sub.

The protocol (store contract §9): a monotonically increasing wake version; the
version of the last wake per queue and of the last broadcast.  ``claim`` hands
out the version read *before* its script ran as the wake token, and
``wait(queues, token)`` returns at once if a matching wake happened since, so
a wake racing a claim is never lost.  Other processes' wakes arrive on the
store's pub/sub channel; while the subscription is down callers fall back to
their poll timeout, and a resubscribe is treated as a broadcast (anything may
have been missed meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

logger = logging.getLogger(__name__)

BROADCAST = "*"
#: The first character of a wake message saying that a slot of a limited queue freed
#: (the queue name follows; lua/lib/limits.lua LIMITS.leave).
SLOT_FREED = "\0"


def _settle(future: asyncio.Future[None]) -> None:
    """Resolve ``future`` unless it is already done (cancelled, say); runs on its loop."""
    if not future.done():
        future.set_result(None)


class _Waiter:
    __slots__ = ("fire", "queues")

    def __init__(self, queues: frozenset[str], fire: Callable[[], None]) -> None:
        self.queues = queues
        self.fire = fire


class WakeHub:
    """Per-store wake state, shared by every thread using that store object."""

    def __init__(self, client: Any, channel: str) -> None:
        self._client = client
        self._channel = channel
        self._lock = threading.Lock()
        self._version = 0
        self._last: dict[str, int] = {}
        self._last_broadcast = 0
        self._waiters: set[_Waiter] = set()
        self._thread: threading.Thread | None = None
        self._subscribed = threading.Event()
        self._stop = threading.Event()
        self._pubsub: Any = None

    # ------------------------------------------------------------ local side

    @property
    def version(self) -> int:
        return self._version

    def signal(self, queue: str | None) -> None:
        """Record a wake for ``queue`` (None / '*' / '' = every queue) and fire its waiters."""
        with self._lock:
            self._version += 1
            if not queue or queue == BROADCAST:
                self._last_broadcast = self._version
                fired = list(self._waiters)
            else:
                self._last[queue] = self._version
                fired = [w for w in self._waiters if queue in w.queues]
            # Snapshot and remove before firing: a woken taker that re-parks at
            # once must not be fired again by this same signal.
            self._waiters.difference_update(fired)
        for waiter in fired:
            waiter.fire()

    def signal_one(self, queue: str) -> None:
        """A slot of the limited ``queue`` freed: fire one of its waiters (not all of them:
        one claim can take the slot, so every process wakes a single claimer)."""
        with self._lock:
            self._version += 1
            self._last[queue] = self._version
            fired = next((w for w in self._waiters if queue in w.queues), None)
            if fired is not None:
                self._waiters.discard(fired)
        if fired is not None:
            fired.fire()

    def _register(
        self, queues: Iterable[str], token: int, fire: Callable[[], None]
    ) -> _Waiter | None:
        """Park a waiter, or return None when a matching wake already happened after ``token``."""
        wanted = frozenset(queues)
        with self._lock:
            if self._last_broadcast > token or any(self._last.get(q, 0) > token for q in wanted):
                return None
            waiter = _Waiter(wanted, fire)
            self._waiters.add(waiter)
            return waiter

    def _unregister(self, waiter: _Waiter) -> None:
        with self._lock:
            self._waiters.discard(waiter)

    def wait(self, queues: Iterable[str], token: int, timeout_s: float | None) -> bool:
        """Block until a wake for one of ``queues`` newer than ``token``; False on timeout."""
        event = threading.Event()
        waiter = self._register(queues, token, event.set)
        if waiter is None:
            return True
        try:
            return event.wait(timeout_s)
        finally:
            self._unregister(waiter)

    async def wait_async(self, queues: Iterable[str], token: int) -> None:
        """The asyncio form of :meth:`wait` (no timeout: race it against your own timer)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def fire() -> None:
            loop.call_soon_threadsafe(_settle, future)

        waiter = self._register(queues, token, fire)
        if waiter is None:
            return
        try:
            await future
        finally:
            self._unregister(waiter)

    # ------------------------------------------------------------ pub/sub side

    def ensure_subscribed(self, timeout_s: float = 2.0) -> bool:
        """Start the subscriber thread once; wait (bounded) until it listens."""
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name=f"mq-wake {self._channel}", daemon=True
                    )
                    self._thread.start()
        if self._subscribed.is_set():
            return True
        return self._subscribed.wait(timeout_s)

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                self._pubsub = self._client.pubsub()
                self._pubsub.subscribe(self._channel)
                # Wait for the server's confirmation before declaring ourselves live.
                while not self._stop.is_set():
                    msg = self._pubsub.get_message(timeout=1.0)
                    if msg and msg.get("type") == "subscribe":
                        break
                self._subscribed.set()
                if not first:
                    self.signal(None)
                first = False
                while not self._stop.is_set():
                    msg = self._pubsub.get_message(timeout=1.0)
                    if msg and msg.get("type") == "message":
                        data = msg.get("data")
                        if isinstance(data, bytes):
                            data = data.decode("utf-8", "replace")
                        if data[:1] == SLOT_FREED:
                            self.signal_one(data[1:])
                        else:
                            self.signal(data)
            except Exception as exc:  # the subscriber must outlive any Redis hiccup
                self._subscribed.clear()
                if self._stop.is_set():
                    break
                logger.warning(
                    "wake subscription on %s lost (%s); retrying in 1 s", self._channel, exc
                )
                self._stop.wait(1.0)
            finally:
                self._close_pubsub()

    def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:  # closing a broken connection may itself fail
                logger.debug("closing the wake pubsub failed", exc_info=True)

    def close(self) -> None:
        self._stop.set()
        self._close_pubsub()  # unblocks the subscriber's read at once
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=3.0)
        self._thread = None
        self.signal(None)
