"""Redis time per enqueued or drained job: A/B of source trees on one private redis-server.

    .venv/bin/python bench/enqueue_cost.py [--bulk | --drain] [--n 20000] [--rounds 5] [--tree PATH ...]

Each ``--tree`` is a checkout of this project (default: this one); to compare with an older
commit, ``git worktree add /tmp/old <commit>`` and pass ``--tree /tmp/old --tree .``.  Every
round runs each tree once, in turn, in a subprocess of its own (its ``store`` package on the
path) on a fresh prefix: 2,000 warm-up enqueues, ``CONFIG RESETSTAT``, then ``--n`` single
enqueues of the throughput bench's payload, one name, one queue, both list indexes on (with
``--bulk``: ``enqueue_many`` of 1,000 jobs a call instead).  It reads the enqueue scripts'
time from ``INFO commandstats`` (``FCALL``, or ``EVALSHA`` on a server without Functions)
and the client's jobs/s, and prints the median of the rounds per tree, as Redis µs per job.
The server time is what the chunked sets' write path costs; the client rate also carries
the round trip and Python.

``--drain``: ``--n`` jobs are put in with ``enqueue_many`` (not measured), then drained by one
client the way a prefetching worker does it: ``ack_and_claim_many`` calls that ack the batch
held and claim the next ``--batch`` (default 64, what ``prefetch="auto"`` grows to on short
jobs), every outcome ``Complete``.  Per drained job: the scripts' Redis time, the Redis
commands they ran (INFO commandstats, the scripts' own calls not counted) and the server's
CPU (``used_cpu_sys + used_cpu_user`` over the drain).  No handler runs: this is the store's
share of a drain, the part every worker process shares.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.chaos import PrivateRedis  # noqa: E402

WARMUP = 2_000

# Runs in the subprocess: argv = tree, url, prefix, n, warm-up enqueues, batch (1: single).
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import redis
import store
from store import EnqueueRequest, RedisJobStore
url, prefix, n, warmup = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
batch, drain = int(sys.argv[6]), sys.argv[7] == "drain"
job_store = RedisJobStore(store.connect(url), prefix=prefix)
raw = redis.Redis.from_url(url)

def request(i):
    payload = {"user_id": i, "action": "send_email", "to": f"user{i}@example.com", "attempt": 1}
    return EnqueueRequest(name="noop", queue="default", payload=payload)

def enqueue(count):
    if batch == 1:
        for i in range(count):
            job_store.enqueue(request(i))
        return
    for start in range(0, count, batch):
        job_store.enqueue_many([request(i) for i in range(start, min(start + batch, count))])

def server_cpu():
    info = raw.info("cpu")
    return info["used_cpu_sys"] + info["used_cpu_user"]

def run_drain():
    from store import Complete
    for start in range(0, n, 1_000):
        job_store.enqueue_many([request(i) for i in range(start, min(start + 1_000, n))])
    raw.config_resetstat()
    cpu, started = server_cpu(), time.perf_counter()
    held, done, k = [], 0, 0
    while True:
        tokens = [f"t{k}-{i}" for i in range(batch)]
        k += 1
        acks = [(job.id, token, Complete(None)) for job, token in held]
        got = job_store.ack_and_claim_many(acks, queue="default", names=["noop"], tokens=tokens)
        done += len(acks)
        held = list(got.jobs)
        if not held and not acks:
            break
    assert done == n, (done, n)
    return time.perf_counter() - started, server_cpu() - cpu

if drain:
    elapsed, cpu = run_drain()
else:
    enqueue(warmup)
    raw.config_resetstat()
    cpu, started = server_cpu(), time.perf_counter()
    enqueue(n)
    elapsed, cpu = time.perf_counter() - started, server_cpu() - cpu
stats = raw.info("commandstats")
scripts = ("cmdstat_fcall", "cmdstat_evalsha")
calls = stats.get("cmdstat_fcall") or stats.get("cmdstat_evalsha") or {}
own = {
    k[len("cmdstat_"):]: v for k, v in stats.items()
    if k not in scripts and not k.startswith(("cmdstat_info", "cmdstat_config"))
}
print(json.dumps({
    "usec": calls.get("usec", 0) / n, "rate": n / elapsed, "cpu": 1e6 * cpu / n,
    "cmds": sum(v["calls"] for v in own.values()) / n,
    "own": sum(v["usec"] for v in own.values()) / n,
    "by_command": {k: v["usec"] / n for k, v in own.items()},
}))
"""


def run_once(
    python: str, tree: Path, url: str, prefix: str, n: int, batch: int, mode: str = "enqueue"
) -> dict[str, float]:
    out = subprocess.run(
        [python, "-c", CHILD, str(tree), url, prefix, str(n), str(WARMUP), str(batch), mode],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def label(tree: Path) -> str:
    """The tree's path and its commit (short hash), when git can tell."""
    commit = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{tree} ({commit or '?'}{' + changes' if dirty else ''})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="measured jobs per run")
    parser.add_argument(
        "--bulk", action="store_true", help="enqueue_many, 1,000 jobs a call (default: single)"
    )
    parser.add_argument(
        "--drain", action="store_true", help="drain by ack_and_claim_many instead of enqueueing"
    )
    parser.add_argument(
        "--batch", type=int, default=64, help="--drain: jobs claimed per call (default 64)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="runs per tree (median shown)")
    parser.add_argument("--tree", action="append", type=Path, help="a checkout (repeatable)")
    parser.add_argument("--redis-server", default=None, help="redis-server binary")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="the single enqueue's writes alone, step by step, in a Function of their own",
    )
    args = parser.parse_args(argv)
    if args.floor:
        with PrivateRedis(args.redis_server) as server:
            floor(server, args.n, args.rounds)
        return 0
    trees = [t.resolve() for t in (args.tree or [REPO])]
    results: dict[Path, list[dict[str, float]]] = {t: [] for t in trees}
    if args.bulk and args.drain:
        parser.error("--bulk or --drain, not both")
    batch = args.batch if args.drain else 1_000 if args.bulk else 1
    mode = "drain" if args.drain else "enqueue"
    with PrivateRedis(args.redis_server) as server:
        version = server.client().info("server")["redis_version"]
        for r in range(args.rounds):
            for i, tree in enumerate(trees):
                got = run_once(
                    sys.executable, tree, server.url, f"cost-{r}-{i}", args.n, batch, mode
                )
                results[tree].append(got)
                print(
                    f"round {r + 1} {tree.name}: {got['usec']:.1f} µs, {got['rate']:,.0f}/s",
                    file=sys.stderr,
                )
            server.client().flushall()  # our own server: nothing else lives there
    what = (
        f"drain by ack_and_claim_many, {batch} a call"
        if args.drain
        else "enqueue_many, 1,000 a call"
        if args.bulk
        else "single enqueue"
    )
    print(f"{what}, N = {args.n:,}, median of {args.rounds} (redis-server {version})")
    print(
        "| tree | Redis µs per job [min–max] | commands per job | server CPU µs per job "
        "| client jobs/s [min–max] |"
    )
    print("|---|---|---|---|---|")
    for tree in trees:
        usec = [g["usec"] for g in results[tree]]
        rate = [g["rate"] for g in results[tree]]
        cmds = statistics.median(g.get("cmds", 0.0) for g in results[tree])
        cpu = statistics.median(g.get("cpu", 0.0) for g in results[tree])
        print(
            f"| {label(tree)} | {statistics.median(usec):.1f} [{min(usec):.1f}–{max(usec):.1f}] "
            f"| {cmds:.1f} | {cpu:.1f} "
            f"| {statistics.median(rate):,.0f} [{min(rate):,.0f}–{max(rate):,.0f}] |"
        )
    print()
    print_split(trees, results)
    return 0


def print_split(trees: list[Path], results: dict[Path, list[dict[str, Any]]]) -> None:
    """Where a script's time goes: the commands it ran (their own time in commandstats)
    and the rest (the call, the Lua, turning arguments and replies into Redis and Lua
    values), medians of the rounds per job, with the dearest commands."""
    print(
        "| tree | script µs per job | its commands' own µs | the rest µs | dearest commands "
        "(own µs per job) |"
    )
    print("|---|---|---|---|---|")
    for tree in trees:
        runs = results[tree]
        usec = statistics.median(g["usec"] for g in runs)
        own = statistics.median(g.get("own", 0.0) for g in runs)
        names = {name for g in runs for name in g.get("by_command", {})}
        by = {
            name: statistics.median(g.get("by_command", {}).get(name, 0.0) for g in runs)
            for name in names
        }
        dearest = sorted(by.items(), key=lambda kv: -kv[1])[:6]
        listed = ", ".join(f"{name.upper()} {value:.1f}" for name, value in dearest)
        print(f"| {label(tree)} | {usec:.1f} | {own:.1f} | {usec - own:.1f} | {listed} |")


# --floor: what the single enqueue's writes cost at their least, each step adding one more
# of them, in a Function of its own with constant keys and no logic (no checks, no id
# rules, no events format): the store's script cannot cost less than the last step.
FLOOR_STEPS: tuple[tuple[str, str], ...] = (
    ("the call (12 arguments, a 2-item reply)", ""),
    ("+ INCR (the id)", "local id = 'j-' .. redis.call('INCR', '{f}:seq')"),
    (
        "+ HSET of the row (7 fields, the payload in 2 pieces)",
        "redis.call('HSET', '{f}:job:' .. id, 'name', args[5], 'queue', args[6], 'state', "
        "'waiting', 'enqueued_at', args[1], 'seq', id, 'payload', string.sub(args[7], 1, 63), "
        "'P2', string.sub(args[7], 64))",
    ),
    (
        "+ RPUSH of the index row (the chunked sets' head)",
        "if redis.call('RPUSH', '{f}:ixpend', args[1], id, '11a', args[6], args[5]) >= 640 "
        "then redis.call('DEL', '{f}:ixpend') end",
    ),
    (
        "+ ZADD to the waiting set",
        "redis.call('ZADD', '{f}:waiting:' .. args[6], 0, "
        "string.sub('0000000000000000', #id - 1) .. string.sub(id, 3) .. id)",
    ),
    (
        "+ HINCRBY of the waiting counter",
        "redis.call('HINCRBY', '{f}:counts', 'default|waiting', 1)",
    ),
    (
        "+ SADD of the queue and name",
        "redis.call('SADD', '{f}:qnames', args[6] .. '\\0' .. args[5])",
    ),
    ("+ PUBLISH of the wake", "redis.call('PUBLISH', '{f}:wake', args[6])"),
    (
        "+ XADD of the event",
        "redis.call('XADD', '{f}:events', 'MAXLEN', '~', 10000, '*', 'e', "
        "'enqueued\\0' .. args[5] .. '\\0' .. args[6] .. '\\0' .. '0\\0' .. args[1] .. '\\0\\01\\0' .. id)",
    ),
)


def _cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"] + info["used_cpu_user"])


def _plain_writes(client: Any, seq: int, now: str, payload: str) -> None:
    """The last floor step's eight writes as plain commands, one MULTI, no script."""
    jid = f"j-{seq}"
    pipe = client.pipeline(transaction=True)
    pipe.hset(
        "{f}:job:" + jid,
        mapping={
            "name": "noop",
            "queue": "default",
            "state": "waiting",
            "enqueued_at": now,
            "seq": seq,
            "payload": payload[:63],
            "P2": payload[63:],
        },
    )
    pipe.rpush("{f}:ixpend", now, jid, "11a", "default", "noop")
    pipe.zadd("{f}:waiting:default", {f"{seq:016d}{jid}": 0})
    pipe.hincrby("{f}:counts", "default|waiting", 1)
    pipe.sadd("{f}:qnames", "default\0noop")
    pipe.publish("{f}:wake", "default")
    pipe.xadd(
        "{f}:events",
        # The event record: type, name, queue, attempt, time, data, count, id (NUL-joined).
        {"e": "\0".join(("enqueued", "noop", "default", "0", now, "", "1", jid))},
        maxlen=10_000,
        approximate=True,
    )
    pipe.execute()


def floor(server: PrivateRedis, n: int, rounds: int) -> None:
    client = server.client()
    names = []
    code = ["#!lua name=enqueue_floor"]
    for k in range(len(FLOOR_STEPS)):
        body = "\n".join(step for _, step in FLOOR_STEPS[1 : k + 1])
        names.append(f"floor{k}")
        code.append(
            f"redis.register_function('floor{k}', function(keys, args)\n{body}\n"
            "return {'new', 'x'} end)"
        )
    client.function_load("\n".join(code), replace=True)
    payload = json.dumps(
        {"user_id": 1, "action": "send_email", "to": "user1@example.com", "attempt": 1}
    )

    def scripted(name: str, i: int) -> None:
        argv[0] = str(1_700_000_000_000 + i // 5)
        client.fcall(name, 1, "{f}", *argv)

    def plain_multi(i: int) -> None:
        # The id drawn beforehand: the row's key needs it, and a MULTI cannot feed one
        # command's reply into another (a script-free store would draw it from the client).
        _plain_writes(client, i + 1, str(1_700_000_000_000 + i // 5), payload)

    def plain_incr_then_multi(i: int) -> None:
        # The store's own id rule without a script: INCR, then the MULTI (two round trips).
        _plain_writes(client, client.incr("{f}:seq"), str(1_700_000_000_000 + i // 5), payload)

    argv = ["", "11", "auto", "", "noop", "default", payload, "", "", "", "0", "0"]
    steps: list[tuple[str, Any]] = [
        (what, lambda i, name=name: scripted(name, i))
        for (what, _), name in zip(FLOOR_STEPS, names, strict=True)
    ]
    steps.append(("the same 8 writes, plain commands in one MULTI (id drawn ahead)", plain_multi))
    steps.append(("the same, INCR then the MULTI (two round trips)", plain_incr_then_multi))
    rows: dict[str, list[tuple[float, float, float, float]]] = {what: [] for what, _ in steps}
    for _ in range(rounds):
        for what, call in steps:
            client.flushall()  # our own server: nothing else lives there
            for i in range(WARMUP):
                call(i)
            client.config_resetstat()
            cpu, started = _cpu(client), time.perf_counter()
            for i in range(n):
                call(WARMUP + i)
            wall, cpu = time.perf_counter() - started, _cpu(client) - cpu
            stats = client.info("commandstats")
            script = stats.get("cmdstat_fcall", {}).get("usec", 0) / n
            own = (
                sum(
                    v["usec"]
                    for k, v in stats.items()
                    if k != "cmdstat_fcall" and not k.startswith(("cmdstat_info", "cmdstat_config"))
                )
                / n
            )
            rows[what].append((script, own, cpu * 1e6 / n, n / wall))
    version = client.info("server")["redis_version"]
    print(
        f"the enqueue's writes at their least, N = {n:,}, median of {rounds} (redis-server {version})"
    )
    print(
        "| step | script µs per call | its commands' own µs "
        "| script + commands (the throughput column) | server CPU µs per call | calls/s |"
    )
    print("|---|---|---|---|---|---|")
    for what, _ in steps:
        script, own, cpu, rate = (statistics.median(r[k] for r in rows[what]) for k in range(4))
        print(
            f"| {what} | {script:.1f} | {own:.1f} | {script + own:.1f} | {cpu:.1f} | {rate:,.0f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
