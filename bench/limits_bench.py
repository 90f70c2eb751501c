"""Queue limits (flow control): what the bookkeeping costs a claim, and a drain under limits.

    .venv/bin/python -m bench.limits_bench                       # N = 20,000, 3 runs (~5 min)
    .venv/bin/python -m bench.limits_bench --n 5000 --runs 1     # a quick look (~40 s)
    .venv/bin/python -m bench.limits_bench --only drain --prefetch 32

Everything runs on a private redis-server (a free loopback port, no persistence, FLUSHALLed
before every run, shut down at exit); every run also has a fresh key prefix.  By default the
server and every client are pinned to one CPU (``--cpu-pin same``, as in throughput.py).

**claims**: one client claims and acks N jobs, one call per job each, on a queue with no
limits, with ``concurrency=1000``, with ``rate=Rate(10**9, per_ms=1000)`` and with both.  The
Redis time is the store scripts' (``FCALL``, or ``EVALSHA`` on a server without Functions) in
``INFO commandstats``, per job.  Three runs per variant:

- *steady* (the target's figure): claim, ack, claim, ack, ...; the store's clock steps 1 ms at
  every read, so no two claims share a millisecond and a rate never holds a claim back: the
  limited runs measure just the bookkeeping;
- *split*: the same clock, 100 claims then their 100 acks, the time of each group read after it
  (a read between every two calls would cool the server's caches and inflate every call);
- *wall*: claim, ack, ... on the wall clock.  A claim a limit holds back answers ``throttled``
  and the client sleeps until ``throttled_until``, as a worker does; its Redis time counts.

Target: steady claim + ack time with limits <= 1.3x without.

**drain**: N jobs (one name, a no-op handler) are enqueued, then ``--procs`` worker processes
(``store.Worker``, burst mode, ``--worker-concurrency`` each, ``--prefetch``, otherwise the
defaults) drain them, timed from a common start signal to the last worker's return, on a queue
with no limits and with ``set_queue_limits(queue, concurrency=<all the workers' slots>)``.
Target: the limited drain's jobs/s >= 0.90x the unlimited one's.

Medians of ``--runs``; each run measures every variant, in an order rotated from run to run.
The Markdown report goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make `bench.*` and `store` importable
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from bench.common import (  # noqa: E402
    chunks,
    fmt_per_s,
    fmt_us,
    interrupt_on_sigterm,
    med,
    payload,
    quiet_logging,
    rotated,
    server_cpu_s,
    spread,
    tree_commit,
)
from bench.throughput import (  # noqa: E402
    CPU_PIN_MODES,
    CpuPlan,
    PrivateRedis,
    _cpu_model,
    find_redis_server,
    make_cpu_plan,
)
from store import (  # noqa: E402
    Claimed,
    Complete,
    EnqueueRequest,
    Job,
    JobRecord,
    Rate,
    RedisJobStore,
    StoreRegistry,
    Worker,
    connect,
    system_clock,
)

QUEUE = "bench"
NAME = "noop"
LOCK_MS = 30_000
#: The store scripts' commands in INFO commandstats (FCALL on Redis 7, EVALSHA before).
SCRIPT_COMMANDS = ("fcall", "fcall_ro", "evalsha", "eval")
#: Claims, then their acks, in a "split" claims run.
CLAIM_WINDOW = 100
CLAIM_TARGET = 1.3
DRAIN_TARGET = 0.90
WORKER_FLAG = "--worker-child"

UNLIMITED = "no limits"
_RATE = Rate(10**9, per_ms=1000)
#: The claims variants: limits far above what one client reaches.
CLAIM_VARIANTS: dict[str, dict[str, Any]] = {
    UNLIMITED: {},
    "concurrency=1000": {"concurrency": 1000},
    "rate=10⁹/s": {"rate": _RATE},
    "concurrency=1000 + rate=10⁹/s": {"concurrency": 1000, "rate": _RATE},
    # Job groups (``groups``: the jobs are spread over that many groups, round robin).
    "1,000 groups, no limits": {"groups": 1000},
    "1,000 groups + group_concurrency=1000 + group_rate=10⁹/s": {
        "groups": 1000,
        "group_concurrency": 1000,
        "group_rate": _RATE,
    },
}
#: The claims runs: name -> (the store's clock steps 1 ms a read, claims per window).
CLAIM_PASSES: dict[str, tuple[bool, int]] = {
    "steady": (True, 1),
    "split": (True, CLAIM_WINDOW),
    "wall": (False, 1),
}


def enqueue_noops(jobs: RedisJobStore, n: int, groups: int = 0) -> None:
    for part in chunks(n):
        jobs.enqueue_many(
            [
                EnqueueRequest(
                    name=NAME,
                    queue=QUEUE,
                    payload=payload(i),
                    group=f"g{i % groups}" if groups else None,
                )
                for i in part
            ]
        )


def script_usec(stats: dict[str, Any]) -> int:
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("usec", 0)) for c in SCRIPT_COMMANDS)


class ScriptClock:
    """Redis time spent in script calls (µs) since the previous lap (INFO commandstats)."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.last = script_usec(self.client.info("commandstats"))

    def lap(self) -> int:
        now = script_usec(self.client.info("commandstats"))
        spent, self.last = now - self.last, now
        return spent

    def close(self) -> None:
        self.client.close()


# --------------------------------------------------------------------------------------------
# Part 1: Redis time per claim


class StepClock:
    """A store clock that moves on by 1 ms at every read, from the wall clock's time.

    The store reads its clock once per operation, so consecutive claims are at least 1 ms
    apart and a rate limit, however high, never holds one back, while the client runs at full
    speed.  Every time the scripts see comes from this clock (they never read Redis' TIME)."""

    def __init__(self) -> None:
        self._next = itertools.count(system_clock())

    def __call__(self) -> int:
        return next(self._next)


@dataclass
class ClaimRun:
    """One claims run: Redis µs of the claim calls (those a limit held back included) and of
    the acks (``ack_us`` None: only the total was read, into ``claim_us``)."""

    n: int
    claim_us: int = 0
    ack_us: int | None = None
    throttled: int = 0
    seconds: float = 0.0

    @property
    def per_job(self) -> float:
        return (self.claim_us + (self.ack_us or 0)) / self.n

    @property
    def per_claim(self) -> float:
        return self.claim_us / self.n

    @property
    def per_ack(self) -> float:
        return (self.ack_us or 0) / self.n


def _claim(jobs: RedisJobStore, token: str, run: ClaimRun) -> JobRecord:
    """Claim one job; when a limit holds the claim back, sleep until its ``throttled_until``
    (as a worker does) and try again."""
    while True:
        got = jobs.claim(QUEUE, [NAME], token, LOCK_MS)
        if isinstance(got, Claimed):
            return got.job
        if got.throttled_until is None:
            raise RuntimeError(f"claim {token}: the queue ran dry ({got!r})")
        run.throttled += 1
        time.sleep(max(0.0, got.throttled_until / 1000 - time.time()))


def _claim_loop(
    jobs: RedisJobStore, n: int, first: int, window: int, clock: ScriptClock | None
) -> ClaimRun:
    """Claim and ack ``n`` jobs, one call per job each: ``window`` claims, then their acks
    (window 1: claim, ack, claim, ack, ...); with a clock, each group's time is read after it."""
    run = ClaimRun(n, ack_us=0 if clock else None)
    started = time.perf_counter()
    for start in range(first, first + n, window):
        tokens = [f"t{i}" for i in range(start, min(start + window, first + n))]
        held = [(_claim(jobs, token, run).id, token) for token in tokens]
        if clock:
            run.claim_us += clock.lap()
        for job_id, token in held:
            jobs.ack(job_id, token, Complete(None))
        if clock:
            run.ack_us = (run.ack_us or 0) + clock.lap()
    run.seconds = time.perf_counter() - started
    return run


def claim_run(
    url: str, prefix: str, limits: dict[str, Any], n: int, warmup: int, how: str
) -> ClaimRun:
    """One claims run (CLAIM_PASSES[how]) of ``n`` jobs after ``warmup`` unmeasured ones."""
    stepping, window = CLAIM_PASSES[how]
    jobs = RedisJobStore(connect(url), prefix=prefix, clock=StepClock() if stepping else None)
    limits = dict(limits)
    groups = limits.pop("groups", 0)
    try:
        enqueue_noops(jobs, warmup + n, groups)
        if limits:
            jobs.set_queue_limits(QUEUE, **limits)
        _claim_loop(jobs, warmup, 0, 1, None)
        clock = ScriptClock(url)
        try:
            if window > 1:
                return _claim_loop(jobs, n, warmup, window, clock)
            run = _claim_loop(jobs, n, warmup, 1, None)
            run.claim_us = clock.lap()
            return run
        finally:
            clock.close()
    finally:
        jobs.close()


# --------------------------------------------------------------------------------------------
# Part 2: a drain by worker processes


@dataclass
class DrainRun:
    n: int
    seconds: float
    calls: int  # the workers' ack_and_claim_many calls
    throttled: int  # of them, answers a limit held back ('concurrency' / 'rate')
    limited: int  # of them, batches cut to one job because the queue has limits
    script_us: int
    commands: int
    #: Every command's Redis µs (INFO commandstats) and the server's own CPU seconds
    #: (used_cpu_sys + used_cpu_user of INFO cpu) over the drain.
    redis_us: int = 0
    server_cpu_s: float = 0.0
    #: Prefetched jobs the workers handed back (prefetch auto's wait bound).
    released: int = 0

    @property
    def rate(self) -> float:
        return self.n / self.seconds


def worker_child(argv: Sequence[str]) -> None:
    """A worker process of the drain: "ready", wait for a line on stdin, drain, JSON line."""
    url, prefix, concurrency = argv[0], argv[1], int(argv[2])
    prefetch: int | str = argv[3] if argv[3] == "auto" else int(argv[3])
    quiet_logging()
    jobs = RedisJobStore(connect(url), prefix=prefix)
    registry = StoreRegistry()
    registry.register(jobs)
    noop = Job(NAME, queue=QUEUE, registry=registry, handler=lambda payload: None)
    worker = Worker(
        jobs, [noop], concurrency=concurrency, prefetch=prefetch, registry=registry, burst=True
    )
    seen = {"calls": 0, "throttled": 0, "limited": 0}
    batch_claim = jobs.ack_and_claim_many

    def counted(*args: Any, **kwargs: Any) -> Any:
        batch = batch_claim(*args, **kwargs)
        seen["calls"] += 1
        held_back = batch.empty.throttled if batch.empty is not None else None
        if held_back == "limited":
            seen["limited"] += 1
        elif held_back is not None:
            seen["throttled"] += 1
        return batch

    jobs.ack_and_claim_many = counted  # type: ignore[method-assign]
    print("ready", flush=True)
    sys.stdin.readline()
    worker.run(install_signal_handlers=False)
    ended = time.monotonic()
    jobs.close()
    released = worker.stats["released"]  # prefetched jobs handed back by the wait bound
    print(json.dumps({"ended": ended, "released": released, **seen}), flush=True)


def _read_line(stream: IO[str] | None, what: str) -> str:
    line = stream.readline() if stream is not None else ""
    if not line:
        raise RuntimeError(f"a worker process exited before it was {what}")
    return line


def drain_run(
    url: str,
    prefix: str,
    concurrency_limit: int | None,
    args: argparse.Namespace,
    cpu: CpuPlan,
) -> DrainRun:
    jobs = RedisJobStore(connect(url), prefix=prefix)
    raw = redis.Redis.from_url(url)
    children: list[subprocess.Popen[str]] = []
    command = [
        sys.executable, "-m", "bench.limits_bench", WORKER_FLAG,
        url, prefix, str(args.worker_concurrency), str(args.prefetch),
    ]  # fmt: skip
    try:
        enqueue_noops(jobs, args.n)
        if concurrency_limit is not None:
            jobs.set_queue_limits(QUEUE, concurrency=concurrency_limit)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for _ in range(args.procs):
            children.append(
                subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=ROOT,
                    env=env,
                    preexec_fn=cpu.client_preexec(),
                )
            )
        for child in children:
            _read_line(child.stdout, "ready")
        raw.config_resetstat()
        cpu_before = server_cpu_s(raw)
        started = time.monotonic()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        reports = [json.loads(_read_line(child.stdout, "done")) for child in children]
        for child in children:
            child.wait(timeout=60)
        cpu_after = server_cpu_s(raw)
        stats = raw.info("commandstats")
        completed = jobs.counts(QUEUE)["completed"]
        if completed != args.n:
            raise RuntimeError(f"the workers completed {completed} of {args.n} jobs")
        return DrainRun(
            n=args.n,
            seconds=max(r["ended"] for r in reports) - started,
            calls=sum(r["calls"] for r in reports),
            throttled=sum(r["throttled"] for r in reports),
            limited=sum(r["limited"] for r in reports),
            script_us=script_usec(stats),
            commands=sum(
                int(v.get("calls", 0))
                for k, v in stats.items()
                if isinstance(v, dict) and k not in ("cmdstat_config|resetstat", "cmdstat_info")
            ),
            redis_us=sum(
                int(v.get("usec", 0))
                for k, v in stats.items()
                if isinstance(v, dict) and k not in ("cmdstat_config|resetstat", "cmdstat_info")
            ),
            server_cpu_s=cpu_after - cpu_before,
            released=sum(r["released"] for r in reports),
        )
    finally:
        for child in children:  # only on failure are any still running
            if child.poll() is None:
                child.kill()
                child.wait()
        raw.close()
        jobs.close()


# --------------------------------------------------------------------------------------------
# Report


def _verdict(label: str, ok: bool) -> str:
    if label == UNLIMITED:
        return "—"
    return "**PASS**" if ok else "**FAIL**"


def render_claims(claims: dict[str, dict[str, list[ClaimRun]]], n: int) -> list[str]:
    steady, split, wall = claims["steady"], claims["split"], claims["wall"]
    base = med([r.per_job for r in steady[UNLIMITED]])
    base_claim = med([r.per_claim for r in split[UNLIMITED]])
    base_ack = med([r.per_ack for r in split[UNLIMITED]])
    out = [
        f"### Redis time per claim: {n:,} jobs claimed and acked one call at a time",
        "",
        "Store scripts' µs per job (`INFO commandstats`: FCALL, or EVALSHA), median "
        "[min–max] of the runs. The store's clock steps 1 ms at every read, so no two claims "
        "share a millisecond and a rate never holds one back (on the wall clock several do: "
        "next table). *claim + ack*: claim, ack, claim, ack, ... (the target's figure); "
        f"*claim* / *ack*: another run, {CLAIM_WINDOW} claims then their {CLAIM_WINDOW} acks, "
        "each group's time read after it.",
        "",
        "| limits | claim + ack µs | ÷ no limits | claim µs | ÷ | ack µs | ÷ "
        f"| target ≤ {CLAIM_TARGET}× |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, rs in steady.items():
        ratio = med([r.per_job for r in rs]) / base
        parts = split[label]
        out.append(
            f"| {label} | {spread([r.per_job for r in rs], fmt_us)} | {ratio:.2f}× "
            f"| {spread([r.per_claim for r in parts], fmt_us)} "
            f"| {med([r.per_claim for r in parts]) / base_claim:.2f}× "
            f"| {spread([r.per_ack for r in parts], fmt_us)} "
            f"| {med([r.per_ack for r in parts]) / base_ack:.2f}× "
            f"| {_verdict(label, ratio <= CLAIM_TARGET)} |"
        )
    base = med([r.per_job for r in wall[UNLIMITED]])
    out += [
        "",
        f"### The same on the wall clock: claim, ack, claim, ack, ... ({n:,} jobs)",
        "",
        "Several claims may share a millisecond here; a rate admits them as its spacing "
        "allows (exact below a millisecond). A claim a limit holds back answers `throttled`; "
        "the client then sleeps until "
        "`throttled_until`, as a worker does. The Redis µs per job count those claims too.",
        "",
        "| limits | claim + ack µs | ÷ no limits | held back per job | jobs/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, rs in wall.items():
        out.append(
            f"| {label} | {spread([r.per_job for r in rs], fmt_us)} "
            f"| {med([r.per_job for r in rs]) / base:.2f}× "
            f"| {med([r.throttled / r.n for r in rs]):.2f} "
            f"| {spread([r.n / r.seconds for r in rs], fmt_per_s)} |"
        )
    return [*out, ""]


def render_drain(runs: dict[str, list[DrainRun]], args: argparse.Namespace) -> list[str]:
    base = med([r.rate for r in runs[UNLIMITED]])
    slots = args.procs * args.worker_concurrency
    out = [
        f"### Drain of {args.n:,} jobs: {args.procs} worker processes × concurrency "
        f"{args.worker_concurrency} ({slots} slots), prefetch {args.prefetch}, no-op handler",
        "",
        "jobs/s from the start signal to the last worker's return, median [min–max]. "
        "`INFO commandstats` over the drain, medians: the scripts' Redis µs and the commands "
        "(those inside scripts included) per job. *claim calls*: the workers' "
        "`ack_and_claim_many` calls per job; *held back*: calls a limit answered `throttled`; "
        "*cut to one*: batches stopped after one job because the queue has limits (medians).",
        "",
        "| queue | jobs/s | ÷ no limits | Redis µs/job | commands/job | claim calls/job "
        f"| held back | cut to one | target ≥ {DRAIN_TARGET:.2f}× |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, rs in runs.items():
        ratio = med([r.rate for r in rs]) / base
        out.append(
            f"| {label} | {spread([r.rate for r in rs], fmt_per_s)} | {ratio:.2f}× "
            f"| {med([r.script_us / r.n for r in rs]):.1f} "
            f"| {med([r.commands / r.n for r in rs]):.1f} "
            f"| {med([r.calls / r.n for r in rs]):.2f} "
            f"| {med([float(r.throttled) for r in rs]):,.0f} "
            f"| {med([float(r.limited) for r in rs]):,.0f} "
            f"| {_verdict(label, ratio >= DRAIN_TARGET)} |"
        )
    return [*out, ""]


# --------------------------------------------------------------------------------------------
# Main


@dataclass
class Results:
    claims: dict[str, dict[str, list[ClaimRun]]] = field(
        default_factory=lambda: {how: {} for how in CLAIM_PASSES}
    )
    drain: dict[str, list[DrainRun]] = field(default_factory=dict)


def parse_cli(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--n", type=int, default=20_000, help="jobs per run, both parts")
    parser.add_argument("--runs", type=int, default=3, help="repetitions, medians shown")
    parser.add_argument("--only", default="claims,drain", help="claims, drain or claims,drain")
    parser.add_argument("--warmup", type=int, default=1_000, help="unmeasured claims first")
    parser.add_argument("--procs", type=int, default=2, help="worker processes of the drain")
    parser.add_argument(
        "--worker-concurrency", type=int, default=4, help="concurrency of each worker process"
    )
    parser.add_argument(
        "--prefetch",
        type=lambda v: v if v == "auto" else int(v),
        default=1,
        help="the workers' prefetch: N or auto (Worker's default: auto; this bench's: 1)",
    )
    parser.add_argument(
        "--cpu-pin",
        choices=CPU_PIN_MODES,
        default="same",
        help="CPU placement of the server and the clients, as in throughput.py (default same)",
    )
    parser.add_argument("--redis-server", default=None, help="redis-server binary")
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    if not args.parts or set(args.parts) - {"claims", "drain"}:
        parser.error("--only takes claims, drain or claims,drain")
    prefetch = 1 if args.prefetch == "auto" else args.prefetch
    if min(args.n, args.runs, args.procs, args.worker_concurrency, prefetch) < 1:
        parser.error("--n, --runs, --procs, --worker-concurrency and --prefetch must be >= 1")
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_cli(argv)
    quiet_logging()
    binary = args.redis_server or find_redis_server()
    if binary is None:
        sys.exit("limits_bench: no redis-server binary found (--redis-server BIN)")
    interrupt_on_sigterm()  # unwind: the drain's workers and the server are stopped
    cpu = make_cpu_plan(args.cpu_pin)
    pin = cpu.client_preexec()
    if pin is not None:
        pin()  # the claims client is this process
    load = os.getloadavg()[0]
    slots = args.procs * args.worker_concurrency
    drain_variants: dict[str, int | None] = {UNLIMITED: None, f"concurrency={slots}": slots}
    results = Results()
    token = uuid.uuid4().hex[:8]
    server = PrivateRedis(binary, cpu)
    server.start()
    try:
        control = redis.Redis.from_url(server.url)
        version = control.info("server")["redis_version"]
        for r in range(args.runs):
            if "claims" in args.parts:
                for label in rotated(list(CLAIM_VARIANTS), r):
                    for how in CLAIM_PASSES:
                        control.flushall()
                        got = claim_run(
                            server.url,
                            f"lc{token}{r}",
                            CLAIM_VARIANTS[label],
                            args.n,
                            args.warmup,
                            how,
                        )
                        results.claims[how].setdefault(label, []).append(got)
                        split = (
                            f" (claim {got.per_claim:.1f}, ack {got.per_ack:.1f})"
                            if got.ack_us is not None
                            else ""
                        )
                        print(
                            f"run {r + 1} claims {how}, {label}: {got.per_job:.1f} µs/job{split}, "
                            f"{got.throttled} held back, {got.n / got.seconds:,.0f} jobs/s",
                            file=sys.stderr,
                        )
            if "drain" in args.parts:
                for label in rotated(list(drain_variants), r):
                    control.flushall()
                    drained = drain_run(
                        server.url, f"ld{token}{r}", drain_variants[label], args, cpu
                    )
                    results.drain.setdefault(label, []).append(drained)
                    print(
                        f"run {r + 1} drain, {label}: {drained.rate:,.0f} jobs/s "
                        f"({drained.calls / drained.n:.2f} claim calls/job, "
                        f"{drained.throttled} held back, {drained.limited} cut to one)",
                        file=sys.stderr,
                    )
        control.close()
    except KeyboardInterrupt:
        print("limits_bench: interrupted", file=sys.stderr)
        return 130
    finally:
        server.stop()
    # The tables list the variants in a fixed order, whatever order the runs took.
    for how, runs in results.claims.items():
        results.claims[how] = {k: runs[k] for k in CLAIM_VARIANTS if k in runs}
    lines = [
        f"## Queue limits: cost per claim and drain (`bench/limits_bench.py`, tree {tree_commit(ROOT)})",
        "",
        f"- redis-server {version} (`{binary}`), private, no persistence; {cpu.describe()}",
        f"- {os.cpu_count()} CPUs ({_cpu_model()}), load average {load:.2f} at the start; "
        f"Python {platform.python_version()}",
        f"- N = {args.n:,} per run, {args.runs} runs (medians), the variants' order rotated "
        f"from run to run; {args.warmup:,} unmeasured claims before each claims run",
        "",
    ]
    if "claims" in args.parts:
        lines += render_claims(results.claims, args.n)
    if "drain" in args.parts:
        lines += render_drain(results.drain, args)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [WORKER_FLAG]:
        worker_child(sys.argv[2:])
    else:
        sys.exit(main())
