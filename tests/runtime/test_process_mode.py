"""run_sync_in="process": plain handlers run in a forked child that the worker can kill."""

from __future__ import annotations

import os
import time
from typing import Any

from store import Job, JobCancelledError, JobFailedError, RedisJobStore, StoreRegistry, Worker
from store.clock import system_clock
from tests.runtime.harness import eventually, running


def wall_clock_store(make_store: Any) -> tuple[RedisJobStore, StoreRegistry]:
    store = make_store(clock=system_clock)
    registry = StoreRegistry()
    registry.register(store)
    return store, registry


def test_a_handler_runs_in_a_child_process_and_returns_its_result(make_store: Any) -> None:
    store, registry = wall_clock_store(make_store)
    job = Job("WhoAmI", registry=registry, handler=lambda payload: {"pid": os.getpid()})
    with running(Worker(store, [job], registry=registry, run_sync_in="process")):
        result = job.execute({}, timeout_s=20)
    assert result["pid"] != os.getpid()


def test_a_handler_that_never_yields_is_killed_at_its_timeout(
    make_store: Any, tmp_path: Any
) -> None:
    store, registry = wall_clock_store(make_store)
    marker = tmp_path / "pid"

    def spin(payload: dict[str, str]) -> None:
        marker.write_text(str(os.getpid()))
        while True:  # never checks for interruption: only a kill stops it
            pass

    job = Job("Spin", registry=registry, handler=spin, timeout_ms=500)
    with running(Worker(store, [job], registry=registry, run_sync_in="process")):
        job_id = job.enqueue({})
        try:
            job.await_result(job_id, timeout_s=20)
        except JobFailedError as exc:
            assert exc.error_type == "JobTimeoutError"
        else:
            raise AssertionError("the spinning job completed")
        child = int(marker.read_text())
        eventually(lambda: not _alive(child), message="the child process was not killed")


def test_cancelling_a_running_process_handler_kills_it(make_store: Any, tmp_path: Any) -> None:
    store, registry = wall_clock_store(make_store)
    marker = tmp_path / "pid"

    def spin(payload: dict[str, str]) -> None:
        marker.write_text(str(os.getpid()))
        while True:
            pass

    job = Job("SpinCancel", registry=registry, handler=spin)
    worker = Worker(
        store, [job], registry=registry, run_sync_in="process", lock_duration_ms=600
    )  # heartbeat every 300 ms delivers the cancel
    with running(worker):
        job_id = job.enqueue({})
        eventually(marker.exists)
        store.cancel(job_id)
        eventually(lambda: store.get_job(job_id).state == "cancelled", timeout=15)
        child = int(marker.read_text())
        eventually(lambda: not _alive(child), message="the child process was not killed")
    try:
        job.await_result(job_id, timeout_s=1)
    except JobCancelledError:
        pass
    else:
        raise AssertionError("a cancelled job must not report a result")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie is dead
    except FileNotFoundError:
        return False
    finally:
        time.sleep(0)
