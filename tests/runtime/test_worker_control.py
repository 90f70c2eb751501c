"""An operator's commands to a running worker (the dashboard's workers page): "quiet" stops
it claiming (the jobs it holds finish; it resumes when the command is withdrawn), "stop"
shuts it down as SIGTERM does.  The worker reads its command every CONTROL_INTERVAL_MS."""

from __future__ import annotations

import threading

import pytest

from store import Job, Worker, current_job
from store.errors import InvalidRequestError
from store.worker import CONTROL_INTERVAL_MS
from tests.runtime.harness import advance, eventually, quiet, running, settle, state_of


def test_a_quiet_worker_finishes_its_job_claims_nothing_and_resumes(store, registry, clock):
    gate = threading.Event()
    ran: list[str] = []

    def work(payload: dict[str, str]) -> str:
        ran.append(payload["n"])
        if payload["n"] == "first":
            gate.wait(5)
        return payload["n"]

    job = Job("Work", handler=work, queue="q", registry=registry)
    worker = Worker(store, [job], registry=registry, worker_id="w-quiet", prefetch=1)
    with running(worker):
        first = job.enqueue({"n": "first"})
        eventually(lambda: state_of(store, first) == "active", message="first job running")
        store.control_worker("w-quiet", "quiet")
        advance(clock, CONTROL_INTERVAL_MS)
        eventually(lambda: worker.quiet, message="worker went quiet")
        # The presence record says so at once (not at the next 10 s announcement).
        eventually(
            lambda: [w for w in store.live_workers() if w.state == "quiet"],
            message="quiet announced",
        )
        # The running job finishes and is acked although no claim follows it.
        gate.set()
        eventually(lambda: state_of(store, first) == "completed", message="held job acked")
        second = job.enqueue({"n": "second"})
        advance(clock, CONTROL_INTERVAL_MS)
        settle(clock)
        quiet()
        assert state_of(store, second) == "waiting" and ran == ["first"]
        # Withdrawn: it claims again.
        store.control_worker("w-quiet", None)
        advance(clock, CONTROL_INTERVAL_MS)
        eventually(lambda: state_of(store, second) == "completed", message="resumed")
        assert not worker.quiet
        eventually(
            lambda: [w for w in store.live_workers() if w.state == "running"],
            message="running announced",
        )


def test_a_stop_command_shuts_the_worker_down_and_hands_back_its_job(store, registry, clock):
    started = threading.Event()

    def slow(payload: object) -> str:
        started.set()
        current_job().sleep(60_000)  # interrupted by the shutdown
        return "never"

    job = Job("Slow", handler=slow, queue="q", registry=registry)
    worker = Worker(store, [job], registry=registry, worker_id="w-stop")
    with running(worker) as handle:
        job_id = job.enqueue({})
        assert started.wait(5)
        store.control_worker("w-stop", "stop")
        advance(clock, CONTROL_INTERVAL_MS)
        eventually(lambda: not handle.alive, message="worker stopped by the command")
    # Graceful: the job went back to waiting without using an attempt, the worker said
    # goodbye and its command was cleared with its record.
    record = store.get_job(job_id)
    assert record.state == "waiting" and record.attempts_made == 0
    assert store.live_workers() == []
    assert store.worker_control("w-stop") is None


def test_only_quiet_and_stop_are_commands(store):
    with pytest.raises(InvalidRequestError):
        store.control_worker("w-1", "pause")
    store.control_worker("w-1", "quiet")
    assert store.worker_controls() == {"w-1": "quiet"}
    store.control_worker("w-1", None)
    assert store.worker_controls() == {}
