"""JOB — job definitions and the producer API (conformance-cases.md §28)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from store import (
    MISSING,
    BackoffPolicy,
    InvalidRequestError,
    Job,
    JobStoreError,
    Worker,
    job,
)
from tests.runtime.harness import running


class NotifyUserDefinition(Job):
    """A Job subclass whose Python class name differs from the declared tag."""

    def __init__(self, registry: Any) -> None:
        super().__init__(
            "NotifyUser",
            queue="notifications",
            delay_ms=3000,
            priority=2,
            attempts=4,
            backoff=("exponential", 500, 3),
            idempotency_key=lambda payload: payload["user"],
            registry=registry,
        )


def test_job_01_defaults(registry):
    resize = Job("Resize", registry=registry)
    assert resize.name == "Resize"
    assert resize.queue == "default"
    assert resize.store_key == "default"
    assert (resize.delay_ms, resize.priority, resize.attempts, resize.backoff) == (0, 0, 1, None)
    assert (resize.timeout_ms, resize.keep) == (None, None)


def test_job_02_subclassing_keeps_the_declared_tag_and_normalizes_defaults(registry):
    notify = NotifyUserDefinition(registry)
    assert notify.name == "NotifyUser"
    assert notify.queue == "notifications"
    assert (notify.delay_ms, notify.priority, notify.attempts) == (3000, 2, 4)
    assert notify.backoff == BackoffPolicy("exponential", 500, 3)

    @job("Decorated", attempts=2, backoff={"kind": "fixed", "delay_ms": 250}, registry=registry)
    def decorated(payload: Any) -> None:
        return None

    assert decorated.name == "Decorated"
    assert decorated.backoff == BackoffPolicy("fixed", 250)


def test_job_03_enqueue_stores_the_payload_with_merged_options(store, registry):
    resize = Job("Resize", attempts=5, priority=1, registry=registry)
    payload = {"url": "https://example.com/a.png", "sizes": [64, 128]}
    job_id = resize.enqueue(payload, priority=7, attempts=2, delay_ms=1000)
    record = store.get_job(job_id)
    assert (record.name, record.queue, record.payload) == ("Resize", "default", payload)
    assert (record.priority, record.attempts_max, record.state) == (7, 2, "delayed")
    assert record.run_at == 1000


def test_job_04_idempotency_key_gives_a_deterministic_id_and_dedups(store, registry):
    notify = NotifyUserDefinition(registry)
    assert notify.enqueue({"user": "u-1"}) == "NotifyUser/u-1"
    assert notify.enqueue({"user": "u-1"}) == "NotifyUser/u-1"
    assert notify.enqueue({"user": "u-2"}) == "NotifyUser/u-2"
    assert notify.enqueue_result({"user": "u-1"}).duplicate is True
    assert store.counts()["delayed"] == 2


def test_job_05_explicit_job_id_overrides_the_idempotency_key(store, registry):
    notify = NotifyUserDefinition(registry)
    assert notify.enqueue({"user": "u-1"}, job_id="custom-1") == "custom-1"
    assert store.get_job("NotifyUser/u-1") is None
    assert store.get_job("custom-1").name == "NotifyUser"


@pytest.mark.parametrize("payload", [{"x": object()}, {"tags": {"a", "b"}}, {"n": float("nan")}])
def test_job_06_invalid_payload_dies_at_enqueue(store, registry, payload):
    resize = Job("Resize", registry=registry)
    with pytest.raises((JobStoreError, InvalidRequestError, TypeError, ValueError)):
        resize.enqueue(payload)
    assert sum(store.counts().values()) == 0
    assert store.list().items == []


def test_job_07_poll_none_for_unknown_and_pending_status(store, registry):
    resize = Job("Resize", registry=registry)
    assert resize.poll("nope") is None
    job_id = resize.enqueue({"n": 1})
    status = resize.poll(job_id)
    assert (status.id, status.state, status.attempts_made) == (job_id, "waiting", 0)
    assert status.exit is MISSING
    assert status.failed_reason is None
    assert status.done is False


def test_job_08_records_persist_under_the_declared_tag(store, registry):
    notify = NotifyUserDefinition(registry)
    job_id = notify.enqueue({"user": "u-9"})
    assert store.get_job(job_id).name == "NotifyUser"
    assert [r.id for r in store.list(name="NotifyUser").items] == [job_id]
    assert store.list(name="NotifyUserDefinition").items == []


def test_job_09_producer_methods_survive_detaching(store, registry):
    resize = Job("Resize", registry=registry)
    enqueue, poll, cancel, attempts_of = (
        resize.enqueue,
        resize.poll,
        resize.cancel,
        resize.attempts_of,
    )
    job_id = enqueue({"n": 1})
    assert poll(job_id).state == "waiting"
    cancel(job_id)
    assert poll(job_id).state == "cancelled"
    assert [a.outcome for a in attempts_of(job_id)] == ["cancelled"]


def test_job_10_attempts_below_one_are_clamped(store, registry):
    zero = Job("Zero", attempts=0, registry=registry)
    negative = Job("Negative", attempts=-3, registry=registry)
    assert zero.attempts == 1 and negative.attempts == 1
    assert store.get_job(zero.enqueue({})).attempts_max == 1
    resize = Job("Resize", attempts=3, registry=registry)
    assert store.get_job(resize.enqueue({}, attempts=-3)).attempts_max == 1
    assert store.get_job(resize.enqueue({}, attempts=0)).attempts_max == 1


def test_job_11_payloads_must_be_json_rich_types_round_trip_when_made_json_safe(store, registry):
    seen: list[Any] = []
    stamp = datetime(2026, 8, 25, 9, 30, 15, 123000, tzinfo=UTC)
    event = Job("Event", handler=lambda payload: seen.append(payload), registry=registry)
    with pytest.raises((JobStoreError, InvalidRequestError, TypeError)):
        event.enqueue({"at": stamp})
    assert sum(store.counts().values()) == 0
    job_id = event.enqueue({"at": stamp.isoformat()})
    record = store.get_job(job_id)
    assert record.payload == {"at": "2026-08-25T09:30:15.123000+00:00"}
    with running(Worker(store, [event], registry=registry)):
        event.await_result(job_id, timeout_s=5)
    assert datetime.fromisoformat(seen[0]["at"]) == stamp


def test_job_12_redacted_fields_round_trip():
    pytest.skip(
        "no Python analogue: the producer API has no payload schema, so there is no Redacted "
        "type that persists its raw value and is re-wrapped on decode"
    )


def test_job_13_never_serializable_secret_refuses_enqueue_without_leaking(store, registry):
    class Secret:
        """A value that must never be persisted (nor printed)."""

        def __init__(self, value: str) -> None:
            self._value = value

        def __repr__(self) -> str:
            return "Secret(<redacted>)"

    signup = Job("Signup", registry=registry)
    with pytest.raises((JobStoreError, InvalidRequestError, TypeError)) as info:
        signup.enqueue({"user": "u-1", "password": Secret("hunter2-very-secret")})
    assert "hunter2-very-secret" not in str(info.value)
    assert "hunter2-very-secret" not in repr(info.value)
    assert sum(store.counts().values()) == 0
