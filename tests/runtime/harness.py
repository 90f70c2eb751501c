"""Harness for the worker/producer conformance tests (conformance-cases.md §1, worker conventions).

* :func:`running` runs a :class:`store.Worker` in a daemon thread for the duration of a
  ``with`` block and stops it (bounded) on exit.
* :func:`eventually` polls a predicate in real time (the worker's store calls run in threads,
  so effects of a clock step land a few milliseconds later).
* :func:`settle` waits until the fake clock's set of pending timers stops changing: every
  worker loop and every handler that is waiting is then parked on the clock again.
* :func:`advance` moves the fake clock in one jump; :func:`walk` moves it in 500 ms steps and,
  inside each step, stops at every pending timer deadline in order (like a test clock that
  runs each sleeper at its own wake-up instant), settling after each stop.

The fake clock's timer heap is read (never modified) to find deadlines and quiescence.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from store import ExtendLocksResult, FakeClock, JobStoreError, Worker

T = TypeVar("T")

#: Real-time bound for anything that must happen.
EVENTUALLY_S = 5.0
#: Real-time window for "nothing happens" checks.
QUIET_S = 0.25
#: How long the timer set must stay unchanged to count as settled.
SETTLE_STABLE_S = 0.03
#: Upper bound of one settle.
SETTLE_MAX_S = 1.0


def eventually(
    predicate: Callable[[], T],
    timeout: float = EVENTUALLY_S,
    message: str = "",
    *,
    between: Callable[[], None] | None = None,
) -> T:
    """Poll ``predicate`` every 10 ms until it returns something truthy; fail after ``timeout``.

    ``between`` replaces the 10 ms pause between polls (e.g. to move a fake clock).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except AssertionError as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            pytest.fail(
                f"condition not met within {timeout} s: {message or predicate} (last: {last!r})"
            )
        if between is None:
            time.sleep(0.01)
        else:
            between()


def quiet(seconds: float = QUIET_S) -> None:
    """A short real-time wait before asserting that something did NOT happen."""
    time.sleep(seconds)


# ---------------------------------------------------------------- the fake clock


def _live_timers(clock: FakeClock) -> list[tuple[int, int]]:
    with clock._lock:
        return sorted((d, h) for d, h, _ in clock._timers if h in clock._live)


def settle(clock: Any, stable: float = SETTLE_STABLE_S, limit: float = SETTLE_MAX_S) -> None:
    """Wait (real time) until the fake clock's pending timers stay unchanged for ``stable`` s."""
    if not isinstance(clock, FakeClock):
        time.sleep(stable)
        return
    deadline = time.monotonic() + limit
    time.sleep(0.005)
    last = _live_timers(clock)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.01)
        now_timers = _live_timers(clock)
        if now_timers != last:
            last, since = now_timers, time.monotonic()
        elif time.monotonic() - since >= stable:
            return


def next_deadline(clock: FakeClock) -> int | None:
    timers = _live_timers(clock)
    return timers[0][0] if timers else None


def advance(clock: FakeClock, ms: int, *, precise: bool = False, presettle: bool = True) -> None:
    """Move the clock ``ms`` forward (one jump, or stopping at each timer deadline) and settle.

    It settles first too, so a timer the worker is about to register (say, a handler's
    timeout right after its claim became visible) is in place before time moves.
    """
    if presettle:
        settle(clock)
    target = clock() + int(ms)
    if precise:
        for _ in range(10_000):
            deadline = next_deadline(clock)
            if deadline is None or deadline > target:
                break
            clock.set(max(deadline, clock()))
            settle(clock)
    clock.set(target)
    settle(clock)


def walk(clock: FakeClock, total_ms: int, step_ms: int = 500) -> None:
    """Advance ``total_ms`` in ``step_ms`` steps, settling after each (conformance "walk")."""
    remaining = int(total_ms)
    settle(clock)
    while remaining > 0:
        step = min(step_ms, remaining)
        advance(clock, step, precise=True, presettle=False)
        remaining -= step


# ---------------------------------------------------------------- running a worker


class Running:
    """A worker running in a daemon thread (see :func:`running`)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="test-worker", daemon=True)

    def _main(self) -> None:
        try:
            self.worker.run(install_signal_handlers=False)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def start(self) -> None:
        self.thread.start()
        eventually(
            lambda: (
                getattr(self.worker, "_stopping", None) is not None or not self.thread.is_alive()
            ),
            message="worker started",
        )
        # Let the takers make their first claim and every loop park on the clock.
        settle(self.worker.clock)

    def _request_stop(self) -> None:
        try:
            self.worker.request_stop()
        except RuntimeError:
            # The worker's loop closed between our liveness check and the call.
            if self.thread.is_alive():
                raise

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(
        self, timeout: float = 10.0, drive: FakeClock | None = None, drive_step_ms: int = 500
    ) -> None:
        """request_stop() and join; optionally keep advancing ``drive`` while waiting."""
        deadline = time.monotonic() + timeout
        while self.thread.is_alive() and time.monotonic() < deadline:
            self._request_stop()
            if drive is not None:
                advance(drive, drive_step_ms, precise=True)
            self.thread.join(0.05)
        if self.thread.is_alive():
            pytest.fail(f"worker did not stop within {timeout} s")
        if self.error is not None:
            raise self.error


@contextlib.contextmanager
def running(worker: Worker, stop_timeout: float = 10.0) -> Iterator[Running]:
    """Run ``worker`` in a daemon thread; on exit request_stop() and join (fail if it hangs)."""
    handle = Running(worker)
    handle.start()
    try:
        yield handle
    except BaseException:
        # Don't mask the test's own failure: stop as best we can, driving a fake clock so
        # that handlers with clock-timed finalizers can finish.
        if handle.alive:
            clock = worker.clock if isinstance(worker.clock, FakeClock) else None
            with contextlib.suppress(BaseException):
                handle.stop(stop_timeout, drive=clock, drive_step_ms=60_000)
        raise
    if handle.alive:
        handle.stop(stop_timeout)


# ---------------------------------------------------------------- store wrappers


def state_of(store: Any, job_id: str) -> str | None:
    record = store.get_job(job_id)
    return None if record is None else record.state


def outcomes(store: Any, job_id: str) -> list[str]:
    return [a.outcome for a in store.get_attempts(job_id)]


CLAIM_METHODS = ("claim", "ack_and_claim", "ack_and_claim_many")


def fail_claims(store: Any, times: int) -> list[int]:
    """Make the store's claim calls raise JobStoreError the first ``times`` times.

    Every claiming entry point of the store (plain ``claim`` and the combined ack+claim
    calls a worker may use) shares one failure budget; returns the failure times (ms).
    """
    failures: list[int] = []

    def failing(original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if len(failures) < times:
                failures.append(store.now())
                raise JobStoreError("injected claim failure")
            return original(*args, **kwargs)

        return call

    for name in CLAIM_METHODS:
        original = getattr(store, name, None)
        if original is not None:
            setattr(store, name, failing(original))
    return failures


class HeartbeatSpy:
    """Wraps ``store.extend_locks``: records every call and optionally misbehaves.

    * ``steal``: a predicate on job ids; the first heartbeat that carries a matching lock
      really releases it (``store.release(id, token)``) before renewing, so the store reports
      it in ``lost`` ("stealing store").
    * ``unreachable_until``: while ``store.now()`` is below this (ms), every call raises
      JobStoreError ("unreachable heartbeat"); ``float('inf')`` = always.
    * ``also_cancel``: the stolen id is also reported in ``cancel_requested`` once.
    """

    def __init__(
        self,
        store: Any,
        *,
        steal: Callable[[str], bool] | None = None,
        unreachable_until: float | None = None,
        also_cancel: bool = False,
    ) -> None:
        self.store = store
        self.original = store.extend_locks
        self.steal = steal
        self.unreachable_until = unreachable_until
        self.also_cancel = also_cancel
        self.stolen: list[str] = []
        self.calls: list[tuple[int, list[str]]] = []
        self.failures: list[int] = []
        store.extend_locks = self

    def __call__(self, locks: Any, duration_ms: int) -> ExtendLocksResult:
        locks = [tuple(lock) for lock in locks]
        now = self.store.now()
        self.calls.append((now, [job_id for job_id, _ in locks]))
        if self.unreachable_until is not None and now < self.unreachable_until:
            self.failures.append(now)
            raise JobStoreError("injected: heartbeat cannot reach the store")
        stolen_now: list[str] = []
        if self.steal is not None and not self.stolen:
            for job_id, token in locks:
                if self.steal(job_id):
                    self.store.release(job_id, token)
                    self.stolen.append(job_id)
                    stolen_now.append(job_id)
                    break
        result = self.original(locks, duration_ms)
        if self.also_cancel and stolen_now:
            return ExtendLocksResult(result.lost, [*result.cancel_requested, *stolen_now])
        return result

    def renewed(self, job_id: str) -> list[int]:
        return [t for t, ids in self.calls if job_id in ids]


def log_messages(caplog: Any, logger: str = "store.worker") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def capture_worker_logs(caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="store.worker")
