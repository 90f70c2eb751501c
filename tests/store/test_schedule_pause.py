"""Pausing a schedule: tickers skip it, it stays listed, resuming continues from the next
occurrence after now (missed slots are not caught up); a schedule's last runs."""

from __future__ import annotations

from store import ScheduleRecord
from store.scheduler import tick_due_schedules


def every_minute(store, key: str = "nightly") -> ScheduleRecord:
    return store.upsert_schedule(
        ScheduleRecord(key=key, job_name="Report", queue="q", every_ms=60_000, next_run_at=60_000)
    )


def test_a_paused_schedule_does_not_fire_and_resumes_after_now(store, clock):
    every_minute(store)
    clock.set(60_000)
    assert tick_due_schedules(store) == 1
    assert store.pause_schedule("nightly")
    assert store.paused_schedules() == {"nightly"}
    clock.set(10 * 60_000)
    assert store.due_schedules() == []
    assert tick_due_schedules(store) == 0
    assert [s.key for s in store.list_schedules()] == ["nightly"]  # still listed
    assert store.resume_schedule("nightly")
    assert not store.resume_schedule("nightly")  # not paused any more
    [schedule] = store.list_schedules()
    assert schedule.next_run_at == 11 * 60_000  # the next slot after now, no catch-up
    clock.set(11 * 60_000)
    assert tick_due_schedules(store) == 1
    runs = store.schedule_last_runs(schedule)
    assert [r.id for r in runs] == [f"sched/nightly/{11 * 60_000}", "sched/nightly/60000"]


def test_pausing_an_unknown_schedule_and_removing_a_paused_one(store, redis_client, prefix):
    assert not store.pause_schedule("ghost")
    every_minute(store, "gone")
    store.pause_schedule("gone")
    assert store.remove_schedule("gone")
    assert store.paused_schedules() == set()
    assert redis_client.exists(store.keys.schedules_paused) == 0


def test_last_runs_are_found_behind_many_other_jobs_of_the_same_name(store, clock, make_store):
    """Issue 29: "none kept" for a schedule that had run; its runs hid behind 200 newer jobs
    of its name.  The ids are now matched by prefix inside the list script."""
    from store import EnqueueRequest

    schedule = every_minute(store)
    clock.set(60_000)
    assert tick_due_schedules(store) == 1
    store.enqueue_many([EnqueueRequest(name="Report", queue="q") for _ in range(700)])
    assert [r.id for r in store.schedule_last_runs(schedule)] == ["sched/nightly/60000"]
    # Without the name index it looks at the newest jobs of the store.
    plain = make_store(indexes={"name": False, "queue": True})
    assert [r.id for r in plain.schedule_last_runs(schedule)] == ["sched/nightly/60000"]
