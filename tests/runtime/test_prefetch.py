"""The worker's prefetch: "auto" (the default) and an explicit N.

The policy (store.worker.AutoPrefetch) is checked on its own first, then in a running worker
on the test's fake clock: a handler that moves the clock stands for a job that takes that
long, so run times, waits and the wait bound are exact.  The claims a worker makes are read
by wrapping its store's ``ack_and_claim_many``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from store import EnqueueRequest, FakeClock, InvalidRequestError, Job, RedisJobStore, Worker
from store.jobs import current_job
from store.worker import AUTO_PREFETCH_MAX, LIMITED_HOLD_MS, AutoPrefetch
from tests.runtime.harness import eventually, quiet, running

# ---------------------------------------------------------------- the policy


def test_auto_prefetch_doubles_while_claims_come_back_full_up_to_the_cap() -> None:
    auto = AutoPrefetch(100)
    asked = []
    for _ in range(8):
        want = auto.want()
        asked.append(want)
        auto.claimed(want, want, None, 0)
        auto.ran(0)
    assert asked == [1, 2, 4, 8, 16, 32, 64, 64]
    assert AUTO_PREFETCH_MAX == 64


def test_auto_prefetch_fits_the_batch_to_half_the_wait_bound() -> None:
    auto = AutoPrefetch(100)
    auto.ran(10)  # the 6th job of a batch of 6 waits 5 x 10 = 50 ms
    for _ in range(6):
        auto.claimed(auto.want(), auto.want(), None, 0)
    assert auto.want() == 6
    auto.ran(50)
    assert auto.want() == 2
    auto.ran(51)
    assert auto.want() == 1


def test_auto_prefetch_stays_at_one_for_long_jobs() -> None:
    auto = AutoPrefetch(100)
    for _ in range(10):
        want = auto.want()
        assert want == 1
        auto.claimed(want, want, None, 0)
        auto.ran(250)


def test_auto_prefetch_shrinks_at_once_and_grows_back_slowly() -> None:
    auto = AutoPrefetch(100)
    for _ in range(7):
        auto.claimed(auto.want(), auto.want(), None, 0)
        auto.ran(0)
    assert auto.want() == 64
    auto.ran(500)  # one long run replaces the estimate
    assert auto.want() == 1
    wants = []
    for _ in range(40):
        auto.ran(0)
        auto.claimed(auto.want(), auto.want(), None, 0)
        wants.append(auto.want())
    assert wants[0] == 1 and wants[-1] == 64
    assert wants == sorted(wants)  # back up step by step as the estimate decays


def test_auto_prefetch_takes_what_a_shallow_queue_gave() -> None:
    auto = AutoPrefetch(100)
    for _ in range(4):
        auto.claimed(auto.want(), auto.want(), None, 0)
    assert auto.want() == 16
    auto.claimed(16, 3, None, 0)
    assert auto.want() == 3
    auto.claimed(3, 0, None, 0)
    assert auto.want() == 1


def test_auto_prefetch_claims_one_at_a_time_on_a_limited_queue_for_a_while() -> None:
    auto = AutoPrefetch(100)
    auto.claimed(1, 1, None, 0)
    auto.claimed(2, 1, "limited", 10)
    for now in (11, 500, 10 + LIMITED_HOLD_MS - 1):
        auto.claimed(1, 1, None, now)
        assert auto.want() == 1
    auto.claimed(1, 1, None, 10 + LIMITED_HOLD_MS)
    assert auto.want() == 2


def test_auto_prefetch_starts_again_at_one_after_a_hand_back() -> None:
    auto = AutoPrefetch(100)
    for _ in range(6):
        auto.claimed(auto.want(), auto.want(), None, 0)
    assert auto.want() == 64
    auto.overheld()
    assert auto.want() == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prefetch": 0}, "prefetch must be 'auto' or a whole number >= 1"),
        ({"prefetch": "many"}, "prefetch must be 'auto' or a whole number >= 1"),
        ({"prefetch": True}, "prefetch must be 'auto' or a whole number >= 1"),
        ({"prefetch": 2.5}, "prefetch must be 'auto' or a whole number >= 1"),
        ({"prefetch_wait_ms": 0}, "prefetch_wait_ms must be at least 1"),
        ({"prefetch_wait_ms": "100"}, "prefetch_wait_ms must be an integer"),
    ],
)
def test_bad_prefetch_settings_are_refused(
    store: RedisJobStore, registry: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        Worker(store, registry=registry, **kwargs)


def test_prefetch_defaults_to_auto(store: RedisJobStore, registry: Any) -> None:
    worker = Worker(store, registry=registry)
    assert worker.prefetch == "auto" and worker.prefetch_wait_ms == 500
    assert Worker(store, registry=registry, prefetch="8").prefetch == 8


# ---------------------------------------------------------------- in a running worker


class Drain:
    """A job whose handler records each run (and moves the fake clock by ``ms[payload kind]``),
    on a store whose claims are recorded, in one list of events in order."""

    def __init__(
        self,
        store: RedisJobStore,
        registry: Any,
        clock: FakeClock,
        ms: dict[str, int] | None = None,
        block: threading.Event | None = None,
    ) -> None:
        self.store = store
        self.events: list[tuple[str, Any, Any]] = []
        self.runs: Counter[str] = Counter()
        self.blocked = threading.Event()
        durations = ms or {}

        def handler(payload: dict[str, Any]) -> None:
            job_id = current_job().job_id
            self.runs[job_id] += 1
            self.events.append(("run", payload["kind"], job_id))
            if payload["kind"] == "block" and block is not None:
                self.blocked.set()
                while not block.wait(0.005):  # real time: the fake clock stands still
                    current_job().check_interrupted()
            elif durations.get(payload["kind"]):
                clock.advance(durations[payload["kind"]])

        self.job = Job("Work", handler=handler, registry=registry)
        claim = store.ack_and_claim_many

        def recorded(*args: Any, **kwargs: Any) -> Any:
            batch = claim(*args, **kwargs)
            self.events.append(("claim", len(kwargs["tokens"]), len(batch.jobs)))
            return batch

        store.ack_and_claim_many = recorded  # type: ignore[method-assign]

    def enqueue(self, *kinds: tuple[str, int]) -> list[str]:
        requests = [
            EnqueueRequest(name="Work", payload={"kind": kind})
            for kind, n in kinds
            for _ in range(n)
        ]
        return [r.id for r in self.store.enqueue_many(requests)]

    def asked(self, since: Callable[[tuple[str, Any, Any]], bool] | None = None) -> list[int]:
        events = list(self.events)
        if since is not None:
            events = events[next(i for i, e in enumerate(events) if since(e)) :]
        return [e[1] for e in events if e[0] == "claim" and e[1] > 0]

    def completed_once(self, ids: list[str]) -> None:
        # A liveness bound, not a speed target: hundreds of jobs on a loaded CI box.
        eventually(
            lambda: self.store.counts()["completed"] == len(ids),
            timeout=60,
            message="all completed",
        )
        assert all(self.runs[i] == 1 for i in ids), "a job ran more or less than once"
        assert {self.store.get_job(i).attempts_made for i in ids} == {1}


def test_a_deep_queue_of_short_jobs_grows_the_batch_to_the_cap(
    store: RedisJobStore, registry: Any, clock: FakeClock
) -> None:
    drain = Drain(store, registry, clock)
    ids = drain.enqueue(("short", 300))
    worker = Worker(store, [drain.job], registry=registry, burst=True)
    with running(worker):
        drain.completed_once(ids)
    asked = drain.asked()
    assert asked[:8] == [1, 2, 4, 8, 16, 32, 64, 64]
    assert max(asked) == AUTO_PREFETCH_MAX
    assert worker.stats["released"] == 0


def test_long_jobs_are_claimed_one_at_a_time(
    store: RedisJobStore, registry: Any, clock: FakeClock
) -> None:
    drain = Drain(store, registry, clock, ms={"long": 60})
    ids = drain.enqueue(("long", 12))
    worker = Worker(store, [drain.job], registry=registry, burst=True, prefetch_wait_ms=100)
    with running(worker):
        drain.completed_once(ids)
    assert set(drain.asked()) == {1}


def test_the_batch_fits_the_wait_bound_at_the_jobs_run_time(
    store: RedisJobStore, registry: Any, clock: FakeClock
) -> None:
    drain = Drain(store, registry, clock, ms={"10ms": 10})
    ids = drain.enqueue(("10ms", 60))
    worker = Worker(store, [drain.job], registry=registry, burst=True, prefetch_wait_ms=100)
    with running(worker):
        drain.completed_once(ids)
    # 1 + 50 ms / 10 ms: the last of a batch waits 5 runs, half the bound, and is never
    # handed back.
    assert drain.asked()[:5] == [1, 2, 4, 6, 6]
    assert max(drain.asked()) == 6
    assert worker.stats["released"] == 0


def test_the_batch_shrinks_after_long_jobs_and_grows_back(
    store: RedisJobStore, registry: Any, clock: FakeClock
) -> None:
    drain = Drain(store, registry, clock, ms={"long": 150})
    ids = drain.enqueue(("short", 64), ("long", 3), ("short", 300))
    worker = Worker(store, [drain.job], registry=registry, burst=True, prefetch_wait_ms=100)
    with running(worker):
        drain.completed_once(ids)
    first_long = next(i for i, e in enumerate(drain.events) if e[:2] == ("run", "long"))
    assert max(e[1] for e in drain.events[:first_long] if e[0] == "claim") == 64
    after_long = drain.asked(lambda e: e[:2] == ("run", "long"))
    assert after_long[0] == 1
    assert max(after_long) == 64  # and back up once the estimate decays


def test_a_prefetched_job_waits_no_longer_than_the_bound_then_is_handed_back(
    store: RedisJobStore, registry: Any, clock: FakeClock
) -> None:
    unblock = threading.Event()
    drain = Drain(store, registry, clock, block=unblock)
    ids = drain.enqueue(("short", 40), ("block", 1), ("short", 40))
    behind = ids[41:63]  # the rest of the blocker's batch of 32 (jobs 31..62)
    worker = Worker(store, [drain.job], registry=registry, burst=True, prefetch_wait_ms=100)
    with running(worker):
        assert drain.blocked.wait(5)
        assert {store.get_job(i).state for i in behind} == {"active"}
        clock.advance(100)  # they have waited exactly the bound: still held
        quiet()
        assert {store.get_job(i).state for i in behind} == {"active"}
        clock.advance(1)
        eventually(lambda: {store.get_job(i).state for i in behind} == {"waiting"})
        assert {store.get_job(i).attempts_made for i in behind} == {0}
        assert all(store.get_attempts(i) == [] for i in behind)
        assert worker.stats["released"] == len(behind)
        unblock.set()
        drain.completed_once(ids)
    # After the hand-back the taker starts again at one.
    assert drain.asked(lambda e: e[:2] == ("run", "block"))[0] == 1


def test_stopping_hands_back_the_prefetched_jobs_with_no_attempt_used(
    store: RedisJobStore, registry: Any, clock: FakeClock
) -> None:
    drain = Drain(store, registry, clock, block=threading.Event())
    ids = drain.enqueue(("short", 40), ("block", 1), ("short", 40))
    worker = Worker(store, [drain.job], registry=registry)
    with running(worker):
        assert drain.blocked.wait(5)
        assert {store.get_job(i).state for i in ids[40:63]} == {"active"}
    assert {store.get_job(i).state for i in ids[:40]} == {"completed"}
    handed_back = ids[40:]
    assert {store.get_job(i).state for i in handed_back} == {"waiting"}
    assert {store.get_job(i).attempts_made for i in handed_back} == {0}
    assert all(store.get_attempts(i) == [] for i in handed_back)
    assert worker.stats["released"] == 23  # the blocker and the 22 behind it
    assert all(drain.runs[i] == 1 for i in ids[:41])


def test_a_limited_queue_is_claimed_one_job_at_a_time(
    store: RedisJobStore, registry: Any, clock: FakeClock
) -> None:
    drain = Drain(store, registry, clock)
    store.set_queue_limits("default", concurrency=100)
    ids = drain.enqueue(("short", 50))
    worker = Worker(store, [drain.job], registry=registry, burst=True)
    with running(worker):
        drain.completed_once(ids)
    # The batch of 2 comes back cut to one ("limited"); the clock stands still, so the
    # taker keeps asking for one.
    asked = drain.asked()
    assert asked[:2] == [1, 2] and set(asked[2:]) == {1}


def test_an_explicit_prefetch_claims_exactly_that_many(
    store: RedisJobStore, registry: Any, clock: FakeClock
) -> None:
    drain = Drain(store, registry, clock, ms={"long": 150})
    ids = drain.enqueue(("long", 20))
    worker = Worker(store, [drain.job], registry=registry, burst=True, prefetch=4)
    with running(worker):
        drain.completed_once(ids)
    assert set(drain.asked()) == {4}
    assert worker.stats["released"] == 0  # no wait bound with an explicit prefetch
