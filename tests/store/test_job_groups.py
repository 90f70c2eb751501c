"""Job groups (issue 26): groups take turns at claims; group concurrency and group rate."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench.chaos import PrivateRedis
from store import (
    Claimed,
    Complete,
    Empty,
    Fail,
    FakeClock,
    InvalidRequestError,
    Rate,
    RedisJobStore,
    connect,
)
from store.codec import MAX_GROUP_BYTES
from store.consistency import check_store
from tests.store.helpers import claim, req

Q = "grouped"


def put(store: RedisJobStore, group: str | None, n: int = 1, **kw: Any) -> list[str]:
    return [
        store.enqueue(req(queue=Q, group=group, payload={"g": group, "i": i}, **kw)).id
        for i in range(n)
    ]


def take(store: RedisJobStore, token: str = "t", **kw: Any) -> Any:
    return claim(store, queue=Q, token=token, **kw)


def claimed_group(store: RedisJobStore, token: str = "t", **kw: Any) -> str | None:
    result = take(store, token, **kw)
    assert isinstance(result, Claimed), result
    return result.job.group


def ack(store: RedisJobStore, job: Any, token: str = "t") -> None:
    store.ack(job.id, token, Complete())


# ---------------------------------------------------------------------- requests


def test_group_round_trips_on_the_record(store: RedisJobStore) -> None:
    job_id = put(store, "tenant-42")[0]
    assert store.get_job(job_id).group == "tenant-42"
    plain = put(store, None)[0]
    assert store.get_job(plain).group is None


@pytest.mark.parametrize("group", ["", 7, "a\0b", "x" * (MAX_GROUP_BYTES + 1)])
def test_invalid_groups_are_refused_and_nothing_is_written(
    store: RedisJobStore, group: Any
) -> None:
    with pytest.raises(InvalidRequestError):
        store.enqueue(req(queue=Q, group=group))
    assert store.counts(Q).get("waiting", 0) == 0


def test_enqueue_many_with_groups_and_a_delayed_grouped_job(
    store: RedisJobStore, clock: FakeClock
) -> None:
    ids = store.enqueue_many(
        [req(queue=Q, group=f"g{i % 3}", payload=i) for i in range(6)]
        + [req(queue=Q, group="late", delay_ms=5_000)]
    )
    assert len(ids) == 7
    seen = [claimed_group(store) for _ in range(6)]
    # Three groups take turns: each appears once in every three claims.
    assert Counter(seen[:3]) == Counter({"g0": 1, "g1": 1, "g2": 1})
    assert isinstance(take(store), Empty)
    clock.advance(5_000)
    assert claimed_group(store) == "late"


# ---------------------------------------------------------------------- turns


def test_a_small_group_is_not_starved_behind_a_big_one(store: RedisJobStore) -> None:
    store.enqueue_many([req(queue=Q, group="big", payload=i) for i in range(200)])
    put(store, "small", 10)
    seen = [claimed_group(store) for _ in range(20)]
    # Turns alternate: the small group's ten jobs are all among the first twenty claims.
    assert seen.count("small") == 10
    assert seen[:4] in (["big", "small", "big", "small"], ["small", "big", "small", "big"])


def test_within_a_group_priority_then_fifo(store: RedisJobStore) -> None:
    low = put(store, "g")[0]
    high = store.enqueue(req(queue=Q, group="g", priority=5)).id
    later = put(store, "g")[0]
    plain = put(store, None)[0]
    # The waiting listing in claim order holds grouped and ungrouped jobs alike.
    listed = store.list_by_state(["waiting"], queue=Q, order="asc")
    assert [j.id for j in listed.items] == [high, low, later, plain]
    store.remove(plain)
    order = [take(store).job.id for _ in range(3)]
    assert order == [high, low, later]


def test_grouped_and_ungrouped_jobs_share_the_queue(store: RedisJobStore) -> None:
    put(store, None, 3)
    put(store, "g", 3)
    seen = [claimed_group(store) for _ in range(6)]
    assert seen.count(None) == 3 and seen.count("g") == 3
    assert isinstance(take(store), Empty)
    assert store.counts(Q)["active"] == 6


def test_a_group_head_with_another_name_is_left_to_its_workers(store: RedisJobStore) -> None:
    other = store.enqueue(req(name="Other", queue=Q, group="g")).id
    mine = put(store, "h")[0]
    result = take(store, names=["TestJob"])
    assert isinstance(result, Claimed) and result.job.id == mine
    assert isinstance(take(store, names=["TestJob"]), Empty)
    result = take(store, names=["Other"])
    assert isinstance(result, Claimed) and result.job.id == other


def test_cancel_remove_and_retry_keep_the_group_sets_right(store: RedisJobStore) -> None:
    a, b = put(store, "g", 2)
    store.cancel(a)
    store.remove(b)
    assert isinstance(take(store), Empty)
    c = put(store, "g")[0]
    job = take(store).job
    assert job.id == c
    store.ack(c, "t", Fail())
    store.retry(c)
    assert take(store).job.id == c
    report = check_store(store, save=False)
    assert report.problems == 0, report.samples


def test_mqcheck_finds_and_repairs_group_sets(store: RedisJobStore, redis_client: Any) -> None:
    a, b = put(store, "g", 2)
    keys = store.keys
    job_b = store.get_job(b)
    assert job_b.group == "g"
    # Damage: a's member gone from its group set, and its group out of the turns.
    member = redis_client.zrange(keys.group_wait(Q, "g"), 0, 0)[0]
    redis_client.zrem(keys.group_wait(Q, "g"), member)
    redis_client.zrem(keys.group_turns(Q), "g")
    # A stray member: a job that is not waiting in that group.
    redis_client.zadd(keys.group_wait(Q, "other"), {"0000000000000099ghost": 0})
    report = check_store(store, save=False)
    assert report.found.get("missing_from_state_set") == 2, report.samples
    assert report.found.get("dangling_member") == 1, report.samples
    check_store(store, repair=True, save=False)
    assert check_store(store, save=False).problems == 0
    assert sorted([take(store).job.id, take(store).job.id]) == sorted([a, b])


# ---------------------------------------------------------------------- group limits


def test_group_concurrency_holds_a_full_group_and_others_go_on(store: RedisJobStore) -> None:
    store.set_queue_limits(Q, group_concurrency=1)
    put(store, "a", 3)
    put(store, "b", 3)
    first = take(store).job
    second = take(store).job
    assert {first.group, second.group} == {"a", "b"}
    blocked = take(store)
    assert isinstance(blocked, Empty) and blocked.throttled == "group"
    assert blocked.throttled_until is not None
    assert store.group_usage(Q, "a").reason == "group full"
    waiting = store.list(queue=Q, states=["waiting"]).items[0]
    assert store.wait_reason(waiting).kind == "group full"
    ack(store, first)
    nxt = take(store).job
    assert nxt.group == first.group
    assert isinstance(take(store), Empty)


def test_a_group_slot_frees_when_the_lock_expires(store: RedisJobStore, clock: FakeClock) -> None:
    store.set_queue_limits(Q, group_concurrency=1)
    put(store, "a", 2)
    take(store, lock_duration_ms=1_000)
    held = take(store)
    assert isinstance(held, Empty) and held.throttled == "group"
    assert held.throttled_until == clock.now_ms() + 1_000
    clock.advance(1_001)
    # No stall recovery ran: the crashed claim stops counting once its lock expired.
    assert isinstance(take(store), Claimed)


def test_group_rate_spaces_claims_of_one_group(store: RedisJobStore, clock: FakeClock) -> None:
    start = clock.now_ms()
    store.set_queue_limits(Q, group_rate=Rate(2, per_ms=1_000))
    put(store, "a", 4)
    put(store, "b", 1)
    first = take(store).job
    ack(store, first)
    seen = [first.group]
    while True:
        result = take(store)
        if isinstance(result, Empty):
            break
        seen.append(result.job.group)
        ack(store, result.job)
    assert sorted(seen) == ["a", "b"]
    assert result.throttled == "group" and result.throttled_until == start + 500
    clock.advance(500)
    assert take(store).job.group == "a"


def test_clearing_group_limits_releases_held_groups_at_the_next_claim(
    store: RedisJobStore,
) -> None:
    store.set_queue_limits(Q, group_concurrency=1)
    put(store, "a", 2)
    take(store)
    assert isinstance(take(store), Empty)
    store.clear_queue_limits(Q)
    assert isinstance(take(store), Claimed)


def test_queue_and_group_limits_together(store: RedisJobStore) -> None:
    store.set_queue_limits(Q, concurrency=2, group_concurrency=1)
    for g in "abc":
        put(store, g, 2)
    jobs = [take(store).job, take(store).job]
    assert len({j.group for j in jobs}) == 2
    blocked = take(store)
    assert isinstance(blocked, Empty) and blocked.throttled == "concurrency"
    limits = store.queue_limits(Q)
    assert limits.group_concurrency == 1 and limits.active == 2


def test_busiest_groups_is_bounded(store: RedisJobStore) -> None:
    store.set_queue_limits(Q, group_concurrency=1)
    store.enqueue_many([req(queue=Q, group="big", payload=i) for i in range(30)])
    store.enqueue_many([req(queue=Q, group=f"s{i}") for i in range(40)])
    take(store)
    busiest = store.busiest_groups(Q, limit=3)
    assert busiest.total == 41 and len(busiest.groups) == 3
    top = busiest.groups[0]
    assert (top.group, top.waiting, top.active) == ("big", 29, 1)
    assert busiest.groups[1].waiting == 1
    with pytest.raises(InvalidRequestError):
        store.busiest_groups(Q, limit=0)


def commands_per_run(redis_client: Any, store: RedisJobStore, queue: str, runs: int) -> float:
    """Redis commands (scripts' own included) per claim + ack, over ``runs`` of them.

    Counted by the server itself (``CONFIG RESETSTAT``, then ``INFO commandstats``), so
    ``redis_client`` must be on a server nothing else uses while this runs.
    """
    redis_client.config_resetstat()
    for _ in range(runs):
        ack(store, claim(store, queue=queue, token="t").job)
    stats = redis_client.info("commandstats")
    # Every command but the measurement's own RESETSTAT (``cmdstat_config`` on Redis 6.2,
    # ``cmdstat_config|resetstat`` on 7).
    calls = sum(
        v["calls"]
        for k, v in stats.items()
        if k.startswith("cmdstat_") and not k.startswith("cmdstat_config")
    )
    return calls / runs


def test_100000_groups_claim_with_the_same_commands_as_ten(make_store: Any) -> None:
    # A redis-server of the test's own (the one on PATH, else the embedded binary): the
    # server's command statistics then count this store's commands and nothing else (on
    # the suite's shared server other workers' commands fell into the count).
    server = PrivateRedis().start()
    client = connect(server.url)
    store = make_store(client=client)
    try:
        for queue in ("few", "many"):
            store.set_queue_limits(queue, group_concurrency=2)
        store.enqueue_many([req(queue="few", group=f"t{i % 10}", payload=i) for i in range(400)])
        n = 100_000
        for start in range(0, n, 500):
            store.enqueue_many(
                [req(queue="many", group=f"t{i}") for i in range(start, start + 500)]
            )
        assert client.zcard(store.keys.group_turns("many")) == n
        # Warm both paths (script or library load, first claim of a queue) before counting.
        commands_per_run(client, store, "few", 5)
        commands_per_run(client, store, "many", 5)
        few = commands_per_run(client, store, "few", 200)
        many = commands_per_run(client, store, "many", 200)
        # Each claim looks at one group's head whatever the number of groups: the same
        # commands per claim (sorted-set operations, O(log groups) each).
        assert many <= few + 1, (few, many)
    finally:
        store.close()  # its claims' wake subscription, before its server goes
        client.close()
        server.close()


def test_oldest_waiting_sees_grouped_jobs(store: RedisJobStore, clock: FakeClock) -> None:
    grouped = put(store, "g")[0]
    clock.advance(1_000)
    put(store, None)
    oldest = store.oldest_waiting(Q)
    assert oldest is not None and oldest.id == grouped


def test_a_group_rate_above_one_claim_per_millisecond(
    store: RedisJobStore, clock: FakeClock
) -> None:
    store.set_queue_limits(Q, group_rate=Rate(3_000, per_ms=1_000))
    put(store, "a", 7)
    assert [claimed_group(store) for _ in range(3)] == ["a", "a", "a"]
    held = take(store)
    assert isinstance(held, Empty) and held.throttled == "group"
    assert held.throttled_until == clock.now_ms() + 1
    clock.advance(1)
    assert [claimed_group(store) for _ in range(3)] == ["a", "a", "a"]


def test_group_rate_reason_and_tat_cooling(store: RedisJobStore, clock: FakeClock) -> None:
    """A group's rate TAT outlives its last job until it has passed (no faster claim by
    emptying and refilling a group), then it is forgotten."""
    store.set_queue_limits(Q, group_rate=Rate(1, per_ms=1_000))
    put(store, "a", 2)
    ack(store, take(store).job)
    usage = store.group_usage(Q, "a")
    assert (usage.reason, usage.held_until) == ("group rate", clock.now_ms() + 1_000)
    assert store.wait_reason(store.list_by_state(["waiting"], queue=Q).items[0]).kind == (
        "group rate"
    )
    # Emptied by a cancel, refilled at once: still spaced by the rate.
    store.cancel(store.list_by_state(["waiting"], queue=Q).items[0].id)
    put(store, "a")
    assert take(store).throttled == "group"
    clock.advance(1_000)
    ack(store, take(store).job)
    # The last claim emptied the group: its TAT cools down in the held set, then goes.
    tat_key = store.keys.group_tat(Q)
    assert store.client.hexists(tat_key, "a")
    put(store, "a")
    assert take(store).throttled == "group"
    clock.advance(1_000)
    ack(store, take(store).job)
    clock.advance(1_000)
    put(store, "b")
    take(store)
    assert not store.client.hexists(tat_key, "a")


def test_wait_reason_of_a_row_damaged_by_hand(store: RedisJobStore, redis_client: Any) -> None:
    """A group field rewritten behind the store's back (here with a NUL, which the store
    never writes) gives a plain answer, not an error."""
    store.set_queue_limits(Q, group_concurrency=1)
    job_id = put(store, "a")[0]
    redis_client.hset(store.keys.job(job_id), "group", "x\0y")
    assert store.wait_reason(store.get_job(job_id)) is None
