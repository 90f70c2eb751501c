"""WAR — await-result, poll, attempts decoding, the retry verb (conformance-cases.md §25)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from store import Job, JobNotFoundError, Worker
from tests.runtime.harness import eventually, running, state_of


def test_war_01_await_result_dies_when_the_job_is_removed_mid_wait(store, registry):
    job = Job("Vanishing", registry=registry)  # no worker: the job stays waiting
    job_id = job.enqueue({})
    outcome: dict[str, BaseException] = {}

    def wait() -> None:
        try:
            job.await_result(job_id, poll_schedule=[0.05] * 200)
        except BaseException as exc:
            outcome["error"] = exc

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    eventually(lambda: waiter.is_alive())
    assert store.remove(job_id) is True
    waiter.join(5)
    assert not waiter.is_alive()
    assert isinstance(outcome.get("error"), JobNotFoundError)


def test_war_02_await_result_dies_when_its_poll_schedule_is_exhausted(store, registry):
    job = Job("NeverRuns", registry=registry)
    job_id = job.enqueue({})
    with pytest.raises(TimeoutError):
        job.await_result(job_id, poll_schedule=[0.01, 0.01])
    assert state_of(store, job_id) == "waiting"


def test_war_03_stored_exits_survive_a_json_boundary(store, registry):
    job = Job("Io", handler=lambda payload: f"hi {payload['who']}", registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({"who": "io"})
        assert job.await_result(job_id, timeout_s=5) == "hi io"
    exit_value = store.get_job(job_id).exit
    assert json.loads(json.dumps(exit_value)) == "hi io"
    status = job.poll(job_id)
    assert json.loads(json.dumps(status.exit)) == "hi io"


def test_war_04_retry_verb_reruns_a_failed_job_end_to_end(store, registry):
    runs: list[int] = []

    def handler(payload: Any) -> str:
        runs.append(len(runs) + 1)
        if len(runs) == 1:
            raise RuntimeError("first run dies")
        return "second run ok"

    job = Job("Retryable", handler=handler, registry=registry)
    with running(Worker(store, [job], registry=registry)):
        job_id = job.enqueue({})
        eventually(lambda: state_of(store, job_id) == "failed")
        job.retry(job_id)
        assert job.await_result(job_id, timeout_s=5) == "second run ok"
    ledger = job.attempts_of(job_id)
    assert [(a.attempt, a.outcome) for a in ledger] == [(1, "failed"), (2, "completed")]
    assert runs == [1, 2]


def test_war_05_poll_exposes_the_merged_metadata(store, registry):
    job = Job("Invoice", metadata=lambda payload: {"invoiceId": payload["id"]}, registry=registry)
    job_id = job.enqueue({"id": "emp-9"}, metadata={"source": "api"})
    status = job.poll(job_id)
    assert status.metadata == {"invoiceId": "emp-9", "source": "api"}
