"""Producer-level dedupe and keep cases: DED-10, DED-13 and RET-11 (conformance-cases.md §3, §10)."""

from __future__ import annotations

from typing import Any

from store import Job, KeepPolicy, KeepStatePolicy, Worker
from tests.runtime.harness import advance, eventually, running


def test_ded_10_definition_dedupe_derives_from_the_payload_and_a_per_call_key_replaces_it(
    store, registry
):
    sync = Job("Sync", dedupe=lambda payload: payload["employerId"], registry=registry)
    first = sync.enqueue({"employerId": "e1"})
    assert sync.enqueue({"employerId": "e1"}) == first
    other = sync.enqueue({"employerId": "e2"})
    assert other != first
    custom = sync.enqueue({"employerId": "e1"}, dedupe="custom")
    assert custom not in (first, other)
    assert store.get_job(custom).dedupe_key == "custom"
    assert store.get_job(first).dedupe_key == "e1"
    assert store.counts()["waiting"] == 3


def test_ded_13_schedule_reschedule_and_cancel_by_key_lifecycle(store, registry, clock):
    invite = Job(
        "SendInvite",
        dedupe=lambda payload: {"key": payload["employeeId"], "replace": True},
        registry=registry,
    )
    first = invite.enqueue({"employeeId": "e1"}, at=3_600_000)
    again = invite.enqueue({"employeeId": "e1"}, at=7_200_000)
    assert again == first
    record = store.get_job(first)
    assert (record.state, record.run_at) == ("delayed", 7_200_000)
    assert invite.cancel_by_key("e1") is True
    assert store.get_job(first).state == "cancelled"
    assert invite.cancel_by_key("e1") is False
    assert store.counts()["cancelled"] == 1


def test_ret_11_flat_job_level_keep_covers_every_state_and_prunes(store, registry, clock):
    ran: list[Any] = []
    pruned = Job(
        "Pruned",
        keep={"count": 1, "age_ms": 60_000},
        handler=lambda payload: ran.append(payload["n"]),
        registry=registry,
    )
    rule = KeepStatePolicy(count=1, age_ms=60_000)
    first = pruned.enqueue({"n": 1})
    assert store.get_job(first).keep == KeepPolicy(completed=rule, failed=rule, cancelled=rule)
    with running(Worker(store, [pruned], registry=registry)):
        pruned.await_result(first, timeout_s=5)
        advance(clock, 1000)
        second = pruned.enqueue({"n": 2})
        pruned.await_result(second, timeout_s=5)
        advance(clock, 1000)
        eventually(lambda: store.get_job(first) is None, message="first record pruned")
    assert ran == [1, 2]
    assert store.get_job(second).state == "completed"
    assert store.counts()["completed"] == 1
