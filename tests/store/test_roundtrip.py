"""Exact round trips (store-contract.md §1 rule 3, §1.1, invariants 6-8).

The store never decodes payloads or exits: whatever JSON value goes in comes back
identical (type-strict: ``True`` is not ``1`` and ``1.0`` is not ``1``).
"""

from __future__ import annotations

from typing import Any

import pytest

from store import MISSING, Complete, Fail, Retry, TraceContext
from store.records import BackoffPolicy, KeepPolicy, ParentEnvelope
from tests.store.helpers import claim_id, claim_job, counts_of, json_identical, req

PAYLOADS: list[tuple[str, Any]] = [
    ("int16", 1234567890123456),
    ("int-beyond-64-bit", 2**64 + 1),
    ("negative-int64", -(2**63)),
    ("third", 1 / 3),
    ("tiny", 1e-300),
    ("huge-float", 1.7976931348623157e308),
    ("float-one", 1.0),
    ("zero", 0),
    ("true", True),
    ("false", False),
    ("null", None),
    ("empty-list", []),
    ("empty-dict", {}),
    ("empty-string", ""),
    ("nested", {"a": [1, {"b": [[], {}, None, 2.5]}], "c": {"d": {"e": [True, False]}}}),
    ("unicode", {"emoji": "🚀🎉👩‍💻", "cjk": "漢字かなカナ한국어", "accents": "éüßñ"}),
    ("nul-and-quotes", "a\x00b\"c\\d'e\n\t\r"),
    ("json-looking-string", '{"not": "an object"}'),
    ("big-string", "x" * 100_000),
    ("list-of-mixed", [1, 1.5, "1", True, None, [1], {"1": 1}]),
    ("keys-with-specials", {"": 1, "a:b": 2, "{x}": 3, "\x00": 4, "é": 5}),
    ("exponent-int", 10**20),
]


@pytest.mark.parametrize(("label", "value"), PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_payload_round_trips_exactly(store, label, value):
    result = store.enqueue(req(payload=value))
    job = store.get_job(result.id)
    assert json_identical(job.payload, value), f"{label}: {job.payload!r:.200}"
    claimed = claim_job(store)
    assert json_identical(claimed.payload, value)
    listed = store.list().items
    assert json_identical(listed[0].payload, value)


@pytest.mark.parametrize(("label", "value"), PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_complete_exit_round_trips_exactly_on_record_and_ledger(store, label, value):
    result = store.enqueue(req())
    claim_id(store, result.id)
    store.ack(result.id, "t-1", Complete(value))
    assert json_identical(store.get_job(result.id).exit, value), label
    assert json_identical(store.get_attempts(result.id)[0].exit, value), label


@pytest.mark.parametrize(
    ("label", "value"),
    [p for p in PAYLOADS if p[0] in ("int16", "third", "null", "empty-list", "nested", "unicode")],
    ids=["int16", "third", "null", "empty-list", "nested", "unicode"],
)
def test_fail_and_retry_exits_round_trip(store, label, value):
    result = store.enqueue(req(attempts_max=2))
    claim_id(store, result.id, token="t-1")
    store.ack(result.id, "t-1", Retry(delay_ms=0, exit=value))
    claim_id(store, result.id, token="t-2")
    store.ack(result.id, "t-2", Fail(value))
    ledger = store.get_attempts(result.id)
    assert json_identical(ledger[0].exit, value), label
    assert json_identical(ledger[1].exit, value), label
    assert json_identical(store.get_job(result.id).exit, value), label


def test_exit_none_is_distinct_from_missing_everywhere(store):
    null = store.enqueue(req(payload={"n": "null"}))
    missing = store.enqueue(req(payload={"n": "missing"}))
    for job_id, outcome in ((null.id, Complete(None)), (missing.id, Complete(MISSING))):
        claim_id(store, job_id, token=f"t-{job_id}")
        store.ack(job_id, f"t-{job_id}", outcome)
    assert store.get_job(null.id).exit is None
    assert store.get_attempts(null.id)[0].exit is None
    assert store.get_job(missing.id).exit is MISSING
    assert store.get_attempts(missing.id)[0].exit is MISSING
    listed = {job.id: job for job in store.list(states=["completed"]).items}
    assert listed[null.id].exit is None
    assert listed[missing.id].exit is MISSING


def test_never_finished_job_has_missing_exit(store):
    result = store.enqueue(req())
    assert store.get_job(result.id).exit is MISSING
    assert claim_job(store).exit is MISSING


METADATA = {
    "employerId": "emp-1",
    "empty": "",
    "colon:key": "a:b|c",
    "unicode-ключ": "値🚀",
    "quotes": 'he said "hi" \\ ok',
    "nul": "a\x00b",
    "numberish": "0042",
}


def test_metadata_round_trips_exactly(store):
    result = store.enqueue(req(metadata=METADATA))
    assert store.get_job(result.id).metadata == METADATA
    assert claim_job(store).metadata == METADATA
    assert store.list().items[0].metadata == METADATA


def test_empty_metadata_reads_back_empty_dict(store):
    result = store.enqueue(req(metadata={}))
    assert store.get_job(result.id).metadata == {}


def test_trace_present_and_absent(store):
    traced = store.enqueue(
        req(trace=TraceContext(trace_id="t" * 32, span_id="s" * 16, sampled=False, delayed=True))
    )
    untraced = store.enqueue(req())
    got = store.get_job(traced.id).trace
    assert got == TraceContext("t" * 32, "s" * 16, False, True)
    assert got.sampled is False and got.delayed is True
    assert store.get_job(untraced.id).trace is None
    listed = {job.id: job for job in store.list().items}
    assert listed[traced.id].trace == got
    assert listed[untraced.id].trace is None


def test_negative_and_fractional_priorities_round_trip_and_order(store):
    ids = {}
    for p in (-1.5, 0.25, -3, 2.75, 0):
        ids[p] = store.enqueue(req(priority=p, payload={"p": p})).id
    for p, job_id in ids.items():
        assert store.get_job(job_id).priority == p
    order = [claim_job(store, token=f"t-{n}").id for n in range(5)]
    assert order == [ids[2.75], ids[0.25], ids[0], ids[-1.5], ids[-3]]


SPECIAL_ID = "id:with|pipes{and}braces and spaces ünïcödé 🚀"
SPECIAL_NAME = "Job:name|x{y} z é"
SPECIAL_QUEUE = "queue:1|{2} 3 ö"


def test_special_characters_in_ids_names_and_queues(store):
    result = store.enqueue(
        req(id=SPECIAL_ID, name=SPECIAL_NAME, queue=SPECIAL_QUEUE, payload={"ok": 1})
    )
    assert result.id == SPECIAL_ID and result.duplicate is False
    assert store.enqueue(req(id=SPECIAL_ID, name=SPECIAL_NAME, queue=SPECIAL_QUEUE)).duplicate
    job = store.get_job(SPECIAL_ID)
    assert (job.id, job.name, job.queue) == (SPECIAL_ID, SPECIAL_NAME, SPECIAL_QUEUE)
    assert store.counts(SPECIAL_QUEUE) == counts_of(waiting=1)
    assert store.counts("queue:1") == counts_of()
    assert [j.id for j in store.list(queue=SPECIAL_QUEUE).items] == [SPECIAL_ID]
    assert [j.id for j in store.list(name=SPECIAL_NAME).items] == [SPECIAL_ID]
    claimed = claim_job(store, queue=SPECIAL_QUEUE, names=[SPECIAL_NAME])
    assert claimed.id == SPECIAL_ID
    store.ack(SPECIAL_ID, "t-1", Complete({"done": True}))
    assert store.get_job(SPECIAL_ID).state == "completed"
    assert store.counts(SPECIAL_QUEUE) == counts_of(completed=1)
    assert [e.outcome for e in store.get_attempts(SPECIAL_ID)] == ["completed"]
    assert [j.id for j in store.list(name=SPECIAL_NAME, states=["completed"]).items] == [SPECIAL_ID]
    assert store.remove(SPECIAL_ID) is True
    assert store.counts(SPECIAL_QUEUE) == counts_of()


def test_special_characters_in_dedupe_keys_and_pause(store):
    key = "key:a|b{c} d ü"
    first = store.enqueue(req(name=SPECIAL_NAME, queue=SPECIAL_QUEUE, dedupe={"key": key}))
    again = store.enqueue(req(name=SPECIAL_NAME, queue=SPECIAL_QUEUE, dedupe={"key": key}))
    assert again.id == first.id and again.duplicate is True
    assert store.get_job(first.id).dedupe_key == key
    store.pause(SPECIAL_QUEUE)
    assert store.paused_queues() == [SPECIAL_QUEUE]
    store.resume(SPECIAL_QUEUE)
    assert store.cancel_by_dedupe(SPECIAL_NAME, key) is True
    assert store.get_job(first.id).state == "cancelled"


def test_ids_that_share_prefixes_do_not_collide(store):
    for job_id in ("a", "a:b", "a|b", "a:b:c", "a{b}", "a b"):
        assert store.enqueue(req(id=job_id, payload={"id": job_id})).duplicate is False
    for job_id in ("a", "a:b", "a|b", "a:b:c", "a{b}", "a b"):
        assert store.get_job(job_id).payload == {"id": job_id}
    assert store.counts() == counts_of(waiting=6)


# Every option a request can carry beyond name, queue and payload travels to the scripts as
# one NUL-joined field (empty when all are defaults): each one alone, and all together, must
# land on the record exactly, with a NUL inside metadata, and leave the others at defaults.
OPTIONS: dict[str, Any] = {
    "metadata": {"tenant": "a\x00b", "k": "v"},
    "priority": -2.5,
    "attempts_max": 4,
    "backoff": BackoffPolicy("exponential", 250, 3.0),
    "keep": KeepPolicy.coerce({"count": 5}),
    "timeout_ms": 1500,
    "trace": TraceContext(trace_id="t" * 32, span_id="s" * 16, sampled=True, delayed=False),
    "parent": ParentEnvelope("Flow", "f-1", "child\x00key", "other-store", 2),
    "delay_ms": 60_000,
}
DEFAULTS: dict[str, Any] = {
    "metadata": {},
    "priority": 0,
    "attempts_max": 1,
    "backoff": None,
    "keep": None,
    "timeout_ms": None,
    "trace": None,
    "parent": None,
}


def _check_options(store, record, given: dict[str, Any]) -> None:
    for field, default in DEFAULTS.items():
        assert getattr(record, field) == given.get(field, default), field
    if "delay_ms" in given:
        assert record.state == "delayed"
        assert record.run_at == record.enqueued_at + given["delay_ms"]
    else:
        assert record.state == "waiting"
        assert record.run_at == record.enqueued_at


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_each_request_option_alone_round_trips(store, option):
    given = {option: OPTIONS[option]}
    job_id = store.enqueue(req(**given)).id
    _check_options(store, store.get_job(job_id), given)
    # The bulk path carries the same wire form.
    [bulk] = store.enqueue_many([req(**given)])
    _check_options(store, store.get_job(bulk.id), given)


def test_every_request_option_together_round_trips(store):
    job_id = store.enqueue(req(**OPTIONS)).id
    _check_options(store, store.get_job(job_id), OPTIONS)
    plain = store.get_job(store.enqueue(req()).id)
    _check_options(store, plain, {})
