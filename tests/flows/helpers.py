"""Helpers of the flow / outbox tests (conformance-cases.md §1 "Flow helpers", plus a worker runner).

Store level: :func:`env`, :func:`spec`, :func:`fanout_parent`, :func:`report`, :func:`record1`,
:func:`flow_state` are the conformance helpers ENV, SPEC, FANOUT_PARENT, REPORT, RECORD1 and FLOW.

Runtime level: :class:`WorkerThread` runs a :class:`store.Worker` in a daemon thread
(``worker.run(install_signal_handlers=False)``), stopped with ``request_stop()`` and a bounded
join; :func:`eventually` polls in real time; :func:`drive` polls while moving a fake clock
forward, so timer-driven loops (relay fallback, flow sweeper, stall recovery) get their turns.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from store import (
    MISSING,
    ChildReportResult,
    Claimed,
    EnqueueRequest,
    FakeClock,
    FanOut,
    FlowChildReport,
    FlowChildSpec,
    FlowState,
    ParentEnvelope,
    RedisJobStore,
    Worker,
)
from tests.runtime.harness import eventually as _eventually

T = TypeVar("T")

#: The child store key of SPEC (conformance-cases.md §1).
CHILD_STORE_KEY = "effect-mq/JobStore/children"
#: The parent store key of ENV.
PARENT_STORE_KEY = "main"


# ---------------------------------------------------------------- store-level helpers


def env(
    flow_id: str,
    key: str,
    *,
    flow_name: str = "test-flow",
    parent_store_key: str = PARENT_STORE_KEY,
    depth: int = 1,
) -> ParentEnvelope:
    """ENV(flow_id, key)."""
    return ParentEnvelope(flow_name, flow_id, key, parent_store_key, depth)


def child_request(flow_id: str, key: str, **overrides: Any) -> EnqueueRequest:
    """The request inside SPEC(flow_id, key): BASE with the deterministic id and the envelope."""
    fields: dict[str, Any] = {
        "id": f"flow/{PARENT_STORE_KEY}/{flow_id}/{key}",
        "name": "ChildJob",
        "queue": "default",
        "payload": {"n": 1},
        "parent": env(flow_id, key),
    }
    fields.update(overrides)
    return EnqueueRequest(**fields)


def spec(
    flow_id: str, key: str, *, store_key: str = CHILD_STORE_KEY, **overrides: Any
) -> FlowChildSpec:
    """SPEC(flow_id, key)."""
    return FlowChildSpec(
        child_key=key, store_key=store_key, request=child_request(flow_id, key, **overrides)
    )


def fanout_parent(
    store: RedisJobStore,
    children: Sequence[str] = ("a", "b"),
    fail_fast: bool = False,
    *,
    token: str = "t-parent",
    store_key: str = CHILD_STORE_KEY,
    **request: Any,
) -> str:
    """FANOUT_PARENT: enqueue a parent, claim it (asserting it is that job), ack FAN_OUT."""
    fields: dict[str, Any] = {"name": "TestJob", "queue": "default", "payload": {"parent": True}}
    fields.update(request)
    parent_id = store.enqueue(EnqueueRequest(**fields)).id
    claimed = store.claim(
        queue=fields["queue"], names=[fields["name"]], token=token, lock_duration_ms=30000
    )
    assert isinstance(claimed, Claimed), f"expected to claim the parent, got {claimed!r}"
    assert claimed.job.id == parent_id
    store.ack(
        parent_id,
        token,
        FanOut(fail_fast, [spec(parent_id, k, store_key=store_key) for k in children]),
    )
    return parent_id


_DEFAULT = object()


def report(
    flow_id: str,
    key: str,
    outcome: str,
    exit: Any = _DEFAULT,
    failed_reason: str | None = None,
) -> FlowChildReport:
    """REPORT(flow_id, key, outcome, exit={"ok": outcome == "completed"}, failed_reason=None)."""
    if exit is _DEFAULT:
        exit = {"ok": outcome == "completed"}
    return FlowChildReport(
        flow_id=flow_id, child_key=key, outcome=outcome, exit=exit, failed_reason=failed_reason
    )


def record1(store: RedisJobStore, rep: FlowChildReport) -> ChildReportResult:
    """RECORD1(report) = record_child_results([report])[0]."""
    results = store.record_child_results([rep])
    assert len(results) == 1
    return results[0]


def pair(result: ChildReportResult) -> tuple[bool, bool]:
    """A report result as ``(applied, parent_settled)`` ({T,F} in the cases)."""
    return (result.applied, result.parent_settled)


def flow_state(**overrides: Any) -> FlowState:
    """FLOW(...) = {fail_fast False, pending 0, completed 0, failed 0, cancelled 0} + overrides."""
    return FlowState(**overrides)


def rows(store: RedisJobStore, flow_id: str, page: int = 1000) -> list[Any]:
    """Every dependency row of a flow (all pages)."""
    out: list[Any] = []
    cursor: str | None = None
    while True:
        result = store.list_child_results(flow_id, cursor=cursor, limit=page)
        out.extend(result.items)
        if result.cursor is None:
            return out
        cursor = result.cursor


def row_map(store: RedisJobStore, flow_id: str) -> dict[str, Any]:
    return {r.child_key: r for r in rows(store, flow_id)}


def outcomes(store: RedisJobStore, job_id: str) -> list[str]:
    return [a.outcome for a in store.get_attempts(job_id)]


def state_of(store: RedisJobStore, job_id: str) -> str | None:
    record = store.get_job(job_id)
    return None if record is None else record.state


def cascade_keys(work: Any) -> list[tuple[str, str]]:
    """``(flow_id, child_key)`` of every cascade row of a FlowSweepWork."""
    return [(c.flow_id, child.child_key) for c in work.cascade for child in c.children]


def exit_of(value: Any) -> Any:
    return None if value is MISSING else value


# ---------------------------------------------------------------- real-time waiting


def eventually(predicate: Callable[[], T], timeout: float = 10.0, message: str = "") -> T:
    """Poll ``predicate`` every 10 ms until it is truthy; fail the test after ``timeout`` s."""
    return _eventually(predicate, timeout, message)


def drive(
    clock: FakeClock,
    predicate: Callable[[], T],
    *,
    step_ms: int = 500,
    timeout: float = 20.0,
    pause: float = 0.02,
    message: str = "",
) -> T:
    """Like :func:`eventually`, but advance the fake clock ``step_ms`` between polls."""

    def step() -> None:
        time.sleep(pause)
        clock.advance(step_ms)

    return _eventually(predicate, timeout, message, between=step)


def walk(clock: FakeClock, total_ms: int, step_ms: int = 500, pause: float = 0.02) -> None:
    """Advance the fake clock ``total_ms`` in steps, giving the workers real time after each."""
    remaining = total_ms
    while remaining > 0:
        step = min(step_ms, remaining)
        clock.advance(step)
        remaining -= step
        time.sleep(pause)


# ---------------------------------------------------------------- workers in threads


class WorkerThread:
    """A worker running ``worker.run(install_signal_handlers=False)`` in a daemon thread."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(
            target=self._main, name=f"flow-test-{worker.worker_id}", daemon=True
        )

    def _main(self) -> None:
        try:
            self.worker.run(install_signal_handlers=False)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def start(self) -> WorkerThread:
        self.thread.start()
        eventually(
            lambda: self.worker._loop is not None or not self.thread.is_alive(),
            5.0,
            "worker started",
        )
        return self

    def stop(self, timeout: float = 10.0, clock: FakeClock | None = None) -> None:
        deadline = time.monotonic() + timeout
        while self.thread.is_alive() and time.monotonic() < deadline:
            self.worker.request_stop()
            self.thread.join(0.05)
            if clock is not None and self.thread.is_alive():
                clock.advance(1000)  # lets clock-timed waits inside handlers end
        assert not self.thread.is_alive(), (
            f"worker {self.worker.worker_id} did not stop within {timeout} s"
        )
        if self.error is not None:
            raise self.error


@contextlib.contextmanager
def running(*workers: Worker, clock: FakeClock | None = None) -> Iterator[list[WorkerThread]]:
    """Run every worker in its own thread for the block; stop them all (bounded) afterwards."""
    threads: list[WorkerThread] = []
    try:
        for worker in workers:
            threads.append(WorkerThread(worker).start())
        yield threads
    finally:
        errors: list[BaseException] = []
        for t in threads:
            try:
                t.stop(clock=clock)
            except BaseException as exc:  # stop the rest first
                errors.append(exc)
        if errors:
            raise errors[0]


def claim(
    store: RedisJobStore,
    *,
    token: str = "t-1",
    queue: str = "default",
    names: Sequence[str] = ("TestJob",),
    lock_duration_ms: int = 30000,
) -> Any:
    """CLAIM with the conformance defaults (returns Claimed or Empty)."""
    return store.claim(
        queue=queue, names=list(names), token=token, lock_duration_ms=lock_duration_ms
    )


class Waiter(threading.Thread):
    """``store.await_wake`` in the background (FLW-04/06)."""

    def __init__(
        self, store: RedisJobStore, queues: list[str], wake_token: int, timeout_ms: int = 5000
    ) -> None:
        super().__init__(daemon=True)
        self.store, self.queues, self.wake_token, self.timeout_ms = (
            store,
            queues,
            wake_token,
            timeout_ms,
        )
        self.result: bool | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.store.await_wake(
                self.queues, self.wake_token, timeout_ms=self.timeout_ms
            )
        except BaseException as exc:  # reported by outcome()
            self.error = exc

    def outcome(self) -> bool | None:
        self.join(self.timeout_ms / 1000 + 5)
        assert not self.is_alive(), "await_wake ignored its timeout"
        if self.error is not None:
            raise self.error
        return self.result
