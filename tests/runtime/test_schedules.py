"""SCH — repeatable schedules (conformance-cases.md §11), DST behaviour and racing tickers."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from store import (
    EnqueueRequest,
    InvalidRequestError,
    Job,
    JobStoreError,
    ScheduleRecord,
    Worker,
    connect,
    current_job,
)
from store.scheduler import tick_due_schedules
from store.schedules import tick_request
from tests.runtime.harness import advance, eventually, quiet, running, state_of

BERLIN = ZoneInfo("Europe/Berlin")


def minutely(**overrides: Any) -> ScheduleRecord:
    fields: dict[str, Any] = {
        "key": "TestJob/minutely",
        "job_name": "TestJob",
        "queue": "default",
        "every_ms": 60_000,
        "payload": {"n": 7},
        "metadata": {},
        "priority": 0,
        "attempts_max": 1,
        "next_run_at": 60_000,
    }
    fields.update(overrides)
    return ScheduleRecord(**fields)


def slot_request(key: str, slot: int, payload: Any = None) -> EnqueueRequest:
    return EnqueueRequest(id=f"sched/{key}/{slot}", name="TestJob", payload=payload or {"n": 7})


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


# ---------------------------------------------------------------- store level


def test_sch_01_upsert_list_due_conditional_advance_remove(store, clock):
    s = ScheduleRecord(
        key="TestJob/hourly",
        job_name="TestJob",
        cron="0 * * * *",
        payload={"n": 1},
        metadata={"source": "conformance"},
        priority=2,
        attempts_max=3,
        backoff={"kind": "fixed", "delay_ms": 1000},
        timeout_ms=5000,
        next_run_at=60_000,
    )
    store.upsert_schedule(s)
    assert store.list_schedules() == [s]
    assert store.list_schedules(job_name="OtherJob") == []
    assert store.due_schedules() == []
    clock.advance(60_000)
    assert store.due_schedules() == [s]
    store.upsert_schedule(ScheduleRecord(**{**s.__dict__, "priority": 9}))
    (listed,) = store.list_schedules()
    assert (listed.priority, listed.next_run_at) == (9, 60_000)
    store.advance_schedule(s.key, 999, 120_000)
    assert store.get_schedule(s.key).next_run_at == 60_000
    store.advance_schedule(s.key, 60_000, 120_000)
    assert store.get_schedule(s.key).next_run_at == 120_000
    assert store.due_schedules() == []
    assert store.remove_schedule(s.key) is True
    assert store.remove_schedule(s.key) is False
    assert store.list_schedules() == []


def test_sch_02_group_labels_persist_and_filter(store):
    store.upsert_schedule(minutely(key="TestJob/labeled", group="svc-a"))
    store.upsert_schedule(minutely(key="TestJob/other", group="svc-b"))
    store.upsert_schedule(minutely(key="TestJob/plain"))
    labeled = store.list_schedules(group="svc-a")
    assert [s.key for s in labeled] == ["TestJob/labeled"]
    assert labeled[0].group == "svc-a"
    everything = {s.key: s for s in store.list_schedules()}
    assert len(everything) == 3
    assert everything["TestJob/plain"].group is None
    store.upsert_schedule(minutely(key="TestJob/labeled", group="svc-c", next_run_at=999_999))
    relabeled = store.list_schedules(group="svc-c")
    assert [s.key for s in relabeled] == ["TestJob/labeled"]
    assert relabeled[0].next_run_at == 60_000
    assert store.list_schedules(group="svc-a") == []


def test_sch_03_unchanged_cadence_preserves_next_run_changed_one_resets(store, clock):
    store.upsert_schedule(minutely(key="TestJob/pulse", next_run_at=60_000))
    clock.advance(30_000)
    store.upsert_schedule(minutely(key="TestJob/pulse", priority=5, next_run_at=90_000))
    stored = store.get_schedule("TestJob/pulse")
    assert (stored.next_run_at, stored.priority) == (60_000, 5)
    store.upsert_schedule(minutely(key="TestJob/pulse", every_ms=120_000, next_run_at=150_000))
    assert store.get_schedule("TestJob/pulse").next_run_at == 150_000


def test_sch_04_every_and_tz_round_trip_due_order_queue_filter(store, clock):
    e = minutely(key="TestJob/every", every_ms=90_000, next_run_at=90_000)
    c = minutely(
        key="TestJob/tz",
        queue="other",
        cron="0 9 * * *",
        tz="America/New_York",
        every_ms=None,
        next_run_at=30_000,
    )
    store.upsert_schedule(e)
    store.upsert_schedule(c)
    assert store.list_schedules(queue="other") == [c]
    (default_one,) = store.list_schedules(queue="default")
    assert default_one.every_ms == 90_000
    clock.advance(90_000)
    assert [s.key for s in store.due_schedules()] == ["TestJob/tz", "TestJob/every"]


def test_sch_05_schedule_payloads_round_trip_exactly(store):
    payload = {"big": 1234567890123456, "third": 1 / 3, "empty": [], "nested": {"list": [[], {}]}}
    store.upsert_schedule(minutely(payload=payload))
    assert store.get_schedule("TestJob/minutely").payload == payload
    assert store.list_schedules()[0].payload == payload


def test_sch_06_tick_fires_a_slot_exactly_once_and_advances(store, clock):
    store.upsert_schedule(minutely())
    clock.advance(60_000)
    key = "TestJob/minutely"
    assert store.tick_schedule(key, 60_000, 120_000, slot_request(key, 60_000)) is True
    assert store.get_schedule(key).next_run_at == 120_000
    assert store.counts()["waiting"] == 1
    assert store.tick_schedule(key, 60_000, 180_000, slot_request(key, 60_000)) is False
    assert store.get_schedule(key).next_run_at == 120_000
    assert store.counts()["waiting"] == 1
    claimed = store.claim(queue="default", names=["TestJob"], token="t-1")
    assert claimed.job.id == "sched/TestJob/minutely/60000"
    assert claimed.job.payload == {"n": 7}


def test_sch_07_stale_tick_cannot_refire_a_pruned_slot(store, clock):
    store.upsert_schedule(minutely())
    clock.advance(60_000)
    key = "TestJob/minutely"
    assert store.tick_schedule(key, 60_000, 120_000, slot_request(key, 60_000)) is True
    assert store.remove("sched/TestJob/minutely/60000") is True
    assert store.tick_schedule(key, 60_000, 120_000, slot_request(key, 60_000)) is False
    assert store.counts()["waiting"] == 0
    assert store.get_schedule(key).next_run_at == 120_000


def test_sch_09_tick_rejects_id_less_requests_unknown_keys_return_false(store, clock):
    store.upsert_schedule(minutely())
    clock.advance(60_000)
    with pytest.raises(JobStoreError):
        store.tick_schedule(
            "TestJob/minutely", 60_000, 120_000, EnqueueRequest(name="TestJob", payload={"n": 7})
        )
    ghost = EnqueueRequest(id="sched/ghost/0", name="TestJob", payload={"n": 7})
    assert store.tick_schedule("ghost", 0, 60_000, ghost) is False
    assert store.counts()["waiting"] == 0
    assert store.get_schedule("TestJob/minutely").next_run_at == 60_000


# ---------------------------------------------------------------- worker level


def test_sch_11_cron_schedule_enqueues_one_slot_deterministic_job_per_occurrence(
    store, registry, clock
):
    seen: list[str] = []
    tick = Job(
        "Tick",
        handler=lambda payload: seen.append(f"{payload['label']}:{current_job().job_id}"),
        registry=registry,
    )
    with running(Worker(store, [tick], schedule_sweep_interval_ms=1000, registry=registry)):
        assert (
            tick.schedule("hourly", cron="0 * * * *", payload={"label": "sweep"}) == "Tick/hourly"
        )
        advance(clock, 3_600_000)
        eventually(lambda: seen == ["sweep:sched/Tick/hourly/3600000"])
        first = "sched/Tick/hourly/3600000"
        eventually(lambda: state_of(store, first) == "completed")
        assert store.get_job(first).metadata["scheduledFor"] == "1970-01-01T01:00:00.000Z"
        advance(clock, 3_600_000)
        eventually(lambda: len(seen) == 2)
        assert seen[1] == "sweep:sched/Tick/hourly/7200000"
        assert tick.unschedule("hourly") is True
        assert tick.unschedule("hourly") is False
        advance(clock, 3 * 3_600_000)
        quiet()
    assert len(seen) == 2


def test_sch_12_every_schedule_first_fires_one_interval_from_now(store, registry, clock):
    runs: list[str] = []
    pulse = Job(
        "Pulse", handler=lambda payload: runs.append(current_job().job_id), registry=registry
    )
    with running(Worker(store, [pulse], schedule_sweep_interval_ms=1000, registry=registry)):
        pulse.schedule("pulse", every_ms=10_000, payload={})
        quiet()
        assert runs == []
        advance(clock, 10_000)
        eventually(lambda: len(runs) == 1)
        advance(clock, 10_000)
        eventually(lambda: len(runs) == 2)
        pulse.schedule("pulse", every_ms=3_600_000, payload={})
        advance(clock, 30_000)
        quiet()
    assert runs == ["sched/Pulse/pulse/10000", "sched/Pulse/pulse/20000"]


def test_sch_13_schedule_needs_exactly_one_valid_cadence(store, registry):
    job = Job("Cadenced", registry=registry)
    with pytest.raises(InvalidRequestError):
        job.schedule("neither", payload={})
    with pytest.raises(InvalidRequestError):
        job.schedule("both", cron="* * * * *", every_ms=1000, payload={})
    with pytest.raises(InvalidRequestError):
        job.schedule("bad", cron="not a cron", payload={})
    with pytest.raises(InvalidRequestError):
        job.schedule("bad-tz", cron="0 9 * * *", tz="Mars/Olympus", payload={})
    assert store.list_schedules() == []


# ---------------------------------------------------------------- DST and racing tickers


def fire_all(store: Any, clock: Any, key: str, until_ms: int) -> list[int]:
    """Drive one on-time ticker: jump to each next_run_at and tick; returns the fired slots."""
    fired: list[int] = []
    while True:
        slot = store.get_schedule(key).next_run_at
        if slot > until_ms:
            return fired
        clock.set(slot)
        assert tick_due_schedules(store) == 1
        fired.append(slot)
        assert store.get_job(f"sched/{key}/{slot}") is not None


def local(slot: int) -> datetime:
    return datetime.fromtimestamp(slot / 1000, UTC).astimezone(BERLIN)


def test_sch_dst_europe_berlin(store, registry, clock):
    daily = Job("Nightly", registry=registry)
    hourly = Job("Hourly", registry=registry)
    start = ms(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    clock.set(start)
    daily.schedule("0230", cron="30 2 * * *", tz="Europe/Berlin", payload={})

    # Spring forward (Sun 2026-03-29, 02:00 CET -> 03:00 CEST): 02:30 does not exist that day.
    spring = fire_all(store, clock, "Nightly/0230", ms(datetime(2026, 3, 31, 12, 0, tzinfo=UTC)))
    days = [local(s).date().isoformat() for s in spring]
    assert days == ["2026-03-28", "2026-03-29", "2026-03-30", "2026-03-31"]
    assert [(local(s).hour, local(s).minute) for s in spring] == [(2, 30), (3, 0), (2, 30), (2, 30)]

    # Fall back (Sun 2026-10-25, 03:00 CEST -> 02:00 CET): 02:30 happens twice; fire once.
    clock.set(ms(datetime(2026, 10, 23, 12, 0, tzinfo=UTC)))
    daily.unschedule("0230")
    daily.schedule("0230", cron="30 2 * * *", tz="Europe/Berlin", payload={})
    fall = fire_all(store, clock, "Nightly/0230", ms(datetime(2026, 10, 27, 12, 0, tzinfo=UTC)))
    days = [local(s).date().isoformat() for s in fall]
    assert days == ["2026-10-24", "2026-10-25", "2026-10-26", "2026-10-27"]
    assert all((local(s).hour, local(s).minute) == (2, 30) for s in fall)
    assert fall[2] - fall[1] == 25 * 3_600_000  # the fall-back day is 25 hours long

    # The hourly cron fires in both repeated 02:00 hours of the fall-back night.
    daily.unschedule("0230")
    clock.set(ms(datetime(2026, 10, 24, 22, 30, tzinfo=UTC)))  # 00:30 CEST on the 25th
    hourly.schedule("top", cron="0 * * * *", tz="Europe/Berlin", payload={})
    hours = fire_all(store, clock, "Hourly/top", ms(datetime(2026, 10, 25, 3, 30, tzinfo=UTC)))
    assert hours == [
        ms(datetime(2026, 10, 24, 23, 0, tzinfo=UTC)) + k * 3_600_000 for k in range(5)
    ]
    assert [local(s).strftime("%H:%M%z") for s in hours] == [
        "01:00+0200",
        "02:00+0200",
        "02:00+0100",
        "03:00+0100",
        "04:00+0100",
    ]


def test_sch_two_tickers_racing_the_same_slot_fire_it_once(make_store, registry, clock):
    one = registry.get("default")
    two = make_store()  # a second store object on the same prefix (another process's view)
    job = Job("Raced", registry=registry)
    job.schedule("tick", every_ms=1000, payload={"n": 1})
    rounds = 100
    for r in range(1, rounds + 1):
        clock.set(r * 1000)
        barrier = threading.Barrier(2)
        fired: list[int] = []
        errors: list[BaseException] = []

        def ticker(
            target: Any, barrier: threading.Barrier, fired: list[int], errors: list[Any]
        ) -> None:
            try:
                barrier.wait(5)
                fired.append(tick_due_schedules(target))
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=ticker, args=(s, barrier, fired, errors)) for s in (one, two)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
        assert errors == []
        slots = sorted(int(j.id.rsplit("/", 1)[1]) for j in one.list(name="Raced", limit=500).items)
        # Exactly one ticker fired, and it fired the due slot (never a future one).
        assert (sorted(fired), slots) == ([0, 1], [k * 1000 for k in range(1, r + 1)]), (
            f"at t={r * 1000}: fired {fired}, slot jobs {slots}"
        )
    assert one.counts()["waiting"] == rounds
    ids = sorted(j.id for j in one.list(name="Raced", limit=500).items)
    assert ids == sorted(f"sched/Raced/tick/{r * 1000}" for r in range(1, rounds + 1))
    assert tick_request(one.get_schedule("Raced/tick"), 5000).id == "sched/Raced/tick/5000"


def test_sch_ticker_reading_a_schedule_mid_tick_never_fires_a_future_slot(
    make_store, registry, clock, redis_url
):
    """The interleaving behind the racing-tickers case, made deterministic: ticker two lists
    the due index, ticker one fires the slot (advancing next_run_at), then ticker two reads
    the row.  Ticker two must fire nothing -- in particular not the *next* slot, early."""
    one = registry.get("default")
    client_two = connect(redis_url)
    try:
        two = make_store(client=client_two)
        job = Job("Interleaved", registry=registry)
        job.schedule("tick", every_ms=1000, payload={})
        hooked: list[int] = []
        real_pipeline = client_two.pipeline

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = real_pipeline(*args, **kwargs)
            if not hooked:
                real_execute = pipe.execute

                def execute(*eargs: Any, **ekwargs: Any) -> Any:
                    hooked.append(tick_due_schedules(one))  # one wins the slot in between
                    return real_execute(*eargs, **ekwargs)

                pipe.execute = execute
            return pipe

        client_two.pipeline = pipeline
        clock.set(1000)
        fired_by_two = tick_due_schedules(two)
        if not hooked:
            pytest.skip("due_schedules no longer reads rows through a pipeline; cannot interleave")
        assert hooked == [1]
        slots = sorted(j.id for j in one.list(name="Interleaved").items)
        assert (fired_by_two, slots) == (0, ["sched/Interleaved/tick/1000"])
        assert one.get_schedule("Interleaved/tick").next_run_at == 2000
    finally:
        client_two.close()
