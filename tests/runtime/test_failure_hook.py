"""WFR — the failure reporting hook (conformance-cases.md §24)."""

from __future__ import annotations

from typing import Any

from store import Claimed, FailureReport, Job, Worker
from tests.runtime.harness import advance, eventually, outcomes, running, state_of, walk


class SendFailure(Exception):
    pass


def test_wfr_01_on_job_failure_fires_per_failed_attempt_then_terminally(store, registry, clock):
    reports: list[FailureReport] = []

    def handler(payload: Any) -> None:
        raise SendFailure("always")

    job = Job("Fragile", attempts=2, backoff=("fixed", 1000), handler=handler, registry=registry)
    with running(Worker(store, [job], on_job_failure=reports.append, registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: len(reports) == 1)
        advance(clock, 1000)
        eventually(lambda: len(reports) == 2)
        eventually(lambda: state_of(store, job_id) == "failed")
    first, last = reports
    assert (first.will_retry, first.attempt, first.job_id) == (True, 1, job_id)
    assert (last.will_retry, last.attempt) == (False, 2)
    assert (last.name, last.attempts_max, last.queue, last.job_id) == (
        "Fragile",
        2,
        "default",
        job_id,
    )
    assert isinstance(first.cause, SendFailure) and isinstance(last.cause, SendFailure)


def test_wfr_02_failing_hook_never_disturbs_processing(store, registry):
    calls: list[str] = []

    def hook(report: FailureReport) -> None:
        calls.append(report.job_id)
        raise RuntimeError("the hook itself is broken")

    def handler(payload: dict[str, Any]) -> int:
        if payload["fail"]:
            raise SendFailure("first job fails")
        return 7

    job = Job("Hooked", handler=handler, registry=registry)
    with running(Worker(store, [job], on_job_failure=hook, registry=registry)):
        failing = job.enqueue({"fail": True})
        eventually(lambda: state_of(store, failing) == "failed")
        assert job.execute({"fail": False}, timeout_s=5) == 7
    assert calls == [failing]
    assert outcomes(store, failing) == ["failed"]


def test_wfr_03_stall_exhaustion_reports_a_terminal_failure(store, registry, clock):
    reports: list[FailureReport] = []
    stall = Job("Stall", handler=lambda payload: None, registry=registry)
    idle = Job("Idle", handler=lambda payload: None, registry=registry)
    stall_id = stall.enqueue({})
    dead = store.claim(queue="default", names=["Stall"], token="dead:1", lock_duration_ms=1000)
    assert isinstance(dead, Claimed)
    worker = Worker(
        store,
        [idle],
        stalled_interval_ms=2000,
        max_stalled_count=0,
        on_job_failure=reports.append,
        registry=registry,
    )
    with running(worker):
        walk(clock, 3000)
        eventually(lambda: state_of(store, stall_id) == "failed")
        eventually(lambda: len(reports) == 1)
    (report,) = reports
    assert (report.will_retry, report.name, report.job_id) == (False, "Stall", stall_id)
    assert report.cause  # the stall's failed_reason
