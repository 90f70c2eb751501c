"""Enqueue with the ids users really pass: throughput and Redis time per job by id shape.

    .venv/bin/python -m bench.ids_bench                  # defaults: 20,000 jobs, 3 runs (~2 min)
    .venv/bin/python -m bench.ids_bench --n 50000 --runs 5 --only uuid4,ulid

The store keeps every job in chunked sorted sets ordered by (enqueue time, id as bytes)
(docs/data-layout.md "Chunked sets").  Ids that arrive in that order (fixed-width ids that
count up, the store's own ``j-<n>`` of one width) fill the last chunk; ids that do not (random
uuid4s, business ids whose width changes, batches that share an enqueue time with earlier
ones) must be sorted in.  Each case enqueues ``--n`` jobs (~72-byte payload, one name, one
queue) into a fresh prefix of a private redis-server (no persistence, FLUSHALLed before every
case) and reports jobs/s, the Redis time per job (``INFO commandstats``: the scripts, the
commands inside them included) and the server's own CPU per job (``used_cpu_*``), each the
median of ``--runs`` runs with the cases' order rotated from run to run; *÷ fixed* compares a
case with the fixed-width ids of the same call shape.  Targets (issue 28): every case >= 0.8x
the fixed-width throughput and <= 1.3x its Redis time per job.

Cases (``--only`` takes their names):

- ``fixed``: ``job-100000``, ``job-100001``... in ``enqueue_many`` calls of 500
- ``uuid4``: ``str(uuid.uuid4())`` ids, calls of 500
- ``ulid``: 26-character ULIDs (time prefix, then random: ascending across calls, random
  within a millisecond), calls of 500
- ``mixed``: ``order-1`` ... ``order-<n>`` (the width grows from 1 to 5 digits), calls of 500
- ``assigned``: no ids (the store's ``j-<n>``, across powers of ten on a fresh store), calls
  of 500
- ``one-call``: no ids, all ``--n`` in ONE ``enqueue_many`` call (split into scripts of 500
  by the store)
- ``same-time``: uuid4 ids, calls of 500, every call at one fixed enqueue time (a clock that
  does not move: batches interleave with every earlier one)
- ``single-fixed`` / ``single-uuid4``: ``--single-n`` single ``enqueue`` calls with those ids

The Markdown report goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))


from bench.common import (  # noqa: E402
    CommandStats,
    med,
    payload,
    quiet_logging,
    rotated,
    server_cpu_s,  # noqa: E402
    spread,
    tree_commit,
)
from bench.throughput import (  # noqa: E402
    CPU_PIN_MODES,
    private_bench,
)
from store import EnqueueRequest, FakeClock, RedisJobStore, connect  # noqa: E402

BATCH = 500
RATIO_TARGET = 0.8
REDIS_TIME_TARGET = 1.3
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid() -> str:
    """A ULID: 48 bits of ms time, then 80 random bits, in Crockford base32 (26 chars)."""
    value = (time.time_ns() // 1_000_000) << 80 | secrets.randbits(80)
    out = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        out.append(CROCKFORD[digit])
    return "".join(reversed(out))


def _ids(kind: str, n: int) -> Callable[[int], str | None]:
    if kind == "fixed":
        return lambda i: f"job-{100_000 + i}"
    if kind in ("uuid4", "same-time"):
        return lambda i: str(uuid.uuid4())
    if kind == "ulid":
        return lambda i: ulid()
    if kind == "mixed":
        return lambda i: f"order-{i + 1}"
    return lambda i: None  # assigned, one-call: the store's ids


@dataclass
class Case:
    name: str
    what: str
    ids: str  # the id shape (see _ids)
    calls: str  # "batches", "one-call" or "single"
    compare: str  # the fixed-width case of the same call shape


CASES = [
    Case("fixed", "`job-100000`… (fixed width)", "fixed", "batches", "fixed"),
    Case("uuid4", "uuid4", "uuid4", "batches", "fixed"),
    Case("ulid", "ULID", "ulid", "batches", "fixed"),
    Case("mixed", "`order-1`…`order-N` (width 1 → 5 digits)", "mixed", "batches", "fixed"),
    Case("assigned", "store-assigned `j-1`… (fresh store)", "assigned", "batches", "fixed"),
    Case("one-call", "store-assigned, all in one call", "assigned", "one-call", "fixed"),
    Case("same-time", "uuid4, every batch at one enqueue time", "same-time", "batches", "fixed"),
    Case("single-fixed", "`job-100000`…, single `enqueue`", "fixed", "single", "single-fixed"),
    Case("single-uuid4", "uuid4, single `enqueue`", "uuid4", "single", "single-fixed"),
]
BY_NAME = {c.name: c for c in CASES}


@dataclass
class Run:
    rate: float
    redis_us: float  # per job
    cpu_us: float  # per job
    memory_b: float  # used_memory per job after the case


def _requests(case: Case, n: int) -> Iterator[EnqueueRequest]:
    make_id = _ids(case.ids, n)
    for i in range(n):
        job_id = make_id(i)
        extra: dict[str, Any] = {"id": job_id} if job_id is not None else {}
        yield EnqueueRequest(name="SendEmail", queue="mail", payload=payload(i), **extra)


def run_case(url: str, prefix: str, case: Case, n: int) -> Run:
    client = connect(url)
    clock: Any = FakeClock(int(time.time() * 1000)) if case.ids == "same-time" else None
    job_store = RedisJobStore(client, prefix=prefix, clock=clock)
    # Generated up front: the ids' own cost is not the store's.
    requests = list(_requests(case, n))
    stats = CommandStats(url, "diff")
    memory_before = int(client.info("memory")["used_memory"])
    cpu_before = server_cpu_s(client)
    stats.start()
    started = time.perf_counter()
    if case.calls == "single":
        for request in requests:
            job_store.enqueue(request)
    elif case.calls == "one-call":
        job_store.enqueue_many(requests)
    else:
        for at in range(0, n, BATCH):
            job_store.enqueue_many(requests[at : at + BATCH])
    seconds = time.perf_counter() - started
    stats.stop()
    cpu = server_cpu_s(client) - cpu_before
    memory = int(client.info("memory")["used_memory"]) - memory_before
    summary = stats.summary(n)
    assert job_store.counts().get("waiting", 0) == n, "not every job landed"
    job_store.close()
    client.close()
    return Run(n / seconds, summary["redis_us_per_job"] or 0.0, cpu * 1e6 / n, memory / n)


def render(runs: dict[str, list[Run]], args: argparse.Namespace) -> list[str]:
    def median(name: str, attr: str) -> float:
        return med([getattr(r, attr) for r in runs[name]])

    lines = [
        "| case | jobs | jobs/s | ÷ fixed | Redis µs/job | ÷ fixed | server CPU µs/job | "
        "memory B/job | target |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, got in runs.items():
        case = BY_NAME[name]
        n = args.single_n if case.calls == "single" else args.n
        base = case.compare if case.compare in runs else None
        ratio = median(name, "rate") / median(base, "rate") if base else None
        time_ratio = median(name, "redis_us") / median(base, "redis_us") if base else None
        verdict = ""
        if base and name != base and ratio is not None and time_ratio is not None:
            ok = ratio >= RATIO_TARGET and time_ratio <= REDIS_TIME_TARGET
            verdict = "**PASS**" if ok else "**FAIL**"
        lines.append(
            f"| {case.what} | {n:,} | "
            f"{spread([r.rate for r in got], lambda v: f'{v:,.0f}')} | "
            f"{f'{ratio:.2f}×' if ratio is not None else '—'} | "
            f"{median(name, 'redis_us'):.1f} | "
            f"{f'{time_ratio:.2f}×' if time_ratio is not None else '—'} | "
            f"{median(name, 'cpu_us'):.1f} | {median(name, 'memory_b'):,.0f} | {verdict} |"
        )
    return lines


def parse_cli(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="jobs per bulk case")
    parser.add_argument("--single-n", type=int, default=10_000, help="jobs per single case")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default=",".join(BY_NAME), help="cases, comma-separated")
    parser.add_argument("--cpu-pin", choices=CPU_PIN_MODES, default="same")
    parser.add_argument("--redis-server", default=None, help="redis-server binary")
    args = parser.parse_args(argv)
    args.cases = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = set(args.cases) - set(BY_NAME)
    if unknown or not args.cases:
        parser.error(f"--only takes {', '.join(BY_NAME)}")
    if min(args.n, args.single_n, args.runs) < 1:
        parser.error("--n, --single-n and --runs must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_cli(argv)
    quiet_logging()
    runs: dict[str, list[Run]] = {name: [] for name in args.cases}
    token = uuid.uuid4().hex[:8]
    # This process is the client: pinned with the clients.
    with private_bench("ids_bench", args.redis_server, args.cpu_pin, pin_self=True) as bench:
        try:
            for r in range(args.runs):
                for name in rotated(args.cases, r):
                    case = BY_NAME[name]
                    bench.control.flushall()
                    n = args.single_n if case.calls == "single" else args.n
                    got = run_case(bench.server.url, f"ids{token}{r}", case, n)
                    runs[name].append(got)
                    print(
                        f"run {r + 1} {name}: {got.rate:,.0f} jobs/s, "
                        f"{got.redis_us:.1f} Redis µs/job, {got.cpu_us:.1f} server CPU µs/job",
                        file=sys.stderr,
                    )
        except KeyboardInterrupt:
            print("ids_bench: interrupted", file=sys.stderr)
            return 130
        machine = bench.lines()
    lines = [
        f"## Enqueue by id shape (`bench/ids_bench.py`, tree {tree_commit(ROOT)})",
        "",
        *machine,
        f"- {args.runs} runs (medians; jobs/s as median [min–max]), the cases' order rotated "
        "from run to run; a FLUSHALL and a fresh prefix before each case",
        "",
        *render(runs, args),
    ]
    print("\n".join(lines))
    failed = any("**FAIL**" in line for line in lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
