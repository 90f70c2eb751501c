"""Flow control (issue 26, queue level): concurrency and rate limits checked inside the claim."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from store import (
    Claimed,
    Complete,
    Empty,
    Fail,
    FakeClock,
    InvalidRequestError,
    QueueLimits,
    Rate,
    RedisJobStore,
    Retry,
)
from store.flow_control import format_rate, parse_rate
from store.keys import StoreKeys
from tests.store.helpers import WAKE_TIMEOUT_MS, claim, claim_empty, claim_job, req

Q = "limited"


def fill(store: RedisJobStore, n: int, queue: str = Q) -> list[str]:
    return [store.enqueue(req(queue=queue, payload={"n": i})).id for i in range(n)]


def take(store: RedisJobStore, token: str, lock_ms: int = 30_000, queue: str = Q) -> Any:
    return claim(store, queue=queue, token=token, lock_duration_ms=lock_ms)


# ---------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "kwargs",
    [
        {"concurrency": 0},
        {"concurrency": -1},
        {"concurrency": 1.5},
        {"concurrency": True},
        {"concurrency": "3"},
        {"rate": (10, 1000)},
        {"rate": 10},
        {"concurrency": 2, "group_concurrency": 0},
        {"group_concurrency": 1.5},
        {"group_rate": (1, 1000)},
        {"concurrency": 2, "group_rate": Rate(1, 1000), "rate": 5},
    ],
)
def test_invalid_limits_are_refused_and_nothing_is_written(
    store: RedisJobStore, redis_client: Any, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(InvalidRequestError):
        store.set_queue_limits(Q, **kwargs)
    assert not redis_client.exists(store.keys.limits)
    assert store.queue_limits(Q) == QueueLimits(queue=Q)


def test_group_limits_round_trip_with_the_queue_limits(store: RedisJobStore) -> None:
    store.set_queue_limits(Q, group_concurrency=2, group_rate=Rate(10, per_ms=60_000))
    got = store.queue_limits(Q)
    assert (got.concurrency, got.rate) == (None, None)
    assert (got.group_concurrency, got.group_rate) == (2, Rate(10, 60_000))
    assert got.limited and store.limited_queues() == [Q]
    store.set_queue_limits(Q, concurrency=3)
    assert store.queue_limits(Q).group_concurrency is None


@pytest.mark.parametrize(
    ("limit", "per_ms"), [(0, 1000), (-1, 1000), (1, 0), (1, -5), (1.0, 1000), (1, 0.5)]
)
def test_an_invalid_rate_cannot_be_built(limit: Any, per_ms: Any) -> None:
    with pytest.raises(InvalidRequestError):
        Rate(limit, per_ms)


def test_an_empty_queue_name_is_refused(store: RedisJobStore) -> None:
    with pytest.raises(InvalidRequestError):
        store.set_queue_limits("", concurrency=1)


def test_limits_read_back_replace_and_clear(store: RedisJobStore, redis_client: Any) -> None:
    store.set_queue_limits(Q, concurrency=3, rate=Rate(100, per_ms=1000))
    got = store.queue_limits(Q)
    assert (got.concurrency, got.rate, got.group_concurrency, got.group_rate) == (
        3,
        Rate(100, 1000),
        None,
        None,
    )
    assert got.limited
    # The call replaces: a kind left out is no longer limited.
    store.set_queue_limits(Q, rate=Rate(5, per_ms=60_000))
    got = store.queue_limits(Q)
    assert (got.concurrency, got.rate) == (None, Rate(5, 60_000))
    store.clear_queue_limits(Q)
    assert store.queue_limits(Q) == QueueLimits(queue=Q)
    assert not redis_client.exists(store.keys.limits, store.keys.limits_rate)
    # No limit at all is the same as clearing.
    store.set_queue_limits(Q, concurrency=1)
    store.set_queue_limits(Q)
    assert store.queue_limits(Q) == QueueLimits(queue=Q)


def test_keys_live_under_the_store_tag(store: RedisJobStore) -> None:
    keys = StoreKeys(store.prefix)
    for key in (keys.limits, keys.limits_rate, keys.limits_blocked, keys.limit_active(Q)):
        assert key.startswith(keys.tag + ":")


# ---------------------------------------------------------------------- concurrency


def test_concurrency_limits_claims_across_tokens(store: RedisJobStore, clock: FakeClock) -> None:
    fill(store, 5)
    store.set_queue_limits(Q, concurrency=2)
    first = claim_job(store, queue=Q, token="a", lock_duration_ms=10_000)
    clock.advance(5)
    claim_job(store, queue=Q, token="b", lock_duration_ms=10_000)
    blocked = claim_empty(store, queue=Q, token="c")
    assert blocked.throttled == "concurrency"
    # The earliest lock expiry frees the next slot (unless an ack comes first).
    assert blocked.throttled_until == 10_000
    assert blocked.next_run_at is None
    assert store.counts(Q)["waiting"] == 3  # nothing was taken and bounced back
    usage = store.queue_limits(Q)
    assert (usage.active, usage.waiting, usage.throttled_until) == (2, 3, 10_000)
    store.ack(first.id, "a", Complete(1))
    claim_job(store, queue=Q, token="c")
    assert store.queue_limits(Q).active == 2


def test_an_expired_lock_frees_its_slot_before_recovery(
    store: RedisJobStore, clock: FakeClock
) -> None:
    fill(store, 3)
    store.set_queue_limits(Q, concurrency=1)
    held = claim_job(store, queue=Q, token="a", lock_duration_ms=1000)
    clock.advance(999)
    assert claim_empty(store, queue=Q, token="b").throttled_until == 1000
    clock.advance(1)
    # The lock expired (nobody ran stall recovery): the slot counts no longer.
    assert store.queue_limits(Q).active == 0
    second = claim_job(store, queue=Q, token="b", lock_duration_ms=1000)
    assert second.id != held.id
    assert store.get_job(held.id).state == "active"  # type: ignore[union-attr]
    # Recovery of the stalled job later does not free the live claim's slot.
    store.recover_stalled(max_stalled_count=5)
    assert claim_empty(store, queue=Q, token="c").throttled == "concurrency"


def test_a_heartbeat_keeps_the_slot(store: RedisJobStore, clock: FakeClock) -> None:
    fill(store, 2)
    store.set_queue_limits(Q, concurrency=1)
    held = claim_job(store, queue=Q, token="a", lock_duration_ms=1000)
    clock.advance(900)
    store.extend_locks([(held.id, "a")], 1000)
    clock.advance(600)
    assert claim_empty(store, queue=Q, token="b").throttled_until == 1900


@pytest.mark.parametrize("exit_path", ["release", "retry_delayed", "retry_now", "cancel", "fail"])
def test_every_exit_from_active_frees_the_slot(
    store: RedisJobStore, clock: FakeClock, exit_path: str
) -> None:
    fill(store, 3)
    store.set_queue_limits(Q, concurrency=1)
    held = claim_job(store, queue=Q, token="a")
    assert claim_empty(store, queue=Q, token="b").throttled == "concurrency"
    if exit_path == "release":
        store.release(held.id, "a")
    elif exit_path == "retry_delayed":
        store.ack(held.id, "a", Retry(delay_ms=60_000))
    elif exit_path == "retry_now":
        store.ack(held.id, "a", Retry())
    elif exit_path == "cancel":
        store.cancel(held.id)  # an active job: honoured when its run hands it back
        assert store.queue_limits(Q).active == 1
        store.release(held.id, "a")
        assert store.get_job(held.id).state == "cancelled"  # type: ignore[union-attr]
    else:
        store.ack(held.id, "a", Fail("no"))
    assert store.queue_limits(Q).active == 0
    claim_job(store, queue=Q, token="b")
    # The mark is gone with the lock: a later claim of the row counts it afresh.
    if exit_path in ("release", "retry_now"):
        assert store.queue_limits(Q).active == 1


def test_stall_recovery_frees_the_slot(store: RedisJobStore, clock: FakeClock) -> None:
    fill(store, 1)
    store.set_queue_limits(Q, concurrency=1)
    held = claim_job(store, queue=Q, token="a", lock_duration_ms=1000)
    clock.advance(2000)
    store.recover_stalled(max_stalled_count=5)
    assert store.get_job(held.id).state == "waiting"  # type: ignore[union-attr]
    assert store.queue_limits(Q).active == 0
    again = claim_job(store, queue=Q, token="b")
    assert again.id == held.id
    assert store.queue_limits(Q).active == 1


def test_jobs_active_before_the_limit_count(store: RedisJobStore) -> None:
    fill(store, 4)
    claim_job(store, queue=Q, token="a")
    claim_job(store, queue=Q, token="b")
    store.set_queue_limits(Q, concurrency=2)
    assert store.queue_limits(Q).active == 2
    assert claim_empty(store, queue=Q, token="c").throttled == "concurrency"


def test_other_queues_are_not_limited(store: RedisJobStore) -> None:
    fill(store, 2)
    fill(store, 2, queue="free")
    store.set_queue_limits(Q, concurrency=1)
    claim_job(store, queue=Q, token="a")
    claim_job(store, queue="free", token="b")
    claim_job(store, queue="free", token="c")
    assert store.queue_limits("free") == QueueLimits(queue="free", waiting=0)


# ---------------------------------------------------------------------- rate


def test_rate_is_exact_over_every_window(store: RedisJobStore, clock: FakeClock) -> None:
    """GCRA: whatever the claim pattern, no window of per_ms holds more than limit claims,
    and a throttled claim's time is exactly when the next one passes."""
    limit, per_ms = 3, 1000
    fill(store, 40)
    store.set_queue_limits(Q, rate=Rate(limit, per_ms=per_ms))
    claimed_at: list[int] = []
    step = 0
    while clock() < 10_000:
        got = take(store, f"t{step}")
        step += 1
        if isinstance(got, Claimed):
            claimed_at.append(clock())
            clock.advance(7)
            continue
        assert got.throttled == "rate"
        until = got.throttled_until
        assert until is not None and until > clock()
        # One ms early is still too early; at the time given, the claim passes.
        clock.set(until - 1)
        assert take(store, f"early{step}").throttled == "rate"  # type: ignore[union-attr]
        clock.set(until)
    for i, start in enumerate(claimed_at):
        in_window = [t for t in claimed_at[i:] if t < start + per_ms]
        assert len(in_window) <= limit, (start, in_window)
    # And the rate is used in full: about limit claims per period.
    assert len(claimed_at) >= limit * 10 - 1


def test_rate_with_a_fractional_spacing(store: RedisJobStore, clock: FakeClock) -> None:
    fill(store, 10)
    store.set_queue_limits(Q, rate=Rate(3, per_ms=1000))
    claim_job(store, queue=Q, token="a")
    blocked = claim_empty(store, queue=Q, token="b")
    # The next claim may come at 333.33 ms: it passes in millisecond 333.
    assert blocked.throttled_until == 333
    assert store.queue_limits(Q).throttled_until == 333
    clock.set(332)
    claim_empty(store, queue=Q, token="b")
    clock.set(333)
    claim_job(store, queue=Q, token="b")
    # The third at 666.67 (ms 666), the fourth at exactly 1000: three in [0, 1000).
    clock.set(666)
    claim_job(store, queue=Q, token="c")
    clock.set(999)
    assert claim_empty(store, queue=Q, token="d").throttled_until == 1000
    clock.set(1000)
    claim_job(store, queue=Q, token="d")


def test_a_rate_above_one_claim_per_millisecond(store: RedisJobStore, clock: FakeClock) -> None:
    """5,000/s is five claims in a millisecond, not one (the spacing, 0.2 ms, is exact)."""
    fill(store, 30)
    store.set_queue_limits(Q, rate=Rate(5_000, per_ms=1_000))
    for ms in range(4):
        clock.set(100 + ms)
        for i in range(5):
            claim_job(store, queue=Q, token=f"t{ms}-{i}")
        assert claim_empty(store, queue=Q, token="x").throttled_until == 101 + ms
    # Idle time earns no burst: after a pause the claims are spaced again.
    clock.set(500)
    for i in range(5):
        claim_job(store, queue=Q, token=f"late{i}")
    assert claim_empty(store, queue=Q, token="y").throttled == "rate"


def test_concurrency_and_rate_together(store: RedisJobStore, clock: FakeClock) -> None:
    fill(store, 5)
    store.set_queue_limits(Q, concurrency=1, rate=Rate(1, per_ms=100))
    held = claim_job(store, queue=Q, token="a", lock_duration_ms=50)
    blocked = claim_empty(store, queue=Q, token="b")
    # Both hold the claim back: the later of the two times.
    assert (blocked.throttled, blocked.throttled_until) == ("rate", 100)
    store.ack(held.id, "a", Complete())
    clock.set(100)
    claim_job(store, queue=Q, token="b", lock_duration_ms=50)


# ---------------------------------------------------------------------- interplay


def test_pause_wins_over_limits(store: RedisJobStore) -> None:
    fill(store, 3)
    store.set_queue_limits(Q, concurrency=1)
    claim_job(store, queue=Q, token="a")
    store.pause(Q)
    empty = claim_empty(store, queue=Q, token="b")
    assert empty.throttled is None


def test_an_empty_limited_queue_answers_empty(store: RedisJobStore) -> None:
    store.set_queue_limits(Q, concurrency=1)
    assert claim_empty(store, queue=Q, token="a").throttled is None


def test_delayed_jobs_count_only_once_due(store: RedisJobStore, clock: FakeClock) -> None:
    store.set_queue_limits(Q, concurrency=1)
    store.enqueue(req(queue=Q, delay_ms=1000))
    empty = claim_empty(store, queue=Q, token="a")
    assert (empty.throttled, empty.next_run_at) == (None, 1000)
    assert store.queue_limits(Q).active == 0
    clock.set(1000)
    claim_job(store, queue=Q, token="a")


def test_limits_changed_live_apply_at_the_next_claim(
    store: RedisJobStore, clock: FakeClock
) -> None:
    fill(store, 5)
    store.set_queue_limits(Q, concurrency=1)
    claim_job(store, queue=Q, token="a")
    assert claim_empty(store, queue=Q, token="b").throttled == "concurrency"
    store.set_queue_limits(Q, concurrency=2)
    claim_job(store, queue=Q, token="b")
    assert claim_empty(store, queue=Q, token="c").throttled == "concurrency"
    store.set_queue_limits(Q, concurrency=1, rate=Rate(1, per_ms=10_000))
    assert store.queue_limits(Q).active == 2
    store.clear_queue_limits(Q)
    claim_job(store, queue=Q, token="c")
    claim_job(store, queue=Q, token="d")


def test_ack_and_claim_surfaces_the_throttle(store: RedisJobStore, clock: FakeClock) -> None:
    fill(store, 4)
    store.set_queue_limits(Q, rate=Rate(1, per_ms=100))
    first = claim_job(store, queue=Q, token="a")
    result = store.ack_and_claim(
        first.id, "a", Complete(), queue=Q, names=["TestJob"], next_token="b"
    )
    assert isinstance(result, Empty)
    assert (result.throttled, result.throttled_until) == ("rate", 100)
    clock.set(100)
    again = claim_job(store, queue=Q, token="b")
    clock.set(200)
    result = store.ack_and_claim(
        again.id, "b", Complete(), queue=Q, names=["TestJob"], next_token="c"
    )
    assert isinstance(result, Claimed)


def test_a_batch_claim_of_a_limited_queue_takes_one_job(
    store: RedisJobStore, clock: FakeClock
) -> None:
    fill(store, 6)
    store.set_queue_limits(Q, concurrency=3)
    batch = store.ack_and_claim_many([], queue=Q, names=["TestJob"], tokens=["a", "b", "c"])
    assert len(batch.jobs) == 1
    (job, token) = batch.jobs[0]
    batch = store.ack_and_claim_many(
        [(job.id, token, Complete())], queue=Q, names=["TestJob"], tokens=["d", "e"]
    )
    assert batch.ack_errors == [None] and len(batch.jobs) == 1
    claim_job(store, queue=Q, token="f")
    claim_job(store, queue=Q, token="g")
    full = store.ack_and_claim_many([], queue=Q, names=["TestJob"], tokens=["h", "i"])
    assert full.jobs == []
    assert full.empty is not None and full.empty.throttled == "concurrency"
    assert full.empty.throttled_until == 30_000


def test_an_ack_of_a_full_queue_wakes_a_waiting_claimer(make_store: Any, clock: FakeClock) -> None:
    producer, worker = make_store(), make_store()
    fill(producer, 3)
    producer.set_queue_limits(Q, concurrency=1)
    held = claim_job(producer, queue=Q, token="a")
    blocked = claim_empty(worker, queue=Q, token="b")
    assert blocked.throttled == "concurrency"
    woke: list[bool] = []
    waiter = threading.Thread(
        target=lambda: woke.append(
            worker.await_wake([Q], blocked.wake_token, timeout_ms=WAKE_TIMEOUT_MS)
        )
    )
    waiter.start()
    producer.ack(held.id, "a", Complete())
    waiter.join(WAKE_TIMEOUT_MS / 1000 + 1)
    assert woke == [True]
    claim_job(worker, queue=Q, token="b")


def test_a_freed_slot_wakes_one_waiter_per_process(store: RedisJobStore) -> None:
    """The slot-freed message fires a single waiter of the queue (no herd)."""
    hub = store._wake
    fired: list[int] = []
    token = hub.version
    for n in range(3):
        assert hub._register([Q], token, lambda n=n: fired.append(n)) is not None
    hub.signal_one(Q)
    assert len(fired) == 1
    hub.signal(Q)
    assert sorted(fired) == [0, 1, 2]


# ---------------------------------------------------------------------- mqcheck


def test_mqcheck_knows_the_limit_keys(store: RedisJobStore, redis_client: Any) -> None:
    from store.consistency import check_store

    fill(store, 4)
    store.set_queue_limits(Q, concurrency=2, rate=Rate(100, per_ms=1000))
    held = claim_job(store, queue=Q, token="a")
    assert check_store(store).found == {}
    # A slot held by a job that is not active (here: waiting) and one of a gone job.
    waiting = store.list(queue=Q, states=["waiting"]).items[0].id
    redis_client.zadd(store.keys.limit_active(Q), {waiting: 10**12, "ghost": 10**12})
    report = check_store(store, repair=True)
    assert report.found == {"stray_lock": 1, "dangling_member": 1}, report.samples
    assert redis_client.zrange(store.keys.limit_active(Q), 0, -1) == [held.id]
    assert check_store(store).found == {}


def test_an_ack_whose_slot_is_taken_again_in_the_same_call_wakes_nobody(
    make_store: Any, redis_client: Any
) -> None:
    """ack_and_claim frees a slot and takes it in one call: no slot-freed wake goes out."""
    store = make_store()
    fill(store, 4)
    store.set_queue_limits(Q, concurrency=1)
    held = claim_job(store, queue=Q, token="a")
    assert claim_empty(store, queue=Q, token="b").throttled == "concurrency"  # marks it full
    pubsub = redis_client.pubsub()
    pubsub.subscribe(store.keys.wake)
    assert pubsub.get_message(timeout=1.0)["type"] == "subscribe"
    try:
        result = store.ack_and_claim(
            held.id, "a", Complete(), queue=Q, names=["TestJob"], next_token="c"
        )
        assert isinstance(result, Claimed)
        store.release(result.job.id, "c")  # this one leaves the slot free: one wake
        messages = []
        while (message := pubsub.get_message(timeout=0.3)) is not None:
            messages.append(message["data"])
    finally:
        pubsub.close()
    assert messages == [Q, "\0" + Q]  # release's own wake, then the slot-freed one


def test_a_pruned_job_of_a_limited_queue_leaves_no_trace(
    store: RedisJobStore, redis_client: Any, prefix: str
) -> None:
    from tests.store.helpers import traces_of

    store.set_queue_limits(Q, concurrency=2, rate=Rate(10, per_ms=1000))
    job_id = "limited-job-7e21"
    store.enqueue(req(id=job_id, queue=Q, keep={"completed": {"count": 0}}))
    claim_job(store, queue=Q, token="a")
    assert redis_client.zscore(store.keys.limit_active(Q), job_id) is not None
    store.ack(job_id, "a", Complete(1))
    assert store.get_job(job_id) is None
    assert traces_of(redis_client, prefix, job_id) == []


def test_a_fan_out_frees_the_parents_slot(store: RedisJobStore) -> None:
    from tests.flows.helpers import fanout_parent

    store.set_queue_limits(Q, concurrency=1)
    parent = fanout_parent(store, children=("a", "b"), queue=Q)
    assert store.get_job(parent).state == "waiting-children"  # type: ignore[union-attr]
    assert store.queue_limits(Q).active == 0
    fill(store, 1)
    claim_job(store, queue=Q, token="next")
    assert store.queue_limits(Q).active == 1


def test_claimers_held_back_by_the_rate_are_told_successive_slots(
    store: RedisJobStore, clock: FakeClock
) -> None:
    """No herd at the next token: each throttled claimer gets its own slot to come back at."""
    fill(store, 10)
    store.set_queue_limits(Q, rate=Rate(10, per_ms=1000))  # one claim per 100 ms
    claim_job(store, queue=Q, token="first")
    times = [claim_empty(store, queue=Q, token=f"w{n}").throttled_until for n in range(3)]
    assert times == [100, 200, 300]
    assert store.queue_limits(Q).throttled_until == 100  # the queue's own next token
    for n, at in enumerate(times):
        clock.set(at)  # type: ignore[arg-type]
        claim_job(store, queue=Q, token=f"w{n}")
    # After a claim the count starts over.
    assert claim_empty(store, queue=Q, token="late").throttled_until == 400


# ---------------------------------------------------------------------- limited_queues


def test_limited_queues_lists_limited_queues_sorted(store: RedisJobStore) -> None:
    assert store.limited_queues() == []
    store.set_queue_limits("b", concurrency=2)
    store.set_queue_limits("a", rate=Rate(5, 1000))
    store.set_queue_limits("c", concurrency=1)
    store.clear_queue_limits("c")
    assert store.limited_queues() == ["a", "b"]


def test_limited_queues_pages_the_limits_hash(store: RedisJobStore, redis_client: Any) -> None:
    names = [f"q{i:04d}" for i in range(1200)]
    for name in names:
        store.set_queue_limits(name, concurrency=1)
    calls: list[Any] = []
    real = redis_client.hscan

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("count"))
        return real(*args, **kwargs)

    redis_client.hscan = spy
    try:
        assert store.limited_queues() == names
    finally:
        del redis_client.hscan
    assert len(calls) >= 2
    assert all(count is not None and count <= 500 for count in calls)


@pytest.mark.parametrize(
    ("text", "rate", "shown"),
    [
        ("100/s", Rate(100, 1_000), "100/s"),
        (" 10 / min ", Rate(10, 60_000), "10/min"),
        ("5/h", Rate(5, 3_600_000), "5/h"),
        ("20/250ms", Rate(20, 250), "20/250ms"),
        ("3/2s", Rate(3, 2_000), "3/2s"),
        ("7/1000ms", Rate(7, 1_000), "7/s"),
    ],
)
def test_a_rate_reads_from_and_prints_as_text(text: str, rate: Rate, shown: str) -> None:
    assert parse_rate(text) == rate
    assert format_rate(rate) == shown
    assert parse_rate(format_rate(rate)) == rate


@pytest.mark.parametrize(
    "text", ["", "fast", "100", "100/", "100/day", "0/s", "5/0s", "-1/s", "1/s/2"]
)
def test_a_malformed_rate_text_is_refused(text: str) -> None:
    with pytest.raises(InvalidRequestError):
        parse_rate(text)
