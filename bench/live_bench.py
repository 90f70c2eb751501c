"""The event stream: what it costs enqueue and drain, its memory, and the event-driven wait.

    .venv/bin/python -m bench.live_bench                       # defaults, 3 runs (~9 min on 2 cores)
    .venv/bin/python -m bench.live_bench --only lag --lag-jobs 50 --lag-long-jobs 10
    .venv/bin/python -m bench.live_bench --only enqueue,drain --runs 5

Everything runs on a private redis-server (a free loopback port, no persistence, FLUSHALLed
before every measurement, shut down at exit); each measurement has a fresh key prefix.  By
default the server and every client are pinned to one CPU (``--cpu-pin same``, as in
throughput.py).

**lag**: one worker process (``store.Worker``, default options: concurrency 1, prefetch auto)
runs a handler that sleeps ``--handler-ms`` (20, 250 and 1,000 ms by default).  This process
enqueues one job, waits for it with ``Job.await_result`` and notes the wall time it returned;
the lag is that time minus the server time of the ack: the millisecond part of the id of the
job's ``completed`` event, which the ack script appends (same machine, same clock; the id
truncates to the millisecond, so a lag reads 0-1 ms long).  Two waits, alternated job by job:
*event-driven* (the default: ``RedisJobStore.wait_for_result`` blocks on the event stream) and
*polling* (``poll_schedule=`` 10 ms doubling to 1 s, the delays of ``await_result`` before the
event stream).  Targets: event-driven median <= 5 ms and p99 <= 20 ms.

**enqueue**, **drain** (what the stream costs): every variant twice, with the stream at its
default cap (10,000 events) and with ``set_events_max_len(0)`` (no events written), in an
order rotated from run to run.  *enqueue*: ``--n`` single ``enqueue`` calls, and ``--bulk-n``
jobs in ``enqueue_many`` calls of 500 (one script each), after ``--prefill`` jobs that fill
the stream to its cap (a store that has run a while trims at every append).  *drain*:
limits_bench's drain (``--procs`` worker processes, burst mode) of ``--drain-n`` no-op jobs,
and its steady claims pass (one client: claim, ack, claim, ack, ...).  Each with the store
scripts' Redis time per job and, inside it, XADD's (``INFO commandstats``).  Target: with the
stream >= 0.95x the jobs/s without, for each.

**memory**: ``--memory-jobs`` jobs enqueued and drained as above with the stream on, its
XLEN sampled every 20 ms throughout (it must stay within the cap plus one stream node:
``MAXLEN ~`` trims whole nodes), then ``MEMORY USAGE`` of the stream at the cap and bytes per
entry.

**profile**: where an event's Redis time goes.  A Lua loop appends ``--profile-events``
events piece by piece (lib/events.lua's emit as it is; without the cap's GET; without the
``string.format``; without ``MAXLEN ~``; the seven fields joined into one; the GET and the
format alone), all in one script call (warm caches, as in ``enqueue_many``) and one event per
call (as around a single enqueue, claim or ack); µs per event from ``INFO commandstats``.

The Markdown report goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make `bench.*` and `store` importable
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.common import (  # noqa: E402
    chunks,
    fmt_per_s,
    interrupt_on_sigterm,
    med,
    payload,
    percentile,
    quiet_logging,
    read_commandstats,
    rotated,
    spread,
    tree_commit,
)
from bench.limits_bench import (  # noqa: E402
    NAME,
    QUEUE,
    SCRIPT_COMMANDS,
    ClaimRun,
    DrainRun,
    claim_run,
    drain_run,
    enqueue_noops,
)
from bench.throughput import (  # noqa: E402
    CPU_PIN_MODES,
    CpuPlan,
    PrivateRedis,
    find_redis_server,
    machine_lines,
    make_cpu_plan,
)
from store import (  # noqa: E402
    EnqueueRequest,
    Job,
    RedisJobStore,
    StoreRegistry,
    Worker,
    connect,
)
from store.events import DEFAULT_EVENTS_MAX_LEN  # noqa: E402

LAG_WORKER_FLAG = "--lag-worker"
LAG_NAME = "sleeper"
LAG_MEDIAN_TARGET_MS = 5.0
LAG_P99_TARGET_MS = 20.0
COST_TARGET = 0.95
#: Jobs per enqueue_many call in the bulk variant (one script call each).
BULK_BATCH = 500
#: Idle time between two lag jobs, so the worker is waiting again when the next one comes.
LAG_GAP_S = 0.02

EVENTS_ON = f"stream on (cap {DEFAULT_EVENTS_MAX_LEN:,})"
EVENTS_OFF = "stream off (cap 0)"
#: The stream's cap per cost variant (None: the default, no setting written).
CAPS: dict[str, int | None] = {EVENTS_ON: None, EVENTS_OFF: 0}

WAIT_EVENTS = "event-driven"
WAIT_POLL = "polling 10 ms → 1 s"


def old_poll_delays() -> Iterator[float]:
    """``await_result``'s delays before the event stream: 10 ms, doubling, at most 1 s."""
    return itertools.accumulate(itertools.repeat(2.0), lambda d, f: min(1.0, d * f), initial=0.01)


def _store(url: str, prefix: str, cap: int | None = None) -> RedisJobStore:
    jobs = RedisJobStore(connect(url), prefix=prefix)
    if cap is not None:
        jobs.set_events_max_len(cap)
    return jobs


def _usec(stats: dict[str, tuple[int, int]], *names: str) -> int:
    return sum(stats.get(name, (0, 0))[1] for name in names)


def _calls(stats: dict[str, tuple[int, int]], *names: str) -> int:
    return sum(stats.get(name, (0, 0))[0] for name in names)


# --------------------------------------------------------------------------------------------
# Part 1: await_result lag


def lag_worker(argv: Sequence[str]) -> None:
    """The lag part's worker process: a handler sleeping ``payload["ms"]``, until SIGTERM."""
    url, prefix = argv[0], argv[1]
    quiet_logging()
    jobs = RedisJobStore(connect(url), prefix=prefix)
    registry = StoreRegistry()
    registry.register(jobs)

    def sleeper(data: dict[str, Any]) -> None:
        time.sleep(data["ms"] / 1000)

    sleeping = Job(LAG_NAME, queue=QUEUE, registry=registry, handler=sleeper)
    Worker(jobs, [sleeping], registry=registry).run()
    jobs.close()


@dataclass
class LagRuns:
    """Lags (ms) per (handler ms, wait) and how long the jobs ran."""

    lags: dict[tuple[int, str], list[float]] = field(default_factory=dict)


def _await_once(jobs: RedisJobStore, producer: Job, ms: int, wait: str, timeout_s: float) -> float:
    """Enqueue one sleeping job, await it, return the lag in ms (ack -> await returned)."""
    cursor = jobs.last_event_id()
    job_id = producer.enqueue({"ms": ms})
    schedule = old_poll_delays() if wait == WAIT_POLL else None
    producer.await_result(job_id, timeout_s=timeout_s, poll_schedule=schedule)
    returned_ms = time.time() * 1000
    for event in jobs.events(cursor, count=1000):
        if event.job_id == job_id and event.type == "completed":
            return returned_ms - int(event.id.split("-", 1)[0])
    raise RuntimeError(f"job {job_id}: no completed event after {cursor}")


def run_lag(url: str, args: argparse.Namespace, cpu: CpuPlan, token: str) -> LagRuns:
    prefix = f"lag{token}"
    jobs = _store(url, prefix)
    registry = StoreRegistry()
    registry.register(jobs)
    producer = Job(LAG_NAME, queue=QUEUE, registry=registry)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "bench.live_bench", LAG_WORKER_FLAG, url, prefix],
        cwd=ROOT,
        env=env,
        preexec_fn=cpu.client_preexec(),
    )
    result = LagRuns()
    try:
        for _ in range(3):  # the worker is up and serving; connections are warm
            producer.await_result(producer.enqueue({"ms": 0}), timeout_s=60)
        waits = [WAIT_EVENTS, WAIT_POLL]
        for ms in args.handler_ms:
            count = args.lag_long_jobs if ms >= 1000 else args.lag_jobs
            for i in range(count):
                for wait in rotated(waits, i):
                    lag = _await_once(jobs, producer, ms, wait, timeout_s=60 + ms / 1000)
                    result.lags.setdefault((ms, wait), []).append(lag)
                    time.sleep(LAG_GAP_S)
            for wait in waits:
                lags = result.lags[(ms, wait)]
                print(
                    f"lag, {ms} ms handler, {wait}: median {med(lags):.1f} ms, "
                    f"p99 {percentile(lags, 99):.1f} ms over {len(lags)} jobs",
                    file=sys.stderr,
                )
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        jobs.close()
    return result


# --------------------------------------------------------------------------------------------
# Part 2: enqueue with and without the stream


@dataclass
class CostRun:
    """One timed section: jobs, seconds, and INFO commandstats over it."""

    n: int
    seconds: float
    stats: dict[str, tuple[int, int]]
    #: False when only the scripts' total is known (the claims loop): no per-command figures.
    detailed: bool = True

    @property
    def rate(self) -> float:
        return self.n / self.seconds

    @property
    def script_us(self) -> float:
        return _usec(self.stats, *SCRIPT_COMMANDS) / self.n

    @property
    def xadd_us(self) -> float:
        return _usec(self.stats, "xadd") / self.n

    @property
    def xadds(self) -> float:
        return _calls(self.stats, "xadd") / self.n

    @property
    def commands(self) -> float:
        skip = ("config|resetstat", "info")
        return sum(c for name, (c, _) in self.stats.items() if name not in skip) / self.n


def enqueue_run(
    url: str, prefix: str, cap: int | None, how: str, args: argparse.Namespace
) -> CostRun:
    """``how`` "single": ``--n`` enqueue calls; "bulk": ``--bulk-n`` jobs, 500 per call."""
    jobs = _store(url, prefix, cap)
    raw = redis.Redis.from_url(url)
    try:
        enqueue_noops(jobs, args.prefill)  # the stream at its cap, as in a store that has run
        raw.config_resetstat()
        started = time.perf_counter()
        if how == "single":
            n = args.n
            for i in range(n):
                jobs.enqueue(EnqueueRequest(name=NAME, queue=QUEUE, payload=payload(i)))
        else:
            n = args.bulk_n
            for part in chunks(n, BULK_BATCH):
                jobs.enqueue_many(
                    [EnqueueRequest(name=NAME, queue=QUEUE, payload=payload(i)) for i in part]
                )
        seconds = time.perf_counter() - started
        return CostRun(n, seconds, read_commandstats(raw))
    finally:
        raw.close()
        jobs.close()


# --------------------------------------------------------------------------------------------
# Part 3: drain (limits_bench's worker drain and steady claims) with and without the stream


def drain_cost(
    url: str, prefix: str, cap: int | None, args: argparse.Namespace, cpu: CpuPlan
) -> tuple[DrainRun, CostRun]:
    _store(url, prefix, cap).close()
    drain_args = argparse.Namespace(
        n=args.drain_n,
        procs=args.procs,
        worker_concurrency=args.worker_concurrency,
        prefetch=args.prefetch,
    )
    drained = drain_run(url, prefix, None, drain_args, cpu)
    raw = redis.Redis.from_url(url)
    try:  # drain_run reset the stats at the start signal; its last call was one counts()
        return drained, CostRun(drained.n, drained.seconds, read_commandstats(raw))
    finally:
        raw.close()


def claims_cost(url: str, prefix: str, cap: int | None, args: argparse.Namespace) -> ClaimRun:
    _store(url, prefix, cap).close()
    return claim_run(url, prefix, {}, args.claims_n, args.warmup, "steady")


# --------------------------------------------------------------------------------------------
# Part 4: the stream's memory and length while jobs pass


@dataclass
class MemoryRun:
    jobs: int
    events: int  # entries appended (the stream's last id sequence is not a count: XINFO)
    max_len: int
    samples: int
    final_len: int
    usage: int
    nodes: int
    node_entries: int
    node_bytes: int
    seconds: float

    @property
    def bound(self) -> int:
        return DEFAULT_EVENTS_MAX_LEN + self.node_entries


def run_memory(url: str, args: argparse.Namespace, cpu: CpuPlan, token: str) -> MemoryRun:
    prefix = f"mem{token}"
    key = f"{{{prefix}}}:events"
    sampler = redis.Redis.from_url(url)
    stop = threading.Event()
    seen = {"max": 0, "samples": 0}

    def sample() -> None:
        while not stop.is_set():
            seen["max"] = max(seen["max"], int(sampler.xlen(key)))
            seen["samples"] += 1
            stop.wait(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    started = time.monotonic()
    thread.start()
    try:
        drain_args = argparse.Namespace(
            n=args.memory_jobs,
            procs=args.procs,
            worker_concurrency=args.worker_concurrency,
            prefetch=args.prefetch,
        )
        drain_run(url, prefix, None, drain_args, cpu)
    finally:
        stop.set()
        thread.join()
    seconds = time.monotonic() - started
    try:
        info = sampler.xinfo_stream(key)
        config = {str(k): str(v) for k, v in sampler.config_get("stream-node-max-*").items()}
        return MemoryRun(
            jobs=args.memory_jobs,
            events=int(info.get("entries-added", 0)),
            max_len=max(seen["max"], int(info["length"])),
            samples=seen["samples"],
            final_len=int(info["length"]),
            usage=int(sampler.memory_usage(key, samples=0) or 0),
            nodes=int(info["radix-tree-keys"]),
            node_entries=int(config["stream-node-max-entries"]),
            node_bytes=int(config["stream-node-max-bytes"]),
            seconds=seconds,
        )
    finally:
        sampler.close()


# --------------------------------------------------------------------------------------------
# Part 5: where an event's Redis time goes (a profile of lib/events.lua's emit, piece by piece)

#: One script call appends ARGV[1] events the way the variant ARGV[2] says, to a stream at its
#: cap (KEYS[1]; the cap setting KEYS[2], as the store keeps it) or, for "no MAXLEN", to the
#: untrimmed KEYS[3].  "emit" does what EVENTS.emit does for the first event of a store call.
PROFILE_SCRIPT = """
local n, v, now = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local stream, cap_key, untrimmed = KEYS[1], KEYS[2], KEYS[3]
for i = 1, n do
  local id = 'j' .. i
  if v == 'emit' then
    local cap = tonumber(redis.call('GET', cap_key) or '') or 10000
    redis.call('XADD', stream, 'MAXLEN', '~', cap, '*', 't', 'completed', 'j', id, 'n', 'noop',
      'q', 'bench', 'a', 1, 'at', string.format('%.0f', now), 'd', '')
  elseif v == 'no GET' then
    redis.call('XADD', stream, 'MAXLEN', '~', 10000, '*', 't', 'completed', 'j', id, 'n', 'noop',
      'q', 'bench', 'a', 1, 'at', string.format('%.0f', now), 'd', '')
  elseif v == 'no GET, no format' then
    redis.call('XADD', stream, 'MAXLEN', '~', 10000, '*', 't', 'completed', 'j', id, 'n', 'noop',
      'q', 'bench', 'a', 1, 'at', now, 'd', '')
  elseif v == 'no MAXLEN' then
    redis.call('XADD', untrimmed, '*', 't', 'completed', 'j', id, 'n', 'noop',
      'q', 'bench', 'a', 1, 'at', now, 'd', '')
  elseif v == 'one field' then
    redis.call('XADD', stream, 'MAXLEN', '~', 10000, '*',
      'e', 'completed|' .. id .. '|noop|bench|1|' .. now .. '|')
  elseif v == 'one field, no MAXLEN' then
    redis.call('XADD', untrimmed, '*', 'e', 'completed|' .. id .. '|noop|bench|1|' .. now .. '|')
  elseif v == 'GET' then
    redis.call('GET', cap_key)
  elseif v == 'format' then
    string.format('%.0f', now)
  end
end
return n
"""
#: The profile's variants, with what each one's time means (the empty loop is taken out).
PROFILE_VARIANTS = {
    "emit": "what a store call pays for its first event: GET of the cap, format, XADD ~",
    "no GET": "the same when the cap is already read (every later event of the call)",
    "no GET, no format": "the same with the time passed as a number (no string.format)",
    "no MAXLEN": "XADD without trimming (a stream that grows)",
    "one field": "the seven fields joined into one value, MAXLEN ~",
    "one field, no MAXLEN": "one value, no trimming",
    "GET": "the cap's GET alone",
    "format": "string.format('%.0f', now) alone",
}
PROFILE_EMPTY = "empty"


#: The profile's two ways of calling: all events in one script call (warm: enqueue_many's
#: 500 events), and one event per call with this client running between the calls (the
#: caches cold again each time: a single enqueue, a claim, an ack).
PROFILE_MODES = ("loop", "per call")


@dataclass
class Profile:
    #: (mode, variant) -> µs per event of each repetition, the empty loop's time taken out
    times: dict[tuple[str, str], list[float]] = field(default_factory=dict)


def run_profile(url: str, args: argparse.Namespace, token: str) -> Profile:
    client = redis.Redis.from_url(url)
    keys = [f"{{p{token}}}:events", f"{{p{token}}}:events:cap", f"{{p{token}}}:untrimmed"]
    script = client.register_script(PROFILE_SCRIPT)
    now = str(int(time.time() * 1000))
    n = args.profile_events
    script(keys=keys, args=[DEFAULT_EVENTS_MAX_LEN * 2, "no GET", now])  # the stream at its cap
    raw: dict[tuple[str, str], list[float]] = {}
    try:
        for rep in range(args.profile_reps):
            for mode in PROFILE_MODES:
                for variant in rotated([PROFILE_EMPTY, *PROFILE_VARIANTS], rep):
                    client.delete(keys[2])
                    client.config_resetstat()
                    if mode == "loop":
                        script(keys=keys, args=[n, variant, now])
                    else:
                        for _ in range(n):
                            script(keys=keys, args=[1, variant, now])
                    usec = _usec(read_commandstats(client), "evalsha", "eval")
                    raw.setdefault((mode, variant), []).append(usec / n)
        profile = Profile()
        for mode in PROFILE_MODES:
            empty = med(raw[(mode, PROFILE_EMPTY)])
            for variant in PROFILE_VARIANTS:
                profile.times[(mode, variant)] = [t - empty for t in raw[(mode, variant)]]
        return profile
    finally:
        client.delete(*keys)
        client.close()


# --------------------------------------------------------------------------------------------
# Report


def render_profile(profile: Profile, args: argparse.Namespace) -> list[str]:
    out = [
        "### Where an event's Redis time goes",
        "",
        f"{args.profile_events:,} events appended the way each row says, to a stream at its "
        "10,000 cap (*no MAXLEN*: to another, untrimmed one), by a Lua loop: *in one call* "
        "(the caches warm, as in an `enqueue_many` of 500) and *one per call* (an EVALSHA per "
        "event, this client running between the calls, as around a single enqueue, claim or "
        "ack). µs per event = the EVALSHA time in `INFO commandstats` ÷ events − that of the "
        f"same loop doing nothing, median [min–max] of {args.profile_reps} repetitions "
        "(variants rotated). A script's time includes what XADD's own figure leaves out: "
        "passing its arguments from Lua to Redis and the reply back.",
        "",
        "| variant | µs/event, in one call | µs/event, one per call | what |",
        "|---|---:|---:|---|",
    ]
    for variant, what in PROFILE_VARIANTS.items():
        cells = [
            spread(profile.times[(mode, variant)], lambda v: f"{v:.2f}") for mode in PROFILE_MODES
        ]
        out.append(f"| {variant} | {' | '.join(cells)} | {what} |")
    return [*out, ""]


def _verdict(ok: bool) -> str:
    return "**PASS**" if ok else "**FAIL**"


def render_lag(lag: LagRuns, args: argparse.Namespace) -> list[str]:
    out = [
        "### `await_result` lag: from the ack to the call returning",
        "",
        "One worker process (`store.Worker`, concurrency 1, prefetch auto), a handler sleeping the "
        "given time; one job at a time, the two waits alternated job by job. Lag = wall time "
        "when `Job.await_result` returned − the server time of the ack (the ms part of the "
        "`completed` event's id; ids truncate to the ms, so a lag reads 0–1 ms long). "
        f"Targets for the event-driven wait: median ≤ {LAG_MEDIAN_TARGET_MS:g} ms, "
        f"p99 ≤ {LAG_P99_TARGET_MS:g} ms.",
        "",
        "| handler | wait | jobs | median ms | p90 ms | p99 ms | max ms | target |",
        "|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for (ms, wait), lags in lag.lags.items():
        p50, p99 = med(lags), percentile(lags, 99)
        verdict = (
            f"median {_verdict(p50 <= LAG_MEDIAN_TARGET_MS)}, "
            f"p99 {_verdict(p99 <= LAG_P99_TARGET_MS)}"
            if wait == WAIT_EVENTS
            else "—"
        )
        out.append(
            f"| {ms:,} ms | {wait} | {len(lags)} | {p50:.1f} | {percentile(lags, 90):.1f} "
            f"| {p99:.1f} | {max(lags):.1f} | {verdict} |"
        )
    return [*out, ""]


def _cost_rows(label: str, runs: dict[str, list[CostRun]]) -> tuple[list[str], bool]:
    on, off = runs[EVENTS_ON], runs[EVENTS_OFF]
    # Paired: run i measured both variants back to back, so a machine that speeds up or
    # slows down over the runs (caches warming, other work) moves both of a pair alike.
    ratio = med([a.rate / b.rate for a, b in zip(on, off, strict=True)])
    rows = []
    for variant, rs in ((EVENTS_OFF, off), (EVENTS_ON, on)):
        is_on = variant == EVENTS_ON

        def detail(value: Callable[[CostRun], str], rs: list[CostRun] = rs) -> str:
            # the median run's figure (by jobs/s); "—" where only the scripts' total is known
            if not all(r.detailed for r in rs):
                return "—"
            return value(sorted(rs, key=lambda r: r.rate)[len(rs) // 2])

        rows.append(
            f"| {label} | {variant} | {spread([r.rate for r in rs], fmt_per_s)} "
            f"| {f'{ratio:.3f}×' if is_on else '1×'} "
            f"| {med([r.script_us for r in rs]):.1f} "
            f"| {detail(lambda r: f'{r.xadd_us:.1f}')} | {detail(lambda r: f'{r.xadds:.2f}')} "
            f"| {detail(lambda r: f'{r.commands:.1f}')} "
            f"| {_verdict(ratio >= COST_TARGET) if is_on else ''} |"
        )
    return rows, ratio >= COST_TARGET


def render_cost(results: Results, args: argparse.Namespace) -> tuple[list[str], list[bool]]:
    out = [
        "### What the stream costs: the same work with the stream and without, same run",
        "",
        "jobs/s median [min–max] of the runs; *÷ off*: the median of the runs' ratios (each "
        "run measures both variants back to back, so drift from run to run cancels; target ≥ "
        f"{COST_TARGET:.2f}×). Redis µs per job from `INFO commandstats` over the timed "
        "section, medians: the store scripts' (FCALL/EVALSHA; the commands inside included), "
        "the XADDs' inside them, and all commands per job.",
        "",
        "| work | stream | jobs/s | ÷ off | script µs/job | XADD µs/job | XADDs/job "
        f"| commands/job | target ≥ {COST_TARGET:.2f}× |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    verdicts = []
    labels = {
        "single": f"`enqueue`, {args.n:,} calls",
        "bulk": f"`enqueue_many`, {args.bulk_n:,} jobs in calls of {BULK_BATCH}",
        "drain": f"drain, {args.drain_n:,} jobs, {args.procs} workers × {args.worker_concurrency}, "
        f"prefetch {args.prefetch}",
        "claims": f"claim + ack loop, {args.claims_n:,} jobs",
    }
    for what, label in labels.items():
        runs = results.cost.get(what)
        if not runs:
            continue
        rows, ok = _cost_rows(label, runs)
        out += rows
        verdicts.append(ok)
    return [*out, ""], verdicts


def render_memory(mem: MemoryRun) -> tuple[list[str], bool]:
    ok = mem.max_len <= mem.bound
    per_entry = mem.usage / mem.final_len if mem.final_len else 0.0
    out = [
        f"### The stream while {mem.jobs:,} jobs pass (enqueued, then drained by the workers)",
        "",
        f"XLEN sampled every 20 ms ({mem.samples:,} samples over {mem.seconds:.0f} s); "
        f"the bound is the cap plus one stream node (`stream-node-max-entries` "
        f"{mem.node_entries}, `-bytes` {mem.node_bytes}). `MEMORY USAGE … SAMPLES 0` at the end.",
        "",
        "| events appended | cap | max XLEN seen | bound | XLEN at the end | nodes "
        "| MEMORY USAGE | bytes/entry | XLEN ≤ bound |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        f"| {mem.events:,} | {DEFAULT_EVENTS_MAX_LEN:,} | {mem.max_len:,} | {mem.bound:,} "
        f"| {mem.final_len:,} | {mem.nodes:,} | {mem.usage / 1e6:.2f} MB | {per_entry:.0f} "
        f"| {_verdict(ok)} |",
        "",
    ]
    return out, ok


# --------------------------------------------------------------------------------------------
# Main


@dataclass
class Results:
    lag: LagRuns | None = None
    #: work ("single", "bulk", "drain", "claims") -> stream variant -> runs
    cost: dict[str, dict[str, list[CostRun]]] = field(default_factory=dict)
    memory: MemoryRun | None = None
    profile: Profile | None = None

    def add(self, what: str, variant: str, run: CostRun) -> None:
        self.cost.setdefault(what, {}).setdefault(variant, []).append(run)


PARTS = ("lag", "enqueue", "drain", "memory", "profile")


def parse_cli(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", default=",".join(PARTS), help=f"parts: {', '.join(PARTS)}")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of enqueue and drain")
    parser.add_argument(
        "--handler-ms", default="20,250,1000", help="the lag part's handler sleeps (ms)"
    )
    parser.add_argument("--lag-jobs", type=int, default=200, help="jobs per wait, handler < 1 s")
    parser.add_argument(
        "--lag-long-jobs", type=int, default=30, help="jobs per wait, handler >= 1 s"
    )
    parser.add_argument("--n", type=int, default=20_000, help="single enqueue calls per run")
    parser.add_argument("--bulk-n", type=int, default=100_000, help="enqueue_many jobs per run")
    parser.add_argument(
        "--prefill", type=int, default=DEFAULT_EVENTS_MAX_LEN, help="jobs enqueued untimed first"
    )
    parser.add_argument("--drain-n", type=int, default=20_000, help="jobs per worker drain")
    parser.add_argument("--claims-n", type=int, default=20_000, help="jobs per claims loop")
    parser.add_argument("--warmup", type=int, default=1_000, help="unmeasured claims first")
    parser.add_argument("--procs", type=int, default=2, help="worker processes of the drain")
    parser.add_argument("--worker-concurrency", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=1)
    parser.add_argument("--memory-jobs", type=int, default=100_000)
    parser.add_argument("--profile-events", type=int, default=5_000, help="events per call")
    parser.add_argument(
        "--profile-reps", type=int, default=5, help="repetitions of each profile variant"
    )
    parser.add_argument("--cpu-pin", choices=CPU_PIN_MODES, default="same")
    parser.add_argument("--redis-server", default=None, help="redis-server binary")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    if not args.parts or set(args.parts) - set(PARTS):
        parser.error(f"--only takes a comma-separated subset of {', '.join(PARTS)}")
    try:
        args.handler_ms = [int(v) for v in args.handler_ms.split(",") if v.strip()]
    except ValueError:
        parser.error("--handler-ms takes integers, e.g. 20,250,1000")
    sizes = (
        args.runs, args.lag_jobs, args.lag_long_jobs, args.n, args.bulk_n, args.drain_n,
        args.claims_n, args.procs, args.worker_concurrency, args.prefetch, args.memory_jobs,
        args.profile_events, args.profile_reps,
    )  # fmt: skip
    if min(sizes) < 1 or not args.handler_ms or min(args.handler_ms) < 0:
        parser.error("sizes, counts and --handler-ms must be positive")
    if args.warmup < 0 or args.prefill < 0:
        parser.error("--warmup and --prefill must be >= 0")
    return args


def _progress(run: int, what: str, variant: str, got: CostRun) -> None:
    print(
        f"run {run + 1} {what}, {variant}: {got.rate:,.0f} jobs/s, script {got.script_us:.1f} "
        f"µs/job (XADD {got.xadd_us:.1f})",
        file=sys.stderr,
    )


def measure(server: PrivateRedis, args: argparse.Namespace, cpu: CpuPlan, results: Results) -> None:
    control = redis.Redis.from_url(server.url)
    token = uuid.uuid4().hex[:8]
    try:
        if "lag" in args.parts:
            control.flushall()
            results.lag = run_lag(server.url, args, cpu, token)
        variants = list(CAPS)
        for r in range(args.runs):
            if "enqueue" in args.parts:
                for how in ("single", "bulk"):
                    for variant in rotated(variants, r):
                        control.flushall()
                        got = enqueue_run(server.url, f"e{token}{r}", CAPS[variant], how, args)
                        results.add(how, variant, got)
                        _progress(r, f"enqueue {how}", variant, got)
            if "drain" in args.parts:
                for variant in rotated(variants, r):
                    control.flushall()
                    drained, got = drain_cost(server.url, f"d{token}{r}", CAPS[variant], args, cpu)
                    results.add("drain", variant, got)
                    _progress(r, "drain", variant, got)
                for variant in rotated(variants, r):
                    control.flushall()
                    claims = claims_cost(server.url, f"c{token}{r}", CAPS[variant], args)
                    got = CostRun(
                        claims.n, claims.seconds, {"fcall": (claims.n, claims.claim_us)}, False
                    )
                    results.add("claims", variant, got)
                    _progress(r, "claims", variant, got)
        if "memory" in args.parts:
            control.flushall()
            results.memory = run_memory(server.url, args, cpu, token)
            print(
                f"memory: max XLEN {results.memory.max_len:,}, "
                f"{results.memory.usage:,} bytes at {results.memory.final_len:,} entries",
                file=sys.stderr,
            )
        if "profile" in args.parts:
            control.flushall()
            results.profile = run_profile(server.url, args, token)
            print(
                "profile: "
                + ", ".join(
                    f"{mode} {v} {med(t):.2f} µs" for (mode, v), t in results.profile.times.items()
                ),
                file=sys.stderr,
            )
    finally:
        control.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_cli(argv)
    quiet_logging()
    binary = args.redis_server or find_redis_server()
    if binary is None:
        sys.exit("live_bench: no redis-server binary found (--redis-server BIN)")
    interrupt_on_sigterm()
    cpu = make_cpu_plan(args.cpu_pin)
    pin = cpu.client_preexec()
    if pin is not None:
        pin()  # the producer, the enqueue loops and the claims client are this process
    load_start = os.getloadavg()
    started = time.monotonic()
    results = Results()
    server = PrivateRedis(binary, cpu)
    server.start()
    try:
        version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        measure(server, args, cpu, results)
    except KeyboardInterrupt:
        print("live_bench: interrupted", file=sys.stderr)
        return 130
    finally:
        server.stop()
    load_end = os.getloadavg()
    lines = [
        f"## The event stream: await lag, cost, memory (`bench/live_bench.py`, tree "
        f"{tree_commit(ROOT)})",
        "",
        *machine_lines(
            binary,
            version,
            cpu,
            load_start,
            load_end,
            f"; {time.monotonic() - started:.0f} s in all",
        ),
        f"- enqueue and drain: {args.runs} runs (medians), the two stream variants' order "
        "rotated from run to run, a FLUSHALL and a fresh prefix before each",
        "",
    ]
    verdicts: list[bool] = []
    if results.lag is not None:
        lines += render_lag(results.lag, args)
        for (_, wait), lags in results.lag.lags.items():
            if wait == WAIT_EVENTS:
                verdicts.append(med(lags) <= LAG_MEDIAN_TARGET_MS)
                verdicts.append(percentile(lags, 99) <= LAG_P99_TARGET_MS)
    if results.cost:
        cost_lines, ok = render_cost(results, args)
        lines += cost_lines
        verdicts += ok
    if results.memory is not None:
        mem_lines, ok_mem = render_memory(results.memory)
        lines += mem_lines
        verdicts.append(ok_mem)
    if results.profile is not None:
        lines += render_profile(results.profile, args)
    print("\n".join(lines))
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    if sys.argv[1:2] == [LAG_WORKER_FLAG]:
        lag_worker(sys.argv[2:])
    else:
        sys.exit(main())
