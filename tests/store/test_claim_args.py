"""The claim scripts' one argument layout: Python builds it, one Lua reader reads it.

``RedisJobStore._claim_argv`` builds the ARGV of claim, ack_claim and ack_claim_many;
``read_claim_args`` (lua/lib/claim_ack.lua) reads it.  The round trip is checked by
Redis itself (EVAL of the joined helper library returning what the reader parsed),
then each entry point is driven through the store and, raw, through its script.
"""

from __future__ import annotations

from typing import Any

import pytest

from store import Claimed, Complete, Empty, Fail, JobNotFoundError, LockLostError, Retry, scripts
from store.redis_store import RedisJobStore
from tests.store.helpers import claim_job, counts_of, req

#: What the reader parsed, as plain lists (nil exit JSON shown as the string "<nil>").
READ_BACK = """
local a = read_claim_args(ARGV)
local acks = {}
for _, x in ipairs(a.acks) do
  acks[#acks + 1] = { x.id, x.token, x.outcome, x.exit_json or '<nil>', x.retry_delay }
end
return { a.now, a.lock_ms, a.queue, acks, a.tokens, a.names }
"""


def _read_back(client: Any, argv: list[Any]) -> list[Any]:
    text = f"{scripts._preamble()}\nbind(KEYS[1])\n{READ_BACK}"
    return list(client.eval(text, 1, "{p}", *argv))


def test_ackless_claim_round_trips(redis_client):
    argv = RedisJobStore._claim_argv(
        1_700_000_000_123, 30_000, "q:ueue", (), ("w-1:7",), ["A", "B"]
    )
    assert argv == [1_700_000_000_123, 30_000, "q:ueue", 0, 1, "w-1:7", "A", "B"]
    assert _read_back(redis_client, argv) == [
        1_700_000_000_123,
        30_000,
        "q:ueue",
        [],
        ["w-1:7"],
        ["A", "B"],
    ]


def test_many_acks_and_many_tokens_round_trip(redis_client):
    acks = [
        (f"job-{i}", f"tok-{i}", outcome, exit_json, delay)
        for i, (outcome, exit_json, delay) in enumerate(
            [
                ("complete", '{"v": 1}', 0),
                ("fail", '{"error": "boom"}', 0),
                ("retry", "", 2500),
                ("cancelled", "", 0),
                ("complete", "", 0),
                ("retry", '{"error": "again"}', 0),
                ("complete", "null", 0),
            ]
        )
    ]
    tokens = [f"next-{k}" for k in range(5)]
    names = ["Name one", "a:b", "ünï", "5", ""]
    argv = RedisJobStore._claim_argv(42, "1000", "default", acks, tokens, names)  # type: ignore[arg-type]
    assert len(argv) == 3 + 1 + 5 * len(acks) + 1 + len(tokens) + len(names)
    now, lock_ms, queue, read_acks, read_tokens, read_names = _read_back(redis_client, argv)
    assert (now, lock_ms, queue) == (42, 1000, "default")
    assert read_acks == [
        [job_id, token, outcome, exit_json or "<nil>", delay]
        for job_id, token, outcome, exit_json, delay in acks
    ]
    assert read_tokens == tokens
    assert read_names == names


def test_no_tokens_and_no_names_round_trip(redis_client):
    acks = [("j", "t", "complete", "", 0)]
    argv = RedisJobStore._claim_argv(5, 10, "q", acks, (), ())
    assert argv == [5, 10, "q", 1, "j", "t", "complete", "", 0, 0]
    assert _read_back(redis_client, argv) == [
        5,
        10,
        "q",
        [["j", "t", "complete", "<nil>", 0]],
        [],
        [],
    ]


def test_a_token_or_name_that_looks_like_a_count_stays_in_its_place(redis_client):
    """Counts sit at fixed places: a token "3" or a name "0" is never read as one."""
    acks = [("1", "2", "retry", "", 3)]
    argv = RedisJobStore._claim_argv(0, 1, "0", acks, ("3", "1"), ("0", "2"))
    assert _read_back(redis_client, argv) == [
        0,
        1,
        "0",
        [["1", "2", "retry", "<nil>", 3]],
        ["3", "1"],
        ["0", "2"],
    ]


def test_the_three_claim_scripts_read_the_shared_layout():
    for name in ("claim", "ack_claim", "ack_claim_many"):
        body = (scripts.LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")
        assert "read_claim_args(ARGV)" in body, name
        code = [line for line in body.splitlines() if not line.startswith("--")]
        assert not any("ARGV[" in line for line in code), name


# ------------------------------------------------------------------ the entry points


def _lock(redis_client: Any, store: RedisJobStore, job_id: str) -> list[Any]:
    return redis_client.hmget(store.keys.job(job_id), "state", "lock_token", "lock_expires_at")


def _script_argv(store: RedisJobStore, acks: Any, tokens: Any) -> list[Any]:
    """A claim script's arguments for queue "default", name "TestJob", a 30 s lock."""
    return store._claim_argv(store.now(), 30_000, "default", acks, tokens, ["TestJob"])


def test_claim_takes_the_lock_for_its_token_and_duration(store, clock, redis_client):
    clock.advance(1000)
    job = store.enqueue(req())
    claimed = store.claim(queue="default", names=["TestJob"], token="w:1", lock_duration_ms=7000)
    assert isinstance(claimed, Claimed) and claimed.job.id == job.id
    assert _lock(redis_client, store, job.id) == ["active", "w:1", "8000"]


def test_claim_names_filter(store):
    a = store.enqueue(req(name="A"))
    b = store.enqueue(req(name="B"))
    c = store.enqueue(req(name="C"))
    assert claim_job(store, names=["C", "Z"], token="t-1").id == c.id
    assert claim_job(store, names=["B", "A"], token="t-2").id == a.id  # FIFO across names
    assert isinstance(store.claim(queue="default", names=[], token="t-3"), Empty)
    assert isinstance(store.claim(queue="default", names=["A", "C"], token="t-4"), Empty)
    assert claim_job(store, names=["B"], token="t-5").id == b.id


def test_claim_script_reply_shape(store):
    job = store.enqueue(req())
    argv = _script_argv(store, (), ("t-1",))
    reply = store._run("claim", *argv)
    assert reply[:2] == ["claimed", job.id]
    assert dict(zip(reply[2][::2], reply[2][1::2], strict=True))["lock_token"] == "t-1"
    assert store._run("claim", *argv) == ["empty", ""]


def test_ack_and_claim_acks_then_claims_the_next_of_a_handled_name(store, clock, redis_client):
    first = store.enqueue(req(name="A"))
    store.enqueue(req(name="Skip"))
    second = store.enqueue(req(name="A"))
    claim_job(store, names=["A"], token="t-1")
    clock.advance(50)
    nxt = store.ack_and_claim(
        first.id,
        "t-1",
        Complete({"done": True}),
        queue="default",
        names=["A"],
        next_token="t-2",
        lock_duration_ms=900,
    )
    assert isinstance(nxt, Claimed) and nxt.job.id == second.id
    assert _lock(redis_client, store, second.id) == ["active", "t-2", "950"]
    done = store.get_job(first.id)
    assert done is not None and done.state == "completed" and done.exit == {"done": True}
    assert store.counts() == counts_of(waiting=1, active=1, completed=1)


def test_ack_and_claim_carries_the_retry_delay(store, clock):
    job = store.enqueue(req())
    claim_job(store, token="t-1")
    empty = store.ack_and_claim(
        job.id, "t-1", Retry(delay_ms=4000), queue="default", names=["TestJob"], next_token="t-2"
    )
    assert isinstance(empty, Empty) and empty.next_run_at == 4000
    again = store.get_job(job.id)
    assert again is not None and again.state == "delayed" and again.run_at == 4000


def test_ack_and_claim_lock_lost_still_claims(store):
    held = store.enqueue(req())
    other = store.enqueue(req())
    claim_job(store, token="t-1")
    with pytest.raises(LockLostError) as raised:
        store.ack_and_claim(
            held.id, "wrong", Complete(None), queue="default", names=["TestJob"], next_token="t-2"
        )
    claimed = raised.value.claimed  # type: ignore[attr-defined]
    assert isinstance(claimed, Claimed) and claimed.job.id == other.id


def test_ack_claim_script_reply_shape(store):
    first = store.enqueue(req())
    claim_job(store, token="t-1")
    argv = _script_argv(store, [(first.id, "t-1", "complete", "", 0)], ("t-2",))
    assert store._run("ack_claim", *argv) == ["ok", "default", "empty", "", ""]


def test_ack_and_claim_many_acks_each_and_claims_in_order(store, clock, redis_client):
    held = [store.enqueue(req(name="A")).id for _ in range(6)]
    for k, job_id in enumerate(held):
        assert claim_job(store, names=["A"], token=f"h-{k}").id == job_id
    waiting_b = [store.enqueue(req(name="B")).id for _ in range(3)]
    waiting_a = [store.enqueue(req(name="A")).id for _ in range(3)]
    store.enqueue(req(name="C"))
    clock.advance(10)
    outcomes = [Complete(1), Fail({"message": "x"}), Retry(delay_ms=0), Complete(None)]
    acks = [(held[k], f"h-{k}", outcome) for k, outcome in enumerate(outcomes)]
    acks.append((held[4], "stale", Complete(None)))
    acks.append(("no-such-job", "h-x", Complete(None)))
    tokens = [f"n-{k}" for k in range(5)]
    batch = store.ack_and_claim_many(
        acks, queue="default", names=["A", "B"], tokens=tokens, lock_duration_ms=2000
    )
    assert [type(e) if e else None for e in batch.ack_errors] == [
        None,
        None,
        None,
        None,
        LockLostError,
        JobNotFoundError,
    ]
    expected = [*waiting_b, *waiting_a[:2]]  # seq order across the handled names
    assert [(job.id, token) for job, token in batch.jobs] == list(
        zip(expected, tokens, strict=True)
    )
    assert batch.empty is None
    for job_id, token in zip(expected, tokens, strict=True):
        assert _lock(redis_client, store, job_id) == ["active", token, "2010"]
    states = [store.get_job(job_id).state for job_id in held[:4]]  # type: ignore[union-attr]
    assert states == ["completed", "failed", "waiting", "completed"]


def test_ack_and_claim_many_without_acks_runs_dry(store, clock):
    ready = [store.enqueue(req()).id for _ in range(2)]
    later = store.enqueue(req(delay_ms=9000))
    store.enqueue(req(name="Other"))
    batch = store.ack_and_claim_many([], queue="default", names=["TestJob"], tokens=["a", "b", "c"])
    assert batch.ack_errors == []
    assert [(job.id, token) for job, token in batch.jobs] == [(ready[0], "a"), (ready[1], "b")]
    assert batch.empty is not None and batch.empty.next_run_at == 9000
    clock.advance(9000)
    batch = store.ack_and_claim_many([], queue="default", names=["TestJob"], tokens=["d"])
    assert [(job.id, token) for job, token in batch.jobs] == [(later.id, "d")]


def test_ack_claim_many_script_reply_shape(store):
    first = store.enqueue(req())
    second = store.enqueue(req())
    claim_job(store, token="t-1")
    acks = [(first.id, "t-1", "complete", "", 0), (first.id, "t-1", "complete", "", 0)]
    argv = _script_argv(store, acks, ("t-2", "t-3"))
    acks, claimed, next_run_at = store._run("ack_claim_many", *argv)
    assert acks == ["ok", "default", "locklost", ""]
    assert claimed[0] == second.id and len(claimed) == 2
    assert next_run_at == ""


# ------------------------------------------------- a batch's set writes are held to its end


def _active(redis_client: Any, store: RedisJobStore) -> dict[str, float]:
    return dict(redis_client.zrange(store.keys.active, 0, -1, withscores=True))


def test_a_job_retried_and_claimed_again_in_one_batch_stays_in_the_active_set(
    store, clock, redis_client
):
    # The ack's removal from the active set is held to the end of the acks; the claims
    # that follow add their entries after it, so the job taken again is active.
    from store.consistency import check_store

    job = store.enqueue(req())
    claim_job(store, token="t-1")
    clock.advance(5)
    batch = store.ack_and_claim_many(
        [(job.id, "t-1", Retry(delay_ms=0))],
        queue="default",
        names=["TestJob"],
        tokens=["t-2"],
        lock_duration_ms=1000,
    )
    assert batch.ack_errors == [None]
    assert [(j.id, token) for j, token in batch.jobs] == [(job.id, "t-2")]
    assert _lock(redis_client, store, job.id) == ["active", "t-2", "1005"]
    assert _active(redis_client, store) == {job.id: 1005.0}
    assert store.counts() == counts_of(active=1)
    done = store.ack_and_claim_many(
        [(job.id, "t-2", Complete(None))], queue="default", names=["TestJob"], tokens=["t-3"]
    )
    assert done.ack_errors == [None] and done.jobs == []
    assert _active(redis_client, store) == {}
    report = check_store(store)
    assert report.found == {}, report.samples


def test_a_keep_policy_in_a_batch_prunes_over_the_jobs_acked_before_it(store, clock, redis_client):
    # Jobs without a keep policy are held; a job with one writes what is held first, so
    # its prune of the (name, state) group sees every earlier job of the batch, as it
    # would had each been acked on its own.  The job acked after it stays held.
    from store.consistency import check_store

    keep = {"completed": {"count": 2}}
    jobs = [
        store.enqueue(req(payload={"n": n}, keep=keep if n == 7 else None)).id for n in range(9)
    ]
    for k, job_id in enumerate(jobs):
        assert claim_job(store, token=f"h-{k}").id == job_id
    clock.advance(10)
    # One call, one time: among equal times the keep rule keeps the latest acked.
    acks = [(job_id, f"h-{k}", Complete(k)) for k, job_id in enumerate(jobs)]
    batch = store.ack_and_claim_many(acks, queue="default", names=["TestJob"], tokens=["t"])
    assert batch.ack_errors == [None] * 9 and batch.jobs == []
    kept = [jobs[6], jobs[7], jobs[8]]
    for key in (store.keys.finished("completed"), store.keys.terminal("TestJob", "completed")):
        assert sorted(redis_client.zrange(key, 0, -1)) == sorted(kept), key
    assert [store.get_job(job_id) is not None for job_id in jobs] == [False] * 6 + [True] * 3
    assert _active(redis_client, store) == {}
    assert store.counts() == counts_of(completed=3)
    report = check_store(store)
    assert report.found == {}, report.samples
